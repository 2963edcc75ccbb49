/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Server counters: the public queries, the STATS request, connection events.
 *
 * Design notes
 * - Server-wide counters are relaxed atomics in struct remora_server,
 *   indexed by the bit number of their remora_server_stats_field; the data
 *   path bumps them with RM_SS_ADD and takes no lock for it. A query sums
 *   the server's and its lanes' counters without any lock, except for the
 *   ring_subscribers gauge, which walks the connections under the lock.
 * - Per-connection counters live in rm_conn_t (cs[], by the bit number of
 *   remora_conn_stats_field) and are guarded by the context lock like the
 *   rest of the connection.
 * - The tables below are the only place that ties a bit number to a field
 *   of the public structs.
 * - Lock order: a server's context lock before its lanes' (lanes never take
 *   their parent's).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "remote/server.h"
#include "util/log.h"
#include "util/time.h"

static const size_t server_field_off[RM_SS_COUNT] = {
    offsetof(remora_server_stats_t, conns),
    offsetof(remora_server_stats_t, conns_accepted),
    offsetof(remora_server_stats_t, conns_refused),
    offsetof(remora_server_stats_t, auth_failures),
    offsetof(remora_server_stats_t, am_read_ops),
    offsetof(remora_server_stats_t, am_read_bytes),
    offsetof(remora_server_stats_t, am_write_ops),
    offsetof(remora_server_stats_t, am_write_bytes),
    offsetof(remora_server_stats_t, staging_read_ops),
    offsetof(remora_server_stats_t, staging_read_bytes),
    offsetof(remora_server_stats_t, staging_write_ops),
    offsetof(remora_server_stats_t, staging_write_bytes),
    offsetof(remora_server_stats_t, lookups),
    offsetof(remora_server_stats_t, map_grants),
    offsetof(remora_server_stats_t, rma_grants),
    offsetof(remora_server_stats_t, ipc_grants),
    offsetof(remora_server_stats_t, signals),
    offsetof(remora_server_stats_t, errors),
    offsetof(remora_server_stats_t, ring_waits),
    offsetof(remora_server_stats_t, ring_subscribers),
    offsetof(remora_server_stats_t, ring_drops),
    offsetof(remora_server_stats_t, uptime_ms),
};

/* Per-connection fields that are u64 (RM_CS_PEER is the string). */
static const size_t conn_field_off[RM_CS_COUNT] = {
    offsetof(remora_conn_stats_t, id),
    0,
    offsetof(remora_conn_stats_t, lane),
    offsetof(remora_conn_stats_t, age_ms),
    offsetof(remora_conn_stats_t, read_ops),
    offsetof(remora_conn_stats_t, read_bytes),
    offsetof(remora_conn_stats_t, write_ops),
    offsetof(remora_conn_stats_t, write_bytes),
    offsetof(remora_conn_stats_t, errors),
    offsetof(remora_conn_stats_t, ring_waits),
};

#define RM_SS_ALL ((1ull << RM_SS_COUNT) - 1)
#define RM_CS_ALL ((1ull << RM_CS_COUNT) - 1)

static uint64_t *field(void *base, size_t off) { return (uint64_t *)(void *)((char *)base + off); }

static unsigned ring_subscribers(remora_server_h s)
{
    rm_list_t *pos, *tmp;
    unsigned n = 0;

    rm_list_for_each_safe(pos, tmp, &s->conns)
        n += rm_container_of(pos, rm_conn_t, link)->nwaits > 0;
    return n;
}

static void collect_one(remora_server_h s, uint64_t mask, uint64_t v[64], int lock_held)
{
    for (unsigned i = 0; i < RM_SS_COUNT; i++)
        if (mask & (1ull << i))
            v[i] += atomic_load_explicit(&s->stat[i], memory_order_relaxed);
    if (mask & (1ull << RM_SS_RING_SUBSCRIBERS)) {
        if (!lock_held)
            rm_engine_lock(s->ctx);
        v[RM_SS_RING_SUBSCRIBERS] += ring_subscribers(s);
        if (!lock_held)
            rm_engine_unlock(s->ctx);
    }
}

void rm_server_stats_collect(remora_server_h s, uint64_t mask, uint64_t v[64], int lock_held)
{
    memset(v, 0, 64 * sizeof(v[0]));
    mask &= RM_SS_ALL;
    collect_one(s, mask, v, lock_held);
    for (unsigned i = 0; i < s->nlanes; i++)
        collect_one(s->lane[i], mask, v, 0);
    if (mask & (1ull << RM_SS_UPTIME_MS))
        v[RM_SS_UPTIME_MS] = (rm_now_ns() - s->born_ns) / 1000000u;
}

remora_status_t remora_server_stats(remora_server_h s, remora_server_stats_t *stats)
{
    uint64_t v[64], mask;

    if (s == NULL || stats == NULL)
        return REMORA_ERR_INVALID_PARAM;
    mask = stats->field_mask & RM_SS_ALL;
    rm_server_stats_collect(s, mask, v, 0);
    for (unsigned i = 0; i < RM_SS_COUNT; i++)
        if (mask & (1ull << i))
            *field(stats, server_field_off[i]) = v[i];
    stats->field_mask = mask;
    return REMORA_OK;
}

void rm_conn_stats_fill(const rm_conn_t *c, remora_conn_stats_t *out)
{
    uint64_t want = out->field_mask & RM_CS_ALL;

    for (unsigned i = 0; i < RM_CS_COUNT; i++) {
        if (!(want & (1ull << i)) || i == RM_CS_PEER)
            continue;
        uint64_t v = c->cs[i];
        if (i == RM_CS_ID)
            v = c->id;
        else if (i == RM_CS_LANE)
            v = c->server->lane_no;
        else if (i == RM_CS_AGE_MS)
            v = (rm_now_ns() - c->born_ns) / 1000000u;
        *field(out, conn_field_off[i]) = v;
    }
    if (want & (1ull << RM_CS_PEER))
        snprintf(out->peer, sizeof(out->peer), "%s", c->peer_addr);
    out->field_mask = want;
}

static size_t collect_conns(remora_server_h s, remora_conn_stats_t *out, size_t max, size_t n)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &s->conns) {
        rm_conn_t *c = rm_container_of(pos, rm_conn_t, link);
        if (c->state != CONN_READY || c->dead)
            continue;
        if (n < max)
            rm_conn_stats_fill(c, &out[n]);
        n++;
    }
    return n;
}

