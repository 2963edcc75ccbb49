/* SPDX-License-Identifier: BSD-3-Clause */
#include "wire/wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RM_HDR_VERSION 1u
#define RM_HDR_COMMON  16u

/* ------------------------------------------------------------- LE helpers */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)v); put16(p + 2, (uint16_t)(v >> 16)); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) { return get16(p) | ((uint32_t)get16(p + 2) << 16); }
static uint64_t get64(const uint8_t *p) { return get32(p) | ((uint64_t)get32(p + 4) << 32); }

/* ------------------------------------------------------------- header */

static size_t hdr_len_for(unsigned type)
{
    switch (type) {
    case RM_MSG_READ:
    case RM_MSG_WRITE:
    case RM_MSG_SIGNAL:
    case RM_MSG_WRITE_SIGNAL:
    case RM_MSG_RING_WAIT: return RM_HDR_COMMON + 24;
    case RM_MSG_RING_NOTIFY:
    case RM_MSG_EVENT:     return RM_HDR_COMMON + 32;
    case RM_MSG_EVENT_ACK: return RM_HDR_COMMON + 8;
    default:               return RM_MSG_IS_SOCK(type) ? RM_HDR_COMMON + 24 : RM_HDR_COMMON;
    }
}

size_t rm_hdr_fixed_len(unsigned type) { return hdr_len_for(type); }

size_t rm_hdr_encode(const rm_hdr_t *hdr, uint8_t *buf)
{
    size_t len = hdr_len_for(hdr->type);

    memset(buf, 0, len);
    buf[0] = hdr->type;
    buf[1] = RM_HDR_VERSION;
    put32(buf + 4, (uint32_t)hdr->status);
    put64(buf + 8, hdr->req_id);
    switch (hdr->type) {
    case RM_MSG_READ:
    case RM_MSG_WRITE:
    case RM_MSG_SIGNAL:
    case RM_MSG_WRITE_SIGNAL:
    case RM_MSG_RING_WAIT:
    case RM_MSG_RING_NOTIFY:
        put32(buf + 16, hdr->region_id);
        if (hdr->type != RM_MSG_RING_NOTIFY)
            buf[20] = hdr->kind;
        put64(buf + 24, hdr->offset);
        put64(buf + 32, hdr->length);
        if (hdr->type == RM_MSG_RING_NOTIFY)
            put64(buf + 40, hdr->size);
        break;
    case RM_MSG_EVENT:
        put32(buf + 16, hdr->region_id);
        buf[20] = hdr->kind;
        put64(buf + 24, hdr->generation);
        put64(buf + 32, hdr->size);
        put64(buf + 40, hdr->epoch);
        break;
    case RM_MSG_EVENT_ACK:
        put64(buf + 16, hdr->epoch);
        break;
    default:
        if (RM_MSG_IS_SOCK(hdr->type)) {
            put32(buf + 16, hdr->region_id);
            buf[20] = hdr->kind;
            put64(buf + 24, hdr->offset);
            put64(buf + 32, hdr->length);
        }
        break;
    }
    if (hdr->sealed) {
        buf[2] = RM_HDR_FLAG_SEALED;
        put64(buf + len, hdr->seal_counter);
        memcpy(buf + len + 8, hdr->seal_tag, RM_SEAL_TAG_LEN);
        len += RM_HDR_SEAL_EXT;
    }
    return len;
}

