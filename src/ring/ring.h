/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rings, library side: the local ring object and what the server and the
 * subscriber need from it. The format itself is in ring_format.h.
 *
 * Design notes
 * - The producer keeps its own copy of head; the header is written for
 *   readers only, so a reader (local or remote) can never disturb the producer.
 * - The ring knows nothing of servers. Whoever exposes it observes it: a
 *   commit raises the ring's engine signal (sig, whose fn the observer set),
 *   and destroying the ring calls on_destroy first. A commit raises the
 *   signal only while some subscriber waits (armed > 0), so a ring nobody
 *   waits on costs the producer one atomic load per element; raising it
 *   never blocks.
 */
#ifndef RM_RING_RING_H
#define RM_RING_RING_H

#include <pthread.h>
#include <stdatomic.h>

#include <remora/remora.h>

#include "engine/engine.h"
#include "ring/ring_format.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rings store their little-endian header with native atomics: little-endian hosts only"
#endif

struct remora_ring {
    remora_context_h  ctx;
    remora_mem_h      mem;       /* header and slots (stamps only, for a GPU ring) */
    uint8_t          *base;
    remora_mem_h      data_mem;  /* a GPU ring's elements; NULL otherwise */
    uint8_t          *data;
    rm_ring_shape_t   shape;     /* elem_size, capacity, stride are fixed */
    uint64_t          head;      /* producer's copy */
    int               reserved;  /* a reserve() awaits its commit */
    _Atomic uint64_t *hdr_head, *hdr_claimed;

    /* Exposure (guarded by the server's context lock, except armed). */
    remora_server_h   server;
    char              name[REMORA_NAME_MAX + 1];
    atomic_int        armed;     /* subscribers waiting for the next commit, all workers */
    rm_signal_t       sig;       /* raised by a commit while armed > 0 */
    /* The observer's: remora_ring_destroy calls it first (the server exposing
     * it takes it out; any thread, without locks held). Set at exposure. */
    void            (*on_destroy)(remora_ring_h ring);
    /* The producer's rate as observers see it (rm_ring_rate): pushes on
     * every worker of a server update it, so it has a lock of its own. */
    pthread_mutex_t   rate_lock;
    uint64_t          rate_ns, rate_head;
    double            rate_eps;  /* elements per second, moving average */
};

static inline _Atomic uint64_t *rm_ring_stamp(remora_ring_h r, uint64_t seq)
{
    return (_Atomic uint64_t *)(void *)(r->base + rm_ring_slot_offset(&r->shape, seq));
}

/* A commit's waiters (armed of them, on every worker) want an answer: sig
 * (on ctx) runs now on this thread if they are few and ctx's lock is free,
 * else on ctx's progress thread. Never waits. Any thread. */
void rm_ring_notify(remora_context_h ctx, rm_signal_t *sig, int armed);

/* The producer's rate (elements/s, a moving average over 2 ms samples),
 * given the head seen now; 0 until measured. Any thread. */
double rm_ring_rate(remora_ring_h r, uint64_t head, uint64_t now_ns);

/* The header's view now: head, claimed and first as readers see them. */
void rm_ring_snapshot(remora_ring_h r, rm_ring_shape_t *shape);

/*
 * Copy the elements [from, to) (element bytes only, back to back) into out,
 * skipping any the producer overwrote before or while they were copied.
 * Returns the first sequence copied; elements [*first, to) are in out.
 */
uint64_t rm_ring_copy_range(remora_ring_h r, uint64_t from, uint64_t to, uint8_t *out);

/*
 * Build a local ring from an image of a ring's memory (a clone, a file).
 * Elements below min_valid or at/above max_valid, or whose stamp does not
 * match, are left out.
 * live: the image was copied while its producer ran (rm_ring_hdr_parse_live).
 */
remora_status_t rm_ring_from_image(remora_context_h ctx, const void *image, size_t len,
                                   uint64_t min_valid, uint64_t max_valid, int live,
                                   remora_ring_h *ring_p);


#endif
