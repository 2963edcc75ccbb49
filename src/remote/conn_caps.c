/* SPDX-License-Identifier: BSD-3-Clause */
/* Connection caps across a server's workers (conn_caps.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/conn_caps.h"

typedef struct rm_host_count {
    char     host[64]; /* as rm_conn_t's peer_host */
    unsigned n;
} rm_host_count_t;

struct rm_conn_caps {
    atomic_uint      refs;
    pthread_mutex_t  mx;
    unsigned         max_all, max_host;
    unsigned         all;
    rm_host_count_t *hosts; /* those with n > 0, unordered */
    size_t           nhosts, cap;
};

rm_conn_caps_t *rm_conn_caps_create(unsigned max_all, unsigned max_host)
{
    rm_conn_caps_t *caps = calloc(1, sizeof(*caps));

    if (caps == NULL)
        return NULL;
    atomic_init(&caps->refs, 1);
    pthread_mutex_init(&caps->mx, NULL);
    caps->max_all  = max_all;
    caps->max_host = max_host;
    return caps;
}

void rm_conn_caps_ref(rm_conn_caps_t *caps) { atomic_fetch_add(&caps->refs, 1); }

void rm_conn_caps_unref(rm_conn_caps_t *caps)
{
    if (caps == NULL || atomic_fetch_sub(&caps->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&caps->mx);
    free(caps->hosts);
    free(caps);
}

static rm_host_count_t *host_find(rm_conn_caps_t *caps, const char *host)
{
    for (size_t i = 0; i < caps->nhosts; i++)
        if (strcmp(caps->hosts[i].host, host) == 0)
            return &caps->hosts[i];
    return NULL;
}

/* A new entry for host (n = 0), or NULL when out of memory. */
static rm_host_count_t *host_add(rm_conn_caps_t *caps, const char *host)
{
    if (caps->nhosts == caps->cap) {
        size_t cap = caps->cap ? 2 * caps->cap : 16;
        rm_host_count_t *h = realloc(caps->hosts, cap * sizeof(*h));
        if (h == NULL)
            return NULL;
        caps->hosts = h;
        caps->cap   = cap;
    }
    rm_host_count_t *e = &caps->hosts[caps->nhosts++];
    snprintf(e->host, sizeof(e->host), "%s", host);
    e->n = 0;
    return e;
}

int rm_conn_caps_take(rm_conn_caps_t *caps, const char *host)
{
    int ok = 0;

    pthread_mutex_lock(&caps->mx);
    if (caps->all < caps->max_all) {
        rm_host_count_t *e = host_find(caps, host);
        if (e == NULL)
            e = host_add(caps, host);
        if (e != NULL && e->n < caps->max_host) {
            e->n++;
            caps->all++;
            ok = 1;
        } else if (e != NULL && e->n == 0) { /* made here and not counted */
            *e = caps->hosts[--caps->nhosts];
        }
    }
    pthread_mutex_unlock(&caps->mx);
    return ok ? 0 : -1;
}

void rm_conn_caps_put(rm_conn_caps_t *caps, const char *host)
{
    pthread_mutex_lock(&caps->mx);
    rm_host_count_t *e = host_find(caps, host);
    caps->all--;
    if (e != NULL && --e->n == 0) /* gone: the last entry takes its place */
        *e = caps->hosts[--caps->nhosts];
    pthread_mutex_unlock(&caps->mx);
}
