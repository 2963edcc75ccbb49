/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Stream-ordered operations: put, get, signal, wait and flush enqueued on a
 * CUDA stream, with nothing but the CUDA driver's stream memory operations
 * and a proxy thread (GPUDirect Async without the NIC driver). docs/stream.md
 * has the user's view; this is the mechanism.
 *
 * Design notes
 * - A channel is one (client, stream) pair (client NULL: waits on local
 *   signals, which need no connection). It owns a page of host memory,
 *   page-locked and mapped for the GPU, holding two 64-bit words on
 *   separate cache lines: READY (written by the stream) and DONE (written
 *   by the proxy), and a pinned inline ring of RM_STREAM_RING bytes.
 * - Live operations (the stream is not being captured) are numbered 1, 2,
 *   3... per channel. Enqueueing appends a descriptor to the channel's queue
 *   and puts on the stream: [a copy of a small GPU or pinned source into
 *   the next place of the inline ring] "write READY = seq" [then, for
 *   operations later work must wait for, "wait DONE >= seq"]. Signals and
 *   puts whose source went to the ring do not wait: a stream can queue
 *   thousands of them, and the proxy takes all that became ready in one
 *   pass; a ring place is reused only after the stream waited for the DONE
 *   of the put that had it (ring_take). Gets, and puts the proxy reads in
 *   place (large or pageable sources), wait. The proxy runs descriptors
 *   whose seq <= READY on the client's ordinary data path
 *   (remora_client_write_nb / read_nb, SIGNAL and WRITE_SIGNAL messages),
 *   completes them in order and publishes the longest completed prefix in
 *   DONE.
 * - Captured operations (CUDA graph capture) cannot use sequence numbers:
 *   a replay writes the same values again. Each gets a slot of its own (a
 *   mapped page: READY flag, DONE flag, inline buffer) and the stream does
 *   "write READY = 1; wait DONE == 1; write DONE = 0": the proxy takes the
 *   slot (READY = 0), runs the descriptor, sets DONE = 1. Every replay
 *   re-arms it. Captured operations are therefore synchronous (one
 *   stream<->CPU round trip each); slots live as long as the channel.
 * - Order: the proxy issues a client's operations in order; a signal (or
 *   a small put_signal) is issued only when no earlier data operation of the
 *   channel is in flight, so it is never applied before earlier data is at
 *   the target (earlier signals travel the same endpoint and are applied in
 *   order, so signals pipeline, up to RM_STREAM_INFLIGHT); the server
 *   applies a WRITE_SIGNAL's signal after its data landed. A small
 *   put_signal into a GPU region counts as data for the signals after it
 *   (its data may land by a copy the server finishes later:
 *   sop_holds_signals), and a large put_signal's signal waits for earlier
 *   data as a signal does (sig_due). A captured slot seen ready is taken
 *   only after the channel's live READY was read again (everything the
 *   stream wrote before it is then visible), so live and captured
 *   operations keep stream order.
 * - Direct path (same host, GPU region with a CUDA IPC handle, the client's
 *   path AUTO or IPC): a put or get is a cuMemcpyAsync on the caller's
 *   stream to or from the server's allocation opened by IPC, and a SET
 *   signal is a cuStreamWriteValue64 on the server's signal word, mapped
 *   here from its memory file and registered for the device; the proxy is
 *   not involved. ADD needs an atomic read-modify-write that stream memory
 *   operations lack on host memory, so it always goes through the proxy
 *   (the server applies it). Before a direct operation the stream waits for
 *   the channel's earlier proxy operations (a fence), keeping order.
 * - Errors: an operation that fails still completes (DONE advances); the
 *   channel keeps the first error, writes it to the error word if one is
 *   set (before DONE), and fails every later operation without running it.
 *   An operation in flight longer than the client's timeout aborts the
 *   connection (rm_client_abort), which fails the rest promptly.
 * - Coalescing: signals found ready one right behind the other for the same
 *   word go as one SIGNAL (sop_coalesce): exact final value and order, only
 *   intermediate values skipped; DONE then jumps to the last one's number.
 * - Threads and locks: one proxy thread per context, started on first use.
 *   px->mx (adaptive) guards the channel list, each channel's queue, free
 *   list and slot list; ready, in-flight and freed lists are the proxy
 *   thread's alone. The thread polls while any channel has queued,
 *   in-flight or captured operations: with small client operations in
 *   flight it drives the context's progress (ctx->driver, proxy_drive) and
 *   never naps; otherwise it spins for RM_STREAM_SPIN_NS after its last
 *   progress, then naps RM_STREAM_NAP_NS at a time; with none it sleeps on
 *   px->cv (enqueueing signals it only then). It runs client calls that may
 *   block (a region lookup), which is why it is not the progress thread and
 *   lets go of driving before each: those calls need progress to run.
 *   Enqueueing takes no context lock for regions it checked before (the
 *   channel's cc cache).
 *   Channels are freed only with the thread's agreement (dying -> dead).
 * - Memory a stream may still touch (a channel's page, slots) is never
 *   freed while it might be in use: remora_stream_release() is called after
 *   the stream was synchronized; a disconnect keeps the pages until the
 *   context is destroyed.
 */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mem/cuda.h"
#include "mem/shm.h"
#include "remote/client.h"
#include "remote/signals.h"
#include "util/log.h"
#include "util/time.h"

#define RM_STREAM_PAGE      4096u
#define RM_STREAM_READY     0u   /* word indices in a channel's or slot's page */
#define RM_STREAM_DONE      8u
#define RM_STREAM_INLINE    (64u << 10) /* small sources: copied by the stream */
#define RM_STREAM_RING      (256u << 10) /* a channel's ring of such copies */
#define RM_STREAM_USES      1024u       /* copies in the ring a channel tracks */
#define RM_STREAM_INFLIGHT  64u
#define RM_STREAM_SPIN_NS   2000000u
#define RM_STREAM_NAP_NS    50000
#define RM_STREAM_GONE_MS   3000
#define RM_STREAM_FREE_MAX  1024u /* descriptors a channel keeps for reuse */
#define RM_STREAM_CCACHE    4u    /* regions a channel's checks keep at hand */

enum { SOP_PUT, SOP_PUT_SIGNAL, SOP_SIGNAL, SOP_GET, SOP_WAIT };

typedef struct rm_gslot rm_gslot_t;

/* One operation: a live one, a captured slot's template, or a running
 * instance of a template. */
typedef struct rm_sop {
    rm_list_t        link;
    int              kind;
    uint64_t         seq;       /* live operations */
    rm_gslot_t      *slot;      /* a captured operation's instance */
    char             region[REMORA_NAME_MAX + 1];
    char             signals[REMORA_NAME_MAX + 1];
    uint64_t         offset;
    void            *buf;       /* source (put) or destination (get) */
    size_t           len;
    size_t           index;
    remora_signal_op_t op;
    uint64_t         value;
    remora_signals_h lsig;      /* SOP_WAIT */
    remora_cmp_t     cmp;
    void            *inl;       /* small GPU source: the proxy copies buf here, sends from here */
    int              gpu_target; /* the region is GPU memory (see sop_holds_signals) */
    uint64_t         last_seq;  /* signals merged into this one: DONE goes up to this */
    /* in flight */
    int              phase;     /* put_signal through write_nb: 1 once the signal is out */
    int              sig_due;   /* its data landed; the signal waits for earlier data */
    remora_request_h req;
    rm_op_t         *cop;
    uint64_t         deadline;
    int              complete;
    remora_status_t  status;
} rm_sop_t;

struct rm_gslot {
    rm_list_t  link;
    uint64_t  *words;  /* page: READY, DONE, then the inline buffer */
    void      *dev;
    size_t     len;
    int        busy;   /* taken, not yet done */
    rm_sop_t   tmpl;
};

/* A region or signal array the direct path uses, held while cached. */
typedef struct rm_dcache {
    rm_list_t     link;
    char          name[REMORA_NAME_MAX + 1];
    rm_rregion_t *r;        /* held (users) */
    char         *ipc;      /* GPU region: its first byte, opened by IPC */
    rm_shm_view_t view;     /* signals: the server's words, mapped writable ... */
    void         *sig_dev;  /* ... and registered for the device */
} rm_dcache_t;

/* A place of the inline ring in use: bytes from vstart (a position that only
 * grows; modulo RM_STREAM_RING in the buffer) until operation seq is DONE. */
typedef struct {
    uint64_t vstart;
    uint64_t seq;
} rm_ring_use_t;

typedef struct rm_chan {
    rm_list_t        link;
    struct rm_stream_proxy *px;
    remora_client_h  client;
    void            *stream;
    uint64_t        *words;
    void            *dev;
    uint64_t         next_seq;   /* enqueued (the enqueuing thread) */
    uint64_t         fence_seq;  /* the stream waits for DONE >= this before direct ops */
    uint64_t         ring_head;  /* enqueuing thread: the inline ring's next free place */
    rm_ring_use_t    uses[RM_STREAM_USES]; /* enqueuing thread: places in use, oldest first */
    unsigned         use_first, nuses;
    rm_list_t        queue;      /* live rm_sop_t not yet taken (px->mx) */
    rm_list_t        slots;      /* rm_gslot_t (px->mx) */
    rm_list_t        ready;      /* taken, not issued (proxy thread) */
    rm_list_t        inflight;   /* issued, in order (proxy thread) */
    rm_list_t        freed;      /* done descriptors (proxy thread), to go to free */
    rm_list_t        free;       /* descriptors for reuse (px->mx) */
    unsigned         nfree;
    unsigned         ninflight;
    unsigned         ndata;      /* of those, not signals: what a signal waits for */
    unsigned         nbig;       /* of those, data operations over RM_STREAM_INLINE */
    rm_list_t        dcache;     /* rm_dcache_t (client's lock) */
    struct {
        char          name[REMORA_NAME_MAX + 1];
        rm_rregion_t *r;         /* held (users) */
    } cc[RM_STREAM_CCACHE];      /* enqueueing thread: check_region's cache */
    unsigned         cc_next;
    atomic_int       error;
    int64_t         *err_word;
    int              dying;      /* px->mx: finish everything without running it */
    int              dead;       /* px->mx: the proxy let go of it */
} rm_chan_t;

typedef struct rm_retired_page {
    rm_list_t link;
    void     *p;
} rm_retired_page_t;

struct rm_stream_proxy {
    remora_context_h ctx;
    pthread_t        thread;
    pthread_mutex_t  mx;
    pthread_cond_t   cv;      /* work for the proxy */
    pthread_cond_t   gone_cv; /* a dying channel is dead */
    rm_list_t        chans;
    rm_list_t        retired; /* pages streams may still touch: freed with the context */
    int              stop;
    int              idle;    /* px->mx: asleep on cv (enqueueing wakes it) */
    int              driving; /* proxy thread: it drives ctx's progress (ctx->driver) */
};

static pthread_mutex_t proxy_create_mx = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------ mapped pages */

static remora_status_t page_alloc(size_t len, uint64_t **words_p, void **dev_p)
{
    void *p = NULL;
    remora_status_t st;

    if (posix_memalign(&p, RM_STREAM_PAGE, len) != 0)
        return REMORA_ERR_NO_MEMORY;
    memset(p, 0, len);
    if ((st = rm_cuda_host_register_mapped(p, len, dev_p)) != REMORA_OK) {
        free(p);
        return st;
    }
    *words_p = p;
    return REMORA_OK;
}

/*
 * Channel pages come from a pool registered once per process, at the first
 * stream call (pool_prime), not when a channel is made: registering host
 * memory (cuMemHostRegister) takes hundreds of microseconds and is one of
 * the operations CUDA documents as synchronizing implicitly, so it is better
 * done once, early (a program's first stream call is usually made while its
 * streams are idle), than on the enqueue path of a channel's first
 * operation, when the program's streams may be waiting on one another.
 * Channels beyond the pool register pages as before.
 */
#define RM_STREAM_CHAN_BYTES (RM_STREAM_PAGE + RM_STREAM_RING)
#define RM_STREAM_POOL       16u /* channel pages registered up front */

static struct {
    pthread_mutex_t mx;
    int             primed;  /* atomic: tried */
    char           *base;
    char           *dev;
    uint32_t        free_mask;
} page_pool = {.mx = PTHREAD_MUTEX_INITIALIZER};

static void pool_prime(void)
{
    if (__atomic_load_n(&page_pool.primed, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&page_pool.mx);
    if (!page_pool.primed) {
        void *p = NULL, *dev = NULL;
        size_t len = (size_t)RM_STREAM_POOL * RM_STREAM_CHAN_BYTES;
        if (posix_memalign(&p, RM_STREAM_PAGE, len) == 0) {
            memset(p, 0, len);
            if (rm_cuda_host_register_mapped(p, len, &dev) == REMORA_OK) {
                page_pool.base      = p; /* kept for the life of the process */
                page_pool.dev       = dev;
                page_pool.free_mask = RM_STREAM_POOL >= 32 ? UINT32_MAX : (1u << RM_STREAM_POOL) - 1;
            } else {
                free(p);
            }
        }
        __atomic_store_n(&page_pool.primed, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&page_pool.mx);
}

static int pool_owns(const void *p)
{
    return page_pool.base && (const char *)p >= page_pool.base &&
           (const char *)p < page_pool.base + (size_t)RM_STREAM_POOL * RM_STREAM_CHAN_BYTES;
}

/* A channel's page: zeroed, mapped for the device. */
static remora_status_t chan_page_alloc(uint64_t **words_p, void **dev_p)
{
    pool_prime();
    pthread_mutex_lock(&page_pool.mx);
    if (page_pool.free_mask) {
        unsigned i = (unsigned)__builtin_ctz(page_pool.free_mask);
        page_pool.free_mask &= ~(1u << i);
        pthread_mutex_unlock(&page_pool.mx);
        char *p = page_pool.base + (size_t)i * RM_STREAM_CHAN_BYTES;
        memset(p, 0, RM_STREAM_CHAN_BYTES);
        *words_p = (uint64_t *)p;
        *dev_p   = page_pool.dev + (size_t)i * RM_STREAM_CHAN_BYTES;
        return REMORA_OK;
    }
    pthread_mutex_unlock(&page_pool.mx);
    return page_alloc(RM_STREAM_CHAN_BYTES, words_p, dev_p);
}

static void page_free(void *p)
{
    if (p == NULL)
        return;
    if (pool_owns(p)) {
        unsigned i = (unsigned)(((char *)p - page_pool.base) / RM_STREAM_CHAN_BYTES);
        pthread_mutex_lock(&page_pool.mx);
        page_pool.free_mask |= 1u << i;
        pthread_mutex_unlock(&page_pool.mx);
        return;
    }
    rm_cuda_host_unregister(p);
    free(p);
}

static void *dev_word(void *dev, unsigned index) { return (char *)dev + index * sizeof(uint64_t); }

static uint64_t word_load(uint64_t *w, unsigned index)
{
    return __atomic_load_n(&w[index], __ATOMIC_ACQUIRE);
}

static void word_store(uint64_t *w, unsigned index, uint64_t v)
{
    __atomic_store_n(&w[index], v, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------ the proxy: running ops */

/* While client operations are in flight the proxy thread drives the
 * context's progress itself, as a caller waiting in rm_engine_wait does
 * (ctx->driver): the progress thread stands aside (heartbeats and deferred
 * work go on, see engine.c), replies are seen the moment they arrive, and
 * the proxy does not fight a spinning progress thread for the context's
 * lock. It lets go before anything that may wait for progress (issuing an
 * operation may look a region up), when it has nothing in flight, and
 * before it naps. */
static void proxy_drive(struct rm_stream_proxy *px)
{
    remora_context_h ctx = px->ctx;

    if (!px->driving) {
        int expected = 0;
        if (!atomic_compare_exchange_strong(&ctx->driver, &expected, 1))
            return; /* someone else drives: the replies are seen anyway */
        px->driving = 1;
    }
    rm_engine_try_progress(ctx);
}

static void proxy_undrive(struct rm_stream_proxy *px)
{
    if (px->driving) {
        px->driving = 0;
        atomic_store(&px->ctx->driver, 0);
    }
}

/* Let go and have the progress thread take over at once. */
static void proxy_hand_off(struct rm_stream_proxy *px)
{
    if (px->driving) {
        proxy_undrive(px);
        rm_engine_hand_off(px->ctx);
    }
}

/* One message that sets a signal (SIGNAL, or a small put_signal's
 * WRITE_SIGNAL): issued only when no earlier data is in flight. */
static int sop_is_signal(const rm_sop_t *s)
{
    return s->kind == SOP_SIGNAL || (s->kind == SOP_PUT_SIGNAL && s->len <= RM_STREAM_INLINE);
}

/* Later signals wait for its completion: everything but a SIGNAL and a small
 * put_signal into host memory, which the server applies as they arrive. A
 * small put_signal into a GPU region may land by a copy the server finishes
 * later (staging), and applies its signal then: a SIGNAL right behind it
 * would be applied first. */
static int sop_holds_signals(const rm_sop_t *s)
{
    return !sop_is_signal(s) || (s->kind == SOP_PUT_SIGNAL && s->gpu_target);
}

static int sop_is_big(const rm_sop_t *s)
{
    return s->kind != SOP_SIGNAL && s->kind != SOP_WAIT && s->len > RM_STREAM_INLINE;
}

static int sop_host_buf(const void *p)
{
    rm_ptr_kind_t kind = RM_PTR_HOST;
    int dev;
    rm_cuda_ptr_kind(p, &kind, &dev);
    return kind != RM_PTR_DEVICE;
}

static void sop_finish(rm_sop_t *s, remora_status_t st)
{
    s->status   = st;
    s->complete = 1;
}

static void sop_issue(rm_chan_t *ch, rm_sop_t *s)
{
    remora_client_h c = ch->client;
    remora_status_t st = REMORA_OK;
    uint64_t deadline = c ? rm_deadline_ns(c->timeout_ms) : UINT64_MAX;

    s->deadline = deadline;
    if (s->inl) {
        /* A small GPU source the proxy copies (REMORA_STREAM_COPY=proxy):
         * the stream waits for DONE before it touches it again. */
        if ((st = rm_cuda_copy(s->inl, s->buf, s->len)) != REMORA_OK) {
            sop_finish(s, st);
            return;
        }
        s->buf = s->inl;
        s->inl = NULL;
    }
    switch (s->kind) {
    case SOP_PUT:
        st = remora_client_write_nb(c, s->region, s->offset, s->buf, s->len, &s->req);
        break;
    case SOP_PUT_SIGNAL:
        if (s->len <= RM_STREAM_INLINE && sop_host_buf(s->buf)) {
            st = rm_client_write_signal_send(c, s->region, s->offset, s->buf, s->len, s->signals,
                                             s->index, s->op, s->value, deadline, &s->cop);
            s->phase = 1;
        } else {
            st = remora_client_write_nb(c, s->region, s->offset, s->buf, s->len, &s->req);
        }
        break;
    case SOP_SIGNAL:
        st = rm_client_signal_send(c, s->signals, s->index, s->op, s->value, deadline, &s->cop);
        break;
    case SOP_GET:
        st = remora_client_read_nb(c, s->region, s->offset, s->buf, s->len, &s->req);
        break;
    case SOP_WAIT:
        break; /* polled in sop_poll */
    }
    if (st != REMORA_OK)
        sop_finish(s, st);
}

/* A put_signal whose data landed: its signal, once every earlier operation
 * that holds signals completed (earlier: REMORA_INPROGRESS while one has
 * not, else the first failure among them, or REMORA_OK). After a failure
 * the signal is not sent: it would say that earlier data had arrived. */
static void sop_send_due_signal(rm_chan_t *ch, rm_sop_t *s, remora_status_t earlier)
{
    remora_status_t st = (remora_status_t)atomic_load(&ch->error);

    if (earlier == REMORA_INPROGRESS)
        return; /* the next pass looks again */
    s->sig_due = 0;
    if (st == REMORA_OK)
        st = earlier;
    if (st != REMORA_OK) {
        sop_finish(s, st);
        return;
    }
    s->phase = 1;
    proxy_undrive(ch->px); /* may look the signal array up */
    st = rm_client_signal_send(ch->client, s->signals, s->index, s->op, s->value, s->deadline,
                               &s->cop);
    if (st != REMORA_OK)
        sop_finish(s, st);
}

/* Has s completed? Frees what it used when it has. earlier: the state of
 * the earlier operations that hold signals (sop_send_due_signal). */
static void sop_poll(rm_chan_t *ch, rm_sop_t *s, remora_status_t earlier)
{
    remora_client_h c = ch->client;
    remora_status_t st;

    if (s->complete)
        return;
    if (s->kind == SOP_WAIT) {
        if (ch->dying)
            sop_finish(s, REMORA_ERR_CANCELED);
        else if (rm_signals_cmp(__atomic_load_n(&s->lsig->words[s->index], __ATOMIC_ACQUIRE),
                                s->cmp, s->value))
            sop_finish(s, REMORA_OK);
        return;
    }
    if (s->sig_due) {
        sop_send_due_signal(ch, s, earlier);
        if (s->sig_due)
            goto check_deadline;
        return;
    }
    if (s->req) {
        if ((st = remora_request_test(s->req)) == REMORA_INPROGRESS)
            goto check_deadline;
        remora_request_release(s->req);
        s->req = NULL;
        if (st == REMORA_OK && s->kind == SOP_PUT_SIGNAL && s->phase == 0) {
            s->sig_due = 1; /* the data is at the target: now the signal */
            sop_send_due_signal(ch, s, earlier);
            return;
        }
        sop_finish(s, st);
        return;
    }
    if (s->cop) {
        if (!atomic_load(&s->cop->done))
            goto check_deadline;
        rm_engine_lock(c->ctx);
        st = s->cop->status;
        rm_client_op_free(s->cop);
        rm_engine_unlock(c->ctx);
        s->cop = NULL;
        sop_finish(s, st);
        return;
    }
    sop_finish(s, REMORA_OK);
    return;

check_deadline:
    if (rm_now_ns() > s->deadline) {
        rm_warn("a stream operation did not complete within the client's timeout");
        s->deadline = UINT64_MAX; /* once */
        proxy_undrive(ch->px);
        rm_client_abort(c, REMORA_ERR_TIMED_OUT);
    }
}

/* The first error of a channel: kept, and written for kernels to see. */
static void chan_fail(rm_chan_t *ch, remora_status_t st)
{
    int ok = REMORA_OK;

    if (!atomic_compare_exchange_strong(&ch->error, &ok, (int)st))
        return;
    rm_info("stream operations of a client failed: %s", remora_status_string(st));
    if (ch->err_word) {
        int64_t v = st;
        if (rm_cuda_copy(ch->err_word, &v, sizeof(v)) != REMORA_OK)
            rm_error("cannot write a stream's error word");
    }
}

/* Done with s: onto the proxy's list of freed descriptors, which goes back
 * to the channel's free list under px->mx (proxy_main). */
static void sop_free(rm_chan_t *ch, rm_sop_t *s) { rm_list_push_back(&ch->freed, &s->link); }

/* Merge the live signals right behind s (ready, not yet issued) that update
 * the same word into s: one SIGNAL message for all of them. Exact for the
 * word's final value and for everything ordered after them: ADDs sum
 * (modulo 2^64, as one after the other), a SET replaces what came before
 * it, an ADD after a SET is the SET of the sum. Only the intermediate
 * values, which a waiter could never count on seeing, are skipped. DONE
 * covers them all when s completes. Proxy thread. */
static void sop_coalesce(rm_chan_t *ch, rm_sop_t *s)
{
    if (s->kind != SOP_SIGNAL || s->slot)
        return;
    while (s->link.next != &ch->ready) {
        rm_sop_t *n = rm_container_of(s->link.next, rm_sop_t, link);
        if (n->kind != SOP_SIGNAL || n->slot || n->index != s->index ||
            strcmp(n->signals, s->signals) != 0)
            break;
        if (n->op == REMORA_SIGNAL_SET) {
            s->op    = REMORA_SIGNAL_SET;
            s->value = n->value;
        } else {
            s->value += n->value;
        }
        s->last_seq = n->last_seq;
        rm_list_del(&n->link);
        sop_free(ch, n);
    }
}

/* Issue what is ready, poll what is in flight, publish completions in order.
 * Returns whether anything moved. Proxy thread. */
static int chan_step(rm_chan_t *ch, int dying)
{
    rm_list_t *pos, *tmp;
    int moved = 0;

    while (!rm_list_empty(&ch->ready) && ch->ninflight < RM_STREAM_INFLIGHT) {
        rm_sop_t *s = rm_container_of(ch->ready.next, rm_sop_t, link);
        remora_status_t err = (remora_status_t)atomic_load(&ch->error);

        if (err == REMORA_OK && dying)
            err = REMORA_ERR_CANCELED;
        if (err == REMORA_OK && ch->client && ch->client->disconnected)
            err = ch->client->disc_status;
        if (err != REMORA_OK) {
            sop_finish(s, err);
        } else {
            /* After every earlier data operation is at the target; earlier
             * signals go on the same endpoint and are applied in order. */
            if (sop_is_signal(s) && ch->ndata)
                break;
            sop_coalesce(ch, s);
            proxy_undrive(ch->px); /* issuing may wait for the progress thread */
            sop_issue(ch, s);
        }
        if (sop_holds_signals(s))
            ch->ndata++;
        ch->nbig += sop_is_big(s);
        rm_list_del(&s->link);
        rm_list_push_back(&ch->inflight, &s->link);
        ch->ninflight++;
        moved = 1;
    }
    remora_status_t earlier = REMORA_OK; /* see sop_send_due_signal */
    rm_list_for_each_safe(pos, tmp, &ch->inflight) {
        rm_sop_t *s = rm_container_of(pos, rm_sop_t, link);
        sop_poll(ch, s, earlier);
        if (earlier == REMORA_OK && sop_holds_signals(s))
            earlier = s->complete ? s->status : REMORA_INPROGRESS;
    }
    rm_list_for_each_safe(pos, tmp, &ch->inflight) {
        rm_sop_t *s = rm_container_of(pos, rm_sop_t, link);
        if (!s->complete)
            break;
        if (s->status != REMORA_OK)
            chan_fail(ch, s->status);
        if (s->slot) {
            s->slot->busy = 0;
            word_store(s->slot->words, RM_STREAM_DONE, 1);
        } else {
            word_store(ch->words, RM_STREAM_DONE, s->last_seq);
        }
        rm_list_del(&s->link);
        ch->ninflight--;
        if (sop_holds_signals(s))
            ch->ndata--;
        ch->nbig -= sop_is_big(s);
        if (s->slot)
            free(s); /* an instance of a slot's template */
        else
            sop_free(ch, s);
        moved = 1;
    }
    return moved;
}

/* Under px->mx: move what the stream made ready onto the proxy's list. */
static int chan_take(rm_chan_t *ch)
{
    rm_list_t *pos, *tmp, taken;
    int moved = 0;

    rm_list_init(&taken);
    /* Captured slots first, then the live READY (see the design notes). */
    rm_list_for_each_safe(pos, tmp, &ch->slots) {
        rm_gslot_t *g = rm_container_of(pos, rm_gslot_t, link);
        rm_sop_t *s;
        if (g->busy || word_load(g->words, RM_STREAM_READY) != 1)
            continue;
        if ((s = malloc(sizeof(*s))) == NULL)
            break; /* taken on a later pass */
        *s = g->tmpl;
        s->slot = g;
        g->busy = 1;
        word_store(g->words, RM_STREAM_READY, 0);
        rm_list_push_back(&taken, &s->link);
    }
    uint64_t ready = word_load(ch->words, RM_STREAM_READY);
    rm_list_for_each_safe(pos, tmp, &ch->queue) {
        rm_sop_t *s = rm_container_of(pos, rm_sop_t, link);
        if (s->seq > ready && !ch->dying)
            break;
        rm_list_del(&s->link);
        rm_list_push_back(&ch->ready, &s->link);
        moved = 1;
    }
    rm_list_for_each_safe(pos, tmp, &taken) {
        rm_list_del(pos);
        rm_list_push_back(&ch->ready, pos);
        moved = 1;
    }
    return moved;
}

static int chan_has_work(const rm_chan_t *ch)
{
    return !ch->dead && (!rm_list_empty(&ch->queue) || !rm_list_empty(&ch->slots) ||
                         !rm_list_empty(&ch->ready) || ch->ninflight || ch->dying);
}

/* Under px->mx: the proxy's freed descriptors back to the channel. */
static void chan_recycle(rm_chan_t *ch)
{
    while (!rm_list_empty(&ch->freed)) {
        rm_list_t *l = ch->freed.next;
        rm_list_del(l);
        if (ch->nfree < RM_STREAM_FREE_MAX) {
            rm_list_push_back(&ch->free, l);
            ch->nfree++;
        } else {
            free(rm_container_of(l, rm_sop_t, link));
        }
    }
}

/* Small client operations in flight (not waits on local words): the proxy
 * drives, for latency. Large transfers are bandwidth-bound and left to the
 * progress thread, as for the host call (an H100 run that drove them too
 * gave a 1 MiB stream/host put ratio of 0.56 over TCP; without, 0.84). */
static int chan_remote_inflight(const rm_chan_t *ch)
{
    return ch->client && ch->nbig == 0 && (ch->ninflight || !rm_list_empty(&ch->ready));
}

static void *proxy_main(void *arg)
{
    struct rm_stream_proxy *px = arg;
    uint64_t last = rm_now_ns();

    pthread_mutex_lock(&px->mx);
    while (!px->stop) {
        rm_list_t *pos, *tmp;
        int work = 0, moved = 0, remote = 0;

        rm_list_for_each_safe(pos, tmp, &px->chans)
            work |= chan_has_work(rm_container_of(pos, rm_chan_t, link));
        if (!work) {
            proxy_hand_off(px);
            px->idle = 1;
            pthread_cond_wait(&px->cv, &px->mx);
            px->idle = 0;
            last = rm_now_ns();
            continue;
        }
        rm_list_for_each_safe(pos, tmp, &px->chans) {
            rm_chan_t *ch = rm_container_of(pos, rm_chan_t, link);
            if (ch->dead)
                continue;
            moved |= chan_take(ch);
            int dying = ch->dying;
            /* Channels are freed only once dead, which only this thread
             * declares: ch stays valid while the lock is dropped. */
            pthread_mutex_unlock(&px->mx);
            moved |= chan_step(ch, dying);
            remote |= chan_remote_inflight(ch);
            pthread_mutex_lock(&px->mx);
            chan_recycle(ch);
            if (ch->dying && rm_list_empty(&ch->queue) && rm_list_empty(&ch->ready) &&
                ch->ninflight == 0) {
                ch->dead = 1;
                pthread_cond_broadcast(&px->gone_cv);
            }
        }
        pthread_mutex_unlock(&px->mx);
        uint64_t now = rm_now_ns();
        if (moved)
            last = now;
        if (remote) {
            /* Something is on the wire: no naps, drive the progress. */
            proxy_drive(px);
        } else if (now - last < RM_STREAM_SPIN_NS) {
            proxy_hand_off(px);
            rm_cpu_relax(); /* the stream is busy: its next READY comes soon */
        } else {
            proxy_hand_off(px);
            struct timespec ts = {0, RM_STREAM_NAP_NS};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&px->mx);
    }
    pthread_mutex_unlock(&px->mx);
    proxy_hand_off(px);
    return NULL;
}

/* ------------------------------------------------------------ channels */

static void dcache_drop(rm_chan_t *ch)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &ch->dcache) {
        rm_dcache_t *d = rm_container_of(pos, rm_dcache_t, link);
        rm_list_del(&d->link);
        if (d->sig_dev)
            rm_cuda_host_unregister(d->view.base);
        rm_shm_unmap(&d->view);
        if (d->r)
            rm_client_region_put(ch->client, d->r);
        free(d);
    }
}

static void slots_free(rm_chan_t *ch, int keep_pages)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &ch->slots) {
        rm_gslot_t *g = rm_container_of(pos, rm_gslot_t, link);
        rm_list_del(&g->link);
        if (keep_pages) {
            rm_retired_page_t *rp = malloc(sizeof(*rp));
            if (rp) {
                rp->p = g->words;
                rm_list_push_back(&ch->px->retired, &rp->link);
            }
        } else {
            page_free(g->words);
        }
        free(g);
    }
}

static void proxy_fini(remora_context_h ctx);
static void ccache_drop(rm_chan_t *ch, unsigned i);
static int client_hook(remora_client_h c, int phase);

static remora_status_t proxy_get(remora_context_h ctx, struct rm_stream_proxy **px_p)
{
    struct rm_stream_proxy *px;
    remora_status_t st = REMORA_OK;

    pthread_mutex_lock(&proxy_create_mx);
    if ((px = ctx->stream_proxy) == NULL) {
        if ((px = calloc(1, sizeof(*px))) == NULL) {
            st = REMORA_ERR_NO_MEMORY;
            goto out;
        }
        px->ctx = ctx;
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        /* Enqueueing and the proxy's pass each hold it briefly: spin a
         * little before sleeping rather than pay a futex round trip. */
        pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
        pthread_mutex_init(&px->mx, &ma);
        pthread_mutexattr_destroy(&ma);
        pthread_cond_init(&px->cv, NULL);
        pthread_cond_init(&px->gone_cv, NULL);
        rm_list_init(&px->chans);
        rm_list_init(&px->retired);
        if (pthread_create(&px->thread, NULL, proxy_main, px) != 0) {
            free(px);
            px = NULL;
            st = REMORA_ERR_NO_MEMORY;
            goto out;
        }
        ctx->stream_client_hook = client_hook;
        ctx->stream_fini        = proxy_fini;
        ctx->stream_proxy       = px;
    }
out:
    pthread_mutex_unlock(&proxy_create_mx);
    *px_p = px;
    return st;
}

static rm_chan_t *chan_find(struct rm_stream_proxy *px, remora_client_h c, void *stream)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &px->chans) {
        rm_chan_t *ch = rm_container_of(pos, rm_chan_t, link);
        if (ch->client == c && ch->stream == stream && !ch->dying)
            return ch;
    }
    return NULL;
}