int rm_hdr_decode(const void *data, size_t len, rm_hdr_t *hdr)
{
    const uint8_t *buf = data;

    size_t fixed;

    if (len < RM_HDR_COMMON || buf[0] == 0 ||
        (buf[0] > RM_MSG_TYPE_MAX && !RM_MSG_IS_SOCK(buf[0]) && !RM_MSG_IS_STATS(buf[0])) || buf[1] != RM_HDR_VERSION)
        return -1;
    fixed = hdr_len_for(buf[0]);
    if (len != fixed + ((buf[2] & RM_HDR_FLAG_SEALED) ? RM_HDR_SEAL_EXT : 0))
        return -1;
    memset(hdr, 0, sizeof(*hdr));
    if (buf[2] & RM_HDR_FLAG_SEALED) {
        hdr->sealed       = 1;
        hdr->seal_counter = get64(buf + fixed);
        memcpy(hdr->seal_tag, buf + fixed + 8, RM_SEAL_TAG_LEN);
    }
    hdr->type   = buf[0];
    hdr->status = (int32_t)get32(buf + 4);
    hdr->req_id = get64(buf + 8);
    switch (hdr->type) {
    case RM_MSG_READ:
    case RM_MSG_WRITE:
    case RM_MSG_SIGNAL:
    case RM_MSG_WRITE_SIGNAL:
    case RM_MSG_RING_WAIT:
    case RM_MSG_RING_NOTIFY:
        hdr->region_id = get32(buf + 16);
        if (hdr->type != RM_MSG_RING_NOTIFY)
            hdr->kind = buf[20]; /* READ/WRITE: RM_RW_STAGED; other bits ignored */
        if (hdr->type == RM_MSG_SIGNAL && hdr->kind != RM_SIG_SET && hdr->kind != RM_SIG_ADD)
            return -1;
        hdr->offset    = get64(buf + 24);
        hdr->length    = get64(buf + 32);
        if (hdr->type == RM_MSG_RING_NOTIFY)
            hdr->size = get64(buf + 40);
        if (hdr->type == RM_MSG_RING_WAIT && RM_RING_MODE(hdr->kind) != RM_RING_EVERY &&
            RM_RING_MODE(hdr->kind) != RM_RING_LATEST)
            return -1;
        break;
    case RM_MSG_EVENT:
        hdr->region_id  = get32(buf + 16);
        hdr->kind       = buf[20];
        hdr->generation = get64(buf + 24);
        hdr->size       = get64(buf + 32);
        hdr->epoch      = get64(buf + 40);
        if (hdr->kind != RM_EVENT_CHANGED && hdr->kind != RM_EVENT_REMOVED)
            return -1;
        break;
    case RM_MSG_EVENT_ACK:
        hdr->epoch = get64(buf + 16);
        break;
    default:
        if (RM_MSG_IS_SOCK(hdr->type)) {
            hdr->region_id = get32(buf + 16);
            hdr->kind      = buf[20];
            hdr->offset    = get64(buf + 24);
            hdr->length    = get64(buf + 32);
        }
        break;
    }
    return 0;
}

const char *rm_msg_type_name(unsigned type)
{
    static const char *names[] = {
        "?", "HELLO", "HELLO_REPLY", "AUTH", "AUTH_REPLY", "LIST", "LIST_REPLY",
        "LOOKUP", "LOOKUP_REPLY", "READ", "READ_REPLY", "WRITE", "WRITE_REPLY",
        "PING", "PONG", "EVENT", "EVENT_ACK", "ERROR", "RING_WAIT", "RING_NOTIFY",
        "LANES", "LANES_REPLY", "SIGNAL", "SIGNAL_REPLY", "WRITE_SIGNAL"};
    static const char *sock_names[] = {"SOCK_CONNECT", "SOCK_CONNECT_REPLY", "SOCK_DATA",
                                       "SOCK_FIN", "SOCK_CREDIT"};
    if (RM_MSG_IS_SOCK(type))
        return sock_names[type - RM_MSG_SOCK_FIRST];
    if (RM_MSG_IS_STATS(type))
        return type == RM_MSG_STATS ? "STATS" : "STATS_REPLY";
    return type <= RM_MSG_TYPE_MAX ? names[type] : "?";
}

/* ------------------------------------------------------------- writer */

void rm_wbuf_init(rm_wbuf_t *w) { memset(w, 0, sizeof(*w)); }

void rm_wbuf_free(rm_wbuf_t *w)
{
    if (w == NULL)
        return;
    free(w->data);
    rm_wbuf_init(w);
}

static uint8_t *wbuf_reserve(rm_wbuf_t *w, size_t n)
{
    if (w->failed)
        return NULL;
    if (n > SIZE_MAX / 2 - w->len) { /* doubling below could wrap */
        w->failed = 1;
        return NULL;
    }
    if (w->cap - w->len < n) {
        size_t cap = w->cap ? w->cap : 64;
        while (cap - w->len < n)
            cap *= 2;
        uint8_t *d = realloc(w->data, cap);
        if (d == NULL) {
            w->failed = 1;
            return NULL;
        }
        w->data = d;
        w->cap  = cap;
    }
    w->len += n;
    return w->data + w->len - n;
}

