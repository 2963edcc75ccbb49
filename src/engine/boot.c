/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Bootstrap: the TCP socket that comes before, and then beside, a UCX endpoint.
 *
 * Design notes
 * - The client connects to the server's HOST:PORT. The whole handshake runs
 *   here, in bootstrap frames (wire.h): HELLO, AUTH when the server has a
 *   token, and only then CONNECT, which carries the worker addresses (or a
 *   connection-manager port). So no UCX endpoint exists for a peer, and no
 *   UCX code parses anything it sent, before it has authenticated
 *   (docs/security.md). The sequencing lives in the remote layer (client.c,
 *   server.c); this file moves frames.
 * - Afterwards the socket carries heartbeats both ways (the live list
 *   below). Its end (EOF or reset) says at once that the other process is
 *   gone; silence for peer_timeout says so for a cut link or a hung peer,
 *   which TCP would notice only after minutes.
 * - Garbage costs the server a socket and a small buffer, and is cut at the
 *   first byte that cannot start a valid frame.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/engine.h"
#include "util/log.h"
#include "util/time.h"

#define RX_INITIAL 256u
#define RX_MAX     (RM_BOOT_HDR_LEN + RM_BOOT_PAYLOAD_MAX)

static int socket_for(const struct sockaddr_storage *ss)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

remora_status_t rm_boot_listen(const char *addr, int *fd_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    remora_status_t st = rm_parse_addr(addr, &ss, &len);
    int fd, one = 1;

    if (st != REMORA_OK)
        return st;
    if ((fd = socket_for(&ss)) < 0)
        return REMORA_ERR_IO;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
        int err = errno;
        rm_debug("cannot listen on %s: %s", addr, strerror(err));
        close(fd);
        return err == EADDRINUSE ? REMORA_ERR_BUSY
               : err == EADDRNOTAVAIL || err == EACCES ? REMORA_ERR_ADDRESS : REMORA_ERR_IO;
    }
    *fd_p = fd;
    return REMORA_OK;
}

int rm_boot_addr_plausible(remora_context_h ctx, const uint8_t *addr, size_t len, const char **why)
{
    if (len < 8 || len > RM_WORKER_ADDR_MAX) {
        *why = "address length out of range";
        return 0;
    }
    return rm_ucx_addr_check(&ctx->addr_shape, addr, len, why) == 0;
}

