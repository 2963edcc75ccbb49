/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of src/wire/wire.c: message headers, the little-endian writer and
 * reader, the hello, region descriptor, list and name bodies, and the
 * bootstrap frames.
 *
 * Design notes
 * - Every decoder is handed a heap copy of exactly the bytes under test
 *   (dup_exact), so a read past the end is a heap overflow that the sanitizer
 *   build (REMORA_SANITIZE=ON) reports, not a silent read of stack garbage.
 * - Expected encodings are written out as literal bytes where the layout is
 *   the point of the test; the code under test never produces its own
 *   expectations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wire/wire.h"

/* ---------------------------------------------------------------- helpers */

/* A malloc'd copy of exactly n bytes (at least one byte is allocated). */
static uint8_t *dup_exact(const void *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    assert_non_null(d);
    if (n)
        memcpy(d, p, n);
    return d;
}

static int hdr_decode_exact(const void *buf, size_t len, rm_hdr_t *hdr)
{
    uint8_t *d = dup_exact(buf, len);
    int rc     = rm_hdr_decode(d, len, hdr);
    free(d);
    return rc;
}

/* Allocations made through calloc (rm_list_decode's array), counted through
 * the linker's --wrap=calloc (see CMakeLists.txt). */
static size_t g_calloc_calls, g_calloc_max_bytes;
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size)
{
    g_calloc_calls++;
    if (size != 0 && n > SIZE_MAX / size)
        g_calloc_max_bytes = SIZE_MAX;
    else if (n * size > g_calloc_max_bytes)
        g_calloc_max_bytes = n * size;
    return __real_calloc(n, size);
}

static void calloc_reset(void) { g_calloc_calls = g_calloc_max_bytes = 0; }

/* The header length each type must have on the wire. */
static size_t expected_hdr_len(unsigned type)
{
    switch (type) {
    case RM_MSG_READ:
    case RM_MSG_WRITE:
    case RM_MSG_SIGNAL:
    case RM_MSG_WRITE_SIGNAL:
    case RM_MSG_RING_WAIT: return 40;
    case RM_MSG_RING_NOTIFY:
    case RM_MSG_EVENT:     return 48;
    case RM_MSG_EVENT_ACK: return 24;
    default:               return 16;
    }
}

/* A header with every field set to a distinct, non-zero value. */
static rm_hdr_t full_hdr(unsigned type)
{
    rm_hdr_t h = {
        .type       = (uint8_t)type,
        .status     = -9,
        .req_id     = 0x0102030405060708ull,
        .region_id  = 0x11223344u,
        .kind       = type == RM_MSG_EVENT       ? RM_EVENT_REMOVED
                      : type == RM_MSG_RING_WAIT ? RM_RING_LATEST
                      : type == RM_MSG_SIGNAL    ? RM_SIG_ADD
                      : type == RM_MSG_READ || type == RM_MSG_WRITE ||
                        type == RM_MSG_WRITE_SIGNAL ? RM_RW_STAGED : 0x77,
        .offset     = 0x2122232425262728ull,
        .length     = 0x3132333435363738ull,
        .generation = 0x4142434445464748ull,
        .size       = 0x5152535455565758ull,
        .epoch      = 0x6162636465666768ull,
    };
    return h;
}

/* An encoded, valid header of the given type. */
static size_t encode_type(unsigned type, uint8_t buf[RM_HDR_MAX + 8])
{
    rm_hdr_t h = full_hdr(type);
    memset(buf, 0xee, RM_HDR_MAX + 8);
    return rm_hdr_encode(&h, buf);
}

/* The body bytes of a writer, for comparing against literals. */
static void assert_wbuf_eq(const rm_wbuf_t *w, const uint8_t *expect, size_t n)
{
    assert_int_equal(w->failed, 0);
    assert_int_equal(w->len, n);
    assert_memory_equal(w->data, expect, n);
}

/* ---------------------------------------------------------------- header */

/* For every type: the encoded length is the documented one, the fields that
 * travel with that type survive a round trip, and all others decode as 0. */
static void test_hdr_round_trip_every_type(void **state)
{
    for (unsigned t = 1; t <= RM_MSG_TYPE_MAX; t++) {
        uint8_t buf[RM_HDR_MAX + 8];
        rm_hdr_t in = full_hdr(t), out;
        size_t len  = rm_hdr_encode(&in, buf);

        assert_int_equal(len, expected_hdr_len(t));
        assert_true(len <= RM_HDR_MAX);
        memset(&out, 0xa5, sizeof(out));
        assert_int_equal(hdr_decode_exact(buf, len, &out), 0);

        int ring = t == RM_MSG_RING_WAIT || t == RM_MSG_RING_NOTIFY;
        int sig = t == RM_MSG_SIGNAL || t == RM_MSG_WRITE_SIGNAL;
        int rw = t == RM_MSG_READ || t == RM_MSG_WRITE || ring || sig;
        int ev = t == RM_MSG_EVENT;
        assert_int_equal(out.type, t);
        assert_int_equal(out.status, in.status); /* common part: all types */
        assert_int_equal(out.req_id, in.req_id);
        assert_int_equal(out.region_id, rw || ev ? in.region_id : 0);
        assert_int_equal(out.kind, (rw && t != RM_MSG_RING_NOTIFY) || ev ? in.kind : 0);
        assert_int_equal(out.offset, rw ? in.offset : 0);
        assert_int_equal(out.length, rw ? in.length : 0);
        assert_int_equal(out.generation, ev ? in.generation : 0);
        assert_int_equal(out.size, ev || t == RM_MSG_RING_NOTIFY ? in.size : 0);
        assert_int_equal(out.epoch, ev || t == RM_MSG_EVENT_ACK ? in.epoch : 0);
    }
}

/* RING_WAIT: bit 7 of the mode asks for a push (docs/ring.md, "Fan-out");
 * the mode itself must still be every or latest. */
static void test_ring_wait_push_bit(void **state)
{
    rm_hdr_t h = full_hdr(RM_MSG_RING_WAIT), out;
    uint8_t buf[RM_HDR_MAX + 8];
    size_t len;
    (void)state;

    h.kind = RM_RING_LATEST | RM_RING_BULK;
    len = rm_hdr_encode(&h, buf);
    assert_int_equal(hdr_decode_exact(buf, len, &out), 0);
    assert_int_equal(out.kind, RM_RING_LATEST | RM_RING_BULK);
    assert_int_equal(RM_RING_MODE(out.kind), RM_RING_LATEST);
    h.kind = 2 | RM_RING_BULK;
    len = rm_hdr_encode(&h, buf);
    assert_int_equal(hdr_decode_exact(buf, len, &out), -1);
    h.kind = 0x40;
    len = rm_hdr_encode(&h, buf);
    assert_int_equal(hdr_decode_exact(buf, len, &out), -1);
}

/* SIGNAL: an op other than SET or ADD is refused; WRITE_SIGNAL's signal
 * descriptor round-trips and rejects what is short or malformed. */
static void test_signal_wire(void **state)
{
    rm_hdr_t h = full_hdr(RM_MSG_SIGNAL), out;
    uint8_t buf[RM_HDR_MAX + 8], d[RM_SIG_DESC_LEN];
    size_t len;
    rm_sig_desc_t in = {.region_id = 0x01020304u, .op = RM_SIG_ADD,
                        .index = 0x1112131415161718ull, .value = 0x2122232425262728ull}, o;

    h.kind = 2;
    len = rm_hdr_encode(&h, buf);
    assert_int_equal(hdr_decode_exact(buf, len, &out), -1);
    rm_sig_desc_encode(d, &in);
    assert_int_equal(d[0], 0x04);
    assert_int_equal(d[4], RM_SIG_ADD);
    assert_int_equal(d[8], 0x18);
    assert_int_equal(d[16], 0x28);
    assert_int_equal(rm_sig_desc_decode(d, sizeof(d), &o), 0);
    assert_int_equal(o.region_id, in.region_id);
    assert_int_equal(o.op, in.op);
    assert_int_equal(o.index, in.index);
    assert_int_equal(o.value, in.value);
    for (size_t n = 0; n < sizeof(d); n++)
        assert_int_equal(rm_sig_desc_decode(d, n, &o), -1);
    d[4] = 2;
    assert_int_equal(rm_sig_desc_decode(d, sizeof(d), &o), -1);
    d[4] = RM_SIG_SET;
    d[6] = 1;
    assert_int_equal(rm_sig_desc_decode(d, sizeof(d), &o), -1);
    assert_int_equal(rm_sig_desc_decode(NULL, 0, &o), -1);
}

