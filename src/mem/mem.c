/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory handles.
 *
 * Design notes
 * - Host memory is registered with UCX. Memory allocated here is a memory
 *   file (shm.c) that same-host peers can map; caller memory is not.
 * - Remote keys exist only where RMA is enabled (engine.c): one over the
 *   whole registration, and for read-only regions one of a second
 *   registration without remote write access, so the NIC refuses writes.
 * - CUDA memory goes to UCX only when the loaded UCX handles CUDA memory;
 *   otherwise it has no UCX registration (memh, rkey NULL) and the remote
 *   layer moves it through CUDA IPC or host staging. Device memory always
 *   gets an IPC handle when the driver can make one.
 * - A pointer can be CUDA memory only if libcuda is in the process already,
 *   so plain host registrations never load or initialise the driver.
 */
#include "mem/mem.h"

#include <stdlib.h>

#include "engine/engine.h"
#include "mem/shm.h"
#include "util/log.h"

/* What the caller asked for, after defaults. */
typedef struct mem_request {
    void             *addr;
    size_t            length;
    remora_mem_type_t type;
    int               device;
    int               type_set, device_set;
    int               owns_cuda; /* addr was cuMemAlloc'd here */
} mem_request_t;

static int ucx_handles_cuda(remora_context_h ctx)
{
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};

    return ucp_context_query(ctx->ucp, &attr) == UCS_OK &&
           (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

/* GPU memory is registered and packed in the context that owns it: UCX
 * looks the allocation up in the current one (memory of GPU 1 in GPU 0's
 * context: "named symbol not found", and the region lost UCX's path).
 * Returns what rm_cuda_ctx_leave takes. */
static int mem_cuda_enter(remora_mem_h mem)
{
    int pushed = 0;

    if (mem->type == REMORA_MEM_CUDA)
        rm_cuda_ptr_ctx_enter(mem->addr, &pushed);
    return pushed;
}

/* Register [addr, addr+length) with UCX; prot 0 means UCX's default (all). */
static remora_status_t mem_map(remora_mem_h mem, unsigned prot, ucp_mem_h *memh_p)
{
    ucp_mem_map_params_t p = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address    = mem->addr,
        .length     = mem->length,
    };
    ucs_status_t status;

    if (mem->type == REMORA_MEM_CUDA) {
        p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        p.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    if (prot) {
        p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_PROT;
        p.prot = prot;
    }
    int pushed = mem_cuda_enter(mem);
    status = ucp_mem_map(mem->ctx->ucp, &p, memh_p);
    rm_cuda_ctx_leave(pushed);
    if (status != UCS_OK) {
        rm_error("ucp_mem_map of %zu bytes failed: %s", mem->length, ucs_status_string(status));
        return rm_status_from_ucs(status);
    }
    return REMORA_OK;
}

static remora_status_t mem_pack(remora_mem_h mem, ucp_mem_h memh, void **rkey_p, size_t *len_p)
{
    int pushed = mem_cuda_enter(mem);
    ucs_status_t status = ucp_rkey_pack(mem->ctx->ucp, memh, rkey_p, len_p);

    rm_cuda_ctx_leave(pushed);
    if (status != UCS_OK) {
        rm_error("ucp_rkey_pack failed: %s", ucs_status_string(status));
        return rm_status_from_ucs(status);
    }
    return REMORA_OK;
}

remora_status_t rm_mem_rkey(remora_mem_h mem, int writable, const void **rkey_p, size_t *len_p)
{
    remora_status_t st;

    if (mem->memh == NULL || !mem->ctx->rma)
        return REMORA_ERR_UNSUPPORTED;
    if (writable) {
        if (mem->rkey == NULL &&
            (st = mem_pack(mem, mem->memh, &mem->rkey, &mem->rkey_len)) != REMORA_OK)
            return st;
        *rkey_p = mem->rkey;
        *len_p  = mem->rkey_len;
        return REMORA_OK;
    }
    if (mem->memh_ro == NULL) {
        unsigned prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                        UCP_MEM_MAP_PROT_REMOTE_READ;
        if ((st = mem_map(mem, prot, &mem->memh_ro)) != REMORA_OK)
            return st;
        if ((st = mem_pack(mem, mem->memh_ro, &mem->rkey_ro, &mem->rkey_ro_len)) != REMORA_OK) {
            ucp_mem_unmap(mem->ctx->ucp, mem->memh_ro);
            mem->memh_ro = NULL;
            return st;
        }
    }
    *rkey_p = mem->rkey_ro;
    *len_p  = mem->rkey_ro_len;
    return REMORA_OK;
}

static remora_status_t mem_parse(const remora_mem_params_t *params, mem_request_t *req)
{
    uint64_t fm = params->field_mask;

    if (!(fm & REMORA_MEM_FIELD_LENGTH) || params->length == 0)
        return REMORA_ERR_INVALID_PARAM;
    *req = (mem_request_t){.length = params->length, .type = REMORA_MEM_HOST};
    if (fm & REMORA_MEM_FIELD_ADDRESS) {
        if (params->address == NULL)
            return REMORA_ERR_INVALID_PARAM;
        req->addr = params->address;
    }
    if (fm & REMORA_MEM_FIELD_TYPE) {
        if (params->type != REMORA_MEM_HOST && params->type != REMORA_MEM_CUDA)
            return REMORA_ERR_INVALID_PARAM;
        req->type     = params->type;
        req->type_set = 1;
    }
    if (fm & REMORA_MEM_FIELD_DEVICE) {
        if (params->device < 0)
            return REMORA_ERR_INVALID_PARAM;
        req->device     = params->device;
        req->device_set = 1;
    }
    return REMORA_OK;
}

/* Caller memory: find out what it is, and check it against what was said. */
static remora_status_t mem_classify(mem_request_t *req)
{
    rm_ptr_kind_t kind = RM_PTR_HOST;
    remora_status_t status;
    int device = -1;

    if (rm_cuda_in_process() &&
        (status = rm_cuda_ptr_kind(req->addr, &kind, &device)) != REMORA_OK)
        return status;
    if (kind == RM_PTR_MANAGED) {
        rm_error("memory at %p is CUDA managed memory, which cannot be a region "
                 "(its pages migrate): use cudaMalloc'd or host memory", req->addr);
        return REMORA_ERR_UNSUPPORTED;
    }
    if (kind != RM_PTR_DEVICE) {
        if (req->type == REMORA_MEM_CUDA) {
            rm_error("memory at %p is host memory, not CUDA device memory", req->addr);
            return REMORA_ERR_INVALID_PARAM;
        }
        req->device = -1;
        return REMORA_OK;
    }
    if ((req->type_set && req->type != REMORA_MEM_CUDA) ||
        (req->device_set && req->device != device)) {
        rm_error("memory at %p is CUDA memory of device %d, not what the params say",
                 req->addr, device);
        return REMORA_ERR_INVALID_PARAM;
    }
    req->type   = REMORA_MEM_CUDA;
    req->device = device;
    return REMORA_OK;
}

static remora_status_t mem_alloc_cuda(mem_request_t *req)
{
    if (rm_cuda_init() != REMORA_OK) {
        rm_error("CUDA memory asked for, but no usable CUDA driver was found "
                 "(see 'remora doctor')");
        return REMORA_ERR_UNSUPPORTED;
    }
    if (req->device >= rm_cuda_device_count()) {
        rm_error("no CUDA device %d (%d found)", req->device, rm_cuda_device_count());
        return REMORA_ERR_INVALID_PARAM;
    }
    if (rm_cuda_mem_alloc(req->device, req->length, &req->addr) != REMORA_OK)
        return REMORA_ERR_NO_MEMORY;
    req->owns_cuda = 1;
    return REMORA_OK;
}

/* Host memory: allocate a shareable memory file when the caller gave none,
 * then register. */
static remora_status_t mem_setup_host(remora_mem_h mem)
{
    remora_status_t status;

    if (mem->addr == NULL &&
        (status = rm_shm_create(mem->length, &mem->shm_fd, &mem->addr)) != REMORA_OK)
        return status;
    if ((status = mem_map(mem, 0, &mem->memh)) != REMORA_OK && mem->shm_fd >= 0) {
        rm_shm_destroy(mem->shm_fd, mem->addr, mem->length);
        mem->shm_fd = -1;
    }
    return status;
}

/* CUDA memory: an IPC handle if the driver gives one, a UCX registration if
 * the loaded UCX takes CUDA memory. */
static remora_status_t mem_setup_cuda(remora_mem_h mem)
{
    mem->has_ipc = rm_cuda_ipc_get(mem->addr, &mem->ipc, &mem->ipc_offset) == REMORA_OK;
    if (!mem->has_ipc)
        rm_info("no CUDA IPC handle for %p: same-host peers will use staging", mem->addr);
    if (!ucx_handles_cuda(mem->ctx)) {
        rm_debug("UCX has no CUDA support: %p is not registered with UCX", mem->addr);
        return REMORA_OK;
    }
    /* UCX that cannot register it (a transport refusing GPU memory: a NIC
     * without peer memory support) leaves the region to IPC and staging,
     * as without CUDA support in UCX: memh NULL is what the paths test. */
    rm_engine_cuda_enter(mem->ctx, mem->device);
    if (mem_map(mem, 0, &mem->memh) != REMORA_OK) {
        rm_warn("UCX could not register %zu bytes of GPU memory: the region moves through "
                "CUDA IPC or staging instead", mem->length);
        mem->memh = NULL;
    }
    return REMORA_OK;
}

remora_status_t remora_mem_create(remora_context_h ctx, const remora_mem_params_t *params,
                                  remora_mem_h *mem_p)
{
    mem_request_t req;
    remora_mem_h mem;
    remora_status_t status;

    if (ctx == NULL || params == NULL || mem_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = mem_parse(params, &req)) != REMORA_OK)
        return status;
    if (req.addr != NULL)
        status = mem_classify(&req);
    else if (req.type == REMORA_MEM_CUDA)
        status = mem_alloc_cuda(&req);
    if (status != REMORA_OK)
        return status;
    if ((mem = calloc(1, sizeof(*mem))) == NULL) {
        status = REMORA_ERR_NO_MEMORY;
        goto err_free_cuda;
    }
    mem->ctx       = ctx;
    mem->type      = req.type;
    mem->device    = req.type == REMORA_MEM_CUDA ? req.device : -1;
    mem->addr      = req.addr;
    mem->length    = req.length;
    mem->owns_cuda = req.owns_cuda;
    mem->shm_fd    = -1;
    atomic_init(&mem->refs, 1);

    rm_engine_lock(ctx);
    if (mem->type == REMORA_MEM_CUDA)
        status = mem_setup_cuda(mem);
    else
        status = mem_setup_host(mem);
    rm_engine_unlock(ctx);
    if (status != REMORA_OK)
        goto err_free_mem;
    *mem_p = mem;
    return REMORA_OK;

err_free_mem:
    free(mem);
err_free_cuda:
    if (req.owns_cuda)
        rm_cuda_mem_free(req.device, req.addr);
    return status;
}