int rm_boot_send(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int rm_boot_send_frame(int fd, unsigned type, unsigned flags, const void *payload, size_t len)
{
    rm_wbuf_t w;
    int rc;

    rm_wbuf_init(&w);
    rm_boot_encode(&w, type, flags, payload, (uint32_t)len);
    rc = w.failed ? -1 : rm_boot_send(fd, w.data, w.len);
    rm_wbuf_free(&w);
    return rc;
}

int rm_boot_send_reply(int fd, unsigned type, unsigned flags, remora_status_t status,
                       const void *payload, size_t len)
{
    rm_wbuf_t w;
    int rc;

    rm_wbuf_init(&w);
    rm_boot_reply_encode(&w, type, flags, status, payload, (uint32_t)len);
    rc = w.failed ? -1 : rm_boot_send(fd, w.data, w.len);
    rm_wbuf_free(&w);
    return rc;
}

/* ------------------------------------------------------------ receiving */

void rm_boot_rx_free(rm_boot_rx_t *rx)
{
    free(rx->buf);
    memset(rx, 0, sizeof(*rx));
}

int rm_boot_rx_fill(rm_boot_rx_t *rx, int fd)
{
    if (rx->len == rx->cap) {
        size_t cap = rx->cap ? rx->cap * 2 : RX_INITIAL, max = rx->max ? rx->max : RX_MAX;
        uint8_t *buf;
        if (cap > max)
            cap = max;
        if (cap == rx->cap || (buf = realloc(rx->buf, cap)) == NULL)
            return -1; /* a frame cannot be this long */
        rx->buf = buf;
        rx->cap = cap;
    }
    ssize_t n = recv(fd, rx->buf + rx->len, rx->cap - rx->len, 0);
    if (n > 0) {
        rx->len += (size_t)n;
        return 0;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
}

int rm_boot_rx_next(rm_boot_rx_t *rx, rm_boot_frame_t *f)
{
    size_t used;
    int r;

    if (rx->used) { /* the frame handed out last time is done with */
        memmove(rx->buf, rx->buf + rx->used, rx->len - rx->used);
        rx->len -= rx->used;
        rx->used = 0;
    }
    r = rm_boot_parse(rx->buf, rx->len, f, &used);
    if (r == 0)
        rx->used = used;
    return r;
}

/* Wait for events on fd until the deadline; REMORA_OK when they came. */
static remora_status_t wait_fd(int fd, short events, uint64_t deadline)
{
    struct pollfd pfd = {.fd = fd, .events = events};

    for (;;) {
        uint64_t now = rm_now_ns();
        if (now >= deadline)
            return REMORA_ERR_TIMED_OUT;
        int ms = (int)((deadline - now + 999999u) / 1000000u);
        int n  = poll(&pfd, 1, ms);
        if (n > 0)
            return REMORA_OK;
        if (n < 0 && errno != EINTR)
            return REMORA_ERR_IO;
    }
}

remora_status_t rm_boot_recv_frame(int fd, rm_boot_rx_t *rx, uint64_t deadline,
                                   rm_boot_frame_t *f)
{
    remora_status_t st;

    for (;;) {
        int r = rm_boot_rx_next(rx, f);
        if (r == 0)
            return REMORA_OK;
        if (r < 0)
            return REMORA_ERR_PROTOCOL; /* not a remora server */
        if ((st = wait_fd(fd, POLLIN, deadline)) != REMORA_OK)
            return st;
        if (rm_boot_rx_fill(rx, fd) != 0)
            return REMORA_ERR_DISCONNECTED;
    }
}

/* A nonblocking connect to ss started on a new socket: the fd, or -1 with
 * *err set (errno of a connect refused at once). */
static int dial_start(const struct sockaddr_storage *ss, socklen_t len, int *err)
{
    int fd = socket_for(ss);

    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, (const struct sockaddr *)ss, len) != 0 && errno != EINPROGRESS) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

static remora_status_t dial_status(int err)
{
    return err == EMFILE || err == ENFILE ? REMORA_ERR_NO_MEMORY
           : err == ECONNREFUSED          ? REMORA_ERR_CONNECTION_REFUSED
           : err == ETIMEDOUT             ? REMORA_ERR_TIMED_OUT
           : err == ENETUNREACH || err == EHOSTUNREACH ? REMORA_ERR_ADDRESS
                                                       : REMORA_ERR_DISCONNECTED;
}

/*
 * A SYN that is dropped rather than refused (a listener being replaced on
 * its port, a full backlog) is sent again by the kernel only a second later.
 * A server restarted in that window was followed an instance late
 * (docs/ring.md, "Reconnecting"). So a second attempt goes out when the
 * first has no answer after RM_BOOT_REDIAL_NS; the first one to connect
 * wins and the other is closed. The first stays open, so a link whose round
 * trip is longer than that still connects.
 */
#define RM_BOOT_REDIAL_NS 200000000ull

int rm_tcp_keepalive(int fd, unsigned timeout_ms)
{
    int on = 1, idle = 1, intvl = 1, cnt = (int)(timeout_ms / 1000u) + 1;
    unsigned uto = timeout_ms;

    if (timeout_ms == 0)
        return 0;
    /* Probes from the first idle second on, one a second; TCP_USER_TIMEOUT
     * ends the connection once what was sent (data or a probe) has gone
     * unacknowledged that long. */
    return setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) ||
                   setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) ||
                   setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) ||
                   setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) ||
                   setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto))
               ? -1
               : 0;
}