/* The READ header layout, byte by byte: type, version, 2 reserved, status,
 * req_id, region_id, kind (RM_RW_STAGED), 3 reserved, offset, length; all
 * little-endian. */
static void test_hdr_read_layout_literal(void **state)
{
    static const uint8_t expect[40] = {
        9, 1, 0, 0, 0xf7, 0xff, 0xff, 0xff,             /* type, ver, rsv, status -9 */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* req_id */
        0x44, 0x33, 0x22, 0x11, 1, 0, 0, 0,             /* region_id, kind, reserved */
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, /* offset */
        0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31, /* length */
    };
    uint8_t buf[RM_HDR_MAX + 8];

    assert_int_equal(encode_type(RM_MSG_READ, buf), sizeof(expect));
    assert_memory_equal(buf, expect, sizeof(expect));
}

/* The EVENT header layout: region_id, kind, 3 reserved, generation, size, epoch. */
static void test_hdr_event_layout_literal(void **state)
{
    static const uint8_t expect[48] = {
        15, 1, 0, 0, 0xf7, 0xff, 0xff, 0xff,
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
        0x44, 0x33, 0x22, 0x11, RM_EVENT_REMOVED, 0, 0, 0,
        0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41, /* generation */
        0x58, 0x57, 0x56, 0x55, 0x54, 0x53, 0x52, 0x51, /* size */
        0x68, 0x67, 0x66, 0x65, 0x64, 0x63, 0x62, 0x61, /* epoch */
    };
    uint8_t buf[RM_HDR_MAX + 8];

    assert_int_equal(encode_type(RM_MSG_EVENT, buf), sizeof(expect));
    assert_memory_equal(buf, expect, sizeof(expect));
}

/* Every length short of the type's header length is rejected. */
static void test_hdr_rejects_every_truncation(void **state)
{
    for (unsigned t = 1; t <= RM_MSG_TYPE_MAX; t++) {
        uint8_t buf[RM_HDR_MAX + 8];
        size_t len = encode_type(t, buf);
        rm_hdr_t out;

        for (size_t n = 0; n < len; n++)
            assert_int_equal(hdr_decode_exact(buf, n, &out), -1);
    }
}

/* A header longer than its type's length is rejected (one byte, and up to
 * the longest header: a PING padded to look like an EVENT). */
static void test_hdr_rejects_longer(void **state)
{
    for (unsigned t = 1; t <= RM_MSG_TYPE_MAX; t++) {
        uint8_t buf[RM_HDR_MAX + 8];
        size_t len = encode_type(t, buf);
        rm_hdr_t out;

        assert_int_equal(hdr_decode_exact(buf, len + 1, &out), -1);
        if (len < RM_HDR_MAX)
            assert_int_equal(hdr_decode_exact(buf, RM_HDR_MAX, &out), -1);
    }
}

/* Type 0 and every type above the maximum are rejected. */
static void test_hdr_rejects_bad_type(void **state)
{
    uint8_t buf[RM_HDR_MAX + 8];
    size_t len = encode_type(RM_MSG_PING, buf);
    rm_hdr_t out;

    buf[0] = 0;
    assert_int_equal(hdr_decode_exact(buf, len, &out), -1);
    for (unsigned t = RM_MSG_TYPE_MAX + 1; t <= 255; t++) {
        if (RM_MSG_IS_SOCK(t) || RM_MSG_IS_STATS(t))
            continue; /* test_hdr_sock_roundtrip, test_stats_* */
        buf[0] = (uint8_t)t;
        assert_int_equal(hdr_decode_exact(buf, len, &out), -1);
    }
}

/* Socket messages (26..30) carry ids, kind and a byte count; 31 is not one. */
static void test_hdr_sock_roundtrip(void **state)
{
    uint8_t buf[RM_HDR_MAX];
    rm_hdr_t in = {.req_id = 7, .region_id = 0x10002, .kind = 1, .offset = 0x30004,
                   .length = 65536}, out;

    for (unsigned t = RM_MSG_SOCK_FIRST; t <= RM_MSG_SOCK_LAST; t++) {
        in.type = (uint8_t)t;
        size_t len = rm_hdr_encode(&in, buf);
        assert_int_equal(len, 40);
        assert_int_equal(rm_hdr_decode(buf, len, &out), 0);
        assert_int_equal(out.type, t);
        assert_int_equal(out.region_id, in.region_id);
        assert_int_equal(out.kind, 1);
        assert_int_equal(out.offset, in.offset);
        assert_int_equal(out.length, in.length);
        assert_int_equal(rm_hdr_decode(buf, len - 1, &out), -1);
        assert_string_not_equal(rm_msg_type_name(t), "?");
    }
    buf[0] = RM_MSG_SOCK_LAST + 1;
    assert_int_equal(rm_hdr_decode(buf, 40, &out), -1);
}

/* Any version byte other than 1 is rejected. */
static void test_hdr_rejects_bad_version(void **state)
{
    uint8_t buf[RM_HDR_MAX + 8];
    size_t len = encode_type(RM_MSG_READ, buf);
    rm_hdr_t out;

    assert_int_equal(buf[1], 1);
    for (unsigned v = 0; v <= 255; v++) {
        if (v == 1)
            continue;
        buf[1] = (uint8_t)v;
        assert_int_equal(hdr_decode_exact(buf, len, &out), -1);
    }
}

/* READ, WRITE and WRITE_SIGNAL carry their kind byte (RM_RW_STAGED; 0 from
 * clients that predate it) whatever its value: the byte was reserved, and
 * its other bits stay ignored. */
static void test_hdr_rw_kind(void **state)
{
    const unsigned types[] = {RM_MSG_READ, RM_MSG_WRITE, RM_MSG_WRITE_SIGNAL};
    for (unsigned i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        for (unsigned k = 0; k <= 255; k++) {
            uint8_t buf[RM_HDR_MAX + 8];
            rm_hdr_t in = full_hdr(types[i]), out;
            size_t len;
            in.kind = (uint8_t)k;
            len = rm_hdr_encode(&in, buf);
            assert_int_equal(hdr_decode_exact(buf, len, &out), 0);
            assert_int_equal(out.kind, k);
        }
    }
}

/* EVENT accepts only CHANGED and REMOVED as its kind. */
static void test_hdr_rejects_bad_event_kind(void **state)
{
    uint8_t buf[RM_HDR_MAX + 8];
    size_t len = encode_type(RM_MSG_EVENT, buf);
    rm_hdr_t out;

    for (unsigned k = 0; k <= 255; k++) {
        buf[20] = (uint8_t)k;
        int ok = k == RM_EVENT_CHANGED || k == RM_EVENT_REMOVED;
        assert_int_equal(hdr_decode_exact(buf, len, &out), ok ? 0 : -1);
        if (ok)
            assert_int_equal(out.kind, k);
    }
}

/* Every type has a name; anything else is "?". */
static void test_msg_type_name(void **state)
{
    assert_string_equal(rm_msg_type_name(RM_MSG_HELLO), "HELLO");
    assert_string_equal(rm_msg_type_name(RM_MSG_EVENT_ACK), "EVENT_ACK");
    assert_string_equal(rm_msg_type_name(RM_MSG_ERROR), "ERROR");
    assert_string_equal(rm_msg_type_name(0), "?");
    assert_string_equal(rm_msg_type_name(RM_MSG_STATS), "STATS");
    assert_string_equal(rm_msg_type_name(RM_MSG_STATS_REPLY), "STATS_REPLY");
    assert_string_equal(rm_msg_type_name(RM_MSG_STATS_REPLY + 1), "?");
    assert_string_equal(rm_msg_type_name(~0u), "?");
    for (unsigned t = 1; t <= RM_MSG_TYPE_MAX; t++)
        assert_string_not_equal(rm_msg_type_name(t), "?");
}

