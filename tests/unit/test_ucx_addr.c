/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the worker-address check (src/engine/ucx_addr.c) against a
 * real UCX worker's own address (TCP on loopback, so the TCP rules are in
 * play), and against addresses built here byte by byte in UCX's v1 layout:
 * each of the malformations that crashed UCX in fuzzing is refused, and
 * well-formed addresses from peers with other interfaces are not. Then the
 * probes made before UCX connects (src/engine/reach.c) against real
 * listening sockets: one that answers, a closed port, one that drops SYNs.
 */
#include <linux/filter.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <ucp/api/ucp.h>

#include "engine/reach.h"
#include "engine/ucx_addr.h"
#include "util/time.h"

static struct {
    ucp_context_h       ucp;
    ucp_worker_h        worker;
    uint8_t            *own;
    size_t              own_len;
    rm_ucx_addr_shape_t shape;
    const rm_ucx_tl_shape_t *tcp;
} g;

static int setup(void **state)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_config_t *cfg;

    (void)state;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK)
        return -1;
    ucp_config_modify(cfg, "TLS", "tcp,self");
    ucp_config_modify(cfg, "NET_DEVICES", "lo");
    if (ucp_init(&p, cfg, &g.ucp) != UCS_OK)
        return -1;
    ucp_config_release(cfg);
    if (ucp_worker_create(g.ucp, &wp, &g.worker) != UCS_OK ||
        ucp_worker_get_address(g.worker, (ucp_address_t **)&g.own, &g.own_len) != UCS_OK)
        return -1;
    if (rm_ucx_addr_learn(&g.shape, g.own, g.own_len) != 0)
        return -1;
    for (unsigned i = 0; i < g.shape.num_tls; i++)
        if (g.shape.tls[i].csum == rm_ucx_tl_csum("tcp"))
            g.tcp = &g.shape.tls[i];
    return g.tcp ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ucp_worker_release_address(g.worker, (ucp_address_t *)g.own);
    ucp_worker_destroy(g.worker);
    ucp_cleanup(g.ucp);
    return 0;
}

static int check(const void *addr, size_t len)
{
    const char *why = NULL;
    int rc = rm_ucx_addr_check(&g.shape, addr, len, &why);

    if (rc != 0)
        assert_non_null(why);
    return rc;
}

/* ---------------------------------------------------------- own address */

static void test_own_address_passes(void **state)
{
    (void)state;
    assert_true(g.shape.known);
    assert_int_equal(check(g.own, g.own_len), 0);
}

static void test_every_truncation_refused(void **state)
{
    (void)state;
    for (size_t n = 0; n < g.own_len; n++)
        assert_int_equal(check(g.own, n), -1);
}

static void test_trailing_byte_refused(void **state)
{
    uint8_t *a = malloc(g.own_len + 1);

    (void)state;
    memcpy(a, g.own, g.own_len);
    a[g.own_len] = 0;
    assert_int_equal(check(a, g.own_len + 1), -1);
    free(a);
}

/* Every single-bit flip of our own address is either refused or still walks
 * to the end of the buffer: never a read past it (ASan watches). */
static void test_bit_flips_never_overrun(void **state)
{
    uint8_t *a = malloc(g.own_len);
    unsigned refused = 0;

    (void)state;
    for (size_t i = 0; i < g.own_len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(a, g.own, g.own_len);
            a[i] ^= (uint8_t)(1u << bit);
            refused += check(a, g.own_len) != 0;
        }
    }
    assert_true(refused > 0);
    free(a);
}

static void test_other_format_version_refused(void **state)
{
    uint8_t *a = malloc(g.own_len);

    (void)state;
    memcpy(a, g.own, g.own_len);
    a[0] = (uint8_t)((a[0] & 0xf0) | 0x0f);
    assert_int_equal(check(a, g.own_len), -1);
    free(a);
}

