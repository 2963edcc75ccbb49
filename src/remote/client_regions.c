/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client's region cache: what LOOKUP told us about each region (its id,
 * generation, remote key, same-host mapping, GPU IPC handle and the path
 * chosen for it), and the change events that retire entries.
 *
 * Contract: every function here runs with the engine lock held, except the
 * public calls and rm_client_region_get, which take it. An entry in use by a
 * request (users > 0) outlives its retirement on the zombie list; a change
 * is acknowledged to the server only once no request uses the old entry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/cuda.h"
#include "mem/shm.h"
#include "remote/client.h"
#include "util/fields.h"
#include "util/log.h"
#include "util/time.h"

/*
 * Acknowledge changes. The server treats an ack as cumulative ("done with
 * everything up to epoch E"), so we never ack past the oldest change whose
 * old region is still in use by an op (a detached region with users).
 */
void rm_client_send_acks(remora_client_h c)
{
    rm_list_t *pos, *tmp;
    uint64_t safe = c->epoch_seen;
    rm_hdr_t hdr = {.type = RM_MSG_EVENT_ACK};
    rm_send_params_t sp = {0};

    rm_list_for_each_safe(pos, tmp, &c->zombies) {
        rm_rregion_t *r = rm_container_of(pos, rm_rregion_t, link);
        if (r->ack_epoch && r->ack_epoch - 1 < safe)
            safe = r->ack_epoch - 1;
    }
    if (safe <= c->epoch_acked || c->disconnected)
        return;
    c->epoch_acked = safe;
    hdr.epoch      = safe;
    rm_peer_send(&c->peer, RM_AM_ID_TO_SERVER, &hdr, &sp);
}

static void region_free(remora_client_h c, rm_rregion_t *r)
{
    if (r->ipc_base) /* the region changed or went: its handle is closed with it */
        rm_cuda_ipc_close(r->ipc_dev, r->ipc_base);
    if (r->rkey)
        ucp_rkey_destroy(r->rkey);
    rm_shm_unmap(&r->map);
    free(r);
}

/*
 * Opened in the context of the device that copies (near_dev), a peer's
 * allocation is to that device's streams like its own memory: a stream of
 * GPU 0 putting into a buffer of GPU 1 opened in GPU 1's context crossed
 * contexts on every copy (a 64 B put_signal ping-pong between processes on
 * two GPUs: 40.9 us against 17.9 us, docs/stream.md). Where near_dev cannot
 * map it (no peer access to the owner) it is opened on the owner's device.
 * Either way peer access is enabled both ways between near_dev and the
 * device it was opened on, so copies go GPU to GPU, not through the host.
 */
/* The server's word for where the region lies in its allocation, checked
 * against the allocation the handle opened (as the map path checks its
 * file): an offset past it made copies go wherever the server said. */
static int ipc_range_ok(const rm_rregion_t *r)
{
    void *base;
    size_t size;

    return rm_cuda_ptr_range(r->ipc_dev, r->ipc_base, &base, &size) == REMORA_OK &&
           base == r->ipc_base && r->ipc_offset <= size && r->size <= size - r->ipc_offset;
}

remora_status_t rm_client_region_ipc(rm_rregion_t *r, int near_dev, char **p)
{
    int ndev = rm_cuda_device_count();
    remora_status_t st = REMORA_OK;

    if (near_dev >= ndev)
        near_dev = -1;
    if (r->ipc_base == NULL) {
        rm_cuda_ipc_handle_t h;
        int own = r->device >= 0 && r->device < ndev ? r->device : 0;
        memcpy(h.bytes, r->ipc, sizeof(h.bytes));
        r->ipc_dev = near_dev >= 0 ? near_dev : own;
        st = rm_cuda_ipc_open(r->ipc_dev, &h, &r->ipc_base);
        if (st != REMORA_OK && r->ipc_dev != own) {
            r->ipc_dev = own;
            st = rm_cuda_ipc_open(own, &h, &r->ipc_base);
        }
        if (st == REMORA_OK && !ipc_range_ok(r)) {
            rm_warn_peer("region %s: the server's offset lies outside its allocation", r->name);
            rm_cuda_ipc_close(r->ipc_dev, r->ipc_base);
            r->ipc_base = NULL;
            st = REMORA_ERR_PROTOCOL;
        }
    }
    if (st == REMORA_OK && near_dev >= 0 && near_dev != r->ipc_dev)
        rm_cuda_enable_peer_access(near_dev, r->ipc_dev); /* else the driver stages it */
    *p = st == REMORA_OK ? (char *)r->ipc_base + r->ipc_offset : NULL;
    return st;
}

