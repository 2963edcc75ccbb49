/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Checking a peer's UCX worker address before UCX unpacks it (ucx_addr.h).
 *
 * The layout walked here is UCX's packed worker address, formats v1 and v2,
 * non-unified mode, as ucp_worker_get_address() produces it:
 *
 *   header: v1 one byte (version low nibble, flags high nibble);
 *           v2 two bytes (version, flags)
 *   [uuid, 8 bytes] [client id, 8 bytes] [name: length byte + bytes]
 *   per device: md index byte (0x80: no transports; v2 0x7f: extended)
 *               length byte (0x80 last device, 0x40 paths byte follows,
 *                            0x20 system device byte follows; v2 0x1f: extended)
 *               [paths] [system device] device address
 *     per transport: name checksum (2 bytes), attributes (v1 16, v2 8 bytes),
 *                    length byte (0x80 last, 0x40 endpoint addresses follow;
 *                    v2 0x3f: extended), interface address
 */
#include "engine/ucx_addr.h"

#include <math.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

enum {
    VERSION_V1 = 0,
    VERSION_V2 = 1,

    HDR_DEBUG_INFO  = 1u << 0,
    HDR_WORKER_UUID = 1u << 1,
    HDR_CLIENT_ID   = 1u << 2,
    HDR_KNOWN       = HDR_DEBUG_INFO | HDR_WORKER_UUID | HDR_CLIENT_ID,

    NULL_RESOURCE = 0xff,

    MD_EMPTY_DEV = 0x80,
    MD_MASK_V1   = 0x1f,
    MD_MASK_V2   = 0x7f,
    MD_MAX       = 64, /* UCX's md index bitmaps */

    DEV_LAST      = 0x80,
    DEV_NUM_PATHS = 0x40,
    DEV_SYS       = 0x20,
    DEV_LEN_MASK  = 0x1f,

    IF_LAST     = 0x80,
    IF_HAS_EP   = 0x40,
    IF_LEN_MASK = 0x3f,

    ATTR_LEN_V1 = 16, /* float overhead, bandwidth, latency; u32 priority and flags */
    ATTR_LEN_V2 = 8,

    MAX_ENTRIES = 128, /* UCP_MAX_RESOURCES */

    TCP_FLAG_LOOPBACK = 1u << 0,
};

/* One transport entry as the walk sees it. */
typedef struct {
    uint8_t        version;
    const uint8_t *dev;
    size_t         dev_len;
    unsigned       num_paths;
    uint16_t       csum;
    const uint8_t *attr;
    const uint8_t *iface;
    size_t         iface_len;
} entry_t;

typedef struct {
    const uint8_t *p, *end;
} cursor_t;

static int take(cursor_t *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n)
        return -1;
    if (out)
        *out = c->p;
    c->p += n;
    return 0;
}

static int take_byte(cursor_t *c, uint8_t *b)
{
    const uint8_t *q;

    if (take(c, 1, &q) != 0)
        return -1;
    *b = *q;
    return 0;
}

/* A value in the low bits of a byte; in v2 an all-ones value means "the real
 * value is the next byte". */