/* UCX_ADDRESS_VERSION=v2: performance figures are one byte each (fp8);
 * NaN or infinite ones made ucp_ep_create abort in select.c. A peer worker
 * of that format, its TCP entry's figures patched, is refused. */
static void test_v2_figures_refused(void **state)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    static const uint8_t bad[] = {0xff, 0x1f, 0x0f};
    rm_ucx_addr_shape_t shape;
    ucp_context_h ucp;
    ucp_worker_h w;
    ucp_config_t *cfg;
    uint8_t *own, *a;
    size_t len, at = 0;
    const char *why;
    uint16_t cs = rm_ucx_tl_csum("tcp");

    (void)state;
    assert_int_equal(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
    ucp_config_modify(cfg, "TLS", "tcp");
    ucp_config_modify(cfg, "NET_DEVICES", "lo");
    if (ucp_config_modify(cfg, "ADDRESS_VERSION", "v2") != UCS_OK) {
        ucp_config_release(cfg);
        skip(); /* a UCX without the v2 format */
    }
    assert_int_equal(ucp_init(&p, cfg, &ucp), UCS_OK);
    ucp_config_release(cfg);
    assert_int_equal(ucp_worker_create(ucp, &wp, &w), UCS_OK);
    assert_int_equal(ucp_worker_get_address(w, (ucp_address_t **)&own, &len), UCS_OK);
    assert_int_equal(rm_ucx_addr_learn(&shape, own, len), 0);
    assert_int_equal(rm_ucx_addr_check(&shape, own, len, &why), 0);
    for (size_t i = 0; at == 0 && i + 10 < len; i++)
        if (own[i] == (cs & 0xff) && own[i + 1] == (cs >> 8))
            at = i + 2; /* the TCP entry's attributes */
    assert_true(at != 0);
    a = malloc(len);
    for (size_t k = 0; k < sizeof(bad); k++)
        for (size_t f = 0; f < 3; f++) { /* overhead, bandwidth, latency */
            memcpy(a, own, len);
            a[at + f] = bad[k];
            assert_int_equal(rm_ucx_addr_check(&shape, a, len, &why), -1);
        }
    memcpy(a, own, len);
    a[at + 1] = 0; /* no bandwidth */
    assert_int_equal(rm_ucx_addr_check(&shape, a, len, &why), -1);
    free(a);
    ucp_worker_release_address(w, (ucp_address_t *)own);
    ucp_worker_destroy(w);
    ucp_cleanup(ucp);
}

/* ------------------------------------------- synthetic v1 addresses */

typedef struct {
    uint8_t b[8192];
    size_t  n;
} abuf_t;

static void put(abuf_t *a, const void *p, size_t n)
{
    assert_true(a->n + n <= sizeof(a->b));
    memcpy(a->b + a->n, p, n);
    a->n += n;
}

static void put8(abuf_t *a, uint8_t v) { put(a, &v, 1); }

static void put_f32(abuf_t *a, float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    for (int i = 0; i < 4; i++)
        put8(a, (uint8_t)(u >> (8 * i)));
}

typedef struct {
    uint8_t        dev_flags;  /* NUM_PATHS 0x40, SYS 0x20 */
    uint8_t        num_paths;
    const uint8_t *dev;
    size_t         dev_len;
    uint16_t       csum;
    float          ovh, bw, lat;
    uint32_t       caps;
    uint8_t        if_flags;   /* HAS_EP 0x40 */
    size_t         iface_len;
} synth_t;

/* A one-device, one-transport v1 address with a uuid and no name. */
static void synth_head(abuf_t *a)
{
    a->n = 0;
    put8(a, (uint8_t)((g.own[0] & 0x0f) | (1u << 1) << 4)); /* v1, WORKER_UUID */
    put(a, "uuid-uid", 8);
}

/* One device of s's shape with its one transport, at interface address
 * port (s->iface_len bytes); last: the address's last device. */
