/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous GPU copies with completion callbacks (copyq.h). */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "mem/copyq.h"
#include "mem/cuda.h"
#include "util/time.h"
#include "util/log.h"

#define RM_COPYQ_CHECK_NS 1000000000ull /* a copy older than this: ask the stream */
#define RM_COPYQ_JOBS     1024u          /* starts the submit thread has not taken yet */

typedef struct rm_copyq_lane {
    rm_cuda_stream_h stream;  /* NULL: not prepared */
    uint64_t        *word;    /* the last lane number the stream wrote */
    void            *word_dev;
    uint64_t         next;    /* the owner's: the last lane number given */
    int              unsignalled; /* the owner's: copies on hold, word not written yet */
    uint64_t         issued;  /* the submit thread's: the last it enqueued */
    uint64_t         signalled; /* the submit thread's: the last word it wrote */
} rm_copyq_lane_t;

typedef struct rm_copyq_dev {
    rm_copyq_lane_t lane[RM_COPYQ_LANES_MAX];
    uint64_t        next_seq;
    rm_list_t       busy;      /* rm_copy_t in start order */
    /* Written by the submit thread: the last copy it took, and the error of
     * a stream it found broken (the device's copies then fail). */
    uint64_t        submitted;
    remora_status_t broken;
} rm_copyq_dev_t;

typedef struct rm_copyq_job {
    rm_copy_t  *copy;
    int         device;
    void       *dst;
    const void *src;
    size_t      length;
} rm_copyq_job_t;

/* The owner -> submit thread queue: one producer, one consumer. */
typedef struct rm_copyq_submit {
    pthread_t       thread;
    pthread_mutex_t mu;       /* with cv: where the thread sleeps */
    pthread_cond_t  cv;
    uint64_t        spin_ns;
    uint64_t        head;     /* the owner's */
    uint64_t        tail;     /* the thread's */
    int             sleeping; /* the thread's, read by the owner */
    int             stop;
    rm_copyq_job_t  jobs[RM_COPYQ_JOBS];
} rm_copyq_submit_t;

struct rm_copyq {
    rm_copyq_dev_t    *dev;  /* one per device, allocated at the first prepare */
    int                ndev;
    unsigned           nlanes;
    unsigned           nbusy;
    int                hold; /* rm_copyq_hold: starts leave the word to the release */
    rm_copyq_submit_t *sub;  /* NULL: the owner makes the CUDA calls itself */
};

static remora_status_t submit_start(rm_copyq_t *q, uint64_t spin_ns);
static void submit_push(rm_copyq_submit_t *s, const rm_copyq_job_t *job);
static void submit_wait_idle(rm_copyq_submit_t *s);
static void submit_stop(rm_copyq_t *q);

rm_copyq_t *rm_copyq_create(void) { return rm_copyq_create_with(NULL); }

rm_copyq_t *rm_copyq_create_with(const rm_copyq_params_t *params)
{
    unsigned lanes = params && params->lanes ? params->lanes : 1;
    rm_copyq_t *q;

    if (lanes > RM_COPYQ_LANES_MAX || (q = calloc(1, sizeof(*q))) == NULL)
        return NULL;
    q->nlanes = lanes;
    if (params && params->submit_thread && submit_start(q, params->spin_ns) != REMORA_OK) {
        free(q);
        return NULL;
    }
    return q;
}

static remora_status_t prepare_lane(rm_copyq_lane_t *l, int device)
{
    remora_status_t st;
    void *word;

    if ((st = rm_cuda_host_alloc_mapped(device, sizeof(uint64_t), &word, &l->word_dev)) !=
        REMORA_OK)
        return st;
    if ((st = rm_cuda_stream_create(device, &l->stream)) != REMORA_OK) {
        rm_cuda_host_free(word);
        return st;
    }
    l->word  = word;
    *l->word = 0;
    return REMORA_OK;
}

