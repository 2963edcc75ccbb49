/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora:// connects, made off the proxy's loop.
 *
 * Design notes
 * - A connect to a remora server blocks: a handshake for the first socket to
 *   that server, a round trip for each one after. Made on worker 0, it held
 *   every command and every socket that worker pumps for as long as it took:
 *   up to the timeout for a server that does not answer, and on a loaded
 *   machine long enough for the connects queued behind one another to run
 *   past their budget (docs/gpunet.md). So one connector thread makes them,
 *   one at a time in the order asked, and worker 0 finishes each.
 * - Worker 0 reserves the socket's slot when asked (BK_SOCK_CONNECTING: a
 *   full table is told at once) and hands it over, or frees it, once the
 *   connect ended. A command the kernel gave up on meanwhile is not
 *   connected (if not started yet) or its socket closed (if made).
 * - Ownership: the connector owns the proxy's client context and its cached
 *   clients (pclient_t) while it runs; worker 0 owns the slots; the two job
 *   lists are shared under cn->mx. Destroy stops the connector first (a
 *   connect in progress ends within its timeout, as it did on worker 0).
 */
#include "gpu/gpunet_int.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* A cached connection to the server at hp, or a new one. */
static remora_status_t client_for(remora_gpunet_h g, const char *hp, remora_client_h *c_p)
{
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT,
                                 .timeout_ms = (int)(g->timeout_ns / 1000000u)};
    remora_status_t st;

    for (unsigned k = 0; k < g->nclients; k++)
        if (strcmp(g->clients[k].addr, hp) == 0) {
            *c_p = g->clients[k].client;
            return REMORA_OK;
        }
    if (g->nclients == GN_CLIENTS_MAX)
        return REMORA_ERR_BUSY;
    if (g->cctx == NULL && (st = remora_context_create(NULL, &g->cctx)) != REMORA_OK)
        return st;
    if ((st = remora_client_connect(g->cctx, hp, &cp, c_p)) != REMORA_OK)
        return st;
    snprintf(g->clients[g->nclients].addr, sizeof(g->clients[0].addr), "%s", hp);
    g->clients[g->nclients++].client = *c_p;
    return REMORA_OK;
}

static void client_drop(remora_gpunet_h g, remora_client_h c)
{
    for (unsigned k = 0; k < g->nclients; k++)
        if (g->clients[k].client == c) {
            remora_client_disconnect(c);
            g->clients[k] = g->clients[--g->nclients];
            return;
        }
}

/* The connector's part of a job: the socket, or why not. */
static remora_status_t connect_one(remora_gpunet_h g, gn_rconn_t *j)
{
    int ms = (int)(g->timeout_ns / 1000000u);
    remora_client_h c;
    remora_status_t st;

    if (gn_pend_abandoned(g, &g->ps[j->sock]))
        return REMORA_ERR_CANCELED; /* not begun: nobody waits for it */
    if ((st = client_for(g, j->host, &c)) != REMORA_OK)
        return st;
    st = remora_sock_connect(c, j->service, ms, &j->rs);
    if (st == REMORA_ERR_DISCONNECTED) { /* a stale cached connection: once more, afresh */
        client_drop(g, c);
        if ((st = client_for(g, j->host, &c)) == REMORA_OK)
            st = remora_sock_connect(c, j->service, ms, &j->rs);
    }
    return st;
}

static void *connector_main(void *arg)
{
    remora_gpunet_h g  = arg;
    gn_connector_t *cn = &g->cn;

    pthread_mutex_lock(&cn->mx);
    for (;;) {
        while (!cn->stop && cn->todo == NULL)
            pthread_cond_wait(&cn->cv, &cn->mx);
        if (cn->stop)
            break;
        gn_rconn_t *j = cn->todo;
        if ((cn->todo = j->next) == NULL)
            cn->todo_tail = &cn->todo;
        pthread_mutex_unlock(&cn->mx);
        j->st = connect_one(g, j);
        pthread_mutex_lock(&cn->mx);
        j->next  = cn->done;
        cn->done = j;
        atomic_store(&cn->has_done, 1);
    }
    pthread_mutex_unlock(&cn->mx);
    return NULL;
}

