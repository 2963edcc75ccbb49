/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The client: connection and handshake, control calls, events, and
 * reconnecting. The region cache is in client_regions.c, data transfers in
 * transfer.c.
 *
 * Design notes (reconnecting; the contract is in remora.h)
 * - client_fail() (lock held, any thread that sees the failure) fails every
 *   pending op, closes the endpoint and the bootstrap socket, and, when
 *   reconnecting is on, marks the client `reconnecting` and wakes its
 *   reconnect thread. Calls check `disconnected` and fail at once.
 * - The reconnect thread (one per reconnecting client, started at connect)
 *   is the only thread that touches peer.sock and peer.rx while the client is
 *   disconnected. It first waits until `pending` is empty: every op of the
 *   old endpoint has had all its UCX callbacks, so nothing of the old
 *   connection can touch the client after the new one exists. Then it runs
 *   the ordinary handshake, blocking on the socket without the lock (why a
 *   thread: the handshake blocks up to a timeout, which neither the progress
 *   thread nor a lock holder may). Attempts are spaced by a doubling backoff.
 * - The switch to the new connection happens in one locked section with the
 *   endpoint's creation (handshake_connect -> client_up): caches dropped,
 *   conn_gen bumped, `disconnected` cleared, RECONNECTED queued. So a
 *   failure of the new connection that the progress thread sees right after
 *   is handled as a failure of a connected client, never lost.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/reach.h"
#include "mem/stage.h"
#include "remote/auth.h"
#include "remote/client.h"
#include "remote/sock.h"
#include "util/env.h"
#include "util/log.h"
#include "util/time.h"

#define RM_DEFAULT_CHUNK   (4u << 20)
#define RM_DEFAULT_WINDOW  4u
#define RM_CLOSE_WAIT_MS   2000
/* Control calls timed out with their answer still due, before the
 * connection is taken for stuck (rm_client_call_until). */
#define RM_CLIENT_ABANDONED_MAX 1024u
#define RM_RC_MIN_MS       50u
#define RM_RC_MAX_MS       500u
#define RM_RC_GIVE_UP_MS   60000
#define RM_RC_ATTEMPT_MS   3000 /* one handshake attempt, at most */

/* ------------------------------------------------------------ ops */

rm_op_t *rm_client_op_new(remora_client_h c, uint8_t reply_type, size_t size)
{
    rm_op_t *op = calloc(1, size);

    if (op == NULL)
        return NULL;
    op->client     = c;
    op->reply_type = reply_type;
    op->req_id     = ++c->next_req_id;
    rm_list_push_back(&c->pending, &op->link);
    c->nops++;
    atomic_store(&c->drained, 0);
    return op;
}

void rm_client_op_free(rm_op_t *op)
{
    remora_client_h c = op->client;

    if (op->sub_owned)
        c->nsubops--;
    if (op->abandoned)
        c->nabandoned--;
    free(op->reply);
    free(op->follow_buf);
    free(op);
    /* A subscription's own wait does not hold up a disconnect. */
    if (--c->nops == c->nsubops)
        rm_engine_complete(c->ctx, &c->drained);
}

/* Finish an op once its reply is in and UCX has called back for everything. */
void rm_client_op_finish(rm_op_t *op)
{
    if (!op->replied || op->ucx_busy)
        return;
    rm_list_del(&op->link);
    if (op->on_done) {
        op->on_done(op);
        rm_client_op_free(op);
    } else {
        /* The waiter frees control ops; it may be gone (timed out): then
         * done was already set by it and we free here. */
        if (atomic_load(&op->done))
            rm_client_op_free(op);
        else
            rm_engine_complete(op->client->ctx, &op->done);
    }
}

rm_op_t *rm_client_op_send(remora_client_h c, rm_hdr_t *hdr, uint8_t reply_type,
                           rm_send_params_t *sp)
{
    rm_op_t *op = rm_client_op_new(c, reply_type, sizeof(*op));
    remora_status_t st;

    if (op == NULL) {
        free(sp->body_free);
        return NULL;
    }
    hdr->req_id = op->req_id;
    /* A send that fails may fail the connection on the spot (client_fail),
     * which finishes this op already: never finish it twice. */
    if ((st = rm_peer_send(&c->peer, RM_AM_ID_TO_SERVER, hdr, sp)) != REMORA_OK && !op->replied) {
        op->status  = st; /* finished now: its waiter sees why at once */
        op->replied = 1;
        rm_client_op_finish(op);
    }
    return op;
}

void rm_client_op_abandon(rm_op_t *op)
{
    if (op->follow != NULL) {
        rm_client_op_abandon(op->follow);
        op->follow = NULL;
    }
    if (atomic_load(&op->done))
        rm_client_op_free(op); /* finished: nobody else will */
    else
        atomic_store(&op->done, 1); /* its finish frees it */
}

remora_status_t rm_client_op_wait(remora_client_h c, rm_op_t *op, uint64_t deadline)
{
    remora_status_t st;

    rm_engine_unlock(c->ctx);
    rm_engine_kick(c->ctx);
    st = rm_engine_wait(c->ctx, &op->done, deadline);
    rm_engine_lock(c->ctx);
    if (st != REMORA_OK && !atomic_load(&op->done)) {
        atomic_store(&op->done, 1);
        return REMORA_ERR_TIMED_OUT;
    }
    return REMORA_OK;
}

static rm_op_t *op_by_req_id(remora_client_h c, uint64_t req_id)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &c->pending) {
        rm_op_t *op = rm_container_of(pos, rm_op_t, link);
        if (op->req_id == req_id && op->reply_type)
            return op;
    }
    return NULL;
}

/* Send a control message and wait for its reply until the deadline. On
 * REMORA_OK the reply body (if any) is handed over in *body_p (free()) and
 * the reply's status returned. */
remora_status_t rm_client_call_until(remora_client_h c, uint64_t deadline, uint8_t type,
                                     uint8_t reply_type, rm_wbuf_t *body, void **body_p,
                                     size_t *len_p)
{
    rm_hdr_t hdr = {.type = type};
    rm_send_params_t sp = {0};
    remora_status_t st;
    rm_op_t *op;

    if (body && body->failed) {
        rm_wbuf_free(body);
        return REMORA_ERR_NO_MEMORY;
    }
    rm_engine_lock(c->ctx);
    if (c->disconnected) {
        rm_engine_unlock(c->ctx);
        rm_wbuf_free(body);
        return c->disc_status;
    }
    if (body) {
        sp.body = sp.body_free = body->data;
        sp.body_len = body->len;
    }
    if ((op = rm_client_op_send(c, &hdr, reply_type, &sp)) == NULL) {
        rm_engine_unlock(c->ctx);
        return REMORA_ERR_NO_MEMORY;
    }
    if (rm_client_op_wait(c, op, deadline) != REMORA_OK) {
        /* Timed out: the op is left to be freed by its late reply (or the
         * close). A server that answers none of them (heartbeats going)
         * would have them pile up for as long as the caller retries: past
         * RM_CLIENT_ABANDONED_MAX the connection goes, as a data request's
         * timeout takes it (review). */
        op->abandoned = 1;
        int give_up = ++c->nabandoned > RM_CLIENT_ABANDONED_MAX;
        rm_engine_unlock(c->ctx);
        if (give_up)
            rm_client_abort(c, REMORA_ERR_TIMED_OUT);
        return REMORA_ERR_TIMED_OUT;
    }
    st = op->status;
    if (st == REMORA_OK && body_p) {
        *body_p  = op->reply;
        *len_p   = op->reply_len;
        op->reply = NULL;
    }
    rm_client_op_free(op);
    rm_engine_unlock(c->ctx);
    return st;
}

