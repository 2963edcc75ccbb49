/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU sockets: a peer that is a GPU socket of another proxy on this host
 * (docs/gpunet.md "GPU peers on one host").
 *
 * Design notes
 * - Finding the peer. A proxy listening on tcp://ADDR:PORT also listens on
 *   the abstract local name "remora-gpunet/ADDR:PORT" (SOCK_SEQPACKET). A
 *   connect to a TCP address tries that name first (for a local address,
 *   also the wildcard one); only a process of the same user is accepted on
 *   either side (SO_PEERCRED), since the peer gets CUDA IPC handles. Plain
 *   TCP peers never see any of this.
 * - Frames. Every message is one seqpacket record: a gp_hdr_t and its
 *   payload. Two sockets per connection: the stream (HELLO, then DATA with
 *   ring bytes, RTS offering a direct send, FIN) and control (DONE answering
 *   an RTS with the bytes taken or a status, CANCEL withdrawing one, PING,
 *   PONG). The stream's order is its frames' order, and nothing is read
 *   past an RTS until some of it was taken or past DATA the ring has no
 *   room for; control is never held up behind it (a DONE behind unread DATA
 *   would deadlock two kernels sending at once). The connector makes the
 *   control pair and passes one end with its HELLO (SCM_RIGHTS).
 * - Device to device. The receiving proxy copies out of the sender's
 *   buffer (mapped with cuIpcOpenMemHandle, cached) on its worker's stream:
 *   straight into the kernel's buffer when its receive request names one,
 *   else into the receive ring. One copy, no host bounce; the sender's call
 *   returns the bytes taken (maybe fewer than it offered, as POSIX allows).
 * - Every request of the kernel is answered exactly once, and never while
 *   a copy into its buffer may still be running.
 * - Queued transfers (rg_sockq_t) put messages in flight together: each of
 *   the kernel's queued sends goes out as an RTSQ once the ring bytes posted
 *   before it have gone, and nothing but more RTSQs goes out until every
 *   one out was answered (so the receiver reads frames without peeking);
 *   the receiving proxy keeps up to RG_QDEPTH of them and starts a copy for
 *   each queued receive as soon as it has bytes for it, without waiting for
 *   the last copy to end. The copy queue hands copies back in start order
 *   (whatever stream ran them), so answers go out in order: the kernel's as
 *   results and done counters, the sender's as DONEQ once every byte of an
 *   RTSQ has been copied. A direct send (RTS)
 *   or a blocking receive request is served by the same sources and sinks,
 *   one at a time with the queued ones.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpu/gpunet_int.h"
#include "util/log.h"
#include "util/time.h"

#define GP_MAGIC   0x50475052u /* "RPGP" */
#define GP_VERSION 2u /* 2: queued sends (RTSQ, DONEQ) */
#define GP_FRAME   (64u << 10) /* ring bytes in one DATA frame */

enum { GP_HELLO = 1, GP_DATA = 2, GP_RTS = 3, GP_DONE = 4, GP_CANCEL = 5, GP_FIN = 6,
       GP_PING = 7, GP_PONG = 8, GP_RTSQ = 9, GP_DONEQ = 10 };

/* HELLO: a = magic << 32 | version. DATA: len bytes follow. RTS: a = id,
 * b = bytes offered, a gp_rts_t follows. DONE: a = id, b = bytes taken or a
 * negative status (int64). CANCEL: a = id. FIN: nothing. PING asks for a
 * PONG: while the kernel waits on the peer, a peer silent past the context's
 * peer timeout is dead (a killed process can take seconds to close its
 * sockets while the driver tears its context down). RTSQ: a queued send, as
 * RTS with a = the sender's entry counter (each one more than the last);
 * several may be out at once and each is taken whole. DONEQ: a = that
 * counter, b = bytes taken or a negative status; in order. */
typedef struct gp_hdr {
    uint32_t type, len;
    uint64_t a, b;
} gp_hdr_t;

typedef struct gp_rts {
    rm_cuda_ipc_handle_t handle;
    uint64_t             offset;
} gp_rts_t;

/* ------------------------------------------------------------ finding the peer */

static void local_name(const struct sockaddr *sa, int wildcard, struct sockaddr_un *un,
                       socklen_t *len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    int n;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        struct in_addr any = {.s_addr = htonl(INADDR_ANY)};
        inet_ntop(AF_INET, wildcard ? &any : &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, wildcard ? &in6addr_any : &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    memset(un, 0, sizeof(*un));
    un->sun_family = AF_UNIX;
    n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "remora-gpunet/%s:%u", host, port);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* A process of another user must not get our IPC handles, nor give us its. */
static int same_user(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.uid != geteuid()) {
        rm_warn("gpunet: a local GPU-socket peer of another user (or unknown) refused");
        return 0;
    }
    return 1;
}

/* Whether addr is one of this host's (a listener on the wildcard address
 * takes connections to it). */
