/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Byte-stream sockets over remora connections (remora.h: "sockets").
 *
 * Design notes
 * - A socket is one end of a stream between a client and a server of one
 *   connection. Each end has an id (a slot of a process-wide table and a
 *   generation); messages name the receiver's id and are checked against
 *   the connection they came on, so a peer cannot touch another
 *   connection's sockets.
 * - Data travels as SOCK_DATA active messages of at most RM_SOCK_MSG_MAX
 *   bytes, eager (the body is copied on arrival into the receive queue).
 *   Flow control: a sender holds credit for REMORA_SOCK_WINDOW bytes; the
 *   receiver returns credit (SOCK_CREDIT) as its reader consumes bytes, at
 *   least a quarter window at a time, so a blocked sender is always
 *   released.
 * - A listener's backlog is bounded per connection (RM_SOCK_BACKLOG_CONN)
 *   as well as in all (RM_SOCK_BACKLOG), so that one peer cannot fill it for
 *   everyone. A socket in it receives into a small window
 *   (RM_SOCK_BACKLOG_WINDOW): data the application has not asked for yet
 *   holds at most that much memory. The rest is granted by CREDIT once the
 *   socket is accepted (open_window).
 * - FIN (kind 0): the sender writes no more; kind 1: and reads no more (a
 *   close). The connection's failure fails every socket on it.
 * - Locking: a socket's state is guarded by its context's lock (message
 *   handlers run with it held); the id table, the listeners and their
 *   backlogs by tbl_lock, taken inside the context lock. A server's
 *   listeners are its first worker's; a socket lives on the worker of the
 *   connection it came on (any of them). Waiters sleep in rm_engine_wait on a per-direction flag
 *   that handlers raise.
 */
#include <stdlib.h>
#include <string.h>

#include "remote/client.h"
#include "remote/server.h"
#include "remote/sock.h"
#include "util/log.h"
#include "util/time.h"

#define RM_SOCK_MSG_MAX   (64u << 10)
#define RM_SOCK_SLOTS     65536u
#define RM_SOCK_BACKLOG   1024u
/* Unaccepted sockets of one connection per listener: enough for a client's
 * burst of connects to a server that accepts as they come (it_sock's 64
 * sockets at once), small enough that 16 connections are needed to fill a
 * backlog and one holds at most 64 x RM_SOCK_BACKLOG_WINDOW = 4 MiB. */
#define RM_SOCK_BACKLOG_CONN 64u
/* The receive window of a socket not yet accepted: one message. */
#define RM_SOCK_BACKLOG_WINDOW RM_SOCK_MSG_MAX

typedef struct rx_chunk {
    rm_list_t link;
    size_t    len, off;
    uint8_t   data[];
} rx_chunk_t;

struct remora_sock {
    remora_context_h ctx;
    rm_peer_t       *peer;     /* NULL once the connection is gone */
    unsigned         am_id;    /* the direction messages take on it */
    uint32_t         id, peer_id;
    remora_status_t  err;      /* the connection failed */
    int              peer_fin, peer_closed, shut, accepted;
    rm_list_t        rxq;      /* rx_chunk_t */
    size_t           rx_bytes, rx_consumed;
    size_t           rx_window; /* bytes the peer may have unread here */
    uint64_t         tx_credit;
    atomic_size_t    tx_inflight; /* bytes of our SOCK_DATA that UCX still holds */
    atomic_int       rx_wake, tx_wake;
    atomic_size_t    rx_hint, tx_hint;
    atomic_int      *poll_flag; /* a remora_sock_poll waiting on it */
    remora_context_h poll_ctx;
    rm_list_t        link;     /* the listener's backlog until accepted */
    remora_sock_listener_h listener;
};

struct remora_sock_listener {
    remora_server_h  server;
    remora_context_h ctx;
    char             name[REMORA_SOCK_SERVICE_MAX + 1];
    rm_list_t        backlog, link;
    unsigned         nbacklog;
    atomic_int       wake, hint;
};