/* STATS (16-byte header) and STATS_REPLY decode; the reply body round-trips:
 * server counters by mask, connections with their peer string. */
static void test_stats_roundtrip(void **state)
{
    uint8_t buf[RM_HDR_MAX];
    rm_hdr_t in = {.type = RM_MSG_STATS, .req_id = 9}, out;
    uint64_t v[64] = {0}, got[64], mask;
    rm_stats_conn_t c = {.mask = 0x3ff}, *conns = NULL;
    uint32_t count;
    rm_wbuf_t w;

    (void)state;
    assert_int_equal(rm_hdr_encode(&in, buf), 16);
    assert_int_equal(rm_hdr_decode(buf, 16, &out), 0);
    assert_int_equal(out.type, RM_MSG_STATS);
    in.type = RM_MSG_STATS_REPLY;
    assert_int_equal(rm_hdr_encode(&in, buf), 16);
    assert_int_equal(rm_hdr_decode(buf, 16, &out), 0);
    for (unsigned i = 0; i < 64; i++)
        v[i] = 1000 + i;
    snprintf(c.peer, sizeof(c.peer), "127.0.0.1:4242");
    for (unsigned i = 0; i < 10; i++)
        c.v[i] = 7 * i;
    rm_wbuf_init(&w);
    rm_stats_encode_server(&w, 0x8000000000000005ull, v); /* bit 63: unknown to us */
    rm_wbuf_u32(&w, 2);
    rm_stats_encode_conn(&w, &c);
    rm_stats_encode_conn(&w, &c);
    rm_wbuf_u8(&w, 0xee); /* trailing bytes: a later version's */
    assert_int_equal(rm_stats_decode(w.data, w.len, &mask, got, &conns, 1, &count), 0);
    assert_int_equal(mask, 0x8000000000000005ull);
    assert_int_equal(got[0], 1000);
    assert_int_equal(got[2], 1002);
    assert_int_equal(got[1], 0);
    assert_int_equal(count, 2);
    assert_non_null(conns);
    assert_string_equal(conns[0].peer, "127.0.0.1:4242");
    assert_int_equal(conns[0].v[9], 63);
    free(conns);
    /* Every truncation fails cleanly. */
    for (size_t n = 0; n + 1 < w.len; n++) {
        conns = NULL;
        if (rm_stats_decode(w.data, n, &mask, got, &conns, 4, &count) == 0)
            assert_true(n >= w.len - 1); /* only the trailing byte may go */
        free(conns);
    }
    rm_wbuf_free(&w);
}

/* A peer string longer than 63 bytes, or a count beyond the bytes, is malformed. */
static void test_stats_malformed(void **state)
{
    uint64_t v[64] = {0}, mask;
    rm_stats_conn_t *conns = NULL;
    uint32_t count;
    rm_wbuf_t w;

    (void)state;
    rm_wbuf_init(&w);
    rm_stats_encode_server(&w, 1, v);
    rm_wbuf_u32(&w, 1);
    rm_wbuf_u64(&w, 1u << RM_STATS_PEER_BIT);
    rm_wbuf_u16(&w, 64);
    for (int i = 0; i < 64; i++)
        rm_wbuf_u8(&w, 'a');
    assert_int_equal(rm_stats_decode(w.data, w.len, &mask, v, &conns, 4, &count), -1);
    rm_wbuf_free(&w);
    rm_wbuf_init(&w);
    rm_stats_encode_server(&w, 0, v);
    rm_wbuf_u32(&w, 65535);
    assert_int_equal(rm_stats_decode(w.data, w.len, &mask, v, &conns, 4, &count), -1);
    rm_wbuf_free(&w);
}

/* ---------------------------------------------------------------- writer, reader */

/* The writer emits little-endian integers and u16-prefixed names. */
static void test_wbuf_little_endian_literal(void **state)
{
    static const uint8_t expect[] = {
        0x11,                                           /* u8 */
        0x33, 0x22,                                     /* u16 0x2233 */
        0x77, 0x66, 0x55, 0x44,                         /* u32 0x44556677 */
        0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, /* u64 0x8899aabbccddeeff */
        0xde, 0xad,                                     /* bytes */
        0x02, 0x00, 'a', 'b',                           /* name "ab" */
    };
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_wbuf_u8(&w, 0x11);
    rm_wbuf_u16(&w, 0x2233);
    rm_wbuf_u32(&w, 0x44556677u);
    rm_wbuf_u64(&w, 0x8899aabbccddeeffull);
    rm_wbuf_bytes(&w, "\xde\xad", 2);
    rm_wbuf_name(&w, "ab");
    assert_wbuf_eq(&w, expect, sizeof(expect));
    rm_wbuf_free(&w);
    assert_null(w.data);
    assert_int_equal(w.len, 0);
}

/* The writer grows past its first allocation and keeps every byte. */
static void test_wbuf_grows(void **state)
{
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    for (unsigned i = 0; i < 10000; i++)
        rm_wbuf_u8(&w, (uint8_t)(i * 7));
    rm_wbuf_bytes(&w, NULL, 0); /* zero bytes: no change, no crash */
    assert_int_equal(w.failed, 0);
    assert_int_equal(w.len, 10000);
    assert_true(w.cap >= w.len);
    for (unsigned i = 0; i < 10000; i++)
        assert_int_equal(w.data[i], (uint8_t)(i * 7));
    rm_wbuf_free(&w);
}

/* The reader decodes little-endian bytes to the right values. */
static void test_rbuf_little_endian_literal(void **state)
{
    static const uint8_t in[] = {
        0x11, 0x33, 0x22, 0x77, 0x66, 0x55, 0x44,
        0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0xde, 0xad,
    };
    uint8_t *d = dup_exact(in, sizeof(in));
    rm_rbuf_t r;
    const uint8_t *p;

    rm_rbuf_init(&r, d, sizeof(in));
    assert_int_equal(rm_rbuf_u8(&r), 0x11);
    assert_int_equal(rm_rbuf_u16(&r), 0x2233);
    assert_int_equal(rm_rbuf_u32(&r), 0x44556677u);
    assert_true(rm_rbuf_u64(&r) == 0x8899aabbccddeeffull);
    p = rm_rbuf_bytes(&r, 2);
    assert_ptr_equal(p, d + 15);
    assert_int_equal(r.left, 0);
    assert_int_equal(r.failed, 0);
    free(d);
}

/* Each read that runs past the end returns 0 (or NULL), sets failed and
 * consumes nothing; a later read fails too even where bytes remain. */
static void test_rbuf_past_end_fails(void **state)
{
    static const uint8_t in[7] = {1, 2, 3, 4, 5, 6, 7};
    uint8_t *d = dup_exact(in, sizeof(in));
    rm_rbuf_t r;

    rm_rbuf_init(&r, d, 1);
    assert_int_equal(rm_rbuf_u16(&r), 0);
    assert_true(r.failed);
    assert_int_equal(r.left, 1);
    assert_int_equal(rm_rbuf_u8(&r), 0); /* sticky: the byte is there */
    assert_true(r.failed);

    rm_rbuf_init(&r, d, 3);
    assert_int_equal(rm_rbuf_u32(&r), 0);
    assert_true(r.failed);

    rm_rbuf_init(&r, d, 7);
    assert_true(rm_rbuf_u64(&r) == 0);
    assert_true(r.failed);

    rm_rbuf_init(&r, d, 0);
    assert_int_equal(rm_rbuf_u8(&r), 0);
    assert_true(r.failed);

    rm_rbuf_init(&r, d, 4);
    assert_null(rm_rbuf_bytes(&r, 5));
    assert_true(r.failed);
    assert_null(rm_rbuf_bytes(&r, 1));

    rm_rbuf_init(&r, d, 4);
    assert_null(rm_rbuf_bytes(&r, SIZE_MAX)); /* no wrap-around */
    assert_true(r.failed);

    rm_rbuf_init(&r, NULL, 100); /* NULL data reads as empty */
    assert_int_equal(r.left, 0);
    assert_int_equal(rm_rbuf_u8(&r), 0);
    assert_true(r.failed);
    free(d);
}

