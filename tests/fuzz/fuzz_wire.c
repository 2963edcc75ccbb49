/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for every wire decoder (src/wire/wire.c).
 *
 * Design notes
 * - The first input byte picks the decoder (modulo MODE_COUNT); the rest is
 *   its input, so one corpus covers all of them:
 *     0 header   rm_hdr_decode
 *     1 hello    rm_hello_decode
 *     2 desc     rm_region_desc_decode on an rm_rbuf_t
 *     3 list     rm_list_decode
 *     4 name     rm_name_decode (and rm_name_valid)
 *     5 reader   a sequence of rm_rbuf_* reads, checked against a model
 *     6 boot     rm_boot_parse, rm_boot_reply_split (bootstrap frames)
 *     7 ring     rm_ring_hdr_parse and rm_ring_hdr_parse_live (a ring header
 *                or whole image, src/ring/ring.c), rm_ring_from_image and the
 *                local readers on what parses
 *     8 lanes    rm_lanes_decode
 *     9 stats    rm_stats_decode (STATS_REPLY bodies), re-encoded
 * - The input handed to a decoder is a heap copy of exactly its bytes, so
 *   ASan reports any read past the end.
 * - Every successful decode is re-encoded, and the encoding must reproduce the
 *   input bytes (for the header, all but reserved bytes, which encode as 0);
 *   header, hello and name decodes are also compared against an independent
 *   statement of when they must succeed, and the list decoder against
 *   decoding its entries one by one, so wrong acceptance or rejection is
 *   caught as well as crashes. Any mismatch aborts.
 * - Ring mode: this target's CMakeLists.txt compiles only wire.c, so ring.c is
 *   #included below (it gets the fuzzer's instrumentation and sanitizers that
 *   way too), with stand-ins for the few library calls it makes: memory comes
 *   from aligned_alloc instead of UCX, logging is off, and no server or
 *   engine signal is ever reached.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

/* The ring format and local ring code, and its stand-ins (see above). */
#include "ring/ring.c"

int rm_log_level_current = -1; /* below RM_LOG_ERROR: nothing is logged */

void rm_log_emit(rm_log_level_t level, const char *file, int line, const char *fmt, ...) {}

