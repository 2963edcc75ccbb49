/* SPDX-License-Identifier: BSD-3-Clause */
/* Endpoints: connect, accept, close, send; and HOST:PORT addresses. */
#include "engine/engine.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/reach.h"
#include "engine/seal.h"
#include "mem/cuda.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/time.h"

/* ------------------------------------------------------------ addresses */

remora_status_t rm_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256], *end;
    const char *colon, *hstart = addr, *hend;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICSERV}, *res;
    long port;

    if (addr == NULL)
        return REMORA_ERR_ADDRESS;
    if (addr[0] == '[') { /* [v6]:port */
        hstart = addr + 1;
        hend   = strchr(hstart, ']');
        if (hend == NULL || hend[1] != ':')
            return REMORA_ERR_ADDRESS;
        colon = hend + 1;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL || strchr(addr, ':') != colon)
            return REMORA_ERR_ADDRESS;
        hend = colon;
    }
    if (hend == hstart || (size_t)(hend - hstart) >= sizeof(host) || colon[1] == '\0')
        return REMORA_ERR_ADDRESS;
    if (strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 5)
        return REMORA_ERR_ADDRESS; /* digits only: no sign, no spaces */
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port > 65535)
        return REMORA_ERR_ADDRESS;
    memcpy(host, hstart, (size_t)(hend - hstart));
    host[hend - hstart] = '\0';

    if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || res == NULL)
        return REMORA_ERR_ADDRESS;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return REMORA_OK;
}

void rm_format_addr(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, len, "%s:%u", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, len, "[%s]:%u", host, port);
    } else {
        snprintf(buf, len, "?");
    }
}

/* ------------------------------------------------------------ endpoints */

/* Whether the peer is on ctx->failing (a NULL link: not listed). */
static int fail_listed(const rm_peer_t *peer) { return peer->fail_link.next != NULL; }

/* Off ctx->failing, if on it. */
static void fail_unlink(rm_peer_t *peer)
{
    if (fail_listed(peer)) {
        rm_list_del(&peer->fail_link);
        peer->fail_link.next = peer->fail_link.prev = NULL;
    }
}

/* on_error after the progress pass (rm_peer_failures_run), lock held. */
static void fail_after_pass(rm_peer_t *peer, remora_status_t status)
{
    if (fail_listed(peer))
        return; /* listed already (rm_peer_fail_lost, then its endpoint failed): one on_error */
    peer->fail_status = status;
    rm_list_push_back(&peer->ctx->failing, &peer->fail_link);
    rm_engine_kick(peer->ctx);
}

/* The failure a setting causes rather than the network: every endpoint
 * needs dead-peer detection, which UCX's shared-memory transports lack, so
 * UCX_TLS without tcp (or REMORA_RMA=1, which takes tcp out) on a machine
 * without RDMA leaves nothing to reach a peer with. UCX says so when the
 * endpoint is made (worker addresses) or, through the connection manager,
 * in its error callback once the wire-up found no lane. */
static void warn_unreachable(remora_context_h ctx)
{
    const char *env = getenv("UCX_TLS"), *tls = rm_engine_ucx_tls(ctx);

    rm_warn("no UCX transport here reaches that peer and reports its death (UCX_TLS=%s%s): "
            "remora needs tcp or an RDMA transport; shared memory cannot report a dead peer",
            tls ? tls : "all", tls != env ? ", as REMORA_RMA=1 sets it" : "");
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    rm_peer_t *peer = arg;

    /* A reconnecting client's peer outlives its endpoints: an old one is
     * not the peer's business any more. */
    if (peer->failed || ep != peer->ep)
        return;
    rm_debug("endpoint %p failed: %s", (void *)ep, ucs_status_string(status));
    if (status == UCS_ERR_UNREACHABLE && rm_engine_ucx_tls(peer->ctx) != NULL)
        warn_unreachable(peer->ctx); /* with every transport, a network matter */
    peer->failed = 1; /* no more sends: they fail at once */
    rm_engine_peer_remove(peer->ctx, peer);
    if (peer->ctx->in_send && !peer->fail_later) {
        /* A client's own send: it learns of the disconnect at once, as its
         * reconnect logic expects. */
        fail_unlink(peer); /* listed by rm_peer_fail_lost: this is its one on_error */
        peer->ops->on_error(peer, rm_status_from_ucs(status));
        return;
    }
    /* Anywhere else, on_error (which force-closes the endpoint) runs after
     * the progress pass, outside UCX's callback:
     * - inside one of a server's sends, the caller may hold pointers into
     *   what on_error frees (a ring's waits, a connection's pushes); two
     *   server crashes came from that (docs/security.md section 4);
     * - inside ucp_worker_progress, UCX is still purging the endpoint, and a
     *   close from its error callback has completed operations twice
     *   (UCX 1.13's uct_iface.h "comp->count > 0" abort, docs/security.md
     *   section 3.5). progress_once runs the failures right after. */
    fail_after_pass(peer, rm_status_from_ucs(status));
}

