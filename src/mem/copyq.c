/* SPDX-License-Identifier: BSD-3-Clause */
/* Asynchronous GPU copies with completion callbacks (copyq.h). */
#include <stdlib.h>

#include "mem/copyq.h"
#include "mem/cuda.h"
#include "util/time.h"
#include "util/log.h"

#define RM_COPYQ_CHECK_NS 1000000000ull /* a copy older than this: ask the stream */

typedef struct rm_copyq_dev {
    rm_cuda_stream_h stream;  /* NULL: not prepared */
    uint64_t        *word;    /* the last sequence number the stream wrote */
    void            *word_dev;
    uint64_t         next_seq;
    int              unsignalled; /* copies started on hold, their word not written yet */
    rm_list_t        busy;    /* rm_copy_t in start order */
} rm_copyq_dev_t;

struct rm_copyq {
    rm_copyq_dev_t *dev;  /* one per device, allocated at the first prepare */
    int             ndev;
    unsigned        nbusy;
    int             hold; /* rm_copyq_hold: starts leave the word to the release */
};

rm_copyq_t *rm_copyq_create(void) { return calloc(1, sizeof(rm_copyq_t)); }

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
    rm_copyq_dev_t *d = &q->dev[device];
    if (d->stream != NULL)
        return REMORA_OK;
    void *word;
    if ((st = rm_cuda_host_alloc_mapped(device, sizeof(uint64_t), &word, &d->word_dev)) !=
        REMORA_OK)
        return st;
    if ((st = rm_cuda_stream_create(device, &d->stream)) != REMORA_OK) {
        rm_cuda_host_free(word);
        return st;
    }
    d->word = word;
    *d->word = 0;
    return REMORA_OK;
}

remora_status_t rm_copyq_start(rm_copyq_t *q, rm_copy_t *copy, void *dst, const void *src,
                               size_t length, rm_copy_cb_t done)
{
    if (dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    return rm_copyq_start_on(q, rm_cuda_copy_device(dst, src), copy, dst, src, length, done);
}

remora_status_t rm_copyq_start_on(rm_copyq_t *q, int device, rm_copy_t *copy, void *dst,
                                  const void *src, size_t length, rm_copy_cb_t done)
{
    remora_status_t st;

    if (q == NULL || copy == NULL || done == NULL || dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (device < 0 || device >= q->ndev || q->dev[device].stream == NULL)
        return REMORA_ERR_UNSUPPORTED; /* not prepared: never set up on this path */
    rm_copyq_dev_t *d = &q->dev[device];
    uint64_t seq = d->next_seq + 1;
    st = rm_cuda_copy_async(d->stream, dst, src, length);
    if (st == REMORA_OK && !q->hold)
        st = rm_cuda_stream_write64(d->stream, d->word_dev, seq);
    if (st != REMORA_OK) {
        /* A copy may have been queued before the write failed: it must be
         * over before the caller reuses the buffers. */
        rm_cuda_stream_sync(d->stream);
        return st;
    }
    d->next_seq   = seq;
    d->unsignalled = q->hold;
    copy->seq      = seq;
    copy->start_ns = rm_now_ns();
    copy->status   = REMORA_OK;
    copy->done     = done;
    rm_list_push_back(&d->busy, &copy->link);
    q->nbusy++;
    return REMORA_OK;
}

/* REMORA_OK, or the error d's stream ended in when its oldest copy has been
 * out longer than RM_COPYQ_CHECK_NS (a copy that fails never writes the word). */
static remora_status_t stuck_error(const rm_copyq_dev_t *d)
{
    const rm_copy_t *oldest = rm_container_of(d->busy.next, rm_copy_t, link);

    if (oldest->seq <= __atomic_load_n(d->word, __ATOMIC_ACQUIRE) ||
        rm_now_ns() - oldest->start_ns <= RM_COPYQ_CHECK_NS)
        return REMORA_OK;
    remora_status_t err = rm_cuda_stream_query(d->stream);
    return err == REMORA_INPROGRESS ? REMORA_OK : err;
}

/* Move d's finished copies to ended; with err, the others too, failed with it. */
static unsigned take_ended(rm_copyq_t *q, rm_copyq_dev_t *d, remora_status_t err,
                           rm_list_t *ended)
{
    uint64_t word = __atomic_load_n(d->word, __ATOMIC_ACQUIRE); /* the GPU writes it */
    unsigned n = 0;

    while (!rm_list_empty(&d->busy)) {
        rm_copy_t *c = rm_container_of(d->busy.next, rm_copy_t, link);
        if (c->seq > word && err == REMORA_OK)
            break;
        rm_list_del(&c->link);
        c->status = c->seq > word ? err : REMORA_OK;
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
        if (!rm_list_empty(&d->busy))
            n += take_ended(q, d, sync ? rm_cuda_stream_sync(d->stream) : stuck_error(d),
                            &ended);
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
    for (int i = 0; i < q->ndev; i++) {
        rm_copyq_dev_t *d = &q->dev[i];
        /* One write for all of them (copies end in order). If it fails, the
         * poll finds them stuck and fails them with the stream's error. */
        if (d->unsignalled && rm_cuda_stream_write64(d->stream, d->word_dev, d->next_seq) != REMORA_OK) {
            /* Then the host says it once the stream is through; a stream
             * in error keeps its error, and the poll fails the copies. */
            rm_warn("copy queue: cannot signal the end of copies on device %d", i);
            if (rm_cuda_stream_sync(d->stream) == REMORA_OK)
                __atomic_store_n(d->word, d->next_seq, __ATOMIC_RELEASE);
        }
        d->unsignalled = 0;
    }
}

unsigned rm_copyq_poll(rm_copyq_t *q)
{
    return q == NULL || q->nbusy == 0 ? 0 : end_copies(q, 0);
}

void rm_copyq_drain(rm_copyq_t *q)
{
    rm_copyq_release(q); /* copies on hold: their word is written first */
    while (q != NULL && q->nbusy)
        end_copies(q, 1);
}

unsigned rm_copyq_busy(const rm_copyq_t *q) { return q ? q->nbusy : 0; }

void rm_copyq_destroy(rm_copyq_t *q)
{
    if (q == NULL)
        return;
    rm_copyq_drain(q);
    for (int i = 0; i < q->ndev; i++) {
        rm_cuda_stream_destroy(q->dev[i].stream);
        if (q->dev[i].word)
            rm_cuda_host_free(q->dev[i].word);
    }
    free(q->dev);
    free(q);
}