static int is_local(const struct sockaddr *sa)
{
    struct sockaddr_storage probe;
    socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                               : sizeof(struct sockaddr_in);
    int fd, ok;

    memcpy(&probe, sa, len);
    if (sa->sa_family == AF_INET6)
        ((struct sockaddr_in6 *)&probe)->sin6_port = 0;
    else
        ((struct sockaddr_in *)&probe)->sin_port = 0;
    if ((fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
        return 0;
    ok = bind(fd, (struct sockaddr *)&probe, len) == 0;
    close(fd);
    return ok;
}

int gp_listen(remora_gpunet_h g, int tcp_fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss), ul;
    struct sockaddr_un un;
    int fd;

    if (g->direct_min == 0 || getsockname(tcp_fd, (struct sockaddr *)&ss, &sl) != 0)
        return -1;
    local_name((struct sockaddr *)&ss, 0, &un, &ul);
    if ((fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&un, ul) != 0 || listen(fd, 1024) != 0) {
        rm_debug("gpunet: no local name %s for GPU peers: %s", un.sun_path + 1, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int try_name(const struct sockaddr_un *un, socklen_t len)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)un, len) != 0 || !same_user(fd)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The connector's HELLO carries the far end of the control pair. */
static int hello_send(int fd, int pass_fd)
{
    gp_hdr_t h = {.type = GP_HELLO, .a = (uint64_t)GP_MAGIC << 32 | GP_VERSION};
    struct iovec iov = {&h, sizeof(h)};
    union {
        struct cmsghdr c;
        char           buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

    if (pass_fd >= 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control    = ctl.buf;
        msg.msg_controllen = sizeof(ctl.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type  = SCM_RIGHTS;
        c->cmsg_len   = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    return sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(h) ? 0 : -1;
}

int gp_connect(remora_gpunet_h g, const struct sockaddr *sa, int *cfd)
{
    struct sockaddr_un un;
    socklen_t len;
    int fd, pair[2];

    if (g->direct_min == 0 || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
        return -1;
    local_name(sa, 0, &un, &len);
    if ((fd = try_name(&un, len)) < 0 && is_local(sa)) {
        local_name(sa, 1, &un, &len);
        fd = try_name(&un, len);
    }
    if (fd < 0)
        return -1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
        close(fd);
        return -1;
    }
    int ok = hello_send(fd, pair[1]) == 0;
    close(pair[1]);
    if (!ok) {
        close(pair[0]);
        close(fd);
        return -1;
    }
    *cfd = pair[0];
    return fd;
}

int gp_accept(int ufd)
{
    int fd = accept4(ufd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd >= 0 && !same_user(fd)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ------------------------------------------------------------ mappings */

/* Process pid's buffer `h` mapped here; NULL if it cannot be (the caller
 * falls back to the ring).
 *
 * Mappings are never closed while the proxy runs: cuIpcCloseMemHandle waits
 * for every kernel of this process to end (seen on the H100: a close under a
 * kernel that waits on a socket never returned), and an open of the same
 * handle waits behind it. So an entry stays until remora_gpunet_destroy
 * hands it to a thread that closes it once the process's kernels have
 * ended (gp_shutdown); a full table sends new buffers through the ring. A
 * dead peer's entries are never used again (handles are unique), and its
 * memory is freed at that close. */
static const gp_map_t *map_get(remora_gpunet_h g, pid_t pid, const rm_cuda_ipc_handle_t *h)
{
    gp_map_t *m = NULL, *slot = NULL;
    void *base, *b2;
    size_t size;

    pthread_mutex_lock(&g->maps_lock);
    for (unsigned k = 0; k < GN_MAPS && m == NULL; k++) {
        gp_map_t *e = &g->maps[k];
        if (e->base && e->pid == pid && memcmp(&e->handle, h, sizeof(*h)) == 0)
            m = e;
        else if (e->base == NULL && slot == NULL)
            slot = e;
    }
    if (m == NULL && slot == NULL && !g->maps_full) {
        g->maps_full = 1;
        rm_info("gpunet: %u peer buffers mapped: new ones go through the rings", GN_MAPS);
    }
    if (m == NULL && slot != NULL && rm_cuda_ipc_open(g->device, h, &base) == REMORA_OK) {
        if (rm_cuda_ptr_range(g->device, base, &b2, &size) == REMORA_OK) {
            *slot = (gp_map_t){.pid = pid, .handle = *h, .base = base, .size = size};
            m = slot;
        } else {
            rm_cuda_ipc_close(g->device, base); /* never used by a kernel: nothing to wait for */
        }
    }
    pthread_mutex_unlock(&g->maps_lock);
    return m;
}

/* ------------------------------------------------------------ frames */

/* One frame: 1 sent, 0 the socket is full (try later), < 0 a status. */
static int frame_send(int fd, uint32_t type, uint64_t a, uint64_t b, const void *p1, size_t n1,
                      const void *p2, size_t n2)
{
    gp_hdr_t h = {.type = type, .len = (uint32_t)(n1 + n2), .a = a, .b = b};
    struct iovec iov[3] = {{&h, sizeof(h)}, {(void *)p1, n1}, {(void *)p2, n2}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = n2 ? 3 : n1 ? 2 : 1};

    if (sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
        return 1;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : REMORA_ERR_DISCONNECTED;
}

/* A control frame now, or queued behind the ones that found the socket full
 * (or that came before the control socket: the acceptor gets it with HELLO). */
static int ctl_send(psock_t *p, uint32_t type, uint64_t a, uint64_t b)
{
    gp_state_t *gp = &p->gp;
    int r = gp->nout || gp->cfd < 0 ? 0 : frame_send(gp->cfd, type, a, b, NULL, 0, NULL, 0);

    if (r != 0)
        return r < 0 ? r : 0;
    if (gp->nout == sizeof(gp->out) / sizeof(gp->out[0]))
        return REMORA_ERR_PROTOCOL; /* cannot happen: at most one of each kind is owed */
    gp->out[gp->nout].type = type;
    gp->out[gp->nout].a    = a;
    gp->out[gp->nout].b    = b;
    gp->nout++;
    return 0;
}

static int ctl_flush(psock_t *p)
{
    gp_state_t *gp = &p->gp;

    while (gp->nout && gp->cfd >= 0) {
        int r = frame_send(gp->cfd, gp->out[0].type, gp->out[0].a, gp->out[0].b, NULL, 0, NULL, 0);
        if (r <= 0)
            return r;
        memmove(&gp->out[0], &gp->out[1], --gp->nout * sizeof(gp->out[0]));
    }
    return 0;
}

/* ------------------------------------------------------------ answers to the kernel */

static void publish_bits(rg_sock_shm_t *s, gp_state_t *gp)
{
    __atomic_store_n(&s->rx_eof, gp->rx_bits, __ATOMIC_RELEASE);
}

static void answer_rx(rg_sock_shm_t *s, gp_state_t *gp, uint32_t seq, int32_t res)
{
    s->drx_res = res;
    __atomic_store_n(&s->drx_done, seq, __ATOMIC_RELEASE);
    gp->rx_seen = seq;
}

/* Entry k of a queue answered: its word says which entry and how
 * (socket_abi.h); the done counter goes after it. */
static void q_answer(rg_qans_t *ans, uint32_t k, int32_t res)
{
    __atomic_store_n(&ans[(k - 1) % RG_QDEPTH].word, (uint64_t)k << 32 | (uint32_t)res,
                     __ATOMIC_RELEASE);
}

/* Our queued send k answered (bytes taken or a status); answers are
 * published in order, each once those before it are. */
static void tq_answer(remora_gpunet_h g, int i, uint32_t k, int32_t res)
{
    gp_state_t *gp = &g->ps[i].gp;
    rg_sockq_t *q = &g->q[i];

    gp->tq_has[(k - 1) % RG_QDEPTH] = 1;
    gp->tq_res[(k - 1) % RG_QDEPTH] = res;
    while (gp->tq_has[gp->tq_acked % RG_QDEPTH]) {
        unsigned x = gp->tq_acked % RG_QDEPTH;
        q_answer(q->tq_ans, gp->tq_acked + 1, gp->tq_res[x]);
        gp->tq_has[x] = 0;
        st_relu32(&q->tq_done, ++gp->tq_acked);
    }
}

/* Every queued entry of one direction up to what the kernel posted gets st. */
static void q_fail(rg_qans_t *ans, volatile uint32_t *done, uint32_t *upto, uint32_t posted,
                   int32_t st)
{
    for (uint32_t k = *upto + 1; k - 1 != posted; k++)
        q_answer(ans, k, st);
    st_relu32(done, posted);
    *upto = posted;
}

/* The socket failed: answer what the kernel waits for (after any copy). */
static void answer_all(remora_gpunet_h g, int i, int32_t st)
{
    rg_sock_shm_t *s = &g->sh[i];
    rg_sockq_t *q = &g->q[i];
    gp_state_t *gp = &g->ps[i].gp;
    uint32_t seq;

    if (gp->copying || gp->qcopies)
        return;
    if ((seq = ld_acq32(&s->dtx_seq)) != g->ps[i].tx_seen)
        gn_answer_tx(g, i, seq, st);
    if ((seq = ld_acq32(&s->drx_seq)) != gp->rx_seen)
        answer_rx(s, gp, seq, st);
    if ((seq = ld_acq32(&q->tq_posted)) != gp->tq_acked) {
        q_fail(q->tq_ans, &q->tq_done, &gp->tq_acked, seq, st);
        gp->tq_sent = seq;
        memset(gp->tq_has, 0, sizeof(gp->tq_has));
    }
    if ((seq = ld_acq32(&q->rq_posted)) != gp->rq_answered) {
        q_fail(q->rq_ans, &q->rq_done, &gp->rq_answered, seq, st);
        gp->rq_assigned = seq;
    }
}

/* RG_RX_SRC: bytes of the peer's wait to be taken (its RTS, its RTSQs). */
static void src_bits(rg_sock_shm_t *s, gp_state_t *gp)
{
    uint32_t bits = gp->src_active || gp->qs_take != gp->qs_tail ? gp->rx_bits | RG_RX_SRC
                                                                   : gp->rx_bits & ~RG_RX_SRC;
    if (bits != gp->rx_bits) {
        gp->rx_bits = bits;
        publish_bits(s, gp);
    }
}

static void src_drop(psock_t *p, rg_sock_shm_t *s)
{
    p->gp.src_active = 0;
    src_bits(s, &p->gp);
}

/* The next n bytes of the peer's oldest queued send not yet all taken go to
 * a copy: where they are. */
static uint8_t *qsrc_take(gp_state_t *gp, uint64_t n, unsigned *qi)
{
    gp_qsrc_t *e = &gp->qsrc[gp->qs_take % RG_QDEPTH];
    uint8_t *from = e->src + e->taken;

    *qi = (unsigned)gp->qs_take;
    e->taken += n;
    e->copies++;
    if (e->taken == e->len)
        gp->qs_take++;
    return from;
}

/* How many bytes the oldest queued send not yet all taken still offers. */
static uint64_t qsrc_left(const gp_state_t *gp)
{
    const gp_qsrc_t *e = &gp->qsrc[gp->qs_take % RG_QDEPTH];
    return e->len - e->taken;
}

/* A copy out of queued send qi ended: the sends whose every byte has been
 * copied are answered (DONEQ), oldest first. */
static int qsrc_copied(psock_t *p, rg_sock_shm_t *s, unsigned qi)
{
    gp_state_t *gp = &p->gp;
    int r = 0;

    gp->qsrc[qi % RG_QDEPTH].copies--;
    while (gp->qs_head != gp->qs_take && gp->qsrc[gp->qs_head % RG_QDEPTH].copies == 0 && r >= 0) {
        const gp_qsrc_t *e = &gp->qsrc[gp->qs_head % RG_QDEPTH];
        r = ctl_send(p, GP_DONEQ, e->id, e->len);
        gp->qs_head++;
    }
    src_bits(s, gp);
    return r;
}

/* ------------------------------------------------------------ copies */

/* Out of the peer's buffer, on the owner's copy queue (docs/gpunet.md). */
static int copy_start(remora_gpunet_h g, int i, void *dst, const void *src, uint64_t n)
{
    gp_state_t *gp = &g->ps[i].gp;
    remora_status_t st;

    if ((st = gn_copy_start(g, i, &gp->copy, dst, src, n, 1)) != REMORA_OK)
        return st;
    gp->copying = 1;
    return REMORA_OK;
}

int gp_poll_copies(remora_gpunet_h g, unsigned w)
{
    return g->copyq[w] != NULL && rm_copyq_busy(g->copyq[w]) && rm_copyq_poll(g->copyq[w]) > 0;
}

/* A copy finished: the kernel and the sender learn how much moved. */
static int copy_progress(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    remora_status_t st;
    int r;

    if (!gp->copying)
        return 0;
    if (!gp->copy.ended)
        return 1;
    gp->copying = 0;
    if ((st = gp->copy.status) != REMORA_OK) {
        gn_sock_fail(g, i, REMORA_ERR_IO);
        return 1;
    }
    if (gp->copy_to_ring) {
        p->rx_head += gp->copy.n;
        st_rel(&s->rx_head, p->rx_head);
        answer_rx(s, gp, gp->copy_seq, RG_RES_RING);
    } else {
        answer_rx(s, gp, gp->copy_seq, (int32_t)gp->copy.n);
    }
    if (gp->copy_q) {
        r = qsrc_copied(p, s, gp->copy_qi);
        gp->copy_q = 0;
    } else {
        r = ctl_send(p, GP_DONE, gp->src_id, gp->copy.n);
        gp->done_id = gp->src_id;
        src_drop(p, s);
    }
    if (r < 0)
        gn_sock_fail(g, i, (remora_status_t)r);
    return 1;
}

/* ------------------------------------------------------------ the device's side */

/* The kernel's receive request: from the ring, out of the peer's buffer, or later. */
static int serve_request(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    uint32_t seq = ld_acq32(&s->drx_seq);
    remora_status_t st;

    if (seq == gp->rx_seen || gp->copying)
        return 0;
    uint64_t used = p->rx_head - ld_acq(&s->rx_tail);
    if (used != 0) {
        answer_rx(s, gp, seq, RG_RES_RING);
        return 1;
    }
    if (gp->rq_answered != ld_acq32(&g->q[i].rq_posted)) {
        /* The kernel's queued receives get what the peer sends first. */
        if (ld_acq32(&s->drx_cancel) == seq) {
            answer_rx(s, gp, seq, REMORA_ERR_TIMED_OUT);
            return 1;
        }
        return 0;
    }
    if (gp->src_active || gp->qs_take != gp->qs_tail) {
        uint64_t dst = s->drx_ptr, len = s->drx_len, n = gp->src_active ? gp->src_len : qsrc_left(gp);
        const uint8_t *from = gp->src;
        void *to;
        gp->copy_seq = seq;
        gp->copy_to_ring = dst == 0;
        if (dst != 0) {
            n  = n < len ? n : len;
            to = (void *)(uintptr_t)dst;
        } else { /* the ring is empty: its first contiguous stretch */
            size_t off = (size_t)(p->rx_head & (g->ring - 1));
            n  = n < g->ring - off ? n : g->ring - off;
            to = g->rx + (size_t)i * g->ring + off;
        }
        if (n == 0) {
            answer_rx(s, gp, seq, REMORA_ERR_INVALID_PARAM);
            return 1;
        }
        gp->copy_q = !gp->src_active;
        if (gp->copy_q)
            from = qsrc_take(gp, n, &gp->copy_qi);
        if ((st = copy_start(g, i, to, from, n)) != REMORA_OK) {
            rm_warn("gpunet: device-to-device copy failed (%s)", remora_status_string(st));
            gn_sock_fail(g, i, REMORA_ERR_IO);
        }
        return 1;
    }
    if (gp->fin_in || gp->peer_closed) {
        answer_rx(s, gp, seq, 0);
        return 1;
    }
    if (ld_acq32(&s->drx_cancel) == seq) {
        answer_rx(s, gp, seq, REMORA_ERR_TIMED_OUT);
        return 1;
    }
    return 0;
}

/* The kernel's queued receives: each gets an answer on the way as soon as
 * something can answer it (bytes the ring holds come first), in order, and
 * their copies run together. */
static int serve_queue(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    rg_sockq_t *q = &g->q[i];
    uint32_t posted = ld_acq32(&q->rq_posted);
    rm_copyq_t *cq = g->copyq[(unsigned)i % g->nworkers];
    int busy = 0;

    rm_copyq_hold(cq); /* the copies started here share one completion write */
    while (gp->rq_assigned != posted && gp->rq_assigned - gp->rq_answered < RG_QDEPTH &&
           !gp->copying) {
        uint32_t k = gp->rq_assigned + 1;
        unsigned x = (k - 1) % RG_QDEPTH;
        gp_qrx_t *a = &gp->rqa[x];
        uint8_t *dst = (uint8_t *)(uintptr_t)q->rq_ptr[x], *from = NULL;
        uint64_t len = q->rq_len[x], n = 0;

        a->copying = a->from_src = 0;
        a->res = 0;
        uint64_t tail = ld_acq(&s->rx_tail);
        if (dst == NULL || len == 0 || len > INT32_MAX) {
            a->res = REMORA_ERR_INVALID_PARAM;
        } else if (p->rx_head != tail) {
            /* Bytes in the ring come first: the kernel takes them itself.
             * One entry at a time says so, each once the kernel took some
             * since the last: the entries after it get what follows. */
            if (gp->ering && tail == gp->ering_tail)
                break;
            a->res = RG_RES_RING;
            gp->ering = 1;
            gp->ering_tail = tail;
        } else if (gp->src_active) {
            if (gp->src_busy)
                break; /* a direct send is answered after one copy */
            n = gp->src_len < len ? gp->src_len : len;
            from = gp->src;
            a->from_src = gp->src_busy = 1;
        } else if (gp->qs_take != gp->qs_tail) {
            n = qsrc_left(gp) < len ? qsrc_left(gp) : len;
            from = qsrc_take(gp, n, &a->qi);
        } else if (gp->fin_in || gp->peer_closed) {
            a->res = 0;
        } else {
            break;
        }
        if (from != NULL) {
            remora_status_t st = gn_copy_start(g, i, &a->copy, dst, from, n, 1);
            if (st != REMORA_OK) {
                rm_warn("gpunet: device-to-device copy failed (%s)", remora_status_string(st));
                rm_copyq_release(cq); /* before the failure, which may drain the queue */
                gn_sock_fail(g, i, REMORA_ERR_IO);
                return 1;
            }
            a->copying = 1;
            gp->qcopies++;
        }
        gp->rq_assigned = k;
        busy = 1;
    }
    rm_copyq_release(cq);
    return busy;
}

/* Queued receives whose answer is ready, oldest first: their results, and
 * the senders' answers for the bytes copied. */
static int queue_progress(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    rg_sockq_t *q = &g->q[i];
    int busy = 0, r = 0;

    while (gp->rq_answered != gp->rq_assigned) {
        uint32_t k = gp->rq_answered + 1;
        gp_qrx_t *a = &gp->rqa[(k - 1) % RG_QDEPTH];
        int32_t res = a->res;
        if (a->copying) {
            if (!a->copy.ended)
                break;
            a->copying = 0;
            gp->qcopies--;
            res = a->copy.status == REMORA_OK ? (int32_t)a->copy.n : REMORA_ERR_IO;
            if (a->copy.status != REMORA_OK)
                gn_sock_fail(g, i, REMORA_ERR_IO);
            else if (a->from_src) {
                r = ctl_send(p, GP_DONE, gp->src_id, a->copy.n);
                gp->done_id = gp->src_id;
                gp->src_busy = 0;
                src_drop(p, s);
            } else {
                r = qsrc_copied(p, s, a->qi);
            }
        }
        q_answer(q->rq_ans, k, res);
        st_relu32(&q->rq_done, k);
        gp->rq_answered = k;
        busy = 1;
        if (r < 0) {
            gn_sock_fail(g, i, (remora_status_t)r);
            break;
        }
    }
    return busy;
}

/* The kernel's queued sends, in order, each once the ring bytes posted
 * before it have gone (gp_tx sends ring bytes up to the next one's mark). */
static int offer_queued(remora_gpunet_h g, int i, int *busy);

/* The IPC handle and offset of ptr for an RTS (worker w's cache first); 0,
 * or -1 if ptr is not device memory that can be shared. The entry used
 * moves to the front (size_of_offer reads it). */
static int offer_handle(remora_gpunet_h g, unsigned w, void *ptr, gp_rts_t *rts)
{
    gp_offer_t *c = g->offers[w], hit;
    unsigned n = sizeof(g->offers[0]) / sizeof(g->offers[0][0]), k;
    uint64_t id;
    void *base;
    size_t size, off;

    if (rm_cuda_ptr_alloc(ptr, &id, &base, &size) != REMORA_OK)
        return -1;
    for (k = 0; k < n && c[k].id != id; k++) {}
    if (k == n) { /* new: the oldest entry goes */
        hit = (gp_offer_t){.id = id, .base = base, .size = size};
        if (rm_cuda_ipc_get(base, &hit.handle, &off) != REMORA_OK)
            return -1;
        k = n - 1;
    } else {
        hit = c[k];
    }
    memmove(&c[1], &c[0], k * sizeof(c[0]));
    c[0] = hit;
    rts->handle = hit.handle;
    rts->offset = (uint64_t)((uint8_t *)ptr - hit.base);
    return 0;
}

static size_t size_of_offer(remora_gpunet_h g, unsigned w)
{
    return g->offers[w][0].size;
}

/* The kernel's direct send: offered to the peer as an RTS, or back to the ring. */
static int offer_send(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    uint32_t seq = ld_acq32(&s->dtx_seq);
    gp_rts_t rts;
    void *ptr;
    uint64_t len;
    int r;

    if (gp->tx_busy) {
        if (!gp->tx_cancel_sent && ld_acq32(&s->dtx_cancel) == gp->tx_id) {
            if ((r = ctl_send(p, GP_CANCEL, gp->tx_id, 0)) < 0)
                return r;
            gp->tx_cancel_sent = 1;
            gp->tx_deadline = rm_now_ns() + g->timeout_ns;
        } else if (gp->tx_cancel_sent && rm_now_ns() > gp->tx_deadline) {
            return REMORA_ERR_TIMED_OUT; /* the peer never answered: it may still read */
        }
        return 0;
    }
    if (seq == p->tx_seen)
        return 0;
    /* Queued sends posted before it (until taken) and ring bytes written
     * before it (read again: after gp_tx looked) go first. Nothing of it is
     * out yet, so its cancel is answered here. */
    if (gp->tq_sent != ld_acq32(&g->q[i].tq_posted) || gp->tq_acked != gp->tq_sent ||
        ld_acq(&s->tx_head) != p->tx_tail) {
        if (ld_acq32(&s->dtx_cancel) == seq) {
            gn_answer_tx(g, i, seq, REMORA_ERR_TIMED_OUT);
            return 1;
        }
        return 0;
    }
    ptr = (void *)(uintptr_t)s->dtx_ptr;
    len = s->dtx_len;
    memset(&rts, 0, sizeof(rts));
    if (len == 0 || g->host_queues || offer_handle(g, (unsigned)i % g->nworkers, ptr, &rts) ||
        rts.offset + len > size_of_offer(g, (unsigned)i % g->nworkers)) {
        gn_answer_tx(g, i, seq, RG_RES_RING); /* not shareable: the kernel uses the ring */
        return 1;
    }
    if ((r = frame_send(p->fd, GP_RTS, seq, len, &rts, sizeof(rts), NULL, 0)) <= 0)
        return r;
    gp->tx_busy = 1;
    gp->tx_id = seq;
    gp->tx_cancel_sent = 0;
    return 1;
}

static int offer_queued(remora_gpunet_h g, int i, int *busy)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sockq_t *q = &g->q[i];
    uint32_t posted = ld_acq32(&q->tq_posted);
    unsigned w = (unsigned)i % g->nworkers;

    while (gp->tq_sent != posted && gp->tq_sent - gp->tq_acked < RG_QDEPTH && !gp->tx_busy) {
        uint32_t k = gp->tq_sent + 1;
        unsigned x = (k - 1) % RG_QDEPTH;
        void *ptr = (void *)(uintptr_t)q->tq_ptr[x];
        uint64_t len = q->tq_len[x];
        gp_rts_t rts;
        if (q->tq_mark[x] > p->tx_tail)
            break; /* ring bytes before it go first */
        memset(&rts, 0, sizeof(rts));
        if (len == 0 || len > INT32_MAX || g->host_queues || offer_handle(g, w, ptr, &rts) ||
            rts.offset + len > size_of_offer(g, w)) {
            tq_answer(g, i, k, REMORA_ERR_INVALID_PARAM); /* not shareable: nothing sent */
        } else {
            int r = frame_send(p->fd, GP_RTSQ, k, len, &rts, sizeof(rts), NULL, 0);
            if (r <= 0)
                return r;
        }
        gp->tq_sent = k;
        *busy = 1;
    }
    return 0;
}

/* How far ring bytes may go now: up to the mark of the next queued send. */
static uint64_t tx_limit(remora_gpunet_h g, int i, uint64_t head)
{
    const psock_t *p = &g->ps[i];
    rg_sockq_t *q = &g->q[i];
    /* Read after head: a send posted after bytes it marks is seen with them. */
    uint32_t posted = ld_acq32(&q->tq_posted);

    if (p->gp.tq_sent != posted) {
        uint64_t mark = q->tq_mark[p->gp.tq_sent % RG_QDEPTH];
        if (mark >= p->tx_tail && mark < head)
            return mark;
    }
    return head;
}

/* Device -> peer: ring bytes as DATA, the queued sends and the direct send
 * in the order the kernel posted them, then FIN. */
static int gp_tx(remora_gpunet_h g, int i, int *busy)
{
    psock_t *p = &g->ps[i];
    rg_sock_shm_t *s = &g->sh[i];
    uint8_t *txr = g->tx + (size_t)i * g->ring;
    uint64_t head = ld_acq(&s->tx_head);
    int r;

    if ((r = ctl_flush(p)) < 0)
        return r;
    if (head - p->tx_tail > g->ring)
        return REMORA_ERR_PROTOCOL; /* a kernel wrote past the ring */
    head = tx_limit(g, i, head);
    if (p->gp.tq_acked != p->gp.tq_sent)
        head = p->tx_tail; /* after queued sends out, only more of them */
    while (head != p->tx_tail) {
        size_t off = (size_t)(p->tx_tail & (g->ring - 1));
        size_t n = (size_t)(head - p->tx_tail), n1;
        n  = n < GP_FRAME ? n : GP_FRAME;
        n1 = n < g->ring - off ? n : g->ring - off;
        if ((r = frame_send(p->fd, GP_DATA, 0, 0, txr + off, n1, txr, n - n1)) <= 0)
            return r;
        p->tx_tail += n;
        st_rel(&s->tx_tail, p->tx_tail);
        gn_count(&g->ring_bytes, n);
        *busy = 1;
    }
    if ((r = offer_queued(g, i, busy)) < 0)
        return r;
    if ((r = offer_send(g, i)) != 0) {
        *busy = 1;
        if (r < 0)
            return r;
    }
    if ((flag(&p->closing) || flag(&p->shutting)) && !p->shut_done && !p->gp.tx_busy &&
        ld_acq32(&s->dtx_seq) == p->tx_seen && p->gp.tq_sent == ld_acq32(&g->q[i].tq_posted) &&
        p->gp.tq_acked == p->gp.tq_sent &&
        ld_acq(&s->tx_head) == p->tx_tail) { /* bytes written before the shutdown go first */
        if ((r = frame_send(p->fd, GP_FIN, 0, 0, NULL, 0, NULL, 0)) <= 0)
            return r;
        p->shut_done = 1;
        *busy = 1;
    }
    return 0;
}

/* ------------------------------------------------------------ the peer's side */

/* A frame from the stream (ctl 0) or the control socket (ctl 1). */
static int on_frame(remora_gpunet_h g, int i, int ctl, const gp_hdr_t *h, const void *body)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    int is_ctl = h->type == GP_DONE || h->type == GP_CANCEL || h->type == GP_PING ||
                 h->type == GP_PONG || h->type == GP_DONEQ;

    if ((!gp->hello && h->type != GP_HELLO) || is_ctl != ctl)
        return REMORA_ERR_PROTOCOL;
    switch (h->type) {
    case GP_HELLO:
        if (h->a != ((uint64_t)GP_MAGIC << 32 | GP_VERSION))
            return REMORA_ERR_VERSION;
        gp->hello = 1;
        return 0;
    case GP_DATA: /* already in the ring */
        p->rx_head += h->len;
        st_rel(&s->rx_head, p->rx_head);
        return 0;
    case GP_RTS: {
        gp_rts_t rts;
        if (h->len != sizeof(rts) || h->b == 0 || h->b > INT32_MAX)
            return REMORA_ERR_PROTOCOL;
        memcpy(&rts, body, sizeof(rts));
        if (gp->cancel_seen && gp->cancel_id == h->a) { /* its CANCEL came first */
            gp->cancel_seen = 0;
            return ctl_send(p, GP_DONE, h->a, (uint64_t)(int64_t)REMORA_ERR_TIMED_OUT);
        }
        const gp_map_t *m = g->host_queues ? NULL : map_get(g, gp->peer_pid, &rts.handle);
        if (m == NULL || rts.offset > m->size || h->b > m->size - rts.offset)
            return ctl_send(p, GP_DONE, h->a, (uint64_t)(int64_t)RG_RES_RING);
        gp->src        = m->base + rts.offset;
        gp->src_len    = h->b;
        gp->src_id     = h->a;
        gp->src_active = 1;
        gp->rx_bits |= RG_RX_SRC;
        publish_bits(s, gp);
        return 0;
    }
    case GP_RTSQ: {
        gp_rts_t rts;
        /* Ids grow (by more than one where the sender refused an entry). */
        if (h->len != sizeof(rts) || h->b == 0 || h->b > INT32_MAX || h->a > UINT32_MAX ||
            (uint32_t)(h->a - gp->qs_last) - 1 >= 0x80000000u || gp->qs_tail - gp->qs_head >= RG_QDEPTH)
            return REMORA_ERR_PROTOCOL;
        memcpy(&rts, body, sizeof(rts));
        gp->qs_last = h->a;
        const gp_map_t *m = g->host_queues ? NULL : map_get(g, gp->peer_pid, &rts.handle);
        if (m == NULL || rts.offset > m->size || h->b > m->size - rts.offset)
            return ctl_send(p, GP_DONEQ, h->a, (uint64_t)(int64_t)REMORA_ERR_IO);
        gp->qsrc[gp->qs_tail % RG_QDEPTH] =
            (gp_qsrc_t){.src = m->base + rts.offset, .len = h->b, .id = h->a};
        gp->qs_tail++;
        src_bits(s, gp);
        return 0;
    }
    case GP_DONEQ:
        if (h->a > UINT32_MAX || (uint32_t)(h->a - gp->tq_acked - 1) >= gp->tq_sent - gp->tq_acked ||
            gp->tq_has[(h->a - 1) % RG_QDEPTH])
            return REMORA_ERR_PROTOCOL;
        tq_answer(g, i, (uint32_t)h->a, (int32_t)(int64_t)h->b);
        return 0;
    case GP_DONE:
        if (!gp->tx_busy || h->a != gp->tx_id)
            return REMORA_ERR_PROTOCOL;
        gp->tx_busy = 0;
        gn_answer_tx(g, i, (uint32_t)h->a, (int32_t)(int64_t)h->b);
        return 0;
    case GP_CANCEL:
        if (!gp->src_active || h->a != gp->src_id) {
            /* Either our DONE crossed it, or its RTS is still unread. */
            if (h->a != gp->done_id) {
                gp->cancel_seen = 1;
                gp->cancel_id   = h->a;
            }
            return 0;
        }
        if (gp->copying || gp->src_busy)
            return 0; /* the copy's DONE answers it */
        src_drop(p, s);
        gp->done_id = h->a;
        return ctl_send(p, GP_DONE, h->a, (uint64_t)(int64_t)REMORA_ERR_TIMED_OUT);
    case GP_PING:
        return ctl_send(p, GP_PONG, 0, 0);
    case GP_PONG:
        return 0;
    case GP_FIN:
        gp->fin_in = 1;
        gp->rx_bits |= RG_RX_EOF;
        publish_bits(s, gp);
        return 0;
    default:
        return REMORA_ERR_PROTOCOL;
    }
}

/* The fd a HELLO passed (SCM_RIGHTS), or -1. */
static int passed_fd(struct msghdr *msg)
{
    int fd = -1;

    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int)) && fd < 0)
            memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

/* Peer -> device, the stream: frames while the ring has room and no offer
 * of the peer is pending. */
static int gp_rx(remora_gpunet_h g, int i, int *busy)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    rg_sock_shm_t *s = &g->sh[i];
    uint8_t *rxr = g->rx + (size_t)i * g->ring;

    while (p->readable && !gp->src_active && !gp->peer_closed) {
        size_t space = g->ring - (size_t)(p->rx_head - ld_acq(&s->rx_tail));
        size_t off = (size_t)(p->rx_head & (g->ring - 1)), n1 = g->ring - off;
        /* Not while a copy lands at rx_head (bytes of queued sends the
         * kernel receives through the ring): a frame there would overwrite
         * them, or they it. */
        int into_ring = space >= GP_FRAME && !(gp->copying && gp->copy_to_ring);
        gp_hdr_t h;
        gp_rts_t small;
        union {
            struct cmsghdr c;
            char           buf[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec iov[3] = {{&h, sizeof(h)}};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
        ssize_t r;

        if (!gp->hello) {
            msg.msg_control    = ctl.buf;
            msg.msg_controllen = sizeof(ctl.buf);
        }
        if (into_ring) { /* DATA lands in the ring; the others are copied out of it */
            iov[1] = (struct iovec){rxr + off, n1 < GP_FRAME ? n1 : GP_FRAME};
            iov[2] = (struct iovec){rxr, GP_FRAME - iov[1].iov_len};
            msg.msg_iovlen = iov[2].iov_len ? 3 : 2;
        } else {
            r = recv(p->fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                p->readable = 0;
                break;
            }
            if (r > 0 && (r != (ssize_t)sizeof(h) || h.type == GP_DATA))
                break; /* waits for the kernel to make room */
            iov[1] = (struct iovec){&small, sizeof(small)};
        }
        r = recvmsg(p->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                p->readable = 0;
                break;
            }
            return REMORA_ERR_DISCONNECTED;
        }
        if (r == 0) { /* the peer closed: after its FIN an end, before it a failure */
            gp->peer_closed = 1;
            if (!gp->fin_in) {
                rm_info("gpunet: GPU peer of socket %d went away", i);
                return REMORA_ERR_DISCONNECTED;
            }
            break;
        }
        if (!gp->hello) {
            int fd = passed_fd(&msg);
            if (fd >= 0 && (gp->cfd >= 0 || gn_watch_ctl(g, i, fd) != 0)) {
                close(fd);
                return REMORA_ERR_PROTOCOL;
            }
            if (fd >= 0)
                gp->cfd = fd;
            if (gp->cfd < 0)
                return REMORA_ERR_PROTOCOL; /* the connector passes it */
        }
        if ((size_t)r < sizeof(h) || (size_t)r != sizeof(h) + h.len || (msg.msg_flags & MSG_TRUNC) ||
            (h.type == GP_DATA && !into_ring))
            return REMORA_ERR_PROTOCOL;
        if (h.type != GP_DATA && h.len && into_ring) { /* gather it out of the ring */
            size_t k = h.len < sizeof(small) ? h.len : sizeof(small), k1 = k < n1 ? k : n1;
            memcpy(&small, rxr + off, k1);
            memcpy((uint8_t *)&small + k1, rxr, k - k1);
        }
        if (gp->qs_tail != gp->qs_head && h.type != GP_RTSQ)
            return REMORA_ERR_PROTOCOL; /* the sender holds the rest until their DONEQs */
        int st = on_frame(g, i, 0, &h, &small);
        if (st < 0)
            return st;
        gp->last_rx_ns = rm_now_ns();
        *busy = 1;
    }
    return 0;
}

/* Control frames, whatever the stream is waiting for. */
static int gp_ctl_rx(remora_gpunet_h g, int i, int *busy)
{
    gp_state_t *gp = &g->ps[i].gp;

    while (gp->ctl_readable && gp->cfd >= 0 && !gp->ctl_closed) {
        gp_hdr_t h;
        ssize_t r = recv(gp->cfd, &h, sizeof(h), MSG_DONTWAIT);
        if (r < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return REMORA_ERR_DISCONNECTED;
            gp->ctl_readable = 0;
            break;
        }
        if (r == 0) { /* the stream tells how it ended; no answer comes from here on */
            gp->ctl_closed = 1;
            break;
        }
        if (r != (ssize_t)sizeof(h) || h.len != 0)
            return REMORA_ERR_PROTOCOL;
        int st = on_frame(g, i, 1, &h, NULL);
        if (st < 0)
            return st;
        gp->last_rx_ns = rm_now_ns();
        *busy = 1;
    }
    return 0;
}

/* While the kernel waits on the peer (an offer out, a receive request
 * open), a peer silent for a heartbeat is asked for a PONG, and one silent
 * for the peer timeout is dead. */
static int liveness(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    gp_state_t *gp = &p->gp;
    uint64_t now = rm_now_ns();
    int qtx = gp->tq_acked != gp->tq_sent;
    int waiting = gp->tx_busy || qtx || ld_acq32(&g->sh[i].drx_seq) != gp->rx_seen ||
                  gp->rq_answered != ld_acq32(&g->q[i].rq_posted);

    if (!waiting || g->hb_ns == 0 || gp->peer_closed) {
        gp->last_rx_ns = gp->last_check_ns = now;
        return 0;
    }
    /* Checked on every pass of the worker's loop (it naps 1 ms at most):
     * a pass 20 ms late is a stall of ours. */
    rm_stall_credit(&gp->last_rx_ns, rm_stall_ns(&gp->last_check_ns, now, 10000000u), now);
    if (gp->ctl_closed && (gp->tx_busy || qtx))
        return REMORA_ERR_DISCONNECTED; /* the DONE it waits for cannot come */
    if (now - gp->last_rx_ns > g->dead_ns) {
        rm_warn("gpunet: GPU peer of socket %d silent for %llu ms: disconnected", i,
                (unsigned long long)((now - gp->last_rx_ns) / 1000000u));
        return REMORA_ERR_DISCONNECTED;
    }
    if (now - gp->last_rx_ns > g->hb_ns && now - gp->last_ping_ns > g->hb_ns) {
        gp->last_ping_ns = now;
        return ctl_send(p, GP_PING, 0, 0);
    }
    return 0;
}

/* ------------------------------------------------------------ the socket */

void gp_open(remora_gpunet_h g, int i, int cfd)
{
    psock_t *p = &g->ps[i];
    struct ucred cr;
    socklen_t len = sizeof(cr);

    memset(&p->gp, 0, sizeof(p->gp));
    p->gp.cfd = cfd;
    if (getsockopt(p->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
        p->gp.peer_pid = cr.pid;
    p->gp.rx_bits = RG_RX_REQ;
    p->gp.last_rx_ns = rm_now_ns();
    publish_bits(&g->sh[i], &p->gp);
    /* The connector's HELLO went with the control socket (gp_connect). */
    if (cfd < 0 && hello_send(p->fd, -1) != 0)
        st_rel32(&g->sh[i].error, REMORA_ERR_DISCONNECTED);
}

int gp_pump(remora_gpunet_h g, int i)
{
    psock_t *p = &g->ps[i];
    rg_sock_shm_t *s = &g->sh[i];
    int busy = copy_progress(g, i) | queue_progress(g, i), st;

    if (kind_of(p) != BK_GPU)
        return 1; /* a failure above freed it (it was closing) */
    if (s->error) {
        answer_all(g, i, s->error);
        if (flag(&p->closing) && !p->gp.copying && !p->gp.qcopies) {
            gn_sock_free(g, i);
            return 1;
        }
        return busy;
    }
    if ((st = gp_ctl_rx(g, i, &busy)) < 0 || (st = gp_tx(g, i, &busy)) < 0 ||
        (st = gp_rx(g, i, &busy)) < 0 || (st = liveness(g, i)) < 0) {
        gn_sock_fail(g, i, (remora_status_t)st);
        return 1;
    }
    if (flag(&p->closing) && p->shut_done && !p->gp.copying && !p->gp.qcopies && p->gp.nout == 0) {
        gn_sock_free(g, i);
        return 1;
    }
    return serve_queue(g, i) | serve_request(g, i) | busy;
}

void gp_release(remora_gpunet_h g, int i)
{
    gp_state_t *gp = &g->ps[i].gp;

    if (gp->copying || gp->qcopies) /* a copy reads the peer's buffer and writes ours: let it end */
        rm_copyq_drain(g->copyq[(unsigned)i % g->nworkers]);
    gp->copying = 0;
    gp->qcopies = 0;
    if (gp->cfd >= 0)
        close(gp->cfd); /* leaves the epoll set with it */
    gp->cfd = -1;
}

remora_status_t gp_prepare(remora_gpunet_h g)
{
    remora_status_t st;

    if (g->host_queues || (g->direct_min == 0 && g->bounce_min == 0))
        return REMORA_OK; /* no copies by the proxy */
    /* The worker serves sockets; a thread of the queue's makes the driver
     * calls (4-10 µs a copy), on two streams: the copies are independent
     * (distinct kernel buffers, one bounce at a time), and on one stream
     * each waits for the completion write of the one before. The thread
     * spins at most 200 µs after its last copy: a stream's copies come every
     * few µs, and the worker's longer spin is its own. (A thread per stream
     * enqueued faster in a probe, 6.1 against 9.3 µs a 4 MiB copy under MPS,
     * but moved GPU sockets no faster: 8.9-10.4 µs a message either way.) */
    rm_copyq_params_t cp = {.lanes = g->copy_lanes < RM_COPYQ_LANES_MAX ? g->copy_lanes
                                                                         : RM_COPYQ_LANES_MAX,
                            .submit_thread = g->submit_thread,
                            .spin_ns = g->spin_ns < 200000 ? g->spin_ns : 200000};
    for (unsigned w = 0; w < g->nworkers; w++) {
        if ((g->copyq[w] = rm_copyq_create_with(&cp)) == NULL)
            return REMORA_ERR_NO_MEMORY;
        if ((st = rm_copyq_prepare(g->copyq[w], g->device)) != REMORA_OK)
            return st;
    }
    return REMORA_OK;
}

/* What a stopped proxy leaves to close: its copy queues (their pinned words),
 * the peer buffers mapped here and the bounce buffers. These calls wait for this process's
 * kernels to end (as a free does), and a kernel of the application may run
 * on for long after the proxy went: so a thread of its own closes them, and
 * remora_gpunet_destroy does not wait for the application's kernels. */
typedef struct gp_leftovers {
    int         device;
    rm_copyq_t *copyq[GN_WORKERS_MAX];
    void       *bases[GN_MAPS];
    void       *bounce[GN_WORKERS_MAX]; /* pinned bounce buffers (gpunet_bounce.c) */
} gp_leftovers_t;

static void *reaper_main(void *arg)
{
    gp_leftovers_t *l = arg;

    for (unsigned w = 0; w < GN_WORKERS_MAX; w++)
        rm_copyq_destroy(l->copyq[w]);
    for (unsigned k = 0; k < GN_MAPS; k++)
        if (l->bases[k])
            rm_cuda_ipc_close(l->device, l->bases[k]);
    for (unsigned w = 0; w < GN_WORKERS_MAX; w++)
        if (l->bounce[w])
            rm_cuda_host_free(l->bounce[w]);
    free(l);
    return NULL;
}

/* After the workers stopped (copies in flight end on their own: drained
 * here, so no callback outlives the sockets). Also undoes a failed
 * gp_prepare. */
void gp_shutdown(remora_gpunet_h g)
{
    gp_leftovers_t *l = calloc(1, sizeof(*l));
    int any = 0;
    pthread_t t;
    pthread_attr_t attr;

    for (unsigned w = 0; w < GN_WORKERS_MAX; w++) {
        if (g->copyq[w] == NULL)
            continue;
        rm_copyq_drain(g->copyq[w]);
        if (l)
            l->copyq[w] = g->copyq[w];
        any = 1;
        g->copyq[w] = NULL;
    }
    for (unsigned k = 0; k < GN_MAPS; k++)
        if (g->maps[k].base) {
            if (l)
                l->bases[k] = g->maps[k].base;
            any = 1;
            g->maps[k].base = NULL;
        }
    for (unsigned w = 0; w < GN_WORKERS_MAX; w++) {
        if (g->bounce[w].buf == NULL)
            continue;
        if (g->host_queues) {
            free(g->bounce[w].buf);
        } else {
            if (l)
                l->bounce[w] = g->bounce[w].buf;
            any = 1;
        }
        g->bounce[w].buf = NULL;
    }
    if (l == NULL || !any) {
        if (any)
            rm_warn("gpunet: out of memory: the proxy's mappings stay until the process ends");
        free(l);
        return;
    }
    l->device = g->device;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, reaper_main, l) != 0) {
        rm_warn("gpunet: no thread to close the proxy's mappings: they stay until the process ends");
        free(l);
    }
    pthread_attr_destroy(&attr);
}