int rm_peer_failing(const rm_peer_t *peer)
{
    return peer->failed || fail_listed(peer);
}

/* The endpoint itself is sound: not marked failed, so that its owner's
 * close lets the sends in flight through first (rm_peer_close_linger). */
void rm_peer_fail_lost(rm_peer_t *peer, unsigned type, remora_status_t status)
{
    if (rm_peer_failing(peer))
        return;
    rm_warn("a %s could not be sent (%s): closing the connection", rm_msg_type_name(type),
            remora_status_string(status));
    fail_after_pass(peer, status);
}

unsigned rm_peer_failures_run(remora_context_h ctx)
{
    unsigned n = 0;

    while (!rm_list_empty(&ctx->failing)) {
        rm_peer_t *peer = rm_container_of(ctx->failing.next, rm_peer_t, fail_link);
        fail_unlink(peer);
        peer->ops->on_error(peer, peer->fail_status);
        n++;
    }
    return n;
}

static ucp_ep_params_t base_ep_params(rm_peer_t *peer)
{
    ucp_ep_params_t p = {
        .field_mask      = UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .err_mode        = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler.cb  = ep_error_cb,
        .err_handler.arg = peer,
    };
    return p;
}

remora_status_t rm_peer_attach(rm_peer_t *peer)
{
    fail_unlink(peer); /* a failure of its old endpoint is not news any more */
    peer->failed = 0;
    if (peer->sends.next == NULL)
        rm_list_init(&peer->sends);
    return rm_engine_peer_add(peer->ctx, peer) == 0 ? REMORA_OK : REMORA_ERR_NO_MEMORY;
}

static remora_status_t create_ep(rm_peer_t *peer, const ucp_ep_params_t *params)
{
    ucs_status_t status = ucp_ep_create(peer->ctx->worker, params, &peer->ep);
    remora_status_t rs;

    if (status != UCS_OK) {
        rm_debug("ucp_ep_create failed: %s", ucs_status_string(status));
        if (status == UCS_ERR_UNREACHABLE)
            warn_unreachable(peer->ctx);
        return rm_status_from_ucs(status);
    }
    if ((rs = rm_peer_attach(peer)) != REMORA_OK) {
        peer->failed = 1;
        rm_peer_close(peer);
    }
    return rs;
}

remora_status_t rm_peer_connect_cm(rm_peer_t *peer, const struct sockaddr *sa, socklen_t len)
{
    ucp_ep_params_t p = base_ep_params(peer);
    p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    p.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr    = sa;
    p.sockaddr.addrlen = len;
    return create_ep(peer, &p);
}

remora_status_t rm_peer_accept_cm(rm_peer_t *peer, ucp_conn_request_h conn_request)
{
    ucp_ep_params_t p = base_ep_params(peer);
    p.field_mask  |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = conn_request;
    return create_ep(peer, &p);
}

remora_status_t rm_peer_create_ep(rm_peer_t *peer, const void *worker_addr)
{
    ucp_ep_params_t p = base_ep_params(peer);
    p.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address     = worker_addr;
    return create_ep(peer, &p);
}

/* UCX 1.13 has no endpoint transport query: read the lanes off its dump
 * ("lane[N]: IDX:TRANSPORT/DEVICE ... rma_bw#0"). */
unsigned rm_peer_rma_lanes(rm_peer_t *peer)
{
    char *dump = NULL, *line, *save = NULL;
    size_t n = 0;
    unsigned kinds = 0;
    FILE *f;

    if (peer->ep == NULL || (f = open_memstream(&dump, &n)) == NULL)
        return 0;
    ucp_ep_print_info(peer->ep, f);
    fclose(f);
    for (line = strtok_r(dump, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strstr(line, "lane["))
            continue;
        rm_debug("%s", line);
        if (!strstr(line, "rma_bw") && !strstr(line, "rma#"))
            continue;
        if (strstr(line, "tcp/"))
            kinds |= RM_RMA_LANE_TCP;
        else if (strstr(line, ":rc_") || strstr(line, ":dc_") || strstr(line, ":ud_"))
            kinds |= RM_RMA_LANE_VERBS;
        else
            kinds |= RM_RMA_LANE_OTHER;
    }
    free(dump);
    return kinds;
}

