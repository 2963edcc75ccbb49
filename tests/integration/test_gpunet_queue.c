/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The GPU socket proxy without a GPU: remora_gpunet_create with host_queues
 * puts the command slots and rings in ordinary memory, and CPU threads here
 * play the kernels, following the protocol of include/remora/device/
 * socket.cuh (thread-level forms) on the layout of socket_abi.h. Everything
 * else is real: the proxy thread, TCP sockets, remora sockets over UCX.
 *
 * Checks: echo byte-exact (1 B..4 MiB, partial sends and receives) with a
 * TCP peer and a remora peer, as client and as server (several clients);
 * 64 sockets at once; a TCP peer resetting mid-transfer; the proxy
 * destroyed under a waiting call; bad arguments, bad and refused addresses,
 * timeouts.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <remora/device/socket_abi.h>

#include "harness.h"

/* ---------------------------------------------------------------- the "device" */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A GPU spins on its own silicon; the threads playing kernels here share two
 * CPUs with the proxy and UCX, so they nap between looks instead, longer as a
 * wait goes on (*naps: its count so far; 20 µs, doubling every 64 naps up to
 * 1 ms). 64 threads napping 20 µs each starved the proxy and the server on
 * 2 cores under ASan, until connects queued behind one another ran past their
 * 20 s (docs/gpunet.md). */
static void gpu_spin(unsigned *naps)
{
    unsigned step = *naps / 64 < 6 ? *naps / 64 : 6;
    long ns = 20000L << step;
    struct timespec ts = {0, ns < 1000000 ? ns : 1000000};

    (*naps)++;
    nanosleep(&ts, NULL);
}

static atomic_int g_direct_fallbacks; /* large sends to a GPU peer that went through the ring */
static atomic_int g_bounced;          /* large sends to other peers the proxy sent itself */
static atomic_int g_bounce_fallbacks; /* ... and those it sent back to the ring */

