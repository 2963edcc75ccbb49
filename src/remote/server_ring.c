/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rings on the server: subscribers' waits and the answers to them.
 *
 * Design notes
 * - A subscriber that has caught up sends RING_WAIT: "tell me once the ring
 *   holds element `want`". The wait is answered at once if it already does,
 *   else when the producer commits it. Each wait is answered exactly once
 *   (RING_NOTIFY), so answers coalesce by construction: however fast the
 *   producer, a subscriber gets one message per wait it sends (its credit).
 * - Small elements travel inline: the answer carries copies made here with
 *   the seqlock check, oldest first, as many as fit. Waiters that want the
 *   same range share one copy (one allocation per commit, not per waiter).
 * - Large elements (a wait with RM_RING_BULK) are pushed: the answer's body
 *   is whole slots sent straight from the ring by rendezvous. Pushes go out
 *   in arrival order, at most RM_PUSH_ACTIVE at a time, and the element is
 *   chosen when the send starts, not when the wait arrived: the oldest one
 *   the producer cannot reach before the send is done (its rate and the
 *   push time are measured here). Sending N subscribers' transfers one or
 *   two at a time, each bound late, is what keeps a fan-out from collapsing:
 *   N interleaved transfers each take N times as long, and past the ring's
 *   wrap time every one of them lands overwritten (docs/ring.md, "Fan-out").
 *   When a push has been sent, a second RING_NOTIFY (no body) carries the
 *   verdict: the ring's `claimed` at that moment, from which the subscriber
 *   knows which of the slots the producer may have touched meanwhile.
 * - A push that does not complete (a stopped subscriber) stops counting
 *   against RM_PUSH_ACTIVE after RM_PUSH_STALL_NS, so it never holds up the
 *   others; it finishes (or fails with its connection) on its own.
 * - The producer never waits for any of this. A commit with waiters raises
 *   the ring's engine signal and returns; the progress thread answers. Only
 *   with at most RM_RING_DIRECT_MAX waiters and a free lock does the
 *   producer answer from its own thread (no thread hop on the latency path
 *   of one or two subscribers); its cost per commit is thus bounded whatever
 *   the number of subscribers.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/mem.h"
#include "remote/server.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/time.h"

#define RM_RING_WAITS_MAX   1024u      /* per connection */
#define RM_RING_INLINE_MAX  (32u << 10)
#define RM_PUSH_ACTIVE      2u         /* pushes on the wire at once */
#define RM_PUSH_CHUNK       (1u << 20) /* bytes per push, at least one slot */
#define RM_PUSH_SLACK_NS    200000u    /* scheduling between a push's end and its verdict */
#define RM_PUSH_STALL_NS    20000000u  /* a push this old no longer holds the queue */

typedef struct rm_ring_wait {
    rm_list_t      link;   /* server->waits (armed) or server->pushq (queued) */
    rm_conn_t     *conn;
    rm_region_t   *region;
    uint64_t       req_id;
    uint64_t       want;
    uint64_t       inline_max; /* bulk: the credit in bytes */
    uint8_t        mode;
    uint8_t        bulk;
    uint8_t        queued;
} rm_ring_wait_t;

typedef struct rm_ring_push {
    rm_list_t        link;  /* server->pushes */
    remora_server_h  server;
    rm_conn_t       *conn;  /* valid while the send is: a closing conn cancels it first */
    _Atomic uint64_t *claimed; /* the ring's header: in mem, which the push holds */
    rm_hdr_t         hdr;   /* the push's RING_NOTIFY, for the verdict */
    remora_mem_h     mem;
    uint64_t         start_ns, bytes;
    int              stalled;
} rm_ring_push_t;

static void push_pump(remora_server_h s);

/* A push no longer on the wire's count (done, detached or stalled): once each. */
static void push_count_out(remora_server_h s)
{
    assert(s->push_active > 0);
    s->push_active--;
}

static void wait_free(rm_ring_wait_t *w)
{
    rm_list_del(&w->link);
    if (!w->queued) {
        atomic_fetch_sub(&w->region->ring->armed, 1);
        atomic_fetch_sub(&w->conn->server->armed_waits, 1);
    }
    w->conn->nwaits--;
    free(w);
}

