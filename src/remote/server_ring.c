/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rings on the server: subscribers' waits and the notifications that answer
 * them.
 *
 * Design notes
 * - A subscriber that has caught up sends RING_WAIT: "tell me once the ring
 *   holds element `want`". The wait is answered at once if it already does,
 *   else when the producer commits it. Each wait is answered exactly once
 *   (RING_NOTIFY), so notifications coalesce by construction: however fast
 *   the producer, a subscriber gets one message per wait it sends.
 * - A RING_NOTIFY carries the new head, and, when the subscriber allows
 *   inline bytes, the elements themselves (copied here with the seqlock
 *   check, oldest first, as many as fit). Larger elements are fetched by the
 *   subscriber in batches with one-sided reads.
 * - The producer never waits for any of this: a commit with waiters raises
 *   the ring's engine signal and returns; the progress thread answers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/mem.h"
#include "remote/server.h"
#include "util/log.h"

#define RM_RING_WAITS_MAX   1024u      /* per connection */
#define RM_RING_INLINE_MAX  (32u << 10)

typedef struct rm_ring_wait {
    rm_list_t      link;   /* server->waits */
    rm_conn_t     *conn;
    rm_region_t   *region;
    uint64_t       req_id;
    uint64_t       want;
    uint64_t       inline_max;
    uint8_t        mode;
} rm_ring_wait_t;

static void wait_free(rm_ring_wait_t *w)
{
    rm_list_del(&w->link);
    atomic_fetch_sub(&w->region->ring->armed, 1);
    w->conn->nwaits--;
    free(w);
}

/* Answer a wait whose element is there: the head, and what fits inline. */
static void notify(rm_conn_t *c, rm_region_t *r, uint64_t req_id, uint64_t want,
                   uint8_t mode, uint64_t inline_max, const rm_ring_shape_t *now)
{
    remora_ring_h ring = r->ring;
    uint64_t from = mode == RM_RING_LATEST ? now->head - 1 : want;
    uint64_t oldest = rm_ring_oldest_seq(now), n = 0, elem = now->elem_size;
    rm_hdr_t h = {.type = RM_MSG_RING_NOTIFY, .req_id = req_id, .region_id = r->id,
                  .size = now->head};
    rm_send_params_t sp = {0};
    uint8_t *buf = NULL;

    if (from < oldest)
        from = oldest;
    if (elem <= inline_max)
        n = inline_max / elem;
    if (n > now->head - from)
        n = now->head - from;
    if (n && (buf = malloc(n * elem)) != NULL) {
        uint64_t first = rm_ring_copy_range(ring, from, from + n, buf);
        h.offset = first;
        h.length = from + n - first;
        sp.body = sp.body_free = buf;
        sp.body_len = h.length * elem;
    } else {
        h.offset = from;
    }
    rm_conn_send(c, &h, &sp);
}

/* Answer the waits on this ring that its head now satisfies. */
static void ring_fire(remora_server_h s, remora_ring_h ring)
{
    rm_list_t *pos, *tmp;
    rm_ring_shape_t now;

    /* Pairs with the producer's store of head then load of armed. */
    atomic_thread_fence(memory_order_seq_cst);
    rm_ring_snapshot(ring, &now);
    rm_list_for_each_safe(pos, tmp, &s->waits) {
        rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
        if (w->region->ring != ring || now.head <= w->want)
            continue;
        notify(w->conn, w->region, w->req_id, w->want, w->mode, w->inline_max, &now);
        wait_free(w);
    }
}

static void ring_signaled(rm_signal_t *sig)
{
    remora_ring_h ring = rm_container_of(sig, struct remora_ring, sig);
    if (ring->server)
        ring_fire(ring->server, ring);
}

/* A connection at its limit of waits: answer (CANCELED) and drop its oldest. */
static void evict_oldest_wait(rm_conn_t *c)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &c->server->waits) {
        rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
        if (w->conn != c)
            continue;
        rm_conn_reply(c, RM_MSG_RING_NOTIFY, w->req_id, REMORA_ERR_CANCELED, NULL);
        wait_free(w);
        return;
    }
}

