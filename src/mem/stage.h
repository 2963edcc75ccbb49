/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Pinned host staging buffers, for GPU memory the loaded UCX cannot reach:
 * device bytes are copied into one, sent from it (or received into it and
 * copied to the device).
 *
 * Design notes
 * - Pinning memory costs milliseconds, so buffers of the pool's size are
 *   kept for reuse (up to max_free of them). Larger requests get a buffer of
 *   their own, unpinned again when returned.
 * - The pool is reference counted: every buffer out holds a reference, so a
 *   send that completes after its owner (server, client) is gone still has a
 *   pool to return its buffer to. Guarded by the context lock.
 */
#ifndef RM_MEM_STAGE_H
#define RM_MEM_STAGE_H

#include <stddef.h>

#include <remora/remora.h>

typedef struct rm_stage_pool rm_stage_pool_t;

rm_stage_pool_t *rm_stage_pool_create(size_t buf_size, unsigned max_free);
/* The owner lets go; the pool is freed once every buffer is back. */
void rm_stage_pool_release(rm_stage_pool_t *pool);
/* Pin the small buffers a burst of small transfers needs now, not on a
 * transfer's path (copyq.h says why). Lock held. */
void rm_stage_pool_prepare(rm_stage_pool_t *pool);
/* A pinned buffer of at least len bytes, or NULL (no CUDA, no memory). */
void *rm_stage_get(rm_stage_pool_t *pool, size_t len);
void  rm_stage_put(rm_stage_pool_t *pool, void *buf, size_t len);

#endif