/* One copy of some elements, sent to every waiter that wants just those. */
typedef struct rm_shared_body {
    unsigned refs;
    uint64_t from, first, n;
    uint8_t  data[];
} rm_shared_body_t;

static void shared_body_done(void *arg, ucs_status_t status)
{
    rm_shared_body_t *b = arg;
    (void)status;
    if (--b->refs == 0)
        free(b);
}

/* Answer a wait whose element is there: the head, and what fits inline.
 * *shared: the copy the previous answer of this round made, reused when
 * this one wants the same elements (the caller drops its reference). */
static void notify(rm_conn_t *c, rm_region_t *r, uint64_t req_id, uint64_t want,
                   uint8_t mode, uint64_t inline_max, const rm_ring_shape_t *now,
                   rm_shared_body_t **shared)
{
    remora_ring_h ring = r->ring;
    uint64_t from = mode == RM_RING_LATEST ? now->head - 1 : want;
    uint64_t oldest = rm_ring_oldest_seq(now), n = 0, elem = now->elem_size;
    rm_hdr_t h = {.type = RM_MSG_RING_NOTIFY, .req_id = req_id, .region_id = r->id,
                  .size = now->head};
    rm_send_params_t sp = {0};
    rm_shared_body_t *b = shared ? *shared : NULL;

    if (from < oldest)
        from = oldest;
    if (elem <= inline_max)
        n = inline_max / elem;
    if (n > now->head - from)
        n = now->head - from;
    if (n && !(b && b->from == from && b->n == n)) {
        if (shared && *shared)
            shared_body_done(*shared, UCS_OK);
        if ((b = malloc(sizeof(*b) + n * elem)) != NULL) {
            b->refs  = 1; /* the round's */
            b->from  = from;
            b->n     = n;
            b->first = rm_ring_copy_range(ring, from, from + n, b->data);
        }
        if (shared)
            *shared = b;
    }
    if (n && b) {
        h.offset    = b->first; /* copied from here on, at b->data */
        h.length    = from + n - b->first;
        sp.body     = b->data;
        sp.body_len = h.length * elem;
        sp.done     = shared_body_done;
        sp.arg      = b;
        b->refs++;
        if (!shared)
            b->refs--; /* no round: this send holds the only reference */
    } else {
        h.offset = from;
    }
    if (rm_conn_send(c, &h, &sp) != REMORA_OK && sp.done)
        sp.done(sp.arg, UCS_ERR_CANCELED); /* a failed send never calls back: its reference */
}

/* ------------------------------------------------------------ pushes */

/*
 * A push's time is a fixed cost (round trip, scheduling) plus bytes over
 * bandwidth. Fitting both matters: a per-byte average learnt from one-slot
 * pushes charges every byte the fixed cost, the next push is sized smaller
 * still, and small elements end up pushed one at a time. Pushes of one size
 * do not tell the two apart, so the slope leans on a 1 GB/s prior with the
 * weight of PUSH_FIT_PRIOR_X squared.
 */
#define PUSH_FIT_DECAY    0.9            /* about the last ten pushes count */
#define PUSH_FIT_PRIOR_NS 1.0            /* per byte: 1 GB/s until measured */
#define PUSH_FIT_PRIOR_X  (64.0 * 1024)  /* bytes */

static void push_fit_add(remora_server_h s, double x, double y)
{
    struct rm_push_fit *f = &s->push_fit;
    f->n  = PUSH_FIT_DECAY * f->n + 1;
    f->x  = PUSH_FIT_DECAY * f->x + x;
    f->y  = PUSH_FIT_DECAY * f->y + y;
    f->xx = PUSH_FIT_DECAY * f->xx + x * x;
    f->xy = PUSH_FIT_DECAY * f->xy + x * y;
}

static double push_time_ns(remora_server_h s, double bytes)
{
    const struct rm_push_fit *f = &s->push_fit;
    double prior = PUSH_FIT_PRIOR_X * PUSH_FIT_PRIOR_X, b = PUSH_FIT_PRIOR_NS, a = 0;

    if (f->n > 0) {
        double sxx = f->xx - f->x * f->x / f->n, sxy = f->xy - f->x * f->y / f->n;
        b = (sxy + prior * PUSH_FIT_PRIOR_NS) / (sxx + prior);
        if (b < 0.01)
            b = 0.01; /* 100 GB/s: noise, not a measurement */
        a = (f->y - b * f->x) / f->n;
        if (a < 0)
            a = 0;
    }
    return a + b * bytes;
}