void rm_server_ring_wait(rm_conn_t *c, const rm_hdr_t *hdr)
{
    rm_region_t *r = rm_server_region_by_id(c->server, hdr->region_id);
    uint64_t inline_max = hdr->length < RM_RING_INLINE_MAX ? hdr->length : RM_RING_INLINE_MAX;
    rm_ring_shape_t now;
    rm_ring_wait_t *w;

    if (r == NULL || r->ring == NULL) {
        rm_conn_reply(c, RM_MSG_RING_NOTIFY, hdr->req_id,
                      r ? REMORA_ERR_INVALID_PARAM : REMORA_ERR_NOT_FOUND, NULL);
        return;
    }
    rm_ring_snapshot(r->ring, &now);
    if (now.head > hdr->offset) {
        notify(c, r, hdr->req_id, hdr->offset, hdr->kind, inline_max, &now);
        return;
    }
    if (c->nwaits >= RM_RING_WAITS_MAX)
        evict_oldest_wait(c); /* most likely a subscription long gone */
    if ((w = calloc(1, sizeof(*w))) == NULL) {
        rm_conn_reply(c, RM_MSG_RING_NOTIFY, hdr->req_id, REMORA_ERR_NO_MEMORY, NULL);
        return;
    }
    w->conn       = c;
    w->region     = r;
    w->req_id     = hdr->req_id;
    w->want       = hdr->offset;
    w->inline_max = inline_max;
    w->mode       = hdr->kind;
    c->nwaits++;
    rm_list_push_back(&c->server->waits, &w->link);
    /* Arm, then look again: a commit between the first look and the arm
     * saw armed == 0 and raised no signal. */
    atomic_fetch_add(&r->ring->armed, 1);
    ring_fire(c->server, r->ring);
}

void rm_server_ring_conn_gone(rm_conn_t *c)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &c->server->waits) {
        rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
        if (w->conn == c)
            wait_free(w);
    }
}

void rm_server_ring_region_gone(remora_server_h s, rm_region_t *r)
{
    rm_list_t *pos, *tmp;

    if (r->ring == NULL)
        return;
    rm_list_for_each_safe(pos, tmp, &s->waits) {
        rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
        if (w->region != r)
            continue;
        rm_conn_reply(w->conn, RM_MSG_RING_NOTIFY, w->req_id, REMORA_ERR_NOT_FOUND, NULL);
        wait_free(w);
    }
    remora_ring_h ring = r->ring;
    rm_engine_remove_signal(s->ctx, &ring->sig);
    ring->server = NULL;
    r->ring = NULL;
    if (ring->data_mem && !s->destroying) { /* its elements go with it */
        char data_name[REMORA_NAME_MAX + sizeof(RM_RING_DATA_SUFFIX)];
        snprintf(data_name, sizeof(data_name), "%s%s", ring->name, RM_RING_DATA_SUFFIX);
        rm_server_region_drop(s, data_name);
    }
}

remora_status_t remora_server_expose_ring(remora_server_h s, const char *name,
                                          remora_ring_h ring)
{
    remora_status_t st;

    char data_name[REMORA_NAME_MAX + sizeof(RM_RING_DATA_SUFFIX)];

    if (s == NULL || ring == NULL || !rm_name_valid(name) || ring->ctx != s->ctx)
        return REMORA_ERR_INVALID_PARAM;
    snprintf(data_name, sizeof(data_name), "%s%s", name, RM_RING_DATA_SUFFIX);
    if (ring->data_mem && strlen(data_name) > REMORA_NAME_MAX)
        return REMORA_ERR_INVALID_PARAM; /* no room for the data region's name */
    rm_engine_lock(s->ctx);
    if (ring->server) {
        rm_engine_unlock(s->ctx);
        return REMORA_ERR_BUSY;
    }
    ring->server = s; /* claimed; undone below on failure */
    snprintf(ring->name, sizeof(ring->name), "%s", name);
    ring->sig.fn = ring_signaled; /* before any subscriber can see the ring */
    rm_engine_add_signal(s->ctx, &ring->sig);
    rm_engine_unlock(s->ctx);

    /* A GPU ring's elements first (a plain region), then the ring itself. */
    st = ring->data_mem ? rm_server_region_add(s, data_name, ring->data_mem, 0,
                                               remora_mem_length(ring->data_mem), 0, NULL, 1)
                        : REMORA_OK;
    if (st == REMORA_OK) {
        st = rm_server_region_add(s, name, ring->mem, 0, remora_mem_length(ring->mem), 0, ring,
                                  0);
        if (st != REMORA_OK && ring->data_mem) {
            rm_engine_lock(s->ctx);
            rm_server_region_drop(s, data_name);
            rm_engine_unlock(s->ctx);
        }
    }
    if (st != REMORA_OK) {
        rm_engine_lock(s->ctx);
        rm_engine_remove_signal(s->ctx, &ring->sig);
        ring->server = NULL;
        rm_engine_unlock(s->ctx);
    }
    return st;
}

void rm_server_ring_detach(remora_ring_h ring)
{
    rm_engine_lock(ring->ctx);
    if (ring->server) /* read under the lock: the server may be going too */
        rm_server_region_drop(ring->server, ring->name);
    rm_engine_unlock(ring->ctx);
}
