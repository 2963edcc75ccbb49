/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A bounded queue of fixed-size items from library threads to Python.
 *
 * Library callbacks (events, log lines) run on threads that must never wait
 * for the GIL: a Python thread holding it may be waiting for them. So the
 * callback only copies its item in here (mutex + condition variable) and
 * makes an eventfd readable; Python takes items with the GIL released. When
 * full, the oldest item goes and is counted as dropped.
 */
#include "rp.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

typedef struct rp_qnode {
    struct rp_qnode *next;
    max_align_t      data[]; /* item_size bytes */
} rp_qnode_t;

struct rp_queue {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    rp_qnode_t     *head, *tail; /* guarded by mu */
    size_t          n, max, item_size;
    uint64_t        dropped;
    int             efd; /* readable exactly while n > 0 */
};

rp_queue_t *rp_queue_new(size_t item_size, size_t max)
{
    rp_queue_t        *q = calloc(1, sizeof(*q));
    pthread_condattr_t ca;

    if (q == NULL)
        return NULL;
    q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        free(q);
        return NULL;
    }
    q->item_size = item_size;
    q->max = max;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    return q;
}

void rp_queue_free(rp_queue_t *q)
{
    rp_qnode_t *it, *next;

    if (q == NULL)
        return;
    for (it = q->head; it != NULL; it = next) {
        next = it->next;
        free(it);
    }
    close(q->efd);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* Unlink the head; mu held, queue not empty. */
static rp_qnode_t *queue_unlink_head(rp_queue_t *q)
{
    rp_qnode_t *it = q->head;
    uint64_t    v;

    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    if (--q->n == 0 && read(q->efd, &v, sizeof(v)) < 0) {
        /* nothing to drain */
    }
    return it;
}

void rp_queue_push(rp_queue_t *q, const void *item)
{
    rp_qnode_t *it = malloc(sizeof(*it) + q->item_size);
    uint64_t    one = 1;

    pthread_mutex_lock(&q->mu);
    if (it == NULL) {
        q->dropped++;
        pthread_mutex_unlock(&q->mu);
        return;
    }
    it->next = NULL;
    memcpy(it->data, item, q->item_size);
    if (q->n == q->max) {
        free(queue_unlink_head(q));
        q->dropped++;
    }
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    /* The counter cannot overflow: it is reset whenever the queue empties. */
    if (q->n++ == 0 && write(q->efd, &one, sizeof(one)) < 0) {
        /* nothing to do: the condition variable still wakes waiters */
    }
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Copy the oldest item to out, waiting up to ms (0: not at all). 1 if one
 * came, 0 if not. Called without the GIL. */
static int queue_pop(rp_queue_t *q, int ms, void *out)
{
    rp_qnode_t     *it = NULL;
    struct timespec dl;

    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&q->mu);
    while (q->head == NULL && ms != 0) {
        if (pthread_cond_timedwait(&q->cv, &q->mu, &dl) == ETIMEDOUT)
            break;
    }
    if (q->head != NULL)
        it = queue_unlink_head(q);
    pthread_mutex_unlock(&q->mu);
    if (it == NULL)
        return 0;
    memcpy(out, it->data, q->item_size);
    free(it);
    return 1;
}

int rp_queue_take(rp_queue_t *q, rp_obj_t *owner, PyObject *timeout, void *out)
{
    int ms, left, got = 0;

    if (timeout == NULL)
        ms = 0;
    else if (rp_timeout_ms(timeout, &ms) < 0)
        return -1;
    /* Wait in slices so that signals (Ctrl-C) and a close are seen. */
    left = ms;
    for (;;) {
        int slice = (left < 0 || left > 100) ? 100 : left;
        if (owner != NULL)
            rp_enter(owner);
        Py_BEGIN_ALLOW_THREADS
        got = queue_pop(q, slice, out);
        Py_END_ALLOW_THREADS
        if (owner != NULL)
            rp_leave(owner);
        if (got)
            return 1;
        if (left >= 0 && (left -= slice) <= 0)
            return 0;
        if (owner != NULL && (owner->closed || owner->closing))
            return 0;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

void rp_queue_wake(rp_queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int rp_queue_fd(rp_queue_t *q) { return q->efd; }

uint64_t rp_queue_dropped(rp_queue_t *q)
{
    uint64_t d;

    pthread_mutex_lock(&q->mu);
    d = q->dropped;
    pthread_mutex_unlock(&q->mu);
    return d;
}