/* The channel of (c, stream), made on first use. c may be NULL (waits). */
static remora_status_t chan_get(remora_context_h ctx, remora_client_h c, void *stream,
                                rm_chan_t **ch_p)
{
    struct rm_stream_proxy *px;
    rm_chan_t *ch;
    remora_status_t st;

    if ((st = proxy_get(ctx, &px)) != REMORA_OK)
        return st;
    pthread_mutex_lock(&px->mx);
    ch = chan_find(px, c, stream);
    pthread_mutex_unlock(&px->mx);
    if (ch) {
        *ch_p = ch;
        return REMORA_OK;
    }
    if ((ch = calloc(1, sizeof(*ch))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if ((st = chan_page_alloc(&ch->words, &ch->dev)) != REMORA_OK) {
        free(ch);
        return st;
    }
    ch->px     = px;
    ch->client = c;
    ch->stream = stream;
    atomic_init(&ch->error, REMORA_OK);
    rm_list_init(&ch->queue);
    rm_list_init(&ch->slots);
    rm_list_init(&ch->ready);
    rm_list_init(&ch->inflight);
    rm_list_init(&ch->freed);
    rm_list_init(&ch->free);
    rm_list_init(&ch->dcache);
    pthread_mutex_lock(&px->mx);
    rm_chan_t *other = chan_find(px, c, stream); /* another thread made it meanwhile */
    if (other == NULL)
        rm_list_push_back(&px->chans, &ch->link);
    pthread_mutex_unlock(&px->mx);
    if (other) {
        page_free(ch->words);
        free(ch);
        ch = other;
    } else if (c != NULL) {
        /* The proxy stages GPU sources and destinations on this client:
         * its copy streams are made now, before this stream can wait on
         * one of its transfers (mem/copyq.h). */
        rm_engine_lock(c->ctx);
        for (int d = 0; d < rm_cuda_device_count(); d++)
            rm_client_staging_prepare(c, d);
        rm_engine_unlock(c->ctx);
    }
    *ch_p = ch;
    return REMORA_OK;
}

static rm_chan_t *chan_lookup(remora_context_h ctx, remora_client_h c, void *stream)
{
    struct rm_stream_proxy *px = ctx->stream_proxy;
    rm_chan_t *ch;

    if (px == NULL)
        return NULL;
    pthread_mutex_lock(&px->mx);
    ch = chan_find(px, c, stream);
    pthread_mutex_unlock(&px->mx);
    return ch;
}

/* Have the proxy finish a channel's operations without running them and let
 * go of it; wait (bounded) for that. 0 when it did. */
static int chan_kill(rm_chan_t *ch)
{
    struct rm_stream_proxy *px = ch->px;
    uint64_t deadline = rm_now_ns() + RM_STREAM_GONE_MS * 1000000ull;
    int rc = 0;

    pthread_mutex_lock(&px->mx);
    ch->dying = 1;
    pthread_cond_signal(&px->cv);
    while (!ch->dead && rc == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000; /* look again every 10 ms */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&px->gone_cv, &px->mx, &ts);
        if (!ch->dead && rm_now_ns() > deadline)
            rc = -1;
    }
    if (rc == 0)
        rm_list_del(&ch->link);
    pthread_mutex_unlock(&px->mx);
    if (rc != 0)
        rm_error("stream operations still running after %d ms; leaking their channel",
                 RM_STREAM_GONE_MS);
    return rc;
}

/* Free a dead channel. keep_pages: a stream may still touch its memory. */
static void chan_free(rm_chan_t *ch, int keep_pages)
{
    struct rm_stream_proxy *px = ch->px;

    if (ch->client) {
        rm_engine_lock(ch->client->ctx);
        dcache_drop(ch);
        for (unsigned i = 0; i < RM_STREAM_CCACHE; i++)
            ccache_drop(ch, i);
        rm_engine_unlock(ch->client->ctx);
    }
    pthread_mutex_lock(&px->mx);
    slots_free(ch, keep_pages);
    /* The proxy let go of it (dead) or is gone: every list is ours. */
    rm_list_t *lists[] = {&ch->queue, &ch->ready, &ch->freed, &ch->free};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        while (!rm_list_empty(lists[i])) {
            rm_list_t *l = lists[i]->next;
            rm_list_del(l);
            free(rm_container_of(l, rm_sop_t, link));
        }
    rm_retired_page_t *rp = keep_pages ? malloc(sizeof(*rp)) : NULL;
    if (rp) {
        rp->p = ch->words;
        rm_list_push_back(&px->retired, &rp->link);
    }
    pthread_mutex_unlock(&px->mx);
    if (!keep_pages || rp == NULL) {
        if (keep_pages) /* cannot track it: a small leak beats a fault */
            rm_warn("stream channel memory leaked");
        else
            page_free(ch->words);
    }
    free(ch);
}

/* client.c's hook: a client is being disconnected. Phase 1 returns 1 when
 * a channel the proxy would not let go of (chan_kill) still points to c:
 * then c must outlive it (leaked, not freed). */
static int client_hook(remora_client_h c, int phase)
{
    struct rm_stream_proxy *px = c->ctx->stream_proxy;
    rm_list_t *pos, *tmp;
    int held = 0;

    if (px == NULL)
        return 0;
    pthread_mutex_lock(&px->mx);
    rm_list_for_each_safe(pos, tmp, &px->chans) {
        rm_chan_t *ch = rm_container_of(pos, rm_chan_t, link);
        int ok = REMORA_OK;
        if (ch->client != c)
            continue;
        /* Phase 0: nothing more is run for it; streams go on at once. */
        atomic_compare_exchange_strong(&ch->error, &ok, REMORA_ERR_CANCELED);
        pthread_cond_signal(&px->cv);
    }
    pthread_mutex_unlock(&px->mx);
    if (phase == 0)
        return 0;
    for (;;) { /* phase 1: let go of every channel of c */
        rm_chan_t *ch = NULL;
        pthread_mutex_lock(&px->mx);
        rm_list_for_each_safe(pos, tmp, &px->chans) {
            rm_chan_t *x = rm_container_of(pos, rm_chan_t, link);
            if (x->client == c && !x->dying)
                ch = x;
        }
        pthread_mutex_unlock(&px->mx);
        if (ch == NULL)
            break;
        if (chan_kill(ch) == 0)
            chan_free(ch, 1);
        else
            held = 1;
    }
    return held;
}

static void proxy_fini(remora_context_h ctx)
{
    struct rm_stream_proxy *px = ctx->stream_proxy;
    rm_list_t *pos, *tmp;

    if (px == NULL)
        return;
    pthread_mutex_lock(&px->mx);
    px->stop = 1;
    pthread_cond_signal(&px->cv);
    pthread_mutex_unlock(&px->mx);
    pthread_join(px->thread, NULL);
    rm_list_for_each_safe(pos, tmp, &px->chans) {
        rm_chan_t *ch = rm_container_of(pos, rm_chan_t, link);
        if (ch->client == NULL || ch->ninflight == 0) {
            rm_list_del(&ch->link);
            ch->client = NULL; /* its client is gone; so are its cached regions' users */
            chan_free(ch, 0);
        } else {
            rm_warn("context destroyed with stream operations in flight; leaking them");
        }
    }
    rm_list_for_each_safe(pos, tmp, &px->retired) {
        rm_retired_page_t *rp = rm_container_of(pos, rm_retired_page_t, link);
        page_free(rp->p);
        free(rp);
    }
    pthread_mutex_destroy(&px->mx);
    pthread_cond_destroy(&px->cv);
    pthread_cond_destroy(&px->gone_cv);
    free(px);
    ctx->stream_proxy = NULL;
}

/* ------------------------------------------------------------ enqueueing */

/* Small GPU sources (up to RM_STREAM_INLINE) reach pinned memory by a copy
 * on the caller's stream (default: the proxy never waits on the GPU), or,
 * with REMORA_STREAM_COPY=proxy, by the proxy thread (rm_cuda_copy) when it
 * runs the operation: slower by a synchronous copy, but nothing of remora's
 * sits in the stream's copy queue. */
enum { RM_INL_NONE, RM_INL_STREAM, RM_INL_PROXY };

static int proxy_copies(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("REMORA_STREAM_COPY");
        v = e && strcmp(e, "proxy") == 0;
    }
    return v;
}