/* Runs rm_rbuf_name over exactly the given bytes; returns r.failed. */
static int rbuf_name_failed(const void *in, size_t n, char out[REMORA_NAME_MAX + 1])
{
    uint8_t *d = dup_exact(in, n);
    rm_rbuf_t r;

    rm_rbuf_init(&r, d, n);
    rm_rbuf_name(&r, out);
    free(d);
    return r.failed;
}

/* A u16-prefixed name of 1 and of 255 bytes is read back and NUL-terminated. */
static void test_rbuf_name_ok(void **state)
{
    uint8_t in[2 + REMORA_NAME_MAX];
    char out[REMORA_NAME_MAX + 1];

    assert_false(rbuf_name_failed("\x01\x00x", 3, out));
    assert_string_equal(out, "x");

    in[0] = REMORA_NAME_MAX;
    in[1] = 0;
    memset(in + 2, 'n', REMORA_NAME_MAX);
    assert_false(rbuf_name_failed(in, sizeof(in), out));
    assert_int_equal(strlen(out), REMORA_NAME_MAX);
    assert_int_equal(out[0], 'n');
}

/* rm_rbuf_name rejects length 0, length > 255, control bytes, DEL, an
 * embedded NUL, a truncated body and a truncated length prefix. */
static void test_rbuf_name_rejects(void **state)
{
    uint8_t big[2 + 256];
    char out[REMORA_NAME_MAX + 1];

    assert_true(rbuf_name_failed("\x00\x00", 2, out));
    assert_string_equal(out, "");
    big[0] = 0x00;
    big[1] = 0x01; /* 256 */
    memset(big + 2, 'n', 256);
    assert_true(rbuf_name_failed(big, sizeof(big), out));
    assert_string_equal(out, "");
    assert_true(rbuf_name_failed("\x03\x00" "a\x01" "b", 5, out));
    assert_true(rbuf_name_failed("\x03\x00" "a\x1f" "b", 5, out));
    assert_true(rbuf_name_failed("\x03\x00" "a\x7f" "b", 5, out));
    assert_true(rbuf_name_failed("\x03\x00" "a\x00" "b", 5, out));
    assert_true(rbuf_name_failed("\x05\x00" "abcd", 6, out)); /* 4 of 5 bytes */
    assert_true(rbuf_name_failed("\x05", 1, out));            /* half a prefix */
    assert_true(rbuf_name_failed("", 0, out));
}

/* ---------------------------------------------------------------- hello */

static rm_hello_t sample_hello(void)
{
    rm_hello_t h = {.proto_min = 1, .proto_max = 3, .flags = RM_HELLO_AUTH_REQUIRED};
    for (int i = 0; i < RM_HOST_ID_LEN; i++)
        h.host_id[i] = (uint8_t)(0x10 + i);
    for (int i = 0; i < RM_NONCE_LEN; i++)
        h.nonce[i] = (uint8_t)(0x80 + i);
    h.instance    = 0x0102030405060708ull;
    h.ucx_version = 1u << 16 | 13u; /* UCX 1.13 */
    h.tcp_tx_seg  = 256u << 10;
    h.tcp_rx_seg  = 512u << 10;
    return h;
}

static int hello_decode_exact(const void *buf, size_t len, rm_hello_t *h)
{
    uint8_t *d = dup_exact(buf, len);
    int rc     = rm_hello_decode(d, len, h);
    free(d);
    return rc;
}

/* A hello survives a round trip; it is 78 bytes: magic "RMRA" LE, versions,
 * flags, host id, nonce, u64 instance, u32 UCX version, then the u32 TCP
 * segment sizes (sent and received). */
static void test_hello_round_trip(void **state)
{
    static const uint8_t head[] = {0x52, 0x4d, 0x52, 0x41, 1, 0, 3, 0, 1, 0};
    static const uint8_t tail[] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                                   0x0d, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00,
                                   0x00, 0x00, 0x08, 0x00};
    rm_hello_t in = sample_hello(), out;
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_hello_encode(&w, &in);
    assert_int_equal(w.failed, 0);
    assert_int_equal(w.len, 78);
    assert_int_equal(w.len, 4 + 2 + 2 + 2 + RM_HOST_ID_LEN + RM_NONCE_LEN + 8 + 4 + 4 + 4);
    assert_memory_equal(w.data, head, sizeof(head));
    assert_memory_equal(w.data + 10, in.host_id, RM_HOST_ID_LEN);
    assert_memory_equal(w.data + 10 + RM_HOST_ID_LEN, in.nonce, RM_NONCE_LEN);
    assert_memory_equal(w.data + 58, tail, sizeof(tail));

    memset(&out, 0, sizeof(out));
    assert_int_equal(hello_decode_exact(w.data, w.len, &out), 0);
    assert_int_equal(out.proto_min, in.proto_min);
    assert_int_equal(out.proto_max, in.proto_max);
    assert_int_equal(out.flags, in.flags);
    assert_memory_equal(out.host_id, in.host_id, RM_HOST_ID_LEN);
    assert_memory_equal(out.nonce, in.nonce, RM_NONCE_LEN);
    assert_true(out.instance == in.instance);
    assert_int_equal(out.ucx_version, in.ucx_version);
    assert_int_equal(out.tcp_segs_sent, 1);
    assert_int_equal(out.tcp_tx_seg, in.tcp_tx_seg);
    assert_int_equal(out.tcp_rx_seg, in.tcp_rx_seg);

    /* proto_min == proto_max (the server's choice) is fine too. */
    in.proto_min = in.proto_max = 2;
    rm_wbuf_free(&w);
    rm_hello_encode(&w, &in);
    assert_int_equal(hello_decode_exact(w.data, w.len, &out), 0);
    rm_wbuf_free(&w);
}

/* Trailing bytes after a hello are allowed (later versions may append). */
static void test_hello_trailing_allowed(void **state)
{
    rm_hello_t in = sample_hello(), out;
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_hello_encode(&w, &in);
    rm_wbuf_u32(&w, 0xdeadbeef);
    assert_int_equal(hello_decode_exact(w.data, w.len, &out), 0);
    assert_int_equal(out.proto_max, in.proto_max);
    rm_wbuf_free(&w);
}

/* A wrong magic in any byte is rejected. */
static void test_hello_bad_magic(void **state)
{
    rm_hello_t in = sample_hello(), out;
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_hello_encode(&w, &in);
    for (int i = 0; i < 4; i++) {
        w.data[i] ^= 0x01;
        assert_int_equal(hello_decode_exact(w.data, w.len, &out), -1);
        w.data[i] ^= 0x01;
    }
    rm_wbuf_free(&w);
}

/* proto_min > proto_max is rejected. */
static void test_hello_min_above_max(void **state)
{
    rm_hello_t in = sample_hello(), out;
    rm_wbuf_t w;

    in.proto_min = 4;
    in.proto_max = 3;
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &in);
    assert_int_equal(hello_decode_exact(w.data, w.len, &out), -1);
    rm_wbuf_free(&w);
}

/* Every truncation into the first 70 bytes is rejected. A hello of 70 to 77
 * bytes is an older peer's: valid, with no TCP segment sizes. */
static void test_hello_truncated(void **state)
{
    rm_hello_t in = sample_hello(), out;
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_hello_encode(&w, &in);
    for (size_t n = 0; n < 70; n++)
        assert_int_equal(hello_decode_exact(w.data, n, &out), -1);
    for (size_t n = 70; n < w.len; n++) {
        memset(&out, 0xff, sizeof(out));
        assert_int_equal(hello_decode_exact(w.data, n, &out), 0);
        assert_int_equal(out.tcp_segs_sent, 0);
        assert_int_equal(out.tcp_tx_seg, 0);
        assert_int_equal(out.tcp_rx_seg, 0);
        assert_int_equal(out.ucx_version, in.ucx_version);
    }
    rm_wbuf_free(&w);
}

/* ---------------------------------------------------------------- region desc */