/* Take a region out of the cache; it is freed now or by its last user. */
void rm_client_region_detach(remora_client_h c, rm_rregion_t *r, uint64_t ack_epoch)
{
    if (!r->detached) {
        rm_list_del(&r->link);
        r->detached = 1;
        if (r->users)
            rm_list_push_back(&c->zombies, &r->link);
    }
    if (ack_epoch && (r->ack_epoch == 0 || ack_epoch < r->ack_epoch))
        r->ack_epoch = ack_epoch;
    if (r->users == 0)
        region_free(c, r);
}

void rm_client_region_put(remora_client_h c, rm_rregion_t *r)
{
    if (--r->users || !r->detached)
        return;
    rm_list_del(&r->link); /* off the zombie list */
    region_free(c, r);
    rm_client_send_acks(c);
}

static rm_rregion_t *region_cached(remora_client_h c, const char *name)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &c->regions) {
        rm_rregion_t *r = rm_container_of(pos, rm_rregion_t, link);
        if (strcmp(r->name, name) == 0)
            return r;
    }
    return NULL;
}

rm_rregion_t *rm_client_region_by_id(remora_client_h c, uint32_t id)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &c->regions) {
        rm_rregion_t *r = rm_container_of(pos, rm_rregion_t, link);
        if (r->id == id)
            return r;
    }
    return NULL;
}

/* The remote key, where the server gave one; on the same host, a mapping of
 * the server's memory file, read-write only where the region is writable. */
static void region_attach(remora_client_h c, rm_rregion_t *r, const rm_region_desc_t *d)
{
    /* Only where RMA may be used: UCX's unpacking trusts the key's bytes,
     * and a server's garbage key crashed it (6 of 12 crafted keys; review). */
    if (!c->ctx->rma || d->rkey_len == 0 ||
        ucp_ep_rkey_unpack(c->peer.ep, d->rkey, &r->rkey) != UCS_OK)
        r->rkey = NULL;
    if (!c->same_host || !c->ctx->shm_ok || !(d->flags & RM_REGION_WIRE_MAPPABLE) || d->size == 0)
        return;
    r->map_pid    = d->map_pid;
    r->map_fd     = d->map_fd;
    r->map_offset = d->map_offset;
    if (rm_shm_map(d->map_pid, d->map_fd, d->map_offset, d->size,
                   (d->access & REMORA_ACCESS_WRITE) != 0, &r->map, &r->map_writable) == REMORA_OK)
        r->mapped = r->map.ptr;
    else
        rm_debug("cannot map region %s of the same-host server; using active messages", d->name);
}

/* A GPU region: one-sided UCX where a native lane and its rkey allow, CUDA
 * IPC on one host, else active messages: straight from/to the GPU through
 * UCX where the server's UCX registered the region (am: UCX moves GPU memory,
 * with cuda_copy/cuda_ipc or GPUDirect RDMA), else staged through pinned
 * buffers. Same host, remora's own IPC copy stays ahead of UCX's (1.3x on
 * the H100 host with 64 MiB chunks); across hosts UCX is chosen only with a native RDMA lane
 * (below): docs/gpu-ucx.md. */
static remora_path_t gpu_region_path(remora_client_h c, const rm_rregion_t *r)
{
    int ipc_ok = c->same_host && r->has_ipc && rm_cuda_init() == REMORA_OK;
    int ucx_ok = (r->flags & RM_REGION_WIRE_UCX) != 0;

    switch (c->forced_path) {
    case REMORA_PATH_IPC:     return ipc_ok ? REMORA_PATH_IPC : REMORA_PATH_AUTO;
    case REMORA_PATH_AM:      return ucx_ok ? REMORA_PATH_AM : REMORA_PATH_STAGING;
    case REMORA_PATH_STAGING: return REMORA_PATH_STAGING;
    case REMORA_PATH_RMA:     return r->rkey ? REMORA_PATH_RMA : REMORA_PATH_AUTO;
    case REMORA_PATH_MAP:     return REMORA_PATH_AUTO;
    default: break;
    }
    if (r->rkey && c->native_rma)
        return REMORA_PATH_RMA;
    if (ipc_ok)
        return REMORA_PATH_IPC;
    /* Over TCP remora's staging beats UCX's cuda_copy pipeline (1.72x on the
     * H100 host, docs/gpu-ucx.md); with a native RDMA lane UCX can move GPU
     * memory without the host (GPUDirect RDMA), which staging cannot. */
    return ucx_ok && c->native_rma ? REMORA_PATH_AM : REMORA_PATH_STAGING;
}