typedef struct rm_flush {
    atomic_int      done;
    ucs_status_t    status;
    remora_context_h ctx;
} rm_flush_t;

static void flush_cb(void *request, ucs_status_t status, void *user_data)
{
    rm_flush_t *f = user_data;

    f->status = status;
    rm_engine_complete(f->ctx, &f->done);
}

remora_status_t rm_peer_wireup_wait(rm_peer_t *peer, uint64_t deadline)
{
    rm_flush_t *f = calloc(1, sizeof(*f));
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = flush_cb};
    remora_status_t st;
    void *req;

    if (f == NULL)
        return REMORA_ERR_NO_MEMORY;
    f->ctx      = peer->ctx;
    p.user_data = f;
    rm_engine_lock(peer->ctx);
    req = peer->failed || peer->ep == NULL ? UCS_STATUS_PTR(UCS_ERR_NOT_CONNECTED)
                                           : ucp_ep_flush_nbx(peer->ep, &p);
    rm_engine_unlock(peer->ctx);
    if (!UCS_PTR_IS_PTR(req)) {
        free(f);
        return rm_status_from_ucs(UCS_PTR_STATUS(req));
    }
    rm_engine_kick(peer->ctx);
    if (rm_engine_wait(peer->ctx, &f->done, deadline) != REMORA_OK) {
        /* The request stays UCX's: cancel it (its callback frees nothing of
         * ours but f, which is leaked rather than freed under it). */
        rm_engine_lock(peer->ctx);
        if (!atomic_load(&f->done))
            ucp_request_cancel(peer->ctx->worker, req);
        rm_engine_unlock(peer->ctx);
        if (rm_engine_wait(peer->ctx, &f->done, rm_deadline_ns(1000)) != REMORA_OK)
            return REMORA_ERR_TIMED_OUT;
    }
    st = rm_status_from_ucs(f->status);
    rm_engine_lock(peer->ctx);
    ucp_request_free(req);
    rm_engine_unlock(peer->ctx);
    free(f);
    return st;
}

static void unlink_sends(rm_peer_t *peer, int cancel);

static void force_close(ucp_ep_h ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags        = UCP_EP_CLOSE_FLAG_FORCE};
    /* Forced close cancels pending operations; their callbacks run with
     * UCS_ERR_CANCELED. UCX frees the close request when it finishes. */
    void *req = ucp_ep_close_nbx(ep, &p);

    if (UCS_PTR_IS_PTR(req))
        ucp_request_free(req);
}

/* The bootstrap socket's two ends: 0, or -1. */
static int sock_ends(const rm_peer_t *peer, struct sockaddr_storage *ss,
                     struct sockaddr_storage *own)
{
    socklen_t sl = sizeof(*ss), ol = sizeof(*own);

    return getpeername(peer->sock.fd, (struct sockaddr *)ss, &sl) == 0 &&
                   getsockname(peer->sock.fd, (struct sockaddr *)own, &ol) == 0
               ? 0
               : -1;
}

remora_status_t rm_peer_gate_open(rm_peer_t *peer, const void *ucx_addr, size_t len)
{
    struct sockaddr_storage ss, own;
    const void *ucx[2];
    size_t lens[2];
    unsigned n = 0;

    if (sock_ends(peer, &ss, &own) != 0)
        return REMORA_ERR_IO;
    if (ucx_addr != NULL)
        ucx[n] = ucx_addr, lens[n++] = len;
    /* A peer on this host connects to UCX from whichever of this host's
     * addresses routes to the interface it picked (our 10.x, not the
     * 127.0.0.1 it dialled), maybe before its address is known here (its
     * endpoint connects at creation; a SYN dropped until then costs a
     * second): every interface of our own address is one of its too. */
    if (rm_gate_same_host((struct sockaddr *)&ss, (struct sockaddr *)&own))
        ucx[n] = peer->ctx->worker_addr, lens[n++] = peer->ctx->worker_addr_len;
    return rm_gate_open(rm_engine_gate(peer->ctx), &peer->gate, (struct sockaddr *)&ss, ucx, lens,
                        n);
}