static pthread_mutex_t tbl_lock = PTHREAD_MUTEX_INITIALIZER;
static remora_sock_h  *tbl;          /* RM_SOCK_SLOTS entries, made on first use */
static uint32_t        tbl_gen = 1;
static uint32_t        tbl_next;
static rm_list_t       listeners = {&listeners, &listeners};

/* ------------------------------------------------------------ table */

static remora_status_t tbl_add(remora_sock_h s)
{
    remora_status_t st = REMORA_ERR_BUSY;

    pthread_mutex_lock(&tbl_lock);
    if (tbl == NULL && (tbl = calloc(RM_SOCK_SLOTS, sizeof(*tbl))) == NULL) {
        pthread_mutex_unlock(&tbl_lock);
        return REMORA_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < RM_SOCK_SLOTS; i++) {
        uint32_t slot = (tbl_next + i) % RM_SOCK_SLOTS;
        if (tbl[slot] == NULL) {
            tbl[slot] = s;
            tbl_gen   = (tbl_gen + 1) & 0xffffu;
            if (tbl_gen == 0)
                tbl_gen = 1;
            s->id    = (tbl_gen << 16) | slot;
            tbl_next = slot + 1;
            st       = REMORA_OK;
            break;
        }
    }
    pthread_mutex_unlock(&tbl_lock);
    return st;
}

static void tbl_del(remora_sock_h s)
{
    pthread_mutex_lock(&tbl_lock);
    if (tbl && tbl[s->id & 0xffffu] == s)
        tbl[s->id & 0xffffu] = NULL;
    pthread_mutex_unlock(&tbl_lock);
}

/* The socket with this id, or NULL (tbl_lock held). */
static remora_sock_h tbl_get(uint32_t id)
{
    remora_sock_h s = tbl ? tbl[id & 0xffffu] : NULL;
    return s != NULL && s->id == id ? s : NULL;
}

/* The socket with this id on this connection, or NULL. Lock held. */
static remora_sock_h tbl_find(rm_peer_t *peer, uint32_t id)
{
    pthread_mutex_lock(&tbl_lock);
    remora_sock_h s = tbl_get(id);
    if (s != NULL && s->peer != peer)
        s = NULL;
    pthread_mutex_unlock(&tbl_lock);
    return s;
}

/* ------------------------------------------------------------ helpers */

/* What a send may hand to UCX now: the peer's credit, and no more than a
 * window in UCX's hands whatever credit the peer returns (a peer that
 * granted credit without reading made a server queue 1 GB; review). */
static size_t tx_room(remora_sock_h s)
{
    size_t inflight = atomic_load(&s->tx_inflight);
    size_t room = inflight < REMORA_SOCK_WINDOW ? REMORA_SOCK_WINDOW - inflight : 0;
    return s->tx_credit < room ? (size_t)s->tx_credit : room;
}

static void update_hints(remora_sock_h s)
{
    int done = s->err != REMORA_OK || s->peer_fin;
    atomic_store(&s->rx_hint, s->rx_bytes ? s->rx_bytes : (size_t)done);
    atomic_store(&s->tx_hint, (s->err || s->peer_closed || s->shut) ? 1 : tx_room(s));
}

static void wake(remora_sock_h s, int rx, int tx)
{
    update_hints(s);
    if (rx)
        rm_engine_complete(s->ctx, &s->rx_wake);
    if (tx)
        rm_engine_complete(s->ctx, &s->tx_wake);
    if (s->poll_flag)
        rm_engine_complete(s->poll_ctx, s->poll_flag);
}

_Static_assert(sizeof(uintptr_t) >= 8, "data_sent's argument packs an id and a length");

/* One of our SOCK_DATA left UCX (arg: the socket's id and the bytes). Any
 * worker's thread: the socket is found, and its count changed, under the
 * table's lock, which its free takes first (tbl_del). */
static void data_sent(void *arg, ucs_status_t status)
{
    uint64_t a = (uint64_t)(uintptr_t)arg;
    uint32_t id = (uint32_t)a;

    (void)status;
    pthread_mutex_lock(&tbl_lock);
    remora_sock_h s = tbl_get(id);
    if (s != NULL) {
        atomic_fetch_sub(&s->tx_inflight, (size_t)(a >> 32));
        wake(s, 0, 1);
    }
    pthread_mutex_unlock(&tbl_lock);
}