static void push_done(void *arg, ucs_status_t status)
{
    rm_ring_push_t *p = arg;
    remora_server_h s = p->server;

    if (s == NULL) { /* its connection went first (rm_server_ring_conn_gone) */
        rm_mem_unref(p->mem);
        free(p);
        return;
    }
    /* Counted out and unlisted before the verdict's send: a connection that
     * dies in that send detaches the pushes still listed (and counts them
     * out itself), and this one must not be counted out twice. */
    if (!p->stalled) {
        push_count_out(s);
        if (status == UCS_OK && p->bytes)
            push_fit_add(s, (double)p->bytes, (double)(rm_now_ns() - p->start_ns));
    }
    rm_list_del(&p->link);
    if (status == UCS_OK) {
        /* The verdict: the slots are out of the ring; whatever the producer
         * claims from now on cannot touch the copy. The subscriber delivers
         * the elements above claimed - capacity. */
        rm_hdr_t v = p->hdr;
        v.length = 0;
        v.size   = atomic_load_explicit(p->claimed, memory_order_acquire);
        rm_send_params_t vp = {0};
        rm_conn_hold(p->conn);
        rm_conn_send(p->conn, &v, &vp);
        rm_conn_release(p->conn);
    }
    rm_mem_unref(p->mem);
    free(p);
    push_pump(s);
}

/*
 * Send a queued wait its answer: whole slots from the oldest element the
 * producer cannot overwrite before the push has landed and been checked,
 * to the newest, within the subscriber's credit and RM_PUSH_CHUNK, never
 * across the ring's end (one contiguous zero-copy send).
 */
static void push_start(remora_server_h s, rm_ring_wait_t *w)
{
    rm_region_t *r = w->region;
    remora_ring_h ring = r->ring;
    rm_ring_shape_t now;
    uint64_t t = rm_now_ns();

    rm_ring_snapshot(ring, &now);
    uint64_t cap = now.capacity, stride = now.stride, head = now.head;
    uint64_t nmax = RM_PUSH_CHUNK / stride, credit = w->inline_max / stride;
    if (nmax > credit)
        nmax = credit;
    if (nmax == 0)
        nmax = 1;
    if (rm_fault_overpush_take())
        nmax = cap; /* tests: a server that ignores the credit */
    /* Elements the producer commits while this push travels, twice over. */
    double rate = rm_ring_rate(ring, head, t);
    double d_ns = 2.0 * push_time_ns(s, (double)(nmax * stride)) + RM_PUSH_SLACK_NS;
    double m    = (double)(uint64_t)(rate * d_ns / 1e9) + 2; /* rounded up, plus one */
    uint64_t margin = m >= (double)cap ? cap - 1 : (uint64_t)m;
    uint64_t safe = head > cap - margin ? head - (cap - margin) : 0; /* oldest safe */
    uint64_t oldest = rm_ring_oldest_seq(&now);
    uint64_t from = w->mode == RM_RING_LATEST ? head - 1 : w->want;
    if (from < safe)
        from = safe;
    if (from < oldest)
        from = oldest;
    if (from >= head)
        from = head - 1; /* want < head when queued; a margin of cap - 1 lands here */
    uint64_t n = head - from;
    if (n > nmax)
        n = nmax;
    if (n > cap - from % cap)
        n = cap - from % cap;

    rm_hdr_t h = {.type = RM_MSG_RING_NOTIFY, .req_id = w->req_id, .region_id = r->id,
                  .size = head, .offset = from, .length = n};
    rm_ring_push_t *p = calloc(1, sizeof(*p));
    rm_conn_t *c = w->conn;
    wait_free(w);
    if (p == NULL) {
        rm_conn_reply(c, RM_MSG_RING_NOTIFY, h.req_id, REMORA_ERR_NO_MEMORY, NULL);
        return;
    }
    p->server   = s;
    p->conn     = c;
    p->claimed  = ring->hdr_claimed;
    p->hdr      = h;
    p->mem      = ring->mem;
    p->start_ns = t;
    p->bytes    = n * stride;
    rm_mem_ref(p->mem);
    rm_list_push_back(&s->pushes, &p->link);
    s->push_active++;
    rm_send_params_t sp = {.body = ring->base + rm_ring_slot_offset(&now, from),
                           .body_len = n * stride, .memh = ring->mem->memh, .bulk = 1,
                           .done = push_done, .arg = p};
    remora_status_t st = rm_conn_send(c, &h, &sp);
    if (st == REMORA_OK && rm_fault_stray_take(RM_MSG_RING_NOTIFY) && !c->dead)
        rm_conn_reply(c, RM_MSG_ERROR, h.req_id, REMORA_ERR_PROTOCOL, NULL); /* tests */
    if (st != REMORA_OK) {
        if (p->server != NULL) { /* else the connection died in the send and let it go */
            push_count_out(s);
            rm_list_del(&p->link);
        }
        rm_mem_unref(p->mem);
        free(p);
    }
}