static uint64_t ld(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

static rg_sock_shm_t *emu_sock(rg_net_t *n, int s) { return (rg_sock_shm_t *)(uintptr_t)n->socks + s; }

static int emu_check(rg_net_t *n, int s, int need_open)
{
    if (!__atomic_load_n(&n->alive, __ATOMIC_ACQUIRE))
        return REMORA_ERR_CANCELED;
    if (s < 0 || (unsigned)s >= n->max_socks)
        return REMORA_ERR_INVALID_PARAM;
    rg_sock_shm_t *sh = emu_sock(n, s);
    if (sh->state == RG_SOCK_FREE && sh->error == 0)
        return REMORA_ERR_INVALID_PARAM;
    if (need_open && sh->state != RG_SOCK_OPEN && sh->error == 0)
        return REMORA_ERR_INVALID_PARAM;
    return REMORA_OK;
}

static int emu_cmd(rg_net_t *n, uint32_t op, int sock, uint32_t flags, const char *data,
                   uint64_t timeout_ns)
{
    uint64_t until = now_ns() + (timeout_ns ? timeout_ns : n->timeout_ns);
    int *locks = (int *)(uintptr_t)n->slot_locks;
    unsigned slot = 0, naps = 0;
    int got = 0;

    while (!got) {
        for (unsigned k = 0; k < n->nslots && !got; k++) {
            int zero = 0;
            slot = k;
            got = __atomic_compare_exchange_n(&locks[k], &zero, 1, 0, __ATOMIC_ACQ_REL,
                                              __ATOMIC_ACQUIRE);
        }
        if (!got && now_ns() > until)
            return REMORA_ERR_TIMED_OUT;
        if (!got)
            gpu_spin(&naps);
    }
    rg_cmd_t *c = (rg_cmd_t *)(uintptr_t)n->cmds + slot;
    c->op = op;
    c->sock = sock;
    c->flags = flags;
    c->len = data ? (uint32_t)strlen(data) : 0;
    if (data)
        memcpy(c->data, data, c->len);
    uint32_t seq = c->seq + 1;
    __atomic_store_n(&c->seq, seq, __ATOMIC_RELEASE);
    int r = REMORA_ERR_TIMED_OUT;
    naps = 0;
    for (;;) {
        if (__atomic_load_n(&c->done_seq, __ATOMIC_ACQUIRE) == seq) {
            r = c->result;
            break;
        }
        if (!__atomic_load_n(&n->alive, __ATOMIC_ACQUIRE)) {
            r = REMORA_ERR_CANCELED;
            break;
        }
        if (now_ns() > until)
            break;
        gpu_spin(&naps);
    }
    __atomic_store_n(&locks[slot], 0, __ATOMIC_RELEASE);
    return r;
}

/* The answer to request seq (socket.cuh await): canceled when the budget
 * runs out, and the answer still awaited. */
static int32_t emu_await(rg_net_t *n, rg_sock_shm_t *sh, int send, uint32_t seq, uint64_t until)
{
    volatile uint32_t *done = send ? &sh->dtx_done : &sh->drx_done;
    uint64_t grace = 0;
    unsigned naps = 0;
    for (;;) {
        if (__atomic_load_n(done, __ATOMIC_ACQUIRE) == seq)
            return send ? sh->dtx_res : sh->drx_res;
        if (!__atomic_load_n(&n->alive, __ATOMIC_ACQUIRE))
            return REMORA_ERR_CANCELED;
        uint64_t t = now_ns();
        if (grace == 0 && t > until) {
            __atomic_store_n(send ? &sh->dtx_cancel : &sh->drx_cancel, seq, __ATOMIC_RELEASE);
            grace = t + 2 * n->timeout_ns;
        } else if (grace && t > grace) {
            return REMORA_ERR_TIMED_OUT;
        }
        gpu_spin(&naps);
    }
}

/* Post a request (socket.cuh tx_direct / rx_request) and await its answer. */
static int32_t emu_request(rg_net_t *n, rg_sock_shm_t *sh, int send, void *ptr, int len,
                           uint64_t until)
{
    uint32_t seq = __atomic_load_n(send ? &sh->dtx_done : &sh->drx_done, __ATOMIC_ACQUIRE) + 1;
    if (send) {
        sh->dtx_ptr = (uint64_t)(uintptr_t)ptr;
        sh->dtx_len = (uint32_t)len;
        __atomic_store_n(&sh->dtx_seq, seq, __ATOMIC_RELEASE);
    } else {
        sh->drx_ptr = (uint64_t)(uintptr_t)ptr;
        sh->drx_len = (uint32_t)len;
        __atomic_store_n(&sh->drx_seq, seq, __ATOMIC_RELEASE);
    }
    return emu_await(n, sh, send, seq, until);
}

static int64_t emu_xfer(rg_net_t *n, int s, void *buf, int len, int send, uint64_t timeout_ns)
{
    int st = emu_check(n, s, send);
    if (st != REMORA_OK)
        return st;
    if (buf == NULL || len < 0)
        return REMORA_ERR_INVALID_PARAM;
    if (len == 0)
        return 0;
    uint64_t until = now_ns() + (timeout_ns ? timeout_ns : n->timeout_ns);
    rg_sock_shm_t *sh = emu_sock(n, s);
    int req = (__atomic_load_n(&sh->rx_eof, __ATOMIC_ACQUIRE) & RG_RX_REQ) != 0;
    int big = n->direct_min && (uint64_t)len >= n->direct_min;
    uint64_t offer_min = req ? n->direct_min : n->bounce_min; /* socket.cuh tx_offers */
    int64_t avail;
    unsigned naps = 0;
    if (send && offer_min && (uint64_t)len >= offer_min) {
        /* A GPU peer: host memory cannot be shared, the answer is "use the
         * ring". Other peers: the proxy copies the buffer out and sends it. */
        int32_t r = emu_request(n, sh, 1, buf, len, until);
        if (r > 0 && !req)
            g_bounced++;
        if (r != RG_RES_RING)
            return r;
        if (req)
            g_direct_fallbacks++;
        else
            g_bounce_fallbacks++;
    }
    for (;;) {
        if (send) {
            if (sh->error)
                return sh->error;
            uint64_t used = sh->tx_head - ld(&sh->tx_tail);
            if ((avail = (int64_t)(n->ring_size - used)) > 0)
                break;
        } else {
            uint64_t head = ld(&sh->rx_head);
            if ((avail = (int64_t)(head - sh->rx_tail)) > 0)
                break;
            if (__atomic_load_n(&sh->rx_eof, __ATOMIC_ACQUIRE) & RG_RX_EOF) {
                if (ld(&sh->rx_head) != sh->rx_tail)
                    continue;
                return 0;
            }
            if (sh->error)
                return sh->error;
            if (req) { /* the ring is empty: ask the proxy */
                int32_t r = emu_request(n, sh, 0, big ? buf : NULL, len, until);
                if (r != RG_RES_RING)
                    return r;
                continue;
            }
        }
        if (!__atomic_load_n(&n->alive, __ATOMIC_ACQUIRE))
            return REMORA_ERR_CANCELED;
        if (now_ns() > until)
            return REMORA_ERR_TIMED_OUT;
        gpu_spin(&naps);
    }
    if (avail > len)
        avail = len;
    uint8_t *base = (uint8_t *)(uintptr_t)(send ? n->tx_data : n->rx_data) + (size_t)s * n->ring_size;
    uint64_t pos = send ? sh->tx_head : sh->rx_tail;
    size_t off = (size_t)(pos & (n->ring_size - 1)), first = n->ring_size - off;
    if (first > (size_t)avail)
        first = (size_t)avail;
    if (send) {
        memcpy(base + off, buf, first);
        memcpy(base, (uint8_t *)buf + first, (size_t)avail - first);
        __atomic_store_n(&sh->tx_head, pos + (uint64_t)avail, __ATOMIC_RELEASE);
    } else {
        memcpy(buf, base + off, first);
        memcpy((uint8_t *)buf + first, base, (size_t)avail - first);
        __atomic_store_n(&sh->rx_tail, pos + (uint64_t)avail, __ATOMIC_RELEASE);
    }
    return avail;
}

/* ---------------------------------------------------------------- peers */

static int tcp_listen_any(unsigned *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 128) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static void *tcp_echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
        for (ssize_t off = 0; off < n;) {
            ssize_t m = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (m <= 0)
                goto out;
            off += m;
        }
out:
    close(fd);
    return NULL;
}

static int g_tcp_echo_fd;
static unsigned g_tcp_echo_port;