/* A control reply: keep the body, finish the op. */
static void ctrl_reply(rm_op_t *op, const rm_hdr_t *hdr, const void *body, size_t len)
{
    op->reply_hdr = *hdr;
    op->status = (remora_status_t)hdr->status;
    if (op->status > 0 || op->status < REMORA_ERR_VERSION)
        op->status = REMORA_ERR_PROTOCOL; /* not a status we know */
    if (hdr->type == RM_MSG_ERROR && op->status == REMORA_OK)
        op->status = REMORA_ERR_PROTOCOL;
    free(op->reply); /* a subscription's spare buffer, if it lent one */
    op->reply = NULL;
    if (len && (op->reply = malloc(len)) != NULL) {
        memcpy(op->reply, body, len);
        op->reply_len = len;
    } else if (len) {
        op->status = REMORA_ERR_NO_MEMORY;
    }
    op->replied = 1;
    rm_client_op_finish(op);
}

/* A ring push (a subscription's RING_WAIT answered with whole slots by
 * rendezvous, docs/ring.md): the slots land in a buffer the op owns (its
 * reply), so an abandoned wait never writes into freed memory; the server's
 * verdict (the ring's `claimed` once the push was sent) follows in a second
 * RING_NOTIFY, and only then is the op answered. */
static void ring_push_landed(void *request, ucs_status_t status, size_t length, void *user_data)
{
    rm_op_t *op = user_data;

    (void)length;
    if (status != UCS_OK && op->status == REMORA_OK)
        op->status = rm_status_from_ucs(status);
    op->ucx_busy--;
    rm_client_op_finish(op);
    if (request)
        ucp_request_free(request);
}

/* Whether a push of len bytes is within its wait's credit (the bytes the
 * RING_WAIT asked for; none for a wait that asked for no push). One over it
 * is refused before anything is allocated or received: the server would
 * choose how much memory the client takes. */
static int push_within_credit(const rm_op_t *op, size_t len)
{
    if (len > 0 && len <= op->push_cap)
        return 1;
    rm_warn_peer("server pushed %zu bytes for a credit of %zu", len, op->push_cap);
    return 0;
}

/* Make a ring push's buffer (the subscription's lent spare, or a new one)
 * hold len bytes, within the credit; -1 when it cannot be had. */
static int op_reply_fit(rm_op_t *op, size_t len)
{
    if (op->reply != NULL && op->reply_cap >= len)
        return 0;
    free(op->reply);
    op->reply_cap = len;
    return (op->reply = malloc(len)) != NULL ? 0 : -1;
}

/* A push is coming: its wait's owner may send the next wait now. */
static void push_started(rm_op_t *op, const rm_hdr_t *hdr)
{
    if (op->on_push != NULL && !atomic_load(&op->done))
        op->on_push(op, hdr);
}

static ucs_status_t ring_push_recv(remora_client_h c, rm_op_t *op, const rm_hdr_t *hdr,
                                   void *body, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = ring_push_landed, .user_data = op};

    op->reply_hdr = *hdr;
    op->status    = (remora_status_t)hdr->status;
    if (op->status == REMORA_OK && !push_within_credit(op, len))
        op->status = REMORA_ERR_PROTOCOL;
    if (op->status != REMORA_OK || op_reply_fit(op, len) != 0) {
        if (op->status == REMORA_OK)
            op->status = REMORA_ERR_NO_MEMORY;
        op->replied = 1;
        rm_client_op_finish(op);
        return UCS_OK; /* the payload is dropped */
    }
    /* The op is answered once the verdict (a second RING_NOTIFY) is in too. */
    op->reply_type   = RM_MSG_RING_NOTIFY;
    op->push_verdict = 1;
    op->reply_len = len;
    op->ucx_busy++;
    /* UCX now writes into the op's buffer and will call back: from here on
     * the op holds up a disconnect like any transfer (a subscription's wait
     * otherwise does not), so the client is never freed under the callback. */
    if (op->sub_owned) {
        op->sub_owned = 0;
        c->nsubops--;
        atomic_store(&c->drained, 0); /* set again when the last op goes */
    }
    ucs_status_ptr_t ret = ucp_am_recv_data_nbx(c->ctx->worker, body, op->reply, len, &p);
    if (!UCS_PTR_IS_PTR(ret))
        ring_push_landed(NULL, UCS_PTR_STATUS(ret), len, op);
    /* Last: a send that fails the connection finishes the op (not freed:
     * its owner needs the lock we hold). */
    push_started(op, hdr);
    return UCS_OK;
}

/* ------------------------------------------------------------ events */

static void deliver_events(rm_deferred_t *d)
{
    remora_client_h c = rm_container_of(d, struct remora_client, event_task);
    rm_list_t batch, *pos, *tmp;

    rm_list_init(&batch);
    rm_engine_lock(c->ctx);
    rm_list_for_each_safe(pos, tmp, &c->events) {
        rm_list_del(pos);
        rm_list_push_back(&batch, pos);
    }
    c->event_task_queued = 0;
    rm_engine_complete(c->ctx, &c->events_idle);
    rm_engine_unlock(c->ctx);
    /* From here on the client may be gone: items carry their own callback. */
    rm_list_for_each_safe(pos, tmp, &batch) {
        rm_event_item_t *e = rm_container_of(pos, rm_event_item_t, link);
        e->ev.name = e->ev.type == REMORA_EVENT_DISCONNECTED ||
                     e->ev.type == REMORA_EVENT_RECONNECTED ? NULL : e->name;
        e->cb(&e->ev, e->arg);
        free(e);
    }
}

/* Queue an event for the progress thread; returns it (NULL: none) so that
 * the caller may fill in the fields of its type. */
static rm_event_item_t *queue_event(remora_client_h c, remora_event_type_t type,
                                    const char *name, uint64_t size, uint64_t generation,
                                    remora_status_t status)
{
    rm_event_item_t *e;

    if (c->event_cb == NULL || (e = calloc(1, sizeof(*e))) == NULL)
        return NULL;
    e->ev.type       = type;
    e->ev.size       = size;
    e->ev.generation = generation;
    e->ev.status     = status;
    e->cb            = c->event_cb;
    e->arg           = c->event_arg;
    if (name)
        snprintf(e->name, sizeof(e->name), "%s", name);
    rm_list_push_back(&c->events, &e->link);
    if (!c->event_task_queued) {
        c->event_task_queued = 1;
        atomic_store(&c->events_idle, 0);
        c->event_task.fn = deliver_events;
        rm_engine_defer(c->ctx, &c->event_task);
    }
    return e;
}