/* An operation's descriptor: from the channel's free list (px->mx) when it
 * has one, so a stream of small operations does not malloc per operation. */
static rm_sop_t *sop_alloc(rm_chan_t *ch)
{
    rm_sop_t *s = NULL;

    if (ch->nfree) {
        s = rm_container_of(ch->free.next, rm_sop_t, link);
        rm_list_del(&s->link);
        ch->nfree--;
    }
    return s ? s : malloc(sizeof(*s));
}

/*
 * A place in the channel's inline ring for len bytes the stream copies
 * (enqueuing thread only). Places are taken one after the other, never
 * split at the ring's end; a place is free again once the operation that
 * used it is DONE. Returns the operation the stream must wait for before
 * it copies (0: none), and the place's offset in *off_p. The caller
 * records the new use (ring_note) once it has the operation's number.
 */
static uint64_t ring_take(rm_chan_t *ch, size_t len, size_t *off_p)
{
    uint64_t p = ch->ring_head, wait_seq = 0;

    if (p % RM_STREAM_RING + len > RM_STREAM_RING)
        p += RM_STREAM_RING - p % RM_STREAM_RING;
    /* Earlier uses overlapping [p, p + len) in the buffer are the oldest
     * ones; in-order completion makes the last of them the one to wait for. */
    while (ch->nuses && (ch->uses[ch->use_first].vstart + RM_STREAM_RING < p + len ||
                         ch->nuses == RM_STREAM_USES)) {
        wait_seq = ch->uses[ch->use_first].seq;
        ch->use_first = (ch->use_first + 1) % RM_STREAM_USES;
        ch->nuses--;
    }
    ch->ring_head = p + len;
    *off_p = (size_t)(p % RM_STREAM_RING);
    return wait_seq;
}