remora_status_t rm_boot_dial(const char *addr, uint64_t deadline, int *fd_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    remora_status_t st = rm_parse_addr(addr, &ss, &len);
    struct pollfd pfd[2];
    int n = 0, err = 0, winner = -1;
    uint64_t redial = rm_now_ns() + RM_BOOT_REDIAL_NS;

    if (st != REMORA_OK)
        return st;
    if ((pfd[0].fd = dial_start(&ss, len, &err)) >= 0)
        n = 1;
    while (n > 0 && winner < 0) {
        uint64_t now = rm_now_ns(), until = deadline;
        if (now >= deadline)
            break;
        if (redial && redial < until)
            until = redial;
        for (int i = 0; i < n; i++)
            pfd[i].events = POLLOUT, pfd[i].revents = 0;
        int r = poll(pfd, (nfds_t)n, (int)((until - now + 999999u) / 1000000u));
        if (r < 0 && errno != EINTR)
            break;
        for (int i = n - 1; r > 0 && i >= 0; i--) {
            int e = 0;
            socklen_t elen = sizeof(e);
            if (!pfd[i].revents)
                continue;
            if (getsockopt(pfd[i].fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0)
                e = errno;
            if (e == 0) {
                winner = pfd[i].fd;
                continue;
            }
            err = e; /* this attempt failed: the other may still connect */
            close(pfd[i].fd);
            pfd[i] = pfd[--n];
        }
        if (winner < 0 && redial && rm_now_ns() >= redial && n == 1) {
            redial = 0;
            if ((pfd[1].fd = dial_start(&ss, len, &err)) >= 0)
                n = 2;
        }
    }
    for (int i = 0; i < n; i++)
        if (pfd[i].fd != winner)
            close(pfd[i].fd);
    if (winner >= 0) {
        *fd_p = winner;
        return REMORA_OK;
    }
    if (err == 0)
        return REMORA_ERR_TIMED_OUT; /* no attempt was answered in time */
    rm_info("connect to %s: %s", addr, strerror(err));
    return dial_status(err);
}

/* ------------------------------------------------------------ liveness */

void rm_peer_live_start(rm_peer_t *peer)
{
    uint64_t now = rm_now_ns();

    if (peer->live.next != NULL && !rm_list_empty(&peer->live))
        return;
    peer->last_rx_ns = peer->last_tx_ns = now;
    rm_list_push_back(&peer->ctx->live, &peer->live);
}

void rm_peer_live_stop(rm_peer_t *peer)
{
    if (peer->live.next != NULL)
        rm_list_del(&peer->live);
}

int rm_peer_sock_read(rm_peer_t *peer)
{
    rm_boot_frame_t f;
    int r;

    if (rm_boot_rx_fill(&peer->rx, peer->sock.fd) != 0)
        return -1; /* the other process is gone */
    while ((r = rm_boot_rx_next(&peer->rx, &f)) == 0) {
        if (f.type != RM_BOOT_HEARTBEAT || f.len != 0) {
            rm_warn_peer("unexpected bytes on a bootstrap socket; closing it");
            return -1;
        }
        peer->last_rx_ns = rm_now_ns();
    }
    if (r < 0)
        rm_warn_peer("garbage on a bootstrap socket; closing it");
    return r < 0 ? -1 : 0;
}

/* Every tick: a heartbeat to each peer that is due one; a peer silent for
 * longer than peer_timeout is dead. A heartbeat that does not fit in the
 * socket buffer is skipped: the peer is not reading, and silence will tell. */
static void live_tick(rm_ticker_t *t)
{
    remora_context_h ctx = rm_container_of(t, struct remora_context, live_ticker);
    static const uint8_t hb[RM_BOOT_HDR_LEN] = {
        (uint8_t)RM_BOOT_MAGIC, (uint8_t)(RM_BOOT_MAGIC >> 8), (uint8_t)(RM_BOOT_MAGIC >> 16),
        (uint8_t)(RM_BOOT_MAGIC >> 24), RM_BOOT_VERSION, 0, RM_BOOT_HEARTBEAT, 0, 0, 0, 0, 0};
    uint64_t now = rm_now_ns();
    uint64_t stall = rm_stall_ns(&ctx->live_tick_ns, now, (uint64_t)RM_TICK_MS * 1000000u);
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &ctx->live) {
        rm_peer_t *peer = rm_container_of(pos, rm_peer_t, live);
        rm_stall_credit(&peer->last_rx_ns, stall, now);
        if (peer->seal_failed) { /* seal.c: a forged or replayed message */
            rm_peer_live_stop(peer);
            peer->ops->on_error(peer, REMORA_ERR_PROTOCOL);
            continue;
        }
        if (ctx->hb_interval_ns == 0)
            continue;
        if (now - peer->last_rx_ns > ctx->peer_timeout_ns) {
            rm_info("peer silent for %llu ms; taking it for dead",
                    (unsigned long long)((now - peer->last_rx_ns) / 1000000u));
            rm_peer_live_stop(peer);
            peer->ops->on_error(peer, REMORA_ERR_DISCONNECTED);
            continue;
        }
        if (now - peer->last_tx_ns >= ctx->hb_interval_ns &&
            send(peer->sock.fd, hb, sizeof(hb), MSG_NOSIGNAL | MSG_DONTWAIT) == sizeof(hb))
            peer->last_tx_ns = now;
    }
}

void rm_engine_live_init(remora_context_h ctx)
{
    rm_list_init(&ctx->live);
    ctx->live_ticker.fn = live_tick;
    rm_engine_add_ticker(ctx, &ctx->live_ticker);
}