size_t rm_server_conn_stats_collect(remora_server_h s, remora_conn_stats_t *out, size_t max,
                                    int lock_held)
{
    size_t n;

    if (!lock_held)
        rm_engine_lock(s->ctx);
    n = collect_conns(s, out, max, 0);
    if (!lock_held)
        rm_engine_unlock(s->ctx);
    for (unsigned i = 0; i < s->nlanes; i++) {
        rm_engine_lock(s->lane[i]->ctx);
        n = collect_conns(s->lane[i], out, max, n);
        rm_engine_unlock(s->lane[i]->ctx);
    }
    return n;
}

remora_status_t remora_server_conn_stats(remora_server_h s, remora_conn_stats_t *stats,
                                         size_t max, size_t *count_p)
{
    if (s == NULL || count_p == NULL || (stats == NULL && max))
        return REMORA_ERR_INVALID_PARAM;
    *count_p = rm_server_conn_stats_collect(s, stats, max, 0);
    return REMORA_OK;
}

/* ------------------------------------------------------------ STATS request */

/* The connections reported in one STATS_REPLY at most: the reply stays eager. */
#define RM_STATS_REPLY_CONNS 1024

/* The whole server's figures, for a STATS reply: s is the first worker, its
 * lock held. Collecting takes each other worker's lock in turn. */