static void ring_note(rm_chan_t *ch, size_t len, uint64_t seq)
{
    rm_ring_use_t *u = &ch->uses[(ch->use_first + ch->nuses++) % RM_STREAM_USES];
    u->vstart = ch->ring_head - len;
    u->seq    = seq;
}

/* A captured operation: a slot of its own, armed on every replay. */
static remora_status_t enqueue_captured(rm_chan_t *ch, const rm_sop_t *t, int inl)
{
    struct rm_stream_proxy *px = ch->px;
    remora_status_t st;
    rm_gslot_t *g = calloc(1, sizeof(*g));

    if (g == NULL)
        return REMORA_ERR_NO_MEMORY;
    g->len = RM_STREAM_PAGE + (inl ? RM_STREAM_INLINE : 0);
    if ((st = page_alloc(g->len, &g->words, &g->dev)) != REMORA_OK) {
        free(g);
        return st;
    }
    g->tmpl = *t;
    void *place = (char *)g->words + RM_STREAM_PAGE;
    if (inl == RM_INL_PROXY)
        g->tmpl.inl = place;
    else if (inl == RM_INL_STREAM)
        g->tmpl.buf = place;
    if ((inl != RM_INL_STREAM || (st = rm_cuda_raw_copy(ch->stream, place, t->buf, t->len)) ==
                                     REMORA_OK) &&
        (st = rm_cuda_raw_write64(ch->stream, dev_word(g->dev, RM_STREAM_READY), 1)) == REMORA_OK &&
        (st = rm_cuda_raw_wait64(ch->stream, dev_word(g->dev, RM_STREAM_DONE), 1, 1)) == REMORA_OK)
        st = rm_cuda_raw_write64(ch->stream, dev_word(g->dev, RM_STREAM_DONE), 0);
    if (st != REMORA_OK) { /* the capture is broken anyway; the slot is not armed */
        page_free(g->words);
        free(g);
        return st;
    }
    pthread_mutex_lock(&px->mx);
    rm_list_push_back(&ch->slots, &g->link);
    pthread_cond_signal(&px->cv);
    pthread_mutex_unlock(&px->mx);
    return REMORA_OK;
}