remora_status_t rm_copyq_prepare(rm_copyq_t *q, int device)
{
    remora_status_t st;

    if (q == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (q->dev == NULL) {
        int n = rm_cuda_device_count();
        if (n <= 0)
            return REMORA_ERR_UNSUPPORTED;
        if ((q->dev = calloc((size_t)n, sizeof(*q->dev))) == NULL)
            return REMORA_ERR_NO_MEMORY;
        q->ndev = n;
        for (int i = 0; i < n; i++)
            rm_list_init(&q->dev[i].busy);
    }
    if (device < 0 || device >= q->ndev)
        return REMORA_ERR_INVALID_PARAM;
    for (unsigned k = 0; k < q->nlanes; k++)
        if (q->dev[device].lane[k].stream == NULL &&
            (st = prepare_lane(&q->dev[device].lane[k], device)) != REMORA_OK)
            return st;
    return REMORA_OK;
}

static int prepared(const rm_copyq_t *q, int device)
{
    return device >= 0 && device < q->ndev && q->dev[device].lane[q->nlanes - 1].stream != NULL;
}

/* ------------------------------------------------------------ starting */

/* The owner's record of a copy under way (or queued for the submit thread). */
static void track(rm_copyq_t *q, rm_copyq_dev_t *d, rm_copy_t *copy, rm_copy_cb_t done)
{
    d->next_seq              = copy->seq;
    d->lane[copy->lane].next = copy->lane_seq;
    copy->start_ns           = rm_now_ns();
    copy->done               = done;
    rm_list_push_back(&d->busy, &copy->link);
    q->nbusy++;
}

remora_status_t rm_copyq_start(rm_copyq_t *q, rm_copy_t *copy, void *dst, const void *src,
                               size_t length, rm_copy_cb_t done)
{
    if (dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    return rm_copyq_start_on(q, rm_cuda_copy_device(dst, src), copy, dst, src, length, done);
}

static remora_status_t enqueue(rm_cuda_stream_h stream, const rm_copy_t *copy, void *dst,
                               const void *src, size_t length)
{
    return copy->d2d ? rm_cuda_copy_async_d2d(stream, dst, src, length)
                     : rm_cuda_copy_async(stream, dst, src, length);
}

remora_status_t rm_copyq_start_on(rm_copyq_t *q, int device, rm_copy_t *copy, void *dst,
                                  const void *src, size_t length, rm_copy_cb_t done)
{
    remora_status_t st;

    if (q == NULL || copy == NULL || done == NULL || dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (!prepared(q, device))
        return REMORA_ERR_UNSUPPORTED; /* not prepared: never set up on this path */
    rm_copyq_dev_t *d = &q->dev[device];
    copy->seq       = d->next_seq + 1;
    copy->lane      = (unsigned)(copy->seq % q->nlanes);
    rm_copyq_lane_t *l = &d->lane[copy->lane];
    copy->lane_seq  = l->next + 1;
    copy->status    = REMORA_OK;
    if ((st = __atomic_load_n(&d->broken, __ATOMIC_ACQUIRE)) != REMORA_OK)
        return st; /* a broken stream takes nothing more */
    if (q->sub != NULL) {
        track(q, d, copy, done);
        submit_push(q->sub, &(rm_copyq_job_t){copy, device, dst, src, length});
        return REMORA_OK;
    }
    st = enqueue(l->stream, copy, dst, src, length);
    if (st == REMORA_OK && !q->hold)
        st = rm_cuda_stream_write64(l->stream, l->word_dev, copy->lane_seq);
    if (st != REMORA_OK) {
        /* A copy may have been queued before the write failed: it must be
         * over before the caller reuses the buffers. */
        rm_cuda_stream_sync(l->stream);
        return st;
    }
    l->unsignalled = q->hold;
    track(q, d, copy, done);
    return REMORA_OK;
}

/* ------------------------------------------------------------ submit thread */

/* The lane's word says "every copy of the lane up to seq ended"; when it
 * cannot be written, the host says it once the stream is through, or the
 * stream is broken and the device's copies fail. */
static void signal_lane(rm_copyq_dev_t *d, rm_copyq_lane_t *l, int device, uint64_t seq)
{
    if (rm_cuda_stream_write64(l->stream, l->word_dev, seq) == REMORA_OK)
        return;
    rm_warn("copy queue: cannot signal the end of copies on device %d", device);
    remora_status_t st = rm_cuda_stream_sync(l->stream);
    if (st == REMORA_OK)
        __atomic_store_n(l->word, seq, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&d->broken, st, __ATOMIC_RELEASE);
}

/* Enqueue jobs [from, to), then write each lane's word once. A copy the
 * driver refuses ends with its error when its word passes it; the copies
 * around it go on. */
static void submit_batch(rm_copyq_t *q, uint64_t from, uint64_t to)
{
    rm_copyq_submit_t *s = q->sub;

    for (uint64_t k = from; k != to; k++) {
        const rm_copyq_job_t *j = &s->jobs[k % RM_COPYQ_JOBS];
        rm_copyq_dev_t *d = &q->dev[j->device];
        rm_copyq_lane_t *l = &d->lane[j->copy->lane];
        remora_status_t st = __atomic_load_n(&d->broken, __ATOMIC_ACQUIRE);
        if (st == REMORA_OK)
            st = enqueue(l->stream, j->copy, j->dst, j->src, j->length);
        if (st != REMORA_OK)
            __atomic_store_n(&j->copy->status, st, __ATOMIC_RELAXED);
        l->issued = j->copy->lane_seq;
        __atomic_store_n(&d->submitted, j->copy->seq, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < q->ndev; i++)
        for (unsigned k = 0; k < q->nlanes; k++) {
            rm_copyq_lane_t *l = &q->dev[i].lane[k];
            if (l->issued != l->signalled &&
                __atomic_load_n(&q->dev[i].broken, __ATOMIC_RELAXED) == REMORA_OK)
                signal_lane(&q->dev[i], l, i, l->issued);
            l->signalled = l->issued;
        }
}

/* Sleep until the owner pushes (or stops us). The owner wakes a sleeper only
 * when it sees sleeping set after its push: both sides' stores and loads are
 * sequentially consistent, so one of them sees the other's. */
static void submit_sleep(rm_copyq_submit_t *s)
{
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->sleeping, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&s->head, __ATOMIC_SEQ_CST) == s->tail &&
           !__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST))
        pthread_cond_wait(&s->cv, &s->mu);
    __atomic_store_n(&s->sleeping, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->mu);
}

static void *submit_main(void *arg)
{
    rm_copyq_t *q = arg;
    rm_copyq_submit_t *s = q->sub;
    uint64_t last = rm_now_ns();
    int ctx_set = 0;

    for (;;) {
        uint64_t head = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
        if (head != s->tail) {
            if (!ctx_set) /* the first copy's device current, once: no push per copy */
                ctx_set = rm_cuda_thread_ctx(s->jobs[s->tail % RM_COPYQ_JOBS].device) == REMORA_OK;
            submit_batch(q, s->tail, head);
            __atomic_store_n(&s->tail, head, __ATOMIC_RELEASE);
            last = rm_now_ns();
        } else if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
            return NULL;
        } else if (rm_now_ns() - last < s->spin_ns) {
            rm_cpu_relax();
        } else {
            submit_sleep(s);
            last = rm_now_ns();
        }
    }
}

