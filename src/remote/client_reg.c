/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The caller's GPU buffers registered with a CUDA-enabled UCX (ucp_mem_map),
 * for the am path, where UCX moves them itself. Without a handle UCX
 * registers the buffer for every rendezvous (an IPC handle made and packed
 * each time); with one, a 256 MiB same-host read through cuda_ipc went from
 * 0.73x to 0.79x of a device copy, and could go in one rendezvous instead of
 * four (docs/gpu-ucx.md).
 *
 * An entry covers a whole allocation, or for an allocation larger than
 * RM_REG_WHOLE_MAX (a caching allocator's segment, say: registering it all
 * could pin gigabytes for an RDMA NIC) the range a request asked for. It is
 * known by the driver's buffer ID, so an allocation freed and another made
 * at the same address is registered anew, and it serves a request only if
 * it covers the request's whole range. Requests hold the entries they use
 * (users); eviction, least recently used first, takes only entries no
 * request holds, and when all are held a request simply goes without. An
 * allocation UCX refused (memory from another process, a stream-ordered
 * pool) is remembered and not tried again.
 *
 * Lock held (the context's) for get and put; free runs when the client is
 * freed, when no request holds an entry (the UCX context is thread-safe).
 */
#include "mem/cuda.h"
#include "remote/client.h"

#define RM_REG_WHOLE_MAX (1ull << 30)

static void reg_drop(remora_client_h c, rm_gpu_reg_t *g)
{
    if (g->memh)
        ucp_mem_unmap(c->ctx->ucp, g->memh);
    *g = (rm_gpu_reg_t){0};
}

static int covers(const rm_gpu_reg_t *g, const char *p, size_t len)
{
    return p >= (const char *)g->base && len <= g->size &&
           (size_t)(p - (const char *)g->base) <= g->size - len;
}

static int refused(const remora_client_h c, uint64_t id)
{
    for (unsigned i = 0; i < RM_CLIENT_REG_REFUSED; i++)
        if (c->gpu_reg_refused[i] == id)
            return 1;
    return 0;
}

/* The entry that serves [p, p + len) of allocation id, or the one to
 * (re)use: free, else the least recently used that no request holds; NULL
 * when every entry is held. */
static rm_gpu_reg_t *reg_slot(remora_client_h c, uint64_t id, const char *p, size_t len,
                              int *hit)
{
    rm_gpu_reg_t *pick = NULL;

    *hit = 0;
    for (unsigned i = 0; i < RM_CLIENT_REGS; i++) {
        rm_gpu_reg_t *g = &c->gpu_regs[i];
        if (g->memh && g->id == id && covers(g, p, len)) {
            *hit = 1;
            return g;
        }
        if (g->users == 0 && (pick == NULL || g->used < pick->used))
            pick = g;
    }
    return pick;
}

rm_gpu_reg_t *rm_client_reg_get(remora_client_h c, const void *buf, size_t len)
{
    uint64_t id;
    void *base;
    size_t size;
    int hit;

    if (len == 0 || rm_cuda_ptr_alloc(buf, &id, &base, &size) != REMORA_OK || refused(c, id))
        return NULL;
    if (size > RM_REG_WHOLE_MAX) { /* the request's range only */
        base = (void *)buf;
        size = len;
    }
    if (!covers(&(rm_gpu_reg_t){.base = base, .size = size}, buf, len))
        return NULL; /* past its allocation's end: UCX registers it per transfer */
    rm_gpu_reg_t *g = reg_slot(c, id, buf, len, &hit);
    if (g == NULL)
        return NULL;
    if (!hit) {
        reg_drop(c, g);
        ucp_mem_map_params_t mp = {
            .field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                           UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
            .address     = base,
            .length      = size,
            .memory_type = UCS_MEMORY_TYPE_CUDA,
        };
        int pushed = 0;
        rm_cuda_ptr_ctx_enter(base, &pushed); /* UCX finds the allocation in its context */
        ucs_status_t st = ucp_mem_map(c->ctx->ucp, &mp, &g->memh);
        rm_cuda_ctx_leave(pushed);
        if (st != UCS_OK) {
            g->memh = NULL;
            c->gpu_reg_refused[c->gpu_reg_nrefused++ % RM_CLIENT_REG_REFUSED] = id;
            return NULL; /* UCX registers it per transfer, as without this */
        }
        g->id   = id;
        g->base = base;
        g->size = size;
    }
    g->users++;
    g->used = ++c->gpu_reg_clock;
    return g;
}

void rm_client_reg_put(rm_gpu_reg_t *g)
{
    if (g != NULL)
        g->users--;
}

void rm_client_regs_free(remora_client_h c)
{
    for (unsigned i = 0; i < RM_CLIENT_REGS; i++)
        reg_drop(c, &c->gpu_regs[i]);
}
