#include "mem/mem.h"

#include <stdlib.h>

#include "engine/engine.h"
#include "util/log.h"

static remora_status_t mem_map(remora_mem_h mem, void *addr, size_t length)
{
    ucp_mem_map_params_t p = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address    = addr,
        .length     = length,
        .flags      = addr ? 0 : UCP_MEM_MAP_ALLOCATE,
    };
    ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
    ucs_status_t status = ucp_mem_map(mem->ctx->ucp, &p, &mem->memh);

    if (status != UCS_OK) {
        rm_error("ucp_mem_map of %zu bytes failed: %s", length, ucs_status_string(status));
        return rm_status_from_ucs(status);
    }
    if ((status = ucp_mem_query(mem->memh, &attr)) != UCS_OK) {
        ucp_mem_unmap(mem->ctx->ucp, mem->memh);
        return rm_status_from_ucs(status);
    }
    mem->addr      = addr ? addr : attr.address;
    mem->length    = length;
    mem->allocated = addr == NULL;
    return REMORA_OK;
}

remora_status_t remora_mem_create(remora_context_h ctx, const remora_mem_params_t *params,
                                  remora_mem_h *mem_p)
{
    remora_mem_h mem;
    ucs_status_t ustatus;
    remora_status_t status;
    void *addr = NULL;

    if (ctx == NULL || params == NULL || mem_p == NULL ||
        !(params->field_mask & REMORA_MEM_FIELD_LENGTH) || params->length == 0)
        return REMORA_ERR_INVALID_PARAM;
    if (params->field_mask & REMORA_MEM_FIELD_ADDRESS) {
        if (params->address == NULL)
            return REMORA_ERR_INVALID_PARAM;
        addr = params->address;
    }
    if ((mem = calloc(1, sizeof(*mem))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    mem->ctx  = ctx;
    mem->type = REMORA_MEM_HOST;
    atomic_init(&mem->refs, 1);

    rm_engine_lock(ctx);
    if ((status = mem_map(mem, addr, params->length)) != REMORA_OK)
        goto err_free;
    ustatus = ucp_rkey_pack(ctx->ucp, mem->memh, &mem->rkey, &mem->rkey_len);
    if (ustatus != UCS_OK) {
        rm_error("ucp_rkey_pack failed: %s", ucs_status_string(ustatus));
        status = rm_status_from_ucs(ustatus);
        goto err_unmap;
    }
    rm_engine_unlock(ctx);
    *mem_p = mem;
    return REMORA_OK;

err_unmap:
    ucp_mem_unmap(ctx->ucp, mem->memh);
err_free:
    rm_engine_unlock(ctx);
    free(mem);
    return status;
}

void rm_mem_ref(remora_mem_h mem) { atomic_fetch_add(&mem->refs, 1); }

void rm_mem_unref(remora_mem_h mem)
{
    if (atomic_fetch_sub(&mem->refs, 1) != 1)
        return;
    ucp_rkey_buffer_release(mem->rkey);
    ucp_mem_unmap(mem->ctx->ucp, mem->memh);
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