static void submit_push(rm_copyq_submit_t *s, const rm_copyq_job_t *job)
{
    while (s->head - __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) >= RM_COPYQ_JOBS)
        sched_yield(); /* full: the thread is a thousand copies behind */
    s->jobs[s->head % RM_COPYQ_JOBS] = *job;
    __atomic_store_n(&s->head, s->head + 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&s->sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Every start so far taken by the thread (its calls made). */
static void submit_wait_idle(rm_copyq_submit_t *s)
{
    while (s != NULL && __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE) != s->head)
        sched_yield();
}

static void submit_free(rm_copyq_t *q)
{
    pthread_cond_destroy(&q->sub->cv);
    pthread_mutex_destroy(&q->sub->mu);
    free(q->sub);
    q->sub = NULL;
}

static remora_status_t submit_start(rm_copyq_t *q, uint64_t spin_ns)
{
    rm_copyq_submit_t *s;

    if ((s = calloc(1, sizeof(*s))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    s->spin_ns = spin_ns;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    q->sub = s;
    if (pthread_create(&s->thread, NULL, submit_main, q) == 0)
        return REMORA_OK;
    submit_free(q);
    return REMORA_ERR_IO;
}

static void submit_stop(rm_copyq_t *q)
{
    rm_copyq_submit_t *s = q->sub;

    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    submit_free(q);
}

/* ------------------------------------------------------------ ending */

static uint64_t lane_word(const rm_copyq_dev_t *d, const rm_copy_t *c)
{
    return __atomic_load_n(d->lane[c->lane].word, __ATOMIC_ACQUIRE); /* the GPU writes it */
}

/* REMORA_OK, or the error the oldest copy's stream ended in when that copy
 * has been out longer than RM_COPYQ_CHECK_NS (a copy that fails never writes
 * the word). */
static remora_status_t stuck_error(const rm_copyq_dev_t *d)
{
    const rm_copy_t *oldest = rm_container_of(d->busy.next, rm_copy_t, link);

    if (oldest->lane_seq <= lane_word(d, oldest) ||
        rm_now_ns() - oldest->start_ns <= RM_COPYQ_CHECK_NS)
        return REMORA_OK;
    remora_status_t err = rm_cuda_stream_query(d->lane[oldest->lane].stream);
    return err == REMORA_INPROGRESS ? REMORA_OK : err;
}

/* The error that ends d's copies now: a broken stream's, or a stuck copy's
 * (waited for with sync). Before copies end with an error, every lane is
 * waited for: one lane's error need not stop the others, and a copy must
 * not write into a buffer whose callback has run. */
static remora_status_t dev_error(const rm_copyq_t *q, const rm_copyq_dev_t *d, int sync)
{
    remora_status_t err = __atomic_load_n(&d->broken, __ATOMIC_ACQUIRE);

    if (err == REMORA_OK && !sync && (err = stuck_error(d)) == REMORA_OK)
        return REMORA_OK;
    for (unsigned k = 0; k < q->nlanes; k++) {
        remora_status_t st = rm_cuda_stream_sync(d->lane[k].stream);
        err = err != REMORA_OK ? err : st;
    }
    return err;
}

/* Move d's finished copies to ended, in start order; with err, the others
 * too, failed with it: those the submit thread had taken (up to copy
 * `taken`) before err's lanes were waited for, so none of them still runs. */
static unsigned take_ended(rm_copyq_t *q, rm_copyq_dev_t *d, uint64_t taken,
                           remora_status_t err, rm_list_t *ended)
{
    unsigned n = 0;

    while (!rm_list_empty(&d->busy)) {
        rm_copy_t *c = rm_container_of(d->busy.next, rm_copy_t, link);
        int landed = c->lane_seq <= lane_word(d, c);
        if (c->seq > taken || (!landed && err == REMORA_OK))
            break;
        rm_list_del(&c->link);
        /* Landed: the status the submit thread left (a refused copy's error). */
        c->status = landed ? __atomic_load_n(&c->status, __ATOMIC_RELAXED) : err;
        rm_list_push_back(ended, &c->link);
        q->nbusy--;
        n++;
    }
    return n;
}

/* Run the callbacks of the copies that ended, waiting for them with sync. */
static unsigned end_copies(rm_copyq_t *q, int sync)
{
    rm_list_t ended, *pos, *tmp;
    unsigned n = 0;

    /* Take the finished ones out first: their callbacks may start copies. */
    rm_list_init(&ended);
    for (int i = 0; i < q->ndev; i++) {
        rm_copyq_dev_t *d = &q->dev[i];
        if (rm_list_empty(&d->busy))
            continue;
        uint64_t taken = q->sub ? __atomic_load_n(&d->submitted, __ATOMIC_ACQUIRE) : UINT64_MAX;
        n += take_ended(q, d, taken, dev_error(q, d, sync), &ended);
    }
    rm_list_for_each_safe(pos, tmp, &ended) {
        rm_copy_t *c = rm_container_of(pos, rm_copy_t, link);
        rm_list_del(pos);
        c->done(c, c->status);
    }
    return n;
}

void rm_copyq_hold(rm_copyq_t *q)
{
    if (q != NULL)
        q->hold = 1;
}

void rm_copyq_release(rm_copyq_t *q)
{
    if (q == NULL)
        return;
    q->hold = 0;
    for (int i = 0; i < q->ndev; i++)
        for (unsigned k = 0; k < q->nlanes; k++) {
            rm_copyq_lane_t *l = &q->dev[i].lane[k];
            if (l->unsignalled) /* one write for all of them: a lane's copies end in order */
                signal_lane(&q->dev[i], l, i, l->next);
            l->unsignalled = 0;
        }
}

unsigned rm_copyq_poll(rm_copyq_t *q)
{
    return q == NULL || q->nbusy == 0 ? 0 : end_copies(q, 0);
}

void rm_copyq_drain(rm_copyq_t *q)
{
    rm_copyq_release(q); /* copies on hold: their word is written first */
    while (q != NULL && q->nbusy) {
        submit_wait_idle(q->sub); /* its calls made: a sync then waits for them */
        end_copies(q, 1);
    }
}

unsigned rm_copyq_busy(const rm_copyq_t *q) { return q ? q->nbusy : 0; }

void rm_copyq_destroy(rm_copyq_t *q)
{
    if (q == NULL)
        return;
    rm_copyq_drain(q);
    submit_stop(q);
    for (int i = 0; i < q->ndev; i++)
        for (unsigned k = 0; k < q->nlanes; k++) {
            rm_copyq_lane_t *l = &q->dev[i].lane[k];
            rm_cuda_stream_destroy(l->stream);
            if (l->word)
                rm_cuda_host_free(l->word);
        }
    free(q->dev);
    free(q);
}