static rm_region_desc_t sample_desc(const char *name, const uint8_t *rkey, uint32_t rkey_len)
{
    rm_region_desc_t d = {
        .region_id   = 0xa1a2a3a4u,
        .size        = 1ull << 40,
        .mem_type    = REMORA_MEM_HOST, /* GPU descriptors: test_desc_gpu */
        .access      = REMORA_ACCESS_READ | REMORA_ACCESS_WRITE,
        .flags       = 0, /* MAPPABLE descriptors: test_desc_mappable */
        .generation  = 42,
        .remote_addr = 0x00007f0012345000ull,
        .rkey_len    = rkey_len,
        .rkey        = rkey,
    };
    strcpy(d.name, name);
    return d;
}

/* Decodes one descriptor from exactly len bytes; returns r.failed, and the
 * bytes left in *left. The rkey pointer is checked to lie inside the buffer
 * and then cleared (the buffer is freed here). */
static int desc_decode_exact(const void *buf, size_t len, rm_region_desc_t *d, size_t *left)
{
    uint8_t *copy = dup_exact(buf, len);
    rm_rbuf_t r;

    rm_rbuf_init(&r, copy, len);
    rm_region_desc_decode(&r, d);
    if (!r.failed && d->rkey != NULL) {
        assert_true(d->rkey >= copy && d->rkey + d->rkey_len <= copy + len);
        assert_memory_equal(d->rkey, (const uint8_t *)buf + (d->rkey - copy), d->rkey_len);
        d->rkey = (const uint8_t *)buf + (d->rkey - copy);
    }
    free(copy);
    *left = r.left;
    return r.failed;
}

static void assert_desc_eq(const rm_region_desc_t *a, const rm_region_desc_t *b)
{
    assert_int_equal(a->region_id, b->region_id);
    assert_string_equal(a->name, b->name);
    assert_true(a->size == b->size);
    assert_int_equal(a->mem_type, b->mem_type);
    assert_int_equal(a->access, b->access);
    assert_int_equal(a->flags, b->flags);
    assert_true(a->generation == b->generation);
    assert_true(a->remote_addr == b->remote_addr);
    assert_int_equal(a->rkey_len, b->rkey_len);
    if (a->rkey_len)
        assert_memory_equal(a->rkey, b->rkey, a->rkey_len);
}

/* A descriptor without an rkey survives a round trip; its rkey is NULL. Its
 * encoding is the 39 + name-length bytes the list decoder counts on. */
static void test_desc_round_trip_no_rkey(void **state)
{
    rm_region_desc_t in = sample_desc("region/a", NULL, 0), out;
    rm_wbuf_t w;
    size_t left;

    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.len, 38 + strlen(in.name));
    assert_false(desc_decode_exact(w.data, w.len, &out, &left));
    assert_int_equal(left, 0);
    assert_desc_eq(&out, &in);
    assert_null(out.rkey);
    rm_wbuf_free(&w);
}

/* A descriptor with an rkey (up to RM_RKEY_MAX) survives a round trip, and
 * the decoded rkey points into the received buffer. */
static void test_desc_round_trip_rkey(void **state)
{
    static uint8_t rkey[RM_RKEY_MAX];
    const uint32_t lens[] = {1, 100, RM_RKEY_MAX};

    for (size_t i = 0; i < sizeof(rkey); i++)
        rkey[i] = (uint8_t)(i * 31 + 7);
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        rm_region_desc_t in = sample_desc("with-rkey", rkey, lens[k]), out;
        rm_wbuf_t w;
        size_t left;

        rm_wbuf_init(&w);
        rm_region_desc_encode(&w, &in);
        assert_false(desc_decode_exact(w.data, w.len, &out, &left));
        assert_int_equal(left, 0);
        assert_desc_eq(&out, &in);
        rm_wbuf_free(&w);
    }
}

/* Every truncation of a descriptor (with an rkey) fails. */
static void test_desc_truncated(void **state)
{
    static const uint8_t rkey[5] = {1, 2, 3, 4, 5};
    rm_region_desc_t in = sample_desc("t", rkey, sizeof(rkey)), out;
    rm_wbuf_t w;
    size_t left;

    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    for (size_t n = 0; n < w.len; n++)
        assert_true(desc_decode_exact(w.data, n, &out, &left));
    rm_wbuf_free(&w);
}

/* An rkey_len above RM_RKEY_MAX fails even when that many bytes follow, and
 * an rkey_len of UINT32_MAX with nothing behind it fails without a read. */
static void test_desc_rkey_too_long(void **state)
{
    static uint8_t rkey[RM_RKEY_MAX + 1];
    rm_region_desc_t in = sample_desc("big", rkey, RM_RKEY_MAX + 1), out;
    rm_wbuf_t w;
    size_t left;

    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.len, 38 + 3 + RM_RKEY_MAX + 1);
    assert_true(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);

    in = sample_desc("big", NULL, 0);
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    memset(w.data + w.len - 4, 0xff, 4); /* rkey_len = UINT32_MAX */
    assert_true(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);
}

/* A GPU region's descriptor carries its device and, with the IPC flag, the
 * CUDA IPC handle and offset; a host descriptor may not claim a handle. */
static void test_desc_gpu(void **state)
{
    rm_region_desc_t in = sample_desc("gpu", NULL, 0), out;
    rm_wbuf_t w;
    size_t left;

    in.mem_type = REMORA_MEM_CUDA;
    in.device   = 3;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.len, 38 + strlen(in.name) + 4);
    assert_false(desc_decode_exact(w.data, w.len, &out, &left));
    assert_int_equal(out.device, 3);
    rm_wbuf_free(&w);

    in.flags |= RM_REGION_WIRE_IPC;
    for (int i = 0; i < RM_IPC_HANDLE_LEN; i++)
        in.ipc[i] = (uint8_t)(i * 7 + 1);
    in.ipc_offset = 0x123456789ull;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.len, 38 + strlen(in.name) + 4 + RM_IPC_HANDLE_LEN + 8);
    assert_false(desc_decode_exact(w.data, w.len, &out, &left));
    assert_int_equal(left, 0);
    assert_memory_equal(out.ipc, in.ipc, RM_IPC_HANDLE_LEN);
    assert_int_equal(out.ipc_offset, in.ipc_offset);
    for (size_t cut = 0; cut < w.len; cut++) /* every truncation fails */
        assert_true(desc_decode_exact(w.data, cut, &out, &left));
    rm_wbuf_free(&w);

    in.device = -2; /* not a device ordinal */
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_true(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);

    in = sample_desc("host", NULL, 0); /* host memory with an IPC flag */
    in.flags |= RM_REGION_WIRE_IPC;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_true(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);
}

/* mem_type must be HOST or CUDA; access may only hold READ and WRITE. */
static void test_desc_enum_ranges(void **state)
{
    const size_t mem_off = 4 + 2 + 3 + 8; /* id, name "abc", size */
    rm_region_desc_t in = sample_desc("abc", NULL, 0), out;
    rm_wbuf_t w;
    size_t left;

    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.data[mem_off], REMORA_MEM_HOST);

    /* A host encoding read as CUDA lacks the device field: also rejected. */
    for (unsigned m = 0; m <= 255; m++) {
        w.data[mem_off] = (uint8_t)m;
        assert_int_equal(desc_decode_exact(w.data, w.len, &out, &left),
                         m == REMORA_MEM_HOST ? 0 : 1);
    }
    w.data[mem_off] = REMORA_MEM_HOST;
    for (unsigned a = 0; a <= 255; a++) {
        w.data[mem_off + 1] = (uint8_t)a;
        assert_int_equal(desc_decode_exact(w.data, w.len, &out, &left), a <= 3 ? 0 : 1);
    }
    rm_wbuf_free(&w);
}

/* A bad name inside a descriptor fails the descriptor. */
static void test_desc_bad_name(void **state)
{
    rm_region_desc_t in = sample_desc("abc", NULL, 0), out;
    rm_wbuf_t w;
    size_t left;

    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    w.data[4 + 2 + 1] = '\n';
    assert_true(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);
}

/* ---------------------------------------------------------------- list */