remora_status_t rm_peer_reach_start(rm_peer_t *peer, const void *ucx_addr, size_t len,
                                    rm_reach_t **out)
{
    struct sockaddr_storage ss, own;

    *out = NULL;
    /* Non-blocking connects hold nothing, and a probe would only meet the
     * peer's gate before that peer knows our interfaces (gate.h). */
    if (!peer->ctx->connect_blocks)
        return REMORA_OK;
    return rm_reach_start(ucx_addr, len,
                          sock_ends(peer, &ss, &own) == 0 &&
                              rm_gate_same_host((struct sockaddr *)&ss, (struct sockaddr *)&own),
                          out);
}

/* Everything but the endpoint: the bootstrap socket, heartbeats, keys, the
 * hosts let through the gate for it, and the registration that routes the
 * endpoint's messages and errors here. */
static void close_side(rm_peer_t *peer)
{
    fail_unlink(peer); /* closed by its owner already: nothing left to tell */
    rm_gate_close(rm_engine_gate(peer->ctx), &peer->gate);
    rm_peer_live_stop(peer);
    rm_peer_seal_stop(peer);
    rm_boot_rx_free(&peer->rx);
    if (peer->sock.fd >= 0) {
        rm_engine_unwatch(peer->ctx, &peer->sock);
        close(peer->sock.fd);
        peer->sock.fd = -1;
    }
    if (peer->ep == NULL)
        return;
    if (!peer->failed)
        rm_engine_peer_remove(peer->ctx, peer);
    peer->failed = 1;
}

void rm_peer_close(rm_peer_t *peer)
{
    close_side(peer);
    if (peer->ep == NULL)
        return;
    force_close(peer->ep);
    peer->ep = NULL;
    unlink_sends(peer, 1);
}

/* ------------------------------------------------------------ lingering close */

#define RM_LINGER_GIVE_UP_NS (5000u * 1000000ull)

static void linger_flushed(void *request, ucs_status_t status, void *user_data)
{
    rm_peer_t *peer = user_data;

    (void)status; /* an error ends the flush as well: the close follows */
    ucp_request_free(request);
    peer->linger_flushed = 1;
}

/* Close once flushed or at the deadline; hand the peer back once the
 * flush's callback, which refers to it, has run. */
static void linger_tick(rm_ticker_t *t)
{
    rm_peer_t *peer = rm_container_of(t, rm_peer_t, linger);

    if (peer->linger_ep != NULL &&
        (peer->linger_flushed || rm_now_ns() >= peer->linger_deadline)) {
        if (!peer->linger_flushed)
            rm_debug("endpoint %p not flushed in time; closing it", (void *)peer->linger_ep);
        force_close(peer->linger_ep); /* also ends an unfinished flush */
        peer->linger_ep = NULL;
    }
    if (peer->linger_ep != NULL)
        return;
    if (peer->linger_flushed) {
        rm_engine_remove_ticker(peer->ctx, t);
        peer->ops->on_closed(peer);
    } else if (rm_now_ns() >= peer->linger_deadline + RM_LINGER_GIVE_UP_NS) {
        /* UCX never ended the flush: the peer stays allocated (the callback
         * may still come), and so does its owner. */
        rm_warn("a closed endpoint's flush never completed; leaking its connection");
        rm_engine_remove_ticker(peer->ctx, t);
    }
}

int rm_peer_close_linger(rm_peer_t *peer, unsigned linger_ms)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = linger_flushed, .user_data = peer};
    void *req;

    if (linger_ms == 0 || peer->ep == NULL || peer->failed || rm_list_empty(&peer->sends) ||
        peer->ops->on_closed == NULL) {
        rm_peer_close(peer);
        return 0;
    }
    close_side(peer); /* from here UCX's errors and messages for ep go nowhere */
    unlink_sends(peer, 0); /* they complete, or are canceled by the close */
    req = ucp_ep_flush_nbx(peer->ep, &p);
    if (!UCS_PTR_IS_PTR(req)) { /* flushed (or failed) at once */
        force_close(peer->ep);
        peer->ep = NULL;
        return 0;
    }
    peer->linger_ep       = peer->ep;
    peer->ep              = NULL;
    peer->linger_flushed  = 0;
    peer->linger_deadline = rm_now_ns() + (uint64_t)linger_ms * 1000000u;
    peer->linger.fn       = linger_tick;
    rm_engine_add_ticker(peer->ctx, &peer->linger);
    return 1;
}