void gn_connect_init(remora_gpunet_h g)
{
    pthread_mutex_init(&g->cn.mx, NULL);
    pthread_cond_init(&g->cn.cv, NULL);
    g->cn.todo_tail = &g->cn.todo;
}

int gn_connect_remora(remora_gpunet_h g, const char *rest, unsigned slot, uint32_t seq)
{
    const char *slash = strchr(rest, '/');
    gn_connector_t *cn = &g->cn;
    gn_rconn_t *j;
    int i, rc = 0;

    if (slash == NULL || (size_t)(slash - rest) >= sizeof(j->host) || slash[1] == '\0')
        return REMORA_ERR_ADDRESS;
    if ((j = calloc(1, sizeof(*j))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if ((i = gn_sock_alloc(g, BK_SOCK_CONNECTING)) < 0) {
        free(j);
        return REMORA_ERR_BUSY;
    }
    memcpy(j->host, rest, (size_t)(slash - rest));
    snprintf(j->service, sizeof(j->service), "%s", slash + 1);
    j->sock            = i;
    g->ps[i].pend_slot = (int)slot; /* the command, as a TCP connect's */
    g->ps[i].pend_seq  = seq;
    pthread_mutex_lock(&cn->mx);
    if (!cn->started && (rc = pthread_create(&cn->thread, NULL, connector_main, g)) == 0)
        cn->started = 1;
    if (rc == 0) {
        *cn->todo_tail = j;
        cn->todo_tail  = &j->next;
        pthread_cond_signal(&cn->cv);
    }
    pthread_mutex_unlock(&cn->mx);
    if (rc != 0) {
        gn_sock_free(g, i);
        free(j);
        return REMORA_ERR_NO_MEMORY;
    }
    return GN_PENDING;
}

/* Worker 0: a connect that ended, answered and its slot handed over or freed. */
static void finish(remora_gpunet_h g, gn_rconn_t *j)
{
    psock_t *p    = &g->ps[j->sock];
    unsigned slot = (unsigned)p->pend_slot;
    uint32_t seq  = p->pend_seq;
    int abandoned = gn_pend_abandoned(g, p);
    remora_status_t st = j->st == REMORA_OK && flag(&p->closing) ? REMORA_ERR_CANCELED : j->st;

    if (st == REMORA_OK && !abandoned) {
        p->rs = j->rs;
        gn_hand_over(g, j->sock, BK_SOCK);
        gn_sock_publish(g, j->sock, RG_SOCK_OPEN);
        gn_complete(g, slot, seq, j->sock);
        return;
    }
    if (j->st == REMORA_OK)
        remora_sock_close(j->rs);
    gn_sock_free(g, j->sock); /* free from here: its command was read above */
    if (!abandoned)
        gn_complete(g, slot, seq, st);
}

int gn_connects_progress(remora_gpunet_h g)
{
    gn_connector_t *cn = &g->cn;
    gn_rconn_t *j, *next;

    if (!atomic_load(&cn->has_done))
        return 0;
    pthread_mutex_lock(&cn->mx);
    j        = cn->done;
    cn->done = NULL;
    atomic_store(&cn->has_done, 0);
    pthread_mutex_unlock(&cn->mx);
    for (; j != NULL; j = next) {
        next = j->next;
        finish(g, j);
        free(j);
    }
    return 1;
}

/* The connector joined and its jobs dropped (their slots are destroy's). */
void gn_connect_stop(remora_gpunet_h g)
{
    gn_connector_t *cn = &g->cn;
    gn_rconn_t *j, *next;

    pthread_mutex_lock(&cn->mx);
    cn->stop = 1;
    pthread_cond_signal(&cn->cv);
    pthread_mutex_unlock(&cn->mx);
    if (cn->started)
        pthread_join(cn->thread, NULL);
    for (j = cn->todo; j != NULL; j = next) {
        next = j->next;
        free(j);
    }
    for (j = cn->done; j != NULL; j = next) {
        next = j->next;
        if (j->st == REMORA_OK)
            remora_sock_close(j->rs);
        free(j);
    }
}
