/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU sockets: large sends to CPU and TCP peers, copied out of GPU memory by
 * the proxy (docs/gpunet.md, "Large sends to CPU and TCP peers").
 *
 * Design notes
 * - A kernel's blocking send of bounce_min bytes or more from global memory
 *   posts the buffer (the dtx_* request of socket_abi.h) instead of copying
 *   it into the send ring with its threads. The socket's worker copies it
 *   with the GPU's copy engine into the worker's bounce buffer (pinned) and
 *   hands that to send(): the SMs copy nothing and the bytes cross PCIe
 *   once, by DMA.
 * - The bounce buffer is a staging ring of the proxy's own. A request is
 *   answered as soon as its bytes are in it, not once they are sent: the
 *   kernel's next send is posted while these still go out, as with the send
 *   ring (a first version answered after the send: on the H100 it made
 *   0.72x of the CPU client at 4 MiB against the ring's 0.88x, and 0.42x at
 *   64 KiB against 0.93x; nothing overlapped the round trip).
 * - One owner at a time. A worker's buffer belongs to one socket while that
 *   socket's bytes are in it or its request is being copied; another
 *   socket's request meanwhile is answered RG_RES_RING and goes through its
 *   ring, as before. Order: a request is taken only when the socket's ring
 *   is empty, and the ring is not sent while the bounce buffer holds older
 *   bytes of the socket.
 * - A request the peer holds up (nothing could move for GN_BOUNCE_STALL_NS,
 *   the buffer full of bytes the peer does not take) is answered with what
 *   is in, or RG_RES_RING if nothing is: like a send into a full ring, this
 *   lets a kernel that also receives (an echo) read before it sends on. A
 *   request the kernel canceled (its budget ran out) is answered the same
 *   way, REMORA_ERR_TIMED_OUT if nothing moved. No answer is given while a
 *   copy out of the kernel's buffer may still run.
 * - Copies go on the worker's copy queue (rm_copyq: no CUDA object is made
 *   on the data path). With host queues (no GPU; the tests) a copy is a
 *   memcpy.
 * - Threading: a bounce buffer is its worker's alone, like the sockets it
 *   serves (gpunet_int.h).
 */
#include "gpu/gpunet_int.h"

#include <stdlib.h>
#include <string.h>

#include "util/list.h"
#include "util/time.h"

#define GN_BOUNCE_STALL_NS 1000000u /* a request that could not move this long is answered */

static gn_bounce_t *bounce_of(remora_gpunet_h g, int i)
{
    return &g->bounce[(unsigned)i % g->nworkers];
}

remora_status_t gb_prepare(remora_gpunet_h g)
{
    remora_status_t st;

    for (unsigned w = 0; w < g->nworkers; w++) {
        gn_bounce_t *b = &g->bounce[w];
        b->sock = -1;
        if (g->bounce_min == 0)
            continue;
        if (g->host_queues) {
            if ((b->buf = malloc(GN_BOUNCE_SPAN)) == NULL)
                return REMORA_ERR_NO_MEMORY;
        } else if ((st = rm_cuda_host_alloc(GN_BOUNCE_SPAN, (void **)&b->buf)) != REMORA_OK) {
            return st;
        }
    }
    return REMORA_OK;
}

/* gn_answer_tx, counted (remora_gpunet_stats). */
static void answer(remora_gpunet_h g, int i, uint32_t seq, int32_t res)
{
    gn_answer_tx(g, i, seq, res);
    if (res > 0) {
        gn_count(&g->bounce_sends, 1);
        gn_count(&g->bounce_bytes, (uint64_t)res);
    } else if (res == RG_RES_RING) {
        gn_count(&g->bounce_to_ring, 1);
    }
}

/* The next piece of the request into the room the peer left. 1 if one started. */
static int copy_next(remora_gpunet_h g, gn_bounce_t *b, int i)
{
    uint64_t left = b->req_base + b->req_len - b->copied;
    uint64_t off = b->copied % GN_BOUNCE_SPAN;
    uint64_t room = GN_BOUNCE_SPAN - (b->copied - b->sent);
    uint64_t n = left < GN_BOUNCE_CHUNK ? left : GN_BOUNCE_CHUNK;

    if (n > room)
        n = room;
    if (n > GN_BOUNCE_SPAN - off)
        n = GN_BOUNCE_SPAN - off; /* a copy never wraps */
    if (n == 0)
        return 0;
    void *dst = b->buf + off;
    const void *src = (const uint8_t *)(uintptr_t)b->req_src + (b->copied - b->req_base);
    if (g->host_queues) {
        memcpy(dst, src, (size_t)n);
        b->copied += n;
        b->landed += n;
        return 1;
    }
    if (gn_copy_start(g, i, &b->copy, dst, src, n, 0) != REMORA_OK) {
        b->err = REMORA_ERR_IO;
        return 0;
    }
    b->copying = 1;
    b->copied += n;
    return 1;
}

/* Hand the peer what landed. 1 if it took some, 0 if not, or a status. */
static int send_landed(gn_bounce_t *b, psock_t *p)
{
    int moved = 0;

    while (b->sent < b->landed) {
        size_t off = (size_t)(b->sent % GN_BOUNCE_SPAN);
        size_t n = (size_t)(b->landed - b->sent);
        if (n > GN_BOUNCE_SPAN - off)
            n = GN_BOUNCE_SPAN - off;
        int64_t r = gn_backend_send(p, b->buf + off, n);
        if (r < 0)
            return (int)r;
        if (r == 0)
            break;
        b->sent += (uint64_t)r;
        moved = 1;
    }
    return moved;
}