static int list_decode_exact(const void *buf, size_t len, rm_region_desc_t **d, size_t *n)
{
    uint8_t *copy = dup_exact(buf, len);
    int rc        = rm_list_decode(copy, len, d, n);
    free(copy);
    return rc;
}

static void encode_list(rm_wbuf_t *w, size_t count)
{
    rm_wbuf_init(w);
    rm_wbuf_u32(w, (uint32_t)count);
    for (size_t i = 0; i < count; i++) {
        char name[32];
        snprintf(name, sizeof(name), "region-%zu", i);
        rm_region_desc_t d = sample_desc(name, NULL, 0);
        d.region_id        = (uint32_t)i;
        d.access           = (uint8_t)(1 + i % 3);
        rm_region_desc_encode(w, &d);
    }
    assert_int_equal(w->failed, 0);
}

/* An empty list decodes to count 0 and a pointer the caller frees. */
static void test_list_empty(void **state)
{
    rm_region_desc_t *d = NULL;
    size_t n            = 99;
    rm_wbuf_t w;

    encode_list(&w, 0);
    assert_int_equal(w.len, 4);
    assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), 0);
    assert_int_equal(n, 0);
    assert_non_null(d);
    free(d);
    rm_wbuf_free(&w);
}

/* One and many descriptors come back in order with their fields. */
static void test_list_one_and_many(void **state)
{
    const size_t counts[] = {1, 2, 1000};

    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        rm_region_desc_t *d = NULL;
        size_t n            = 0;
        rm_wbuf_t w;

        encode_list(&w, counts[k]);
        assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), 0);
        assert_int_equal(n, counts[k]);
        for (size_t i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof(name), "region-%zu", i);
            assert_int_equal(d[i].region_id, i);
            assert_string_equal(d[i].name, name);
            assert_int_equal(d[i].access, 1 + i % 3);
            assert_true(d[i].generation == 42);
            assert_int_equal(d[i].rkey_len, 0);
        }
        free(d);
        rm_wbuf_free(&w);
    }
}

/* A count the body cannot hold is rejected before anything is allocated:
 * counts just above what fits, the protocol maximum + 1, UINT32_MAX, and a
 * body one byte short of count smallest descriptors. The outputs stay
 * untouched. */
static void test_list_count_too_large(void **state)
{
    const uint32_t counts[] = {2, 1000, RM_LIST_MAX + 1u, UINT32_MAX};
    rm_region_desc_t *d = (rm_region_desc_t *)(uintptr_t)0x1;
    size_t n            = 77;
    rm_wbuf_t w;

    encode_list(&w, 1);
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        w.data[0] = (uint8_t)counts[k];
        w.data[1] = (uint8_t)(counts[k] >> 8);
        w.data[2] = (uint8_t)(counts[k] >> 16);
        w.data[3] = (uint8_t)(counts[k] >> 24);
        calloc_reset();
        assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), -1);
        assert_int_equal(g_calloc_calls, 0);
        assert_ptr_equal(d, (rm_region_desc_t *)(uintptr_t)0x1);
        assert_int_equal(n, 77);
    }
    rm_wbuf_free(&w);

    /* Exactly one byte short of count * 39 (the smallest descriptor). */
    uint8_t body[4 + 10 * 39 - 1];
    memset(body, 0, sizeof(body));
    body[0] = 10;
    calloc_reset();
    assert_int_equal(list_decode_exact(body, sizeof(body), &d, &n), -1);
    assert_int_equal(g_calloc_calls, 0);
}

/* RM_LIST_MAX entries of the smallest size (39 bytes) decode; one more entry
 * is rejected even though the body holds it. The array allocated is sized
 * by the count, never more. */
static void test_list_max_boundary(void **state)
{
    rm_region_desc_t *d = NULL;
    size_t n            = 0;
    rm_wbuf_t w;

    for (uint32_t count = RM_LIST_MAX; count <= RM_LIST_MAX + 1u; count++) {
        rm_wbuf_init(&w);
        rm_wbuf_u32(&w, count);
        for (uint32_t i = 0; i < count; i++) {
            rm_region_desc_t e = sample_desc("x", NULL, 0);
            rm_region_desc_encode(&w, &e);
        }
        assert_int_equal(w.failed, 0);
        assert_int_equal(w.len, 4 + (size_t)count * 39);
        calloc_reset();
        if (count == RM_LIST_MAX) {
            assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), 0);
            assert_int_equal(n, RM_LIST_MAX);
            assert_string_equal(d[n - 1].name, "x");
            assert_int_equal(g_calloc_calls, 1);
            assert_int_equal(g_calloc_max_bytes, (size_t)count * sizeof(*d));
            free(d);
        } else {
            assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), -1);
            assert_int_equal(g_calloc_calls, 0);
        }
        rm_wbuf_free(&w);
    }
}

/* Trailing bytes after the last descriptor, a missing count and every
 * truncation of a two-entry list are rejected. */
static void test_list_trailing_and_truncated(void **state)
{
    rm_region_desc_t *d;
    size_t n;
    rm_wbuf_t w;

    encode_list(&w, 2);
    rm_wbuf_u8(&w, 0);
    assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), -1);
    w.len--;
    for (size_t len = 0; len < w.len; len++)
        assert_int_equal(list_decode_exact(w.data, len, &d, &n), -1);
    rm_wbuf_free(&w);

    encode_list(&w, 0);
    rm_wbuf_u8(&w, 0);
    assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), -1);
    rm_wbuf_free(&w);
}

/* A list whose second entry is malformed is rejected as a whole. */
static void test_list_bad_entry(void **state)
{
    rm_region_desc_t *d;
    size_t n;
    rm_wbuf_t w;

    encode_list(&w, 2);
    /* The second entry's mem_type: it ends with mem_type, access, flags (2),
     * generation (8), remote_addr (8), rkey_len (4). */
    assert_int_equal(w.data[w.len - 24], REMORA_MEM_HOST);
    w.data[w.len - 24] = 9;
    assert_int_equal(list_decode_exact(w.data, w.len, &d, &n), -1);
    rm_wbuf_free(&w);
}

/* ---------------------------------------------------------------- name body */

static int name_decode_exact(const void *buf, size_t len, char out[REMORA_NAME_MAX + 1])
{
    uint8_t *copy = dup_exact(buf, len);
    int rc        = rm_name_decode(copy, len, out);
    free(copy);
    return rc;
}

/* A name body round trips; one extra byte, or a bad name, is rejected. */
static void test_name_decode(void **state)
{
    char out[REMORA_NAME_MAX + 1];
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_wbuf_name(&w, "my region");
    assert_int_equal(name_decode_exact(w.data, w.len, out), 0);
    assert_string_equal(out, "my region");
    rm_wbuf_u8(&w, 'x');
    assert_int_equal(name_decode_exact(w.data, w.len, out), -1);
    rm_wbuf_free(&w);

    assert_int_equal(name_decode_exact("", 0, out), -1);
    assert_int_equal(name_decode_exact("\x00\x00", 2, out), -1);
    assert_int_equal(name_decode_exact("\x02\x00" "a", 3, out), -1);
    assert_int_equal(name_decode_exact("\x01\x00\x7f", 3, out), -1);
}

/* rm_name_valid: NULL and "" bad, 1 and 255 bytes fine, 256 bad, control
 * bytes and DEL anywhere bad, space fine. */
static void test_name_valid(void **state)
{
    char s[REMORA_NAME_MAX + 2];

    assert_false(rm_name_valid(NULL));
    assert_false(rm_name_valid(""));
    assert_true(rm_name_valid("a"));
    assert_true(rm_name_valid("with space/and.dots-1"));
    assert_false(rm_name_valid("\x01"));
    assert_false(rm_name_valid("a\tb"));
    assert_false(rm_name_valid("a\nb"));
    assert_false(rm_name_valid("ab\x7f"));

    memset(s, 'z', REMORA_NAME_MAX);
    s[REMORA_NAME_MAX] = '\0';
    assert_true(rm_name_valid(s));
    s[REMORA_NAME_MAX - 1] = '\x1f';
    assert_false(rm_name_valid(s));
    s[REMORA_NAME_MAX - 1] = 'z';
    s[REMORA_NAME_MAX]     = 'z';
    s[REMORA_NAME_MAX + 1] = '\0';
    assert_false(rm_name_valid(s));
}


