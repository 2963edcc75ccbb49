/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU sockets: the host proxy (remora.h "GPU sockets", docs/gpunet.md).
 *
 * Design notes
 * - One proxy per remora_gpunet_create: one thread that polls, in a loop,
 *   the command slots and the socket rings kernels share with it
 *   (socket_abi.h), and moves bytes between the rings and each socket's
 *   backend: a plain TCP socket (non-blocking, readiness from an epoll set
 *   polled without blocking) or a remora socket (remora_sock_*, UCX).
 * - The queue memory is one pinned host allocation mapped for the device:
 *   the rg_net_t header, the socket records, the command slots, then a send
 *   and a receive ring per socket. Kernels copy payloads into and out of the
 *   rings themselves (posted PCIe writes; any buffer the kernel can read,
 *   shared memory included); the proxy hands ring memory straight to send()
 *   and recv(), so bytes are copied once on each side of the PCIe link.
 *   Large sends from global memory are the exception: the proxy copies them
 *   out with the copy engine (gpunet_bounce.c), or, to a GPU of this host,
 *   device to device (gpunet_peer.c).
 * - Single writer per field (socket_abi.h). The proxy keeps its own copy of
 *   the counters it owns and publishes them with release stores after the
 *   data; it reads the device's counters with acquire loads.
 * - A worker spins while anything happened in the last spin_us
 *   (REMORA_GPUNET_SPIN_US, default 2000 µs), then naps 50 µs at a time,
 *   and 1 ms once quiet for GN_DOZE_NS: kernel↔CPU round trips stay near
 *   the PCIe latency while work flows, and an idle proxy costs little. A
 *   worker (not 0) without sockets sleeps until handed one.
 * - Nothing blocks the proxy's loop: TCP connects are non-blocking and
 *   completed by the loop, remora:// connects (a handshake, a round trip)
 *   are made by a connector thread and finished by the loop
 *   (gpunet_connect.c).
 * - Destroy: the thread stops, every socket fails with REMORA_ERR_CANCELED,
 *   alive drops to 0 (kernels' calls return at once), and the queue memory
 *   is kept until process exit: a kernel may still read it.
 */
#include "gpu/gpunet_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "util/env.h"
#include "util/log.h"
#include "util/time.h"

typedef struct worker_arg {
    remora_gpunet_h g;
    unsigned        w;
} worker_arg_t;

/* Destroyed proxies' queue memory, kept for kernels that may still look. */
/* Queue memory of destroyed proxies (remora_gpunet_destroy). */
static struct {
    void *mem, *locks;
} parked[256];
static unsigned nparked;
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;

/* The epoll set of the worker that owns socket i's data (listeners: worker 0). */
static int owner_ep(remora_gpunet_h g, int i, int kind)
{
    return kind == BK_TCP_LISTEN ? g->epfd[0] : g->epfd[(unsigned)i % g->nworkers];
}

/* ------------------------------------------------------------ sockets */

void gn_complete(remora_gpunet_h g, unsigned slot, uint32_t seq, int32_t result)
{
    rg_cmd_t *c = &g->cmds[slot];
    c->result = result;
    __atomic_store_n(&c->done_seq, seq, __ATOMIC_RELEASE);
}

/* Worker 0 only. Data sockets are allocated BK_RESERVED and handed to their
 * owner with gn_hand_over() once their backend is set up. */
int gn_sock_alloc(remora_gpunet_h g, int kind)
{
    for (unsigned i = 0; i < g->max_socks; i++) {
        if (kind_of(&g->ps[i]) != BK_NONE || g->sh[i].state != RG_SOCK_FREE)
            continue;
        memset(&g->ps[i], 0, sizeof(g->ps[i]));
        g->ps[i].fd = g->ps[i].ufd = -1;
        set_kind(&g->ps[i], kind);
        rg_sock_shm_t *s = &g->sh[i];
        s->tx_head = s->rx_tail = s->tx_tail = s->rx_head = 0;
        s->dtx_seq = s->drx_seq = s->dtx_cancel = s->drx_cancel = 0;
        s->dtx_done = s->drx_done = 0;
        s->error   = 0;
        s->rx_eof  = 0;
        memset((void *)&g->q[i], 0, sizeof(g->q[i])); /* before gen: no kernel has the socket */
        s->gen++;
        return (int)i;
    }
    return -1;
}

/* gn_sock_alloc for a TCP socket, which the slot then holds; -1 (fd closed) when none is free. */
static int sock_alloc_fd(remora_gpunet_h g, int kind, int fd)
{
    int i = gn_sock_alloc(g, kind);

    if (i < 0)
        close(fd);
    else
        g->ps[i].fd = fd;
    return i;
}

void gn_sock_publish(remora_gpunet_h g, int i, int state)
{
    st_rel32(&g->sh[i].state, state);
}

/* By the socket's owner (worker 0 for listeners and connects in flight). */
void gn_sock_free(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];

    if (p->kind == BK_GPU)
        gp_release(g, i);
    else if (p->kind == BK_TCP || p->kind == BK_SOCK)
        gb_release(g, i);
    if (p->fd >= 0) {
        epoll_ctl(owner_ep(g, i, p->kind), EPOLL_CTL_DEL, p->fd, NULL);
        close(p->fd);
    }
    if (p->ufd >= 0) {
        epoll_ctl(owner_ep(g, i, p->kind), EPOLL_CTL_DEL, p->ufd, NULL);
        close(p->ufd);
    }
    if (p->rs)
        remora_sock_close(p->rs);
    if (p->rl)
        remora_sock_listener_destroy(p->rl);
    p->fd = p->ufd = -1;
    p->rs = NULL;
    p->rl = NULL;
    p->readable = p->closing = p->shutting = p->shut_done = 0;
    set_kind(p, BK_NONE); /* last: worker 0 may hand the slot out again */
    st_rel32(&g->sh[i].state, RG_SOCK_FREE);
}