static remora_path_t region_choose_path(remora_client_h c, const rm_rregion_t *r)
{
    if (r->mem_type == REMORA_MEM_CUDA)
        return gpu_region_path(c, r);
    switch (c->forced_path) {
    case REMORA_PATH_AM:
    case REMORA_PATH_STAGING: return REMORA_PATH_AM;
    case REMORA_PATH_RMA: return r->rkey ? REMORA_PATH_RMA : REMORA_PATH_AUTO;
    case REMORA_PATH_MAP: return r->mapped ? REMORA_PATH_MAP : REMORA_PATH_AUTO;
    case REMORA_PATH_IPC: return REMORA_PATH_AUTO;
    default: break;
    }
    if (r->mapped)
        return REMORA_PATH_MAP;
    if (r->rkey && c->native_rma)
        return REMORA_PATH_RMA;
    return REMORA_PATH_AM;
}

static remora_status_t region_install(remora_client_h c, const void *body, size_t len)
{
    rm_rbuf_t rb;
    rm_region_desc_t d;
    rm_rregion_t *r, *old;

    rm_rbuf_init(&rb, body, len);
    rm_region_desc_decode(&rb, &d);
    if (rb.failed || rb.left != 0)
        return REMORA_ERR_PROTOCOL;
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    r->id          = d.region_id;
    r->size        = d.size;
    r->generation  = d.generation;
    r->access      = d.access;
    r->mem_type    = d.mem_type;
    r->flags       = d.flags;
    r->remote_addr = d.remote_addr;
    r->device      = d.device;
    r->has_ipc     = (d.flags & RM_REGION_WIRE_IPC) != 0;
    memcpy(r->ipc, d.ipc, sizeof(r->ipc));
    r->ipc_offset  = d.ipc_offset;
    snprintf(r->name, sizeof(r->name), "%s", d.name);
    region_attach(c, r, &d);
    r->path = rm_client_seal_path(c, r, region_choose_path(c, r));
    if ((old = region_cached(c, r->name)) != NULL)
        rm_client_region_detach(c, old, 0);
    rm_list_push_back(&c->regions, &r->link);
    return REMORA_OK;
}

static remora_status_t lookup_call(remora_client_h c, const char *name, uint64_t deadline,
                                   void **body_p, size_t *len_p)
{
    rm_wbuf_t w;

    if (!rm_name_valid(name))
        return REMORA_ERR_INVALID_PARAM;
    rm_wbuf_init(&w);
    rm_wbuf_name(&w, name);
    return rm_client_call_until(c, deadline, RM_MSG_LOOKUP, RM_MSG_LOOKUP_REPLY, &w, body_p, len_p);
}

/*
 * Ask the server about a region and cache the answer, unless a change event
 * arrived meanwhile (the answer may then be stale). On REMORA_OK the reply
 * body is handed over in *body_p (free()), and *cached_p says what became of
 * the cache: REMORA_OK, REMORA_INPROGRESS (stale, not cached) or an error.
 */
static remora_status_t lookup_and_cache(remora_client_h c, const char *name, uint64_t deadline,
                                        void **body_p, size_t *len_p, remora_status_t *cached_p)
{
    remora_status_t st;

    rm_engine_lock(c->ctx);
    uint64_t seq = c->event_seq;
    rm_engine_unlock(c->ctx);
    if ((st = lookup_call(c, name, deadline, body_p, len_p)) != REMORA_OK)
        return st;
    rm_engine_lock(c->ctx);
    if (c->disconnected)
        *cached_p = c->disc_status;
    else if (c->event_seq != seq)
        *cached_p = REMORA_INPROGRESS;
    else
        *cached_p = region_install(c, *body_p, *len_p);
    rm_engine_unlock(c->ctx);
    return REMORA_OK;
}

remora_status_t rm_client_region_get(remora_client_h c, const char *name, uint64_t deadline,
                                     rm_rregion_t **r_p)
{
    remora_status_t st, cached;
    rm_rregion_t *r;

    if (name == NULL)
        return REMORA_ERR_INVALID_PARAM;
    for (int attempt = 0; attempt < 8; attempt++) {
        void *body = NULL;
        size_t len = 0;

        rm_engine_lock(c->ctx);
        if ((r = region_cached(c, name)) != NULL) {
            *r_p = r;
            return REMORA_OK;
        }
        rm_engine_unlock(c->ctx);
        if ((st = lookup_and_cache(c, name, deadline, &body, &len, &cached)) != REMORA_OK)
            return st;
        free(body);
        if (cached != REMORA_OK && cached != REMORA_INPROGRESS)
            return cached;
    }
    return REMORA_ERR_BUSY; /* the region changes faster than we can look it up */
}