/* ---------------------------------------------------------------- map fields */

/* A MAPPABLE host descriptor carries u32 map_pid, u32 map_fd, u64 map_offset
 * after the rkey (16 bytes more); they survive a round trip, every
 * truncation fails, and pid 0, pid or fd above INT32_MAX and a MAPPABLE GPU
 * descriptor are rejected. Without the flag nothing follows and the fields
 * decode as 0. */
static void test_desc_mappable(void **state)
{
    static const uint8_t rkey[3] = {9, 8, 7};
    static const uint8_t map_le[16] = {0x39, 0x30, 0, 0, 0x07, 0, 0, 0,
                                       0x00, 0x10, 0, 0, 0, 0, 0, 0};
    rm_region_desc_t in = sample_desc("mapped", rkey, sizeof(rkey)), out;
    rm_wbuf_t w;
    size_t left;

    in.flags      = RM_REGION_WIRE_MAPPABLE;
    in.map_pid    = 12345;
    in.map_fd     = 7;
    in.map_offset = 0x1000;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.len, 38 + strlen(in.name) + sizeof(rkey) + 16);
    assert_memory_equal(w.data + w.len - 16, map_le, sizeof(map_le));
    memset(&out, 0xa5, sizeof(out));
    assert_false(desc_decode_exact(w.data, w.len, &out, &left));
    assert_int_equal(left, 0);
    assert_desc_eq(&out, &in);
    assert_int_equal(out.map_pid, 12345);
    assert_int_equal(out.map_fd, 7);
    assert_true(out.map_offset == 0x1000);
    for (size_t cut = 0; cut < w.len; cut++)
        assert_true(desc_decode_exact(w.data, cut, &out, &left));
    rm_wbuf_free(&w);

    /* Without the flag: no map fields on the wire, zeros decoded. */
    in.flags = 0;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_int_equal(w.len, 38 + strlen(in.name) + sizeof(rkey));
    memset(&out, 0xa5, sizeof(out));
    assert_false(desc_decode_exact(w.data, w.len, &out, &left));
    assert_int_equal(out.map_pid, 0);
    assert_int_equal(out.map_fd, 0);
    assert_true(out.map_offset == 0);
    rm_wbuf_free(&w);

    /* Implausible map fields. */
    const struct { uint32_t pid, fd; } bad[] = {
        {0, 3}, {(uint32_t)INT32_MAX + 1u, 3}, {UINT32_MAX, 3}, {100, (uint32_t)INT32_MAX + 1u},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        in.flags   = RM_REGION_WIRE_MAPPABLE;
        in.map_pid = bad[k].pid;
        in.map_fd  = bad[k].fd;
        rm_wbuf_init(&w);
        rm_region_desc_encode(&w, &in);
        assert_true(desc_decode_exact(w.data, w.len, &out, &left));
        rm_wbuf_free(&w);
    }
    in.map_pid = (uint32_t)INT32_MAX; /* the largest accepted */
    in.map_fd  = (uint32_t)INT32_MAX;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_false(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);

    /* GPU memory is never mappable. */
    in.map_pid  = 100;
    in.map_fd   = 3;
    in.mem_type = REMORA_MEM_CUDA;
    in.device   = 0;
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &in);
    assert_true(desc_decode_exact(w.data, w.len, &out, &left));
    rm_wbuf_free(&w);
}

/* ---------------------------------------------------------------- boot frames */

static int boot_parse_exact(const void *buf, size_t len, rm_boot_frame_t *f, size_t *used,
                            uint8_t **copy_p)
{
    uint8_t *d = dup_exact(buf, len);
    int rc     = rm_boot_parse(d, len, f, used);
    *copy_p    = d; /* f->payload points into it; the caller frees it */
    return rc;
}

/* The 12-byte header, literally: "RMRB" LE, u16 version 2, type, flags, u32
 * length; then the payload. It parses back, pointing into the buffer. */
static void test_boot_encode_layout(void **state)
{
    static const uint8_t expect[] = {0x52, 0x4d, 0x52, 0x42, 2, 0, RM_BOOT_CONNECT, RM_BOOT_CM,
                                     5, 0, 0, 0, 'a', 'b', 'c', 'd', 'e'};
    rm_boot_frame_t f;
    rm_wbuf_t w;
    size_t used = 0;
    uint8_t *copy;

    rm_wbuf_init(&w);
    rm_boot_encode(&w, RM_BOOT_CONNECT, RM_BOOT_CM, "abcde", 5);
    assert_wbuf_eq(&w, expect, sizeof(expect));
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(used, sizeof(expect));
    assert_int_equal(f.type, RM_BOOT_CONNECT);
    assert_int_equal(f.flags, RM_BOOT_CM);
    assert_int_equal(f.len, 5);
    assert_ptr_equal(f.payload, copy + RM_BOOT_HDR_LEN);
    free(copy);
    rm_wbuf_free(&w);

    /* An empty frame (a heartbeat) is exactly the header. */
    static const uint8_t hb[] = {0x52, 0x4d, 0x52, 0x42, 2, 0, RM_BOOT_HEARTBEAT, 0, 0, 0, 0, 0};
    rm_wbuf_init(&w);
    rm_boot_encode(&w, RM_BOOT_HEARTBEAT, 0, NULL, 0);
    assert_wbuf_eq(&w, hb, sizeof(hb));
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(used, RM_BOOT_HDR_LEN);
    assert_int_equal(f.len, 0);
    free(copy);
    rm_wbuf_free(&w);
}

/* Every type 1..7 round-trips; only CONNECT and CONNECT_REPLY may carry
 * RM_BOOT_CM; types 0 and 8..255 are rejected; so are a wrong version, any
 * unknown flag bit and a length above RM_BOOT_PAYLOAD_MAX. */
static void test_boot_types_flags(void **state)
{
    rm_boot_frame_t f;
    size_t used;
    uint8_t *copy;
    rm_wbuf_t w;

    for (unsigned t = 0; t <= 255; t++) {
        for (unsigned fl = 0; fl <= 255; fl++) {
            int ok = t >= 1 && t <= RM_BOOT_TYPE_MAX &&
                     (fl == 0 || (fl == RM_BOOT_CM && (t == RM_BOOT_CONNECT ||
                                                       t == RM_BOOT_CONNECT_REPLY)));
            rm_wbuf_init(&w);
            rm_boot_encode(&w, t, fl, "xy", 2);
            assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), ok ? 0 : -1);
            if (ok) {
                assert_int_equal(f.type, t);
                assert_int_equal(f.flags, fl);
                assert_int_equal(used, RM_BOOT_HDR_LEN + 2);
            }
            free(copy);
            rm_wbuf_free(&w);
        }
    }
    for (unsigned v = 0; v < 8; v++) { /* only version 2 */
        rm_wbuf_init(&w);
        rm_boot_encode(&w, RM_BOOT_HELLO, 0, NULL, 0);
        w.data[4] = (uint8_t)v;
        assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), v == 2 ? 0 : -1);
        free(copy);
        w.data[4] = 2;
        w.data[5] = 1; /* version 258 */
        assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), -1);
        free(copy);
        rm_wbuf_free(&w);
    }
}

/* Length: RM_BOOT_PAYLOAD_MAX (65540) is the largest accepted; a header
 * announcing more is rejected at once, before its payload arrives; one
 * announcing up to the maximum asks for more bytes until all are in. */