/* An operation whose READY never went on the stream: it leaves the queue
 * (the proxy takes nothing past READY, unless the channel is dying: then it
 * is the proxy's, to be cancelled), its number is given back, so that no
 * wait for DONE ever counts on it (fence), and the inline ring is as it
 * was. The enqueuing thread is the channel's only one: s is the last. */
static void enqueue_undo(rm_chan_t *ch, rm_sop_t *s, uint64_t ring_head, unsigned use_first,
                         unsigned nuses)
{
    struct rm_stream_proxy *px = ch->px;
    rm_list_t *pos, *tmp;

    pthread_mutex_lock(&px->mx);
    rm_list_for_each_safe(pos, tmp, &ch->queue) {
        if (pos != &s->link)
            continue;
        rm_list_del(&s->link);
        rm_list_push_back(&ch->free, &s->link);
        ch->nfree++;
        ch->next_seq--;
    }
    pthread_mutex_unlock(&px->mx);
    ch->ring_head = ring_head;
    ch->use_first = use_first;
    ch->nuses     = nuses;
}

/* Put a copy of *t on the stream (see the design notes). waits: later work
 * on the stream waits for its DONE. inl: t->buf is a small source that the
 * stream copies into the channel's inline ring (RM_INL_STREAM; the stream
 * then need not wait for the proxy to read it) or that the proxy copies into
 * the channel's inline buffer when it runs the operation (RM_INL_PROXY). */
