/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A queue of asynchronous GPU copies with completion callbacks: how staged
 * GPU data moves without a synchronous copy under the context lock.
 *
 * Design notes
 * - A device is prepared once (rm_copyq_prepare): one or more non-blocking
 *   streams of the queue's own (its lanes) and, for each, a 64-bit word of
 *   pinned host memory mapped for the device. A copy is a cuMemcpyAsync on
 *   the next lane's stream followed by a stream write of the copy's number
 *   on that lane into its word; the owner polls (rm_copyq_poll) from its
 *   progress loop, and a poll is a load of the words: no CUDA call at all
 *   while copies run. Callbacks come in start order, whatever the lane.
 * - Lanes: on one stream a copy waits for the completion write of the one
 *   before (a memory barrier, about 2.5 µs for 4 MiB copies on an H100);
 *   on two they overlap. More than one lane is for independent copies only:
 *   two copies in flight into the same bytes may land in either order.
 * - Why no events, and why set-up is separate: creating CUDA objects or
 *   pinning memory takes a lock inside the driver that a thread blocked on
 *   a full stream (stream-ordered operations, src/gpu/stream.c) holds; if
 *   that stream waits for this very transfer, a copy queue creating an
 *   event on the transfer's path deadlocks (seen: cuEventCreate on a
 *   server worker, 'peer silent' after 2 s). So only enqueueing happens on
 *   the data path, and rm_copyq_start refuses (REMORA_ERR_UNSUPPORTED) a
 *   device that was not prepared: the caller copies synchronously then.
 * - A copy that ends in a CUDA error never writes its word: a poll that
 *   finds copies older than RM_COPYQ_CHECK_NS queries the stream and fails
 *   them with its error instead of waiting forever. A stream whose word
 *   cannot be written and that does not synchronize marks the device
 *   broken: its copies fail and new ones are refused. Copies end with an
 *   error only after every lane of their device was waited for, so no copy
 *   still writes into a buffer whose callback ran.
 * - Not thread-safe: the owner's lock (the engine's context lock) guards
 *   every call. Callbacks run with it held and may start new copies.
 * - A submit thread (params.submit_thread) takes the CUDA calls off the
 *   owner: a start then only queues the copy, and the thread enqueues it
 *   (cuMemcpyAsync costs 4-10 µs of CPU, more under MPS, and an owner that
 *   serves a network loop cannot spend that per message). The thread writes
 *   one completion word per lane and batch it finds, so hold/release change
 *   nothing there; a copy the driver refuses ends alone with its error, the
 *   copies around it go on.
 * - The caller owns the rm_copy_t (embedded in its own object) and must keep
 *   it, and both buffers, alive until the callback has run. Owners that go
 *   away drain first (rm_copyq_drain waits for the GPU and runs every
 *   callback), so no callback outlives what it refers to.
 * - Host memory must be pinned for a copy to be asynchronous.
 */
#ifndef RM_MEM_COPYQ_H
#define RM_MEM_COPYQ_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

#include "util/list.h"

typedef struct rm_copy rm_copy_t;
/* status: REMORA_OK, or the CUDA error the copy ended with. */
typedef void (*rm_copy_cb_t)(rm_copy_t *copy, remora_status_t status);

struct rm_copy {
    rm_list_t       link;   /* its device's, while in flight */
    uint64_t        seq;    /* start order on its device */
    uint64_t        lane_seq; /* the number its lane's word reaches when it ended */
    unsigned        lane;
    uint64_t        start_ns;
    remora_status_t status; /* set when it ended, for the callback; the submit
                             * thread may set a refusal before */
    rm_copy_cb_t    done;
    int             d2d;    /* the caller's, before the start: both sides are
                             * device-addressable (rm_cuda_copy_async_d2d) */
};

typedef struct rm_copyq rm_copyq_t;

#define RM_COPYQ_LANES_MAX 4

typedef struct rm_copyq_params {
    unsigned lanes;         /* streams per device, 1..RM_COPYQ_LANES_MAX (0: 1) */
    int      submit_thread; /* the CUDA calls on a thread of the queue's */
    uint64_t spin_ns;       /* that thread spins this long after its last copy, then sleeps */
} rm_copyq_params_t;

/* One lane, no thread. */
rm_copyq_t *rm_copyq_create(void);
/* NULL when out of memory, a thread cannot start, or params are invalid. */
rm_copyq_t *rm_copyq_create_with(const rm_copyq_params_t *params);
/* Drains, then frees the streams and words. */
void rm_copyq_destroy(rm_copyq_t *q);
/* Make device's streams and words (idempotent). Call where no stream can be
 * waiting on this queue's copies: at set-up, not on a transfer's path. */
remora_status_t rm_copyq_prepare(rm_copyq_t *q, int device);
/*
 * Start dst <- src (length bytes, either side GPU memory) on the device of
 * the copy (dst's, else src's). On REMORA_OK, done(copy, status) runs from a
 * later rm_copyq_poll or rm_copyq_drain, never from here; on an error
 * (REMORA_ERR_UNSUPPORTED: that device was not prepared) nothing was started
 * and done never runs.
 */
remora_status_t rm_copyq_start(rm_copyq_t *q, rm_copy_t *copy, void *dst, const void *src,
                               size_t length, rm_copy_cb_t done);
/* The same on a device the caller names: one whose context holds a mapping
 * the copy uses (a peer's buffer opened through CUDA IPC). */
remora_status_t rm_copyq_start_on(rm_copyq_t *q, int device, rm_copy_t *copy, void *dst,
                                  const void *src, size_t length, rm_copy_cb_t done);
/* Run the callbacks of the copies that finished; returns how many. */
unsigned rm_copyq_poll(rm_copyq_t *q);
/* Wait for every copy in flight and run its callback (also those that
 * callbacks start meanwhile). */
void rm_copyq_drain(rm_copyq_t *q);
/* Copies in flight. NULL-safe (0). */
unsigned rm_copyq_busy(const rm_copyq_t *q);
/* Copies started between hold and release share one completion write (the
 * release's): several started in a row cost one stream operation fewer each.
 * Their callbacks come after the release, all together. */
void rm_copyq_hold(rm_copyq_t *q);
void rm_copyq_release(rm_copyq_t *q);

#endif