static int take_extended(cursor_t *c, uint8_t version, uint8_t mask, size_t *value)
{
    uint8_t b;

    if (take_byte(c, &b) != 0)
        return -1;
    *value = b & mask;
    if (version != VERSION_V1 && *value == mask) {
        if (take_byte(c, &b) != 0)
            return -1;
        *value = b;
    }
    return 0;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float lef32(const uint8_t *p)
{
    uint32_t u = le32(p);
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

typedef int (*entry_fn)(void *arg, const entry_t *e, const char **why);

static int attrs_ok(const entry_t *e);

/* The header; returns the header flags or -1. */
static int walk_header(cursor_t *c, uint8_t *version, const char **why)
{
    uint8_t h, flags;

    if (take_byte(c, &h) != 0)
        return -1;
    *version = h & 0x0f;
    if (*version == VERSION_V1) {
        flags = h >> 4;
    } else if (*version == VERSION_V2) {
        if (take_byte(c, &flags) != 0)
            return -1;
    } else {
        *why = "unknown address format version";
        return -1;
    }
    if (flags & ~HDR_KNOWN) {
        *why = "unknown address header flags";
        return -1;
    }
    /* v1 addresses always carry the uuid (UCX unpacks it regardless of the
     * flag, which only 1.12 and later set); v2 only with the flag. */
    if ((*version == VERSION_V1 || (flags & HDR_WORKER_UUID)) && take(c, 8, NULL) != 0)
        return -1;
    if ((flags & HDR_CLIENT_ID) && take(c, 8, NULL) != 0)
        return -1;
    if (flags & HDR_DEBUG_INFO) {
        uint8_t n;
        if (take_byte(c, &n) != 0 || take(c, n, NULL) != 0)
            return -1;
    }
    return flags;
}

/* The transports of one device. */
static int walk_ifaces(cursor_t *c, entry_t *e, unsigned *count, entry_fn fn, void *arg,
                       const char **why)
{
    uint8_t b;
    int last;

    do {
        if (++*count > MAX_ENTRIES) {
            *why = "too many transport entries";
            return -1;
        }
        if (take(c, 2, &e->attr) != 0)
            return -1;
        e->csum = (uint16_t)(e->attr[0] | e->attr[1] << 8);
        if (take(c, e->version == VERSION_V1 ? ATTR_LEN_V1 : ATTR_LEN_V2, &e->attr) != 0 ||
            c->p == c->end)
            return -1;
        b    = *c->p;
        last = b & IF_LAST;
        /* A worker address never carries endpoint addresses (those are for
         * wire-up messages between existing endpoints). */
        if (b & IF_HAS_EP) {
            *why = "endpoint addresses in a worker address";
            return -1;
        }
        if (take_extended(c, e->version, IF_LEN_MASK, &e->iface_len) != 0 ||
            take(c, e->iface_len, &e->iface) != 0)
            return -1;
        if (fn(arg, e, why) != 0)
            return -1;
    } while (!last);
    return 0;
}

/* Walks a whole address, calling fn for every transport entry; 0 or -1. */
static int walk(const void *addr, size_t len, entry_fn fn, void *arg, const char **why)
{
    cursor_t c = {addr, (const uint8_t *)addr + len};
    entry_t e  = {0};
    unsigned count = 0;
    uint8_t b, flags;
    int last_dev, empty;
    size_t md;

    *why = "truncated address";
    if (walk_header(&c, &e.version, why) < 0)
        return -1;
    if (c.p == c.end)
        return -1;
    if (*c.p == NULL_RESOURCE) {
        *why = "address names no transport";
        return -1;
    }
    do {
        if (c.p == c.end)
            return -1;
        empty = *c.p & MD_EMPTY_DEV;
        if (take_extended(&c, e.version, e.version == VERSION_V1 ? MD_MASK_V1 : MD_MASK_V2, &md) != 0)
            return -1;
        if (md >= MD_MAX) {
            *why = "memory domain index out of range";
            return -1;
        }
        if (c.p == c.end)
            return -1;
        flags    = *c.p & (DEV_LAST | DEV_NUM_PATHS | DEV_SYS);
        last_dev = flags & DEV_LAST;
        if (take_extended(&c, e.version, DEV_LEN_MASK, &e.dev_len) != 0)
            return -1;
        e.num_paths = 1;
        if (flags & DEV_NUM_PATHS) {
            if (take_byte(&c, &b) != 0)
                return -1;
            if (b == 0) {
                *why = "device with zero paths";
                return -1;
            }
            e.num_paths = b;
        }
        if ((flags & DEV_SYS) && take(&c, 1, NULL) != 0)
            return -1;
        if (take(&c, e.dev_len, &e.dev) != 0)
            return -1;
        if (!empty && walk_ifaces(&c, &e, &count, fn, arg, why) != 0)
            return -1;
    } while (!last_dev);
    if (c.p != c.end) {
        *why = "trailing bytes after the address";
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ shape */

static void bit_set(uint64_t *bits, size_t v) { bits[v / 64] |= 1ull << (v % 64); }
static int bit_has(const uint64_t *bits, size_t v) { return (bits[v / 64] >> (v % 64)) & 1; }

static uint32_t cap_flags(const entry_t *e)
{
    if (e->version == VERSION_V1)
        return le32(e->attr + 12) >> 8; /* low 8 bits: priority */
    return (uint32_t)(e->attr[6] | e->attr[7] << 8);
}

static rm_ucx_tl_shape_t *shape_find(const rm_ucx_addr_shape_t *s, uint16_t csum)
{
    for (unsigned i = 0; i < s->num_tls; i++)
        if (s->tls[i].csum == csum)
            return (rm_ucx_tl_shape_t *)&s->tls[i];
    return NULL;
}

static int learn_entry(void *arg, const entry_t *e, const char **why)
{
    rm_ucx_addr_shape_t *s = arg;
    rm_ucx_tl_shape_t *t   = shape_find(s, e->csum);

    /* Held to what peers are held to, or this is not a layout we know. */
    if (!attrs_ok(e)) {
        *why = "implausible transport attributes";
        return -1;
    }
    if (t == NULL) {
        if (s->num_tls == RM_UCX_ADDR_MAX_TLS) {
            *why = "too many transports";
            return -1;
        }
        t = &s->tls[s->num_tls++];
        memset(t, 0, sizeof(*t));
        t->csum      = e->csum;
        t->cap_flags = cap_flags(e);
    }
    bit_set(t->dev_lens, e->dev_len);
    bit_set(t->iface_lens, e->iface_len);
    return 0;
}

int rm_ucx_addr_learn(rm_ucx_addr_shape_t *shape, const void *own, size_t len)
{
    const char *why;

    memset(shape, 0, sizeof(*shape));
    if (len == 0 || walk(own, len, learn_entry, shape, &why) != 0) {
        memset(shape, 0, sizeof(*shape));
        if (len > 0)
            shape->header = *(const uint8_t *)own;
        return -1;
    }
    shape->header = *(const uint8_t *)own;
    shape->known  = 1;
    return 0;
}

/* ------------------------------------------------------------ check */

/* TCP device addresses: flags byte, address family, then the IPv4/IPv6
 * address, or for a loopback interface a namespace id. */
static int tcp_dev_ok(const rm_ucx_tl_shape_t *t, const entry_t *e)
{
    if (e->dev_len < 2 || (e->dev[0] & ~TCP_FLAG_LOOPBACK) != 0 ||
        (e->dev[1] != AF_INET && e->dev[1] != AF_INET6))
        return 0;
    if (e->dev[0] & TCP_FLAG_LOOPBACK)
        return bit_has(t->dev_lens, e->dev_len) || (e->dev_len >= 2 + 8 && e->dev_len <= 2 + 32);
    return e->dev_len == 2 + (e->dev[1] == AF_INET ? 4u : 16u);
}

/* InfiniBand/RoCE device addresses: a flags byte, then the fields the flags
 * announce (RoCE: the GID; IB: LID, interface id, subnet prefix), then
 * optional path MTU, GID index and partition key. UCX reads the fields the
 * flags name, whatever the length says, so the two must agree. */
static int ib_dev_ok(const entry_t *e)
{
    enum { GID_INDEX = 1u << 0, PATH_MTU = 1u << 1, PKEY = 1u << 2, ETH = 1u << 3,
           SUBNET16 = 1u << 4, SUBNET64 = 1u << 5, IF_ID = 1u << 6, UNUSED = 1u << 7 };
    uint8_t f;
    size_t want = 1;

    if (e->dev_len < 1 || ((f = e->dev[0]) & UNUSED))
        return 0;
    if (f & ETH) {
        want += 16;
    } else {
        if ((f & SUBNET16) && (f & SUBNET64))
            return 0;
        want += 2 + (f & IF_ID ? 8 : 0) + (f & SUBNET16 ? 2 : 0) + (f & SUBNET64 ? 8 : 0);
    }
    want += (f & PATH_MTU ? 1 : 0) + (f & GID_INDEX ? 1 : 0) + (f & PKEY ? 2 : 0);
    return e->dev_len == want;
}

static int is_ib_transport(uint16_t csum)
{
    static const char *const names[] = {"rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (csum == rm_ucx_tl_csum(names[i]))
            return 1;
    return 0;
}

/* Device addresses of transports whose devices differ from host to host are
 * checked by content; the others must have a length this UCX produces. */
static int dev_ok(const rm_ucx_tl_shape_t *t, const entry_t *e)
{
    if (t->csum == rm_ucx_tl_csum("tcp"))
        return tcp_dev_ok(t, e);
    if (is_ib_transport(t->csum))
        return ib_dev_ok(e);
    return bit_has(t->dev_lens, e->dev_len);
}

static int attrs_ok(const entry_t *e)
{
    float ovh, bw, lat;

    if (e->version != VERSION_V1) {
        /* v2 packs overhead, bandwidth and latency in a byte each (UCX's
         * fp8: a low nibble of 0xf is NaN or infinity, which fails the
         * same assertion); a zero bandwidth UCX refuses itself. */
        for (int i = 0; i < 3; i++)
            if ((e->attr[i] & 0x0f) == 0x0f)
                return 0;
        return e->attr[1] != 0 && (e->attr[4] | e->attr[5] << 8) != 0; /* segment size */
    }
    ovh = lef32(e->attr);
    bw  = lef32(e->attr + 4);
    lat = lef32(e->attr + 8);
    /* UCX scores lanes with these; NaN or a negative score fails its
     * assertion. Overheads are seconds, bandwidth bytes per second (negative
     * from UCX <= 1.11, meaning "shared"). */
    return isfinite(ovh) && ovh >= 0 && ovh < 1 && isfinite(lat) && lat >= 0 && lat < 1 &&
           isfinite(bw) && fabsf(bw) >= 1 && fabsf(bw) <= 1e15f;
}

static int check_entry(void *arg, const entry_t *e, const char **why)
{
    const rm_ucx_addr_shape_t *s = arg;
    const rm_ucx_tl_shape_t *t;

    if (!attrs_ok(e)) {
        *why = "implausible transport attributes";
        return -1;
    }
    if ((t = shape_find(s, e->csum)) == NULL)
        return 0; /* a transport this worker lacks: UCX ignores it */
    if (cap_flags(e) != t->cap_flags) {
        *why = "transport capabilities differ from this UCX's";
        return -1;
    }
    if (!dev_ok(t, e)) {
        *why = "device address does not fit its transport";
        return -1;
    }
    if (!bit_has(t->iface_lens, e->iface_len)) {
        *why = "interface address does not fit its transport";
        return -1;
    }
    return 0;
}

int rm_ucx_addr_check(const rm_ucx_addr_shape_t *shape, const void *addr, size_t len,
                      const char **why)
{
    *why = "empty address";
    if (len == 0)
        return -1;
    /* UCX aborts on a format version it does not know. */
    if ((*(const uint8_t *)addr & 0x0f) != (shape->header & 0x0f)) {
        *why = "address format differs from this UCX's";
        return -1;
    }
    if (!shape->known)
        return 0;
    return walk(addr, len, check_entry, (void *)shape, why);
}

/* ------------------------------------------------------------ tcp */

typedef struct {
    rm_ucx_tcp_fn           fn;
    void                   *arg;
    uint16_t                tcp;
    unsigned                nseen;
    struct sockaddr_storage seen[RM_UCX_TCP_SEEN]; /* reported, to report each once */
} tcp_walk_t;

/* Whether ss was reported already; if not, it is from now on. */
static int tcp_seen(tcp_walk_t *w, const struct sockaddr_storage *ss)
{
    for (unsigned i = 0; i < w->nseen; i++)
        if (memcmp(&w->seen[i], ss, sizeof(*ss)) == 0)
            return 1;
    if (w->nseen < RM_UCX_TCP_SEEN)
        w->seen[w->nseen++] = *ss;
    return 0;
}

/* A TCP entry: device address (flags, family, IPv4/IPv6 address or a
 * loopback namespace id), interface address (the port, network order). */
static int tcp_entry(void *arg, const entry_t *e, const char **why)
{
    tcp_walk_t *w = arg;
    struct sockaddr_storage ss = {0};

    (void)why;
    if (e->csum != w->tcp || e->dev_len < 2 || e->iface_len < 2)
        return 0;
    if (e->dev[1] == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        memcpy(&in->sin_port, e->iface, 2);
        if (e->dev[0] & TCP_FLAG_LOOPBACK)
            in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else if (e->dev_len == 2 + 4)
            memcpy(&in->sin_addr, e->dev + 2, 4);
        else
            return 0;
    } else if (e->dev[1] == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        memcpy(&in6->sin6_port, e->iface, 2);
        if (e->dev[0] & TCP_FLAG_LOOPBACK)
            in6->sin6_addr = in6addr_loopback;
        else if (e->dev_len == 2 + 16)
            memcpy(&in6->sin6_addr, e->dev + 2, 16);
        else
            return 0;
    } else {
        return 0;
    }
    if (!tcp_seen(w, &ss))
        w->fn(w->arg, &ss);
    return 0;
}

int rm_ucx_addr_tcp(const void *addr, size_t len, rm_ucx_tcp_fn fn, void *arg)
{
    tcp_walk_t w = {.fn = fn, .arg = arg, .tcp = rm_ucx_tl_csum("tcp")};
    const char *why;

    return len == 0 ? -1 : walk(addr, len, tcp_entry, &w, &why);
}

uint16_t rm_ucx_tl_csum(const char *name)
{
    uint16_t crc = 0xffff;

    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        crc ^= *p;
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)((crc >> 1) ^ ((crc & 1) ? 0x8408u : 0));
    }
    return (uint16_t)~crc;
}