/* The same, bounded by the client's timeout. */
remora_status_t rm_client_call(remora_client_h c, uint8_t type, uint8_t reply_type,
                               rm_wbuf_t *body, void **body_p, size_t *len_p)
{
    return rm_client_call_until(c, rm_deadline_ns(c->timeout_ms), type, reply_type, body, body_p,
                             len_p);
}


static void handle_event(remora_client_h c, const rm_hdr_t *hdr, const void *body, size_t len)
{
    char name[REMORA_NAME_MAX + 1];
    rm_rregion_t *r = rm_client_region_by_id(c, hdr->region_id);

    if (rm_name_decode(body, len, name) != 0) {
        rm_warn("malformed event from the server");
        return;
    }
    c->event_seq++;
    if (hdr->epoch > c->epoch_seen)
        c->epoch_seen = hdr->epoch;
    if (r != NULL)
        rm_client_region_detach(c, r, hdr->epoch); /* acknowledged once unused */
    rm_client_send_acks(c);
    queue_event(c, hdr->kind == RM_EVENT_CHANGED ? REMORA_EVENT_REGION_CHANGED
                                                 : REMORA_EVENT_REGION_REMOVED,
                name, hdr->size, hdr->generation, REMORA_OK);
}

/* ------------------------------------------------------------ peer callbacks */

static ucs_status_t client_on_message(rm_peer_t *peer, const rm_hdr_t *hdr, void *body,
                                      size_t len, const ucp_am_recv_param_t *param)
{
    remora_client_h c = (remora_client_h)peer;
    rm_hdr_t mismatch = {.type = RM_MSG_ERROR, .status = REMORA_ERR_PROTOCOL};
    rm_op_t *op;

    if (hdr == NULL) {
        rm_warn("malformed message header from the server");
        return UCS_OK;
    }
    if (hdr->type == RM_MSG_EVENT) {
        handle_event(c, hdr, body, len);
        return UCS_OK;
    }
    if (RM_MSG_IS_SOCK(hdr->type) && hdr->type != RM_MSG_SOCK_CONNECT_REPLY) {
        if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) /* always eager */
            rm_sock_on_message(peer, NULL, hdr, body, len);
        return UCS_OK;
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && hdr->type == RM_MSG_RING_NOTIFY &&
        !c->peer.seal && (op = op_by_req_id(c, hdr->req_id)) != NULL && op->sub_owned &&
        op->reply_type == RM_MSG_RING_NOTIFY && !op->push_verdict) {
        op->reply_type = 0;
        return ring_push_recv(c, op, hdr, body, len);
    }
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && hdr->type == RM_MSG_RING_NOTIFY &&
        (op = op_by_req_id(c, hdr->req_id)) != NULL && op->push_req && !op->push_verdict &&
        hdr->status == REMORA_OK && len > 0) {
        /* A small push comes eagerly; its verdict follows all the same. */
        remora_status_t st = !push_within_credit(op, len) ? REMORA_ERR_PROTOCOL
                             : op_reply_fit(op, len) != 0 ? REMORA_ERR_NO_MEMORY
                                                          : REMORA_OK;
        if (st != REMORA_OK) {
            op->reply_type = 0;
            op->status     = st;
            op->replied    = 1;
            rm_client_op_finish(op);
            return UCS_OK;
        }
        memcpy(op->reply, body, len);
        op->reply_len    = len;
        op->reply_hdr    = *hdr;
        op->status       = REMORA_OK;
        op->push_verdict = 1;
        push_started(op, hdr);
        return UCS_OK;
    }
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && hdr->type == RM_MSG_RING_NOTIFY &&
        (op = op_by_req_id(c, hdr->req_id)) != NULL && op->push_verdict) {
        op->reply_type   = 0;
        op->push_verdict = 0;
        op->push_claimed = hdr->size;
        if (hdr->status != REMORA_OK && op->status == REMORA_OK)
            op->status = REMORA_ERR_PROTOCOL;
        op->replied = 1;
        rm_client_op_finish(op);
        return UCS_OK;
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && hdr->type != RM_MSG_READ_REPLY) {
        rm_warn("server sent a %s body by rendezvous", rm_msg_type_name(hdr->type));
        mismatch.req_id = hdr->req_id;
        hdr = &mismatch; /* fails the op below; returning drops the payload */
        len = 0;
    }
    if ((op = op_by_req_id(c, hdr->req_id)) == NULL) {
        rm_debug("reply %s for unknown request %llu dropped", rm_msg_type_name(hdr->type),
                 (unsigned long long)hdr->req_id);
        return UCS_OK;
    }
    if (op->push_verdict) {
        /* A push's element is in op->reply (UCX may still be writing it):
         * only its verdict may follow. Anything else fails the wait and
         * leaves the buffer alone (ctrl_reply would free or replace it). */
        rm_warn("server followed a ring push with %s", rm_msg_type_name(hdr->type));
        op->reply_type   = 0;
        op->push_verdict = 0;
        if (op->status == REMORA_OK)
            op->status = REMORA_ERR_PROTOCOL;
        op->replied = 1;
        rm_client_op_finish(op);
        return UCS_OK;
    }
    if (hdr->type != op->reply_type && hdr->type != RM_MSG_ERROR) {
        rm_warn("server answered %s with %s", rm_msg_type_name(op->reply_type),
                rm_msg_type_name(hdr->type));
        hdr = &mismatch;
        len = 0;
    }
    op->reply_type = 0; /* a second reply with the same id finds nothing */
    if (op->on_reply)
        return op->on_reply(op, hdr, body, len, param);
    ctrl_reply(op, hdr, body, len);
    return UCS_OK;
}

/* Fail every op; they finish as soon as UCX has called back for them. */
static void fail_pending(remora_client_h c, remora_status_t st)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &c->pending) {
        rm_op_t *op = rm_container_of(pos, rm_op_t, link);
        if (op->replied)
            continue;
        op->status     = st;
        op->replied    = 1;
        op->reply_type = 0;
        rm_client_op_finish(op);
    }
}

static void reconnect_request(remora_client_h c);

/* The connection is over: fail what is pending and close (lock held); with
 * reconnecting on, a reconnect follows. */
static void client_fail(remora_client_h c, remora_status_t op_status, remora_status_t later)
{
    rm_event_item_t *e;

    if (c->disconnected)
        return;
    c->disconnected = 1;
    c->disc_status  = later;
    fail_pending(c, op_status);
    rm_sock_peer_gone(&c->peer);
    rm_peer_close(&c->peer);
    /* ready is cleared by the user's disconnect: nothing to follow, no event. */
    c->reconnecting = c->ready && c->rc_has_thread;
    if (c->ready && (e = queue_event(c, REMORA_EVENT_DISCONNECTED, NULL, 0, 0, later)) != NULL)
        e->ev.reconnecting = c->reconnecting;
    if (c->reconnecting) {
        atomic_store(&c->link_settled, 0);
        reconnect_request(c);
    }
}

static void client_on_error(rm_peer_t *peer, remora_status_t status)
{
    remora_client_h c = (remora_client_h)peer;

    /* Once connected, every failure of the connection means the same thing;
     * before that, the connection could not be made (UCX reports a refused
     * TCP connect as "not connected"). */
    if (c->ready)
        status = REMORA_ERR_DISCONNECTED;
    else if (status == REMORA_ERR_DISCONNECTED)
        status = REMORA_ERR_CONNECTION_REFUSED;
    rm_info("connection to server lost: %s", remora_status_string(status));
    client_fail(c, status, status);
}

