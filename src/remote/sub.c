/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Subscriptions to remote rings, and ring clones (docs/ring.md).
 *
 * Design notes
 * - Two ways elements arrive. Small elements (up to RM_SUB_INLINE_MAX) come
 *   inside the server's answer to a RING_WAIT, many per message; the next
 *   wait is sent as soon as an answer arrives, so the round trip overlaps
 *   with the consumer. Larger elements are fetched with one-sided reads of
 *   contiguous slots (a batch, split only where the ring wraps), then the
 *   header is read again: `claimed` tells which of the copied elements the
 *   producer may have touched meanwhile; those are counted as drops, never
 *   delivered. While the consumer works through one batch the next is
 *   already in flight (two buffers).
 * - Over the `am` path (unencrypted) large elements are pushed instead: the
 *   RING_WAIT carries RM_RING_BULK and a credit, the server answers with
 *   whole slots sent from the ring (rendezvous into a buffer the wait op
 *   owns, lent by the subscription and reused) and then a verdict, the
 *   ring's `claimed` once the push was out; batch_check discards what the
 *   producer may have touched, as for a fetch. In `every` mode the next
 *   wait goes out as soon as a push starts to arrive (push_follow, on the
 *   progress thread), so two pushes per subscription are in flight: the
 *   next one travels while this one's verdict comes and its elements are
 *   delivered (docs/ring.md, "Fan-out").
 * - A paced stream keeps a second wait armed. While answers bring one
 *   element each (the subscriber has caught up), a wait for the element
 *   after the awaited one goes out too, so the server holds a wait when the
 *   producer commits it, and the producer's thread can answer at once,
 *   however late the subscriber's next wait would reach a busy server. Under
 *   load (answers bring several) it stops: a second wait would bring back
 *   mostly what the first brought.
 * - Waiting for an answer spins only while answers come within 2 ms; longer
 *   waits sleep, leaving the CPU to whoever produces the answer.
 * - A subscriber asks the server (RING_WAIT) only when it has nothing left to
 *   fetch; it never polls the ring over the network.
 * - Drops: every gap between consecutive delivered sequence numbers is added
 *   to the drop count at delivery, so drops are exact by construction.
 * - Reconnects (remora.h, remora_sub_next): a subscription remembers the
 *   connection (conn_gen) and server instance it is attached to. When it has
 *   nothing in hand and the client's connection is another one, or a step
 *   failed with DISCONNECTED on a client that reconnects, it waits for the
 *   link and re-attaches (sub_reattach): the ring is looked up again, and
 *   `next` stays (same instance) or restarts at 0 (new instance), so the
 *   gap goes through batch_take's count like any other. On the same
 *   instance the ring must be the same region (id): one replaced meanwhile
 *   is NOT_FOUND, as it is to a subscriber that stayed connected.
 * - Threading: one consumer at a time (next or the callback thread).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/cuda.h"
#include "remote/client.h"
#include "ring/ring.h"
#include "util/env.h"
#include "util/fields.h"
#include "util/log.h"
#include "util/time.h"

#define RM_SUB_BATCH_DEFAULT (8u << 20)
#define RM_SUB_INLINE_MAX    (32u << 10)
#define RM_SUB_CB_POLL_MS    100
#define RM_SUB_SPIN_MAX_NS   2000000u /* = the engine's driver idle time */

typedef enum { FETCH_IDLE, FETCH_DATA, FETCH_HDR } rm_fetch_stage_t;

/* Elements ready for delivery: element i of [first, first+count) at data + i*pitch. */
typedef struct rm_batch {
    const uint8_t *data;
    size_t         pitch;
    uint64_t       first, count, pos;
} rm_batch_t;

struct remora_sub {
    remora_client_h   client;
    char              name[REMORA_NAME_MAX + 1];
    remora_sub_mode_t mode;
    rm_ring_shape_t   shape;       /* elem_size, capacity, stride */
    uint64_t          region_size;
    uint64_t          batch_max;   /* elements per fetch, at most */
    uint64_t          batch;       /* elements per fetch now (adapts, see fetch_more) */
    uint32_t          region_id;   /* the ring's region (taken at subscribe and re-attach) */
    uint64_t          inline_max;  /* bytes the server may send with an answer */
    int               use_inline;  /* elements come with the server's answers */
    int               use_push;    /* larger ones too, as whole slots (RM_RING_BULK) */
    int               push_follow; /* ... two in flight (push_follow), not one */
    uint8_t          *push_body;   /* a push's slots, awaiting their check */
    int               inline_push; /* inline_body is a push buffer (push_cap bytes) */
    int               push_body_full; /* push_body holds push_cap bytes */
    uint8_t          *spare[2];    /* push buffers to lend the next waits (push_cap bytes) */
    size_t            push_cap;    /* bytes a push may bring: the credit */
    uint64_t          discarded;   /* copies that arrived overwritten (remora_sub_discarded) */
    uint64_t          wait_avg_ns; /* how long answers keep us waiting (moving average) */
    uint64_t          next;        /* next sequence wanted */
    uint64_t          known_head;
    uint64_t          drops;
    uint64_t          gen;         /* the client's connection we are attached on */
    uint64_t          instance;    /* ... and its server instance */

    rm_batch_t        cur;
    uint8_t          *inline_body; /* owns cur's data when it came inline */
    uint8_t          *fbuf[2];     /* fetch buffers; cur uses fbuf[fcur] */
    int               fcur;
    int               pinned;      /* fetch buffers registered with CUDA (count) */
    void             *last_buf;    /* the consumer's last buffer, and what memory it is */
    rm_ptr_kind_t     last_kind;

    rm_fetch_stage_t  stage;       /* the fetch into fbuf[!fcur] */
    uint64_t          f_first, f_count;
    remora_request_h  f_req[4];    /* slots (or stamps), and a GPU ring's element data */
    uint8_t          *f_stamps;    /* a GPU ring's stamps for the fetch in flight */
    char              data_name[REMORA_NAME_MAX + 8]; /* a GPU ring's "NAME#data" */
    uint8_t           f_hdr[RM_RING_HDR_LEN];
    int               leaked;      /* a fetch outlived its connection: buffers left to it */
    rm_op_t          *wait_op;     /* a RING_WAIT awaiting its answer */
    uint64_t          wait_want;   /* ... the element it asked for */
    rm_op_t          *wait_ahead;  /* the wait armed behind it (paced streams), or NULL */
    uint64_t          ahead_want;
    int               sparse;      /* the last answer brought at most one element */