/* Start queued pushes while fewer than RM_PUSH_ACTIVE are on the wire. A
 * push that ends inside (UCX completes a small send at once) finds it
 * running: the loop here goes on, with no recursion a push deep. */
static void push_pump(remora_server_h s)
{
    rm_list_t *pos, *tmp;
    uint64_t t = rm_now_ns();

    if (s->destroying || s->push_pumping)
        return;
    s->push_pumping = 1;
    rm_list_for_each_safe(pos, tmp, &s->pushes) {
        rm_ring_push_t *p = rm_container_of(pos, rm_ring_push_t, link);
        double expect = 8.0 * push_time_ns(s, (double)p->bytes);
        if (!p->stalled && t - p->start_ns > (expect > RM_PUSH_STALL_NS ? expect : RM_PUSH_STALL_NS)) {
            p->stalled = 1; /* a stopped or slow subscriber: stop waiting for it */
            push_count_out(s);
        }
    }
    while (s->push_active < RM_PUSH_ACTIVE && !rm_list_empty(&s->pushq))
        push_start(s, rm_container_of(s->pushq.next, rm_ring_wait_t, link));
    s->push_pumping = 0;
}

void rm_server_ring_tick(remora_server_h s)
{
    if (!rm_list_empty(&s->pushes) || !rm_list_empty(&s->pushq))
        push_pump(s);
}

/* Answer w with a status and free it; 0 if its connection died in the
 * send (then w, and every other wait of that connection, went with it). */
static int wait_reply(rm_ring_wait_t *w, remora_status_t status)
{
    rm_conn_t *c = w->conn;

    rm_conn_hold(c);
    rm_conn_reply(c, RM_MSG_RING_NOTIFY, w->req_id, status, NULL);
    if (rm_conn_release(c))
        return 0;
    wait_free(w);
    return 1;
}

/* A wait whose element is there: answered now, or queued for a push. 0 if
 * its connection died in the answer's send, as for wait_reply: a caller
 * walking a list of waits starts over. */
static int answer(remora_server_h s, rm_ring_wait_t *w, const rm_ring_shape_t *now,
                  rm_shared_body_t **shared)
{
    rm_conn_t *c = w->conn;

    if (w->bulk) {
        if (!w->queued) {
            rm_list_del(&w->link);
            atomic_fetch_sub(&w->region->ring->armed, 1);
            atomic_fetch_sub(&s->armed_waits, 1);
            w->queued = 1;
            rm_list_push_back(&s->pushq, &w->link);
        }
        return 1;
    }
    rm_conn_hold(c);
    notify(c, w->region, w->req_id, w->want, w->mode, w->inline_max, now, shared);
    if (rm_conn_release(c))
        return 0;
    wait_free(w);
    return 1;
}