void gn_sock_fail(remora_gpunet_h g, int i, remora_status_t st)
{
    if (g->sh[i].error == 0)
        st_rel32(&g->sh[i].error, st);
    if (flag(&g->ps[i].closing))
        gn_sock_free(g, i);
}

static int tcp_watch(remora_gpunet_h g, int i, int fd, int kind)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    return epoll_ctl(owner_ep(g, i, kind), EPOLL_CTL_ADD, fd, &ev);
}

int gn_watch_ctl(remora_gpunet_h g, int i, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i | GN_EV_CTL};
    return epoll_ctl(owner_ep(g, i, BK_GPU), EPOLL_CTL_ADD, fd, &ev);
}

/* Small sends go at once; a peer gone silent fails the socket within the
 * context's peer timeout (plus a second), as remora's own connections do,
 * instead of after TCP's 15 minutes of retries, or never when idle. */
static void tcp_tune(remora_gpunet_h g, int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (rm_tcp_keepalive(fd, (unsigned)(g->ctx->peer_timeout_ns / 1000000u)) != 0)
        rm_debug("keepalive not set on a GPU socket: %s", strerror(errno));
}

/* "HOST:PORT" into a sockaddr (IPv4 or IPv6). */
static remora_status_t tcp_addr(const char *hp, int passive, struct sockaddr_storage *ss,
                                socklen_t *len)
{
    char host[128];
    const char *colon = strrchr(hp, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0},
                    *ai;

    if (colon == NULL || (size_t)(colon - hp) >= sizeof(host) || colon[1] == '\0')
        return REMORA_ERR_ADDRESS;
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai) != 0)
        return REMORA_ERR_ADDRESS;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return REMORA_OK;
}

/* Socket i (reserved) talks to a GPU peer on this host over fd (and cfd,
 * its control socket; the acceptor gets it later) from now on. */
static int gpu_peer_ready(remora_gpunet_h g, int i, int fd, int cfd)
{
    g->ps[i].fd = fd;
    gp_open(g, i, cfd);
    tcp_watch(g, i, fd, BK_GPU);
    if (cfd >= 0)
        gn_watch_ctl(g, i, cfd);
    gn_hand_over(g, i, BK_GPU);
    gn_sock_publish(g, i, RG_SOCK_OPEN);
    return i;
}

static int connect_tcp(remora_gpunet_h g, const char *hp, unsigned slot, uint32_t seq)
{
    struct sockaddr_storage ss;
    socklen_t len;
    remora_status_t st;
    int fd, cfd, i;

    if ((st = tcp_addr(hp, 0, &ss, &len)) != REMORA_OK)
        return st;
    if ((fd = gp_connect(g, (struct sockaddr *)&ss, &cfd)) >= 0) { /* a GPU socket on this host */
        if ((i = gn_sock_alloc(g, BK_RESERVED)) < 0) {
            close(fd);
            close(cfd);
            return REMORA_ERR_BUSY;
        }
        return gpu_peer_ready(g, i, fd, cfd);
    }
    if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
        return REMORA_ERR_IO;
    tcp_tune(g, fd);
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS) {
        st = errno == ECONNREFUSED ? REMORA_ERR_CONNECTION_REFUSED : REMORA_ERR_IO;
        close(fd);
        return st;
    }
    if ((i = sock_alloc_fd(g, BK_TCP_CONNECTING, fd)) < 0)
        return REMORA_ERR_BUSY;
    g->ps[i].pend_slot = (int)slot;
    g->ps[i].pend_seq  = seq;
    g->ps[i].deadline  = rm_now_ns() + g->timeout_ns;
    return GN_PENDING;
}

/* A TCP connect in flight: finished, failed, abandoned or timed out? */
static int connect_progress(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    struct pollfd pfd = {.fd = p->fd, .events = POLLOUT};
    int err = 0;
    socklen_t elen = sizeof(err);
    remora_status_t st;

    if (gn_pend_abandoned(g, p)) {
        gn_sock_free(g, i);
        return 1;
    }
    if (poll(&pfd, 1, 0) == 0) {
        if (rm_now_ns() < p->deadline)
            return 0;
        st = REMORA_ERR_TIMED_OUT;
    } else {
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &elen);
        st = err == 0 ? REMORA_OK
                      : err == ECONNREFUSED ? REMORA_ERR_CONNECTION_REFUSED : REMORA_ERR_IO;
    }
    unsigned slot = (unsigned)p->pend_slot;
    uint32_t seq  = p->pend_seq;
    if (st != REMORA_OK) {
        gn_sock_free(g, i);
        gn_complete(g, slot, seq, st);
        return 1;
    }
    set_kind(p, BK_RESERVED);
    tcp_watch(g, i, p->fd, BK_TCP);
    gn_hand_over(g, i, BK_TCP); /* its owner pumps it from now on */
    gn_sock_publish(g, i, RG_SOCK_OPEN);
    gn_complete(g, slot, seq, i);
    return 1;
}