static void test_boot_length_bounds(void **state)
{
    const uint32_t lens[] = {RM_BOOT_PAYLOAD_MAX + 1u, 1u << 20, UINT32_MAX};
    rm_boot_frame_t f;
    size_t used;
    uint8_t *copy;
    rm_wbuf_t w;
    uint8_t *big = calloc(1, RM_BOOT_PAYLOAD_MAX);

    assert_int_equal(RM_BOOT_PAYLOAD_MAX, 65540);
    assert_non_null(big);
    rm_wbuf_init(&w);
    rm_boot_encode(&w, RM_BOOT_CONNECT, 0, big, RM_BOOT_PAYLOAD_MAX);
    assert_int_equal(w.len, RM_BOOT_HDR_LEN + RM_BOOT_PAYLOAD_MAX);
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(f.len, RM_BOOT_PAYLOAD_MAX);
    free(copy);
    assert_int_equal(boot_parse_exact(w.data, w.len - 1, &f, &used, &copy), 1);
    free(copy);
    rm_wbuf_free(&w);
    free(big);

    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        rm_wbuf_init(&w);
        rm_boot_encode(&w, RM_BOOT_CONNECT, 0, NULL, 0);
        w.data[8]  = (uint8_t)lens[k];
        w.data[9]  = (uint8_t)(lens[k] >> 8);
        w.data[10] = (uint8_t)(lens[k] >> 16);
        w.data[11] = (uint8_t)(lens[k] >> 24);
        assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), -1);
        free(copy);
        rm_wbuf_free(&w);
    }
}

/* Incremental parsing: every prefix of a valid frame needs more bytes (1);
 * a wrong magic byte is rejected as soon as it arrives, before the header
 * is complete; bytes after a frame are left for the next call. */
static void test_boot_prefixes_and_magic(void **state)
{
    rm_boot_frame_t f;
    size_t used;
    uint8_t *copy;
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_boot_encode(&w, RM_BOOT_AUTH, 0, "0123456789abcdef0123456789abcdef", RM_MAC_LEN);
    rm_boot_encode(&w, RM_BOOT_HEARTBEAT, 0, NULL, 0);
    for (size_t n = 0; n < RM_BOOT_HDR_LEN + RM_MAC_LEN; n++) {
        assert_int_equal(boot_parse_exact(w.data, n, &f, &used, &copy), 1);
        free(copy);
    }
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(used, RM_BOOT_HDR_LEN + RM_MAC_LEN);
    assert_int_equal(f.type, RM_BOOT_AUTH);
    free(copy);
    assert_int_equal(boot_parse_exact(w.data + used, w.len - used, &f, &used, &copy), 0);
    assert_int_equal(f.type, RM_BOOT_HEARTBEAT);
    free(copy);

    for (size_t i = 0; i < 4; i++) {
        w.data[i] ^= 0x20;
        for (size_t n = i + 1; n <= RM_BOOT_HDR_LEN; n++) {
            assert_int_equal(boot_parse_exact(w.data, n, &f, &used, &copy), -1);
            free(copy);
        }
        w.data[i] ^= 0x20;
    }
    /* The old "RMRA" hello magic is not a frame. */
    assert_int_equal(boot_parse_exact("RMRA", 4, &f, &used, &copy), -1);
    free(copy);
    rm_wbuf_free(&w);
}

/* Replies: the length counts the i32 status; reply_split gives the status
 * and the rest; a reply payload under 4 bytes does not split. */
static void test_boot_reply(void **state)
{
    static const uint8_t expect[] = {0x52, 0x4d, 0x52, 0x42, 2, 0, RM_BOOT_HELLO_REPLY, 0,
                                     7, 0, 0, 0, 0xee, 0xff, 0xff, 0xff, 'x', 'y', 'z'};
    rm_boot_frame_t f;
    remora_status_t st;
    const uint8_t *rest;
    uint32_t rest_len;
    size_t used;
    uint8_t *copy;
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_boot_reply_encode(&w, RM_BOOT_HELLO_REPLY, 0, REMORA_ERR_VERSION, "xyz", 3);
    assert_wbuf_eq(&w, expect, sizeof(expect));
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(rm_boot_reply_split(&f, &st, &rest, &rest_len), 0);
    assert_int_equal(st, REMORA_ERR_VERSION);
    assert_int_equal(rest_len, 3);
    assert_memory_equal(rest, "xyz", 3);
    free(copy);
    rm_wbuf_free(&w);

    /* Status only. */
    rm_wbuf_init(&w);
    rm_boot_reply_encode(&w, RM_BOOT_AUTH_REPLY, 0, REMORA_ERR_AUTH, NULL, 0);
    assert_int_equal(w.len, RM_BOOT_HDR_LEN + 4);
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(rm_boot_reply_split(&f, &st, &rest, &rest_len), 0);
    assert_int_equal(st, REMORA_ERR_AUTH);
    assert_int_equal(rest_len, 0);
    free(copy);
    rm_wbuf_free(&w);

    /* The CM flag on a CONNECT_REPLY with a u16 port. */
    rm_wbuf_init(&w);
    rm_boot_reply_encode(&w, RM_BOOT_CONNECT_REPLY, RM_BOOT_CM, REMORA_OK, "\x39\x30", 2);
    assert_int_equal(boot_parse_exact(w.data, w.len, &f, &used, &copy), 0);
    assert_int_equal(f.flags, RM_BOOT_CM);
    assert_int_equal(rm_boot_reply_split(&f, &st, &rest, &rest_len), 0);
    assert_int_equal(st, REMORA_OK);
    assert_int_equal(rest_len, 2);
    free(copy);
    rm_wbuf_free(&w);

    for (uint32_t n = 0; n < 4; n++) {
        rm_boot_frame_t s = {.type = RM_BOOT_AUTH_REPLY, .payload = (const uint8_t *)"abc",
                             .len = n};
        st = 12345;
        assert_int_equal(rm_boot_reply_split(&s, &st, &rest, &rest_len), -1);
        assert_int_equal(st, 12345);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_round_trip_every_type),
        cmocka_unit_test(test_signal_wire),
        cmocka_unit_test(test_ring_wait_push_bit),
        cmocka_unit_test(test_hdr_read_layout_literal),
        cmocka_unit_test(test_hdr_event_layout_literal),
        cmocka_unit_test(test_hdr_rejects_every_truncation),
        cmocka_unit_test(test_hdr_rejects_longer),
        cmocka_unit_test(test_hdr_rejects_bad_type),
        cmocka_unit_test(test_hdr_sock_roundtrip),
        cmocka_unit_test(test_hdr_rejects_bad_version),
        cmocka_unit_test(test_hdr_rejects_bad_event_kind),
        cmocka_unit_test(test_hdr_rw_kind),
        cmocka_unit_test(test_msg_type_name),
        cmocka_unit_test(test_wbuf_little_endian_literal),
        cmocka_unit_test(test_wbuf_grows),
        cmocka_unit_test(test_rbuf_little_endian_literal),
        cmocka_unit_test(test_rbuf_past_end_fails),
        cmocka_unit_test(test_rbuf_name_ok),
        cmocka_unit_test(test_rbuf_name_rejects),
        cmocka_unit_test(test_hello_round_trip),
        cmocka_unit_test(test_hello_trailing_allowed),
        cmocka_unit_test(test_hello_bad_magic),
        cmocka_unit_test(test_hello_min_above_max),
        cmocka_unit_test(test_hello_truncated),
        cmocka_unit_test(test_desc_round_trip_no_rkey),
        cmocka_unit_test(test_desc_gpu),
        cmocka_unit_test(test_desc_round_trip_rkey),
        cmocka_unit_test(test_desc_truncated),
        cmocka_unit_test(test_desc_rkey_too_long),
        cmocka_unit_test(test_desc_enum_ranges),
        cmocka_unit_test(test_desc_bad_name),
        cmocka_unit_test(test_list_empty),
        cmocka_unit_test(test_list_one_and_many),
        cmocka_unit_test(test_list_count_too_large),
        cmocka_unit_test(test_list_max_boundary),
        cmocka_unit_test(test_list_trailing_and_truncated),
        cmocka_unit_test(test_list_bad_entry),
        cmocka_unit_test(test_name_decode),
        cmocka_unit_test(test_name_valid),
        cmocka_unit_test(test_desc_mappable),
        cmocka_unit_test(test_boot_encode_layout),
        cmocka_unit_test(test_boot_types_flags),
        cmocka_unit_test(test_boot_length_bounds),
        cmocka_unit_test(test_boot_prefixes_and_magic),
        cmocka_unit_test(test_boot_reply),
        cmocka_unit_test(test_stats_roundtrip),
        cmocka_unit_test(test_stats_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
