/* SPDX-License-Identifier: BSD-3-Clause */
/* Probing a peer's UCX TCP interfaces before UCX connects to them (reach.h). */
#include "engine/reach.h"

#include <errno.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/engine.h" /* rm_format_addr */
#include "engine/ucx_addr.h"
#include "util/time.h"

typedef struct {
    int                     fd; /* -1 once it answered */
    struct sockaddr_storage sa;
} probe_t;

static atomic_uint fds_open; /* probes open in this process (RM_REACH_FDS_MAX) */

struct rm_reach {
    int      epfd;     /* the probes' */
    unsigned n, silent;
    unsigned reserved; /* of fds_open */
    probe_t  p[];
};

typedef struct {
    struct sockaddr_storage sa[RM_REACH_MAX];
    unsigned                n;
    int                     same_host, over;
} collect_t;

static int is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr ==
               htonl(INADDR_LOOPBACK);
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
}

static socklen_t sa_len(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* rm_ucx_addr_tcp's callback (each interface once): loopback ones only for
 * a peer on this host. */
static void collect(void *arg, const struct sockaddr_storage *ss)
{
    collect_t *c = arg;

    if (is_loopback((const struct sockaddr *)ss) && !c->same_host)
        return;
    if (c->n == RM_REACH_MAX)
        c->over = 1;
    else
        c->sa[c->n++] = *ss;
}

/* Connect without blocking: 1 while the handshake runs (watched on epfd), 0
 * when it ended at once (connected or failed: an answer either way), -1 when
 * no socket could be made. */
static int probe_open(probe_t *p, int epfd, unsigned idx)
{
    int fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = idx};

    p->fd = -1;
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)&p->sa, sa_len(&p->sa)) == 0 ||
        errno != EINPROGRESS) {
        close(fd);
        return 0;
    }
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return -1;
    }
    p->fd = fd;
    return 1;
}

/* Take n of the process's probe sockets: 0, or -1 when they are not there. */
static int fds_reserve(unsigned n)
{
    if (atomic_fetch_add(&fds_open, n) + n <= RM_REACH_FDS_MAX)
        return 0;
    atomic_fetch_sub(&fds_open, n);
    return -1;
}

/* A probe set for the n interfaces collected, its sockets reserved. */
static remora_status_t probes_open(const collect_t *c, rm_reach_t **out)
{
    rm_reach_t *r = calloc(1, sizeof(*r) + c->n * sizeof(r->p[0]));

    if (r == NULL) {
        atomic_fetch_sub(&fds_open, c->n);
        return REMORA_ERR_NO_MEMORY;
    }
    *out        = r;
    r->reserved = c->n; /* given back by rm_reach_free */
    if ((r->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return REMORA_ERR_IO;
    for (unsigned i = 0; i < c->n; i++) {
        r->p[i].sa = c->sa[i];
        int rc = probe_open(&r->p[i], r->epfd, i);
        if (rc < 0)
            return REMORA_ERR_IO;
        r->silent += (unsigned)rc;
        r->n++;
    }
    rm_reach_step(r); /* on loopback the handshakes are usually done by now */
    return REMORA_OK;
}

remora_status_t rm_reach_start(const void *addr, size_t len, int same_host, rm_reach_t **out)
{
    collect_t *c = calloc(1, sizeof(*c));
    rm_reach_t *r = NULL;
    remora_status_t st = REMORA_OK;

    *out = NULL;
    if (c == NULL)
        return REMORA_ERR_NO_MEMORY;
    c->same_host = same_host;
    /* An address this code cannot read (rm_boot_addr_plausible let it
     * through on its length alone) is not probed. */
    if (rm_ucx_addr_tcp(addr, len, collect, c) != 0 || c->n == 0)
        st = REMORA_OK;
    else if (c->over)
        st = REMORA_ERR_PROTOCOL;
    else if (fds_reserve(c->n) != 0)
        st = REMORA_ERR_BUSY;
    else
        st = probes_open(c, &r);
    free(c);
    if (st != REMORA_OK || (r && r->silent == 0)) {
        rm_reach_free(r);
        r = NULL;
    }
    *out = r;
    return st;
}

int rm_reach_fd(const rm_reach_t *r) { return r->epfd; }

int rm_reach_step(rm_reach_t *r)
{
    struct epoll_event ev[8];
    int n;

    while (r->silent > 0 && (n = epoll_wait(r->epfd, ev, 8, 0)) > 0) {
        for (int i = 0; i < n; i++) {
            probe_t *p = &r->p[ev[i].data.u32];
            if (p->fd < 0)
                continue;
            close(p->fd); /* connected or refused: it answered; a FIN, no data */
            p->fd = -1;
            r->silent--;
        }
    }
    return r->silent == 0;
}

remora_status_t rm_reach_wait(rm_reach_t *r, uint64_t deadline_ns)
{
    while (!rm_reach_step(r)) {
        uint64_t now = rm_now_ns();
        struct epoll_event ev;

        if (now >= deadline_ns)
            return REMORA_ERR_TIMED_OUT;
        uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
        if (epoll_wait(r->epfd, &ev, 1, ms > 60000 ? 60000 : (int)ms) < 0 && errno != EINTR)
            return REMORA_ERR_IO;
    }
    return REMORA_OK;
}

void rm_reach_silent(const rm_reach_t *r, char *buf, size_t len)
{
    if (len)
        buf[0] = '\0';
    for (unsigned i = 0; r && i < r->n; i++) {
        if (r->p[i].fd >= 0) {
            rm_format_addr((const struct sockaddr *)&r->p[i].sa, buf, len);
            return;
        }
    }
}

void rm_reach_free(rm_reach_t *r)
{
    if (r == NULL)
        return;
    for (unsigned i = 0; i < r->n; i++)
        if (r->p[i].fd >= 0)
            close(r->p[i].fd);
    if (r->epfd >= 0)
        close(r->epfd);
    atomic_fetch_sub(&fds_open, r->reserved);
    free(r);
}