static remora_sock_h sock_new(remora_context_h ctx, rm_peer_t *peer, unsigned am_id)
{
    remora_sock_h s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->ctx   = ctx;
    s->peer  = peer;
    s->am_id = am_id;
    s->rx_window = REMORA_SOCK_WINDOW;
    rm_list_init(&s->rxq);
    rm_list_init(&s->link);
    if (tbl_add(s) != REMORA_OK) {
        free(s);
        return NULL;
    }
    return s;
}

static void sock_free(remora_sock_h s)
{
    rm_list_t *pos, *tmp;

    tbl_del(s);
    rm_list_for_each_safe(pos, tmp, &s->rxq) {
        rm_list_del(pos);
        free(rm_container_of(pos, rx_chunk_t, link));
    }
    free(s);
}

/* A control message to the peer's end (lock held). */
static void send_ctl(remora_sock_h s, unsigned type, uint8_t kind, uint64_t length)
{
    rm_hdr_t hdr = {.type = (uint8_t)type, .region_id = s->peer_id, .offset = s->id,
                    .kind = kind, .length = length};
    rm_send_params_t sp = {0};

    if (s->peer == NULL || s->err)
        return;
    /* A CREDIT or FIN lost would stall the other end's socket for good: the
     * connection goes instead, as for a server's reply (rm_conn_send). */
    remora_status_t st = rm_peer_send(s->peer, s->am_id, &hdr, &sp);
    /* The connection may have failed inside the send, taking s->peer with it
     * (rm_sock_peer_gone): then it is failed already. */
    if (st != REMORA_OK && s->peer != NULL)
        rm_peer_fail_lost(s->peer, type, st);
}

/*
 * Grant the rest of the full window to an accepted socket (lock held). Only
 * once the peer has sent: a connecting client sets its credit from the reply
 * rather than adding to it (remora_sock_connect, in this release and the
 * ones before), so a grant that reached it before its connect returned would
 * be lost. Its first SOCK_DATA shows that it has returned.
 */
static void open_window(remora_sock_h s)
{
    if (!s->accepted || s->rx_window == REMORA_SOCK_WINDOW || s->rx_bytes == 0)
        return;
    send_ctl(s, RM_MSG_SOCK_CREDIT, 0, REMORA_SOCK_WINDOW - s->rx_window);
    s->rx_window = REMORA_SOCK_WINDOW;
}

/* ------------------------------------------------------------ messages */

/* A listener of server by name (tbl_lock held). */
static remora_sock_listener_h listener_find(remora_server_h server, const char *name)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &listeners) {
        remora_sock_listener_h it = rm_container_of(pos, struct remora_sock_listener, link);
        if (it->server == server && strcmp(it->name, name) == 0)
            return it;
    }
    return NULL;
}

/* Sockets of peer in l's backlog (tbl_lock held). */
static unsigned backlog_count(remora_sock_listener_h l, const rm_peer_t *peer)
{
    rm_list_t *pos, *tmp;
    unsigned n = 0;

    rm_list_for_each_safe(pos, tmp, &l->backlog)
        n += rm_container_of(pos, struct remora_sock, link)->peer == peer;
    return n;
}

/*
 * SOCK_CONNECT on a connection of any of the server's workers (that
 * worker's lock held). Listeners belong to the first worker; the new socket
 * to the connection's. The backlog is under tbl_lock, not a context lock:
 * another worker's lock cannot be taken here (the first worker's comes
 * first), and the lookup and the queueing must be one step, or the
 * listener could go in between.
 */