static int bind_any(remora_gpunet_h g, const char *addr)
{
    int i;

    if (strncmp(addr, "tcp://", 6) == 0) {
        struct sockaddr_storage ss;
        socklen_t len;
        remora_status_t st;
        int fd, one = 1;

        if ((st = tcp_addr(addr + 6, 1, &ss, &len)) != REMORA_OK)
            return st;
        if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
            return REMORA_ERR_IO;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 1024) != 0) {
            st = errno == EADDRINUSE ? REMORA_ERR_EXISTS : REMORA_ERR_IO;
            close(fd);
            return st;
        }
        if ((i = sock_alloc_fd(g, BK_TCP_LISTEN, fd)) < 0)
            return REMORA_ERR_BUSY;
        tcp_watch(g, i, fd, BK_TCP_LISTEN);
        if ((g->ps[i].ufd = gp_listen(g, fd)) >= 0)
            tcp_watch(g, i, g->ps[i].ufd, BK_TCP_LISTEN);
    } else if (strncmp(addr, "remora:", 7) == 0) {
        remora_sock_listener_h l;
        remora_status_t st;

        if (g->server == NULL)
            return REMORA_ERR_UNSUPPORTED;
        if ((st = remora_sock_listen(g->server, addr + 7, &l)) != REMORA_OK)
            return st;
        if ((i = gn_sock_alloc(g, BK_SOCK_LISTEN)) < 0) {
            remora_sock_listener_destroy(l);
            return REMORA_ERR_BUSY;
        }
        g->ps[i].rl = l;
    } else {
        return REMORA_ERR_ADDRESS;
    }
    gn_sock_publish(g, i, RG_SOCK_LISTEN);
    return i;
}

/* Try to accept on listening socket ls; the new socket's index, or -1 if none waits. */
static int accept_one(remora_gpunet_h g, int ls, remora_status_t *err)
{
    psock_t *p = &g->ps[ls];
    int i;

    *err = REMORA_OK;
    if (p->kind == BK_TCP_LISTEN) {
        int fd = p->ufd >= 0 ? gp_accept(p->ufd) : -1;
        if (fd >= 0) { /* a GPU socket on this host */
            if ((i = gn_sock_alloc(g, BK_RESERVED)) < 0) {
                close(fd);
                *err = REMORA_ERR_BUSY;
                return -1;
            }
            return gpu_peer_ready(g, i, fd, -1);
        }
        fd = accept4(p->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            p->readable = 0;
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED)
                *err = REMORA_ERR_IO;
            return -1;
        }
        tcp_tune(g, fd);
        if ((i = sock_alloc_fd(g, BK_RESERVED, fd)) < 0) {
            *err = REMORA_ERR_BUSY;
            return -1;
        }
        tcp_watch(g, i, fd, BK_TCP);
        gn_hand_over(g, i, BK_TCP);
    } else {
        remora_sock_h s;
        if (!rm_sock_listener_hint(p->rl) || remora_sock_accept(p->rl, 0, &s) != REMORA_OK)
            return -1;
        if ((i = gn_sock_alloc(g, BK_RESERVED)) < 0) {
            remora_sock_close(s);
            *err = REMORA_ERR_BUSY;
            return -1;
        }
        g->ps[i].rs = s;
        gn_hand_over(g, i, BK_SOCK);
    }
    gn_sock_publish(g, i, RG_SOCK_OPEN);
    return i;
}

/* ------------------------------------------------------------ commands */

static int valid_sock(remora_gpunet_h g, int32_t s)
{
    if (s < 0 || (unsigned)s >= g->max_socks)
        return 0;
    int k = kind_of(&g->ps[s]);
    return k != BK_NONE && k != BK_RESERVED && !flag(&g->ps[s].closing);
}

static void handle_cmd(remora_gpunet_h g, unsigned slot, uint32_t seq)
{
    rg_cmd_t *c = &g->cmds[slot];
    char addr[RG_CMD_INLINE];
    int32_t s = c->sock;
    int r;

    g->acc[slot].active = 0; /* a new command replaces a pending accept */
    switch (c->op) {
    case RG_OP_CONNECT:
    case RG_OP_BIND:
        if (c->len == 0 || c->len > RG_ADDR_MAX) {
            gn_complete(g, slot, seq, REMORA_ERR_ADDRESS);
            return;
        }
        memcpy(addr, c->data, c->len);
        addr[c->len] = '\0';
        if (c->op == RG_OP_BIND)
            r = bind_any(g, addr);
        else if (strncmp(addr, "tcp://", 6) == 0)
            r = connect_tcp(g, addr + 6, slot, seq);
        else if (strncmp(addr, "remora://", 9) == 0)
            r = gn_connect_remora(g, addr + 9, slot, seq);
        else
            r = REMORA_ERR_ADDRESS;
        if (r != GN_PENDING)
            gn_complete(g, slot, seq, r);
        return;
    case RG_OP_ACCEPT:
        if (!valid_sock(g, s) ||
            (g->ps[s].kind != BK_TCP_LISTEN && g->ps[s].kind != BK_SOCK_LISTEN)) {
            gn_complete(g, slot, seq, REMORA_ERR_INVALID_PARAM);
            return;
        }
        g->acc[slot] = (paccept_t){.active = 1, .sock = s, .seq = seq,
                                   .nonblock = (c->flags & RG_CMD_NONBLOCK) != 0};
        return;
    case RG_OP_SHUTDOWN:
    case RG_OP_CLOSE:
        if (!valid_sock(g, s)) {
            gn_complete(g, slot, seq, REMORA_ERR_INVALID_PARAM);
            return;
        }
        if (c->op == RG_OP_SHUTDOWN) {
            set_flag(&g->ps[s].shutting);
        } else if (g->ps[s].kind == BK_TCP_LISTEN || g->ps[s].kind == BK_SOCK_LISTEN) {
            gn_sock_free(g, s);
        } else {
            /* The owner sends what the ring holds (nothing if the socket
             * failed) and frees it. */
            gn_sock_publish(g, s, RG_SOCK_CLOSING);
            set_flag(&g->ps[s].closing);
        }
        gn_complete(g, slot, seq, REMORA_OK);
        return;
    default:
        gn_complete(g, slot, seq, REMORA_ERR_INVALID_PARAM);
    }
}