static remora_status_t enqueue(rm_chan_t *ch, const rm_sop_t *t, int waits, int capturing, int inl)
{
    struct rm_stream_proxy *px = ch->px;
    remora_status_t st = REMORA_OK;
    rm_sop_t *s;
    size_t off = 0;
    uint64_t seq, ring_wait = 0;
    /* The ring as it was: what a failure before READY puts back, so that
     * the places ring_take let go of are waited for by a later put. */
    uint64_t ring_head = ch->ring_head;
    unsigned use_first = ch->use_first, nuses = ch->nuses;

    if (capturing)
        return enqueue_captured(ch, t, inl);
    if (inl == RM_INL_STREAM)
        ring_wait = ring_take(ch, t->len, &off);
    void *place = (char *)ch->words + RM_STREAM_PAGE + off;
    /* Once queued, s is the proxy's (it may run it as soon as READY covers it). */
    pthread_mutex_lock(&px->mx);
    if ((s = sop_alloc(ch)) == NULL) {
        pthread_mutex_unlock(&px->mx);
        ch->ring_head = ring_head;
        ch->use_first = use_first;
        ch->nuses     = nuses;
        return REMORA_ERR_NO_MEMORY;
    }
    *s = *t;
    if (inl == RM_INL_PROXY)
        s->inl = place;
    else if (inl == RM_INL_STREAM)
        s->buf = place;
    seq = s->seq = s->last_seq = ++ch->next_seq;
    rm_list_push_back(&ch->queue, &s->link);
    if (px->idle) /* asleep on px->cv; else it looks at READY by itself */
        pthread_cond_signal(&px->cv);
    pthread_mutex_unlock(&px->mx);
    if (inl == RM_INL_STREAM)
        ring_note(ch, t->len, seq);
    /* Not under px->mx: enqueueing blocks when the stream's queue is full. */
    if (ring_wait && word_load(ch->words, RM_STREAM_DONE) < ring_wait)
        st = rm_cuda_raw_wait64(ch->stream, dev_word(ch->dev, RM_STREAM_DONE), ring_wait, 0);
    if (st == REMORA_OK && inl == RM_INL_STREAM)
        st = rm_cuda_raw_copy(ch->stream, place, t->buf, t->len);
    if (st == REMORA_OK)
        st = rm_cuda_raw_write64(ch->stream, dev_word(ch->dev, RM_STREAM_READY), seq);
    else
        enqueue_undo(ch, s, ring_head, use_first, nuses);
    /* With READY on the stream the operation stays queued and runs, so that
     * DONE reaches its number: a failed wait below only leaves the stream
     * free to go on before it. */
    if (st == REMORA_OK && waits &&
        (st = rm_cuda_raw_wait64(ch->stream, dev_word(ch->dev, RM_STREAM_DONE), seq, 0)) ==
            REMORA_OK)
        ch->fence_seq = seq;
    return st;
}

/* Before a direct operation: the stream waits for the proxy's earlier ones. */
static remora_status_t fence(rm_chan_t *ch)
{
    remora_status_t st = REMORA_OK;
    uint64_t seq = ch->next_seq;

    if (seq > ch->fence_seq &&
        (st = rm_cuda_raw_wait64(ch->stream, dev_word(ch->dev, RM_STREAM_DONE), seq, 0)) == REMORA_OK)
        ch->fence_seq = seq;
    return st;
}

/* ------------------------------------------------------------ checks and the direct path */

/* Common checks: a usable client, stream and CUDA. */
static remora_status_t check_client(remora_client_h c, void *stream, int *capturing)
{
    remora_status_t st;

    if (c == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_cuda_raw_check(stream, capturing)) != REMORA_OK)
        return st;
    if (c->disconnected)
        return c->disc_status;
    pool_prime();
    return REMORA_OK;
}

