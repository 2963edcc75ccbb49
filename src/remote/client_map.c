/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Mappings handed out by remora_client_map: a same-host region's memory
 * mapped into this process for the caller, each one of its own, so that it
 * outlives changes to the region cache (replace, disconnect) until
 * remora_client_unmap or the client's disconnect.
 */
#include <stdlib.h>

#include "mem/shm.h"
#include "remote/client.h"
#include "util/time.h"

typedef struct rm_map {
    rm_list_t     link;
    rm_shm_view_t view;
} rm_map_t;

remora_status_t remora_client_map(remora_client_h c, const char *name, const void **addr_p,
                                  size_t *length_p)
{
    rm_rregion_t *r;
    rm_map_t *m;
    remora_status_t st;
    int writable;

    if (c == NULL || addr_p == NULL || length_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_client_region_get(c, name, rm_deadline_ns(c->timeout_ms), &r)) != REMORA_OK)
        return st;
    /* A mapping of its own outlives cache changes (replace, disconnect). */
    if (r->mapped == NULL) {
        st = REMORA_ERR_UNSUPPORTED;
    } else if ((m = calloc(1, sizeof(*m))) == NULL) {
        st = REMORA_ERR_NO_MEMORY;
    } else if ((st = rm_shm_map(r->map_pid, r->map_fd, r->map_offset, r->size, 0, &m->view,
                                &writable)) != REMORA_OK) {
        free(m);
    } else {
        rm_list_push_back(&c->maps, &m->link);
        *addr_p   = m->view.ptr;
        *length_p = r->size;
    }
    rm_engine_unlock(c->ctx);
    return st;
}

remora_status_t remora_client_unmap(remora_client_h c, const void *addr)
{
    rm_list_t *pos, *tmp;
    remora_status_t st = REMORA_ERR_NOT_FOUND;

    if (c == NULL)
        return REMORA_ERR_INVALID_PARAM;
    rm_engine_lock(c->ctx);
    rm_list_for_each_safe(pos, tmp, &c->maps) {
        rm_map_t *m = rm_container_of(pos, rm_map_t, link);
        if (m->view.ptr == addr) {
            rm_list_del(&m->link);
            rm_shm_unmap(&m->view);
            free(m);
            st = REMORA_OK;
            break;
        }
    }
    rm_engine_unlock(c->ctx);
    return st;
}

void rm_client_unmap_all(remora_client_h c)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &c->maps) {
        rm_map_t *m = rm_container_of(pos, rm_map_t, link);
        rm_list_del(&m->link);
        rm_shm_unmap(&m->view);
        free(m);
    }
}