static int accepts_progress(remora_gpunet_h g)
{
    int busy = 0;

    for (unsigned k = 0; k < g->nslots; k++) {
        paccept_t *a = &g->acc[k];
        remora_status_t err;
        int i;

        if (!a->active)
            continue;
        if (g->ps[a->sock].kind != BK_TCP_LISTEN && g->ps[a->sock].kind != BK_SOCK_LISTEN) {
            a->active = 0; /* closed under it */
            gn_complete(g, k, a->seq, REMORA_ERR_CANCELED);
            continue;
        }
        if (g->ps[a->sock].kind == BK_TCP_LISTEN && !g->ps[a->sock].readable && !a->nonblock)
            continue;
        i = accept_one(g, a->sock, &err);
        if (i >= 0 || err != REMORA_OK || a->nonblock) {
            a->active = 0;
            gn_complete(g, k, a->seq, i >= 0 ? i : err != REMORA_OK ? err : REMORA_ERR_TIMED_OUT);
            busy = 1;
        }
    }
    return busy;
}

/* ------------------------------------------------------------ data */

void gn_answer_tx(remora_gpunet_h g, int i, uint32_t seq, int32_t res)
{
    rg_sock_shm_t *s = &g->sh[i];

    s->dtx_res = res;
    __atomic_store_n(&s->dtx_done, seq, __ATOMIC_RELEASE);
    g->ps[i].tx_seen = seq;
}

static void copy_ended(rm_copy_t *copy, remora_status_t status)
{
    gn_copy_t *c = rm_container_of(copy, gn_copy_t, copy);

    c->ended  = 1;
    c->status = status;
}

remora_status_t gn_copy_start(remora_gpunet_h g, int i, gn_copy_t *c, void *dst, const void *src,
                              uint64_t n, int d2d)
{
    c->ended    = 0;
    c->n        = n;
    c->copy.d2d = d2d;
    return rm_copyq_start_on(g->copyq[(unsigned)i % g->nworkers], g->device, &c->copy, dst, src,
                             (size_t)n, copy_ended);
}