static remora_status_t stats_encode(remora_server_h s, rm_wbuf_t *w)
{
    uint64_t v[64];
    remora_conn_stats_t *cs;
    size_t n, keep;

    rm_wbuf_init(w);
    if ((cs = calloc(RM_STATS_REPLY_CONNS, sizeof(*cs))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    for (size_t i = 0; i < RM_STATS_REPLY_CONNS; i++)
        cs[i].field_mask = RM_CS_ALL;
    rm_server_stats_collect(s, RM_SS_ALL, v, 1);
    n    = rm_server_conn_stats_collect(s, cs, RM_STATS_REPLY_CONNS, 1);
    keep = n < RM_STATS_REPLY_CONNS ? n : RM_STATS_REPLY_CONNS;
    rm_stats_encode_server(w, RM_SS_ALL, v);
    rm_wbuf_u32(w, (uint32_t)keep);
    for (size_t i = 0; i < keep; i++) {
        rm_stats_conn_t sc = {.mask = cs[i].field_mask};
        snprintf(sc.peer, sizeof(sc.peer), "%s", cs[i].peer);
        for (unsigned b = 0; b < RM_CS_COUNT; b++)
            if (b != RM_CS_PEER)
                sc.v[b] = *field(&cs[i], conn_field_off[b]);
        rm_stats_encode_conn(w, &sc);
    }
    free(cs);
    return REMORA_OK;
}

/*
 * A STATS request on another worker's connection is answered from the first
 * worker's thread: collecting takes the first worker's lock and then each
 * other's, an order the asking worker, its own lock held, cannot keep.
 */
typedef struct rm_stats_task {
    rm_deferred_t   d;
    remora_server_h first;  /* alive until events_pending drops to 0 */
    remora_server_h worker; /* checked against first's workers before use */
    uint64_t        conn_id, req_id;
} rm_stats_task_t;

static void stats_task_run(rm_deferred_t *d)
{
    rm_stats_task_t *t = rm_container_of(d, rm_stats_task_t, d);
    remora_server_h s  = t->first;
    rm_list_t *pos, *tmp;
    rm_wbuf_t w;

    rm_engine_lock(s->ctx);
    for (unsigned i = 0; i < s->nlanes && !s->destroying; i++) {
        if (s->lane[i] != t->worker)
            continue; /* else: a worker still there until we unlock */
        remora_status_t st = stats_encode(s, &w);
        int sent = 0;
        rm_engine_lock(t->worker->ctx);
        rm_list_for_each_safe(pos, tmp, &t->worker->conns) { /* it may be gone meanwhile */
            rm_conn_t *c = rm_container_of(pos, rm_conn_t, link);
            if (c->id == t->conn_id && !c->dead && !sent) {
                rm_conn_reply(c, RM_MSG_STATS_REPLY, t->req_id, st, st == REMORA_OK ? &w : NULL);
                sent = st == REMORA_OK; /* the reply owns the body */
            }
        }
        rm_engine_unlock(t->worker->ctx);
        if (!sent)
            rm_wbuf_free(&w);
    }
    rm_engine_unlock(s->ctx);
    atomic_fetch_sub(&s->events_pending, 1);
    free(t);
}

void rm_server_handle_stats(rm_conn_t *c, const rm_hdr_t *hdr)
{
    remora_server_h first = c->server->main;
    rm_stats_task_t *t;

    if (first == NULL) {
        rm_wbuf_t w;
        remora_status_t st = stats_encode(c->server, &w);
        rm_conn_reply(c, RM_MSG_STATS_REPLY, hdr->req_id, st, st == REMORA_OK ? &w : NULL);
        if (st != REMORA_OK)
            rm_wbuf_free(&w); /* else the reply owns it */
        return;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        rm_conn_reply(c, RM_MSG_STATS_REPLY, hdr->req_id, REMORA_ERR_NO_MEMORY, NULL);
        return;
    }
    t->d.fn    = stats_task_run;
    t->first   = first;
    t->worker  = c->server;
    t->conn_id = c->id;
    t->req_id  = hdr->req_id;
    atomic_fetch_add(&first->events_pending, 1);
    rm_engine_defer(first->ctx, &t->d);
}

/* Used by the client (client.c) to decode into the public structs. */
void rm_stats_to_public(uint64_t mask, const uint64_t v[64], remora_server_stats_t *stats);
void rm_stats_conn_to_public(const rm_stats_conn_t *in, remora_conn_stats_t *out);

void rm_stats_to_public(uint64_t mask, const uint64_t v[64], remora_server_stats_t *stats)
{
    uint64_t want = stats->field_mask & mask & RM_SS_ALL;

    for (unsigned i = 0; i < RM_SS_COUNT; i++)
        if (want & (1ull << i))
            *field(stats, server_field_off[i]) = v[i];
    stats->field_mask = want;
}

void rm_stats_conn_to_public(const rm_stats_conn_t *in, remora_conn_stats_t *out)
{
    uint64_t want = out->field_mask & in->mask & RM_CS_ALL;

    for (unsigned i = 0; i < RM_CS_COUNT; i++)
        if ((want & (1ull << i)) && i != RM_CS_PEER)
            *field(out, conn_field_off[i]) = in->v[i];
    if (want & (1ull << RM_CS_PEER))
        snprintf(out->peer, sizeof(out->peer), "%s", in->peer);
    out->field_mask = want;
}

/* ------------------------------------------------------------ connection events */

typedef struct rm_conn_event_task {
    rm_deferred_t       d;
    remora_server_h     server; /* alive until events_pending drops to 0 */
    remora_conn_cb_t    cb;
    void               *arg;
    int                 connected;
    remora_conn_stats_t stats;
} rm_conn_event_task_t;

static void conn_event_run(rm_deferred_t *d)
{
    rm_conn_event_task_t *t = rm_container_of(d, rm_conn_event_task_t, d);
    remora_conn_event_t ev = {.connected = t->connected, .stats = &t->stats};

    t->cb(&ev, t->arg);
    atomic_fetch_sub(&t->server->events_pending, 1);
    free(t);
}

void rm_server_conn_event(rm_conn_t *c, int connected)
{
    remora_server_h s = c->server;
    rm_conn_event_task_t *t;

    if (s->conn_cb == NULL || s->destroying || (t = calloc(1, sizeof(*t))) == NULL)
        return;
    t->d.fn             = conn_event_run;
    t->server           = s;
    t->cb               = s->conn_cb;
    t->arg              = s->conn_arg;
    t->connected        = connected;
    t->stats.field_mask = RM_CS_ALL;
    rm_conn_stats_fill(c, &t->stats);
    atomic_fetch_add(&s->events_pending, 1);
    rm_engine_defer(s->ctx, &t->d);
}