/* Answer the waits on this ring that its head now satisfies. */
static void ring_fire(remora_server_h s, remora_ring_h ring)
{
    rm_list_t *pos, *tmp;
    rm_ring_shape_t now;
    rm_shared_body_t *shared = NULL;

    /* Pairs with the producer's store of head then load of armed. */
    atomic_thread_fence(memory_order_seq_cst);
    rm_ring_snapshot(ring, &now);
again: /* a connection that died in a send took its other waits: tmp may be one */
    rm_list_for_each_safe(pos, tmp, &s->waits) {
        rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
        if (w->region->ring != ring || now.head <= w->want)
            continue;
        if (!answer(s, w, &now, &shared))
            goto again;
    }
    if (shared)
        shared_body_done(shared, UCS_OK);
    push_pump(s);
}

/*
 * A commit on a ring the first worker exposes. Its own connections' waits
 * are answered here; other workers' connections are theirs to answer. This
 * may run on the producer's thread, which must not wait: a worker's lock is
 * only tried. With few waiters in all, a worker whose lock is free is
 * answered from here (rm_ring_notify), as the first worker's are:
 * raising its signal instead put a wake-up of its sleeping thread on every
 * element's path (a lone subscriber lands on a worker other than the first
 * as often as not).
 */
static void ring_signaled(rm_signal_t *sig)
{
    remora_ring_h ring = rm_container_of(sig, struct remora_ring, sig);
    remora_server_h s  = ring->server;

    if (s == NULL)
        return;
    ring_fire(s, ring);
    int armed = atomic_load(&ring->armed);
    for (unsigned i = 0; i < s->nlanes; i++)
        if (atomic_load(&s->lane[i]->armed_waits) > 0)
            rm_ring_notify(s->lane[i]->ctx, &s->lane[i]->rings_sig, armed);
}

/* A worker server's rings_sig: answer whatever its waits' rings now hold. */
static void worker_rings_signaled(rm_signal_t *sig)
{
    remora_server_h s = rm_container_of(sig, struct remora_server, rings_sig);
    rm_list_t *pos, *tmp;

again: /* ring_fire answers every wait on its ring that can be: start over */
    rm_list_for_each_safe(pos, tmp, &s->waits) {
        rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
        remora_ring_h ring = w->region->ring;
        if (atomic_load_explicit(ring->hdr_head, memory_order_acquire) > w->want) {
            ring_fire(s, ring);
            goto again;
        }
    }
}

void rm_server_ring_worker_start(remora_server_h s)
{
    s->rings_sig.fn = worker_rings_signaled;
    rm_engine_add_signal(s->ctx, &s->rings_sig);
}

void rm_server_ring_worker_stop(remora_server_h s)
{
    rm_engine_remove_signal(s->ctx, &s->rings_sig);
}

/* A connection at its limit of waits: answer (CANCELED) and drop its
 * oldest. 0 if the connection died in that answer's send. */
static int evict_oldest_wait(rm_conn_t *c)
{
    rm_list_t *lists[2] = {&c->server->pushq, &c->server->waits}, *pos, *tmp;

    for (int i = 0; i < 2; i++) {
        rm_list_for_each_safe(pos, tmp, lists[i]) {
            rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
            if (w->conn != c)
                continue;
            return wait_reply(w, REMORA_ERR_CANCELED);
        }
    }
    return 1;
}

void rm_server_ring_wait(rm_conn_t *c, const rm_hdr_t *hdr)
{
    rm_region_t *r = rm_server_region_by_id(c->server, hdr->region_id);
    int bulk = (hdr->kind & RM_RING_BULK) != 0;
    uint64_t inline_max = hdr->length < RM_RING_INLINE_MAX ? hdr->length : RM_RING_INLINE_MAX;
    rm_ring_shape_t now;
    rm_ring_wait_t *w;

    if (r == NULL || r->ring == NULL || (bulk && r->ring->data_mem)) {
        rm_conn_reply(c, RM_MSG_RING_NOTIFY, hdr->req_id,
                      r ? REMORA_ERR_INVALID_PARAM : REMORA_ERR_NOT_FOUND, NULL);
        return;
    }
    rm_ring_snapshot(r->ring, &now);
    if (bulk && hdr->length < now.stride)
        inline_max = now.stride; /* a push is one slot at least */
    else if (bulk)
        inline_max = hdr->length;
    if (!bulk && now.head > hdr->offset) {
        notify(c, r, hdr->req_id, hdr->offset, RM_RING_MODE(hdr->kind), inline_max, &now, NULL);
        return;
    }
    /* At the limit: most likely a subscription long gone. */
    if (c->nwaits >= RM_RING_WAITS_MAX && !evict_oldest_wait(c))
        return; /* c died in the send */
    if ((w = calloc(1, sizeof(*w))) == NULL) {
        rm_conn_reply(c, RM_MSG_RING_NOTIFY, hdr->req_id, REMORA_ERR_NO_MEMORY, NULL);
        return;
    }
    w->conn       = c;
    w->region     = r;
    w->req_id     = hdr->req_id;
    w->want       = hdr->offset;
    w->inline_max = inline_max;
    w->mode       = RM_RING_MODE(hdr->kind);
    w->bulk       = (uint8_t)bulk;
    c->nwaits++;
    rm_list_push_back(&c->server->waits, &w->link);
    /* Arm, then look again: a commit between the first look and the arm
     * saw armed == 0 and raised no signal. armed_waits first: whoever sees
     * the ring armed by this wait sees its worker's count too. */
    atomic_fetch_add(&c->server->armed_waits, 1);
    atomic_fetch_add(&r->ring->armed, 1);
    ring_fire(c->server, r->ring);
}