remora_status_t remora_mem_create(remora_context_h ctx, const remora_mem_params_t *p,
                                  remora_mem_h *mem_p)
{
    struct remora_mem *m;

    if (!(p->field_mask & REMORA_MEM_FIELD_LENGTH) || p->length == 0 ||
        (m = calloc(1, sizeof(*m))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    /* Content undefined, as from UCX: fill it with garbage, not zeros. */
    if ((m->addr = aligned_alloc(64, (p->length + 63) & ~(size_t)63)) == NULL) {
        free(m);
        return REMORA_ERR_NO_MEMORY;
    }
    memset(m->addr, 0xa5, p->length);
    m->length = p->length;
    *mem_p    = m;
    return REMORA_OK;
}

void remora_mem_destroy(remora_mem_h m)
{
    if (m) {
        free(m->addr);
        free(m);
    }
}

void *remora_mem_address(remora_mem_h m) { return m->addr; }

/* Rings made here are host rings and no CUDA driver is loaded. */
int rm_cuda_in_process(void) { return 0; }
remora_status_t remora_copy(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
    return REMORA_OK;
}

/* Nobody waits on a ring made here: no engine call is ever reached. */
void rm_engine_signal(remora_context_h ctx, rm_signal_t *sig) { abort(); }
void rm_engine_signal_now(remora_context_h ctx, rm_signal_t *sig) { abort(); }
void rm_engine_lock(remora_context_h ctx) { abort(); }
void rm_engine_unlock(remora_context_h ctx) { abort(); }
void rm_engine_kick(remora_context_h ctx) { abort(); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MODE_HDR, MODE_HELLO, MODE_DESC, MODE_LIST, MODE_NAME, MODE_READER, MODE_BOOT,
       MODE_RING, MODE_LANES, MODE_STATS, MODE_COUNT };

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz_wire: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                            \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p) { return le16(p) | ((uint32_t)le16(p + 2) << 16); }
static uint64_t le64(const uint8_t *p) { return le32(p) | ((uint64_t)le32(p + 4) << 32); }

/* ------------------------------------------------------------- header */

/* The header lengths and reserved bytes, restated from the protocol. */
static size_t spec_hdr_len(unsigned type)
{
    switch (type) {
    case RM_MSG_READ:
    case RM_MSG_WRITE:
    case RM_MSG_SIGNAL:
    case RM_MSG_WRITE_SIGNAL:
    case RM_MSG_RING_WAIT:   return 40;
    case RM_MSG_RING_NOTIFY:
    case RM_MSG_EVENT:       return 48;
    case RM_MSG_EVENT_ACK: return 24;
    default:               return RM_MSG_IS_SOCK(type) ? 40 : 16;
    }
}

/* Byte 2 is the flags byte (only RM_HDR_FLAG_SEALED means anything; its other
 * bits are ignored and encode as 0), byte 3 is reserved. */
static int spec_hdr_reserved(unsigned type, size_t i)
{
    if (i == 3)
        return 1;
    if (type == RM_MSG_RING_NOTIFY)
        return i >= 20 && i < 24;
    /* byte 20 is the kind: READ/WRITE's RM_RW_STAGED, an event's, a mode... */
    if (type == RM_MSG_READ || type == RM_MSG_WRITE || type == RM_MSG_WRITE_SIGNAL ||
        type == RM_MSG_EVENT || type == RM_MSG_RING_WAIT || type == RM_MSG_SIGNAL ||
        RM_MSG_IS_SOCK(type))
        return i >= 21 && i < 24;
    return 0;
}

static int spec_hdr_valid(const uint8_t *in, size_t n)
{
    if (n < 16 || in[0] == 0 || (in[0] > RM_MSG_TYPE_MAX && !RM_MSG_IS_SOCK(in[0]) && !RM_MSG_IS_STATS(in[0])) ||
        in[1] != 1 || n != spec_hdr_len(in[0]) + ((in[2] & 0x01) ? 8 + 16 : 0))
        return 0;
    if (in[0] == RM_MSG_EVENT && in[20] != RM_EVENT_CHANGED && in[20] != RM_EVENT_REMOVED)
        return 0;
    /* a ring wait's mode byte: the mode in the low 7 bits, bit 7 asks for pushes */
    if (in[0] == RM_MSG_RING_WAIT && (in[20] & 0x7f) != RM_RING_EVERY &&
        (in[20] & 0x7f) != RM_RING_LATEST)
        return 0;
    if (in[0] == RM_MSG_SIGNAL && in[20] != RM_SIG_SET && in[20] != RM_SIG_ADD)
        return 0;
    return 1;
}

static void fuzz_hdr(const uint8_t *in, size_t n)
{
    rm_hdr_t h, h2;
    uint8_t enc[RM_HDR_MAX];
    int ok = rm_hdr_decode(in, n, &h) == 0;

    CHECK(ok == spec_hdr_valid(in, n));
    if (!ok)
        return;
    CHECK(h.type == in[0]);
    CHECK((uint32_t)h.status == le32(in + 4) && h.req_id == le64(in + 8));
    size_t len = rm_hdr_encode(&h, enc);
    CHECK(len == n && len <= RM_HDR_MAX);
    CHECK(h.sealed == (in[2] & 0x01));
    CHECK(enc[2] == (in[2] & 0x01));
    for (size_t i = 0; i < len; i++)
        CHECK(i == 2 || enc[i] == (spec_hdr_reserved(h.type, i) ? 0 : in[i]));
    CHECK(rm_hdr_decode(enc, len, &h2) == 0);
    CHECK(h2.type == h.type && h2.status == h.status && h2.req_id == h.req_id &&
          h2.region_id == h.region_id && h2.kind == h.kind && h2.offset == h.offset &&
          h2.length == h.length && h2.generation == h.generation && h2.size == h.size &&
          h2.epoch == h.epoch && h2.sealed == h.sealed &&
          h2.seal_counter == h.seal_counter &&
          memcmp(h2.seal_tag, h.seal_tag, sizeof(h.seal_tag)) == 0);
    if (h.sealed)
        CHECK(h.seal_counter == le64(in + n - 24) &&
              memcmp(h.seal_tag, in + n - 16, sizeof(h.seal_tag)) == 0);
    CHECK(strcmp(rm_msg_type_name(h.type), "?") != 0);
}

/* ------------------------------------------------------------- hello */

#define HELLO_LEN (4 + 2 + 2 + 2 + RM_HOST_ID_LEN + RM_NONCE_LEN + 8 + 4) /* 70: an older peer's */
#define HELLO_SEGS_LEN (HELLO_LEN + 4 + 4) /* 78: with the TCP segment sizes */

static void fuzz_hello(const uint8_t *in, size_t n)
{
    rm_hello_t h;
    rm_wbuf_t w;
    int ok = rm_hello_decode(in, n, &h) == 0;
    int spec =
        n >= HELLO_LEN && le32(in) == RM_HELLO_MAGIC && le16(in + 4) <= le16(in + 6);

    CHECK(ok == spec);
    if (!ok)
        return;
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &h);
    CHECK(h.tcp_segs_sent == (n >= HELLO_SEGS_LEN));
    if (!h.tcp_segs_sent)
        CHECK(h.tcp_tx_seg == 0 && h.tcp_rx_seg == 0);
    if (!w.failed) {
        CHECK(w.len == HELLO_SEGS_LEN);
        /* trailing input bytes are ignored; absent sizes are sent as 0 */
        CHECK(memcmp(w.data, in, h.tcp_segs_sent ? HELLO_SEGS_LEN : HELLO_LEN) == 0);
    }
    rm_wbuf_free(&w);
}