static void on_connect(rm_peer_t *peer, remora_server_h server, const rm_hdr_t *hdr,
                       const void *body, size_t len)
{
    rm_conn_t *c = (rm_conn_t *)peer;
    remora_server_h first = server->main ? server->main : server;
    char name[REMORA_NAME_MAX + 1];
    remora_sock_listener_h l;
    remora_status_t st = REMORA_OK;
    remora_sock_h s;
    rm_rbuf_t r;
    rm_wbuf_t w;

    rm_rbuf_init(&r, body, len);
    rm_rbuf_name(&r, name);
    if (r.failed || r.left) {
        rm_conn_reply(c, RM_MSG_SOCK_CONNECT_REPLY, hdr->req_id, REMORA_ERR_PROTOCOL, NULL);
        return;
    }
    if ((s = sock_new(peer->ctx, peer, RM_AM_ID_TO_CLIENT)) == NULL) {
        rm_conn_reply(c, RM_MSG_SOCK_CONNECT_REPLY, hdr->req_id, REMORA_ERR_NO_MEMORY, NULL);
        return;
    }
    s->peer_id   = (uint32_t)hdr->offset;
    s->tx_credit = hdr->length < REMORA_SOCK_WINDOW ? hdr->length : REMORA_SOCK_WINDOW;
    s->rx_window = RM_SOCK_BACKLOG_WINDOW;
    update_hints(s);
    pthread_mutex_lock(&tbl_lock);
    if ((l = listener_find(first, name)) == NULL) {
        st = REMORA_ERR_NOT_FOUND;
    } else if (l->nbacklog >= RM_SOCK_BACKLOG ||
               backlog_count(l, peer) >= RM_SOCK_BACKLOG_CONN) {
        st = REMORA_ERR_BUSY;
    } else {
        s->listener = l;
        rm_list_push_back(&l->backlog, &s->link);
        l->nbacklog++;
        atomic_store(&l->hint, 1);
        rm_engine_complete(l->ctx, &l->wake);
    }
    pthread_mutex_unlock(&tbl_lock);
    if (st != REMORA_OK) {
        sock_free(s);
        rm_conn_reply(c, RM_MSG_SOCK_CONNECT_REPLY, hdr->req_id, st, NULL);
        return;
    }
    rm_wbuf_init(&w);
    rm_wbuf_u32(&w, s->id);
    rm_wbuf_u64(&w, s->rx_window);
    rm_conn_reply(c, RM_MSG_SOCK_CONNECT_REPLY, hdr->req_id, REMORA_OK, &w);
}

void rm_sock_on_message(rm_peer_t *peer, remora_server_h server, const rm_hdr_t *hdr,
                        const void *body, size_t len)
{
    remora_sock_h s;
    rx_chunk_t *ch;

    if (hdr->type == RM_MSG_SOCK_CONNECT) {
        if (server != NULL)
            on_connect(peer, server, hdr, body, len);
        return;
    }
    if ((s = tbl_find(peer, hdr->region_id)) == NULL)
        return; /* closed here already: its FIN is on its way to the peer */
    switch (hdr->type) {
    case RM_MSG_SOCK_DATA:
        if (len == 0 || len > RM_SOCK_MSG_MAX || s->peer_fin ||
            s->rx_bytes + len > s->rx_window) {
            rm_warn_peer("socket %u: data past the window or the end; dropped", s->id);
            return;
        }
        if ((ch = malloc(sizeof(*ch) + len)) == NULL) {
            s->err = REMORA_ERR_NO_MEMORY;
            wake(s, 1, 1);
            return;
        }
        ch->len = len;
        ch->off = 0;
        memcpy(ch->data, body, len);
        rm_list_push_back(&s->rxq, &ch->link);
        s->rx_bytes += len;
        open_window(s);
        wake(s, 1, 0);
        break;
    case RM_MSG_SOCK_FIN:
        s->peer_fin = 1;
        if (hdr->kind & 1)
            s->peer_closed = 1;
        wake(s, 1, 1);
        break;
    case RM_MSG_SOCK_CREDIT:
        s->tx_credit += hdr->length;
        if (s->tx_credit > REMORA_SOCK_WINDOW)
            s->tx_credit = REMORA_SOCK_WINDOW;
        wake(s, 0, 1);
        break;
    default:
        break;
    }
}