void rm_client_abort(remora_client_h c, remora_status_t op_status)
{
    rm_engine_lock(c->ctx);
    rm_warn("an operation did not finish in time; closing the connection");
    client_fail(c, op_status, REMORA_ERR_DISCONNECTED);
    rm_engine_unlock(c->ctx);
}

static const rm_peer_ops_t client_ops = {.on_message = client_on_message,
                                         .on_error   = client_on_error};

/* The bootstrap socket after the handshake: heartbeats, or its end. */
static void client_sock_cb(rm_watch_t *w, uint32_t events)
{
    remora_client_h c = rm_container_of(w, struct remora_client, peer.sock);

    if (rm_peer_sock_read(&c->peer) != 0)
        client_on_error(&c->peer, REMORA_ERR_DISCONNECTED);
}

/* ------------------------------------------------------------ handshake */

/* One handshake step on the bootstrap socket: send a frame, read the reply
 * of the expected type, split off its status. */
static remora_status_t boot_call(remora_client_h c, uint64_t deadline, unsigned type,
                                 unsigned flags, const void *payload, size_t len,
                                 unsigned reply_type, rm_boot_frame_t *reply,
                                 const uint8_t **rest_p, uint32_t *rest_len_p)
{
    int fd = c->peer.sock.fd;
    remora_status_t st, status;

    if (rm_boot_send_frame(fd, type, flags, payload, len) != 0)
        return REMORA_ERR_DISCONNECTED;
    if ((st = rm_boot_recv_frame(fd, &c->peer.rx, deadline, reply)) != REMORA_OK)
        return st;
    if (reply->type != reply_type ||
        rm_boot_reply_split(reply, &status, rest_p, rest_len_p) != 0) {
        rm_info("server answered the handshake out of turn");
        return REMORA_ERR_PROTOCOL;
    }
    return status;
}

static remora_status_t handshake_auth(remora_client_h c, uint64_t deadline,
                                      const rm_hello_t *mine, const rm_hello_t *theirs)
{
    uint8_t mac[RM_MAC_LEN];
    rm_boot_frame_t f;
    const uint8_t *proof;
    uint32_t len;
    remora_status_t st;

    if (c->token == NULL) {
        rm_info("server requires a token and none was given");
        return REMORA_ERR_AUTH;
    }
    rm_auth_proof(RM_AUTH_CLIENT_PROOF, c->token, c->token_len, theirs->nonce, mine->nonce, mac);
    st = boot_call(c, deadline, RM_BOOT_AUTH, 0, mac, RM_MAC_LEN, RM_BOOT_AUTH_REPLY, &f, &proof,
                   &len);
    if (st != REMORA_OK)
        return st;
    /* The server proves it knows the token too. */
    if (len != RM_MAC_LEN || rm_auth_check(RM_AUTH_SERVER_PROOF, c->token, c->token_len,
                                           theirs->nonce, mine->nonce, proof) != 0)
        return REMORA_ERR_AUTH;
    return REMORA_OK;
}

/* HELLO, then AUTH when the server wants it. */
static remora_status_t handshake_hello(remora_client_h c, uint64_t deadline)
{
    rm_hello_t mine = {.proto_min = RM_PROTO_VERSION, .proto_max = RM_PROTO_VERSION}, theirs;
    unsigned major, minor, release;
    char why[256];
    rm_boot_frame_t f;
    const uint8_t *body;
    uint32_t len;
    rm_wbuf_t w;
    remora_status_t st;

    ucp_get_version(&major, &minor, &release);
    mine.ucx_version = major << 16 | minor;
    mine.tcp_tx_seg  = c->ctx->tcp_tx_seg;
    mine.tcp_rx_seg  = c->ctx->tcp_rx_seg;
    memcpy(mine.host_id, c->ctx->host_id, RM_HOST_ID_LEN);
    rm_auth_nonce(mine.nonce);
    mine.flags = c->encrypt ? RM_HELLO_ENCRYPT : 0;
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &mine);
    st = w.failed ? REMORA_ERR_NO_MEMORY
                  : boot_call(c, deadline, RM_BOOT_HELLO, 0, w.data, w.len, RM_BOOT_HELLO_REPLY,
                              &f, &body, &len);
    rm_wbuf_free(&w);
    if (st != REMORA_OK)
        return st;
    if (rm_hello_decode(body, len, &theirs) != 0)
        return REMORA_ERR_PROTOCOL;
    if (theirs.proto_min > RM_PROTO_VERSION || theirs.proto_max < RM_PROTO_VERSION)
        return REMORA_ERR_VERSION;
    if (rm_tcp_segs_fit(c->ctx, theirs.tcp_segs_sent, theirs.tcp_tx_seg, theirs.tcp_rx_seg, why,
                        sizeof(why)) != REMORA_OK) {
        rm_error("cannot connect to this server: %s", why);
        return REMORA_ERR_UNSUPPORTED;
    }
    if (theirs.flags & RM_HELLO_AUTH_REQUIRED) {
        st = handshake_auth(c, deadline, &mine, &theirs);
    } else if (c->token) {
        /* We hold a token, so we expect the server to prove it holds it too. */
        rm_info("server does not authenticate, but a token was given");
        st = REMORA_ERR_AUTH;
    }
    if (st == REMORA_OK)
        st = rm_client_seal_hello(c, &mine, &theirs);
    /* Taken over under the lock when the connection is made (client_up). */
    c->hs_same_host = memcmp(theirs.host_id, c->ctx->host_id, RM_HOST_ID_LEN) == 0;
    c->hs_instance  = theirs.instance;
    atomic_store(&c->server_stats, (theirs.flags & RM_HELLO_STATS) != 0);
    return st;
}

/* The server asked us to connect through UCX's connection manager to a
 * port it opened for us, on the address we reached it at; our first message
 * there is AUTH with the ticket that came with the port (wire.h). */