/* ------------------------------------------------------------- descriptors */

/* A successfully decoded descriptor obeys the decoder's promises. */
static void check_desc(const rm_region_desc_t *d, const uint8_t *in, size_t n)
{
    CHECK(rm_name_valid(d->name));
    CHECK(d->mem_type <= REMORA_MEM_CUDA);
    CHECK((d->access & ~(unsigned)(REMORA_ACCESS_READ | REMORA_ACCESS_WRITE)) == 0);
    CHECK(d->rkey_len <= RM_RKEY_MAX);
    if (d->rkey_len == 0)
        CHECK(d->rkey == NULL);
    else
        CHECK(d->rkey != NULL && d->rkey >= in && d->rkey + d->rkey_len <= in + n);
}

static void fuzz_desc(const uint8_t *in, size_t n)
{
    rm_rbuf_t r;
    rm_region_desc_t d;
    rm_wbuf_t w;

    rm_rbuf_init(&r, in, n);
    rm_region_desc_decode(&r, &d);
    CHECK(r.left <= n);
    if (r.failed)
        return;
    check_desc(&d, in, n);
    size_t used = n - r.left;
    size_t gpu = d.mem_type == REMORA_MEM_CUDA
                     ? 4 + ((d.flags & RM_REGION_WIRE_IPC) ? RM_IPC_HANDLE_LEN + 8 : 0) : 0;
    size_t map = (d.flags & RM_REGION_WIRE_MAPPABLE) ? 16 : 0;
    CHECK(used == 38 + strlen(d.name) + d.rkey_len + map + gpu);
    if (map)
        CHECK(d.mem_type == REMORA_MEM_HOST && d.map_pid >= 1 && d.map_pid <= INT32_MAX &&
              d.map_fd <= INT32_MAX);
    else
        CHECK(d.map_pid == 0 && d.map_fd == 0 && d.map_offset == 0);
    if (d.mem_type != REMORA_MEM_CUDA)
        CHECK(!(d.flags & RM_REGION_WIRE_IPC));
    else
        CHECK(d.device >= 0 && d.device <= 4096);
    CHECK(r.p == in + used);
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &d);
    if (!w.failed)
        CHECK(w.len == used && memcmp(w.data, in, used) == 0);
    rm_wbuf_free(&w);
}

/* ------------------------------------------------------------- list */

/* The list decoder must agree with decoding count descriptors one by one
 * (its size pre-check may reject early, but never a list that would decode). */