void rm_sock_peer_gone(rm_peer_t *peer)
{
    remora_sock_h gone[64];
    size_t n;

    do { /* listeners' unaccepted sockets of this peer go; the rest fail */
        n = 0;
        pthread_mutex_lock(&tbl_lock);
        for (uint32_t i = 0; tbl && i < RM_SOCK_SLOTS && n < 64; i++) {
            remora_sock_h s = tbl[i];
            if (s == NULL || s->peer != peer)
                continue;
            s->peer = NULL;
            s->err  = REMORA_ERR_DISCONNECTED;
            if (s->listener) {
                rm_list_del(&s->link);
                s->listener->nbacklog--;
                atomic_store(&s->listener->hint, s->listener->nbacklog > 0);
                s->listener = NULL;
                gone[n++] = s;
            } else {
                wake(s, 1, 1);
            }
        }
        pthread_mutex_unlock(&tbl_lock);
        for (size_t i = 0; i < n; i++)
            sock_free(gone[i]);
    } while (n == 64);
}

size_t rm_sock_rx_hint(remora_sock_h s) { return atomic_load(&s->rx_hint); }
size_t rm_sock_tx_hint(remora_sock_h s) { return atomic_load(&s->tx_hint); }
int rm_sock_listener_hint(remora_sock_listener_h l) { return atomic_load(&l->hint); }

/* ------------------------------------------------------------ listen, accept, connect */

static int service_ok(const char *service)
{
    size_t n;
    return service && (n = strlen(service)) > 0 && n <= REMORA_SOCK_SERVICE_MAX;
}