int64_t gn_backend_send(psock_t *p, const void *buf, size_t n)
{
    int64_t r;

    if (p->kind == BK_TCP) {
        r = send(p->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0)
            r = (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : REMORA_ERR_DISCONNECTED;
    } else {
        r = rm_sock_tx_hint(p->rs) ? remora_sock_send(p->rs, buf, n, 0) : 0;
        if (r == REMORA_ERR_TIMED_OUT)
            r = 0;
    }
    return r;
}

static int pump(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    rg_sock_shm_t *s = &g->sh[i];
    uint8_t *txr = g->tx + (size_t)i * g->ring, *rxr = g->rx + (size_t)i * g->ring;
    int busy = 0, closing = flag(&p->closing);

    if (s->error) {
        gb_fail(g, i); /* a kernel's direct send posted as it failed */
        if (closing) {
            gn_sock_free(g, i);
            return 1;
        }
        return 0;
    }
    /* Device -> peer: the bounce buffer's bytes (older), then the ring's. */
    uint64_t head = ld_acq(&s->tx_head);
    if (head - p->tx_tail > g->ring) {
        gn_sock_fail(g, i, REMORA_ERR_PROTOCOL); /* a kernel wrote past the ring */
        return 1;
    }
    int bounced = gb_pump(g, i, head == p->tx_tail); /* 0 at once when it has nothing */
    if (bounced < 0) {
        gn_sock_fail(g, i, (remora_status_t)bounced);
        return 1;
    }
    busy |= bounced;
    if (head != p->tx_tail && !gb_holds(g, i)) {
        size_t off = (size_t)(p->tx_tail & (g->ring - 1));
        size_t n   = (size_t)(head - p->tx_tail);
        if (n > g->ring - off)
            n = g->ring - off;
        int64_t r = gn_backend_send(p, txr + off, n);
        if (r < 0) {
            gn_sock_fail(g, i, (remora_status_t)r);
            return 1;
        }
        if (r > 0) {
            p->tx_tail += (uint64_t)r;
            st_rel(&s->tx_tail, p->tx_tail);
            gn_count(&g->ring_bytes, (uint64_t)r);
            busy = 1;
        }
    } else if (head == p->tx_tail && !gb_busy(g, i) && (closing || flag(&p->shutting)) &&
               !p->shut_done && ld_acq(&s->tx_head) == head) { /* none written since */
        p->shut_done = 1;
        if (p->kind == BK_TCP)
            shutdown(p->fd, SHUT_WR);
        else
            remora_sock_shutdown(p->rs);
        if (closing) {
            gn_sock_free(g, i);
            return 1;
        }
    }
    if (closing)
        return busy;
    /* Peer -> device. */
    if (!s->rx_eof) {
        uint64_t tail = ld_acq(&s->rx_tail);
        size_t space = g->ring - (size_t)(p->rx_head - tail);
        if (space > 0 && (p->kind == BK_TCP ? p->readable : rm_sock_rx_hint(p->rs) != 0)) {
            size_t off = (size_t)(p->rx_head & (g->ring - 1));
            size_t n   = space < g->ring - off ? space : g->ring - off;
            int64_t r;
            if (p->kind == BK_TCP) {
                r = recv(p->fd, rxr + off, n, MSG_DONTWAIT);
                if (r < 0)
                    r = (errno == EAGAIN || errno == EWOULDBLOCK) ? REMORA_ERR_TIMED_OUT
                                                                   : REMORA_ERR_DISCONNECTED;
                if (r == REMORA_ERR_TIMED_OUT || (size_t)r < n)
                    p->readable = 0;
            } else {
                r = remora_sock_recv(p->rs, rxr + off, n, 0);
            }
            if (r > 0) {
                p->rx_head += (uint64_t)r;
                st_rel(&s->rx_head, p->rx_head);
                busy = 1;
            } else if (r == 0) {
                __atomic_store_n(&s->rx_eof, 1u, __ATOMIC_RELEASE);
                busy = 1;
            } else if (r != REMORA_ERR_TIMED_OUT) {
                gn_sock_fail(g, i, (remora_status_t)r);
                busy = 1;
            }
        }
    }
    return busy;
}

/* Mark the TCP sockets epoll set `ep` says are readable. */
static void drain_epoll(remora_gpunet_h g, int ep)
{
    struct epoll_event ev[64];
    int n;

    while ((n = epoll_wait(ep, ev, 64, 0)) > 0) {
        for (int k = 0; k < n; k++) {
            uint32_t i = ev[k].data.u32 & ~GN_EV_CTL;
            if (i >= g->max_socks)
                continue;
            if (ev[k].data.u32 & GN_EV_CTL)
                g->ps[i].gp.ctl_readable = 1;
            else
                g->ps[i].readable = 1;
        }
        if (n < 64)
            break;
    }
}

/* Worker w: the data of sockets i % nworkers == w. *owned: how many it has. */
static int step_data(remora_gpunet_h g, unsigned w, unsigned *owned)
{
    int busy = 0;

    drain_epoll(g, g->epfd[w]);
    busy |= gp_poll_copies(g, w);
    *owned = 0;
    for (unsigned i = w; i < g->max_socks; i += g->nworkers) {
        int k = kind_of(&g->ps[i]);
        if (k == BK_TCP || k == BK_SOCK)
            busy |= pump(g, (int)i);
        else if (k == BK_GPU)
            busy |= gp_pump(g, (int)i);
        else
            continue;
        (*owned)++;
    }
    return busy;
}

/* Worker 0 also: commands, accepts, connects in flight, listeners. */
static int step_control(remora_gpunet_h g)
{
    int busy = 0;

    for (unsigned k = 0; k < g->nslots; k++) {
        uint32_t seq = ld_acq32(&g->cmds[k].seq);
        if (seq != g->seen[k]) {
            g->seen[k] = seq;
            handle_cmd(g, k, seq);
            busy = 1;
        }
    }
    if (g->nworkers > 1)
        drain_epoll(g, g->epfd[0]); /* listeners (step_data drains it otherwise) */
    busy |= accepts_progress(g);
    busy |= gn_connects_progress(g);
    for (unsigned i = 0; i < g->max_socks; i++) {
        psock_t *p = &g->ps[i];
        switch (kind_of(p)) {
        case BK_TCP_CONNECTING:
            busy |= connect_progress(g, (int)i);
            break;
        case BK_TCP_LISTEN:
            g->sh[i].rx_head = (uint64_t)p->readable;
            break;
        case BK_SOCK_LISTEN:
            g->sh[i].rx_head = (uint64_t)rm_sock_listener_hint(p->rl);
            break;
        default:
            break;
        }
    }
    return busy;
}

static void wake_init(remora_gpunet_h g)
{
    pthread_condattr_t ca;

    pthread_mutex_init(&g->wake_lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* sleep_until_handed's deadline */
    for (unsigned w = 0; w < GN_WORKERS_MAX; w++)
        pthread_cond_init(&g->wake_cv[w], &ca);
    pthread_condattr_destroy(&ca);
}

static void wake_fini(remora_gpunet_h g)
{
    for (unsigned w = 0; w < GN_WORKERS_MAX; w++)
        pthread_cond_destroy(&g->wake_cv[w]);
    pthread_mutex_destroy(&g->wake_lock);
}

/* The first n workers told to stop, woken wherever they sleep, and joined. */
static void stop_workers(remora_gpunet_h g, unsigned n)
{
    atomic_store(&g->stop, 1);
    pthread_mutex_lock(&g->wake_lock);
    for (unsigned w = 0; w < n; w++)
        pthread_cond_signal(&g->wake_cv[w]);
    pthread_mutex_unlock(&g->wake_lock);
    for (unsigned w = 0; w < n; w++)
        pthread_join(g->thread[w], NULL);
}

void gn_hand_over(remora_gpunet_h g, int i, int kind)
{
    unsigned w = (unsigned)i % g->nworkers;

    set_kind(&g->ps[i], kind);
    pthread_mutex_lock(&g->wake_lock);
    g->wake[w] = 1;
    pthread_cond_signal(&g->wake_cv[w]);
    pthread_mutex_unlock(&g->wake_lock);
}

/* Worker w (not 0) owns no socket: nothing to do until worker 0 hands it
 * one (or the proxy stops); the timeout only bounds a missed wake-up.
 * Whether it was handed one. */
static int sleep_until_handed(remora_gpunet_h g, unsigned w)
{
    int handed;
    uint64_t t = rm_deadline_ns(GN_EMPTY_WAIT_MS); /* CLOCK_MONOTONIC, as the condition's */
    struct timespec until = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};

    pthread_mutex_lock(&g->wake_lock);
    while (!g->wake[w] && !atomic_load(&g->stop))
        if (pthread_cond_timedwait(&g->wake_cv[w], &g->wake_lock, &until) != 0)
            break;
    handed = g->wake[w];
    g->wake[w] = 0;
    pthread_mutex_unlock(&g->wake_lock);
    return handed;
}

/* Nothing happened for idle_ns (past the spin): nap, longer once the proxy
 * has been quiet a while, so an idle proxy costs next to nothing. Whether a
 * socket was handed over meanwhile (its first transfers: spin again). */
static int worker_idle(remora_gpunet_h g, unsigned w, unsigned owned, uint64_t idle_ns)
{
    if (w != 0 && owned == 0)
        return sleep_until_handed(g, w);
    struct timespec ts = {0, idle_ns > GN_DOZE_NS ? GN_NAP_LONG_NS : GN_NAP_NS};
    nanosleep(&ts, NULL);
    return 0;
}

static void *proxy_main(void *arg)
{
    worker_arg_t *wa = arg;
    remora_gpunet_h g = wa->g;
    unsigned w = wa->w;
    uint64_t last = rm_now_ns();
    unsigned owned;

    free(wa);
    /* The device's context current here once: each copy then enqueues
     * without a push and a pop (rm_cuda_copy_async). */
    if (!g->host_queues && rm_cuda_thread_ctx(g->device) != REMORA_OK)
        rm_debug("gpunet: worker %u runs without a current context", w);
    while (!atomic_load_explicit(&g->stop, memory_order_relaxed)) {
        int busy = w == 0 ? step_control(g) : 0;
        busy |= step_data(g, w, &owned);
        if (busy) {
            last = rm_now_ns();
            continue;
        }
        uint64_t idle = rm_now_ns() - last;
        if (idle <= g->spin_ns)
            rm_cpu_relax();
        else if (worker_idle(g, w, owned, idle))
            last = rm_now_ns();
    }
    return NULL;
}

/* ------------------------------------------------------------ create, destroy */

/* socket_abi.h: the groups a kernel's snapshot loads together, each in a
 * 32-byte sector of its own. */
_Static_assert(offsetof(rg_sock_shm_t, tx_head) == 0 && offsetof(rg_sock_shm_t, tx_tail) == 64 &&
                   offsetof(rg_sock_shm_t, state) == 96 && sizeof(rg_sock_shm_t) == 128,
               "rg_sock_shm_t layout");
_Static_assert(offsetof(rg_sockq_t, tq_posted) == 256 && offsetof(rg_sockq_t, tq_done) == 320 &&
                   offsetof(rg_sockq_t, tq_ans) == 384 && offsetof(rg_sockq_t, rq_ans) == 640 &&
                   sizeof(rg_qans_t) == 32 && sizeof(rg_sockq_t) == 896,
               "rg_sockq_t layout");
_Static_assert(offsetof(rg_sock_dev_t, q_posted) == 32 && sizeof(rg_sock_dev_t) == 192,
               "rg_sock_dev_t layout");

static size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

static remora_status_t alloc_queues(remora_gpunet_h g)
{
    size_t off_socks = align_up(sizeof(rg_net_t), 4096);
    size_t off_cmds  = align_up(off_socks + g->max_socks * sizeof(rg_sock_shm_t), 4096);
    size_t off_q     = align_up(off_cmds + g->nslots * sizeof(rg_cmd_t), 4096);
    size_t off_tx    = align_up(off_q + g->max_socks * sizeof(rg_sockq_t), 4096);
    size_t off_rx    = off_tx + g->max_socks * g->ring;
    size_t off_shadows = align_up(g->nslots * sizeof(int), 64); /* in the locks' allocation */
    void *host = NULL, *dev = NULL;
    remora_status_t st;

    g->mem_len = off_rx + g->max_socks * g->ring;
    if (g->host_queues) {
        if ((host = aligned_alloc(4096, g->mem_len)) == NULL ||
            (g->locks = calloc(g->nslots, sizeof(int))) == NULL) {
            free(host);
            return REMORA_ERR_NO_MEMORY;
        }
        dev = host;
    } else {
        /* Device memory, zeroed: the slot locks, then the send shadows. */
        size_t dlen = off_shadows + g->max_socks * sizeof(rg_sock_dev_t);
        void *zero;
        if ((st = rm_cuda_host_alloc_mapped(g->device, g->mem_len, &host, &dev)) != REMORA_OK)
            return st;
        if ((zero = calloc(1, dlen)) == NULL ||
            (st = rm_cuda_mem_alloc(g->device, dlen, &g->locks)) != REMORA_OK ||
            (st = rm_cuda_copy(g->locks, zero, dlen)) != REMORA_OK) {
            if (g->locks)
                rm_cuda_mem_free(g->device, g->locks);
            rm_cuda_host_free(host);
            free(zero);
            return zero ? st : REMORA_ERR_NO_MEMORY;
        }
        free(zero);
    }
    memset(host, 0, off_tx); /* the rings need no zeroing */
    g->mem  = host;
    g->dev  = (uintptr_t)dev;
    g->net  = (rg_net_t *)host;
    g->sh   = (rg_sock_shm_t *)(g->mem + off_socks);
    g->cmds = (rg_cmd_t *)(g->mem + off_cmds);
    g->q    = (rg_sockq_t *)(g->mem + off_q);
    g->tx   = g->mem + off_tx;
    g->rx   = g->mem + off_rx;
    *g->net = (rg_net_t){.magic = RG_ABI_MAGIC, .version = RG_ABI_VERSION,
                         .max_socks = g->max_socks, .nslots = g->nslots,
                         .ring_size = g->ring, .timeout_ns = g->timeout_ns, .alive = 1,
                         .socks = g->dev + off_socks, .cmds = g->dev + off_cmds,
                         .tx_data = g->dev + off_tx, .rx_data = g->dev + off_rx,
                         .slot_locks = (uint64_t)(uintptr_t)g->locks,
                         .alive_ptr = g->dev + offsetof(rg_net_t, alive),
                         .direct_min = g->direct_min, .bounce_min = g->bounce_min,
                         .queues = g->dev + off_q,
                         .shadows = g->host_queues ? 0
                                                   : (uint64_t)(uintptr_t)g->locks + off_shadows};
    if (!g->host_queues) {
        /* Kernels read the constant header from device memory: each field
         * read across PCIe would cost a round trip per call. */
        if ((st = rm_cuda_mem_alloc(g->device, sizeof(rg_net_t), &g->dnet)) != REMORA_OK ||
            (st = rm_cuda_copy(g->dnet, g->net, sizeof(rg_net_t))) != REMORA_OK) {
            if (g->dnet)
                rm_cuda_mem_free(g->device, g->dnet);
            g->dnet = NULL;
            rm_cuda_mem_free(g->device, g->locks);
            rm_cuda_host_free(host);
            return st;
        }
    }
    return REMORA_OK;
}

/* Undo what create set up first (the locks, the socket tables) and free g:
 * the last step of create's error path and of destroy. */
static void gn_free(remora_gpunet_h g)
{
    pthread_cond_destroy(&g->cn.cv);
    pthread_mutex_destroy(&g->cn.mx);
    pthread_mutex_destroy(&g->maps_lock);
    wake_fini(g);
    free(g->ps);
    free(g->seen);
    free(g->acc);
    free(g);
}

remora_status_t remora_gpunet_create(remora_context_h ctx, int device,
                                     const remora_gpunet_params_t *params,
                                     remora_gpunet_h *net_p)
{
    uint64_t fm = params ? params->field_mask : 0;
    remora_gpunet_h g;
    remora_status_t st;

    if (ctx == NULL || net_p == NULL || device < 0)
        return REMORA_ERR_INVALID_PARAM;
    if ((g = calloc(1, sizeof(*g))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    g->ctx         = ctx;
    g->device      = device;
    g->server      = (fm & REMORA_GPUNET_FIELD_SERVER) ? params->server : NULL;
    g->max_socks   = (fm & REMORA_GPUNET_FIELD_MAX_SOCKS) ? params->max_socks : GN_DEFAULT_SOCKS;
    g->ring        = (fm & REMORA_GPUNET_FIELD_RING_SIZE) ? params->ring_size : GN_DEFAULT_RING;
    g->timeout_ns  = (uint64_t)((fm & REMORA_GPUNET_FIELD_TIMEOUT_MS) ? params->timeout_ms
                                                                       : REMORA_DEFAULT_TIMEOUT_MS) *
                     1000000u;
    g->host_queues = (fm & REMORA_GPUNET_FIELD_HOST_QUEUES) ? params->host_queues != 0 : 0;
    g->spin_ns     = rm_env_u64("REMORA_GPUNET_SPIN_US", 2000, 0, 10000000u) * 1000u;
    g->direct_min  = rm_env_u64("REMORA_GPUNET_DIRECT_MIN", 64u << 10, 0, UINT32_MAX);
    g->bounce_min  = rm_env_u64("REMORA_GPUNET_BOUNCE_MIN", GN_BOUNCE_MIN_DEFAULT, 0, UINT32_MAX);
    g->submit_thread = rm_env_u64("REMORA_GPUNET_SUBMIT_THREAD", 1, 0, 1) != 0;
    g->copy_lanes    = (unsigned)rm_env_u64("REMORA_GPUNET_COPY_LANES", 2, 1, RM_COPYQ_LANES_MAX);
    g->hb_ns       = ctx->hb_interval_ns;
    g->dead_ns     = ctx->peer_timeout_ns;
    g->nslots      = GN_SLOTS;
    {
        /* A worker without work naps, so one a CPU costs nothing idle, and
         * busy sockets spread over every core (64 blocks streaming to TCP
         * peers on 16 cores: 0.77-0.92x of 64 CPU clients with 8, 1.02-1.19x
         * with 16; docs/performance.md, session 23). */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        uint64_t dflt = ncpu >= 4 ? (uint64_t)ncpu : 1u;
        g->nworkers = (unsigned)rm_env_u64("REMORA_GPUNET_THREADS",
                                           dflt > GN_WORKERS_MAX ? GN_WORKERS_MAX : dflt, 1,
                                           GN_WORKERS_MAX);
    }
    for (unsigned w = 0; w < GN_WORKERS_MAX; w++)
        g->epfd[w] = -1;
    if (g->max_socks == 0 || g->max_socks > 4096 || g->ring < 4096 || g->ring > (64u << 20) ||
        (g->ring & (g->ring - 1)) || g->timeout_ns == 0) {
        free(g);
        return REMORA_ERR_INVALID_PARAM;
    }
    if (!g->host_queues) {
        if ((st = rm_cuda_init()) != REMORA_OK) {
            free(g);
            return st;
        }
        if (device >= rm_cuda_device_count()) {
            free(g);
            return REMORA_ERR_INVALID_PARAM;
        }
    }
    pthread_mutex_init(&g->maps_lock, NULL);
    wake_init(g);
    gn_connect_init(g);
    if ((g->ps = calloc(g->max_socks, sizeof(*g->ps))) == NULL ||
        (g->seen = calloc(g->nslots, sizeof(*g->seen))) == NULL ||
        (g->acc = calloc(g->nslots, sizeof(*g->acc))) == NULL) {
        st = REMORA_ERR_NO_MEMORY;
        goto err_free;
    }
    for (unsigned i = 0; i < g->max_socks; i++)
        g->ps[i].fd = -1;
    for (unsigned w = 0; w < g->nworkers; w++)
        if ((g->epfd[w] = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            st = REMORA_ERR_IO;
            goto err_free;
        }
    if ((st = alloc_queues(g)) != REMORA_OK)
        goto err_free;
    if ((st = gp_prepare(g)) != REMORA_OK || (st = gb_prepare(g)) != REMORA_OK)
        goto err_queues;
    for (unsigned w = 0; w < g->nworkers; w++) {
        worker_arg_t *wa = malloc(sizeof(*wa));
        if (wa)
            *wa = (worker_arg_t){.g = g, .w = w};
        if (wa == NULL || pthread_create(&g->thread[w], NULL, proxy_main, wa) != 0) {
            free(wa);
            stop_workers(g, w);
            st = REMORA_ERR_NO_MEMORY;
            goto err_queues;
        }
    }
    rm_info("gpunet: proxy for device %d: %u sockets, rings of %zu bytes, %zu bytes mapped, "
            "%u thread(s)", device, g->max_socks, g->ring, g->mem_len, g->nworkers);
    *net_p = g;
    return REMORA_OK;

err_queues:
    gp_shutdown(g);
    if (g->host_queues) {
        free(g->mem);
        free(g->locks);
    } else {
        rm_cuda_mem_free(g->device, g->dnet);
        rm_cuda_mem_free(g->device, g->locks);
        rm_cuda_host_free(g->mem);
    }
err_free:
    for (unsigned w = 0; w < GN_WORKERS_MAX; w++)
        if (g->epfd[w] >= 0)
            close(g->epfd[w]);
    gn_free(g);
    return st;
}

void *remora_gpunet_device_handle(remora_gpunet_h g)
{
    if (g == NULL)
        return NULL;
    return g->dnet ? g->dnet : (void *)g->dev;
}

static remora_status_t stats_fill(remora_gpunet_h g, remora_gpunet_stats_t *st)
{
    const struct {
        uint64_t          bit;
        uint64_t         *out;
        _Atomic uint64_t *in;
    } f[] = {
        {REMORA_GPUNET_STATS_FIELD_RING_BYTES, &st->ring_bytes, &g->ring_bytes},
        {REMORA_GPUNET_STATS_FIELD_BOUNCE_SENDS, &st->bounce_sends, &g->bounce_sends},
        {REMORA_GPUNET_STATS_FIELD_BOUNCE_BYTES, &st->bounce_bytes, &g->bounce_bytes},
        {REMORA_GPUNET_STATS_FIELD_BOUNCE_TO_RING, &st->bounce_to_ring, &g->bounce_to_ring},
    };
    uint64_t want = st->field_mask;

    st->field_mask = 0;
    for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++)
        if (want & f[k].bit) {
            *f[k].out = atomic_load_explicit(f[k].in, memory_order_relaxed);
            st->field_mask |= f[k].bit;
        }
    return REMORA_OK;
}

remora_status_t remora_gpunet_stats(remora_gpunet_h g, remora_gpunet_stats_t *st)
{
    return g == NULL || st == NULL ? REMORA_ERR_INVALID_PARAM : stats_fill(g, st);
}

rg_net_t *rm_gpunet_host_view(remora_gpunet_h g)
{
    return g ? g->net : NULL;
}

void remora_gpunet_destroy(remora_gpunet_h g)
{
    if (g == NULL)
        return;
    stop_workers(g, g->nworkers);
    gn_connect_stop(g);
    __atomic_store_n(&g->net->alive, 0u, __ATOMIC_RELEASE);
    for (unsigned k = 0; k < g->nslots; k++)
        if (g->acc[k].active)
            gn_complete(g, k, g->acc[k].seq, REMORA_ERR_CANCELED);
    for (unsigned i = 0; i < g->max_socks; i++) {
        if (g->ps[i].kind == BK_NONE)
            continue;
        if (g->ps[i].kind == BK_TCP_CONNECTING || g->ps[i].kind == BK_SOCK_CONNECTING)
            gn_complete(g, (unsigned)g->ps[i].pend_slot, g->ps[i].pend_seq, REMORA_ERR_CANCELED);
        st_rel32(&g->sh[i].error, REMORA_ERR_CANCELED);
        int err = g->sh[i].error;
        gn_sock_free(g, (int)i);
        g->sh[i].error = err; /* sock_free marked it free; the error stays visible */
    }
    gp_shutdown(g);
    for (unsigned k = 0; k < g->nclients; k++)
        remora_client_disconnect(g->clients[k].client);
    if (g->cctx)
        remora_context_destroy(g->cctx);
    for (unsigned w = 0; w < g->nworkers; w++)
        close(g->epfd[w]);
    /* The queue memory stays: kernels may still read it (see design notes).
     * It is parked where the process can still reach it (and leak checkers
     * see that it is kept on purpose). */
    pthread_mutex_lock(&parked_lock);
    if (nparked < sizeof(parked) / sizeof(parked[0])) {
        parked[nparked].mem   = g->mem;
        parked[nparked].locks = g->locks;
        nparked++;
    }
    rm_info("gpunet: proxy stopped; %zu bytes of queue memory kept for running kernels",
            g->mem_len);
    pthread_mutex_unlock(&parked_lock);
    gn_free(g);
}