void rm_wbuf_u8(rm_wbuf_t *w, uint8_t v)
{
    uint8_t *p = wbuf_reserve(w, 1);
    if (p) *p = v;
}
void rm_wbuf_u16(rm_wbuf_t *w, uint16_t v)
{
    uint8_t *p = wbuf_reserve(w, 2);
    if (p) put16(p, v);
}
void rm_wbuf_u32(rm_wbuf_t *w, uint32_t v)
{
    uint8_t *p = wbuf_reserve(w, 4);
    if (p) put32(p, v);
}
void rm_wbuf_u64(rm_wbuf_t *w, uint64_t v)
{
    uint8_t *p = wbuf_reserve(w, 8);
    if (p) put64(p, v);
}
void rm_wbuf_bytes(rm_wbuf_t *w, const void *src, size_t n)
{
    uint8_t *p = wbuf_reserve(w, n);
    if (p && n) memcpy(p, src, n);
}
void rm_wbuf_name(rm_wbuf_t *w, const char *name)
{
    size_t n = strlen(name);
    rm_wbuf_u16(w, (uint16_t)n);
    rm_wbuf_bytes(w, name, n);
}

/* ------------------------------------------------------------- reader */

void rm_rbuf_init(rm_rbuf_t *r, const void *data, size_t len)
{
    r->p      = data;
    r->left   = data ? len : 0;
    r->failed = 0;
}

