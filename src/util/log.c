/* SPDX-License-Identifier: BSD-3-Clause */
#include "util/log.h"
#include "util/time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rm_log_level_current = RM_LOG_WARN;

struct rm_log_sink {
    remora_log_cb_t cb;
    void           *arg;
    rm_log_sink_t  *below;
};

static pthread_mutex_t log_mx = PTHREAD_MUTEX_INITIALIZER;
static rm_log_sink_t  *log_top; /* guarded by log_mx */
static __thread int    log_in_sink; /* this thread runs a sink's callback */

static void log_read_env(void)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    const char *v = getenv("REMORA_LOG");
    if (v == NULL)
        return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0)
            rm_log_level_current = i;
}

void rm_log_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, log_read_env);
}

rm_log_sink_t *rm_log_sink_push(remora_log_cb_t cb, void *arg)
{
    rm_log_sink_t *sink = calloc(1, sizeof(*sink));

    if (sink == NULL)
        return NULL;
    sink->cb  = cb;
    sink->arg = arg;
    pthread_mutex_lock(&log_mx);
    sink->below = log_top;
    log_top     = sink;
    pthread_mutex_unlock(&log_mx);
    return sink;
}

void rm_log_sink_remove(rm_log_sink_t *sink)
{
    if (sink == NULL)
        return;
    pthread_mutex_lock(&log_mx);
    for (rm_log_sink_t **pp = &log_top; *pp != NULL; pp = &(*pp)->below) {
        if (*pp == sink) {
            *pp = sink->below;
            break;
        }
    }
    pthread_mutex_unlock(&log_mx);
    free(sink);
}

void rm_log_emit(rm_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    static const char tag[] = "EWID";
    char msg[512], where[128];
    va_list ap;
    const char *base = strrchr(file, '/');

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(where, sizeof(where), "%s:%d", base ? base + 1 : file, line);
    if (!log_in_sink) {
        pthread_mutex_lock(&log_mx);
        if (log_top != NULL) {
            log_in_sink = 1;
            log_top->cb((remora_log_level_t)level, where, msg, log_top->arg);
            log_in_sink = 0;
            pthread_mutex_unlock(&log_mx);
            return;
        }
        pthread_mutex_unlock(&log_mx);
    }
    /* One write per line so lines from several threads do not interleave. */
    fprintf(stderr, "remora[%d] %c %s %s\n", (int)getpid(), tag[level], where, msg);
}

int rm_log_limit_pass(rm_log_limit_t *lim, unsigned *left_out)
{
    unsigned long long now = rm_now_ns() / 1000000000ull, was = atomic_load(&lim->second);

    *left_out = 0;
    if (now != was && atomic_compare_exchange_strong(&lim->second, &was, now))
        atomic_store(&lim->n, 0); /* a new second (a race here lets a line or two more by) */
    if (atomic_fetch_add(&lim->n, 1) >= RM_LOG_PEER_BURST) {
        atomic_fetch_add(&lim->left_out, 1);
        return 0;
    }
    *left_out = atomic_exchange(&lim->left_out, 0);
    return 1;
}