typedef struct rm_target {
    int      gpu;      /* the region is GPU memory */
    int      direct;   /* reachable by the direct path */
    int      mappable; /* signals: mappable here */
    uint64_t size;
} rm_target_t;

/* The regions a channel's enqueueing thread looked up last, held (users)
 * so that the entry stays valid: enqueueing checks them without the
 * context's lock, which the progress thread or the driving proxy holds most
 * of the time (taking it per operation cost more than the rest of an
 * enqueue). A region replaced or removed since (detached) is looked up
 * again. Only the enqueuing thread touches it; freed with the channel. */
static void ccache_drop(rm_chan_t *ch, unsigned i)
{
    if (ch->cc[i].r)
        rm_client_region_put(ch->client, ch->cc[i].r);
    ch->cc[i].r       = NULL;
    ch->cc[i].name[0] = 0;
}

static rm_rregion_t *ccache_find(rm_chan_t *ch, const char *name)
{
    for (unsigned i = 0; i < RM_STREAM_CCACHE; i++) {
        rm_rregion_t *r = ch->cc[i].r;
        if (r && strcmp(ch->cc[i].name, name) == 0) {
            if (!__atomic_load_n(&r->detached, __ATOMIC_ACQUIRE))
                return r;
            rm_engine_lock(ch->client->ctx);
            ccache_drop(ch, i);
            rm_engine_unlock(ch->client->ctx);
            return NULL;
        }
    }
    return NULL;
}

/* Look a region up (cached) and check the range, access and kind. */
static remora_status_t check_region(rm_chan_t *ch, const char *name, uint64_t offset,
                                    size_t len, int write, int signals, rm_target_t *t)
{
    remora_client_h c = ch->client;
    rm_rregion_t *r;
    remora_status_t st = REMORA_OK;
    int locked = 0;

    if (name == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((r = ccache_find(ch, name)) == NULL) {
        if ((st = rm_client_region_get(c, name, rm_deadline_ns(c->timeout_ms), &r)) != REMORA_OK)
            return st;
        locked = 1;
        unsigned i = ch->cc_next++ % RM_STREAM_CCACHE;
        ccache_drop(ch, i);
        r->users++;
        ch->cc[i].r = r;
        snprintf(ch->cc[i].name, sizeof(ch->cc[i].name), "%s", name);
    }
    memset(t, 0, sizeof(*t));
    t->size = r->size;
    if (signals && !(r->flags & RM_REGION_WIRE_SIGNALS))
        st = REMORA_ERR_INVALID_PARAM;
    else if (!signals && (r->flags & RM_REGION_WIRE_SIGNALS))
        st = REMORA_ERR_INVALID_PARAM; /* data goes to regions; signal arrays take signals */
    else if (signals && offset >= r->size / sizeof(uint64_t))
        st = REMORA_ERR_OUT_OF_RANGE;
    else if (!signals && (offset > r->size || len > r->size - offset))
        st = REMORA_ERR_OUT_OF_RANGE;
    else if (!signals && write && !(r->access & REMORA_ACCESS_WRITE))
        st = REMORA_ERR_READ_ONLY;
    t->gpu = r->mem_type == REMORA_MEM_CUDA;
    t->direct = t->gpu && r->has_ipc && c->same_host &&
                (c->forced_path == REMORA_PATH_AUTO || c->forced_path == REMORA_PATH_IPC) &&
                !(r->rkey && c->native_rma);
    t->mappable = signals && c->same_host && c->ctx->shm_ok && r->map_pid != 0 &&
                  (c->forced_path == REMORA_PATH_AUTO || c->forced_path == REMORA_PATH_IPC);
    if (locked)
        rm_engine_unlock(c->ctx);
    return st;
}

/* The direct path's view of a region: its IPC pointer, or (signals) its
 * words mapped for the device. NULL-free *d_p on success. */
static remora_status_t dcache_get(rm_chan_t *ch, const char *name, int signals, int buf_dev,
                                  rm_dcache_t **d_p)
{
    remora_client_h c = ch->client;
    rm_list_t *pos, *tmp;
    rm_dcache_t *d = NULL;
    rm_rregion_t *r;
    remora_status_t st;

    rm_engine_lock(c->ctx);
    rm_list_for_each_safe(pos, tmp, &ch->dcache) {
        rm_dcache_t *x = rm_container_of(pos, rm_dcache_t, link);
        if (strcmp(x->name, name) != 0)
            continue;
        if (!x->r->detached) {
            *d_p = x;
            rm_engine_unlock(c->ctx);
            return REMORA_OK;
        }
        /* Replaced or removed since: forget the old one. The stream's
         * earlier copies still use it; they are done when the client
         * lets go of it (its users count) at release time. */
        rm_list_del(&x->link);
        if (x->sig_dev)
            rm_cuda_host_unregister(x->view.base);
        rm_shm_unmap(&x->view);
        rm_client_region_put(c, x->r);
        free(x);
    }
    rm_engine_unlock(c->ctx);
    if ((st = rm_client_region_get(c, name, rm_deadline_ns(c->timeout_ms), &r)) != REMORA_OK)
        return st;
    if ((d = calloc(1, sizeof(*d))) == NULL) {
        rm_engine_unlock(c->ctx);
        return REMORA_ERR_NO_MEMORY;
    }
    snprintf(d->name, sizeof(d->name), "%s", name);
    if (signals) {
        int writable = 0;
        st = rm_shm_map(r->map_pid, r->map_fd, r->map_offset, r->size, 1, &d->view, &writable);
        if (st == REMORA_OK && !writable)
            st = REMORA_ERR_UNSUPPORTED;
        if (st == REMORA_OK) {
            void *base_dev = NULL;
            st = rm_cuda_host_register_mapped(d->view.base, d->view.base_len, &base_dev);
            if (st == REMORA_OK)
                d->sig_dev = (char *)base_dev + ((char *)d->view.ptr - (char *)d->view.base);
        }
    } else {
        /* Opened where the stream's copies run (its device's context); a
         * buffer on yet another GPU gets peer access to that one. */
        int near = rm_cuda_stream_device(ch->stream);
        st = rm_client_region_ipc(r, near >= 0 ? near : buf_dev, &d->ipc);
        if (st == REMORA_OK && near >= 0 && buf_dev >= 0 && buf_dev != near)
            rm_cuda_enable_peer_access(buf_dev, near);
    }
    if (st != REMORA_OK) {
        rm_shm_unmap(&d->view);
        free(d);
        rm_engine_unlock(c->ctx);
        return st;
    }
    r->users++;
    d->r = r;
    rm_list_push_back(&ch->dcache, &d->link);
    *d_p = d;
    rm_engine_unlock(c->ctx);
    return REMORA_OK;
}

/* Whether [offset, offset + len) lies in the region the direct path's view
 * d is of. check_region looked at its own entry; dcache_get may have looked
 * the region up again since (replaced, maybe smaller). index-to-offset
 * products are small here: check_region bounded the index. */
static int dcache_covers(const rm_dcache_t *d, uint64_t offset, size_t len)
{
    return offset <= d->r->size && len <= d->r->size - offset;
}

static remora_status_t chan_error(rm_chan_t *ch)
{
    remora_status_t st = (remora_status_t)atomic_load(&ch->error);
    if (st == REMORA_OK && ch->client && ch->client->disconnected)
        st = ch->client->disc_status;
    return st;
}

/* put, put_signal and get: the direct path where it can, else the proxy. */
static remora_status_t data_op(remora_client_h c, const char *region, uint64_t offset, void *buf,
                               size_t len, int write, const char *signals, size_t index,
                               remora_signal_op_t op, uint64_t value, void *stream)
{
    rm_target_t t, ts = {0};
    rm_chan_t *ch;
    remora_status_t st;
    int capturing = 0, with_sig = signals != NULL;

    if ((buf == NULL && len) ||
        (with_sig && op != REMORA_SIGNAL_SET && op != REMORA_SIGNAL_ADD))
        return REMORA_ERR_INVALID_PARAM;
    if ((st = check_client(c, stream, &capturing)) != REMORA_OK ||
        (st = chan_get(c->ctx, c, stream, &ch)) != REMORA_OK ||
        (st = check_region(ch, region, offset, len, write, 0, &t)) != REMORA_OK ||
        (with_sig && (st = check_region(ch, signals, index, 0, 1, 1, &ts)) != REMORA_OK))
        return st;
    rm_ptr_kind_t kind = RM_PTR_HOST;
    int buf_dev = -1;
    if (buf && rm_cuda_ptr_kind(buf, &kind, &buf_dev) == REMORA_OK && kind == RM_PTR_MANAGED)
        return REMORA_ERR_UNSUPPORTED;
    if (kind != RM_PTR_DEVICE)
        buf_dev = -1;
    if ((st = chan_error(ch)) != REMORA_OK)
        return st;

    int direct = t.direct && (!with_sig || (op == REMORA_SIGNAL_SET && ts.mappable));
    rm_dcache_t *d = NULL, *ds = NULL;
    if (direct && (dcache_get(ch, region, 0, buf_dev, &d) != REMORA_OK ||
                   (with_sig && dcache_get(ch, signals, 1, -1, &ds) != REMORA_OK)))
        direct = 0; /* the proxy can still do it */
    if (direct && (!dcache_covers(d, offset, len) ||
                   (with_sig && !dcache_covers(ds, index * sizeof(uint64_t), sizeof(uint64_t)))))
        direct = 0; /* changed since check_region: the server judges it */
    if (direct) {
        if ((st = fence(ch)) != REMORA_OK)
            return st;
        st = write ? rm_cuda_raw_copy(stream, d->ipc + offset, buf, len)
                   : rm_cuda_raw_copy(stream, buf, d->ipc + offset, len);
        if (st == REMORA_OK && with_sig)
            st = rm_cuda_raw_write64(stream, (char *)ds->sig_dev + index * sizeof(uint64_t), value);
        return st;
    }
    rm_sop_t s;
    memset(&s, 0, offsetof(rm_sop_t, region));
    s.kind = write ? (with_sig ? SOP_PUT_SIGNAL : SOP_PUT) : SOP_GET;
    snprintf(s.region, sizeof(s.region), "%s", region);
    s.signals[0] = 0;
    if (with_sig)
        snprintf(s.signals, sizeof(s.signals), "%s", signals);
    memset(&s.offset, 0, sizeof(s) - offsetof(rm_sop_t, offset));
    s.offset = offset;
    s.buf    = buf;
    s.len    = len;
    s.index  = index;
    s.op     = op;
    s.value  = value;
    s.gpu_target = t.gpu;
    /* A small source in GPU or pinned memory is copied by the stream into
     * the channel's ring: the source is free for later work at once, and a
     * put need not wait for the proxy (a get must, and a source the proxy
     * reads in place must be left alone until it has). */
    int small = write && len && len <= RM_STREAM_INLINE && kind != RM_PTR_HOST;
    int inl = !small ? RM_INL_NONE : !proxy_copies() ? RM_INL_STREAM
                                   : buf_dev >= 0   ? RM_INL_PROXY : RM_INL_NONE;
    int waits = !write || (len && inl != RM_INL_STREAM);
    return enqueue(ch, &s, waits, capturing, inl);
}

/* ------------------------------------------------------------ public API */

remora_status_t remora_stream_put(remora_client_h c, const char *region, uint64_t offset,
                                  const void *src, size_t len, void *stream)
{
    return data_op(c, region, offset, (void *)(uintptr_t)src, len, 1, NULL, 0, 0, 0, stream);
}

remora_status_t remora_stream_put_signal(remora_client_h c, const char *region, uint64_t offset,
                                         const void *src, size_t len, const char *signals,
                                         size_t index, remora_signal_op_t op, uint64_t value,
                                         void *stream)
{
    if (signals == NULL)
        return REMORA_ERR_INVALID_PARAM;
    return data_op(c, region, offset, (void *)(uintptr_t)src, len, 1, signals, index, op, value,
                   stream);
}

remora_status_t remora_stream_get(remora_client_h c, const char *region, uint64_t offset,
                                  void *dst, size_t len, void *stream)
{
    return data_op(c, region, offset, dst, len, 0, NULL, 0, 0, 0, stream);
}

remora_status_t remora_stream_signal(remora_client_h c, const char *signals, size_t index,
                                     remora_signal_op_t op, uint64_t value, void *stream)
{
    rm_target_t ts;
    rm_chan_t *ch;
    rm_dcache_t *ds;
    remora_status_t st;
    int capturing = 0;

    if (op != REMORA_SIGNAL_SET && op != REMORA_SIGNAL_ADD)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = check_client(c, stream, &capturing)) != REMORA_OK ||
        (st = chan_get(c->ctx, c, stream, &ch)) != REMORA_OK ||
        (st = check_region(ch, signals, index, 0, 1, 1, &ts)) != REMORA_OK ||
        (st = chan_error(ch)) != REMORA_OK)
        return st;
    /* A direct SET needs the earlier puts to be at the target: the fence. */
    if (op == REMORA_SIGNAL_SET && ts.mappable && dcache_get(ch, signals, 1, -1, &ds) == REMORA_OK &&
        dcache_covers(ds, index * sizeof(uint64_t), sizeof(uint64_t))) {
        if ((st = fence(ch)) != REMORA_OK)
            return st;
        return rm_cuda_raw_write64(stream, (char *)ds->sig_dev + index * sizeof(uint64_t), value);
    }
    rm_sop_t s;
    memset(&s, 0, offsetof(rm_sop_t, region));
    s.kind = SOP_SIGNAL;
    s.region[0] = 0;
    snprintf(s.signals, sizeof(s.signals), "%s", signals);
    memset(&s.offset, 0, sizeof(s) - offsetof(rm_sop_t, offset));
    s.index = index;
    s.op    = op;
    s.value = value;
    return enqueue(ch, &s, 0, capturing, 0);
}