static void synth_dev(abuf_t *a, const synth_t *s, int last, const uint8_t *port)
{
    put8(a, 0x60);                                /* md 0, ALLOC|REG */
    put8(a, (uint8_t)((last ? 0x80 : 0) | s->dev_flags | s->dev_len));
    if (s->dev_flags & 0x40)
        put8(a, s->num_paths);
    if (s->dev_flags & 0x20)
        put8(a, 0);
    put(a, s->dev, s->dev_len);
    put8(a, (uint8_t)s->csum);
    put8(a, (uint8_t)(s->csum >> 8));
    put_f32(a, s->ovh);
    put_f32(a, s->bw);
    put_f32(a, s->lat);
    for (int i = 0; i < 4; i++)
        put8(a, (uint8_t)(((s->caps << 8) | 5u) >> (8 * i)));
    put8(a, (uint8_t)(0x80 | s->if_flags | s->iface_len));
    put(a, port, s->iface_len);
}

static void synth(abuf_t *a, const synth_t *s)
{
    static const uint8_t port[64] = {0x12, 0x34};

    synth_head(a);
    synth_dev(a, s, 1, port);
}

static const uint8_t ipv4[] = {0, AF_INET, 10, 0, 0, 7};
static const uint8_t ipv6[] = {0, AF_INET6, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7};

static synth_t tcp_ipv4(void)
{
    synth_t s = {.dev = ipv4, .dev_len = sizeof(ipv4), .csum = rm_ucx_tl_csum("tcp"),
                 .ovh = 50e-6f, .bw = 1.1e9f, .lat = 10e-6f, .caps = g.tcp->cap_flags,
                 .iface_len = 2};
    return s;
}

static void test_peer_with_other_interfaces_passes(void **state)
{
    synth_t s = tcp_ipv4();
    abuf_t a;

    (void)state;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), 0);
    s.dev = ipv6, s.dev_len = sizeof(ipv6);
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), 0);
    s.dev_flags = 0x40 | 0x20, s.num_paths = 2; /* paths and system device bytes */
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), 0);
}

static void test_unknown_transport_walked_not_judged(void **state)
{
    static const uint8_t odd_dev[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    synth_t s = tcp_ipv4();
    abuf_t a;

    (void)state;
    s.csum = rm_ucx_tl_csum("rc_mlx5"), s.dev = odd_dev, s.dev_len = sizeof(odd_dev);
    s.caps = 0x1234, s.iface_len = 11;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), 0);
}

/* ---------------------------------------------------------- TCP interfaces */

typedef struct {
    struct sockaddr_storage sa[8];
    unsigned n;
} seen_t;

static void seen_cb(void *arg, const struct sockaddr_storage *ss)
{
    seen_t *s = arg;

    if (s->n < 8)
        s->sa[s->n++] = *ss;
}

