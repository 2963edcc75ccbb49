/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A server's region table: names, ids, generations, the change epoch and
 * access rights, shared by the server's connections on every worker.
 *
 * Design notes
 * - One table per server, under its own mutex (reg->lock). The server on
 *   the first worker and the servers of its other workers all point to it
 *   (reference counted); nothing is mirrored, so a replace or removal is
 *   seen the same way through every worker from the moment it is made.
 * - Lock order: a worker's context lock, then reg->lock. Whoever changes
 *   the table holds the first worker's context lock and reg->lock; so code
 *   on the first worker may read rm_region_t fields with only its context
 *   lock held (rings, signals), and code on any other worker reads them
 *   with reg->lock held, or through rm_registry_view().
 * - A view holds a reference to the region's memory: a replace never frees
 *   memory under a transfer that looked the region up before it.
 * - Generations only grow: a replace bumps its region's, a new region starts
 *   at 1 and never reuses an id; the epoch counts changes, starting at 1.
 */
#ifndef RM_REMOTE_REGISTRY_H
#define RM_REMOTE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <remora/remora.h>

#include "util/list.h"

typedef struct rm_region {
    rm_list_t     link;
    uint32_t      id;
    char          name[REMORA_NAME_MAX + 1];
    remora_mem_h  mem;
    size_t        offset, length;
    unsigned      flags;
    uint64_t      generation;
    remora_ring_h ring;      /* a ring's memory; NULL for plain regions */
    int           ring_data; /* a GPU ring's elements: it comes and goes with its ring */
    struct remora_signals *signals; /* a signal array (server_signals.c); NULL otherwise */
} rm_region_t;

typedef struct rm_registry {
    pthread_mutex_t  lock;
    atomic_int       refs;
    rm_list_t        regions; /* rm_region_t */
    uint32_t         next_id;
    _Atomic uint64_t epoch;   /* changes so far, from 1 */
} rm_registry_t;

/* What a READ or WRITE needs of a region, taken under the lock. */
typedef struct rm_region_view {
    remora_mem_h mem;        /* referenced: rm_mem_unref when done */
    size_t       offset, length;
    unsigned     flags;
    uint64_t     generation;
    int          signals;    /* a signal array: changed by signal operations only */
} rm_region_view_t;

rm_registry_t *rm_registry_create(void);
void           rm_registry_ref(rm_registry_t *reg);
/* The last reference frees the table (its regions must be gone). */
void           rm_registry_unref(rm_registry_t *reg);
void           rm_registry_lock(rm_registry_t *reg);
void           rm_registry_unlock(rm_registry_t *reg);
uint64_t       rm_registry_epoch(rm_registry_t *reg);

/* Lookups (reg->lock held, or the first worker's context lock, above). */
rm_region_t *rm_registry_by_name(rm_registry_t *reg, const char *name);
rm_region_t *rm_registry_by_id(rm_registry_t *reg, uint32_t id);

/* The region id names, checked for [offset, offset+length) and (write) the
 * right to write; on REMORA_OK *v holds a reference to its memory. Takes
 * and releases reg->lock. */
remora_status_t rm_registry_view(rm_registry_t *reg, uint32_t id, uint64_t offset,
                                 uint64_t length, int write, rm_region_view_t *v);

/* Table changes: reg->lock held (and the first worker's context lock). */
/* Insert r (its name free): gives it an id and generation 1. */
void rm_registry_insert(rm_registry_t *reg, rm_region_t *r);
/* A new change: the epoch it is known by. */
uint64_t rm_registry_bump(rm_registry_t *reg);

#endif