void rm_client_region_forget(remora_client_h c, rm_rregion_t *r)
{
    rm_client_region_detach(c, r, 0);
}
/* The fields of *info named in want, from a region descriptor off the wire. */
static void region_info_fill(remora_region_info_t *info, uint64_t want, const rm_region_desc_t *d)
{
    if (want & REMORA_REGION_INFO_FIELD_NAME)
        snprintf(info->name, sizeof(info->name), "%s", d->name);
    if (want & REMORA_REGION_INFO_FIELD_SIZE)
        info->size = d->size;
    if (want & REMORA_REGION_INFO_FIELD_MEM_TYPE)
        info->mem_type = (remora_mem_type_t)d->mem_type;
    if (want & REMORA_REGION_INFO_FIELD_ACCESS)
        info->access = d->access;
    if (want & REMORA_REGION_INFO_FIELD_GENERATION)
        info->generation = d->generation;
    if (want & REMORA_REGION_INFO_FIELD_KIND)
        info->kind = (d->flags & RM_REGION_WIRE_RING)      ? REMORA_REGION_RING
                     : (d->flags & RM_REGION_WIRE_SIGNALS) ? REMORA_REGION_SIGNALS
                                                           : REMORA_REGION_PLAIN;
    info->field_mask = want;
}

remora_status_t remora_client_list(remora_client_h c, remora_region_info_t **infos_p,
                                   size_t *count_p)
{
    void *body = NULL;
    size_t len = 0, count = 0;
    rm_region_desc_t *descs = NULL;
    remora_region_info_t *infos;
    remora_status_t st;

    if (c == NULL || infos_p == NULL || count_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_client_call(c, RM_MSG_LIST, RM_MSG_LIST_REPLY, NULL, &body, &len)) != REMORA_OK)
        return st;
    if (rm_list_decode(body, len, &descs, &count) != 0) {
        free(body);
        return REMORA_ERR_PROTOCOL;
    }
    if ((infos = calloc(count ? count : 1, sizeof(*infos))) == NULL) {
        st = REMORA_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < count; i++)
        region_info_fill(&infos[i], RM_REGION_INFO_FIELDS, &descs[i]);
    *infos_p = infos;
    *count_p = count;
out:
    free(descs);
    free(body);
    return st;
}

void remora_region_info_free(remora_region_info_t *infos) { free(infos); }

remora_status_t remora_client_lookup(remora_client_h c, const char *name,
                                     remora_region_info_t *info)
{
    void *body = NULL;
    size_t len = 0;
    rm_rbuf_t rb;
    rm_region_desc_t d;
    remora_status_t st, cached;
    uint64_t want;

    if (c == NULL || info == NULL ||
        rm_fields_wanted(info->field_mask, RM_REGION_INFO_FIELDS, RM_REGION_INFO_FIELDS,
                         &want) != REMORA_OK)
        return REMORA_ERR_INVALID_PARAM;
    /* Also refreshes the cache with what we learn. */
    if ((st = lookup_and_cache(c, name, rm_deadline_ns(c->timeout_ms), &body, &len, &cached)) != REMORA_OK)
        return st;
    rm_rbuf_init(&rb, body, len);
    rm_region_desc_decode(&rb, &d);
    free(body);
    if (rb.failed || rb.left != 0)
        return REMORA_ERR_PROTOCOL;
    region_info_fill(info, want, &d);
    return REMORA_OK;
}

remora_status_t remora_client_region_path(remora_client_h c, const char *name,
                                          remora_path_t *path_p)
{
    rm_rregion_t *r;
    remora_status_t st;

    if (c == NULL || path_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_client_region_get(c, name, rm_deadline_ns(c->timeout_ms), &r)) != REMORA_OK)
        return st;
    *path_p = r->path;
    rm_engine_unlock(c->ctx);
    return REMORA_OK;
}


void rm_client_regions_drop(remora_client_h c, int reconnected)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &c->regions)
        rm_client_region_detach(c, rm_container_of(pos, rm_rregion_t, link), 0);
    if (!reconnected)
        return;
    /* Region ids, keys, mappings and GPU IPC handles were the old
     * connection's. Entries still used by a (failed) request go when it lets
     * go; their change epochs meant something to the old connection only. */
    rm_list_for_each_safe(pos, tmp, &c->zombies)
        rm_container_of(pos, rm_rregion_t, link)->ack_epoch = 0;
    c->event_seq++; /* a lookup answered by the old connection is not cached */
    c->epoch_seen = c->epoch_acked = 0;
}