static remora_status_t client_connect_cm(remora_client_h c, int fd,
                                         const uint8_t reply[RM_CM_REPLY_LEN])
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    remora_status_t st;
    uint8_t *ticket;

    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0 || ss.ss_family != AF_INET)
        return REMORA_ERR_PROTOCOL;
    ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)(reply[0] | (reply[1] << 8)));
    if ((ticket = malloc(RM_CM_TICKET_LEN)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    memcpy(ticket, reply + 2, RM_CM_TICKET_LEN);
    if ((st = rm_peer_connect_cm(&c->peer, (struct sockaddr *)&ss, len)) != REMORA_OK) {
        free(ticket);
        return st;
    }
    rm_hdr_t hdr = {.type = RM_MSG_AUTH};
    rm_send_params_t sp = {.body = ticket, .body_len = RM_CM_TICKET_LEN, .body_free = ticket};
    return rm_peer_send(&c->peer, RM_AM_ID_TO_SERVER, &hdr, &sp);
}

static remora_status_t handshake_endpoint(remora_client_h c, const rm_boot_frame_t *reply,
                                          const uint8_t *addr, uint32_t len, uint64_t deadline);

/* A connection is made (lock held, once its endpoint is wired up): the
 * client is connected from here on. A reconnect also drops what was
 * learnt on the old connection and tells the application. */
static void client_up(remora_client_h c)
{
    rm_event_item_t *e;
    int new_instance = c->hs_instance != c->server_instance;

    c->ready           = 1;
    c->same_host       = c->hs_same_host;
    c->server_instance = c->hs_instance;
    if (c->conn_gen++ == 0)
        return; /* the first connection */
    c->reconnects++;
    rm_client_regions_drop(c, 1);
    if (c->nlanes) {
        rm_warn("reconnected; lanes are not reconnected: going on with one connection");
        c->nlanes = 0;
    }
    c->disconnected = 0;
    c->reconnecting = 0;
    rm_info("reconnected to %s (%s server instance, reconnect %llu)", c->addr,
            new_instance ? "a new" : "the same", (unsigned long long)c->reconnects);
    if ((e = queue_event(c, REMORA_EVENT_RECONNECTED, NULL, 0, 0, REMORA_OK)) != NULL) {
        e->ev.new_instance = new_instance;
        e->ev.reconnects   = c->reconnects;
    }
    rm_engine_complete(c->ctx, &c->link_settled);
}

/*
 * The connection is up once its endpoint is wired up: then nothing a
 * reconnected client's other threads send can overtake our first message,
 * which through the connection manager must be the ticket (UCX 1.13 let a
 * subscription's LOOKUP, sent as the link settled, reach the server first;
 * the server closed the connection). The wait's timeout is a mitigation only
 * (engine.h): a broken endpoint reports itself through its error callback
 * like any other. One that failed already (through the connection manager,
 * no lane in common) fails the connect.
 */
static remora_status_t client_settle(remora_client_h c, uint64_t deadline)
{
    remora_status_t wst = rm_peer_wireup_wait(&c->peer, deadline), st = REMORA_OK;

    rm_engine_lock(c->ctx);
    if (rm_peer_failing(&c->peer)) {
        st = wst != REMORA_OK ? wst : REMORA_ERR_DISCONNECTED;
    } else {
        if (wst != REMORA_OK)
            rm_info("endpoint wire-up did not finish within the handshake's deadline");
        client_up(c);
    }
    rm_engine_unlock(c->ctx);
    return st;
}

/* CONNECT: exchange worker addresses (or get a connection-manager port) and
 * create the UCX endpoint the way the server said. */
static remora_status_t handshake_connect(remora_client_h c, uint64_t deadline)
{
    remora_context_h ctx = c->ctx;
    rm_boot_frame_t f;
    const uint8_t *addr;
    uint32_t len;
    uint8_t *sealed = NULL, *plain = NULL;
    size_t slen;
    remora_status_t st;

    /* The server's host may reach our UCX ports from now on (gate.h): its
     * endpoint to us connects as soon as it has our address. */
    st = rm_peer_gate_open(&c->peer, NULL, 0);
    if (st == REMORA_OK)
        st = rm_client_seal_connect(c, ctx->worker_addr, ctx->worker_addr_len, &sealed, &slen);
    if (st == REMORA_OK)
        st = boot_call(c, deadline, RM_BOOT_CONNECT, RM_BOOT_CM,
                       sealed ? sealed : ctx->worker_addr, sealed ? slen : ctx->worker_addr_len,
                       RM_BOOT_CONNECT_REPLY, &f, &addr, &len);
    free(sealed);
    if (st == REMORA_ERR_TIMED_OUT && rm_now_ns() < deadline) /* the server's answer */
        rm_error("the server could not reach this process's UCX interfaces within %u ms "
                 "(UCX_NET_DEVICES here can leave a silent one out)", RM_REACH_LIMIT_MS);
    if (st == REMORA_ERR_TRANSPORT) /* the one refusal of its endpoint to us (server.c) */
        rm_error("the server could not open a UCX endpoint to this process (its log says "
                 "why): the UCX settings at both ends (UCX_TLS, REMORA_RMA, ...) must leave "
                 "them a transport in common that reports a dead peer");
    if (st == REMORA_OK)
        st = rm_client_seal_connect_reply(c, &f, &addr, &len, &plain);
    if (st == REMORA_OK)
        st = handshake_endpoint(c, &f, addr, len, deadline);
    if (st == REMORA_OK)
        st = client_settle(c, deadline);
    free(plain);
    return st;
}

/* Where UCX connects to the server's interfaces blocking this thread,
 * without a deadline, only once each has answered us (engine/reach.h). */
static remora_status_t reach_server(remora_client_h c, const uint8_t *addr, uint32_t len,
                                    uint64_t deadline)
{
    uint64_t limit = rm_now_ns() + (uint64_t)RM_REACH_LIMIT_MS * 1000000u;
    rm_reach_t *r;
    remora_status_t st = rm_peer_reach_start(&c->peer, addr, len, &r);
    char silent[64];

    if (st != REMORA_OK || r == NULL)
        return st;
    if ((st = rm_reach_wait(r, deadline < limit ? deadline : limit)) == REMORA_ERR_TIMED_OUT) {
        rm_reach_silent(r, silent, sizeof(silent));
        rm_error("the server's UCX worker address names %s, which did not answer within %u ms "
                 "(UCX_NET_DEVICES on the server can leave that interface out)",
                 silent, RM_REACH_LIMIT_MS);
    }
    rm_reach_free(r);
    return st;
}

/* The endpoint, the way the server's CONNECT_REPLY said. */
static remora_status_t handshake_endpoint(remora_client_h c, const rm_boot_frame_t *reply,
                                          const uint8_t *addr, uint32_t len, uint64_t deadline)
{
    remora_context_h ctx = c->ctx;
    rm_boot_frame_t f    = *reply;
    remora_status_t st;
    const char *why;

    rm_engine_lock(ctx);
    int own = rm_engine_serving(ctx, c->hs_instance);
    rm_engine_unlock(ctx);
    if (f.flags & RM_BOOT_CM) {
        if (len != RM_CM_REPLY_LEN)
            return REMORA_ERR_PROTOCOL;
    } else if (!rm_boot_addr_plausible(ctx, addr, len, &why)) {
        rm_error("the server sent a worker address this UCX cannot use: %s", why);
        return REMORA_ERR_PROTOCOL;
    } else if ((len == ctx->worker_addr_len && memcmp(addr, ctx->worker_addr, len) == 0) ||
               own) {
        /* UCX cannot pair two endpoints of one worker to itself; the
         * server's other workers could, but the rule is the same for all. */
        rm_error("a client cannot connect to a server of its own context by worker addresses; "
                 "use another context (or REMORA_CM=1 at the server)");
        return REMORA_ERR_UNSUPPORTED;
    }
    /* ... and its other interfaces, as its worker address names them. */
    if (!(f.flags & RM_BOOT_CM) && ((st = rm_peer_gate_open(&c->peer, addr, len)) != REMORA_OK ||
                                    (st = reach_server(c, addr, len, deadline)) != REMORA_OK))
        return st;
    rm_engine_lock(ctx);
    st = (f.flags & RM_BOOT_CM) ? client_connect_cm(c, c->peer.sock.fd, addr)
                                : rm_peer_create_ep(&c->peer, addr);
    if (st == REMORA_OK)
        st = rm_engine_watch(ctx, &c->peer.sock, EPOLLIN | EPOLLRDHUP);
    if (st == REMORA_OK) {
        rm_peer_live_start(&c->peer);
        c->native_rma = (rm_peer_rma_lanes(&c->peer) & ~RM_RMA_LANE_TCP) != 0;
    }
    rm_engine_unlock(ctx);
    return st;
}

/* The whole handshake, on the bootstrap socket, bounded by the deadline. */
static remora_status_t handshake(remora_client_h c, uint64_t deadline)
{
    remora_status_t st = rm_boot_dial(c->addr, deadline, &c->peer.sock.fd);

    if (st != REMORA_OK)
        return st;
    c->peer.sock.cb = client_sock_cb;
    if ((st = handshake_hello(c, deadline)) != REMORA_OK ||
        (st = handshake_connect(c, deadline)) != REMORA_OK) {
        rm_engine_lock(c->ctx);
        rm_peer_close(&c->peer);
        rm_engine_unlock(c->ctx);
    }
    return st;
}

/* ------------------------------------------------------------ reconnecting */

/* Wake the reconnect thread (lock held; it never takes the lock under rc_mx). */
static void reconnect_request(remora_client_h c)
{
    pthread_mutex_lock(&c->rc_mx);
    c->rc_wanted = 1;
    pthread_cond_signal(&c->rc_cv);
    pthread_mutex_unlock(&c->rc_mx);
}

/* Sleep ms on the reconnect thread; 1 when the user disconnects meanwhile. */
static int reconnect_sleep(remora_client_h c, unsigned ms)
{
    uint64_t deadline = rm_deadline_ns((int)ms);
    struct timespec ts;
    int stop;

    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000u;
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&c->rc_mx);
    while (!c->rc_stop && rm_now_ns() < deadline)
        if (pthread_cond_timedwait(&c->rc_cv, &c->rc_mx, &ts) != 0)
            break;
    stop = c->rc_stop;
    pthread_mutex_unlock(&c->rc_mx);
    return stop;
}