    remora_sub_cb_t   cb;
    void             *cb_arg;
    pthread_t         thread;
    int               has_thread;
    atomic_int        stop;
};

static int ms_left(uint64_t deadline)
{
    uint64_t now = rm_now_ns();
    if (deadline <= now)
        return 0;
    uint64_t ms = (deadline - now + 999999u) / 1000000u;
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

static void fetch_cancel(remora_sub_h sub);
static void batch_check(remora_sub_h sub, uint64_t claimed);

/* A push buffer for a wait to lend: a spare one, or a new one. */
static uint8_t *spare_take(remora_sub_h sub)
{
    for (int i = 0; i < 2; i++)
        if (sub->spare[i] != NULL) {
            uint8_t *b = sub->spare[i];
            sub->spare[i] = NULL;
            return b;
        }
    return malloc(sub->push_cap);
}

/* Keep a push buffer (push_cap bytes) for the next waits, or free it. */
static void spare_put(remora_sub_h sub, uint8_t *buf)
{
    for (int i = 0; i < 2; i++)
        if (sub->spare[i] == NULL) {
            sub->spare[i] = buf;
            return;
        }
    free(buf);
}

/* The batch in hand is done with: a push buffer is kept for the next wait. */
static void sub_body_release(remora_sub_h sub)
{
    if (sub->inline_push)
        spare_put(sub, sub->inline_body);
    else
        free(sub->inline_body);
    sub->inline_body = NULL;
    sub->inline_push = 0;
}

/* ------------------------------------------------------------ waits */

/* Send RING_WAIT h (lock held); a push wait is lent buf for the slots. The
 * op is the subscription's: it frees it, and it never holds up a disconnect. */
static rm_op_t *wait_op_send(remora_client_h c, rm_hdr_t *h, size_t push_cap, uint8_t *buf)
{
    rm_send_params_t sp = {0};
    rm_op_t *op = rm_client_op_send(c, h, RM_MSG_RING_NOTIFY, &sp);

    if (op == NULL) {
        free(buf);
        return NULL;
    }
    op->sub_owned = 1;
    op->push_req  = push_cap != 0;
    op->push_cap  = push_cap;
    op->reply     = buf; /* faulted in once, not per push; the op owns it until taken */
    op->reply_cap = buf ? push_cap : 0;
    if (++c->nsubops == c->nops)
        rm_engine_complete(c->ctx, &c->drained);
    return op;
}

/* The RING_WAIT for element `want` of the ring with this id; a push wait
 * asks for whole slots up to the credit. Reads only what subscribe sets. */
static rm_hdr_t wait_hdr(const remora_sub_h sub, uint32_t region_id, uint64_t want, int push)
{
    rm_hdr_t h = {.type = RM_MSG_RING_WAIT, .region_id = region_id,
                  .kind = sub->mode == REMORA_SUB_LATEST ? RM_RING_LATEST : RM_RING_EVERY,
                  .offset = want, .length = sub->use_inline ? sub->inline_max : 0};
    if (push) {
        h.kind  |= RM_RING_BULK;
        h.length = sub->push_cap;
    }
    return h;
}

/*
 * A push is arriving for op (progress thread, lock held): ask for what
 * follows at once, so the next push travels while this one lands, its
 * verdict comes and its elements are delivered; one wait after another
 * left a lone subscriber of 1 MiB elements a round trip and a wake-up per
 * element behind a plain reader (docs/ring.md). The wait goes out only with
 * a buffer lent for it (at most two pushes in flight per subscription), and
 * only for `every` subscriptions, whose next element is this push's end.
 */
static void push_follow(rm_op_t *op, const rm_hdr_t *hdr)
{
    remora_sub_h sub = op->push_arg; /* its waits go before it changes or goes */
    remora_client_h c = op->client;

    if (op->follow_buf == NULL || op->follow != NULL || op->status != REMORA_OK ||
        c->disconnected || c->conn_gen != sub->gen)
        return;
    rm_hdr_t h = wait_hdr(sub, sub->region_id, hdr->offset + hdr->length, 1);
    uint8_t *buf = op->follow_buf;
    op->follow_buf = NULL;
    op->follow = wait_op_send(c, &h, sub->push_cap, buf);
}

/* Let a push wait of an `every` subscription send the next one itself (lock
 * held). A wait whose push has started already (a follow-up taken late)
 * sends it now: else every other push would go one deep. */
static rm_op_t *follow_arm(remora_sub_h sub, rm_op_t *op)
{
    if (!op->push_req || !sub->use_push || !sub->push_follow || sub->mode != REMORA_SUB_EVERY ||
        op->on_push != NULL)
        return op;
    op->on_push    = push_follow;
    op->push_arg   = sub;
    op->follow_buf = spare_take(sub);
    if (op->reply_hdr.length > 0) /* set when its push arrived (client.c) */
        push_follow(op, &op->reply_hdr);
    return op;
}

/* Send a RING_WAIT for element `want`; the op goes to *slot. */
static remora_status_t wait_post(remora_sub_h sub, uint64_t want, rm_op_t **slot)
{
    remora_client_h c = sub->client;
    rm_rregion_t *r;
    remora_status_t st;
    rm_op_t *op;

    if ((st = rm_client_region_get(c, sub->name, rm_deadline_ns(c->timeout_ms), &r)) != REMORA_OK)
        return st; /* lock held only on success */
    if (c->disconnected) {
        st = c->disc_status;
    } else if (c->conn_gen != sub->gen) {
        /* Reconnected since we attached: a wait for `next` would be in the old
         * instance's numbering. Re-attach first (sub_recover). */
        st = REMORA_ERR_DISCONNECTED;
    } else if (r->id != sub->region_id) {
        st = REMORA_ERR_NOT_FOUND; /* the ring went; another took its name */
    } else {
        rm_hdr_t h = wait_hdr(sub, r->id, want, sub->use_push);
        op = wait_op_send(c, &h, sub->use_push ? sub->push_cap : 0,
                          sub->use_push ? spare_take(sub) : NULL);
        if (op == NULL)
            st = REMORA_ERR_NO_MEMORY;
        else
            *slot = follow_arm(sub, op);
    }
    rm_engine_unlock(c->ctx);
    rm_engine_kick(c->ctx);
    return st;
}

/* The wait every answer is awaited through (the head). */
static remora_status_t wait_send(remora_sub_h sub, uint64_t want)
{
    sub->wait_want = want;
    return wait_post(sub, want, &sub->wait_op);
}

/* Small elements of every mode come inline: only those streams pipeline. */
static int sub_pipelined(const remora_sub_h sub)
{
    return sub->mode == REMORA_SUB_EVERY && sub->use_inline && !sub->use_push;
}

/* A paced stream: the wait for the element after the awaited one. A failure
 * only costs the head start; the head wait says what went wrong. */
static void wait_ahead_send(remora_sub_h sub)
{
    if (sub->wait_op == NULL || sub->wait_ahead != NULL || !sub->sparse || !sub_pipelined(sub))
        return;
    sub->ahead_want = sub->wait_want + 1;
    if (wait_post(sub, sub->ahead_want, &sub->wait_ahead) != REMORA_OK)
        sub->wait_ahead = NULL;
}

/* Give one outstanding wait back, if any (takes the lock). */
static void wait_drop(remora_sub_h sub, rm_op_t **op)
{
    if (*op == NULL)
        return;
    rm_engine_lock(sub->client->ctx);
    rm_client_op_abandon(*op);
    rm_engine_unlock(sub->client->ctx);
    *op = NULL;
}

/* Give the outstanding waits back (reattach, destroy). */
static void waits_abandon(remora_sub_h sub)
{
    wait_drop(sub, &sub->wait_op);
    wait_drop(sub, &sub->wait_ahead);
}

/* Take the server's answer: the new head and any elements inline. */
static remora_status_t wait_finish(remora_sub_h sub, uint64_t deadline)
{
    remora_client_h c = sub->client;
    rm_op_t *op = sub->wait_op;
    uint64_t t0 = rm_now_ns();

    /* Spin for an answer only while answers come soon (a steady stream of
     * small elements: no sleep/wake on the latency path); answers that take
     * longer (a busy server sharing its pushes among many subscribers) are
     * slept for, leaving the CPU to the processes that produce them. */
    uint64_t spin = 2 * sub->wait_avg_ns;
    if (spin > RM_SUB_SPIN_MAX_NS)
        spin = (uint64_t)c->ctx->spin_us * 1000u;
    if (spin < (uint64_t)c->ctx->spin_us * 1000u)
        spin = (uint64_t)c->ctx->spin_us * 1000u;
    if (rm_engine_wait_spin(c->ctx, &op->done, deadline, spin) != REMORA_OK)
        return REMORA_ERR_TIMED_OUT; /* still armed; the next call goes on waiting */
    uint64_t took = rm_now_ns() - t0;
    sub->wait_avg_ns = sub->wait_avg_ns ? (sub->wait_avg_ns * 7 + took) / 8 : took;
    rm_engine_lock(c->ctx);
    remora_status_t st = op->status;
    rm_hdr_t h = op->reply_hdr;
    uint64_t claimed = op->push_claimed;
    size_t body_cap = op->reply_cap; /* a push's buffer: what it holds */
    uint8_t *body = op->reply;
    size_t len = op->reply_len;
    int push_req = op->push_req;
    rm_op_t *follow = op->follow; /* the wait its push sent, if any */
    op->reply  = NULL;
    op->follow = NULL;
    rm_client_op_free(op);
    rm_engine_unlock(c->ctx);
    sub->wait_op    = sub->wait_ahead; /* the one armed behind it, if any */
    sub->wait_want  = sub->ahead_want;
    sub->wait_ahead = NULL;

    int push = push_req && h.length && len == h.length * sub->shape.stride;
    if (st == REMORA_OK && (h.length > sub->shape.capacity || h.size >= (1ull << 62) ||
                            (len != h.length * sub->shape.elem_size && !push) ||
                            h.offset > h.size || h.length > h.size - h.offset))
        st = REMORA_ERR_PROTOCOL;
    /* The follow-up stays only behind a good push, for a consumer that is
     * still pushed to (a GPU consumer fetches from its first element on). */
    if (st != REMORA_OK || !push || !sub->use_push)
        wait_drop(sub, &follow);
    if (st != REMORA_OK) {
        free(body);
        return st;
    }
    if (h.size > sub->known_head)
        sub->known_head = h.size;
    sub->sparse = h.length <= 1;
    if (push) {
        /* Whole slots, sent from the ring, and the server's verdict: the
         * ring's `claimed` once they were out. The slots it may have touched
         * meanwhile are discarded, as for a fetch. The next wait goes out
         * before delivery, so the server can push again meanwhile. */
        free(sub->push_body);
        sub->push_body = body;
        sub->push_body_full = body_cap >= sub->push_cap; /* reusable as a spare */
        sub->f_first   = h.offset;
        sub->f_count   = h.length;
        batch_check(sub, claimed);
        if (follow != NULL) { /* already asked for what follows (push_follow) */
            rm_engine_lock(c->ctx);
            sub->wait_op   = follow_arm(sub, follow); /* the pipe stays two deep */
            sub->wait_want = h.offset + h.length;
            rm_engine_unlock(c->ctx);
            rm_engine_hand_off(c->ctx);
        } else if (wait_send(sub, h.offset + h.length) != REMORA_OK) {
            sub->wait_op = NULL; /* the elements in hand go out first; the next call fails */
        } else {
            rm_engine_hand_off(c->ctx); /* the next push lands while these are consumed */
        }
        return REMORA_OK;
    }
    if (h.length) {
        sub_body_release(sub);
        sub->inline_body = body;
        sub->cur = (rm_batch_t){.data = body, .pitch = sub->shape.elem_size,
                                .first = h.offset, .count = h.length};
        if (sub->mode == REMORA_SUB_EVERY && h.length > 1 && h.offset + h.length > sub->next &&
            sub->wait_op == NULL) {
            /* Under load (several came): ask for what follows now, so the
             * round trip overlaps with delivery. A lone element goes to the
             * consumer first; the wait armed behind this one (paced
             * streams) or the next call's covers what follows. */
            if (wait_send(sub, h.offset + h.length) != REMORA_OK)
                sub->wait_op = NULL; /* the elements in hand go out first; the next call fails */
        }
    } else if (sub->use_push && body && body_cap >= sub->push_cap) {
        spare_put(sub, body); /* a lent buffer that came back empty */
    } else {
        free(body);
    }
    return st;
}

/* ------------------------------------------------------------ fetches */

/* Bytes from one element to the next in the fetch buffers. */
static size_t sub_pitch(const remora_sub_h sub)
{
    return sub->shape.data_stride ? sub->shape.data_stride : sub->shape.stride;
}

/* Read count slots' worth of `unit` bytes each, from slot `slot` on, wrapping:
 * one or two reads of region name at base, into dst; requests go to req[0..1]. */
static remora_status_t read_slots(remora_sub_h sub, const char *name, uint64_t base,
                                  uint64_t unit, uint64_t slot, uint64_t count, uint8_t *dst,
                                  remora_request_h req[2])
{
    uint64_t n1 = sub->shape.capacity - slot;
    remora_status_t st;

    if (n1 > count)
        n1 = count;
    st = remora_client_read_nb(sub->client, name, base + slot * unit, dst, n1 * unit, &req[0]);
    if (st == REMORA_OK && count > n1) /* the batch wraps: the rest from slot 0 */
        st = remora_client_read_nb(sub->client, name, base, dst + n1 * unit,
                                   (count - n1) * unit, &req[1]);
    return st;
}

static void fetch_cancel(remora_sub_h sub)
{
    int ended = 1;

    for (int i = 0; i < 4; i++) {
        ended &= rm_request_release_ended(sub->f_req[i]);
        sub->f_req[i] = NULL;
    }
    if (!ended) {
        /* A read still in flight after its connection was closed (leaked):
         * it may still write into the fetch buffers and f_hdr, so the
         * subscription takes nothing more and destroy leaves them to it. */
        rm_error("a ring fetch outlived its connection: the subscription stops");
        sub->leaked = 1;
    }
    free(sub->push_body);
    sub->push_body = NULL;
    sub->stage = FETCH_IDLE;
}

/* Whether the client is still on the connection we are attached on; fetches
 * check it before and after, so that no element of another connection (maybe
 * another server instance) is taken for one of ours. */
static int sub_on_own_link(remora_sub_h sub)
{
    remora_client_h c = sub->client;

    rm_engine_lock(c->ctx);
    int same = !c->disconnected && c->conn_gen == sub->gen;
    rm_engine_unlock(c->ctx);
    return same;
}

static remora_status_t fetch_start(remora_sub_h sub, uint64_t first, uint64_t count)
{
    const rm_ring_shape_t *s = &sub->shape;
    uint64_t slot = first % s->capacity;
    remora_status_t st;

    if (!sub_on_own_link(sub))
        return REMORA_ERR_DISCONNECTED;

    if (sub->fbuf[!sub->fcur] == NULL &&
        (sub->fbuf[!sub->fcur] = malloc(sub->batch_max * sub_pitch(sub))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if (s->data_stride && sub->f_stamps == NULL &&
        (sub->f_stamps = malloc(sub->batch_max * RM_RING_STAMP_LEN)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    uint8_t *buf = sub->fbuf[!sub->fcur];

    memset(sub->f_req, 0, sizeof(sub->f_req));
    if (s->data_stride == 0) { /* stamps and elements together, in the slots */
        st = read_slots(sub, sub->name, RM_RING_HDR_LEN, s->stride, slot, count, buf, sub->f_req);
    } else { /* a GPU ring: stamps from its control block, elements from NAME#data */
        st = read_slots(sub, sub->name, RM_RING_HDR_LEN, RM_RING_STAMP_LEN, slot, count,
                        sub->f_stamps, sub->f_req);
        if (st == REMORA_OK)
            st = read_slots(sub, sub->data_name, 0, s->data_stride, slot, count, buf,
                            sub->f_req + 2);
    }
    /* Reads go by name: the name must still be the ring we follow, not
     * another exposed under it since (its elements are not ours). */
    uint32_t id = st == REMORA_OK ? rm_request_region_id(sub->f_req[0]) : 0;
    if (st == REMORA_OK && id != sub->region_id)
        st = REMORA_ERR_NOT_FOUND;
    if (st != REMORA_OK) {
        fetch_cancel(sub);
        return st;
    }
    sub->f_first = first;
    sub->f_count = count;
    sub->stage   = FETCH_DATA;
    return REMORA_OK;
}

/* Wait for the fetch's requests; TIMED_OUT leaves them in flight. */
static remora_status_t fetch_wait(remora_sub_h sub, uint64_t deadline)
{
    for (int i = 0; i < 4; i++) {
        if (sub->f_req[i] == NULL)
            continue;
        remora_status_t st = remora_request_wait(sub->f_req[i], ms_left(deadline));
        if (st == REMORA_ERR_TIMED_OUT)
            return st;
        remora_request_release(sub->f_req[i]);
        sub->f_req[i] = NULL;
        if (st != REMORA_OK) {
            fetch_cancel(sub);
            return st;
        }
    }
    return REMORA_OK;
}

/* Adapt the batch to how much of the last fetch survived. */
static void batch_adapt(remora_sub_h sub, uint64_t fetched, uint64_t intact)
{
    if (intact * 2 < fetched && sub->batch > 1)
        sub->batch /= 2;
    else if (intact == fetched && sub->batch < sub->batch_max)
        sub->batch = sub->batch * 2 < sub->batch_max ? sub->batch * 2 : sub->batch_max;
}

/* The header read after the data: which copied elements are intact. */
static remora_status_t fetch_validate(remora_sub_h sub)
{
    const rm_ring_shape_t *s = &sub->shape;
    rm_ring_shape_t now;

    if (rm_ring_hdr_parse_live(sub->f_hdr, RM_RING_HDR_LEN, sub->region_size, &now) != 0 ||
        now.elem_size != s->elem_size || now.capacity != s->capacity)
        return REMORA_ERR_PROTOCOL;
    if (now.head > sub->known_head)
        sub->known_head = now.head;
    batch_check(sub, now.claimed);
    return REMORA_OK;
}

/* Which copied elements are intact, given the ring's `claimed` after the
 * copy; the intact ones become the batch in hand. */
static void batch_check(remora_sub_h sub, uint64_t claimed)
{
    const rm_ring_shape_t *s = &sub->shape;
    uint8_t *buf = sub->push_body ? sub->push_body : sub->fbuf[!sub->fcur];
    uint64_t end = sub->f_first + sub->f_count, lo = sub->f_first;

    if (claimed > s->capacity && claimed - s->capacity > lo)
        lo = claimed - s->capacity < end ? claimed - s->capacity : end;
    const uint8_t *stamps = s->data_stride ? sub->f_stamps : buf;
    size_t stamp_pitch    = s->data_stride ? RM_RING_STAMP_LEN : s->stride;
    for (uint64_t seq = lo; seq < end; seq++) /* belt and braces: the stamps agree */
        if (rm_ring_get64(stamps + (seq - sub->f_first) * stamp_pitch) != rm_ring_stamp_done(seq))
            lo = seq + 1;
    sub->discarded += lo - sub->f_first;
    if (sub->push_body) { /* the slots become the batch in hand */
        sub_body_release(sub);
        sub->inline_body = sub->push_body;
        sub->inline_push = sub->push_body_full;
        sub->push_body   = NULL;
    } else {
        batch_adapt(sub, sub->f_count, end - lo);
        sub->fcur = !sub->fcur;
    }
    size_t skip = s->data_stride ? 0 : RM_RING_STAMP_LEN;
    sub->cur  = (rm_batch_t){.data  = buf + (lo - sub->f_first) * sub_pitch(sub) + skip,
                             .pitch = sub_pitch(sub), .first = lo, .count = end - lo};
}

static remora_status_t fetch_finish(remora_sub_h sub, uint64_t deadline)
{
    remora_status_t st;

    if (sub->stage == FETCH_DATA) {
        if ((st = fetch_wait(sub, deadline)) != REMORA_OK)
            return st;
        st = remora_client_read_nb(sub->client, sub->name, 0, sub->f_hdr, RM_RING_HDR_LEN,
                                   &sub->f_req[0]);
        if (st != REMORA_OK) {
            sub->stage = FETCH_IDLE;
            return st;
        }
        sub->stage = FETCH_HDR;
    }
    if ((st = fetch_wait(sub, deadline)) != REMORA_OK)
        return st;
    sub->stage = FETCH_IDLE;
    if (!sub_on_own_link(sub))
        return REMORA_ERR_DISCONNECTED; /* the data may be of the new connection */
    return fetch_validate(sub);
}

/*
 * Start fetching what the ring holds from `from` on, if anything. A
 * subscriber that fell behind does not start at the oldest element: the
 * producer is about to overwrite it, and chasing the tail would lose every
 * batch. It skips to the newest `batch` elements, which leaves the producer
 * the rest of the ring to fill before any of them is touched (the skipped
 * elements are drops). The batch adapts: it halves when most of a fetch was
 * overwritten meanwhile (a producer faster than the network, a small ring)
 * and doubles back when a fetch comes through whole.
 */
static remora_status_t fetch_more(remora_sub_h sub, uint64_t from)
{
    uint64_t head = sub->known_head, cap = sub->shape.capacity, n = sub->batch;

    if (sub->mode == REMORA_SUB_LATEST)
        from = head - 1;
    if (head > cap && from < head - cap + n) /* within a batch of being overwritten */
        from = head - n;
    if (from >= head)
        return REMORA_OK;
    uint64_t count = head - from;
    return fetch_start(sub, from, count < n ? count : n);
}

/* ------------------------------------------------------------ delivery */

/* Hand out the next element of the current batch, if any. */
static int batch_take(remora_sub_h sub, const void **elem_p, remora_elem_info_t *info)
{
    rm_batch_t *b = &sub->cur;

    if (sub->mode == REMORA_SUB_LATEST && b->pos < b->count)
        b->pos = b->count - 1; /* only the newest matters */
    while (b->pos < b->count && b->first + b->pos < sub->next)
        b->pos++; /* already delivered (an answer overlapping a fetch) */
    if (b->pos >= b->count)
        return 0;
    uint64_t seq = b->first + b->pos;
    sub->drops += seq - sub->next;
    sub->next = seq + 1;
    *elem_p = b->data + b->pos * b->pitch;
    b->pos++;
    info->field_mask = RM_ELEM_INFO_FIELDS;
    info->seq        = seq;
    info->drops      = sub->drops;
    info->size       = sub->shape.elem_size;
    return 1;
}

static remora_status_t ring_header(remora_client_h c, const char *name, uint64_t *size_p,
                                   rm_ring_shape_t *shape, uint32_t *id_p);

/* Whether the client's connection is another than the one we are attached on. */
static int sub_stale(remora_sub_h sub)
{
    remora_client_h c = sub->client;

    rm_engine_lock(c->ctx);
    int stale = c->rc_has_thread && !c->disconnected && c->conn_gen != sub->gen;
    rm_engine_unlock(c->ctx);
    return stale;
}

/*
 * Attach again after a reconnect: drop what was in flight on the old
 * connection (all of it failed and called back: the reconnect waited for
 * that), look the ring up on the new one, and go on (see the design notes).
 */
#define RM_REATTACH_GRACE_MS 2000

static remora_status_t sub_reattach(remora_sub_h sub, uint64_t deadline)
{
    remora_client_h c = sub->client;
    rm_ring_shape_t shape;
    uint64_t size, gen, instance;
    uint32_t id;
    remora_status_t st;

    if ((st = rm_client_await_link(c, deadline, &gen, &instance)) != REMORA_OK)
        return st;
    fetch_cancel(sub);
    waits_abandon(sub);
    sub->cur.pos = sub->cur.count;
    /* A server that has just started listens before it has exposed its
     * rings (ms, but a reconnect can land in them): a new instance gets a
     * short grace before NOT_FOUND means the ring is gone. */
    uint64_t grace = rm_deadline_ns(RM_REATTACH_GRACE_MS);
    while ((st = ring_header(c, sub->name, &size, &shape, &id)) == REMORA_ERR_NOT_FOUND &&
           instance != sub->instance && rm_now_ns() < grace && rm_now_ns() < deadline)
        usleep(20000);
    if (st != REMORA_OK)
        return st; /* NOT_FOUND: the ring is gone; DISCONNECTED: again */
    if (shape.elem_size != sub->shape.elem_size || shape.capacity != sub->shape.capacity ||
        shape.stride != sub->shape.stride || shape.data_stride != sub->shape.data_stride) {
        rm_info("ring '%s' has another shape after the reconnect", sub->name);
        return REMORA_ERR_NOT_FOUND;
    }
    /* On the same instance, another region under the name is another ring,
     * exposed while we were away: NOT_FOUND, as a subscriber that stayed
     * connected hears. A new instance numbers its regions afresh. */
    if (instance == sub->instance && id != sub->region_id) {
        rm_info("ring '%s' was replaced while the connection was down", sub->name);
        return REMORA_ERR_NOT_FOUND;
    }
    sub->region_size = size;
    sub->region_id   = id;
    if (instance != sub->instance) {
        sub->next       = 0; /* a new ring: its numbering starts again */
        sub->known_head = shape.head;
    } else if (shape.head > sub->known_head) {
        sub->known_head = shape.head;
    }
    /* The header read above may be of a connection that failed meanwhile;
     * then the next step fails and we come here again. */
    sub->gen      = gen;
    sub->instance = instance;
    rm_debug("subscription to '%s' re-attached (%s instance), from seq %llu", sub->name,
             sub->next ? "same" : "new", (unsigned long long)sub->next);
    return REMORA_OK;
}

/* A step failed with st: after a reconnect (or while one runs) re-attach,
 * REMORA_OK to go on; anything else ends this call with that status. */
static remora_status_t sub_recover(remora_sub_h sub, remora_status_t st, uint64_t deadline)
{
    remora_client_h c = sub->client;

    /* A region lookup on a connection made since we attached may miss the
     * ring of a restarted server that has not exposed it yet: re-attaching
     * gives it its grace. */
    if (st == REMORA_ERR_NOT_FOUND) {
        rm_engine_lock(c->ctx);
        if (c->rc_has_thread && c->conn_gen != sub->gen)
            st = REMORA_ERR_DISCONNECTED;
        rm_engine_unlock(c->ctx);
    }
    if (st != REMORA_ERR_DISCONNECTED)
        return st;
    rm_engine_lock(c->ctx);
    int follows = c->rc_has_thread && (c->reconnecting || c->conn_gen != sub->gen);
    rm_engine_unlock(c->ctx);
    if (!follows)
        return st;
    return sub_reattach(sub, deadline);
}

/* The next element, pointing into the subscription's buffers (valid until the next call). */
static remora_status_t sub_take(remora_sub_h sub, const void **elem_p, remora_elem_info_t *info,
                                uint64_t deadline)
{
    remora_status_t st;

    for (;;) {
        if (sub->leaked)
            return REMORA_ERR_IO; /* see fetch_cancel */
        if (batch_take(sub, elem_p, info)) {
            /* Keep the pipe full: the next batch travels while this one is consumed. */
            if (!sub->use_inline && !sub->use_push && sub->stage == FETCH_IDLE &&
                sub->mode == REMORA_SUB_EVERY &&
                sub->known_head > sub->cur.first + sub->cur.count &&
                fetch_more(sub, sub->cur.first + sub->cur.count) == REMORA_OK)
                rm_engine_hand_off(sub->client->ctx); /* it moves while we deliver */
            return REMORA_OK;
        }
        if (sub_stale(sub)) {
            st = sub_reattach(sub, deadline);
            goto check;
        }
        if (sub->stage != FETCH_IDLE) {
            st = fetch_finish(sub, deadline);
            goto check;
        }
        if (sub->wait_op == NULL) {
            if (!sub->use_inline && !sub->use_push && sub->mode == REMORA_SUB_EVERY &&
                sub->known_head > sub->next) {
                st = fetch_more(sub, sub->next);
                goto check;
            }
            if ((st = wait_send(sub, sub->next)) != REMORA_OK)
                goto check;
        }
        wait_ahead_send(sub);
        if ((st = wait_finish(sub, deadline)) != REMORA_OK)
            goto check;
        /* Nothing came inline (too large, or lost while the server copied it). */
        if (!sub->use_push && sub->cur.pos >= sub->cur.count && sub->known_head > sub->next &&
            sub->stage == FETCH_IDLE)
            st = fetch_more(sub, sub->next);
check:
        if (st != REMORA_OK && (st = sub_recover(sub, st, deadline)) != REMORA_OK)
            return st;
    }
}

/*
 * Hand an element to the consumer's buffer; a GPU buffer gets a CUDA copy
 * (camera-to-GPU). The fetch buffers are pinned on first such copy so that
 * it runs at full PCIe speed.
 */
static remora_status_t sub_copy_out(remora_sub_h sub, void *buf, const void *elem)
{
    rm_ptr_kind_t kind = RM_PTR_HOST;
    int dev;

    /* Consumers reuse one buffer: classify it once, not per element. */
    if (buf == sub->last_buf) {
        kind = sub->last_kind;
    } else {
        if (rm_cuda_in_process())
            rm_cuda_ptr_kind(buf, &kind, &dev);
        sub->last_buf  = buf;
        sub->last_kind = kind;
    }
    if (kind == RM_PTR_HOST || kind == RM_PTR_PINNED_HOST) {
        memcpy(buf, elem, sub->shape.elem_size);
        return REMORA_OK;
    }
    if (kind == RM_PTR_MANAGED)
        return REMORA_ERR_UNSUPPORTED;
    /* A GPU consumer fetches into the pinned buffers below from now on
     * rather than taking pushes into pageable ones: cuMemcpy from pageable
     * memory held a ring of 1 MiB elements into GPU memory to 0.70x of the
     * same into host memory (H100 host, docs/performance.md). */
    sub->use_push = 0;
    for (int i = 0; i < 2 && !sub->pinned; i++)
        if (sub->fbuf[i] == NULL)
            sub->fbuf[i] = malloc(sub->batch_max * sub_pitch(sub));
    if (!sub->pinned && sub->fbuf[0] && sub->fbuf[1] &&
        rm_cuda_host_register(sub->fbuf[0], sub->batch_max * sub_pitch(sub)) == REMORA_OK) {
        if (rm_cuda_host_register(sub->fbuf[1], sub->batch_max * sub_pitch(sub)) == REMORA_OK)
            sub->pinned = 2;
        else
            sub->pinned = 1;
    }
    return rm_cuda_copy(buf, elem, sub->shape.elem_size);
}

/* The fields of the caller's *info that it asked for (info may be NULL). */
static void elem_info_out(remora_elem_info_t *info, uint64_t want, const remora_elem_info_t *mine)
{
    if (info == NULL)
        return;
    if (want & REMORA_ELEM_INFO_FIELD_SEQ)
        info->seq = mine->seq;
    if (want & REMORA_ELEM_INFO_FIELD_DROPS)
        info->drops = mine->drops;
    if (want & REMORA_ELEM_INFO_FIELD_SIZE)
        info->size = mine->size;
    info->field_mask = want;
}

static remora_status_t elem_info_wanted(const remora_elem_info_t *info, uint64_t *want_p)
{
    *want_p = 0;
    return info == NULL ? REMORA_OK
                        : rm_fields_wanted(info->field_mask, RM_ELEM_INFO_FIELDS,
                                           RM_ELEM_INFO_FIELDS, want_p);
}

remora_status_t remora_sub_next(remora_sub_h sub, void *buf, size_t len,
                                remora_elem_info_t *info, int timeout_ms)
{
    remora_elem_info_t mine;
    const void *elem;
    remora_status_t st;
    uint64_t want;

    if (sub == NULL || buf == NULL || len < sub->shape.elem_size || sub->cb ||
        elem_info_wanted(info, &want) != REMORA_OK)
        return REMORA_ERR_INVALID_PARAM;
    uint64_t deadline = rm_deadline_ns(timeout_ms < 0 ? sub->client->timeout_ms : timeout_ms);
    if ((st = sub_take(sub, &elem, &mine, deadline)) != REMORA_OK)
        return st;
    if ((st = sub_copy_out(sub, buf, elem)) != REMORA_OK)
        return st;
    elem_info_out(info, want, &mine);
    return REMORA_OK;
}

remora_status_t remora_sub_next_ref(remora_sub_h sub, const void **elem_p,
                                    remora_elem_info_t *info, int timeout_ms)
{
    remora_elem_info_t mine;
    remora_status_t st;
    uint64_t want;

    if (sub == NULL || elem_p == NULL || sub->cb || elem_info_wanted(info, &want) != REMORA_OK)
        return REMORA_ERR_INVALID_PARAM;
    uint64_t deadline = rm_deadline_ns(timeout_ms < 0 ? sub->client->timeout_ms : timeout_ms);
    if ((st = sub_take(sub, elem_p, &mine, deadline)) == REMORA_OK)
        elem_info_out(info, want, &mine);
    return st;
}

static void *sub_thread(void *arg)
{
    remora_sub_h sub = arg;
    remora_elem_info_t info;
    const void *elem;

    while (!atomic_load(&sub->stop)) {
        remora_status_t st = sub_take(sub, &elem, &info, rm_deadline_ns(RM_SUB_CB_POLL_MS));
        if (st == REMORA_OK) {
            sub->cb(elem, &info, REMORA_OK, sub->cb_arg);
        } else if (st != REMORA_ERR_TIMED_OUT) {
            sub->cb(NULL, NULL, st, sub->cb_arg);
            break;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ lifetime */

/* The ring behind name: its region size and checked header, and with id_p
 * the region's id, taken first (a ring exposed under the name after this
 * is another one: waits and fetches check the id). */
static remora_status_t ring_header(remora_client_h c, const char *name, uint64_t *size_p,
                                   rm_ring_shape_t *shape, uint32_t *id_p)
{
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE |
                                               REMORA_REGION_INFO_FIELD_KIND};
    uint8_t hdr[RM_RING_HDR_LEN];
    rm_rregion_t *r;
    remora_status_t st;

    if (id_p != NULL) {
        if ((st = rm_client_region_get(c, name, rm_deadline_ns(c->timeout_ms), &r)) != REMORA_OK)
            return st; /* lock held only on success */
        *id_p = r->id;
        rm_engine_unlock(c->ctx);
    }
    if ((st = remora_client_lookup(c, name, &info)) != REMORA_OK)
        return st;
    if (info.kind != REMORA_REGION_RING) {
        rm_info("region '%s' is not a ring", name);
        return REMORA_ERR_INVALID_PARAM;
    }
    if (info.size < RM_RING_HDR_LEN)
        return REMORA_ERR_PROTOCOL;
    if ((st = remora_client_read(c, name, 0, hdr, sizeof(hdr))) != REMORA_OK)
        return st;
    if (rm_ring_hdr_parse_live(hdr, sizeof(hdr), info.size, shape) != 0) {
        rm_warn("ring '%s' has a malformed header", name);
        return REMORA_ERR_PROTOCOL;
    }
    *size_p = info.size;
    return REMORA_OK;
}

static remora_status_t sub_apply_params(remora_sub_h sub, const remora_sub_params_t *p)
{
    size_t batch = RM_SUB_BATCH_DEFAULT;

    if (p && (p->field_mask & REMORA_SUB_FIELD_MODE)) {
        if (p->mode != REMORA_SUB_EVERY && p->mode != REMORA_SUB_LATEST)
            return REMORA_ERR_INVALID_PARAM;
        sub->mode = p->mode;
    }
    if (p && (p->field_mask & REMORA_SUB_FIELD_CB)) {
        if (p->cb == NULL)
            return REMORA_ERR_INVALID_PARAM;
        sub->cb     = p->cb;
        sub->cb_arg = p->cb_arg;
    }
    if (p && (p->field_mask & REMORA_SUB_FIELD_BATCH_BYTES))
        batch = p->batch_bytes;
    sub->batch_max = batch / sub_pitch(sub);
    if (sub->batch_max == 0)
        sub->batch_max = 1;
    if (sub->batch_max > sub->shape.capacity)
        sub->batch_max = sub->shape.capacity;
    sub->batch = sub->batch_max;
    /* REMORA_RING_INLINE (bytes, 0: never) lets tests force the fetch path. */
    sub->inline_max = rm_env_u64("REMORA_RING_INLINE", RM_SUB_INLINE_MAX, 0, RM_SUB_INLINE_MAX);
    sub->use_inline = sub->shape.elem_size <= sub->inline_max;
    return REMORA_OK;
}

/*
 * Elements too large to come inline are pushed by the server (whole slots,
 * in turn with the other subscribers, each chosen when its send starts)
 * where reads are active messages anyway: the `am` path, unencrypted.
 * Same-host mappings and one-sided lanes keep fetching (no server CPU).
 * REMORA_RING_PUSH (pushes in flight per subscription, default 2; 1: one
 * wait after another; 0: fetches) is for tests and comparisons.
 */
static void sub_choose_push(remora_sub_h sub)
{
    remora_client_h c = sub->client;
    remora_path_t path = REMORA_PATH_AUTO;
    uint64_t depth = rm_env_u64("REMORA_RING_PUSH", 2, 0, 2);

    if (sub->use_inline || sub->shape.data_stride || depth == 0 ||
        remora_client_region_path(c, sub->name, &path) != REMORA_OK || path != REMORA_PATH_AM)
        return;
    sub->push_follow = depth > 1;
    rm_engine_lock(c->ctx);
    sub->use_push = c->peer.seal == NULL;
    rm_engine_unlock(c->ctx);
    sub->push_cap = sub->batch_max * sub->shape.stride;
}

remora_status_t remora_client_subscribe(remora_client_h c, const char *name,
                                        const remora_sub_params_t *params, remora_sub_h *sub_p)
{
    remora_sub_h sub;
    remora_status_t st;

    if (c == NULL || sub_p == NULL || !rm_name_valid(name))
        return REMORA_ERR_INVALID_PARAM;
    if ((sub = calloc(1, sizeof(*sub))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    sub->client = c;
    snprintf(sub->name, sizeof(sub->name), "%s", name);
    snprintf(sub->data_name, sizeof(sub->data_name), "%s%s", name, RM_RING_DATA_SUFFIX);
    /* The connection the header comes by, or an older one: then the first
     * call re-attaches. */
    rm_engine_lock(c->ctx);
    sub->gen      = c->conn_gen;
    sub->instance = c->server_instance;
    rm_engine_unlock(c->ctx);
    if ((st = ring_header(c, name, &sub->region_size, &sub->shape, &sub->region_id)) !=
            REMORA_OK ||
        (st = sub_apply_params(sub, params)) != REMORA_OK)
        goto err;
    sub_choose_push(sub);
    /* Follow from now on. */
    sub->next = sub->known_head = sub->shape.head;
    rm_client_sub_attach(c);
    if (sub->cb) {
        if (pthread_create(&sub->thread, NULL, sub_thread, sub) != 0) {
            rm_client_sub_detach(c);
            st = REMORA_ERR_NO_MEMORY;
            goto err;
        }
        sub->has_thread = 1;
    }
    *sub_p = sub;
    return REMORA_OK;
err:
    free(sub->fbuf[0]);
    free(sub->fbuf[1]);
    free(sub);
    return st;
}

size_t remora_sub_elem_size(remora_sub_h sub) { return sub ? sub->shape.elem_size : 0; }

uint64_t remora_sub_discarded(remora_sub_h sub) { return sub ? sub->discarded : 0; }

void remora_sub_destroy(remora_sub_h sub)
{
    if (sub == NULL)
        return;
    if (sub->has_thread) {
        atomic_store(&sub->stop, 1);
        pthread_join(sub->thread, NULL);
    }
    fetch_cancel(sub);
    waits_abandon(sub);
    rm_client_sub_detach(sub->client); /* may free a client already disconnected */
    if (sub->leaked)
        return; /* a read may still write into it: see fetch_cancel */
    free(sub->inline_body);
    free(sub->push_body);
    free(sub->spare[0]);
    free(sub->spare[1]);
    free(sub->f_stamps);
    for (int i = 0; i < sub->pinned; i++)
        rm_cuda_host_unregister(sub->fbuf[i]);
    free(sub->fbuf[0]);
    free(sub->fbuf[1]);
    free(sub);
}

/* ------------------------------------------------------------ clone */

remora_status_t remora_client_clone_ring(remora_client_h c, const char *name,
                                         remora_ring_h *ring_p)
{
    rm_ring_shape_t shape, after;
    uint8_t hdr[RM_RING_HDR_LEN];
    uint64_t size;
    uint8_t *image;
    remora_status_t st;

    if (c == NULL || ring_p == NULL || !rm_name_valid(name))
        return REMORA_ERR_INVALID_PARAM;
    if ((st = ring_header(c, name, &size, &shape, NULL)) != REMORA_OK)
        return st;
    if (size > SIZE_MAX || (image = malloc(size)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    /* The whole ring in one read, then the header again: what the producer
     * claimed meanwhile marks the elements that may be torn. */
    if ((st = remora_client_read(c, name, 0, image, size)) == REMORA_OK &&
        (st = remora_client_read(c, name, 0, hdr, sizeof(hdr))) == REMORA_OK) {
        if (rm_ring_hdr_parse_live(hdr, sizeof(hdr), size, &after) != 0) {
            st = REMORA_ERR_PROTOCOL;
        } else {
            /* Elements the producer committed after we started copying may
             * have been copied half before, half after: only those below the
             * head seen before the copy count. */
            uint64_t min_valid = after.claimed > shape.capacity ? after.claimed - shape.capacity : 0;
            st = rm_ring_from_image(c->ctx, image, size, min_valid, shape.head, 1, ring_p);
        }
    }
    free(image);
    return st;
}