/* Our own worker (tcp on lo): one loopback interface, its listening port. */
static void test_tcp_interfaces_of_own_address(void **state)
{
    seen_t s = {.n = 0};
    struct sockaddr_in *in = (struct sockaddr_in *)&s.sa[0];
    struct sockaddr_in bound;
    socklen_t len = sizeof(bound);
    int fd;

    (void)state;
    assert_int_equal(rm_ucx_addr_tcp(g.own, g.own_len, seen_cb, &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(in->sin_family, AF_INET);
    assert_int_equal(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK);
    assert_int_not_equal(in->sin_port, 0);
    /* UCX listens there: a second bind to that port fails. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    bound = *in;
    assert_int_not_equal(bind(fd, (struct sockaddr *)&bound, len), 0);
    close(fd);
}

/* Synthetic peers: an IPv4 and an IPv6 interface, port 0x1234 as packed. */
static void test_tcp_interfaces_of_peers(void **state)
{
    synth_t t = tcp_ipv4();
    seen_t s = {.n = 0};
    abuf_t a;

    (void)state;
    synth(&a, &t);
    assert_int_equal(rm_ucx_addr_tcp(a.b, a.n, seen_cb, &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(((struct sockaddr_in *)&s.sa[0])->sin_addr.s_addr, htonl(0x0a000007));
    assert_int_equal(((struct sockaddr_in *)&s.sa[0])->sin_port, htons(0x1234));
    t.dev = ipv6, t.dev_len = sizeof(ipv6);
    synth(&a, &t);
    s.n = 0;
    assert_int_equal(rm_ucx_addr_tcp(a.b, a.n, seen_cb, &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.sa[0].ss_family, AF_INET6);
    assert_int_equal(((struct sockaddr_in6 *)&s.sa[0])->sin6_addr.s6_addr[0], 0xfd);
    /* Another transport's entry is not TCP's; a truncated address fails. */
    t = tcp_ipv4();
    t.csum = rm_ucx_tl_csum("rc_mlx5");
    synth(&a, &t);
    s.n = 0;
    assert_int_equal(rm_ucx_addr_tcp(a.b, a.n, seen_cb, &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(rm_ucx_addr_tcp(a.b, a.n - 1, seen_cb, &s), -1);
}

/* The fuzzer's crashes, one by one: each is refused. */
static void test_crashing_shapes_refused(void **state)
{
    static const uint8_t no_family[] = {0, 0, 10, 0, 0, 7};
    static const uint8_t bad_flags[] = {0x82, AF_INET, 10, 0, 0, 7};
    synth_t s;
    abuf_t a;

    (void)state;
    /* uct_tcp_ep_set_dest_addr dereferences a NULL device address */
    s = tcp_ipv4(), s.dev_len = 0;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    /* an IPv4 family with an IPv6-sized address, and vice versa */
    s = tcp_ipv4(), s.dev = ipv6, s.dev_len = sizeof(ipv4);
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.dev = no_family;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.dev = bad_flags;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    /* select.c "score >= 0.0": NaN, infinite or zero figures */
    s = tcp_ipv4(), s.bw = NAN;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.bw = 0;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.ovh = INFINITY;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.lat = -1e-6f;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.dev_flags = 0x40, s.num_paths = 0;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    /* a known transport with another interface-address length or caps */
    s = tcp_ipv4(), s.iface_len = 3;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    s = tcp_ipv4(), s.caps ^= 1;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
    /* endpoint addresses never belong in a worker address */
    s = tcp_ipv4(), s.if_flags = 0x40;
    synth(&a, &s);
    assert_int_equal(check(a.b, a.n), -1);
}

/* A server with an InfiniBand transport: peers' device addresses differ in
 * layout (IB LID and subnet, RoCE GID) and must be as long as their flags say. */
static void test_ib_device_addresses_by_flags(void **state)
{
    static const uint8_t ib_lid[]     = {0x00, 0x12, 0x00};
    static const uint8_t ib_full[]    = {0x40 | 0x10 | 0x02, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    static const uint8_t roce[]       = {0x08 | 0x01, 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 1, 3};
    static const uint8_t eth_short[]  = {0x08, 1, 2};
    static const uint8_t ifid_short[] = {0x40, 0x12, 0x00};
    static const uint8_t both_nets[]  = {0x30, 0x12, 0x00, 1, 2, 1, 2, 3, 4, 5, 6, 7, 8};
    rm_ucx_addr_shape_t shape = g.shape;
    rm_ucx_tl_shape_t *rc     = &shape.tls[shape.num_tls++];
    synth_t s                 = tcp_ipv4();
    const char *why;
    abuf_t a;
    struct {
        const uint8_t *dev;
        size_t len;
        int expect;
    } cases[] = {
        {ib_lid, sizeof(ib_lid), 0},       {ib_full, sizeof(ib_full), 0},
        {roce, sizeof(roce), 0},           {eth_short, sizeof(eth_short), -1},
        {ifid_short, sizeof(ifid_short), -1}, {both_nets, sizeof(both_nets), -1},
        {ib_lid, 0, -1},
    };

    (void)state;
    memset(rc, 0, sizeof(*rc));
    rc->csum      = rm_ucx_tl_csum("rc_verbs");
    rc->cap_flags = 0x55;
    rc->iface_lens[0] = 1; /* length 0: rc connects endpoint to endpoint */
    s.csum = rc->csum, s.caps = 0x55, s.iface_len = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        s.dev = cases[i].dev, s.dev_len = cases[i].len;
        synth(&a, &s);
        assert_int_equal(rm_ucx_addr_check(&shape, a.b, a.n, &why), cases[i].expect);
    }
}

static void test_tcp_checksum_is_ucx(void **state)
{
    (void)state;
    /* Our own address names tcp under this checksum (setup found it). */
    assert_non_null(g.tcp);
    assert_int_not_equal(rm_ucx_tl_csum("tcp"), rm_ucx_tl_csum("self"));
}

/* ------------------------------------------------ reach (engine/reach.c) */

/* An address of n TCP devices on 127.0.0.2 (not UCX's loopback flag: any
 * host's address), listening at ports[i] (host order), in synth's layout. */
static void synth_tcp_devs(abuf_t *a, const uint16_t *ports, unsigned n)
{
    static const uint8_t dev[] = {0, AF_INET, 127, 0, 0, 2};
    synth_t s = tcp_ipv4();

    s.dev = dev, s.dev_len = sizeof(dev);
    synth_head(a);
    for (unsigned i = 0; i < n; i++) {
        const uint8_t port[2] = {(uint8_t)(ports[i] >> 8), (uint8_t)ports[i]};
        synth_dev(a, &s, i + 1 == n, port);
    }
}

/* A socket listening on 127.0.0.2; with drop, a filter drops every packet
 * that reaches it, SYNs included (as a closed gate does). Its port in *port. */
static int listener(int drop, uint16_t *port)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002)};
    socklen_t len = sizeof(in);
    struct sock_filter none[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    struct sock_fprog prog = {.len = 1, .filter = none};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    if (drop)
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)), 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&in, len), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&in, &len), 0);
    *port = ntohs(in.sin_port);
    return fd;
}

/* Probe addr to the end (a deadline of ms): the status. */
static remora_status_t reach(const void *addr, size_t len, int same_host, int ms)
{
    rm_reach_t *r;
    remora_status_t st = rm_reach_start(addr, len, same_host, &r);

    if (st != REMORA_OK || r == NULL)
        return st;
    st = rm_reach_wait(r, rm_now_ns() + (uint64_t)ms * 1000000u);
    rm_reach_free(r);
    return st;
}

/* Our own worker's loopback interface answers; for a peer of another host
 * it is not probed at all (UCX connects to loopback on one host only). */
static void test_reach_own_address(void **state)
{
    rm_reach_t *r = (rm_reach_t *)&r;

    (void)state;
    assert_int_equal(reach(g.own, g.own_len, 1, 2000), REMORA_OK);
    assert_int_equal(rm_reach_start(g.own, g.own_len, 0, &r), REMORA_OK);
    assert_null(r);
}

/* A listener and a closed port answer; a listener that drops SYNs does not,
 * and is the one named. */
static void test_reach_silent_interface(void **state)
{
    uint16_t ports[3];
    int fds[3];
    char silent[64];
    abuf_t a;
    rm_reach_t *r;

    (void)state;
    fds[0] = listener(0, &ports[0]);
    fds[1] = listener(0, &ports[1]);
    close(fds[1]); /* nothing there now: a reset */
    synth_tcp_devs(&a, ports, 2);
    assert_int_equal(reach(a.b, a.n, 0, 2000), REMORA_OK);

    fds[2] = listener(1, &ports[2]);
    synth_tcp_devs(&a, ports, 3);
    assert_int_equal(rm_reach_start(a.b, a.n, 0, &r), REMORA_OK);
    assert_non_null(r);
    uint64_t t0 = rm_now_ns();
    assert_int_equal(rm_reach_wait(r, t0 + 300000000u), REMORA_ERR_TIMED_OUT);
    assert_true(rm_now_ns() - t0 >= 290000000u);
    assert_int_equal(rm_reach_step(r), 0);
    rm_reach_silent(r, silent, sizeof(silent));
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.2:%u", ports[2]);
    assert_string_equal(silent, want);
    rm_reach_free(r);
    close(fds[0]);
    close(fds[2]);
}

/* An address listing one interface twice is probed as usual; one naming more
 * interfaces than are probed is refused. */
static void test_reach_bounds(void **state)
{
    uint16_t ports[RM_REACH_MAX + 1];
    int fd;
    abuf_t a;

    (void)state;
    fd = listener(0, &ports[0]);
    ports[1] = ports[0];
    synth_tcp_devs(&a, ports, 2);
    assert_int_equal(reach(a.b, a.n, 0, 2000), REMORA_OK);
    for (unsigned i = 0; i <= RM_REACH_MAX; i++)
        ports[i] = (uint16_t)(ports[0] + i);
    synth_tcp_devs(&a, ports, RM_REACH_MAX + 1);
    rm_reach_t *r = NULL;
    assert_int_equal(rm_reach_start(a.b, a.n, 0, &r), REMORA_ERR_PROTOCOL);
    assert_null(r);
    /* One this code cannot read is not probed (ucx_addr.h's fallback). */
    assert_int_equal(rm_reach_start(a.b, a.n - 1, 0, &r), REMORA_OK);
    assert_null(r);
    close(fd);
}

/* Probes open at once are bounded: a peer chooses how many interfaces its
 * address names, and each probe holds a socket for up to the limit. */
static void test_reach_fd_budget(void **state)
{
    enum { N = RM_REACH_FDS_MAX / RM_REACH_MAX };
    uint16_t ports[RM_REACH_MAX];
    rm_reach_t *r[N + 1];
    int fd;
    abuf_t a;

    (void)state;
    fd = listener(1, &ports[0]); /* silent: every probe set stays open */
    for (unsigned i = 1; i < RM_REACH_MAX; i++)
        ports[i] = (uint16_t)(ports[0] + i);
    synth_tcp_devs(&a, ports, RM_REACH_MAX);
    for (int i = 0; i < N; i++) {
        assert_int_equal(rm_reach_start(a.b, a.n, 0, &r[i]), REMORA_OK);
        assert_non_null(r[i]);
    }
    assert_int_equal(rm_reach_start(a.b, a.n, 0, &r[N]), REMORA_ERR_BUSY);
    assert_null(r[N]);
    rm_reach_free(r[0]);
    assert_int_equal(rm_reach_start(a.b, a.n, 0, &r[0]), REMORA_OK);
    for (int i = 0; i < N; i++)
        rm_reach_free(r[i]);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_address_passes),
        cmocka_unit_test(test_every_truncation_refused),
        cmocka_unit_test(test_trailing_byte_refused),
        cmocka_unit_test(test_bit_flips_never_overrun),
        cmocka_unit_test(test_other_format_version_refused),
        cmocka_unit_test(test_v2_figures_refused),
        cmocka_unit_test(test_peer_with_other_interfaces_passes),
        cmocka_unit_test(test_unknown_transport_walked_not_judged),
        cmocka_unit_test(test_crashing_shapes_refused),
        cmocka_unit_test(test_ib_device_addresses_by_flags),
        cmocka_unit_test(test_tcp_checksum_is_ucx),
        cmocka_unit_test(test_tcp_interfaces_of_own_address),
        cmocka_unit_test(test_tcp_interfaces_of_peers),
        cmocka_unit_test(test_reach_own_address),
        cmocka_unit_test(test_reach_silent_interface),
        cmocka_unit_test(test_reach_bounds),
        cmocka_unit_test(test_reach_fd_budget),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