/* Until every op of the old endpoint had its UCX callbacks (pending empty). */
static int reconnect_drain(remora_client_h c)
{
    uint64_t deadline = rm_deadline_ns(RM_CLOSE_WAIT_MS);

    for (;;) {
        rm_engine_lock(c->ctx);
        int busy = !rm_list_empty(&c->pending);
        rm_engine_unlock(c->ctx);
        if (!busy)
            return 0;
        if (rm_now_ns() >= deadline) {
            /* They are failed and unmatched (reply_type 0): a late callback
             * touches only its op, never the new endpoint. */
            rm_warn("operations of the old connection still completing; reconnecting anyway");
            return 0;
        }
        rm_engine_kick(c->ctx);
        if (reconnect_sleep(c, 1))
            return -1;
    }
}

/* One reconnect: drain, then attempts with backoff until one succeeds, the
 * user disconnects, or the client gives up. */
static void reconnect_run(remora_client_h c)
{
    uint64_t start = rm_now_ns();
    unsigned delay = 0, attempts = 0;
    remora_status_t st = REMORA_ERR_DISCONNECTED;
    rm_event_item_t *e;

    if (reconnect_drain(c) != 0)
        return;
    for (;;) {
        uint64_t now = rm_now_ns(), spent_ms = (now - start) / 1000000u;
        int bound = c->timeout_ms < RM_RC_ATTEMPT_MS ? c->timeout_ms : RM_RC_ATTEMPT_MS;

        if (c->rc_give_up_ms >= 0 && spent_ms >= (uint64_t)c->rc_give_up_ms)
            break;
        if (c->rc_give_up_ms >= 0 && (uint64_t)bound > (uint64_t)c->rc_give_up_ms - spent_ms)
            bound = (int)((uint64_t)c->rc_give_up_ms - spent_ms);
        attempts++;
        if ((st = handshake(c, rm_deadline_ns(bound))) == REMORA_OK) {
            rm_engine_kick(c->ctx);
            return;
        }
        rm_debug("reconnect attempt %u to %s: %s", attempts, c->addr, remora_status_string(st));
        if (st == REMORA_ERR_AUTH || st == REMORA_ERR_VERSION || st == REMORA_ERR_UNSUPPORTED)
            break; /* a server that will never take us */
        /* The first attempt ran at once; then min_ms, doubling up to max_ms. */
        delay = attempts == 1 ? c->rc_min_ms : delay * 2;
        if (delay > c->rc_max_ms)
            delay = c->rc_max_ms;
        if (reconnect_sleep(c, delay))
            return;
    }
    rm_warn("giving up reconnecting to %s after %u attempt(s): %s", c->addr, attempts,
            remora_status_string(st));
    rm_engine_lock(c->ctx);
    c->reconnecting = 0;
    c->disc_status  = REMORA_ERR_DISCONNECTED;
    if (c->ready && (e = queue_event(c, REMORA_EVENT_DISCONNECTED, NULL, 0, 0,
                                     REMORA_ERR_DISCONNECTED)) != NULL)
        e->ev.reconnecting = 0;
    rm_engine_complete(c->ctx, &c->link_settled);
    rm_engine_unlock(c->ctx);
}

static void *reconnect_main(void *arg)
{
    remora_client_h c = arg;

    pthread_mutex_lock(&c->rc_mx);
    for (;;) {
        while (!c->rc_stop && !c->rc_wanted)
            pthread_cond_wait(&c->rc_cv, &c->rc_mx);
        if (c->rc_stop)
            break;
        c->rc_wanted = 0;
        pthread_mutex_unlock(&c->rc_mx);
        reconnect_run(c);
        pthread_mutex_lock(&c->rc_mx);
    }
    pthread_mutex_unlock(&c->rc_mx);
    return NULL;
}

static void reconnect_stop(remora_client_h c)
{
    if (!c->rc_has_thread)
        return;
    pthread_mutex_lock(&c->rc_mx);
    c->rc_stop = 1;
    pthread_cond_signal(&c->rc_cv);
    pthread_mutex_unlock(&c->rc_mx);
    pthread_join(c->rc_thread, NULL);
    rm_engine_lock(c->ctx);
    c->rc_has_thread = 0;
    c->reconnecting  = 0;
    rm_engine_unlock(c->ctx);
}

remora_status_t rm_client_await_link(remora_client_h c, uint64_t deadline, uint64_t *gen_p,
                                     uint64_t *instance_p)
{
    remora_status_t st = REMORA_ERR_TIMED_OUT;

    /* settled may be raised and lowered again (a reconnect that failed at
     * once): look until it holds or the deadline passes. */
    while (rm_engine_wait(c->ctx, &c->link_settled, deadline) == REMORA_OK) {
        rm_engine_lock(c->ctx);
        if (!c->disconnected) {
            st          = REMORA_OK;
            *gen_p      = c->conn_gen;
            *instance_p = c->server_instance;
        } else if (!c->reconnecting) {
            st = c->disc_status;
        }
        rm_engine_unlock(c->ctx);
        if (st != REMORA_ERR_TIMED_OUT || rm_now_ns() >= deadline)
            return st;
    }
    return REMORA_ERR_TIMED_OUT;
}