/* Answer the request if it is all in, or may not wait: canceled, stalled,
 * failed. Never while a copy out of the kernel's buffer runs. */
static void request_step(remora_gpunet_h g, gn_bounce_t *b, int i, int moved)
{
    uint64_t in = b->landed - b->req_base, now = rm_now_ns();

    if (!b->req_active || b->copying)
        return;
    if (moved)
        b->progress_ns = now;
    if (!b->req_canceled && ld_acq32(&g->sh[i].dtx_cancel) == b->req_seq)
        b->req_canceled = 1;
    if (in < b->req_len && !b->req_canceled && !b->err && now - b->progress_ns < GN_BOUNCE_STALL_NS)
        return;
    answer(g, i, b->req_seq,
           in          ? (int32_t)in
           : b->err    ? b->err
           : b->req_canceled ? REMORA_ERR_TIMED_OUT
                       : RG_RES_RING); /* stalled: the ring may still take some */
    b->req_active = 0;
}

/* A request that found the ring empty: taken (appended to what the buffer
 * holds of this socket), or back to the ring. */
static void take(remora_gpunet_h g, gn_bounce_t *b, int i, uint32_t seq)
{
    rg_sock_shm_t *s = &g->sh[i];

    /* A buffer implies the worker's copy queue (gp_prepare made it first). */
    if (b->buf == NULL || (b->sock >= 0 && b->sock != i) || b->copying || s->dtx_len == 0) {
        answer(g, i, seq, RG_RES_RING);
        return;
    }
    if (b->sock != i) {
        b->sock   = i;
        b->copied = b->landed = b->sent = 0;
        b->err    = 0;
    }
    b->req_active   = 1;
    b->req_canceled = 0;
    b->req_seq      = seq;
    b->req_src      = s->dtx_ptr;
    b->req_len      = s->dtx_len;
    b->req_base     = b->copied;
    b->progress_ns  = rm_now_ns();
}

int gb_pump(remora_gpunet_h g, int i, int ring_empty)
{
    gn_bounce_t *b = bounce_of(g, i);
    int moved = 0, r;
    uint32_t seq = ld_acq32(&g->sh[i].dtx_seq);

    if (b->sock != i && seq == g->ps[i].tx_seen)
        return 0;
    if (b->sock == i && b->copying && b->copy.ended) {
        b->copying = 0;
        moved = 1;
        if (b->copy.status == REMORA_OK)
            b->landed += b->copy.n;
        else
            b->err = REMORA_ERR_IO;
    }
    if (!b->req_active && seq != g->ps[i].tx_seen) {
        /* The ring looked at again after the request: bytes the kernel wrote
         * before posting it, after the caller looked, go first. */
        if (ring_empty && ld_acq(&g->sh[i].tx_head) == g->ps[i].tx_tail) {
            take(g, b, i, seq);
            moved = 1;
        } else if (ld_acq32(&g->sh[i].dtx_cancel) == seq) { /* it waited for the ring in vain */
            answer(g, i, seq, REMORA_ERR_TIMED_OUT);
            moved = 1;
        }
    }
    if (b->sock != i)
        return moved;
    if ((r = send_landed(b, &g->ps[i])) < 0 && b->err == 0)
        b->err = r;
    moved |= r > 0;
    if (b->req_active && !b->copying && !b->err && !b->req_canceled)
        moved |= copy_next(g, b, i);
    request_step(g, b, i, moved);
    if (b->err && !b->req_active && !b->copying) {
        r = b->err;
        b->sock = -1;
        return r; /* the socket fails */
    }
    if (!b->req_active && !b->copying && b->sent == b->landed)
        b->sock = -1; /* all out: the buffer is free for any socket */
    return moved;
}

int gb_holds(remora_gpunet_h g, int i)
{
    const gn_bounce_t *b = bounce_of(g, i);

    return b->sock == i && (b->sent < b->copied || b->req_active);
}

int gb_busy(remora_gpunet_h g, int i)
{
    return bounce_of(g, i)->sock == i || ld_acq32(&g->sh[i].dtx_seq) != g->ps[i].tx_seen;
}

void gb_fail(remora_gpunet_h g, int i)
{
    gn_bounce_t *b = bounce_of(g, i);
    uint32_t seq = ld_acq32(&g->sh[i].dtx_seq);
    int32_t err = g->sh[i].error ? g->sh[i].error : REMORA_ERR_CANCELED;

    if (b->sock == i) {
        if (b->copying && !b->copy.ended)
            return; /* answered once the copy out of the kernel's buffer ended */
        b->copying = 0;
        if (b->req_active)
            answer(g, i, b->req_seq, err);
        b->req_active = 0;
        b->sock = -1;
    } else if (seq != g->ps[i].tx_seen) {
        answer(g, i, seq, err);
    }
}

void gb_release(remora_gpunet_h g, int i)
{
    gn_bounce_t *b = bounce_of(g, i);

    if (b->sock == i && b->copying) /* it reads the kernel's buffer */
        rm_copyq_drain(g->copyq[(unsigned)i % g->nworkers]);
    gb_fail(g, i);
}