remora_status_t remora_sock_listen(remora_server_h server, const char *service,
                                   remora_sock_listener_h *listener_p)
{
    remora_sock_listener_h l;
    remora_status_t st = REMORA_OK;

    if (server == NULL || !service_ok(service) || listener_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    l->server = server;
    l->ctx    = server->ctx;
    snprintf(l->name, sizeof(l->name), "%s", service);
    rm_list_init(&l->backlog);
    pthread_mutex_lock(&tbl_lock);
    if (listener_find(server, service) != NULL)
        st = REMORA_ERR_EXISTS;
    else
        rm_list_push_back(&listeners, &l->link);
    pthread_mutex_unlock(&tbl_lock);
    if (st != REMORA_OK) {
        free(l);
        return st;
    }
    *listener_p = l;
    return REMORA_OK;
}

/* Sockets never accepted are closed, each under its own worker's lock. */
void remora_sock_listener_destroy(remora_sock_listener_h l)
{
    rm_list_t backlog, *pos, *tmp;

    if (l == NULL)
        return;
    rm_list_init(&backlog);
    pthread_mutex_lock(&tbl_lock);
    rm_list_del(&l->link);
    rm_list_for_each_safe(pos, tmp, &l->backlog) {
        remora_sock_h s = rm_container_of(pos, struct remora_sock, link);
        rm_list_del(pos);
        s->listener = NULL;
        rm_list_push_back(&backlog, pos);
    }
    l->nbacklog = 0;
    pthread_mutex_unlock(&tbl_lock);
    rm_list_for_each_safe(pos, tmp, &backlog) {
        remora_sock_h s = rm_container_of(pos, struct remora_sock, link);
        remora_context_h ctx = s->ctx;
        rm_engine_lock(ctx);
        rm_list_del(pos);
        send_ctl(s, RM_MSG_SOCK_FIN, 1, 0);
        sock_free(s);
        rm_engine_unlock(ctx);
        rm_engine_kick(ctx);
    }
    free(l);
}

static uint64_t deadline_for(int timeout_ms)
{
    return rm_deadline_ns(timeout_ms < 0 ? REMORA_DEFAULT_TIMEOUT_MS : timeout_ms);
}

/* The application has s now: its window may open (under its worker's lock,
 * which comes before tbl_lock). */
static void sock_accepted(remora_sock_h s)
{
    remora_context_h ctx = s->ctx;

    rm_engine_lock(ctx);
    s->accepted = 1;
    open_window(s);
    rm_engine_unlock(ctx);
    rm_engine_kick(ctx);
}

/* The oldest socket of the backlog, accepted, or NULL. */
static remora_sock_h backlog_pop(remora_sock_listener_h l)
{
    remora_sock_h s = NULL;

    pthread_mutex_lock(&tbl_lock);
    if (!rm_list_empty(&l->backlog)) {
        s = rm_container_of(l->backlog.next, struct remora_sock, link);
        rm_list_del(&s->link);
        rm_list_init(&s->link);
        s->listener = NULL;
        l->nbacklog--;
        atomic_store(&l->hint, l->nbacklog > 0);
    }
    pthread_mutex_unlock(&tbl_lock);
    if (s != NULL)
        sock_accepted(s);
    return s;
}

remora_status_t remora_sock_accept(remora_sock_listener_h l, int timeout_ms,
                                   remora_sock_h *sock_p)
{
    uint64_t deadline = deadline_for(timeout_ms);
    remora_sock_h s;

    if (l == NULL || sock_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    for (;;) {
        atomic_store(&l->wake, 0); /* before looking: a connect after it sets it again */
        if ((s = backlog_pop(l)) != NULL) {
            *sock_p = s;
            return REMORA_OK;
        }
        if (timeout_ms == 0 || rm_engine_wait(l->ctx, &l->wake, deadline) != REMORA_OK) {
            if ((s = backlog_pop(l)) == NULL)
                return REMORA_ERR_TIMED_OUT;
            *sock_p = s;
            return REMORA_OK;
        }
    }
}

remora_status_t remora_sock_connect(remora_client_h c, const char *service, int timeout_ms,
                                    remora_sock_h *sock_p)
{
    uint64_t deadline = deadline_for(timeout_ms);
    rm_hdr_t hdr = {.type = RM_MSG_SOCK_CONNECT, .length = REMORA_SOCK_WINDOW};
    rm_send_params_t sp = {0};
    remora_status_t st;
    remora_sock_h s;
    rm_wbuf_t w;
    rm_op_t *op;

    if (c == NULL || !service_ok(service) || sock_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    rm_wbuf_init(&w);
    rm_wbuf_name(&w, service);
    if (w.failed)
        return REMORA_ERR_NO_MEMORY;
    rm_engine_lock(c->ctx);
    if (c->disconnected || !c->ready) {
        st = c->disconnected ? c->disc_status : REMORA_ERR_DISCONNECTED;
        rm_engine_unlock(c->ctx);
        rm_wbuf_free(&w);
        return st;
    }
    if ((s = sock_new(c->ctx, &c->peer, RM_AM_ID_TO_SERVER)) == NULL) {
        rm_engine_unlock(c->ctx);
        rm_wbuf_free(&w);
        return REMORA_ERR_NO_MEMORY;
    }
    hdr.offset   = s->id;
    sp.body      = sp.body_free = w.data;
    sp.body_len  = w.len;
    if ((op = rm_client_op_send(c, &hdr, RM_MSG_SOCK_CONNECT_REPLY, &sp)) == NULL) {
        sock_free(s);
        rm_engine_unlock(c->ctx);
        return REMORA_ERR_NO_MEMORY;
    }
    if (rm_client_op_wait(c, op, deadline) != REMORA_OK) { /* its late reply frees op */
        sock_free(s);
        rm_engine_unlock(c->ctx);
        return REMORA_ERR_TIMED_OUT;
    }
    st = op->status;
    if (st == REMORA_OK) {
        rm_rbuf_t r;
        rm_rbuf_init(&r, op->reply, op->reply_len);
        s->peer_id = rm_rbuf_u32(&r);
        uint64_t window = rm_rbuf_u64(&r);
        if (r.failed || r.left)
            st = REMORA_ERR_PROTOCOL;
        s->tx_credit = window < REMORA_SOCK_WINDOW ? window : REMORA_SOCK_WINDOW;
    }
    rm_client_op_free(op);
    if (st == REMORA_OK && s->err)
        st = s->err;
    if (st != REMORA_OK) {
        sock_free(s);
        rm_engine_unlock(c->ctx);
        return st;
    }
    update_hints(s);
    rm_engine_unlock(c->ctx);
    *sock_p = s;
    return REMORA_OK;
}

/* ------------------------------------------------------------ data */

/* Wait for flag, with the lock dropped; REMORA_ERR_TIMED_OUT past the deadline. */
static remora_status_t wait_flag(remora_sock_h s, atomic_int *flag, int timeout_ms,
                                 uint64_t deadline)
{
    rm_engine_unlock(s->ctx);
    remora_status_t st = timeout_ms == 0 ? REMORA_ERR_TIMED_OUT
                                         : rm_engine_wait(s->ctx, flag, deadline);
    rm_engine_lock(s->ctx);
    return st;
}

int64_t remora_sock_send(remora_sock_h s, const void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = deadline_for(timeout_ms);
    size_t sent = 0;

    if (s == NULL || (buf == NULL && len > 0))
        return REMORA_ERR_INVALID_PARAM;
    if (len == 0)
        return 0;
    rm_engine_lock(s->ctx);
    for (;;) {
        /* Our own shutdown first: whether the peer's close has arrived yet
         * must not change what a send after it returns. */
        if (s->shut) {
            rm_engine_unlock(s->ctx);
            return REMORA_ERR_INVALID_PARAM;
        }
        if (s->err || s->peer_closed) {
            remora_status_t st = s->err ? s->err : REMORA_ERR_DISCONNECTED;
            rm_engine_unlock(s->ctx);
            return st;
        }
        atomic_store(&s->tx_wake, 0); /* before the look: a send leaving UCX now wakes us */
        if (tx_room(s) > 0)
            break;
        if (wait_flag(s, &s->tx_wake, timeout_ms, deadline) != REMORA_OK &&
            tx_room(s) == 0 && !s->err && !s->peer_closed) {
            rm_engine_unlock(s->ctx);
            return REMORA_ERR_TIMED_OUT;
        }
    }
    /* Each send may fail the connection inside it (s->peer gone, s->err set). */
    size_t room;
    while (sent < len && (room = tx_room(s)) > 0 && s->peer != NULL && !s->err) {
        size_t n = len - sent;
        if (n > room)
            n = room;
        if (n > RM_SOCK_MSG_MAX)
            n = RM_SOCK_MSG_MAX;
        void *copy = malloc(n);
        if (copy == NULL)
            break;
        memcpy(copy, (const char *)buf + sent, n);
        rm_hdr_t hdr = {.type = RM_MSG_SOCK_DATA, .region_id = s->peer_id, .offset = s->id,
                        .length = n};
        rm_send_params_t sp = {.body = copy, .body_len = n, .body_free = copy,
                               .done = data_sent,
                               .arg = (void *)(uintptr_t)((uint64_t)n << 32 | s->id)};
        atomic_fetch_add(&s->tx_inflight, n); /* before: UCX may be done inside the send */
        if (rm_peer_send(s->peer, s->am_id, &hdr, &sp) != REMORA_OK) {
            atomic_fetch_sub(&s->tx_inflight, n); /* failed sends call no done */
            break;
        }
        s->tx_credit -= n;
        sent += n;
    }
    remora_status_t err = s->err;
    update_hints(s);
    rm_engine_unlock(s->ctx);
    rm_engine_kick(s->ctx);
    return sent ? (int64_t)sent : err ? err : REMORA_ERR_NO_MEMORY;
}

int64_t remora_sock_recv(remora_sock_h s, void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = deadline_for(timeout_ms);
    size_t got = 0;
    int credit = 0;

    if (s == NULL || (buf == NULL && len > 0))
        return REMORA_ERR_INVALID_PARAM;
    if (len == 0)
        return 0;
    rm_engine_lock(s->ctx);
    while (s->rx_bytes == 0) {
        if (s->err || s->peer_fin) {
            remora_status_t st = s->err;
            rm_engine_unlock(s->ctx);
            return st; /* 0: end of stream */
        }
        atomic_store(&s->rx_wake, 0);
        if (wait_flag(s, &s->rx_wake, timeout_ms, deadline) != REMORA_OK && s->rx_bytes == 0 &&
            !s->err && !s->peer_fin) {
            rm_engine_unlock(s->ctx);
            return REMORA_ERR_TIMED_OUT;
        }
    }
    while (got < len && !rm_list_empty(&s->rxq)) {
        rx_chunk_t *ch = rm_container_of(s->rxq.next, rx_chunk_t, link);
        size_t n = ch->len - ch->off;
        if (n > len - got)
            n = len - got;
        memcpy((char *)buf + got, ch->data + ch->off, n);
        ch->off += n;
        got += n;
        if (ch->off == ch->len) {
            rm_list_del(&ch->link);
            free(ch);
        }
    }
    s->rx_bytes    -= got;
    s->rx_consumed += got;
    if (s->rx_consumed >= REMORA_SOCK_WINDOW / 4) {
        send_ctl(s, RM_MSG_SOCK_CREDIT, 0, s->rx_consumed);
        s->rx_consumed = 0;
        credit = 1;
    }
    update_hints(s);
    rm_engine_unlock(s->ctx);
    if (credit)
        rm_engine_kick(s->ctx);
    return (int64_t)got;
}

remora_status_t remora_sock_shutdown(remora_sock_h s)
{
    if (s == NULL)
        return REMORA_ERR_INVALID_PARAM;
    rm_engine_lock(s->ctx);
    if (!s->shut) {
        s->shut = 1;
        send_ctl(s, RM_MSG_SOCK_FIN, 0, 0);
    }
    update_hints(s);
    rm_engine_unlock(s->ctx);
    rm_engine_kick(s->ctx);
    return REMORA_OK;
}

void remora_sock_close(remora_sock_h s)
{
    remora_context_h ctx;

    if (s == NULL)
        return;
    ctx = s->ctx;
    rm_engine_lock(ctx);
    send_ctl(s, RM_MSG_SOCK_FIN, 1, 0);
    sock_free(s);
    rm_engine_unlock(ctx);
    rm_engine_kick(ctx);
}

static unsigned poll_one(remora_sock_h s, unsigned events)
{
    unsigned r = 0;
    if ((events & REMORA_SOCK_POLLIN) && rm_sock_rx_hint(s))
        r |= REMORA_SOCK_POLLIN;
    if ((events & REMORA_SOCK_POLLOUT) && rm_sock_tx_hint(s))
        r |= REMORA_SOCK_POLLOUT;
    rm_engine_lock(s->ctx);
    if (s->err)
        r |= REMORA_SOCK_POLLERR;
    rm_engine_unlock(s->ctx);
    return r;
}

static void poll_arm(remora_sock_h *socks, unsigned n, atomic_int *flag, remora_context_h ctx)
{
    for (unsigned i = 0; i < n; i++) {
        rm_engine_lock(socks[i]->ctx);
        socks[i]->poll_flag = flag;
        socks[i]->poll_ctx  = ctx;
        rm_engine_unlock(socks[i]->ctx);
    }
}

int remora_sock_poll(remora_sock_h *socks, const unsigned *events, unsigned *revents,
                     unsigned n, int timeout_ms)
{
    uint64_t deadline = deadline_for(timeout_ms);
    atomic_int flag;
    int ready;

    if (socks == NULL || events == NULL || revents == NULL || n == 0)
        return REMORA_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < n; i++)
        if (socks[i] == NULL)
            return REMORA_ERR_INVALID_PARAM;
    atomic_init(&flag, 0);
    poll_arm(socks, n, &flag, socks[0]->ctx);
    for (;;) {
        atomic_store(&flag, 0);
        ready = 0;
        for (unsigned i = 0; i < n; i++)
            if ((revents[i] = poll_one(socks[i], events[i])) != 0)
                ready++;
        if (ready || timeout_ms == 0 || rm_now_ns() >= deadline)
            break;
        /* Sockets of other contexts wake their own; look again at least every ms. */
        uint64_t slice = rm_now_ns() + 1000000u;
        rm_engine_wait(socks[0]->ctx, &flag, slice < deadline ? slice : deadline);
    }
    poll_arm(socks, n, NULL, NULL);
    return ready;
}