/* ------------------------------------------------------------ public API */

static void lanes_connect(remora_client_h c);
static void lanes_disconnect(remora_client_h c);

static remora_path_t path_from_env(void)
{
    const char *v = getenv("REMORA_PATH");

    remora_path_t path = REMORA_PATH_AUTO;

    if (v != NULL && remora_path_parse(v, &path) != REMORA_OK)
        rm_warn("REMORA_PATH=%s not understood; using auto", v);
    return path;
}

static remora_status_t client_apply_params(remora_client_h c, const remora_client_params_t *p)
{
    ucp_context_attr_t ua = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};

    if (ucp_context_query(c->ctx->ucp, &ua) == UCS_OK)
        c->ucx_cuda = (ua.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    /* Enough pinned chunks for many requests in flight: pinning costs ms. */
    if ((c->stage = rm_stage_pool_create(RM_STAGE_CHUNK, 32)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    c->timeout_ms  = REMORA_DEFAULT_TIMEOUT_MS;
    c->forced_path = path_from_env();
    c->chunk_size  = rm_env_u64("REMORA_CHUNK_SIZE", RM_DEFAULT_CHUNK, 4096, 1u << 30);
    c->window      = (unsigned)rm_env_u64("REMORA_WINDOW", RM_DEFAULT_WINDOW, 1, 64);
    c->want_lanes  = (unsigned)rm_env_u64("REMORA_LANES", 1, 1, RM_LANES_MAX);
    c->rc_enable   = (int)rm_env_u64("REMORA_RECONNECT", 0, 0, 1);
    c->rc_min_ms   = RM_RC_MIN_MS;
    c->rc_max_ms   = RM_RC_MAX_MS;
    c->rc_give_up_ms = RM_RC_GIVE_UP_MS;
    if (p == NULL)
        return REMORA_OK;
    if (p->field_mask & REMORA_CLIENT_FIELD_RECONNECT) {
        const remora_reconnect_params_t *r = &p->reconnect;
        if ((r->enable != 0 && r->enable != 1) || r->give_up_ms < -1 ||
            (r->min_ms && r->max_ms && r->min_ms > r->max_ms))
            return REMORA_ERR_INVALID_PARAM;
        c->rc_enable = r->enable;
        if (r->min_ms)
            c->rc_min_ms = r->min_ms;
        if (r->max_ms)
            c->rc_max_ms = r->max_ms;
        if (c->rc_min_ms > c->rc_max_ms)
            c->rc_min_ms = c->rc_max_ms;
        if (r->give_up_ms)
            c->rc_give_up_ms = r->give_up_ms;
    }
    if (p->field_mask & REMORA_CLIENT_FIELD_TIMEOUT) {
        if (p->timeout_ms < 0)
            return REMORA_ERR_INVALID_PARAM;
        c->timeout_ms = p->timeout_ms;
    }
    if (p->field_mask & REMORA_CLIENT_FIELD_PATH) {
        if (p->path < REMORA_PATH_AUTO || p->path > REMORA_PATH_STAGING)
            return REMORA_ERR_INVALID_PARAM;
        if (p->path != REMORA_PATH_AUTO)
            c->forced_path = p->path;
    }
    if (p->field_mask & REMORA_CLIENT_FIELD_EVENT_CB) {
        c->event_cb  = p->event_cb;
        c->event_arg = p->event_arg;
    }
    if (p->field_mask & REMORA_CLIENT_FIELD_LANES) {
        if (p->lanes < 1 || p->lanes > RM_LANES_MAX)
            return REMORA_ERR_INVALID_PARAM;
        c->want_lanes = p->lanes;
    }
    if (p->field_mask & REMORA_CLIENT_FIELD_TOKEN) {
        if (p->token == NULL || p->token_len < REMORA_TOKEN_MIN ||
            p->token_len > REMORA_TOKEN_MAX) {
            rm_error("a token must be %d to %d bytes long (this one has %zu)",
                     REMORA_TOKEN_MIN, REMORA_TOKEN_MAX, p->token ? p->token_len : 0);
            return REMORA_ERR_INVALID_PARAM;
        }
        if ((c->token = malloc(p->token_len)) == NULL)
            return REMORA_ERR_NO_MEMORY;
        memcpy(c->token, p->token, p->token_len);
        c->token_len = p->token_len;
    }
    return rm_client_seal_params(c, p);
}

static void client_free(remora_client_h c)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &c->events) {
        rm_list_del(pos);
        free(rm_container_of(pos, rm_event_item_t, link));
    }
    rm_stage_pool_release(c->stage);
    rm_client_regs_free(c);
    pthread_cond_destroy(&c->rc_cv);
    pthread_mutex_destroy(&c->rc_mx);
    free(c->addr);
    free(c->token);
    free(c);
}