void rm_mem_ref(remora_mem_h mem) { atomic_fetch_add(&mem->refs, 1); }

void rm_mem_unref(remora_mem_h mem)
{
    if (atomic_fetch_sub(&mem->refs, 1) != 1)
        return;
    if (mem->rkey != NULL)
        ucp_rkey_buffer_release(mem->rkey);
    if (mem->rkey_ro != NULL)
        ucp_rkey_buffer_release(mem->rkey_ro);
    if (mem->memh_ro != NULL)
        ucp_mem_unmap(mem->ctx->ucp, mem->memh_ro);
    if (mem->memh != NULL)
        ucp_mem_unmap(mem->ctx->ucp, mem->memh);
    if (mem->shm_fd >= 0)
        rm_shm_destroy(mem->shm_fd, mem->addr, mem->length);
    if (mem->owns_cuda)
        rm_cuda_mem_free(mem->device, mem->addr);
    free(mem);
}

void remora_mem_destroy(remora_mem_h mem)
{
    if (mem == NULL)
        return;
    remora_context_h ctx = mem->ctx;
    rm_engine_lock(ctx);
    rm_mem_unref(mem);
    rm_engine_unlock(ctx);
}

void *remora_mem_address(remora_mem_h mem) { return mem ? mem->addr : NULL; }
size_t remora_mem_length(remora_mem_h mem) { return mem ? mem->length : 0; }
remora_mem_type_t remora_mem_type(remora_mem_h mem) { return mem ? mem->type : REMORA_MEM_HOST; }
int remora_mem_device(remora_mem_h mem) { return mem ? mem->device : -1; }
