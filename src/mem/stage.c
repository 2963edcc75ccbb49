/* SPDX-License-Identifier: BSD-3-Clause */
#include "mem/stage.h"

#include <stdint.h>
#include <stdlib.h>

#include "mem/cuda.h"

/* Small requests (eager payloads, signals' data, a stream's small puts) come
 * in bursts as deep as a client's window, each with its buffer out while its
 * asynchronous copy runs. A pinned allocation per request would cost
 * milliseconds each, and freeing pinned memory synchronizes the device,
 * which can wait on a stream that waits for this very transfer. So they are
 * carved from slabs, allocated once and kept for the pool's life. */
#define RM_STAGE_SMALL      (64u << 10)
#define RM_STAGE_SLAB       (1u << 20)
#define RM_STAGE_SLABS      16u /* 16 MiB of small buffers at most */
#define RM_STAGE_PER_SLAB   (RM_STAGE_SLAB / RM_STAGE_SMALL)
#define RM_STAGE_SLABS_EARLY 4u /* made by rm_stage_pool_prepare: a window of 64 */

struct rm_stage_pool {
    size_t   buf_size;
    unsigned max_free, nfree;
    unsigned refs;     /* the owner's, plus one per buffer out */
    int      closed;   /* the owner let go */
    void   **free;
    void    *slab[RM_STAGE_SLABS];
    unsigned nslabs, nsmall;
    void    *small[RM_STAGE_SLABS * RM_STAGE_PER_SLAB]; /* free pieces */
};

rm_stage_pool_t *rm_stage_pool_create(size_t buf_size, unsigned max_free)
{
    rm_stage_pool_t *p = calloc(1, sizeof(*p));

    if (p == NULL || (p->free = calloc(max_free ? max_free : 1, sizeof(void *))) == NULL) {
        free(p);
        return NULL;
    }
    p->buf_size = buf_size;
    p->max_free = max_free;
    p->refs     = 1;
    return p;
}

static void pool_unref(rm_stage_pool_t *p)
{
    if (--p->refs)
        return;
    for (unsigned i = 0; i < p->nfree; i++)
        rm_cuda_host_free(p->free[i]);
    for (unsigned i = 0; i < p->nslabs; i++)
        rm_cuda_host_free(p->slab[i]);
    free(p->free);
    free(p);
}

void rm_stage_pool_release(rm_stage_pool_t *p)
{
    if (p) {
        p->closed = 1;
        pool_unref(p);
    }
}

static int in_slab(const rm_stage_pool_t *p, const void *buf)
{
    for (unsigned i = 0; i < p->nslabs; i++)
        if ((uintptr_t)buf - (uintptr_t)p->slab[i] < RM_STAGE_SLAB)
            return 1;
    return 0;
}

/* Requests that take a small piece (a pool of small buffers has none). */
static int is_small(const rm_stage_pool_t *p, size_t len)
{
    return len <= RM_STAGE_SMALL && RM_STAGE_SMALL < p->buf_size;
}

/* One more slab, its pieces free; 0, or -1 when it cannot be pinned. */
static int add_slab(rm_stage_pool_t *p)
{
    void *slab;

    if (p->nslabs == RM_STAGE_SLABS || rm_cuda_host_alloc(RM_STAGE_SLAB, &slab) != REMORA_OK)
        return -1;
    p->slab[p->nslabs++] = slab;
    for (unsigned i = RM_STAGE_PER_SLAB; i-- > 0;)
        p->small[p->nsmall++] = (char *)slab + (size_t)i * RM_STAGE_SMALL;
    return 0;
}

/* A small piece: from a slab, a new slab, or (all slabs made) a buffer of its own. */
static void *small_get(rm_stage_pool_t *p)
{
    void *buf;

    if (p->nsmall || add_slab(p) == 0)
        return p->small[--p->nsmall];
    return rm_cuda_host_alloc(RM_STAGE_SMALL, &buf) == REMORA_OK ? buf : NULL;
}

void rm_stage_pool_prepare(rm_stage_pool_t *p)
{
    while (p->nslabs < RM_STAGE_SLABS_EARLY && add_slab(p) == 0)
        ;
}

void *rm_stage_get(rm_stage_pool_t *p, size_t len)
{
    void *buf = NULL;

    if (is_small(p, len)) {
        if ((buf = small_get(p)) == NULL)
            return NULL;
    } else if (len <= p->buf_size && p->nfree) {
        buf = p->free[--p->nfree];
    } else if (rm_cuda_host_alloc(len > p->buf_size ? len : p->buf_size, &buf) != REMORA_OK) {
        return NULL;
    }
    p->refs++;
    return buf;
}

void rm_stage_put(rm_stage_pool_t *p, void *buf, size_t len)
{
    if (is_small(p, len)) {
        if (in_slab(p, buf))
            p->small[p->nsmall++] = buf;
        else
            rm_cuda_host_free(buf);
    } else if (len <= p->buf_size && p->nfree < p->max_free && !p->closed) {
        p->free[p->nfree++] = buf;
    } else {
        rm_cuda_host_free(buf);
    }
    pool_unref(p);
}