/* ------------------------------------------------------------ sending */

typedef struct rm_send {
    rm_list_t      link;     /* in peer->sends while UCX holds the request */
    void          *request;
    uint8_t        hdr[RM_HDR_MAX];
    void          *body_free;
    void          *cipher;   /* sealed connections: the encrypted body */
    rm_send_done_t done;
    void          *arg;
    ucp_context_h  ucp;      /* with memh: the mapping made for this send */
    ucp_mem_h      memh;
    remora_context_h gpu_ctx; /* counted in rm_engine_gpu_ucx_add while pending */
    unsigned      *nsends;   /* its peer's count while listed there; NULL once unlinked */
} rm_send_t;

static void send_unlist(rm_send_t *s)
{
    rm_list_del(&s->link); /* unlinked already: linked to itself, harmless */
    if (s->nsends)
        (*s->nsends)--;
    s->nsends = NULL;
}

/* Bulk bodies at least this long are mapped for UCX by us (map_body). */
#define RM_SEND_MAP_MIN (8u << 10)

/* GPU bodies bound for GPU memory go by rendezvous from this length on,
 * whatever UCX's threshold says. Eager, UCX 1.13 copies GPU memory into and
 * out of its host fragments one copy at a time: a 64 KiB read of a GPU
 * region into a GPU buffer on one host took 84-87 us eager against 37-39 by
 * rendezvous (cuda_ipc, one H100). Below 16 KiB eager is faster, and into
 * host memory the rendezvous only adds its round trips (docs/gpu-ucx.md). */
#define RM_SEND_GPU_RNDV_MIN (16u << 10)

/* Whether a bulk body goes by rendezvous whatever UCX would choose: GPU
 * bodies bound for GPU memory from RM_SEND_GPU_RNDV_MIN, host bodies from
 * the context's rndv_min (config_tcp; 0: never). */
static int forced_rndv(const rm_peer_t *peer, const rm_send_params_t *sp)
{
    if (sp->cuda)
        return sp->to_gpu && sp->body_len >= RM_SEND_GPU_RNDV_MIN;
    return peer->ctx->rndv_min != 0 && sp->body_len >= peer->ctx->rndv_min;
}

/* UCX 1.16 aborts the process when it cancels a rendezvous send whose buffer
 * it registered itself (the assertion "memh == NULL || ... user memh" in
 * datatype_iter.inl, openucx/ucx#9528): exactly what happens to sends in
 * flight when a peer dies (unlink_sends). A handle of ours makes that path
 * clean, so large bulk bodies get one. NULL when mapping fails: the send
 * goes ahead as before. */
static ucp_mem_h map_body(ucp_context_h ucp, const void *body, size_t len, int cuda)
{
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address    = (void *)body,
        .length     = len,
    };
    ucp_mem_h memh;
    int pushed = 0;

    if (cuda) { /* a GPU buffer going to a CUDA UCX: said, not detected */
        mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
        mp.memory_type = UCS_MEMORY_TYPE_CUDA;
        rm_cuda_ptr_ctx_enter(body, &pushed); /* UCX finds it in its own context */
    }
    ucs_status_t st = ucp_mem_map(ucp, &mp, &memh);
    rm_cuda_ctx_leave(pushed);
    return st == UCS_OK ? memh : NULL;
}

/* UCX 1.13 leaves some rendezvous sends to a dead peer pending even after a
 * forced close, and may call back for them long after the peer object is
 * gone. Cancel them, and unlink them from the peer so that a late callback
 * touches only the send itself. */
static void unlink_sends(rm_peer_t *peer, int cancel)
{
    rm_list_t *pos, *tmp;
    rm_list_for_each_safe(pos, tmp, &peer->sends) {
        rm_send_t *s = rm_container_of(pos, rm_send_t, link);
        send_unlist(s);
        if (s->gpu_ctx) { /* its callback may come late, or never (UCX 1.13): not polled for */
            rm_engine_gpu_ucx_add(s->gpu_ctx, -1);
            s->gpu_ctx = NULL;
        }
        if (cancel && s->request)
            ucp_request_cancel(peer->ctx->worker, s->request);
    }
}

