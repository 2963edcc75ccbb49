/* SPDX-License-Identifier: BSD-3-Clause */
#include "mem/stage.h"

#include <stdlib.h>

#include "mem/cuda.h"

struct rm_stage_pool {
    size_t   buf_size;
    unsigned max_free, nfree;
    unsigned refs;     /* the owner's, plus one per buffer out */
    int      closed;   /* the owner let go */
    void   **free;
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

void *rm_stage_get(rm_stage_pool_t *p, size_t len)
{
    void *buf = NULL;

    if (len <= p->buf_size && p->nfree)
        buf = p->free[--p->nfree];
    else if (rm_cuda_host_alloc(len > p->buf_size ? len : p->buf_size, &buf) != REMORA_OK)
        return NULL;
    p->refs++;
    return buf;
}

void rm_stage_put(rm_stage_pool_t *p, void *buf, size_t len)
{
    if (len <= p->buf_size && p->nfree < p->max_free && !p->closed)
        p->free[p->nfree++] = buf;
    else
        rm_cuda_host_free(buf);
    pool_unref(p);
}