static void *tcp_echo_accept(void *arg)
{
    for (;;) {
        int fd = accept(g_tcp_echo_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_t t;
        pthread_create(&t, NULL, tcp_echo_conn, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

static remora_context_h g_ctx;
static remora_server_h g_server;
static char g_server_addr[IT_ADDR_MAX];
static remora_sock_listener_h g_echo;
static atomic_int g_stop;
static pthread_t g_echo_thread;

static void *rsock_echo_one(void *arg)
{
    remora_sock_h s = arg;
    char *buf = malloc(1 << 20);
    int64_t n;
    while ((n = remora_sock_recv(s, buf, 1 << 20, 30000)) > 0)
        for (int64_t off = 0; off < n;) {
            int64_t m = remora_sock_send(s, buf + off, (size_t)(n - off), 30000);
            if (m < 0)
                goto out;
            off += m;
        }
out:
    free(buf);
    remora_sock_close(s);
    return NULL;
}

static void *rsock_echo_accept(void *arg)
{
    while (!atomic_load(&g_stop)) {
        remora_sock_h s;
        if (remora_sock_accept(g_echo, 100, &s) == REMORA_OK) {
            pthread_t t;
            pthread_create(&t, NULL, rsock_echo_one, s);
            pthread_detach(t);
        }
    }
    return NULL;
}

static int group_setup(void **state)
{
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    pthread_t t;

    if ((g_tcp_echo_fd = tcp_listen_any(&g_tcp_echo_port)) < 0)
        return -1;
    pthread_create(&t, NULL, tcp_echo_accept, NULL);
    pthread_detach(t);
    if (remora_context_create(NULL, &g_ctx) != REMORA_OK ||
        remora_server_create(g_ctx, &sp, &g_server) != REMORA_OK ||
        remora_server_address(g_server, g_server_addr, sizeof(g_server_addr)) != REMORA_OK ||
        remora_sock_listen(g_server, "echo", &g_echo) != REMORA_OK)
        return -1;
    return pthread_create(&g_echo_thread, NULL, rsock_echo_accept, NULL);
}

static int group_teardown(void **state)
{
    atomic_store(&g_stop, 1);
    pthread_join(g_echo_thread, NULL);
    remora_sock_listener_destroy(g_echo);
    remora_server_destroy(g_server);
    remora_context_destroy(g_ctx);
    return 0;
}

static remora_gpunet_h net_new_on(remora_context_h ctx, size_t ring, unsigned timeout_ms)
{
    remora_gpunet_params_t p = {
        .field_mask = REMORA_GPUNET_FIELD_HOST_QUEUES | REMORA_GPUNET_FIELD_SERVER |
                      REMORA_GPUNET_FIELD_RING_SIZE | REMORA_GPUNET_FIELD_TIMEOUT_MS,
        .host_queues = 1, .server = g_server, .ring_size = ring, .timeout_ms = timeout_ms};
    remora_gpunet_h g;
    it_assert_ok(remora_gpunet_create(ctx, 0, &p, &g));
    return g;
}

static remora_gpunet_h net_new(size_t ring, unsigned timeout_ms)
{
    return net_new_on(g_ctx, ring, timeout_ms);
}

/* Send len bytes and read them back (the peer echoes), in pieces. */
static void emu_echo(rg_net_t *n, int s, size_t len, size_t piece, uint64_t seed)
{
    uint8_t *out = malloc(len), *in = malloc(len);
    size_t sent = 0, got = 0;

    it_fill_random(out, len, seed);
    while (got < len) {
        if (sent < len) {
            size_t k = len - sent < piece ? len - sent : piece;
            int64_t m = emu_xfer(n, s, out + sent, (int)k, 1, 1000000);
            if (!(m > 0 || m == REMORA_ERR_TIMED_OUT)) print_message("send %zu/%zu: %d\n", sent, len, (int)m);
            assert_true(m > 0 || m == REMORA_ERR_TIMED_OUT);
            if (m > 0)
                sent += (size_t)m;
        }
        int64_t r = emu_xfer(n, s, in + got, (int)(len - got), 0, sent > got ? 1000000 : 1);
        if (r == REMORA_ERR_TIMED_OUT)
            continue;
        if (r <= 0) print_message("recv %zu/%zu (sent %zu): %d\n", got, len, sent, (int)r);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_memory_equal(in, out, len);
    free(out);
    free(in);
}

static void echo_sizes(const char *addr)
{
    remora_gpunet_h g = net_new(64u << 10, 10000); /* small rings: wrap-arounds, partial sends */
    rg_net_t *n = remora_gpunet_device_handle(g);
    int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    for (size_t len = 1; len <= (4u << 20); len *= 4)
        emu_echo(n, s, len, len, len);
    emu_echo(n, s, 4u << 20, 4u << 20, 1);
    emu_echo(n, s, 300001, 4099, 2);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    remora_gpunet_destroy(g);
}

static void test_echo_tcp(void **state)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", g_tcp_echo_port);
    echo_sizes(addr);
}

static void test_echo_remora(void **state)
{
    char addr[IT_ADDR_MAX + 32];
    snprintf(addr, sizeof(addr), "remora://%s/echo", g_server_addr);
    echo_sizes(addr);
}

typedef struct par { rg_net_t *n; char addr[IT_ADDR_MAX + 32]; int idx, ok; } par_t;

static void *par_one(void *arg)
{
    par_t *p = arg;
    uint8_t out[65536], in[65536];
    int s = emu_cmd(p->n, RG_OP_CONNECT, -1, 0, p->addr, 0);
    if (s < 0) {
        print_message("socket %d: connect %s: %d\n", p->idx, p->addr, s);
        return NULL;
    }
    it_fill_random(out, sizeof(out), (uint64_t)p->idx);
    for (int round = 0; round < 4; round++) {
        size_t sent = 0, got = 0;
        while (got < sizeof(in)) {
            if (sent < sizeof(out)) {
                int64_t m = emu_xfer(p->n, s, out + sent, (int)(sizeof(out) - sent), 1, 0);
                if (m < 0) {
                    print_message("socket %d: send: %d\n", p->idx, (int)m);
                    return NULL;
                }
                sent += (size_t)m;
            }
            int64_t r = emu_xfer(p->n, s, in + got, (int)(sizeof(in) - got), 0, 0);
            if (r <= 0) {
                print_message("socket %d (%s): recv after %zu: %d\n", p->idx, p->addr, got, (int)r);
                return NULL;
            }
            got += (size_t)r;
        }
        if (memcmp(in, out, sizeof(in)))
            return NULL;
    }
    p->ok = emu_cmd(p->n, RG_OP_CLOSE, s, 0, NULL, 0) == 0;
    return NULL;
}

/* 64 "thread blocks" on g, a socket each, at once: half TCP, half remora. */
static void run_64_sockets(remora_gpunet_h g)
{
    pthread_t t[64];
    par_t p[64];

    for (int i = 0; i < 64; i++) {
        p[i] = (par_t){.n = remora_gpunet_device_handle(g), .idx = i};
        if (i % 2)
            snprintf(p[i].addr, sizeof(p[i].addr), "tcp://127.0.0.1:%u", g_tcp_echo_port);
        else
            snprintf(p[i].addr, sizeof(p[i].addr), "remora://%s/echo", g_server_addr);
        pthread_create(&t[i], NULL, par_one, &p[i]);
    }
    /* All joined before any check: a failed check leaves the test, and p[]
     * with it, while the threads still use it. */
    for (int i = 0; i < 64; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 64; i++)
        assert_true(p[i].ok);
}

static void test_64_sockets(void **state)
{
    remora_gpunet_h g = net_new(256u << 10, 20000);
    run_64_sockets(g);
    remora_gpunet_destroy(g);
}

typedef struct silent_connect { rg_net_t *n; char addr[64]; int result; double ms; } silent_connect_t;

static void *silent_connect(void *arg)
{
    silent_connect_t *sc = arg;
    double t0 = it_now_ms();
    sc->result = emu_cmd(sc->n, RG_OP_CONNECT, -1, 0, sc->addr, 0);
    sc->ms     = it_now_ms() - t0;
    return NULL;
}

/* A remora:// connect to a server that never answers (a listener nobody
 * accepts from: the handshake waits out the budget) holds none of the
 * proxy's other work: a TCP echo on another socket meanwhile takes a
 * fraction of that budget, and the connect fails when it runs out. */
static void test_connect_silent_server(void **state)
{
    remora_gpunet_h g = net_new(64u << 10, 4000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    unsigned port;
    int silent = tcp_listen_any(&port);
    silent_connect_t sc = {.n = n};
    char addr[64];
    pthread_t t;

    assert_true(silent >= 0);
    snprintf(sc.addr, sizeof(sc.addr), "remora://127.0.0.1:%u/echo", port);
    pthread_create(&t, NULL, silent_connect, &sc);
    usleep(200000); /* the connect is under way */
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", g_tcp_echo_port);
    double t0 = it_now_ms();
    int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    emu_echo(n, s, 100000, 4099, 7);
    double ms = it_now_ms() - t0;
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    pthread_join(t, NULL);
    print_message("TCP echo beside a silent remora:// connect: %.0f ms; the connect: %d after "
                  "%.0f ms\n", ms, sc.result, sc.ms);
    assert_true(ms < 2000);
    assert_true(sc.result < 0);
    assert_true(sc.ms > 3000 && sc.ms < 12000);
    close(silent);
    remora_gpunet_destroy(g);
}

/* Connect a TCP client to port, send msg, read it back. */
static void *cpu_tcp_client(void *arg)
{
    unsigned port = (unsigned)(uintptr_t)arg;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char out[1000], in[1000];
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    for (int tries = 0; connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0; tries++) {
        if (tries > 200)
            return (void *)0;
        usleep(10000);
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
    }
    it_fill_random(out, sizeof(out), port);
    if (send(fd, out, sizeof(out), 0) != (ssize_t)sizeof(out))
        return (void *)0;
    while (got < sizeof(in)) {
        ssize_t r = recv(fd, in + got, sizeof(in) - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return (void *)(uintptr_t)(got == sizeof(in) && memcmp(in, out, sizeof(in)) == 0);
}

/* The "kernel" listens on TCP and serves 3 CPU clients one after another,
 * echoing until each one's end of stream. */
static void test_device_server_tcp(void **state)
{
    remora_gpunet_h g = net_new(64u << 10, 10000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    unsigned port;
    int probe = tcp_listen_any(&port);
    char addr[64], buf[4096];
    pthread_t t[3];

    close(probe);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    int ls = emu_cmd(n, RG_OP_BIND, -1, 0, addr, 0);
    assert_true(ls >= 0);
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, cpu_tcp_client, (void *)(uintptr_t)port);
    for (int i = 0; i < 3; i++) {
        int s = emu_cmd(n, RG_OP_ACCEPT, ls, 0, NULL, 0);
        assert_true(s >= 0);
        int64_t r;
        while ((r = emu_xfer(n, s, buf, sizeof(buf), 0, 0)) > 0)
            for (int64_t off = 0; off < r;) {
                int64_t m = emu_xfer(n, s, buf + off, (int)(r - off), 1, 0);
                assert_true(m > 0);
                off += m;
            }
        if (r != 0) /* the client closed after reading its echo: EOF or a reset */
            assert_int_equal(r, REMORA_ERR_DISCONNECTED);
        assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    }
    for (int i = 0; i < 3; i++) {
        void *ok;
        pthread_join(t[i], &ok);
        assert_true(ok != NULL);
    }
    assert_int_equal(emu_cmd(n, RG_OP_ACCEPT, ls, RG_CMD_NONBLOCK, NULL, 0), REMORA_ERR_TIMED_OUT);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, ls, 0, NULL, 0), 0);
    remora_gpunet_destroy(g);
}

typedef struct gpu_echo { rg_net_t *n; int ls; atomic_int served; } gpu_echo_t;

/* The listening "kernel" of test_gpu_peer: echo each connection to its end. */
static void *gpu_echo_serve(void *arg)
{
    gpu_echo_t *e = arg;
    uint8_t *buf = malloc(1 << 20);
    for (;;) {
        int s = emu_cmd(e->n, RG_OP_ACCEPT, e->ls, 0, NULL, 0);
        if (s < 0) {
            free(buf);
            return NULL;
        }
        int64_t r;
        while ((r = emu_xfer(e->n, s, buf, 1 << 20, 0, 0)) > 0)
            for (int64_t off = 0; off < r;) {
                int64_t m = emu_xfer(e->n, s, buf + off, (int)(r - off), 1, 0);
                if (m <= 0)
                    break;
                off += m;
            }
        emu_cmd(e->n, RG_OP_CLOSE, s, 0, NULL, 0);
        atomic_fetch_add(&e->served, 1);
    }
}

/* Two proxies on one host: a connect to the other's TCP listener finds its
 * local name and the socket speaks frames and requests (RG_RX_REQ) instead
 * of TCP. Byte-exact echo 1 B..4 MiB with partial sends and receives; large
 * sends offer their buffer and, being host memory here, go through the ring
 * (the device-to-device copy itself runs on the GPU machine, test_gpunet);
 * a CPU TCP client of the same listener still gets TCP; the listening proxy
 * destroyed -> the other side's calls fail promptly. */
static void test_gpu_peer(void **state)
{
    remora_gpunet_h ga = net_new(64u << 10, 10000), gb = net_new(64u << 10, 10000);
    rg_net_t *na = remora_gpunet_device_handle(ga), *nb = remora_gpunet_device_handle(gb);
    unsigned port;
    int probe = tcp_listen_any(&port);
    char addr[64], b[16];
    pthread_t t;
    void *ok;

    close(probe);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    static gpu_echo_t e;
    e.n = na;
    e.ls = emu_cmd(na, RG_OP_BIND, -1, 0, addr, 0);
    atomic_store(&e.served, 0);
    assert_true(e.ls >= 0);
    pthread_create(&t, NULL, gpu_echo_serve, &e);
    int s = emu_cmd(nb, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    assert_true(emu_sock(nb, s)->rx_eof & RG_RX_REQ);
    int before = atomic_load(&g_direct_fallbacks);
    for (size_t len = 1; len <= (4u << 20); len *= 4)
        emu_echo(nb, s, len, len, len);
    emu_echo(nb, s, 300001, 4099, 2);
    assert_true(atomic_load(&g_direct_fallbacks) > before);
    assert_int_equal(emu_cmd(nb, RG_OP_CLOSE, s, 0, NULL, 0), 0);

    pthread_t c;
    pthread_create(&c, NULL, cpu_tcp_client, (void *)(uintptr_t)port);
    pthread_join(c, &ok);
    assert_true(ok != NULL);

    /* four sockets at once, each with its own server "block" */
    pthread_t more[3], cl[4];
    par_t pc[4];
    for (int k = 0; k < 3; k++)
        pthread_create(&more[k], NULL, gpu_echo_serve, &e);
    for (int k = 0; k < 4; k++) {
        pc[k] = (par_t){.n = nb, .idx = k};
        snprintf(pc[k].addr, sizeof(pc[k].addr), "%s", addr);
        pthread_create(&cl[k], NULL, par_one, &pc[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(cl[k], NULL);
        assert_true(pc[k].ok);
    }

    s = emu_cmd(nb, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    assert_int_equal(emu_xfer(nb, s, b, 4, 1, 0), 4);
    for (int got = 0; got < 4;) {
        int64_t r = emu_xfer(nb, s, b, 4, 0, 0);
        assert_true(r > 0);
        got += (int)r;
    }
    remora_gpunet_destroy(ga); /* its sockets go without a FIN */
    double t0 = it_now_ms();
    assert_int_equal(emu_xfer(nb, s, b, 4, 0, 0), REMORA_ERR_DISCONNECTED);
    assert_true(it_now_ms() - t0 < 2000);
    pthread_join(t, NULL);
    for (int k = 0; k < 3; k++)
        pthread_join(more[k], NULL);
    assert_true(atomic_load(&e.served) >= 6);
    assert_int_equal(emu_cmd(nb, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    remora_gpunet_destroy(gb);
}

static const char *g_self;

/* A GPU peer on this host that stops answering (SIGSTOP: its sockets stay
 * open, as a killed process's do while the driver tears its context down):
 * a call waiting on it fails with DISCONNECTED within the peer timeout
 * (the library's default, 2 s, on a context of its own: see main), never
 * waits for its own budget. */
static void test_gpu_peer_stopped(void **state)
{
    remora_context_params_t cp = {.field_mask = REMORA_CONTEXT_FIELD_HEARTBEAT,
                                  .heartbeat_ms = 500, .peer_timeout_ms = 2000};
    remora_context_h ctx;
    it_assert_ok(remora_context_create(&cp, &ctx));
    remora_gpunet_h g = net_new_on(ctx, 64u << 10, 20000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    unsigned port;
    int probe = tcp_listen_any(&port), fds[2];
    char ports[16], line[64] = "", addr[64], b[16] = "ping";

    close(probe);
    snprintf(ports, sizeof(ports), "%u", port);
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        execl(g_self, g_self, "--stopped-peer", ports, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    assert_true(emu_sock(n, s)->rx_eof & RG_RX_REQ);
    assert_int_equal(emu_xfer(n, s, b, 4, 1, 0), 4);
    for (int got = 0; got < 4;) {
        int64_t r = emu_xfer(n, s, b + got, 4 - got, 0, 0);
        assert_true(r > 0);
        got += (int)r;
    }
    kill(pid, SIGSTOP);
    double t0 = it_now_ms();
    int64_t r = emu_xfer(n, s, b, sizeof(b), 0, 0); /* a 20 s budget */
    double ms = it_now_ms() - t0;
    print_message("recv from a stopped peer: %d after %.0f ms\n", (int)r, ms);
    assert_int_equal(r, REMORA_ERR_DISCONNECTED);
    assert_true(ms < 5000);
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    remora_gpunet_destroy(g);
    remora_context_destroy(ctx);
}

/* The "kernel" listens as remora:gpusvc; a CPU remora client talks to it. */
static void test_device_server_remora(void **state)
{
    remora_gpunet_h g = net_new(64u << 10, 10000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    it_client_t c;
    remora_sock_h cs;
    char buf[8192], out[5000], in[5000];

    int ls = emu_cmd(n, RG_OP_BIND, -1, 0, "remora:gpusvc", 0);
    assert_true(ls >= 0);
    assert_int_equal(emu_cmd(n, RG_OP_BIND, -1, 0, "remora:gpusvc", 0), REMORA_ERR_EXISTS);
    it_assert_ok(it_client_open(&c, g_server_addr, NULL));
    it_assert_ok(remora_sock_connect(c.client, "gpusvc", 5000, &cs));
    int s = emu_cmd(n, RG_OP_ACCEPT, ls, 0, NULL, 0);
    assert_true(s >= 0);
    it_fill_random(out, sizeof(out), 5);
    assert_int_equal(remora_sock_send(cs, out, sizeof(out), 5000), sizeof(out));
    it_assert_ok(remora_sock_shutdown(cs));
    size_t total = 0;
    int64_t r;
    while ((r = emu_xfer(n, s, buf + total, (int)(sizeof(buf) - total), 0, 0)) > 0)
        total += (size_t)r;
    assert_int_equal(r, 0); /* end of stream after the 5000 bytes */
    assert_int_equal(total, sizeof(out));
    assert_int_equal(emu_xfer(n, s, buf, (int)total, 1, 0), (int64_t)total);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0); /* drains, then ends */
    size_t got = 0;
    while ((r = remora_sock_recv(cs, in + got, sizeof(in) - got, 5000)) > 0)
        got += (size_t)r;
    assert_int_equal(r, 0);
    assert_int_equal(got, sizeof(in));
    assert_memory_equal(in, out, sizeof(in));
    remora_sock_close(cs);
    it_client_close(&c);
    remora_gpunet_destroy(g);
}

/* A TCP peer that resets mid-transfer: the "kernel's" next calls fail.
 * Sends of `len` bytes (through the ring, or the proxy's bounce buffer). */
static void peer_reset(size_t len)
{
    remora_gpunet_h g = net_new(64u << 10, 5000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    unsigned port;
    int lfd = tcp_listen_any(&port);
    char addr[64], *buf = calloc(1, len);
    const int buf_len = (int)len;

    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    int pfd = accept(lfd, NULL, NULL);
    assert_true(pfd >= 0);
    assert_true(emu_xfer(n, s, buf, buf_len, 1, 0) > 0);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(pfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(pfd); /* RST */
    double t0 = it_now_ms();
    int64_t r;
    do {
        r = emu_xfer(n, s, buf, buf_len, 1, 0);
    } while (r > 0 && it_now_ms() - t0 < 5000);
    assert_int_equal(r, REMORA_ERR_DISCONNECTED);
    assert_int_equal(emu_xfer(n, s, buf, buf_len, 0, 0), REMORA_ERR_DISCONNECTED);
    assert_true(it_now_ms() - t0 < 2000);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    close(lfd);
    remora_gpunet_destroy(g);
    free(buf);
}

static void test_peer_reset(void **state)
{
    peer_reset(64u << 10);
}

/* ---------------------------------------------------------------- bounce buffers */

/* A proxy whose sends of 4 KiB or more go through its bounce buffer. */
static remora_gpunet_h net_new_bounce(size_t ring, unsigned timeout_ms)
{
    setenv("REMORA_GPUNET_BOUNCE_MIN", "4096", 1);
    remora_gpunet_h g = net_new(ring, timeout_ms);
    unsetenv("REMORA_GPUNET_BOUNCE_MIN");
    return g;
}

/* Echo 1 B..4 MiB through the bounce buffer, TCP and remora peers; partial
 * sends (the echo peer stops reading while its answers fill our ring) are
 * reassembled. */
static void test_bounce_echo(void **state)
{
    const char *addrs[2];
    char tcp[64], rem[IT_ADDR_MAX + 32];
    int before = atomic_load(&g_bounced);

    snprintf(tcp, sizeof(tcp), "tcp://127.0.0.1:%u", g_tcp_echo_port);
    snprintf(rem, sizeof(rem), "remora://%s/echo", g_server_addr);
    addrs[0] = tcp;
    addrs[1] = rem;
    for (int k = 0; k < 2; k++) {
        remora_gpunet_h g = net_new_bounce(64u << 10, 10000);
        rg_net_t *n = remora_gpunet_device_handle(g);
        assert_int_equal(n->bounce_min, 4096);
        int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addrs[k], 0);
        assert_true(s >= 0);
        for (size_t len = 1; len <= (4u << 20); len *= 4)
            emu_echo(n, s, len, len, len);
        emu_echo(n, s, 300001, 40099, 2);
        assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
        remora_gpunet_stats_t st = {.field_mask = ~0ull};
        it_assert_ok(remora_gpunet_stats(g, &st));
        assert_int_equal(st.field_mask, 0xf);
        assert_true(st.bounce_sends > 0 && st.bounce_bytes >= st.bounce_sends * 4096);
        assert_true(st.ring_bytes > 0); /* the small ones */
        remora_gpunet_destroy(g);
    }
    assert_true(atomic_load(&g_bounced) > before);
    remora_gpunet_stats_t st = {.field_mask = REMORA_GPUNET_STATS_FIELD_RING_BYTES};
    assert_int_equal(remora_gpunet_stats(NULL, &st), REMORA_ERR_INVALID_PARAM);
}

typedef struct drain { int fd; uint8_t *buf; size_t cap, got; } drain_t;

static void *drain_all(void *arg)
{
    drain_t *d = arg;
    ssize_t r;

    while (d->got < d->cap && (r = recv(d->fd, d->buf + d->got, d->cap - d->got, 0)) > 0)
        d->got += (size_t)r;
    return NULL;
}

/* A peer that does not read: large sends return what went out (or time
 * out within their budget), never hang; once it reads, the stream it gets
 * is exactly what the sends said they sent, in order. */
static void test_bounce_stalled_peer(void **state)
{
    remora_gpunet_h g = net_new_bounce(64u << 10, 2000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    const size_t total = 64u << 20, piece = 4u << 20;
    uint8_t *out = malloc(total);
    unsigned port;
    int lfd = tcp_listen_any(&port);
    char addr[64];
    size_t sent = 0;
    int partial = 0, timed_out = 0;

    it_fill_random(out, total, 7);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    int pfd = accept(lfd, NULL, NULL);
    assert_true(pfd >= 0);
    /* Until the socket's buffers and the ring are full (a few MiB). */
    for (int k = 0; k < 64 && !timed_out && sent + piece <= total; k++) {
        double t = it_now_ms();
        int64_t m = emu_xfer(n, s, out + sent, (int)piece, 1, 300000000u);
        assert_true(m > 0 || m == REMORA_ERR_TIMED_OUT);
        assert_true(it_now_ms() - t < 1300);
        if (m > 0) {
            assert_true((size_t)m <= piece);
            partial += (size_t)m < piece;
            sent += (size_t)m;
        } else {
            timed_out++;
        }
    }
    assert_true(sent > 0);
    assert_true(partial > 0);
    assert_true(timed_out > 0); /* the ring filled too, and the peer still did not read */
    drain_t d = {.fd = pfd, .buf = malloc(total), .cap = total};
    pthread_t t;
    pthread_create(&t, NULL, drain_all, &d);
    while (sent < total) {
        int64_t m = emu_xfer(n, s, out + sent, (int)(total - sent < piece ? total - sent : piece),
                             1, 0);
        assert_true(m > 0);
        sent += (size_t)m;
    }
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0); /* the stream ends */
    pthread_join(t, NULL);
    remora_gpunet_stats_t st = {.field_mask = ~0ull};
    it_assert_ok(remora_gpunet_stats(g, &st));
    assert_int_equal(st.bounce_bytes + st.ring_bytes, total); /* every byte once */
    assert_true(st.bounce_to_ring > 0);                         /* the stalled request */
    assert_int_equal(d.got, total);
    assert_memory_equal(d.buf, out, total);
    free(d.buf);
    free(out);
    close(pfd);
    close(lfd);
    remora_gpunet_destroy(g);
}

/* The peer resets while the proxy sends from its bounce buffer. */
static void test_bounce_peer_reset(void **state)
{
    setenv("REMORA_GPUNET_BOUNCE_MIN", "4096", 1);
    peer_reset(1u << 20);
    unsetenv("REMORA_GPUNET_BOUNCE_MIN");
}

/* 64 sockets on few workers: one bounce buffer each, the other sockets'
 * requests go back to the ring; every byte arrives either way. */
static void test_bounce_64_sockets(void **state)
{
    int bounced = atomic_load(&g_bounced), fell_back = atomic_load(&g_bounce_fallbacks);
    remora_gpunet_h g = net_new_bounce(256u << 10, 20000);

    run_64_sockets(g);
    remora_gpunet_destroy(g);
    assert_true(atomic_load(&g_bounced) > bounced);
    assert_true(atomic_load(&g_bounce_fallbacks) > fell_back);
}

typedef struct waiter { rg_net_t *n; int s; int64_t r; double ms; } waiter_t;

static void *wait_recv(void *arg)
{
    waiter_t *w = arg;
    char b[16];
    double t0 = it_now_ms();
    w->r = emu_xfer(w->n, w->s, b, sizeof(b), 0, 30ull * 1000000000u);
    w->ms = it_now_ms() - t0;
    return NULL;
}

/* The proxy destroyed while a "kernel" waits in recv: it returns CANCELED
 * promptly, and every later call fails too. */
static void test_proxy_destroyed(void **state)
{
    remora_gpunet_h g = net_new(64u << 10, 30000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    char addr[64];
    pthread_t t;

    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", g_tcp_echo_port);
    waiter_t w = {.n = n, .s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0)};
    assert_true(w.s >= 0);
    pthread_create(&t, NULL, wait_recv, &w);
    it_sleep_ms(200);
    remora_gpunet_destroy(g);
    pthread_join(t, NULL);
    assert_true(w.r == REMORA_ERR_CANCELED);
    assert_true(w.ms < 1000);
    assert_int_equal(emu_xfer(n, w.s, addr, 4, 1, 0), REMORA_ERR_CANCELED);
    assert_int_equal(emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0), REMORA_ERR_CANCELED);
}

static void test_bad_args(void **state)
{
    /* A proxy budget far above the call's own below (100 ms), so that which
     * of the two ended the call shows even on a loaded machine. */
    remora_gpunet_h g = net_new(64u << 10, 20000);
    rg_net_t *n = remora_gpunet_device_handle(g);
    char addr[IT_ADDR_MAX + 64], buf[8];
    unsigned port;
    int lfd = tcp_listen_any(&port);

    close(lfd); /* nothing listens there now */
    assert_int_equal(emu_xfer(n, 7, buf, 8, 1, 0), REMORA_ERR_INVALID_PARAM);   /* not open */
    assert_int_equal(emu_xfer(n, -1, buf, 8, 0, 0), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(emu_xfer(n, 100000, buf, 8, 0, 0), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, 5, 0, NULL, 0), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(emu_cmd(n, RG_OP_ACCEPT, 5, 0, NULL, 0), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(emu_cmd(n, 99, -1, 0, NULL, 0), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(emu_cmd(n, RG_OP_CONNECT, -1, 0, "udp://x", 0), REMORA_ERR_ADDRESS);
    assert_int_equal(emu_cmd(n, RG_OP_CONNECT, -1, 0, "tcp://nocolon", 0), REMORA_ERR_ADDRESS);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    assert_int_equal(emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0), REMORA_ERR_CONNECTION_REFUSED);
    snprintf(addr, sizeof(addr), "remora://%s/nobody", g_server_addr);
    assert_int_equal(emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0), REMORA_ERR_NOT_FOUND);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", g_tcp_echo_port);
    int s = emu_cmd(n, RG_OP_CONNECT, -1, 0, addr, 0);
    assert_true(s >= 0);
    assert_int_equal(emu_xfer(n, s, NULL, 8, 1, 0), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(emu_xfer(n, s, buf, -1, 0, 0), REMORA_ERR_INVALID_PARAM);
    double t0 = it_now_ms();
    assert_int_equal(emu_xfer(n, s, buf, 8, 0, 100000000u), REMORA_ERR_TIMED_OUT);
    assert_true(it_now_ms() - t0 < 10000);
    assert_int_equal(emu_cmd(n, RG_OP_CLOSE, s, 0, NULL, 0), 0);
    remora_gpunet_destroy(g);
}

/* The peer of test_gpu_peer_stopped, another process: a proxy whose "kernel"
 * echoes one connection on tcp://127.0.0.1:PORT. */
static int stopped_peer_child(const char *port)
{
    remora_context_h ctx;
    remora_gpunet_params_t p = {.field_mask = REMORA_GPUNET_FIELD_HOST_QUEUES,
                                .host_queues = 1};
    remora_gpunet_h g;
    char addr[64];

    if (remora_context_create(NULL, &ctx) != REMORA_OK ||
        remora_gpunet_create(ctx, 0, &p, &g) != REMORA_OK)
        return 1;
    static gpu_echo_t e;
    e.n = remora_gpunet_device_handle(g);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%s", port);
    if ((e.ls = emu_cmd(e.n, RG_OP_BIND, -1, 0, addr, 0)) < 0)
        return 1;
    printf("listening\n");
    fflush(stdout);
    gpu_echo_serve(&e);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--stopped-peer") == 0)
        return stopped_peer_child(argv[2]);
    g_self = argv[0];
    /* The remora connections here (the proxies' clients to g_server, all in
     * this process) are not what is tested, and their heartbeats come from
     * progress threads that share two CPUs with 64 threads playing kernels:
     * on a loaded machine (sanitizers, tests in parallel) a scheduling delay
     * of more than the default 2 s peer timeout was seen to end one, failing
     * every remora socket on it with DISCONNECTED. Every context made from
     * here on (g_ctx, the server's, the proxies' own client contexts) gets a
     * longer one; test_gpu_peer_stopped, which tests the peer timeout, sets
     * its own. */
    setenv("REMORA_PEER_TIMEOUT_MS", "30000", 1);
    it_init("gpunet_queue");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_tcp),
        cmocka_unit_test(test_echo_remora),
        cmocka_unit_test(test_64_sockets),
        cmocka_unit_test(test_connect_silent_server),
        cmocka_unit_test(test_device_server_tcp),
        cmocka_unit_test(test_device_server_remora),
        cmocka_unit_test(test_gpu_peer),
        cmocka_unit_test(test_gpu_peer_stopped),
        cmocka_unit_test(test_peer_reset),
        cmocka_unit_test(test_bounce_echo),
        cmocka_unit_test(test_bounce_stalled_peer),
        cmocka_unit_test(test_bounce_peer_reset),
        cmocka_unit_test(test_bounce_64_sockets),
        cmocka_unit_test(test_proxy_destroyed),
        cmocka_unit_test(test_bad_args),
    };
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
