/* SPDX-License-Identifier: BSD-3-Clause */
/* A server's region table (registry.h has the design notes). */
#include <stdlib.h>
#include <string.h>

#include "mem/mem.h"
#include "remote/registry.h"

rm_registry_t *rm_registry_create(void)
{
    rm_registry_t *reg = calloc(1, sizeof(*reg));

    if (reg == NULL)
        return NULL;
    if (pthread_mutex_init(&reg->lock, NULL) != 0) {
        free(reg);
        return NULL;
    }
    atomic_init(&reg->refs, 1);
    atomic_init(&reg->epoch, 1);
    rm_list_init(&reg->regions);
    reg->next_id = 1;
    return reg;
}

void rm_registry_ref(rm_registry_t *reg) { atomic_fetch_add(&reg->refs, 1); }

void rm_registry_unref(rm_registry_t *reg)
{
    if (reg == NULL || atomic_fetch_sub(&reg->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

void rm_registry_lock(rm_registry_t *reg) { pthread_mutex_lock(&reg->lock); }
void rm_registry_unlock(rm_registry_t *reg) { pthread_mutex_unlock(&reg->lock); }
uint64_t rm_registry_epoch(rm_registry_t *reg) { return atomic_load(&reg->epoch); }

rm_region_t *rm_registry_by_name(rm_registry_t *reg, const char *name)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &reg->regions) {
        rm_region_t *r = rm_container_of(pos, rm_region_t, link);
        if (strcmp(r->name, name) == 0)
            return r;
    }
    return NULL;
}

rm_region_t *rm_registry_by_id(rm_registry_t *reg, uint32_t id)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &reg->regions) {
        rm_region_t *r = rm_container_of(pos, rm_region_t, link);
        if (r->id == id)
            return r;
    }
    return NULL;
}

remora_status_t rm_registry_view(rm_registry_t *reg, uint32_t id, uint64_t offset,
                                 uint64_t length, int write, rm_region_view_t *v)
{
    remora_status_t st = REMORA_OK;
    rm_region_t *r;

    rm_registry_lock(reg);
    if ((r = rm_registry_by_id(reg, id)) == NULL)
        st = REMORA_ERR_NOT_FOUND;
    else if (offset > r->length || length > r->length - offset)
        st = REMORA_ERR_OUT_OF_RANGE;
    else if (write && (!(r->flags & REMORA_REGION_WRITABLE) || r->signals))
        st = REMORA_ERR_READ_ONLY;
    if (st == REMORA_OK) {
        rm_mem_ref(r->mem);
        v->mem        = r->mem;
        v->offset     = r->offset;
        v->length     = r->length;
        v->flags      = r->flags;
        v->generation = r->generation;
        v->signals    = r->signals != NULL;
    }
    rm_registry_unlock(reg);
    return st;
}

void rm_registry_insert(rm_registry_t *reg, rm_region_t *r)
{
    r->id         = reg->next_id++;
    r->generation = 1;
    rm_list_push_back(&reg->regions, &r->link);
}

uint64_t rm_registry_bump(rm_registry_t *reg)
{
    return atomic_fetch_add(&reg->epoch, 1) + 1;
}