static void send_finish(rm_send_t *s, ucs_status_t status)
{
    if (s->gpu_ctx)
        rm_engine_gpu_ucx_add(s->gpu_ctx, -1);
    if (s->memh)
        ucp_mem_unmap(s->ucp, s->memh);
    if (s->done)
        s->done(s->arg, status);
    free(s->body_free);
    free(s->cipher);
    free(s);
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    rm_send_t *s = user_data;

    send_unlist(s);
    send_finish(s, status);
    ucp_request_free(request);
}

remora_status_t rm_peer_send(rm_peer_t *peer, unsigned am_id, const rm_hdr_t *hdr,
                             const rm_send_params_t *sp)
{
    rm_send_t *s;
    size_t hlen;
    ucs_status_ptr_t req;

    if (rm_peer_failing(peer) || peer->ep == NULL) {
        free(sp->body_free);
        return REMORA_ERR_DISCONNECTED;
    }
    if (peer->sends_max && peer->nsends >= peer->sends_max) {
        free(sp->body_free);
        rm_peer_fail_lost(peer, hdr->type, REMORA_ERR_NO_MEMORY); /* closed after the pass */
        return REMORA_ERR_DISCONNECTED;
    }
    int queued;
    if (rm_fault_ep_fail_take(hdr->type, &queued)) { /* tests: as inside ucp_am_send_nbx */
        peer->ctx->in_send++;
        ep_error_cb(peer, peer->ep, UCS_ERR_CONNECTION_RESET);
        peer->ctx->in_send--;
        free(sp->body_free);
        return queued ? REMORA_OK : REMORA_ERR_DISCONNECTED;
    }
    s = rm_fault_send_take(hdr->type) ? NULL : malloc(sizeof(*s));
    if (s == NULL) {
        free(sp->body_free);
        return REMORA_ERR_NO_MEMORY;
    }
    hlen         = rm_hdr_encode(hdr, s->hdr);
    s->cipher    = NULL;
    if (peer->seal && rm_peer_seal_send(peer, s->hdr, &hlen, sp->body, sp->body_len,
                                        &s->cipher) != 0) {
        free(sp->body_free);
        free(s);
        return REMORA_ERR_NO_MEMORY;
    }
    s->body_free = sp->body_free;
    s->done      = sp->done;
    s->arg       = sp->arg;

    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send      = send_cb,
        .user_data    = s,
        /* Control bodies always go eager: receivers parse them in place. */
        .flags        = UCP_AM_SEND_FLAG_REPLY | (sp->bulk ? 0 : UCP_AM_SEND_FLAG_EAGER),
    };
    if (sp->bulk && s->cipher == NULL && forced_rndv(peer, sp))
        p.flags |= UCP_AM_SEND_FLAG_RNDV;
    s->ucp     = peer->ctx->ucp;
    s->memh    = NULL;
    s->gpu_ctx = NULL;
    if (s->cipher == NULL && sp->memh == NULL && sp->bulk && sp->body_len >= RM_SEND_MAP_MIN)
        s->memh = map_body(s->ucp, sp->body, sp->body_len, sp->cuda);
    if (s->cipher == NULL && (sp->memh || s->memh)) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p.memh = sp->memh ? sp->memh : s->memh;
    }
    if (sp->cuda && s->cipher == NULL) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    /* Listed before the call: whatever UCX does inside it, the entry is valid. */
    s->request = NULL;
    rm_list_push_back(&peer->sends, &s->link);
    s->nsends = &peer->nsends;
    peer->nsends++;
    peer->ctx->in_send++; /* an endpoint failing in here is told later (ep_error_cb) */
    req = ucp_am_send_nbx(peer->ep, am_id, s->hdr, hlen, peer->seal ? s->cipher : sp->body,
                          sp->body_len, &p);
    peer->ctx->in_send--;
    if (UCS_PTR_IS_PTR(req)) {
        s->request = req;
        if (sp->cuda && s->cipher == NULL) { /* UCX moves GPU memory: poll for its end */
            s->gpu_ctx = peer->ctx;
            rm_engine_gpu_ucx_add(s->gpu_ctx, 1);
        }
        return REMORA_OK;
    }
    send_unlist(s);
    if (UCS_PTR_IS_ERR(req)) {
        ucs_status_t status = UCS_PTR_STATUS(req);
        rm_debug("send %s failed: %s", rm_msg_type_name(hdr->type), ucs_status_string(status));
        s->done = NULL;
        send_finish(s, status);
        return rm_status_from_ucs(status);
    }
    send_finish(s, UCS_OK);
    return REMORA_OK;
}
