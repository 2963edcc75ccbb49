/*
 * Bootstrap: how two processes find each other's UCX worker.
 *
 * The client opens a TCP connection to the server's HOST:PORT; each side
 * writes one preamble (wire.h: magic, version, its worker address) and reads
 * the other's. Both then create a UCX endpoint to the other's worker address;
 * UCX pairs the two into one connection and picks every transport both
 * workers share (shared memory and CMA on one host, verbs, TCP).
 *
 * The socket then stays open and carries nothing: its end (EOF or reset)
 * tells either side at once that the other process is gone. Nothing about
 * regions crosses it, so garbage on the port costs the server a socket and a
 * few bytes of buffer, and is cut at the first wrong magic byte.
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
        rm_error("cannot listen on %s: %s", addr, strerror(err));
        close(fd);
        return err == EADDRINUSE ? REMORA_ERR_BUSY
               : err == EADDRNOTAVAIL || err == EACCES ? REMORA_ERR_ADDRESS : REMORA_ERR_IO;
    }
    *fd_p = fd;
    return REMORA_OK;
}

int rm_boot_addr_plausible(remora_context_h ctx, const uint8_t *addr, size_t len)
{
    const uint8_t *mine = ctx->worker_addr;

    /* The low nibble of the first byte is UCX's address format version. This
     * stops garbage, not a crafted address: UCX trusts the rest. */
    return len >= 8 && (addr[0] & 0x0f) == (mine[0] & 0x0f);
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

/* Wait for events on fd until the deadline; 0 when they came. */
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

static remora_status_t connect_socket(const char *addr, uint64_t deadline, int *fd_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    remora_status_t st = rm_parse_addr(addr, &ss, &len);
    int fd, err = 0;
    socklen_t elen = sizeof(err);

    if (st != REMORA_OK)
        return st;
    if ((fd = socket_for(&ss)) < 0)
        return REMORA_ERR_IO;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS)
        err = errno;
    else if ((st = wait_fd(fd, POLLOUT, deadline)) != REMORA_OK) {
        close(fd);
        return st;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        err = errno;
    if (err) {
        close(fd);
        rm_info("connect to %s: %s", addr, strerror(err));
        return err == ECONNREFUSED ? REMORA_ERR_CONNECTION_REFUSED
               : err == ETIMEDOUT  ? REMORA_ERR_TIMED_OUT
               : err == ENETUNREACH || err == EHOSTUNREACH ? REMORA_ERR_ADDRESS
                                                          : REMORA_ERR_DISCONNECTED;
    }
    *fd_p = fd;
    return REMORA_OK;
}

/* Read the server's preamble; returns its payload (malloc'd). */
static remora_status_t read_preamble(remora_context_h ctx, int fd, uint64_t deadline,
                                     uint16_t *flags_p, void **payload_p, size_t *len_p)
{
    size_t cap = RM_BOOT_HDR_LEN + RM_WORKER_ADDR_MAX, have = 0, used;
    uint8_t *buf = malloc(cap);
    const uint8_t *payload;
    uint32_t plen;
    uint16_t flags;
    remora_status_t st;

    if (buf == NULL)
        return REMORA_ERR_NO_MEMORY;
    for (;;) {
        int r = rm_boot_parse(buf, have, &flags, &payload, &plen, &used);
        if (r == 0 && ((flags & RM_BOOT_CM) ? plen != 2 : !rm_boot_addr_plausible(ctx, payload, plen)))
            r = -1;
        if (r < 0) {
            st = REMORA_ERR_PROTOCOL; /* not a remora server */
            break;
        }
        if (r == 0) {
            memmove(buf, payload, plen);
            *flags_p   = flags;
            *payload_p = buf;
            *len_p     = plen;
            return REMORA_OK;
        }
        if ((st = wait_fd(fd, POLLIN, deadline)) != REMORA_OK)
            break;
        ssize_t n = recv(fd, buf + have, cap - have, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            st = REMORA_ERR_DISCONNECTED;
            break;
        }
        if (n > 0)
            have += (size_t)n;
    }
    free(buf);
    return st;
}

remora_status_t rm_boot_connect(remora_context_h ctx, const char *addr, int timeout_ms,
                                int *fd_p, uint16_t *flags_p, void **payload_p, size_t *len_p)
{
    uint64_t deadline = rm_deadline_ns(timeout_ms);
    rm_wbuf_t w;
    remora_status_t st;
    int fd = -1; /* set by connect_socket; gcc 13 cannot see that */

    if ((st = connect_socket(addr, deadline, &fd)) != REMORA_OK)
        return st;
    rm_wbuf_init(&w);
    rm_boot_encode(&w, RM_BOOT_CM, ctx->worker_addr, (uint32_t)ctx->worker_addr_len);
    if (w.failed)
        st = REMORA_ERR_NO_MEMORY;
    else if (rm_boot_send(fd, w.data, w.len) != 0)
        st = REMORA_ERR_DISCONNECTED;
    else
        st = read_preamble(ctx, fd, deadline, flags_p, payload_p, len_p);
    rm_wbuf_free(&w);
    if (st != REMORA_OK) {
        close(fd);
        return st;
    }
    *fd_p = fd;
    return REMORA_OK;
}