void rm_server_ring_conn_gone(rm_conn_t *c)
{
    remora_server_h s = c->server;
    rm_list_t *lists[2] = {&s->waits, &s->pushq}, *pos, *tmp;

    for (int i = 0; i < 2; i++) {
        rm_list_for_each_safe(pos, tmp, lists[i]) {
            rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
            if (w->conn == c)
                wait_free(w);
        }
    }
    /* Its pushes may call back long after the connection (and even the
     * server) is gone: detach them, so that they touch only themselves. */
    rm_list_for_each_safe(pos, tmp, &s->pushes) {
        rm_ring_push_t *p = rm_container_of(pos, rm_ring_push_t, link);
        if (p->conn != c)
            continue;
        rm_list_del(&p->link);
        if (!p->stalled)
            push_count_out(s);
        p->conn   = NULL;
        p->server = NULL;
    }
    push_pump(s);
}

/* One worker's waits on a region that goes: answered NOT_FOUND (its lock held). */
static void waits_region_gone(remora_server_h s, const rm_region_t *r)
{
    rm_list_t *lists[2] = {&s->waits, &s->pushq}, *pos, *tmp;

    for (int i = 0; i < 2; i++) {
again:
        rm_list_for_each_safe(pos, tmp, lists[i]) {
            rm_ring_wait_t *w = rm_container_of(pos, rm_ring_wait_t, link);
            if (w->region != r)
                continue;
            if (!wait_reply(w, REMORA_ERR_NOT_FOUND))
                goto again; /* its connection died: its other waits went too */
        }
    }
}

void rm_server_ring_region_gone(remora_server_h s, rm_region_t *r)
{
    if (r->ring == NULL)
        return;
    waits_region_gone(s, r);
    for (unsigned i = 0; i < s->nlanes; i++) { /* the first worker's lock comes first */
        rm_engine_lock(s->lane[i]->ctx);
        waits_region_gone(s->lane[i], r);
        rm_engine_unlock(s->lane[i]->ctx);
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

static void ring_detach(remora_ring_h ring);

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
    ring->on_destroy = ring_detach;
    rm_engine_add_signal(s->ctx, &ring->sig);
    rm_engine_unlock(s->ctx);

    /* A GPU ring's elements first (a plain region), then the ring itself. */
    st = ring->data_mem ? rm_server_region_add(s, data_name, ring->data_mem, 0,
                                               remora_mem_length(ring->data_mem), 0,
                                               &(rm_region_role_t){.ring_data = 1})
                        : REMORA_OK;
    if (st == REMORA_OK) {
        st = rm_server_region_add(s, name, ring->mem, 0, remora_mem_length(ring->mem), 0,
                                  &(rm_region_role_t){.ring = ring});
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

/* The ring's observer (on_destroy): take it out of the server exposing it, if any. */
static void ring_detach(remora_ring_h ring)
{
    rm_engine_lock(ring->ctx);
    if (ring->server) /* read under the lock: the server may be going too */
        rm_server_region_drop(ring->server, ring->name);
    rm_engine_unlock(ring->ctx);
}