static int list_decodes_by_hand(const uint8_t *in, size_t n)
{
    rm_rbuf_t r;
    rm_region_desc_t d;

    rm_rbuf_init(&r, in, n);
    uint32_t count = rm_rbuf_u32(&r);
    if (r.failed || count > RM_LIST_MAX)
        return 0;
    for (uint32_t i = 0; i < count && !r.failed; i++)
        rm_region_desc_decode(&r, &d);
    return !r.failed && r.left == 0;
}

static void fuzz_list(const uint8_t *in, size_t n)
{
    rm_region_desc_t *descs = NULL;
    size_t count            = 0;
    rm_wbuf_t w;
    int ok = rm_list_decode(in, n, &descs, &count) == 0;

    CHECK(ok == list_decodes_by_hand(in, n));
    if (!ok)
        return;
    CHECK(descs != NULL && count <= RM_LIST_MAX && n >= 4 + 39 * count);
    CHECK(le32(in) == count);
    rm_wbuf_init(&w);
    rm_wbuf_u32(&w, (uint32_t)count);
    for (size_t i = 0; i < count; i++) {
        check_desc(&descs[i], in, n);
        rm_region_desc_encode(&w, &descs[i]);
    }
    if (!w.failed)
        CHECK(w.len == n && memcmp(w.data, in, n) == 0);
    rm_wbuf_free(&w);
    free(descs);
}

/* ------------------------------------------------------------- name */