remora_status_t remora_stream_wait(remora_signals_h sig, size_t index, remora_cmp_t cmp,
                                   uint64_t value, void *stream)
{
    rm_chan_t *ch;
    remora_status_t st;
    int capturing = 0;

    if (sig == NULL || (unsigned)cmp > REMORA_CMP_NEQ)
        return REMORA_ERR_INVALID_PARAM;
    if (index >= sig->count)
        return REMORA_ERR_OUT_OF_RANGE;
    if ((st = rm_cuda_raw_check(stream, &capturing)) != REMORA_OK)
        return st;
    if (sig->dev == NULL)
        return REMORA_ERR_UNSUPPORTED;
    pool_prime(); /* often the first stream call, made while the stream is idle */
    if (cmp != REMORA_CMP_NEQ) /* the stream waits by itself */
        return rm_cuda_raw_wait64(stream, (char *)sig->dev + index * sizeof(uint64_t), value,
                                  cmp == REMORA_CMP_EQ);
    /* No stream wait compares "not equal": the proxy watches the word. */
    if ((st = chan_get(sig->ctx, NULL, stream, &ch)) != REMORA_OK)
        return st;
    rm_sop_t s;
    memset(&s, 0, sizeof(s));
    s.kind  = SOP_WAIT;
    s.lsig  = sig;
    s.index = index;
    s.cmp   = cmp;
    s.value = value;
    return enqueue(ch, &s, 1, capturing, 0);
}

remora_status_t remora_stream_flush(remora_client_h c, void *stream)
{
    rm_chan_t *ch;
    remora_status_t st;

    if ((st = check_client(c, stream, NULL)) != REMORA_OK ||
        (st = chan_get(c->ctx, c, stream, &ch)) != REMORA_OK || (st = chan_error(ch)) != REMORA_OK)
        return st;
    /* Proxy operations complete in order and direct ones in stream order:
     * waiting for the last proxy operation's DONE is waiting for all. */
    return fence(ch);
}

remora_status_t remora_stream_error(remora_client_h c, void *stream)
{
    rm_chan_t *ch;

    if (c == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((ch = chan_lookup(c->ctx, c, stream)) == NULL)
        return REMORA_OK;
    /* A client that lost its connection fails every later operation: the
     * stream's error says so even when all earlier ones had completed. */
    return chan_error(ch);
}

remora_status_t remora_stream_error_word(remora_client_h c, void *stream, int64_t *word)
{
    rm_chan_t *ch;
    remora_status_t st;

    if ((st = check_client(c, stream, NULL)) != REMORA_OK ||
        (st = chan_get(c->ctx, c, stream, &ch)) != REMORA_OK)
        return st;
    pthread_mutex_lock(&ch->px->mx);
    ch->err_word = word;
    pthread_mutex_unlock(&ch->px->mx);
    return REMORA_OK;
}

remora_status_t remora_stream_release(remora_client_h c, void *stream)
{
    rm_chan_t *ch;

    if (c == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((ch = chan_lookup(c->ctx, c, stream)) == NULL)
        return REMORA_ERR_NOT_FOUND;
    if (chan_kill(ch) != 0)
        return REMORA_ERR_BUSY;
    chan_free(ch, 0);
    return REMORA_OK;
}