remora_status_t remora_client_connect(remora_context_h ctx, const char *addr,
                                      const remora_client_params_t *params,
                                      remora_client_h *client_p)
{
    remora_client_h c;
    remora_status_t st;

    if (ctx == NULL || addr == NULL || client_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    c->ctx          = ctx;
    c->peer.ctx     = ctx;
    c->peer.ops     = &client_ops;
    c->peer.sock.fd = -1;
    rm_list_init(&c->pending);
    rm_list_init(&c->regions);
    rm_list_init(&c->maps);
    rm_list_init(&c->zombies);
    rm_list_init(&c->events);
    atomic_init(&c->drained, 1);
    atomic_init(&c->events_idle, 1);
    atomic_init(&c->link_settled, 1);
    pthread_mutex_init(&c->rc_mx, NULL);
    pthread_cond_init(&c->rc_cv, NULL);
    if ((c->addr = strdup(addr)) == NULL) {
        client_free(c);
        return REMORA_ERR_NO_MEMORY;
    }
    if ((st = client_apply_params(c, params)) != REMORA_OK) {
        client_free(c);
        return st;
    }
    /* The reconnect thread exists before the connection can fail: client_fail
     * asks it for a reconnect. It sleeps until then. */
    if (c->rc_enable && pthread_create(&c->rc_thread, NULL, reconnect_main, c) != 0) {
        client_free(c);
        return REMORA_ERR_NO_MEMORY;
    }
    c->rc_has_thread = c->rc_enable;
    if ((st = handshake(c, rm_deadline_ns(c->timeout_ms))) != REMORA_OK) {
        reconnect_stop(c);
        client_free(c);
        return st;
    }
    rm_engine_kick(ctx);
    lanes_connect(c);
    *client_p = c;
    return REMORA_OK;
}

void remora_client_disconnect(remora_client_h c)
{

    if (c == NULL)
        return;
    reconnect_stop(c); /* no new connection from here on */
    if (c->ctx->stream_client_hook)
        c->ctx->stream_client_hook(c, 0);
    lanes_disconnect(c);
    rm_engine_lock(c->ctx);
    c->ready = 0; /* a user-initiated close raises no DISCONNECTED event */
    client_fail(c, REMORA_ERR_CANCELED, REMORA_ERR_CANCELED);
    c->disc_status = REMORA_ERR_CANCELED; /* also when it had failed before */
    rm_engine_complete(c->ctx, &c->link_settled);
    rm_engine_unlock(c->ctx);

    /* The forced close cancels UCX operations; wait for their callbacks and
     * for queued events, so nothing refers to the client afterwards. */
    rm_engine_wait(c->ctx, &c->drained, rm_deadline_ns(RM_CLOSE_WAIT_MS));
    rm_engine_wait(c->ctx, &c->events_idle, rm_deadline_ns(RM_CLOSE_WAIT_MS));
    int held = c->ctx->stream_client_hook && c->ctx->stream_client_hook(c, 1);

    rm_engine_lock(c->ctx);
    rm_engine_copy_drain(c->ctx); /* staged reads landing in GPU buffers end requests */
    rm_client_unmap_all(c);
    rm_client_regions_drop(c, 0);
    if (c->nops != c->nsubops || !atomic_load(&c->events_idle) || held) {
        rm_warn("client closed with %u operation(s) still completing%s; leaking it",
                c->nops - c->nsubops, held ? " and stream operations using it" : "");
        rm_engine_unlock(c->ctx);
        return;
    }
    c->closed = 1;
    int keep = c->nsubs > 0; /* the last subscription destroyed frees it */
    rm_engine_unlock(c->ctx);
    if (!keep)
        client_free(c);
}

void rm_client_sub_attach(remora_client_h c)
{
    rm_engine_lock(c->ctx);
    c->nsubs++;
    rm_engine_unlock(c->ctx);
}

void rm_client_sub_detach(remora_client_h c)
{
    rm_engine_lock(c->ctx);
    int last = --c->nsubs == 0 && c->closed && c->nops == 0;
    rm_engine_unlock(c->ctx);
    if (last)
        client_free(c);
}

remora_status_t remora_client_ping(remora_client_h c, double *rtt_us)
{
    uint64_t t0 = rm_now_ns();
    remora_status_t st;

    if (c == NULL || rtt_us == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_client_call(c, RM_MSG_PING, RM_MSG_PONG, NULL, NULL, NULL)) != REMORA_OK)
        return st;
    *rtt_us = (double)(rm_now_ns() - t0) / 1000.0;
    return REMORA_OK;
}

/* server_stats.c */
void rm_stats_to_public(uint64_t mask, const uint64_t v[64], remora_server_stats_t *stats);
void rm_stats_conn_to_public(const rm_stats_conn_t *in, remora_conn_stats_t *out);

remora_status_t remora_client_server_stats(remora_client_h c, remora_server_stats_t *stats,
                                           remora_conn_stats_t *conns, size_t max,
                                           size_t *count_p)
{
    uint64_t v[64], mask;
    rm_stats_conn_t *sc = NULL;
    uint32_t count;
    void *body = NULL;
    size_t len = 0;
    remora_status_t st;

    if (c == NULL || stats == NULL || (conns == NULL && max))
        return REMORA_ERR_INVALID_PARAM;
    if (!atomic_load(&c->server_stats)) {
        rm_info("the server does not answer STATS (an older remora)");
        return REMORA_ERR_UNSUPPORTED;
    }
    if ((st = rm_client_call(c, RM_MSG_STATS, RM_MSG_STATS_REPLY, NULL, &body, &len)) != REMORA_OK)
        return st;
    if (rm_stats_decode(body, len, &mask, v, &sc, max, &count) != 0) {
        free(body);
        return REMORA_ERR_PROTOCOL;
    }
    free(body);
    rm_stats_to_public(mask, v, stats);
    for (size_t i = 0; i < max && i < count; i++)
        rm_stats_conn_to_public(&sc[i], &conns[i]);
    free(sc);
    if (count_p)
        *count_p = count;
    return REMORA_OK;
}

/* ------------------------------------------------------------ lanes */

/* Connect to the server's lanes, as many as c->want_lanes allows (lock not
 * held). Without lanes on offer, or when one fails, go on with those we have. */
static void lanes_connect(remora_client_h c)
{
    uint16_t ports[RM_LANES_MAX - 1];
    unsigned count = 0;
    void *body     = NULL;
    size_t len     = 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char addr[80];

    if (c->want_lanes < 2)
        return;
    if (rm_client_call(c, RM_MSG_LANES, RM_MSG_LANES_REPLY, NULL, &body, &len) != REMORA_OK ||
        rm_lanes_decode(body, len, ports, &count) != 0 ||
        getpeername(c->peer.sock.fd, (struct sockaddr *)&ss, &sl) != 0) {
        rm_info("the server offers no lanes");
        count = 0;
    }
    free(body);
    remora_client_params_t lp = {
        .field_mask = REMORA_CLIENT_FIELD_TIMEOUT | REMORA_CLIENT_FIELD_PATH |
                      REMORA_CLIENT_FIELD_LANES | REMORA_CLIENT_FIELD_RECONNECT |
                      REMORA_CLIENT_FIELD_ENCRYPT | (c->token ? REMORA_CLIENT_FIELD_TOKEN : 0),
        .reconnect  = {.enable = 0}, /* lanes are not reconnected (remora.h) */
        .timeout_ms = c->timeout_ms,
        .path       = REMORA_PATH_AM,
        .lanes      = 1,
        .token      = c->token,
        .token_len  = c->token_len,
        .encrypt    = c->encrypt, /* each lane derives its own keys */
    };
    for (unsigned i = 0; i < count && i + 1 < c->want_lanes; i++) {
        ((struct sockaddr_in *)&ss)->sin_port = htons(ports[i]); /* same place in v6 */
        rm_format_addr((const struct sockaddr *)&ss, addr, sizeof(addr));
        if (rm_engine_lane_create(c->ctx, &c->lane_ctx[i]) != REMORA_OK)
            break;
        remora_status_t st = remora_client_connect(c->lane_ctx[i], addr, &lp, &c->lane[i]);
        /* The server's workers share its instance: a port that leads to
         * another server (which the LANES reply alone could name) would get
         * this one's region ids and write whatever that one holds under
         * them (found by review). */
        if (st == REMORA_OK && c->lane[i]->server_instance != c->server_instance) {
            remora_client_disconnect(c->lane[i]);
            c->lane[i] = NULL;
            st = REMORA_ERR_PROTOCOL;
        }
        if (st != REMORA_OK) {
            rm_warn("lane %u (%s): %s; going on with %u", i + 2, addr, remora_status_string(st),
                    i + 1);
            remora_context_destroy(c->lane_ctx[i]);
            break;
        }
        c->nlanes = c->lanes_made = i + 1;
    }
}

unsigned remora_client_lanes(remora_client_h c)
{
    return c ? c->nlanes + 1 : 0;
}

static void lanes_disconnect(remora_client_h c)
{
    unsigned n = c->lanes_made;

    rm_engine_lock(c->ctx);
    c->nlanes = c->lanes_made = 0;
    rm_engine_unlock(c->ctx);
    for (unsigned i = 0; i < n; i++) {
        remora_client_disconnect(c->lane[i]);
        remora_context_destroy(c->lane_ctx[i]);
    }
}