static int spec_name_bytes(const uint8_t *s, size_t n)
{
    if (n < 1 || n > REMORA_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

static void fuzz_name(const uint8_t *in, size_t n)
{
    char out[REMORA_NAME_MAX + 1];
    char str[REMORA_NAME_MAX + 2];
    rm_wbuf_t w;
    int ok   = rm_name_decode(in, n, out) == 0;
    int spec = n >= 2 && n == 2u + le16(in) && spec_name_bytes(in + 2, n - 2);

    CHECK(ok == spec);
    /* rm_name_valid on the bytes as a C string agrees with the same rule. */
    size_t sl = n > 2 ? n - 2 : 0;
    if (sl > REMORA_NAME_MAX + 1)
        sl = REMORA_NAME_MAX + 1;
    memcpy(str, in + (n > 2 ? 2 : 0), sl);
    str[sl] = '\0';
    CHECK(rm_name_valid(str) == spec_name_bytes((const uint8_t *)str, strlen(str)));
    /* Even a failed decode leaves a terminated string (a valid name followed
     * by trailing bytes is copied out before the length check fails). */
    CHECK(memchr(out, '\0', sizeof(out)) != NULL);
    if (!ok)
        return;
    CHECK(rm_name_valid(out));
    rm_wbuf_init(&w);
    rm_wbuf_name(&w, out);
    if (!w.failed)
        CHECK(w.len == n && memcmp(w.data, in, n) == 0);
    rm_wbuf_free(&w);
}

/* ------------------------------------------------------------- reader */

/* in[0] % 16 op bytes follow, then the buffer the ops read from. Each op is
 * checked against a model of the reader: a position and a sticky failure. */
static void fuzz_reader(const uint8_t *in, size_t n)
{
    if (n == 0)
        return;
    size_t nops = in[0] % 16u;
    if (nops > n - 1)
        nops = n - 1;
    const uint8_t *ops = in + 1, *buf = in + 1 + nops;
    size_t len = n - 1 - nops, pos = 0;
    int failed = 0;
    rm_rbuf_t r;

    rm_rbuf_init(&r, buf, len);
    for (size_t i = 0; i < nops; i++) {
        unsigned op = ops[i] % 6u;
        size_t want = op == 0 ? 1 : op == 1 ? 2 : op == 2 ? 4 : op == 3 ? 8 : ops[i] >> 3;
        const uint8_t *at = buf + pos;
        int fits          = !failed && len - pos >= want;

        switch (op) {
        case 0: CHECK(rm_rbuf_u8(&r) == (fits ? at[0] : 0)); break;
        case 1: CHECK(rm_rbuf_u16(&r) == (fits ? le16(at) : 0)); break;
        case 2: CHECK(rm_rbuf_u32(&r) == (fits ? le32(at) : 0)); break;
        case 3: CHECK(rm_rbuf_u64(&r) == (fits ? le64(at) : 0)); break;
        case 4: CHECK(rm_rbuf_bytes(&r, want) == (fits ? at : NULL)); break;
        default: {
            char out[REMORA_NAME_MAX + 1];
            rm_rbuf_name(&r, out);
            int got = 0;
            if (!failed && len - pos >= 2) {
                size_t nl = le16(at);
                pos += 2; /* the prefix is consumed even when the name is bad */
                if (len - pos >= nl) {
                    got = spec_name_bytes(buf + pos, nl);
                    if (got)
                        CHECK(strlen(out) == nl && memcmp(out, buf + pos, nl) == 0);
                    pos += nl;
                }
            }
            if (!got)
                CHECK(out[0] == '\0');
            failed = !got;
            CHECK(r.failed == failed);
            CHECK(r.left == len - pos && r.p == buf + pos);
            continue;
        }
        }
        if (fits)
            pos += want;
        else
            failed = 1;
        CHECK(r.failed == failed);
        CHECK(r.left == len - pos && r.p == buf + pos);
    }
}

/* ------------------------------------------------------------- bootstrap */

/* rm_boot_parse against its statement (docs/protocol.md §1.1): a wrong
 * magic byte is rejected as soon as it is in; "need more" exactly while a
 * valid prefix is incomplete; version 2, type 1..7, flags only CM and only on
 * CONNECT/CONNECT_REPLY, length <= 65540; success consumes header + payload
 * and re-encodes to the same bytes; a reply splits off its i32 status
 * exactly when the payload holds 4 bytes. */
static void fuzz_boot(const uint8_t *in, size_t n)
{
    static const uint8_t magic[4] = {'R', 'M', 'R', 'B'};
    rm_boot_frame_t f = {0};
    size_t used = 0, m = n < 4 ? n : 4;
    int r = rm_boot_parse(in, n, &f, &used);
    int bad_magic = memcmp(in, magic, m) != 0;

    if (bad_magic) {
        CHECK(r == -1);
        return;
    }
    if (n < RM_BOOT_HDR_LEN) {
        CHECK(r == 1);
        return;
    }
    unsigned type = in[6], flags = in[7];
    uint32_t len  = le32(in + 8);
    unsigned allowed = type == RM_BOOT_CONNECT || type == RM_BOOT_CONNECT_REPLY ? RM_BOOT_CM : 0;
    int hdr_ok = le16(in + 4) == 2 && type >= 1 && type <= 7 && (flags & ~allowed) == 0 &&
                 len <= 65540u;
    if (!hdr_ok) {
        CHECK(r == -1);
        return;
    }
    if (n - RM_BOOT_HDR_LEN < len) {
        CHECK(r == 1);
        return;
    }
    CHECK(r == 0 && used == RM_BOOT_HDR_LEN + len && f.len == len &&
          f.payload == in + RM_BOOT_HDR_LEN && f.type == type && f.flags == flags);
    remora_status_t st;
    const uint8_t *rest;
    uint32_t rest_len;
    int split = rm_boot_reply_split(&f, &st, &rest, &rest_len);
    CHECK(split == (len >= 4 ? 0 : -1));
    if (split == 0)
        CHECK(rest == f.payload + 4 && rest_len == len - 4 && (int32_t)st == (int32_t)le32(f.payload));
    rm_wbuf_t w;
    rm_wbuf_init(&w);
    rm_boot_encode(&w, f.type, f.flags, f.payload, f.len);
    if (!w.failed)
        CHECK(w.len == used && memcmp(w.data, in, used) == 0);
    rm_wbuf_free(&w);
    if (split == 0) { /* the reply encoder agrees */
        rm_wbuf_init(&w);
        rm_boot_reply_encode(&w, f.type, f.flags, st, rest, rest_len);
        if (!w.failed)
            CHECK(w.len == used && memcmp(w.data, in, used) == 0);
        rm_wbuf_free(&w);
    }
}

/* ------------------------------------------------------------- lanes */

static void fuzz_lanes(const uint8_t *in, size_t n)
{
    uint16_t ports[RM_LANES_MAX - 1];
    unsigned count = 0;
    int ok   = rm_lanes_decode(in, n, ports, &count) == 0;
    int spec = n >= 2 && le16(in) < RM_LANES_MAX && n == 2u + 2u * le16(in);

    for (size_t i = 2; spec && i < n; i += 2)
        spec = le16(in + i) != 0;
    CHECK(ok == spec);
    if (!ok)
        return;
    rm_wbuf_t w;
    rm_wbuf_init(&w);
    rm_lanes_encode(&w, ports, count);
    if (!w.failed)
        CHECK(w.len == n && memcmp(w.data, in, n) == 0);
    rm_wbuf_free(&w);
}

/* ------------------------------------------------------------- stats */

/* Whatever decodes re-encodes to the bytes it came from (less trailing
 * bytes), when every peer string was printable; connections beyond the
 * first input byte's count are dropped, not misread. */
static void fuzz_stats(const uint8_t *in, size_t n)
{
    uint64_t v[64], mask;
    rm_stats_conn_t *conns = NULL;
    uint32_t count;
    size_t max = n ? in[0] % 4 : 0;

    if (rm_stats_decode(in, n, &mask, v, &conns, max, &count) != 0) {
        return;
    }
    CHECK(count <= RM_STATS_CONNS_MAX);
    size_t keep = count < max ? count : max;
    CHECK((keep == 0) == (conns == NULL));
    for (size_t i = 0; i < keep; i++)
        CHECK(strlen(conns[i].peer) <= RM_STATS_PEER_MAX);
    if (count <= max) {
        rm_wbuf_t w;
        int printable = 1;
        rm_wbuf_init(&w);
        rm_stats_encode_server(&w, mask, v);
        rm_wbuf_u32(&w, count);
        for (size_t i = 0; i < keep; i++) {
            for (const char *p = conns[i].peer; *p; p++)
                printable &= *p != '?';
            rm_stats_encode_conn(&w, &conns[i]);
        }
        if (!w.failed && printable)
            CHECK(w.len <= n && memcmp(w.data, in, w.len) == 0);
        rm_wbuf_free(&w);
    }
    free(conns);
}

/* ------------------------------------------------------------- ring */

/* rm_ring_hdr_parse against its statement (ring_format.h), restated: the
 * header fields, bounds computed in 128 bits, counters in order. */
static int spec_ring_valid(const uint8_t *in, size_t n, uint64_t avail)
{
    if (n < 64 || memcmp(in, "RRNG", 4) != 0 || le16(in + 4) != 1 || le16(in + 6) != 64)
        return 0;
    uint64_t elem = le64(in + 8), cap = le64(in + 16), stride = le64(in + 24);
    uint64_t head = le64(in + 32), claimed = le64(in + 40), first = le64(in + 48);
    if (elem == 0 || elem > (1ull << 40) || cap == 0 || cap > (1ull << 32))
        return 0;
    unsigned __int128 want_stride = 8 + ((unsigned __int128)elem + 7) / 8 * 8;
    unsigned __int128 bytes       = 64 + (unsigned __int128)cap * want_stride;
    uint64_t data_stride          = le64(in + 56);
    if (bytes > UINT64_MAX)
        return 0;
    if (data_stride == 0 && (stride != want_stride || bytes > avail))
        return 0;
    /* A GPU ring's control block: bare stamps, elements in a separate block. */
    if (data_stride != 0 && (data_stride != want_stride - 8 || stride != 8 ||
                             64 + (unsigned __int128)cap * 8 > avail))
        return 0;
    return first <= head && head <= claimed && claimed <= head + 1 && claimed < (1ull << 62);
}

/* rm_ring_hdr_parse_live: the same shape checks, counters only in range. */
static int spec_ring_live_valid(const uint8_t *in, size_t n, uint64_t avail)
{
    uint8_t h[64];

    if (n < 64)
        return 0;
    memcpy(h, in, 64); /* the strict rule with the counters made consistent */
    memset(h + 32, 0, 24);
    if (!spec_ring_valid(h, 64, avail))
        return 0;
    uint64_t head = le64(in + 32), claimed = le64(in + 40), first = le64(in + 48);
    return first <= head && head < (1ull << 62) && claimed < (1ull << 62);
}

static void check_ring_shape(const rm_ring_shape_t *s, const uint8_t *in, uint64_t avail,
                             int live)
{
    uint64_t claimed = le64(in + 40), head = le64(in + 32);

    if (live) /* claimed raised to at least head, never lowered */
        claimed = claimed < head ? head : claimed;
    CHECK(s->elem_size == le64(in + 8) && s->capacity == le64(in + 16) &&
          s->stride == le64(in + 24) && s->head == head && s->claimed == claimed &&
          s->first == le64(in + 48));
    CHECK(s->elem_size >= 1 && s->elem_size <= RM_RING_ELEM_MAX);
    CHECK(s->capacity >= 1 && s->capacity <= RM_RING_CAP_MAX);
    CHECK(s->data_stride == le64(in + 56));
    CHECK(s->first <= s->head && s->head <= s->claimed);
    uint64_t lo = rm_ring_oldest_seq(s);
    CHECK(lo >= s->first && lo <= s->head && s->head - lo <= s->capacity);
    if (s->data_stride) { /* a GPU ring's control block: bare stamps */
        CHECK(s->stride == RM_RING_STAMP_LEN &&
              s->data_stride == rm_ring_stride(s->elem_size) - RM_RING_STAMP_LEN);
        CHECK(rm_ring_ctrl_bytes(s->capacity) <= avail);
        return;
    }
    CHECK(s->stride == rm_ring_stride(s->elem_size));
    CHECK(s->stride % 8 == 0 && s->stride >= s->elem_size + RM_RING_STAMP_LEN);
    uint64_t bytes = rm_ring_bytes(s->elem_size, s->capacity);
    CHECK(bytes != 0 && bytes <= avail);
    CHECK(bytes == RM_RING_HDR_LEN + s->capacity * s->stride);
    if (!live)
        CHECK(s->claimed <= s->head + 1 && s->claimed < (1ull << 62));
    if (s->head > lo) /* every held slot lies inside the ring */
        CHECK(rm_ring_slot_offset(s, s->head - 1) + s->stride <= bytes);
}

/* The input is a header, or a whole ring image. Parsed with avail = the input
 * length and with a large avail; where it is a whole image, rebuilt with
 * rm_ring_from_image, whose ring must hold exactly the elements whose stamps
 * match, with the image's bytes. */
static void ring_image(const uint8_t *in, size_t n, const rm_ring_shape_t *shape, int live);

static void fuzz_ring(const uint8_t *in, size_t n)
{
    rm_ring_shape_t s, big, ls, lbig;
    int ok      = rm_ring_hdr_parse(in, n, n, &s) == 0;
    int ok_big  = rm_ring_hdr_parse(in, n, UINT64_MAX, &big) == 0;
    int lok     = rm_ring_hdr_parse_live(in, n, n, &ls) == 0;
    int lok_big = rm_ring_hdr_parse_live(in, n, UINT64_MAX, &lbig) == 0;

    CHECK(ok == spec_ring_valid(in, n, n));
    CHECK(ok_big == spec_ring_valid(in, n, UINT64_MAX));
    CHECK(lok == spec_ring_live_valid(in, n, n));
    CHECK(lok_big == spec_ring_live_valid(in, n, UINT64_MAX));
    CHECK(!ok || ok_big); /* more room never rejects */
    CHECK(!ok || lok);    /* the live parse accepts all the strict one does ... */
    if (ok_big)
        check_ring_shape(&big, in, UINT64_MAX, 0);
    if (lok_big)
        check_ring_shape(&lbig, in, UINT64_MAX, 1);
    if (lok)
        check_ring_shape(&ls, in, n, 1);
    if (ok) {
        check_ring_shape(&s, in, n, 0);
        CHECK(memcmp(&s, &ls, sizeof(s)) == 0); /* ... and reads it the same */
        ring_image(in, n, &s, 0);
    }
    if (lok)
        ring_image(in, n, &ls, 1);
}

static void ring_image(const uint8_t *in, size_t n, const rm_ring_shape_t *shape, int live)
{
    rm_ring_shape_t s = *shape;
    remora_context_h ctx = (remora_context_h)(uintptr_t)0x10; /* never dereferenced */

    remora_ring_h r;
    remora_status_t st = rm_ring_from_image(ctx, in, n, 0, UINT64_MAX, live, &r);
    if (s.data_stride) { /* a GPU ring's control block carries no elements */
        CHECK(st == REMORA_ERR_UNSUPPORTED);
        return;
    }
    if (st == REMORA_ERR_NO_MEMORY)
        return;
    CHECK(st == REMORA_OK);
    CHECK(remora_ring_head(r) == s.head && remora_ring_elem_size(r) == s.elem_size &&
          remora_ring_capacity(r) == s.capacity);
    uint8_t *buf = malloc(s.elem_size);
    if (buf == NULL) {
        remora_ring_destroy(r);
        return;
    }
    /* Held: from the oldest, less what the producer may have been overwriting
     * (claimed > seq + capacity), and only slots whose stamp matches. */
    uint64_t lo = rm_ring_oldest_seq(&s), held = 0, first_held = s.head, last_held = 0, seq;
    if (s.claimed > s.capacity && s.claimed - s.capacity > lo)
        lo = s.claimed - s.capacity < s.head ? s.claimed - s.capacity : s.head;
    for (uint64_t q = lo; q < s.head; q++) {
        uint64_t off = rm_ring_slot_offset(&s, q);
        int want     = le64(in + off) == 2 * q + 2;
        remora_status_t g = remora_ring_get(r, q, buf, s.elem_size);
        CHECK(g == (want ? REMORA_OK : REMORA_ERR_OUT_OF_RANGE));
        if (want) {
            CHECK(memcmp(buf, in + off + 8, s.elem_size) == 0);
            if (!held++)
                first_held = q;
            last_held = q;
        }
    }
    if (lo > 0)
        CHECK(remora_ring_get(r, lo - 1, buf, s.elem_size) == REMORA_ERR_OUT_OF_RANGE);
    CHECK(remora_ring_get(r, s.head, buf, s.elem_size) == REMORA_ERR_OUT_OF_RANGE);
    st = remora_ring_oldest(r, buf, s.elem_size, &seq);
    CHECK(held ? st == REMORA_OK && seq == first_held : st == REMORA_ERR_OUT_OF_RANGE);
    st = remora_ring_newest(r, buf, s.elem_size, &seq); /* the newest one held */
    if (held)
        CHECK(st == REMORA_OK && seq == last_held &&
              memcmp(buf, in + rm_ring_slot_offset(&s, seq) + 8, s.elem_size) == 0);
    else
        CHECK(st == REMORA_ERR_OUT_OF_RANGE);
    free(buf);
    remora_ring_destroy(r);
}

/* ------------------------------------------------------------- entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned mode = data[0] % MODE_COUNT;
    size_t n      = size - 1;
    uint8_t *in   = malloc(n ? n : 1); /* exactly n bytes: ASan sees any over-read */
    if (in == NULL)
        return 0;
    memcpy(in, data + 1, n);

    switch (mode) {
    case MODE_HDR:    fuzz_hdr(in, n); break;
    case MODE_HELLO:  fuzz_hello(in, n); break;
    case MODE_DESC:   fuzz_desc(in, n); break;
    case MODE_LIST:   fuzz_list(in, n); break;
    case MODE_NAME:   fuzz_name(in, n); break;
    case MODE_BOOT:   fuzz_boot(in, n); break;
    case MODE_RING:   fuzz_ring(in, n); break;
    case MODE_LANES:  fuzz_lanes(in, n); break;
    case MODE_STATS:  fuzz_stats(in, n); break;
    default:          fuzz_reader(in, n); break;
    }
    free(in);
    return 0;
}