const uint8_t *rm_rbuf_bytes(rm_rbuf_t *r, size_t n)
{
    if (r->failed || r->left < n) {
        r->failed = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

uint8_t rm_rbuf_u8(rm_rbuf_t *r)
{
    const uint8_t *p = rm_rbuf_bytes(r, 1);
    return p ? p[0] : 0;
}
uint16_t rm_rbuf_u16(rm_rbuf_t *r)
{
    const uint8_t *p = rm_rbuf_bytes(r, 2);
    return p ? get16(p) : 0;
}
uint32_t rm_rbuf_u32(rm_rbuf_t *r)
{
    const uint8_t *p = rm_rbuf_bytes(r, 4);
    return p ? get32(p) : 0;
}
uint64_t rm_rbuf_u64(rm_rbuf_t *r)
{
    const uint8_t *p = rm_rbuf_bytes(r, 8);
    return p ? get64(p) : 0;
}

static int name_bytes_valid(const uint8_t *s, size_t n)
{
    if (n == 0 || n > REMORA_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

int rm_name_valid(const char *name)
{
    return name != NULL && name_bytes_valid((const uint8_t *)name, strnlen(name, REMORA_NAME_MAX + 1));
}

void rm_rbuf_name(rm_rbuf_t *r, char out[REMORA_NAME_MAX + 1])
{
    uint16_t n       = rm_rbuf_u16(r);
    const uint8_t *s = rm_rbuf_bytes(r, n);

    out[0] = '\0';
    if (s == NULL || !name_bytes_valid(s, n)) {
        r->failed = 1;
        return;
    }
    memcpy(out, s, n);
    out[n] = '\0';
}

/* ------------------------------------------------------------- bodies */

void rm_hello_encode(rm_wbuf_t *w, const rm_hello_t *h)
{
    rm_wbuf_u32(w, RM_HELLO_MAGIC);
    rm_wbuf_u16(w, h->proto_min);
    rm_wbuf_u16(w, h->proto_max);
    rm_wbuf_u16(w, h->flags);
    rm_wbuf_bytes(w, h->host_id, RM_HOST_ID_LEN);
    rm_wbuf_bytes(w, h->nonce, RM_NONCE_LEN);
    rm_wbuf_u64(w, h->instance);
    rm_wbuf_u32(w, h->ucx_version);
    rm_wbuf_u32(w, h->tcp_tx_seg);
    rm_wbuf_u32(w, h->tcp_rx_seg);
}

int rm_hello_decode(const void *buf, size_t len, rm_hello_t *h)
{
    rm_rbuf_t r;
    const uint8_t *p;

    rm_rbuf_init(&r, buf, len);
    if (rm_rbuf_u32(&r) != RM_HELLO_MAGIC)
        return -1;
    h->proto_min = rm_rbuf_u16(&r);
    h->proto_max = rm_rbuf_u16(&r);
    h->flags     = rm_rbuf_u16(&r);
    if ((p = rm_rbuf_bytes(&r, RM_HOST_ID_LEN)) != NULL)
        memcpy(h->host_id, p, RM_HOST_ID_LEN);
    if ((p = rm_rbuf_bytes(&r, RM_NONCE_LEN)) != NULL)
        memcpy(h->nonce, p, RM_NONCE_LEN);
    h->instance    = rm_rbuf_u64(&r);
    h->ucx_version = rm_rbuf_u32(&r);
    h->tcp_segs_sent = !r.failed && r.left >= 8;
    h->tcp_tx_seg    = h->tcp_segs_sent ? rm_rbuf_u32(&r) : 0;
    h->tcp_rx_seg    = h->tcp_segs_sent ? rm_rbuf_u32(&r) : 0;
    /* Trailing bytes are allowed: a later version may append fields. */
    return r.failed || h->proto_min > h->proto_max ? -1 : 0;
}

void rm_region_desc_encode(rm_wbuf_t *w, const rm_region_desc_t *d)
{
    rm_wbuf_u32(w, d->region_id);
    rm_wbuf_name(w, d->name);
    rm_wbuf_u64(w, d->size);
    rm_wbuf_u8(w, d->mem_type);
    rm_wbuf_u8(w, d->access);
    rm_wbuf_u16(w, d->flags);
    rm_wbuf_u64(w, d->generation);
    rm_wbuf_u64(w, d->remote_addr);
    rm_wbuf_u32(w, d->rkey_len);
    rm_wbuf_bytes(w, d->rkey, d->rkey_len);
    if (d->flags & RM_REGION_WIRE_MAPPABLE) {
        rm_wbuf_u32(w, d->map_pid);
        rm_wbuf_u32(w, d->map_fd);
        rm_wbuf_u64(w, d->map_offset);
    }
    if (d->mem_type == REMORA_MEM_CUDA) {
        rm_wbuf_u32(w, (uint32_t)d->device);
        if (d->flags & RM_REGION_WIRE_IPC) {
            rm_wbuf_bytes(w, d->ipc, RM_IPC_HANDLE_LEN);
            rm_wbuf_u64(w, d->ipc_offset);
        }
    }
}

void rm_region_desc_decode(rm_rbuf_t *r, rm_region_desc_t *d)
{
    d->region_id = rm_rbuf_u32(r);
    rm_rbuf_name(r, d->name);
    d->size        = rm_rbuf_u64(r);
    d->mem_type    = rm_rbuf_u8(r);
    d->access      = rm_rbuf_u8(r);
    d->flags       = rm_rbuf_u16(r);
    d->generation  = rm_rbuf_u64(r);
    d->remote_addr = rm_rbuf_u64(r);
    d->rkey_len    = rm_rbuf_u32(r);
    if (d->rkey_len > RM_RKEY_MAX)
        r->failed = 1;
    d->rkey = d->rkey_len && !r->failed ? rm_rbuf_bytes(r, d->rkey_len) : NULL;
    d->map_pid = d->map_fd = 0;
    d->map_offset = 0;
    if (d->flags & RM_REGION_WIRE_MAPPABLE) {
        d->map_pid    = rm_rbuf_u32(r);
        d->map_fd     = rm_rbuf_u32(r);
        d->map_offset = rm_rbuf_u64(r);
        if (d->map_pid == 0 || d->map_pid > INT32_MAX || d->map_fd > INT32_MAX ||
            d->mem_type != REMORA_MEM_HOST)
            r->failed = 1;
    }
    d->device = -1;
    if (d->mem_type == REMORA_MEM_CUDA) {
        d->device = (int32_t)rm_rbuf_u32(r);
        if (d->flags & RM_REGION_WIRE_IPC) {
            const uint8_t *h = rm_rbuf_bytes(r, RM_IPC_HANDLE_LEN);
            if (h)
                memcpy(d->ipc, h, RM_IPC_HANDLE_LEN);
            d->ipc_offset = rm_rbuf_u64(r);
        }
        if (d->device < 0 || d->device > 4096)
            r->failed = 1;
    } else if (d->flags & RM_REGION_WIRE_IPC) {
        r->failed = 1;
    }
    if (d->mem_type > REMORA_MEM_CUDA ||
        (d->access & ~(unsigned)(REMORA_ACCESS_READ | REMORA_ACCESS_WRITE)) != 0)
        r->failed = 1;
}

int rm_list_decode(const void *buf, size_t len, rm_region_desc_t **descs_p, size_t *count_p)
{
    rm_rbuf_t r;
    rm_region_desc_t *descs;
    uint32_t count;

    rm_rbuf_init(&r, buf, len);
    count = rm_rbuf_u32(&r);
    /* Each descriptor takes at least 39 bytes: reject counts the body cannot hold. */
    if (r.failed || count > RM_LIST_MAX || (size_t)count * 39u > r.left)
        return -1;
    descs = calloc(count ? count : 1, sizeof(*descs));
    if (descs == NULL)
        return -1;
    for (uint32_t i = 0; i < count && !r.failed; i++)
        rm_region_desc_decode(&r, &descs[i]);
    if (r.failed || r.left != 0) {
        free(descs);
        return -1;
    }
    *descs_p = descs;
    *count_p = count;
    return 0;
}

int rm_name_decode(const void *buf, size_t len, char out[REMORA_NAME_MAX + 1])
{
    rm_rbuf_t r;

    rm_rbuf_init(&r, buf, len);
    rm_rbuf_name(&r, out);
    return r.failed || r.left != 0 ? -1 : 0;
}

/* ------------------------------------------------------------- lanes */

void rm_lanes_encode(rm_wbuf_t *w, const uint16_t *ports, unsigned count)
{
    rm_wbuf_u16(w, (uint16_t)count);
    for (unsigned i = 0; i < count; i++)
        rm_wbuf_u16(w, ports[i]);
}

int rm_lanes_decode(const void *buf, size_t len, uint16_t ports[RM_LANES_MAX - 1],
                    unsigned *count_p)
{
    rm_rbuf_t r;
    unsigned count;

    rm_rbuf_init(&r, buf, len);
    count = rm_rbuf_u16(&r);
    if (r.failed || count >= RM_LANES_MAX || r.left != 2u * count)
        return -1;
    for (unsigned i = 0; i < count; i++)
        if ((ports[i] = rm_rbuf_u16(&r)) == 0)
            return -1;
    *count_p = count;
    return 0;
}

/* ------------------------------------------------------------- bootstrap */

void rm_boot_encode(rm_wbuf_t *w, unsigned type, unsigned flags, const void *payload,
                    uint32_t len)
{
    rm_wbuf_u32(w, RM_BOOT_MAGIC);
    rm_wbuf_u16(w, RM_BOOT_VERSION);
    rm_wbuf_u8(w, (uint8_t)type);
    rm_wbuf_u8(w, (uint8_t)flags);
    rm_wbuf_u32(w, len);
    rm_wbuf_bytes(w, payload, len);
}

void rm_boot_reply_encode(rm_wbuf_t *w, unsigned type, unsigned flags, remora_status_t status,
                          const void *payload, uint32_t len)
{
    rm_boot_encode(w, type, flags, NULL, 0);
    if (w->failed || w->len < RM_BOOT_HDR_LEN)
        return;
    put32(w->data + w->len - 4, 4 + len); /* the length field, status included */
    rm_wbuf_u32(w, (uint32_t)status);
    rm_wbuf_bytes(w, payload, len);
}

int rm_boot_reply_split(const rm_boot_frame_t *f, remora_status_t *status_p,
                        const uint8_t **rest_p, uint32_t *rest_len_p)
{
    if (f->len < 4)
        return -1;
    *status_p   = (remora_status_t)(int32_t)get32(f->payload);
    *rest_p     = f->payload + 4;
    *rest_len_p = f->len - 4;
    return 0;
}

/* Which flags a frame type may carry. */
static unsigned boot_flags_allowed(unsigned type)
{
    return type == RM_BOOT_CONNECT || type == RM_BOOT_CONNECT_REPLY ? RM_BOOT_CM : 0;
}

int rm_boot_parse(const void *data, size_t len, rm_boot_frame_t *f, size_t *used_p)
{
    const uint8_t *buf = data;
    uint32_t plen;
    unsigned type, flags;

    /* Reject a wrong magic as soon as its bytes are in, so garbage is cut short. */
    for (size_t i = 0; i < len && i < 4; i++)
        if (buf[i] != (uint8_t)(RM_BOOT_MAGIC >> (8 * i)))
            return -1;
    if (len < RM_BOOT_HDR_LEN)
        return 1;
    type  = buf[6];
    flags = buf[7];
    plen  = get32(buf + 8);
    if (get16(buf + 4) != RM_BOOT_VERSION || type == 0 || type > RM_BOOT_TYPE_MAX ||
        (flags & ~boot_flags_allowed(type)) != 0 || plen > RM_BOOT_PAYLOAD_MAX)
        return -1;
    if (len - RM_BOOT_HDR_LEN < plen)
        return 1;
    f->type    = (uint8_t)type;
    f->flags   = (uint8_t)flags;
    f->payload = buf + RM_BOOT_HDR_LEN;
    f->len     = plen;
    *used_p    = RM_BOOT_HDR_LEN + plen;
    return 0;
}

/* ------------------------------------------------------------- signals */

void rm_sig_desc_encode(uint8_t out[RM_SIG_DESC_LEN], const rm_sig_desc_t *d)
{
    memset(out, 0, RM_SIG_DESC_LEN);
    put32(out, d->region_id);
    out[4] = d->op;
    put64(out + 8, d->index);
    put64(out + 16, d->value);
}

int rm_sig_desc_decode(const void *buf, size_t len, rm_sig_desc_t *d)
{
    const uint8_t *p = buf;

    if (buf == NULL || len < RM_SIG_DESC_LEN || (p[4] != RM_SIG_SET && p[4] != RM_SIG_ADD) ||
        p[5] || p[6] || p[7])
        return -1;
    d->region_id = get32(p);
    d->op        = p[4];
    d->index     = get64(p + 8);
    d->value     = get64(p + 16);
    return 0;
}

/* ------------------------------------------------------------- stats */

static void stats_values(rm_wbuf_t *w, uint64_t mask, const uint64_t v[64], int peer_bit,
                         const char *peer)
{
    rm_wbuf_u64(w, mask);
    for (unsigned b = 0; b < 64; b++) {
        if (!(mask & (1ull << b)))
            continue;
        if (peer_bit && b == RM_STATS_PEER_BIT) {
            size_t n = strnlen(peer, RM_STATS_PEER_MAX);
            rm_wbuf_u16(w, (uint16_t)n);
            rm_wbuf_bytes(w, peer, n);
        } else {
            rm_wbuf_u64(w, v[b]);
        }
    }
}

void rm_stats_encode_server(rm_wbuf_t *w, uint64_t mask, const uint64_t v[64])
{
    stats_values(w, mask, v, 0, NULL);
}

void rm_stats_encode_conn(rm_wbuf_t *w, const rm_stats_conn_t *c)
{
    stats_values(w, c->mask, c->v, 1, c->peer);
}

static void stats_read(rm_rbuf_t *r, uint64_t *mask_p, uint64_t v[64], char *peer)
{
    uint64_t mask = rm_rbuf_u64(r);

    for (unsigned b = 0; b < 64 && !r->failed; b++) {
        if (!(mask & (1ull << b)))
            continue;
        if (peer && b == RM_STATS_PEER_BIT) {
            uint16_t n = rm_rbuf_u16(r);
            const uint8_t *p;
            if (n > RM_STATS_PEER_MAX || (p = rm_rbuf_bytes(r, n)) == NULL) {
                r->failed = 1;
                return;
            }
            for (uint16_t i = 0; i < n; i++) /* printable only: it ends up in logs and JSON */
                peer[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
            peer[n] = '\0';
        } else {
            v[b] = rm_rbuf_u64(r);
        }
    }
    *mask_p = mask;
}

int rm_stats_decode(const void *buf, size_t len, uint64_t *mask_p, uint64_t v[64],
                    rm_stats_conn_t **conns_p, size_t max_conns, uint32_t *count_p)
{
    rm_rbuf_t r;
    uint32_t count;
    rm_stats_conn_t *conns = NULL, tmp;
    size_t keep;

    rm_rbuf_init(&r, buf, len);
    memset(v, 0, 64 * sizeof(v[0]));
    stats_read(&r, mask_p, v, NULL);
    count = rm_rbuf_u32(&r);
    if (r.failed || count > RM_STATS_CONNS_MAX || count > r.left / 8)
        return -1;
    keep = count < max_conns ? count : max_conns;
    if (keep && (conns = calloc(keep, sizeof(*conns))) == NULL)
        return -1;
    for (uint32_t i = 0; i < count && !r.failed; i++) {
        rm_stats_conn_t *c = i < keep ? &conns[i] : &tmp;
        memset(c, 0, sizeof(*c));
        stats_read(&r, &c->mask, c->v, c->peer);
    }
    if (r.failed) {
        free(conns);
        return -1;
    }
    *conns_p = conns;
    *count_p = count;
    return 0;
}
