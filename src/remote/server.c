/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The server: a listener, named regions, and one connection per client.
 *
 * Design notes
 * - All state here is guarded by the context lock of the server's worker;
 *   message handlers run in UCX callbacks with it held, public calls take
 *   it. The region table is the registry's (registry.h), one for all of a
 *   server's workers: handlers take a view of a region under its lock, and
 *   a change is made once, then told to the connections of every worker.
 * - A connection walks HELLO -> (AUTH) -> READY. Nothing about regions is
 *   revealed or touched before READY.
 * - Every request is validated (region id, range, access, body length)
 *   before any byte moves; a bad one gets an error reply and a log line and
 *   the connection keeps working.
 * - Region memory is reference counted. A read reply or a write in flight
 *   holds a reference, so a replace never frees memory under a transfer.
 *   Memory a region used before a replace is "retired": kept until every
 *   client acknowledged the change (it may hold a remote key or mapping),
 *   or until RM_RETIRE_GRACE_NS passed.
 * - A connection is freed when it has failed and no write of it is still
 *   landing in region memory (conn->inflight). Sends never refer to the
 *   connection, so a send UCX completes late (to a dead peer) touches only
 *   the memory reference it holds.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mem/cuda.h"
#include "mem/mem.h"
#include "mem/shm.h"
#include "mem/stage.h"
#include "remote/server.h"
#include "remote/auth.h"
#include "engine/reach.h"
#include "engine/seal.h"
#include "remote/signals.h"
#include "remote/sock.h"
#include "util/env.h"
#include "util/fault.h"
#include "util/log.h"
#include "util/time.h"

#define RM_DEFAULT_LISTEN   "127.0.0.1:60010"
#define RM_RETIRE_GRACE_NS  (10ull * 1000000000u)
#define RM_DESTROY_WAIT_MS  2000
#define RM_LINGER_MS        1000 /* a closed connection's replies in flight: below the above */
#define RM_BOOT_TIMEOUT_NS  (5ull * 1000000000u)  /* to finish the handshake */
#define RM_MAX_CONNS        4096
#define RM_MAX_CONNS_HOST   1024
#define RM_CM_LINGER_NS     (3ull * 1000000000u)  /* a detached listener's last breath */
#define RM_STAGE_BUF        (16u << 20) /* the largest staged request */
#define RM_STAGE_POOLED     (4u << 20)  /* pooled staging buffers (a client's chunk) */
#define RM_STAGE_KEEP       32          /* kept pinned: enough for several clients' windows */

/* ------------------------------------------------------------ regions */

static rm_region_t *region_by_name(remora_server_h s, const char *name)
{
    return rm_registry_by_name(s->reg, name);
}

rm_region_t *rm_server_region_by_id(remora_server_h s, uint32_t id)
{
    rm_registry_lock(s->reg); /* another worker's thread may change the table */
    rm_region_t *r = rm_registry_by_id(s->reg, id);
    rm_registry_unlock(s->reg);
    return r;
}

/* A lying server, for tests of its clients (rm_fault_lie_arm). */
static void describe_lie(rm_region_desc_t *d)
{
    int map_fd;
    const void *rkey;
    size_t rkey_len;

    if (!rm_fault_lie_take(&map_fd, &rkey, &rkey_len))
        return;
    if (map_fd >= 0) {
        d->flags  |= RM_REGION_WIRE_MAPPABLE;
        d->map_pid = (uint32_t)getpid();
        d->map_fd  = (uint32_t)map_fd;
        d->map_offset = 0;
    }
    if (rkey_len) {
        d->rkey     = rkey;
        d->rkey_len = (uint32_t)rkey_len;
    }
}

/* Describe a region to a client: its remote key only where that client may
 * use one (c->rma_ok) and with the region's rights; its memory file only
 * where the region is mappable, sealed first when read-only. */
static void region_describe(const rm_conn_t *c, const rm_region_t *r, int with_rkey,
                            rm_region_desc_t *d)
{
    int writable = (r->flags & REMORA_REGION_WRITABLE) != 0;
    size_t rkey_len;

    memset(d, 0, sizeof(*d));
    d->region_id = r->id;
    snprintf(d->name, sizeof(d->name), "%s", r->name);
    d->size        = r->length;
    d->mem_type    = (uint8_t)r->mem->type;
    d->access      = REMORA_ACCESS_READ |
                     ((r->flags & REMORA_REGION_WRITABLE) ? REMORA_ACCESS_WRITE : 0);
    d->flags       = r->ring ? RM_REGION_WIRE_RING : 0;
    if (r->signals) { /* changed by signal operations only */
        d->flags  |= RM_REGION_WIRE_SIGNALS;
        d->access  = REMORA_ACCESS_READ;
    }
    if (c->peer.seal) { /* encrypted: active messages only, nothing to bypass them */
        d->generation = r->generation;
        d->device     = r->mem->device;
        return;
    }
    if (r->mem->shm_fd >= 0 && (writable || r->mem->sealed)) {
        d->flags     |= RM_REGION_WIRE_MAPPABLE;
        d->map_pid    = (uint32_t)getpid();
        d->map_fd     = (uint32_t)r->mem->shm_fd;
        d->map_offset = r->offset;
    }
    d->generation  = r->generation;
    d->remote_addr = (uint64_t)(uintptr_t)r->mem->addr + r->offset;
    d->device      = r->mem->device;
    if (r->mem->type == REMORA_MEM_CUDA && r->mem->memh != NULL)
        d->flags |= RM_REGION_WIRE_UCX;
    if (r->mem->type == REMORA_MEM_CUDA && r->mem->has_ipc) {
        d->flags |= RM_REGION_WIRE_IPC;
        memcpy(d->ipc, r->mem->ipc.bytes, RM_IPC_HANDLE_LEN);
        d->ipc_offset = r->mem->ipc_offset + r->offset;
    }
    if (with_rkey && c->rma_ok &&
        rm_mem_rkey(r->mem, writable, (const void **)&d->rkey, &rkey_len) == REMORA_OK)
        d->rkey_len = (uint32_t)rkey_len;
    describe_lie(d); /* tests */
}

/* A read-only region's memory file is sealed before any client may map it:
 * nobody can map it writable from then on (shm.h). Lock held. */
static remora_status_t region_seal(remora_mem_h mem, unsigned flags)
{
    remora_status_t st;

    if (mem->shm_fd < 0 || mem->sealed || (flags & REMORA_REGION_WRITABLE))
        return REMORA_OK;
    if ((st = rm_shm_seal_read_only(mem->shm_fd)) != REMORA_OK)
        return st;
    mem->sealed = 1;
    return REMORA_OK;
}

/* What a connection's bootstrap socket may hold before AUTH: a HELLO (72
 * bytes now, room left for fields a later protocol adds) or an AUTH. */
#define RM_BOOT_PREAUTH_MAX 1024u
/* Sends UCX may hold for one connection: a client's answers not yet taken
 * (about 470 bytes each while queued: 8 MB at most). A client keeps at most
 * a few hundred in flight (its requests' windows, a ring's pushes); one
 * that stops reading with more outstanding is disconnected. */
#define RM_CONN_SENDS_MAX 16384u

/* ------------------------------------------------------------ connections */

static void conn_free_if_idle(rm_conn_t *c)
{
    remora_server_h s = c->server;

    if (!c->dead || c->inflight)
        return;
    rm_conn_caps_put(s->caps, c->peer_host);
    s->nconns--;
    free(c);
    if (s->nconns == 0)
        rm_engine_complete(s->ctx, &s->drained);
}

static void retired_sweep(remora_server_h s);

/* Detach the connection's listener; the ticker destroys it later. */
static void conn_close_cm_listener(rm_conn_t *c)
{
    if (c->cm) {
        c->cm->conn        = NULL;
        c->cm->detached_ns = rm_now_ns();
        c->cm              = NULL;
    }
}

static void cm_slots_sweep(remora_server_h s, int all)
{
    rm_list_t *pos, *tmp;
    uint64_t now = rm_now_ns();

    rm_list_for_each_safe(pos, tmp, &s->cm_slots) {
        rm_cm_slot_t *slot = rm_container_of(pos, rm_cm_slot_t, link);
        if (slot->conn == NULL && (all || now - slot->detached_ns > RM_CM_LINGER_NS)) {
            rm_list_del(&slot->link);
            rm_gate_forget(rm_engine_gate(s->ctx), slot);
            ucp_listener_destroy(slot->listener);
            free(slot);
        }
    }
}

/* Stop probing the client's interfaces, if we were. */
static void conn_reach_stop(rm_conn_t *c)
{
    if (c->reach == NULL)
        return;
    rm_engine_unwatch(c->server->ctx, &c->reach_watch);
    rm_reach_free(c->reach);
    c->reach = NULL;
    free(c->reach_addr);
    c->reach_addr = NULL;
}

/* Close and unlink a connection; frees it unless callbacks are still due. */
static void conn_kill(rm_conn_t *c)
{
    if (c->dead)
        return;
    if (c->state == CONN_READY) {
        atomic_fetch_sub_explicit(&c->server->stat[RM_SS_CONNS], 1, memory_order_relaxed);
        rm_server_conn_event(c, 0);
    }
    c->dead = 1;
    c->inflight++; /* the forced close may run our send callbacks right here */
    rm_list_del(&c->link);
    rm_server_ring_conn_gone(c);
    rm_sock_peer_gone(&c->peer);
    conn_reach_stop(c);
    conn_close_cm_listener(c);
    /* Replies in flight are let through before the endpoint closes (UCX
     * 1.13 can crash closing it under them); they hold their own memory.
     * A server being destroyed closes at once. */
    if (rm_peer_close_linger(&c->peer, c->server->destroying ? 0 : RM_LINGER_MS))
        c->inflight++; /* until conn_on_closed */
    retired_sweep(c->server); /* it no longer holds up retired memory */
    c->inflight--;
    conn_free_if_idle(c);
}

static void conn_on_error(rm_peer_t *peer, remora_status_t status)
{
    rm_conn_t *c = (rm_conn_t *)peer;
    rm_info("client connection lost: %s", remora_status_string(status));
    conn_kill(c);
}

static void conn_on_closed(rm_peer_t *peer)
{
    rm_conn_t *c = (rm_conn_t *)peer;

    c->inflight--;
    conn_free_if_idle(c);
}

/*
 * Sends do not hold the connection: UCX may call back for a send to a dead
 * peer long after the connection is gone (seconds, in UCX 1.13), and a
 * server must not wait for that to free it.
 * A message that cannot go out on a live connection (memory ran out for
 * its body, say) is an answer its client waits for, a ring subscriber
 * forever. A reply is then answered with the error instead; if even that
 * cannot go, or the message answered nothing (an event), the connection
 * goes, and the client hears DISCONNECTED at once.
 */
remora_status_t rm_conn_send(rm_conn_t *c, const rm_hdr_t *hdr, rm_send_params_t *sp)
{
    remora_status_t st = rm_peer_send(&c->peer, RM_AM_ID_TO_CLIENT, hdr, sp);

    if (st == REMORA_OK || rm_peer_failing(&c->peer))
        return st;
    if (hdr->req_id != 0 && hdr->status == REMORA_OK) {
        rm_hdr_t e = {.type = hdr->type, .req_id = hdr->req_id, .status = st};
        rm_send_params_t ep = {0};
        if (rm_peer_send(&c->peer, RM_AM_ID_TO_CLIENT, &e, &ep) == REMORA_OK) {
            rm_info("a %s to %s could not be sent (%s): answered with the error",
                    rm_msg_type_name(hdr->type), c->peer_host, remora_status_string(st));
            return st;
        }
    }
    rm_peer_fail_lost(&c->peer, hdr->type, st);
    return st;
}

void rm_conn_hold(rm_conn_t *c) { c->inflight++; }

int rm_conn_release(rm_conn_t *c)
{
    int dead = c->dead;

    c->inflight--;
    conn_free_if_idle(c);
    return dead;
}

void rm_conn_reply(rm_conn_t *c, unsigned type, uint64_t req_id, remora_status_t status,
                       rm_wbuf_t *body)
{
    rm_hdr_t hdr = {.type = (uint8_t)type, .req_id = req_id, .status = status};
    rm_send_params_t sp = {0};

    if (status != REMORA_OK) {
        RM_SS_ADD(c->server, RM_SS_ERRORS, 1);
        c->cs[RM_CS_ERRORS]++;
    }
    if (body != NULL) {
        if (body->failed) {
            rm_wbuf_free(body);
            hdr.status = REMORA_ERR_NO_MEMORY;
        } else {
            sp.body = sp.body_free = body->data;
            sp.body_len = body->len;
        }
    }
    rm_conn_send(c, &hdr, &sp);
}

/* ------------------------------------------------------------ events to clients */

/* What a change is told as: the region as it is after it. */
typedef struct rm_change {
    uint32_t    id;
    const char *name;
    uint64_t    generation, length, epoch;
    uint8_t     kind;
    remora_mem_h old; /* the memory it retired */
} rm_change_t;

static void broadcast_event(remora_server_h s, const rm_change_t *ch)
{
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &s->conns) {
        rm_conn_t *c = rm_container_of(pos, rm_conn_t, link);
        rm_wbuf_t w;
        rm_hdr_t hdr = {.type = RM_MSG_EVENT, .region_id = ch->id, .kind = ch->kind,
                        .generation = ch->generation, .size = ch->length, .epoch = ch->epoch};
        rm_send_params_t sp = {0};

        if (c->state != CONN_READY)
            continue;
        rm_wbuf_init(&w);
        rm_wbuf_name(&w, ch->name);
        if (w.failed) {
            rm_wbuf_free(&w);
            continue;
        }
        sp.body = sp.body_free = w.data;
        sp.body_len = w.len;
        rm_conn_send(c, &hdr, &sp);
    }
}

static int retired_released(remora_server_h s, const rm_retired_t *t, uint64_t now)
{
    rm_list_t *pos, *tmp;

    if (now >= t->expire_ns)
        return 1;
    rm_list_for_each_safe(pos, tmp, &s->conns) {
        rm_conn_t *c = rm_container_of(pos, rm_conn_t, link);
        if (c->state == CONN_READY && c->acked_epoch < t->epoch)
            return 0;
    }
    return 1;
}

static void retired_sweep(remora_server_h s)
{
    rm_list_t *pos, *tmp;
    uint64_t now = rm_now_ns();

    rm_list_for_each_safe(pos, tmp, &s->retired) {
        rm_retired_t *t = rm_container_of(pos, rm_retired_t, link);
        if (retired_released(s, t, now)) {
            rm_list_del(&t->link);
            rm_mem_unref(t->mem);
            free(t);
        }
    }
}

/* Keep memory a change retired for this worker's clients that may map it
 * (a reference of its own). Lock held. */
static void region_retire_mem(remora_server_h s, remora_mem_h mem, uint64_t epoch)
{
    rm_retired_t *t = malloc(sizeof(*t));

    if (t == NULL) /* cannot track it: clients lose nothing but a late free */
        return;
    rm_mem_ref(mem);
    t->mem       = mem;
    t->epoch     = epoch;
    t->expire_ns = rm_now_ns() + RM_RETIRE_GRACE_NS;
    rm_list_push_back(&s->retired, &t->link);
}

/* A change made in the registry, told to one worker's connections (its lock held). */
static void change_tell(remora_server_h s, const rm_change_t *ch)
{
    broadcast_event(s, ch);
    region_retire_mem(s, ch->old, ch->epoch);
    retired_sweep(s);
}

/* ... and to every other worker's (the first worker's lock held: it comes
 * before theirs). Then the registry's reference to the old memory goes. */
static void change_tell_workers(remora_server_h s, const rm_change_t *ch)
{
    for (unsigned i = 0; i < s->nlanes; i++) {
        rm_engine_lock(s->lane[i]->ctx);
        change_tell(s->lane[i], ch);
        rm_engine_unlock(s->lane[i]->ctx);
    }
    rm_mem_unref(ch->old);
}

/* ------------------------------------------------------------ handlers */

static void handle_list(rm_conn_t *c, const rm_hdr_t *hdr)
{
    rm_list_t *pos, *tmp;
    rm_wbuf_t w;
    uint32_t count = 0;

    rm_registry_lock(c->server->reg);
    rm_list_for_each_safe(pos, tmp, &c->server->reg->regions)
        count++;
    rm_wbuf_init(&w);
    rm_wbuf_u32(&w, count);
    rm_list_for_each_safe(pos, tmp, &c->server->reg->regions) {
        rm_region_desc_t d;
        region_describe(c, rm_container_of(pos, rm_region_t, link), 0, &d);
        rm_region_desc_encode(&w, &d);
    }
    rm_registry_unlock(c->server->reg);
    rm_conn_reply(c, RM_MSG_LIST_REPLY, hdr->req_id, REMORA_OK, &w);
}

static void handle_lookup(rm_conn_t *c, const rm_hdr_t *hdr, const void *body, size_t len)
{
    char name[REMORA_NAME_MAX + 1];
    rm_region_t *r;
    rm_region_desc_t d;
    rm_wbuf_t w;

    if (rm_name_decode(body, len, name) != 0) {
        rm_warn_peer("malformed LOOKUP");
        rm_conn_reply(c, RM_MSG_LOOKUP_REPLY, hdr->req_id, REMORA_ERR_PROTOCOL, NULL);
        return;
    }
    rm_registry_lock(c->server->reg);
    if ((r = region_by_name(c->server, name)) == NULL) {
        rm_registry_unlock(c->server->reg);
        rm_conn_reply(c, RM_MSG_LOOKUP_REPLY, hdr->req_id, REMORA_ERR_NOT_FOUND, NULL);
        return;
    }
    region_describe(c, r, 1, &d);
    rm_registry_unlock(c->server->reg);
    RM_SS_ADD(c->server, RM_SS_LOOKUPS, 1);
    if (d.flags & RM_REGION_WIRE_MAPPABLE)
        RM_SS_ADD(c->server, RM_SS_MAP_GRANTS, 1);
    if (d.rkey_len)
        RM_SS_ADD(c->server, RM_SS_RMA_GRANTS, 1);
    if (d.flags & RM_REGION_WIRE_IPC)
        RM_SS_ADD(c->server, RM_SS_IPC_GRANTS, 1);
    rm_wbuf_init(&w);
    rm_region_desc_encode(&w, &d);
    rm_conn_reply(c, RM_MSG_LOOKUP_REPLY, hdr->req_id, REMORA_OK, &w);
}

/* The region and range a READ or WRITE names, or why not; on REMORA_OK
 * *r holds a reference to its memory. */
static remora_status_t check_access(rm_conn_t *c, const rm_hdr_t *hdr, int write,
                                    rm_region_view_t *r)
{
    return rm_registry_view(c->server->reg, hdr->region_id, hdr->offset, hdr->length, write, r);
}

static void *region_ptr(const rm_region_view_t *r, uint64_t offset)
{
    return (char *)r->mem->addr + r->offset + offset;
}

/* A read or write the server moved (am or staging), for the counters. */
static void count_transfer(rm_conn_t *c, int staged, int write, uint64_t bytes)
{
    unsigned base = staged ? RM_SS_STAGING_READ_OPS : RM_SS_AM_READ_OPS;

    base += write ? 2 : 0; /* *_WRITE_OPS follows *_READ_BYTES */
    RM_SS_ADD(c->server, base, 1);
    RM_SS_ADD(c->server, base + 1, bytes);
    c->cs[write ? RM_CS_WRITE_OPS : RM_CS_READ_OPS]++;
    c->cs[write ? RM_CS_WRITE_BYTES : RM_CS_READ_BYTES] += bytes;
}

/* A read reply left: drop the reference that kept its memory alive. */
static void read_reply_done(void *arg, ucs_status_t status) { rm_mem_unref(arg); }

/* GPU memory the loaded UCX cannot touch, or that the client asked to be
 * staged: it moves through staging buffers. */
static int region_staged(const rm_conn_t *c, const rm_region_view_t *r, const rm_hdr_t *hdr)
{
    return r->mem->type == REMORA_MEM_CUDA &&
           (r->mem->memh == NULL || c->peer.seal != NULL || (hdr->kind & RM_RW_STAGED));
}

/* A staged read: the range is copied out of GPU memory into a pinned buffer
 * (on the worker's CUDA stream, the lock free for other connections
 * meanwhile), then sent from there. */
typedef struct rm_staged {
    rm_copy_t        copy;
    rm_conn_t       *conn;   /* held (inflight) until the copy ended */
    remora_mem_h     mem;    /* the region's memory, held likewise */
    uint64_t         req_id;
    rm_stage_pool_t *pool;
    void            *buf;
    size_t           len;
} rm_staged_t;

static void staged_free(rm_staged_t *sg)
{
    if (sg->buf)
        rm_stage_put(sg->pool, sg->buf, sg->len);
    free(sg);
}

static void staged_reply_done(void *arg, ucs_status_t status) { staged_free(arg); }

static void staged_copied(rm_copy_t *copy, remora_status_t st)
{
    rm_staged_t *sg = rm_container_of(copy, rm_staged_t, copy);
    rm_conn_t *c    = sg->conn;
    rm_hdr_t rh     = {.type = RM_MSG_READ_REPLY, .req_id = sg->req_id};
    rm_send_params_t sp = {.body = sg->buf, .body_len = sg->len, .done = staged_reply_done,
                           .arg = sg, .bulk = 1};

    rm_mem_unref(sg->mem);
    c->inflight--;
    if (c->dead) {
        staged_free(sg);
    } else if (st != REMORA_OK) {
        rm_conn_reply(c, RM_MSG_READ_REPLY, sg->req_id, st, NULL);
        staged_free(sg);
    } else if (rm_conn_send(c, &rh, &sp) != REMORA_OK) {
        staged_free(sg);
    }
    conn_free_if_idle(c);
}

static void handle_read_staged(rm_conn_t *c, const rm_hdr_t *hdr, rm_region_view_t *r)
{
    rm_staged_t *sg = NULL;
    remora_status_t st = REMORA_OK;

    if (hdr->length > RM_STAGE_BUF)
        st = REMORA_ERR_OUT_OF_RANGE; /* clients chunk GPU reads below this */
    else if ((sg = calloc(1, sizeof(*sg))) == NULL ||
             (sg->buf = rm_stage_get(c->server->stage, hdr->length)) == NULL)
        st = REMORA_ERR_NO_MEMORY;
    if (st == REMORA_OK) {
        sg->conn   = c;
        sg->mem    = r->mem;
        sg->req_id = hdr->req_id;
        sg->pool   = c->server->stage;
        sg->len    = hdr->length;
        c->inflight++; /* until staged_copied */
        st = rm_engine_copy(c->server->ctx, &sg->copy, sg->buf, region_ptr(r, hdr->offset),
                            hdr->length, staged_copied);
        if (st != REMORA_INPROGRESS)
            staged_copied(&sg->copy, st); /* copied here, or failed */
        return;
    }
    rm_mem_unref(r->mem);
    if (sg)
        staged_free(sg);
    rm_conn_reply(c, RM_MSG_READ_REPLY, hdr->req_id, st, NULL);
}

static void handle_read(rm_conn_t *c, const rm_hdr_t *hdr)
{
    rm_region_view_t view, *r = &view;
    remora_status_t st = check_access(c, hdr, 0, r);
    rm_hdr_t rh = {.type = RM_MSG_READ_REPLY, .req_id = hdr->req_id, .status = st};

    if (st != REMORA_OK) {
        rm_conn_reply(c, RM_MSG_READ_REPLY, hdr->req_id, st, NULL);
        return;
    }
    count_transfer(c, region_staged(c, r, hdr) && hdr->length, 0, hdr->length);
    if (region_staged(c, r, hdr) && hdr->length) {
        handle_read_staged(c, hdr, r);
        return;
    }
    /* The payload leaves straight from region memory (zero-copy rendezvous
     * for large reads); the view's reference keeps it alive through a replace. */
    rm_send_params_t sp = {.body = region_ptr(r, hdr->offset), .body_len = hdr->length,
                           .memh = r->mem->memh, .done = read_reply_done, .arg = r->mem,
                           .bulk = 1, .cuda = r->mem->type == REMORA_MEM_CUDA,
                           .to_gpu = (hdr->kind & RM_RW_GPU_BUF) != 0};
    if (rm_conn_send(c, &rh, &sp) != REMORA_OK)
        rm_mem_unref(sp.arg);
}

typedef struct rm_write_ctx {
    rm_copy_t    copy;   /* staged: stage -> dst */
    rm_conn_t   *conn;
    remora_mem_h mem;
    uint64_t     req_id;
    void        *stage;  /* staged write: the pinned buffer the payload landed in */
    void        *dst;    /* ... and where in GPU memory it goes */
    size_t       len;
    void        *cipher; /* sealed rendezvous write: the payload lands here first */
    rm_hdr_t     hdr;    /* ... and is opened with its header */
    int          has_sig; /* WRITE_SIGNAL: apply sig once the data landed */
    rm_sig_desc_t sig;
    int          staged;  /* counted as staging (else am) */
    int          gpu_ucx; /* counted in rm_engine_gpu_ucx_add until it landed */
} rm_write_ctx_t;

/* The write's data is in place (or failed): the signal, the reply. */
static void write_end(rm_write_ctx_t *wc, ucs_status_t status)
{
    rm_conn_t *c = wc->conn;

    if (wc->stage)
        rm_stage_put(c->server->stage, wc->stage, wc->len);
    rm_mem_unref(wc->mem);
    c->inflight--;
    remora_status_t st = rm_status_from_ucs(status);
    if (wc->has_sig && st == REMORA_OK && !c->dead)
        st = rm_server_signal_apply(c->server, &wc->sig);
    if (st == REMORA_OK)
        count_transfer(c, wc->staged, 1, wc->len);
    if (!c->dead)
        rm_conn_reply(c, RM_MSG_WRITE_REPLY, wc->req_id, st, NULL);
    conn_free_if_idle(c);
    free(wc);
}

static void write_copied(rm_copy_t *copy, remora_status_t st)
{
    write_end(rm_container_of(copy, rm_write_ctx_t, copy), st == REMORA_OK ? UCS_OK
                                                                          : UCS_ERR_IO_ERROR);
}

/* The payload landed (or failed): a staged one goes on to GPU memory on the
 * worker's CUDA stream, and the reply follows when it is there. */
static void write_finish(rm_write_ctx_t *wc, ucs_status_t status)
{
    rm_conn_t *c = wc->conn;

    if (wc->cipher) { /* into region memory (or staging) only once authentic */
        if (status == UCS_OK &&
            rm_peer_seal_open(&c->peer, &wc->hdr, wc->cipher, wc->len) != REMORA_OK)
            status = UCS_ERR_INVALID_PARAM; /* the connection is failing anyway */
        if (status == UCS_OK)
            memcpy(wc->stage ? wc->stage : wc->dst, wc->cipher, wc->len);
        free(wc->cipher);
        wc->cipher = NULL;
    }
    if (wc->stage && status == UCS_OK) {
        remora_status_t st = rm_engine_copy(c->server->ctx, &wc->copy, wc->dst, wc->stage,
                                            wc->len, write_copied);
        if (st == REMORA_INPROGRESS)
            return;
        if (st != REMORA_OK)
            status = UCS_ERR_IO_ERROR;
    }
    write_end(wc, status);
}

static void write_recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    rm_write_ctx_t *wc = user_data;

    if (wc->gpu_ucx)
        rm_engine_gpu_ucx_add(wc->conn->server->ctx, -1);
    write_finish(wc, status);
    ucp_request_free(request);
}

void rm_server_handle_write(rm_conn_t *c, const rm_hdr_t *hdr, void *body, size_t len,
                            const ucp_am_recv_param_t *param, const rm_sig_desc_t *sig)
{
    rm_region_view_t view = {0}, *r = &view;
    remora_status_t st = check_access(c, hdr, 1, r);
    rm_write_ctx_t *wc = NULL;

    if (st == REMORA_OK && len != hdr->length)
        st = REMORA_ERR_PROTOCOL;
    if (st == REMORA_OK && region_staged(c, r, hdr) && len > RM_STAGE_BUF)
        st = REMORA_ERR_OUT_OF_RANGE;
    if (st != REMORA_OK || (wc = calloc(1, sizeof(*wc))) == NULL) {
        if (r->mem)
            rm_mem_unref(r->mem); /* the view was taken */
        /* Returning from the handler drops a rendezvous payload unread. */
        rm_conn_reply(c, RM_MSG_WRITE_REPLY, hdr->req_id,
                   st != REMORA_OK ? st : REMORA_ERR_NO_MEMORY, NULL);
        return;
    }
    wc->conn   = c;
    wc->mem    = r->mem;
    wc->req_id = hdr->req_id;
    wc->dst    = region_ptr(r, hdr->offset);
    wc->len    = len;
    wc->staged = region_staged(c, r, hdr) && len;
    if (sig) {
        wc->has_sig = 1;
        wc->sig     = *sig;
    }
    c->inflight++; /* wc holds the view's reference */
    if (region_staged(c, r, hdr) && len && (wc->stage = rm_stage_get(c->server->stage, len)) == NULL) {
        write_finish(wc, UCS_ERR_NO_MEMORY);
        return;
    }
    void *land = wc->stage ? wc->stage : wc->dst;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        /* eager: the payload is in a UCX host buffer; a GPU region UCX took
         * (not staged) is written with a CUDA copy, never memcpy */
        ucs_status_t us = UCS_OK;
        if (!wc->stage && !c->peer.seal && r->mem->type == REMORA_MEM_CUDA && len)
            us = rm_cuda_copy(land, body, len) == REMORA_OK ? UCS_OK : UCS_ERR_IO_ERROR;
        else
            memcpy(land, body, len);
        write_finish(wc, us);
        return;
    }
    /* Rendezvous: the payload lands directly in region memory (or staging);
     * encrypted, in a buffer of its own (write_finish). */
    if (c->peer.seal) {
        if ((wc->cipher = malloc(len)) == NULL) {
            write_finish(wc, UCS_ERR_NO_MEMORY);
            return;
        }
        wc->hdr = *hdr;
        land    = wc->cipher;
    }
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am   = write_recv_cb,
        .user_data    = wc,
    };
    if (!wc->stage && !wc->cipher && r->mem->memh) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        p.memh = r->mem->memh;
    }
    if (!wc->stage && !wc->cipher && r->mem->type == REMORA_MEM_CUDA) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    wc->gpu_ucx = (p.op_attr_mask & UCP_OP_ATTR_FIELD_MEMORY_TYPE) != 0; /* UCX copies to GPU */
    ucs_status_ptr_t req = rm_engine_am_recv_data(c->server->ctx, body, land, len, &p);
    if (UCS_PTR_IS_ERR(req))
        write_finish(wc, UCS_PTR_STATUS(req));
    else if (req == NULL)
        write_finish(wc, UCS_OK);
}

static void handle_event_ack(rm_conn_t *c, const rm_hdr_t *hdr)
{
    if (hdr->epoch > c->acked_epoch && hdr->epoch <= rm_registry_epoch(c->server->reg))
        c->acked_epoch = hdr->epoch;
    retired_sweep(c->server);
    rm_engine_complete(c->server->ctx, &c->server->acked); /* remora_server_sync_clients */
}

/* LANES: the ports that reach the server's other workers, each without
 * spreading (the first worker's direct listener, the others' own). */
static void handle_lanes(rm_conn_t *c, const rm_hdr_t *hdr)
{
    remora_server_h m = c->server->main ? c->server->main : c->server;
    uint16_t ports[RM_LANES_MAX];
    unsigned n = 0;
    rm_wbuf_t w;

    if (c->server != m && m->direct_port)
        ports[n++] = m->direct_port;
    for (unsigned i = 0; i < m->nlanes; i++)
        if (m->lane[i] != c->server)
            ports[n++] = m->lane_port[i];
    if (rm_fault_lanes_port()) { /* tests: a server naming another's port */
        ports[0] = (uint16_t)rm_fault_lanes_port();
        n = 1;
    }
    rm_wbuf_init(&w);
    rm_lanes_encode(&w, ports, n);
    rm_conn_reply(c, RM_MSG_LANES_REPLY, hdr->req_id, REMORA_OK, &w);
}

/* A subscriber's wait; in "every" mode, elements already overwritten that it
 * asks for are drops (the latest mode skips on purpose). */
static void count_ring_wait(rm_conn_t *c, const rm_hdr_t *hdr)
{
    rm_region_t *r = rm_server_region_by_id(c->server, hdr->region_id);
    rm_ring_shape_t now;

    RM_SS_ADD(c->server, RM_SS_RING_WAITS, 1);
    c->cs[RM_CS_RING_WAITS]++;
    if (r == NULL || r->ring == NULL || RM_RING_MODE(hdr->kind) != RM_RING_EVERY)
        return;
    rm_ring_snapshot(r->ring, &now);
    uint64_t oldest = rm_ring_oldest_seq(&now);
    if (oldest > hdr->offset)
        RM_SS_ADD(c->server, RM_SS_RING_DROPS, oldest - hdr->offset);
}

/* Messages a READY connection may send. */
static void dispatch_ready(rm_conn_t *c, const rm_hdr_t *hdr, void *body, size_t len,
                           const ucp_am_recv_param_t *param)
{
    switch (hdr->type) {
    case RM_MSG_LIST:      handle_list(c, hdr); break;
    case RM_MSG_LOOKUP:    handle_lookup(c, hdr, body, len); break;
    case RM_MSG_READ:      handle_read(c, hdr); break;
    case RM_MSG_WRITE:     rm_server_handle_write(c, hdr, body, len, param, NULL); break;
    case RM_MSG_SIGNAL:
        RM_SS_ADD(c->server, RM_SS_SIGNALS, 1);
        rm_server_signal(c, hdr);
        break;
    case RM_MSG_WRITE_SIGNAL:
        RM_SS_ADD(c->server, RM_SS_SIGNALS, 1);
        rm_server_write_signal(c, hdr, body, len, param);
        break;
    case RM_MSG_STATS:     rm_server_handle_stats(c, hdr); break;
    case RM_MSG_PING:      rm_conn_reply(c, RM_MSG_PONG, hdr->req_id, REMORA_OK, NULL); break;
    case RM_MSG_EVENT_ACK: handle_event_ack(c, hdr); break;
    case RM_MSG_RING_WAIT:
        count_ring_wait(c, hdr);
        rm_server_ring_wait(c, hdr);
        break;
    case RM_MSG_LANES:     handle_lanes(c, hdr); break;
    case RM_MSG_SOCK_CONNECT:
    case RM_MSG_SOCK_DATA:
    case RM_MSG_SOCK_FIN:
    case RM_MSG_SOCK_CREDIT: rm_sock_on_message(&c->peer, c->server, hdr, body, len); break;
    default:
        rm_warn_peer("unexpected %s from a client", rm_msg_type_name(hdr->type));
        rm_conn_reply(c, RM_MSG_ERROR, hdr->req_id, REMORA_ERR_PROTOCOL, NULL);
    }
}

static void conn_cm_prove(rm_conn_t *c, const rm_hdr_t *hdr, const void *body, size_t len,
                          const ucp_am_recv_param_t *param);

static ucs_status_t conn_on_message(rm_peer_t *peer, const rm_hdr_t *hdr, void *body,
                                    size_t len, const ucp_am_recv_param_t *param)
{
    rm_conn_t *c = (rm_conn_t *)peer;

    if (!c->dead && c->state == CONN_CM_PROVE) {
        conn_cm_prove(c, hdr, body, len, param);
        return UCS_OK;
    }
    /* Only a connection that finished its handshake has an endpoint at all. */
    if (c->dead || c->state != CONN_READY)
        return UCS_OK;
    if (hdr == NULL || ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
                        hdr->type != RM_MSG_WRITE)) {
        /* Only WRITE payloads may come by rendezvous; other bodies are parsed in place. */
        rm_warn_peer("malformed message from a client");
        rm_conn_reply(c, RM_MSG_ERROR, hdr ? hdr->req_id : 0, REMORA_ERR_PROTOCOL, NULL);
        return UCS_OK;
    }
    dispatch_ready(c, hdr, body, len, param);
    return UCS_OK;
}

static const rm_peer_ops_t conn_ops = {.on_message = conn_on_message,
                                       .on_error   = conn_on_error,
                                       .on_closed  = conn_on_closed};

static void conn_ready(rm_conn_t *c);

/* Whether a connection request comes from the host the client's bootstrap
 * socket is connected from (a first filter: the ticket is the proof). */
static int cm_request_from_client(rm_conn_t *c, ucp_conn_request_h req)
{
    ucp_conn_request_attr_t a = {.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR};
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (ucp_conn_request_query(req, &a) != UCS_OK ||
        getpeername(c->peer.sock.fd, (struct sockaddr *)&ss, &len) != 0 ||
        a.client_address.ss_family != AF_INET || ss.ss_family != AF_INET)
        return 0;
    return ((struct sockaddr_in *)&a.client_address)->sin_addr.s_addr ==
           ((struct sockaddr_in *)&ss)->sin_addr.s_addr;
}

static void conn_on_cm_request(ucp_conn_request_h req, void *arg)
{
    rm_cm_slot_t *slot = arg;
    rm_conn_t *c       = slot->conn;

    if (c == NULL || c->state != CONN_CM_WAIT || !cm_request_from_client(c, req)) {
        ucp_listener_reject(slot->listener, req); /* late, a second, another host's */
        return;
    }
    if (rm_peer_accept_cm(&c->peer, req) != REMORA_OK) {
        /* UCX has released the request (rejecting it now would touch freed
         * memory); the client is gone or going. */
        rm_info("could not accept a client's connection");
        conn_kill(c);
        return;
    }
    c->state = CONN_CM_PROVE; /* the listener is detached at the next tick */
}

/* CONN_CM_PROVE: the first message must be AUTH with the ticket from
 * CONNECT_REPLY; anything else, from whoever reached the port, closes. */
static void conn_cm_prove(rm_conn_t *c, const rm_hdr_t *hdr, const void *body, size_t len,
                          const ucp_am_recv_param_t *param)
{
    if (hdr == NULL || hdr->type != RM_MSG_AUTH || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
        rm_auth_ticket_check(c->cm_ticket, body, len) != 0) {
        rm_warn_peer("a connection to %s's connection-manager port did not prove it is that client: "
                "closing both", c->peer_host);
        conn_kill(c);
        return;
    }
    conn_ready(c);
}

/*
 * Open a UCX listener for this one client on the address it reached us at.
 * UCX's connection manager gives the endpoint zero-copy rendezvous lanes over
 * TCP that a worker-address endpoint with peer-failure handling lacks
 * (docs/performance.md). IPv4 only: UCX mishandles IPv6 there. Only after a
 * valid bootstrap, and only the client's host gets through (the gate): the
 * manager aborts the process on garbage from its peer (docs/protocol.md),
 * as UCX's TCP transport does on its own ports.
 */
static int conn_open_cm(rm_conn_t *c, uint16_t *port_p)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    rm_cm_slot_t *slot;

    if (!c->server->cm)
        return -1;
    if (getsockname(c->peer.sock.fd, (struct sockaddr *)&ss, &len) != 0 || ss.ss_family != AF_INET ||
        (slot = calloc(1, sizeof(*slot))) == NULL)
        return -1;
    ((struct sockaddr_in *)&ss)->sin_port = 0;
    ucp_listener_params_t lp = {
        .field_mask   = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr     = {.addr = (const struct sockaddr *)&ss, .addrlen = len},
        .conn_handler = {.cb = conn_on_cm_request, .arg = slot},
    };
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    if (ucp_listener_create(c->server->ctx->worker, &lp, &slot->listener) != UCS_OK) {
        free(slot);
        return -1;
    }
    slot->conn = c;
    c->cm      = slot;
    rm_list_push_back(&c->server->cm_slots, &slot->link);
    if (ucp_listener_query(slot->listener, &la) != UCS_OK || la.sockaddr.ss_family != AF_INET) {
        conn_close_cm_listener(c);
        return -1;
    }
    /* UCX's connection manager parses what reaches its port: only hosts let
     * in (this client's, by boot_connect_addr) get there (gate.h). */
    rm_gate_guard_listener(rm_engine_gate(c->server->ctx), slot, (struct sockaddr *)&la.sockaddr);
    *port_p = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
    return 0;
}

/* ------------------------------------------------------------ handshake */

/* The handshake is done: the endpoint exists, heartbeats start. */
static void conn_ready(rm_conn_t *c)
{
    remora_context_h ctx = c->server->ctx;

    /* Remote keys only where the transport enforces them (docs/security.md). */
    c->rma_ok = ctx->rma == REMORA_RMA_UNSAFE ||
                (ctx->rma == REMORA_RMA_VERBS && rm_peer_rma_lanes(&c->peer) == RM_RMA_LANE_VERBS);
    c->state       = CONN_READY;
    c->acked_epoch = rm_registry_epoch(c->server->reg); /* it never saw earlier regions' keys */
    rm_peer_live_start(&c->peer);
    rm_info("client %s connected", c->peer_addr);
    atomic_fetch_add_explicit(&c->server->stat[RM_SS_CONNS], 1, memory_order_relaxed);
    rm_server_conn_event(c, 1);
}

/* Answer with a status and nothing else; the connection then ends. */
static int conn_refuse(rm_conn_t *c, unsigned type, remora_status_t st)
{
    rm_boot_send_reply(c->peer.sock.fd, type, 0, st, NULL, 0);
    return -1;
}

/* HELLO: protocol versions and nonces; the reply says whether a token is due. */
static int boot_hello(rm_conn_t *c, const rm_boot_frame_t *f)
{
    remora_server_h s = c->server;
    rm_hello_t in, out = {0};
    rm_wbuf_t w;
    unsigned major, minor, release;
    char why[256] = "";
    int rc;

    if (f->type != RM_BOOT_HELLO || rm_hello_decode(f->payload, f->len, &in) != 0)
        return -1;
    if (in.proto_min > RM_PROTO_VERSION || in.proto_max < RM_PROTO_VERSION) {
        rm_warn_peer("client %s speaks protocol %u..%u, we speak %u", c->peer_host, in.proto_min,
                in.proto_max, RM_PROTO_VERSION);
        return conn_refuse(c, RM_BOOT_HELLO_REPLY, REMORA_ERR_VERSION);
    }
    if (!(in.flags & RM_HELLO_ENCRYPT) != !s->encrypt) {
        rm_warn_peer("refusing client %s: it %s encryption, this server %s", c->peer_host,
                s->encrypt ? "does not use" : "asks for", s->encrypt ? "requires it" : "has it off");
        return conn_refuse(c, RM_BOOT_HELLO_REPLY, REMORA_ERR_ENCRYPTION);
    }
    /* A client whose TCP segments do not fit ours gets our hello, so that it
     * can say why itself, and then a refusal (older clients do not check). */
    if (rm_tcp_segs_fit(s->ctx, in.tcp_segs_sent, in.tcp_tx_seg, in.tcp_rx_seg, why,
                        sizeof(why)) != REMORA_OK)
        rm_warn_peer("refusing client %s: %s", c->peer_host, why);
    memcpy(c->client_nonce, in.nonce, RM_NONCE_LEN);
    ucp_get_version(&major, &minor, &release);
    out.proto_min = out.proto_max = RM_PROTO_VERSION;
    out.flags       = (s->token ? RM_HELLO_AUTH_REQUIRED : 0) | (s->encrypt ? RM_HELLO_ENCRYPT : 0) |
                      RM_HELLO_STATS;
    out.instance    = s->instance;
    out.ucx_version = major << 16 | minor;
    out.tcp_tx_seg  = s->ctx->tcp_tx_seg;
    out.tcp_rx_seg  = s->ctx->tcp_rx_seg;
    memcpy(out.host_id, s->ctx->host_id, RM_HOST_ID_LEN);
    memcpy(out.nonce, c->server_nonce, RM_NONCE_LEN);
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &out);
    rc = w.failed ? -1
                  : rm_boot_send_reply(c->peer.sock.fd, RM_BOOT_HELLO_REPLY, 0, REMORA_OK, w.data,
                                       w.len);
    rm_wbuf_free(&w);
    c->state = why[0] ? CONN_MISFIT : s->token ? CONN_AUTH : CONN_CONNECT;
    return rc;
}

/* AUTH: the client's proof, and ours in return. */
static int boot_auth(rm_conn_t *c, const rm_boot_frame_t *f)
{
    remora_server_h s = c->server;
    uint8_t mac[RM_MAC_LEN];

    if (f->type != RM_BOOT_AUTH)
        return -1;
    if (f->len != RM_MAC_LEN || rm_auth_check(RM_AUTH_CLIENT_PROOF, s->token, s->token_len,
                                              c->server_nonce, c->client_nonce, f->payload) != 0) {
        rm_warn_peer("client %s failed authentication", c->peer_host);
        RM_SS_ADD(s, RM_SS_AUTH_FAILURES, 1);
        return conn_refuse(c, RM_BOOT_AUTH_REPLY, REMORA_ERR_AUTH);
    }
    rm_auth_proof(RM_AUTH_SERVER_PROOF, s->token, s->token_len, c->server_nonce,
                  c->client_nonce, mac);
    if (s->encrypt && rm_peer_seal_start(&c->peer, RM_SEAL_SERVER, s->token, s->token_len,
                                         c->server_nonce, c->client_nonce) != REMORA_OK)
        return conn_refuse(c, RM_BOOT_AUTH_REPLY, REMORA_ERR_NO_MEMORY);
    c->state = CONN_CONNECT;
    return rm_boot_send_reply(c->peer.sock.fd, RM_BOOT_AUTH_REPLY, 0, REMORA_OK, mac,
                              RM_MAC_LEN);
}

/* CONNECT: a worker address to connect to (ours in return), or a request for
 * a connection-manager port. Only here, after authentication, does UCX see
 * anything the client sent. */
/* A successful CONNECT_REPLY; sealed on an encrypted connection. */
static int connect_reply(rm_conn_t *c, unsigned flags, const void *payload, size_t len)
{
    uint8_t *sealed = NULL;
    int rc;

    if (c->peer.seal && rm_peer_seal_wrap(&c->peer, RM_BOOT_CONNECT_REPLY, flags, REMORA_OK,
                                          payload, len, &sealed, &len) != REMORA_OK)
        return -1;
    rc = rm_boot_send_reply(c->peer.sock.fd, RM_BOOT_CONNECT_REPLY, flags, REMORA_OK,
                            sealed ? sealed : payload, len);
    free(sealed);
    return rc;
}

/* The endpoint to a worker address whose interfaces answer, and the reply. */
static int conn_endpoint(rm_conn_t *c, const uint8_t *addr)
{
    remora_context_h ctx = c->server->ctx;
    remora_status_t st   = rm_peer_create_ep(&c->peer, addr);

    if (st != REMORA_OK) {
        rm_warn("could not set up a connection for client %s: UCX could not make an endpoint "
                "to its worker address (%s)", c->peer_host, remora_status_string(st));
        return conn_refuse(c, RM_BOOT_CONNECT_REPLY, REMORA_ERR_TRANSPORT);
    }
    if (connect_reply(c, 0, ctx->worker_addr, ctx->worker_addr_len) != 0)
        return -1;
    conn_ready(c);
    return 0;
}

/* CONN_REACH ends: every interface answered (st REMORA_OK), or one stayed
 * silent past the deadline. */
static void conn_reach_end(rm_conn_t *c, remora_status_t st)
{
    uint8_t *addr = c->reach_addr;
    char silent[64];

    if (st != REMORA_OK) {
        rm_reach_silent(c->reach, silent, sizeof(silent));
        rm_warn_peer("client %s: its worker address names %s, which did not answer within %u ms: "
                     "refused (its UCX would hold this worker for minutes)",
                     c->peer_host, silent, RM_REACH_LIMIT_MS);
    }
    c->reach_addr = NULL; /* ours now: conn_reach_stop would free it */
    conn_reach_stop(c);
    int rc = st == REMORA_OK ? conn_endpoint(c, addr) : conn_refuse(c, RM_BOOT_CONNECT_REPLY, st);
    free(addr);
    if (rc != 0)
        conn_kill(c);
}

static void conn_reach_cb(rm_watch_t *w, uint32_t events)
{
    rm_conn_t *c = rm_container_of(w, rm_conn_t, reach_watch);

    (void)events;
    if (rm_reach_step(c->reach))
        conn_reach_end(c, REMORA_OK);
}

static int boot_connect_addr(rm_conn_t *c, unsigned flags, const uint8_t *addr, size_t len)
{
    remora_context_h ctx = c->server->ctx;
    remora_status_t st;
    uint16_t port;

    /* From here the client's host may reach UCX's ports (gate.h), from any
     * of the interfaces its worker address names: read with bounds, before
     * the check below, which a connection-manager client's address skips. */
    if ((st = rm_peer_gate_open(&c->peer, addr, len)) != REMORA_OK)
        return conn_refuse(c, RM_BOOT_CONNECT_REPLY, st);
    if ((flags & RM_BOOT_CM) && conn_open_cm(c, &port) == 0) {
        uint8_t reply[RM_CM_REPLY_LEN] = {(uint8_t)port, (uint8_t)(port >> 8)};
        rm_auth_nonce(c->cm_ticket);
        memcpy(reply + 2, c->cm_ticket, RM_CM_TICKET_LEN);
        c->state = CONN_CM_WAIT;
        return connect_reply(c, RM_BOOT_CM, reply, sizeof(reply));
    }
    const char *why;

    if (!rm_boot_addr_plausible(ctx, addr, len, &why)) {
        rm_warn_peer("client %s sent a worker address this UCX cannot use: %s", c->peer_host, why);
        return conn_refuse(c, RM_BOOT_CONNECT_REPLY, REMORA_ERR_PROTOCOL);
    }
    /* Where UCX connects to those interfaces blocking this worker, only
     * once each has answered us (engine/reach.h). */
    if ((st = rm_peer_reach_start(&c->peer, addr, len, &c->reach)) != REMORA_OK) {
        rm_warn_peer("client %s: its worker address could not be probed: %s", c->peer_host,
                     remora_status_string(st));
        return conn_refuse(c, RM_BOOT_CONNECT_REPLY, st);
    }
    if (c->reach == NULL)
        return conn_endpoint(c, addr);
    c->reach_watch.fd = rm_reach_fd(c->reach);
    c->reach_watch.cb = conn_reach_cb;
    if ((c->reach_addr = malloc(len)) == NULL ||
        rm_engine_watch(ctx, &c->reach_watch, EPOLLIN) != REMORA_OK) {
        conn_reach_stop(c); /* unwatching what is not watched does nothing */
        return conn_refuse(c, RM_BOOT_CONNECT_REPLY, REMORA_ERR_IO);
    }
    memcpy(c->reach_addr, addr, len);
    c->reach_deadline = rm_now_ns() + (uint64_t)RM_REACH_LIMIT_MS * 1000000u;
    c->state          = CONN_REACH;
    return 0;
}

static int boot_connect(rm_conn_t *c, const rm_boot_frame_t *f)
{
    uint8_t *plain = NULL;
    size_t len     = f->len;
    int rc;

    if (f->type != RM_BOOT_CONNECT)
        return -1;
    /* Encrypted: the address is sealed under the session key (engine/seal.h). */
    if (c->peer.seal && rm_peer_seal_unwrap(&c->peer, f->type, f->flags, 0, f->payload, f->len,
                                            &plain, &len) != REMORA_OK) {
        rm_warn_peer("client %s sent a CONNECT that failed authentication", c->peer_host);
        return conn_refuse(c, RM_BOOT_CONNECT_REPLY, REMORA_ERR_PROTOCOL);
    }
    rc = boot_connect_addr(c, f->flags, plain ? plain : f->payload, len);
    free(plain);
    return rc;
}

/* One handshake frame, by state; -1 ends the connection. */
static int conn_boot_step(rm_conn_t *c, const rm_boot_frame_t *f)
{
    switch (c->state) {
    case CONN_HELLO:   return boot_hello(c, f);
    case CONN_MISFIT:
        return conn_refuse(c, f->type == RM_BOOT_AUTH ? RM_BOOT_AUTH_REPLY : RM_BOOT_CONNECT_REPLY,
                           REMORA_ERR_UNSUPPORTED);
    case CONN_AUTH:    return boot_auth(c, f);
    case CONN_CONNECT: return boot_connect(c, f);
    /* The client's endpoint exists and its heartbeats may start before UCX
     * tells us of its connection request. */
    case CONN_CM_WAIT:
    case CONN_CM_PROVE: return f->type == RM_BOOT_HEARTBEAT && f->len == 0 ? 0 : -1;
    default:           return -1; /* nothing is due from the client now */
    }
}

/* The bootstrap socket: the handshake, then heartbeats. */
static void conn_sock_cb(rm_watch_t *w, uint32_t events)
{
    rm_conn_t *c = rm_container_of(w, rm_conn_t, peer.sock);
    rm_boot_frame_t f;
    int r = 1;

    if (c->state == CONN_READY) {
        if (rm_peer_sock_read(&c->peer) != 0) {
            rm_info_peer("client %s went away", c->peer_host);
            conn_kill(c);
        }
        return;
    }
    /* Before AUTH, frames are small (HELLO, AUTH): a peer announcing 64 KiB
     * made every handshake buffer that much (65 MB for 1,000; review). */
    c->peer.rx.max = c->state < CONN_CONNECT ? RM_BOOT_PREAUTH_MAX : 0;
    if (rm_boot_rx_fill(&c->peer.rx, w->fd) != 0) {
        conn_kill(c);
        return;
    }
    while (c->state != CONN_READY && (r = rm_boot_rx_next(&c->peer.rx, &f)) == 0) {
        if (conn_boot_step(c, &f) != 0) {
            rm_info_peer("dropping connection from %s during its handshake", c->peer_host);
            conn_kill(c);
            return;
        }
    }
    if (r < 0) {
        rm_info_peer("dropping a connection from %s that is not a remora client", c->peer_host);
        conn_kill(c);
    }
}

/* Out of file descriptors: stop watching the listener (it would stay
 * readable, and the progress thread would spin on it) until the next tick. */
static void accept_pause(remora_server_h s, int err)
{
    if (s->accept_paused)
        return;
    rm_engine_unwatch(s->ctx, &s->listener);
    if (s->direct_port)
        rm_engine_unwatch(s->ctx, &s->direct);
    s->accept_paused = 1;
    if (rm_now_ns() - s->pause_logged_ns > 10ull * 1000000000u) {
        rm_warn("cannot accept connections: %s; pausing accept", strerror(err));
        s->pause_logged_ns = rm_now_ns();
    }
}

/*
 * The worker a new connection goes to: the one with the fewest connections,
 * by turns on a tie, so that clients use every worker's thread without
 * asking (s's lock held; the others' are taken in turn, after it). A
 * worker's own port (spread 0) keeps its connections.
 */
static remora_server_h pick_worker(remora_server_h s, int spread)
{
    unsigned n = s->nlanes + 1, start = s->next_worker++ % n, best_conns = UINT_MAX;
    remora_server_h best = s;

    for (unsigned i = 0; spread && i < n; i++) {
        unsigned k = (start + i) % n;
        remora_server_h w = k ? s->lane[k - 1] : s;
        if (w != s)
            rm_engine_lock(w->ctx);
        if (w->nconns < best_conns) {
            best_conns = w->nconns;
            best       = w;
        }
        if (w != s)
            rm_engine_unlock(w->ctx);
    }
    return best;
}

/*
 * A connection over a cap, refused at its accept: the answer its HELLO
 * would get (HELLO_REPLY/BUSY), sent unasked; a client reads it as that
 * reply. What it sent already is read first, so that the close is a FIN,
 * not a reset that could overtake the answer. The caller closes fd.
 */
static void refuse_over_cap(remora_server_h w, int fd, const char *host)
{
    remora_server_h s = w->main ? w->main : w; /* whose params set the caps */
    char drain[512];

    rm_warn_peer("refusing client %s: too many connections (at most %u, %u per address)", host,
                 s->max_conns, s->max_conns_per_host);
    RM_SS_ADD(w, RM_SS_CONNS_REFUSED, 1);
    for (int i = 0; i < 16 && recv(fd, drain, sizeof(drain), MSG_DONTWAIT) > 0; i++)
        ; /* a HELLO at most, not whatever a flood keeps sending */
    rm_boot_send_reply(fd, RM_BOOT_HELLO_REPLY, 0, REMORA_ERR_BUSY, NULL, 0);
    shutdown(fd, SHUT_WR);
}

/* A connection accepted by s, served by worker w (w's lock held); NULL if
 * refused or out of memory (the caller closes fd). */
static rm_conn_t *conn_new(remora_server_h w, int fd, const struct sockaddr_storage *ss)
{
    rm_conn_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    rm_format_addr((const struct sockaddr *)ss, c->peer_host, sizeof(c->peer_host));
    snprintf(c->peer_addr, sizeof(c->peer_addr), "%s", c->peer_host);
    *strrchr(c->peer_host, ':') = '\0'; /* the address, without the port */
    if (rm_conn_caps_take(w->caps, c->peer_host) != 0) { /* every worker's */
        refuse_over_cap(w, fd, c->peer_host);
        free(c);
        return NULL;
    }
    c->peer.ctx     = w->ctx;
    c->peer.ops     = &conn_ops;
    c->peer.sock.fd = fd;
    c->peer.sock.cb = conn_sock_cb;
    c->peer.failed  = 1; /* no endpoint yet */
    c->peer.fail_later = 1; /* a close inside a send would free what the sender walks */
    c->peer.sends_max  = RM_CONN_SENDS_MAX;
    c->server       = w;
    c->state        = CONN_HELLO;
    c->born_ns      = rm_now_ns();
    rm_auth_nonce(c->server_nonce);
    if (rm_engine_watch(w->ctx, &c->peer.sock, EPOLLIN | EPOLLRDHUP) != REMORA_OK) {
        rm_conn_caps_put(w->caps, c->peer_host);
        free(c);
        return NULL;
    }
    rm_list_push_back(&w->conns, &c->link);
    w->nconns++;
    c->id = atomic_fetch_add(&(w->main ? w->main : w)->next_conn_id, 1) + 1;
    RM_SS_ADD(w, RM_SS_CONNS_ACCEPTED, 1);
    atomic_store(&w->drained, 0);
    return c;
}

static void accept_all(remora_server_h s, rm_watch_t *w, int spread)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd;

    while ((fd = accept4(w->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        remora_server_h wk = pick_worker(s, spread);
        if (wk != s)
            rm_engine_lock(wk->ctx);
        rm_conn_t *c = conn_new(wk, fd, &ss);
        if (wk != s)
            rm_engine_unlock(wk->ctx);
        if (c == NULL)
            close(fd);
        len = sizeof(ss);
    }
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_pause(s, errno);
}

static void on_accept(rm_watch_t *w, uint32_t events)
{
    accept_all(rm_container_of(w, struct remora_server, listener), w, 1);
}

static void on_accept_direct(rm_watch_t *w, uint32_t events)
{
    accept_all(rm_container_of(w, struct remora_server, direct), w, 0);
}

/* Every tick: drop connections stuck in the handshake, free retired memory
 * whose grace has run out, resume a paused accept, and let queued ring
 * pushes past stalled ones. */
static void server_tick(rm_ticker_t *t)
{
    remora_server_h s = rm_container_of(t, struct remora_server, ticker);
    uint64_t now = rm_now_ns();
    rm_list_t *pos, *tmp;

    rm_list_for_each_safe(pos, tmp, &s->conns) {
        rm_conn_t *c = rm_container_of(pos, rm_conn_t, link);
        if (c->state > CONN_CM_WAIT)
            conn_close_cm_listener(c); /* its one client is in */
        if (c->state == CONN_REACH && now >= c->reach_deadline) {
            conn_reach_end(c, rm_reach_step(c->reach) ? REMORA_OK : REMORA_ERR_TIMED_OUT);
            continue; /* c may be gone */
        }
        if (c->state != CONN_READY && now - c->born_ns > RM_BOOT_TIMEOUT_NS) {
            rm_info_peer("dropping a connection from %s that did not finish its handshake",
                    c->peer_host);
            conn_kill(c);
        }
    }
    retired_sweep(s);
    cm_slots_sweep(s, 0);
    rm_server_ring_tick(s);
    if (s->accept_paused && rm_engine_watch(s->ctx, &s->listener, EPOLLIN) == REMORA_OK) {
        s->accept_paused = 0;
        if (s->direct_port && rm_engine_watch(s->ctx, &s->direct, EPOLLIN) != REMORA_OK)
            rm_warn("lanes to the first worker are not accepted any more");
    }
}

/* ------------------------------------------------------------ public API */

static remora_status_t start_listener(remora_server_h s, const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    remora_status_t st = rm_boot_listen(addr, &s->listener.fd);

    if (st != REMORA_OK)
        return st;
    s->listener.cb = on_accept;
    if (getsockname(s->listener.fd, (struct sockaddr *)&ss, &len) == 0)
        rm_format_addr((const struct sockaddr *)&ss, s->addr, sizeof(s->addr));
    else
        snprintf(s->addr, sizeof(s->addr), "%s", addr);
    s->ticker.fn = server_tick;
    rm_engine_add_ticker(s->ctx, &s->ticker);
    return REMORA_OK;
}

static remora_status_t watch_listener(remora_server_h s)
{
    rm_engine_lock(s->ctx);
    remora_status_t st = rm_engine_watch(s->ctx, &s->listener, EPOLLIN);
    rm_engine_unlock(s->ctx);
    if (st != REMORA_OK)
        s->accept_paused = 1; /* not watched: destroy must not unwatch it */
    return st;
}

/* With workers, a second listener on our host that keeps its connections
 * on the first worker: the lane that reaches it (handle_lanes). */
static remora_status_t start_direct(remora_server_h s)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char addr[sizeof(s->addr)];
    remora_status_t st;
    int fd;

    if ((st = rm_parse_addr(s->addr, &ss, &len)) != REMORA_OK)
        return st;
    ((struct sockaddr_in *)&ss)->sin_port = 0; /* same offset in sockaddr_in6 */
    rm_format_addr((const struct sockaddr *)&ss, addr, sizeof(addr));
    if ((st = rm_boot_listen(addr, &fd)) != REMORA_OK)
        return st;
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        close(fd);
        return REMORA_ERR_IO;
    }
    rm_engine_lock(s->ctx);
    s->direct.fd = fd;
    s->direct.cb = on_accept_direct;
    if ((st = rm_engine_watch(s->ctx, &s->direct, EPOLLIN)) == REMORA_OK)
        s->direct_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    rm_engine_unlock(s->ctx);
    if (st != REMORA_OK)
        close(fd);
    return st;
}

static remora_status_t copy_token(remora_server_h s, const remora_server_params_t *p)
{
    if (p == NULL || !(p->field_mask & REMORA_SERVER_FIELD_TOKEN))
        return REMORA_OK;
    if (p->token == NULL || p->token_len < REMORA_TOKEN_MIN || p->token_len > REMORA_TOKEN_MAX) {
        rm_error("a token must be %d to %d bytes long (this one has %zu)", REMORA_TOKEN_MIN,
                 REMORA_TOKEN_MAX, p->token ? p->token_len : 0);
        return REMORA_ERR_INVALID_PARAM;
    }
    if ((s->token = malloc(p->token_len)) == NULL)
        return REMORA_ERR_NO_MEMORY;
    memcpy(s->token, p->token, p->token_len);
    s->token_len = p->token_len;
    return REMORA_OK;
}

static void stop_lanes(remora_server_h s)
{
    rm_engine_lock(s->ctx); /* accept and ring commits stop looking at them */
    unsigned n = s->nlanes;
    s->nlanes  = 0;
    rm_engine_unlock(s->ctx);
    for (unsigned i = 0; i < n; i++) {
        remora_server_destroy(s->lane[i]);
        remora_context_destroy(s->lane_ctx[i]);
    }
}

static remora_status_t server_create(remora_context_h ctx, const remora_server_params_t *params,
                                     remora_server_h main, remora_server_h *server_p);

/* One more worker: a context of its own and a worker server on it,
 * listening on our host, serving our registry. */
static remora_status_t start_lane(remora_server_h s, const remora_server_params_t *params,
                                  unsigned i)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char addr[sizeof(s->addr)];
    remora_server_params_t lp = *params;
    remora_status_t st;

    if ((st = rm_parse_addr(s->addr, &ss, &len)) != REMORA_OK)
        return st;
    ((struct sockaddr_in *)&ss)->sin_port = 0; /* same offset in sockaddr_in6 */
    rm_format_addr((const struct sockaddr *)&ss, addr, sizeof(addr));
    lp.field_mask  = (params->field_mask & (REMORA_SERVER_FIELD_TOKEN | REMORA_SERVER_FIELD_MAX_CONNS |
                                            REMORA_SERVER_FIELD_ENCRYPT | REMORA_SERVER_FIELD_CONN_CB)) |
                     REMORA_SERVER_FIELD_LISTEN_ADDR;
    lp.listen_addr = addr;
    if ((st = rm_engine_lane_create(s->ctx, &s->lane_ctx[i])) != REMORA_OK)
        return st;
    if ((st = server_create(s->lane_ctx[i], &lp, s, &s->lane[i])) != REMORA_OK) {
        remora_context_destroy(s->lane_ctx[i]);
        return st;
    }
    len = sizeof(ss);
    if (getsockname(s->lane[i]->listener.fd, (struct sockaddr *)&ss, &len) != 0) {
        remora_server_destroy(s->lane[i]);
        remora_context_destroy(s->lane_ctx[i]);
        return REMORA_ERR_IO;
    }
    s->lane_port[i] = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    s->lane[i]->lane_no = i + 1;
    return REMORA_OK;
}

/* Workers when the params do not say: REMORA_WORKERS, else by the cores:
 * one on a small machine (there a second worker only takes the CPU the
 * first needs), else one per two cores up to 8: on 16 cores, 64 clients
 * together read 4.15x one alone with 8 workers, 2.4-2.9x with 4, their
 * own threads taking the rest of the cores (docs/performance.md). */
static unsigned default_workers(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned by_cores = cores <= 4 ? 1u : cores / 2 < RM_LANES_MAX ? (unsigned)(cores / 2)
                                                                   : RM_LANES_MAX;

    return (unsigned)rm_env_u64("REMORA_WORKERS", by_cores, 1, RM_LANES_MAX);
}

static remora_status_t start_lanes(remora_server_h s, const remora_server_params_t *params)
{
    unsigned lanes = params && (params->field_mask & REMORA_SERVER_FIELD_LANES) ? params->lanes
                                                                                : default_workers();
    remora_status_t st;

    if (lanes < 1 || lanes > RM_LANES_MAX)
        return REMORA_ERR_INVALID_PARAM;
    for (unsigned i = 0; i + 1 < lanes; i++) {
        if ((st = start_lane(s, params, i)) != REMORA_OK) {
            stop_lanes(s);
            return st;
        }
        rm_engine_lock(s->ctx); /* accept and ring commits read it */
        s->nlanes = i + 1;
        rm_engine_unlock(s->ctx);
    }
    if (s->nlanes && (st = start_direct(s)) != REMORA_OK) {
        stop_lanes(s);
        return st;
    }
    return REMORA_OK;
}

remora_status_t remora_server_create(remora_context_h ctx, const remora_server_params_t *params,
                                     remora_server_h *server_p)
{
    return server_create(ctx, params, NULL, server_p);
}

static remora_status_t server_create(remora_context_h ctx, const remora_server_params_t *params,
                                     remora_server_h main, remora_server_h *server_p)
{
    const char *addr = RM_DEFAULT_LISTEN;
    remora_server_h s;
    remora_status_t st;

    if (ctx == NULL || server_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (params && (params->field_mask & REMORA_SERVER_FIELD_LISTEN_ADDR) && params->listen_addr)
        addr = params->listen_addr;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    s->ctx            = ctx;
    s->main           = main;
    s->instance       = main ? main->instance : rm_auth_random_u64(); /* one server to clients */
    s->born_ns        = rm_now_ns();
    s->cm             = main ? main->cm : rm_ucx_cm_wanted(); /* one server to clients */
    if (params && (params->field_mask & REMORA_SERVER_FIELD_CONN_CB)) {
        s->conn_cb  = params->conn_cb;
        s->conn_arg = params->conn_arg;
    }
    s->max_conns      = RM_MAX_CONNS;
    s->max_conns_per_host = RM_MAX_CONNS_HOST;
    if (params && (params->field_mask & REMORA_SERVER_FIELD_MAX_CONNS)) {
        if (params->max_conns == 0 || params->max_conns_per_host == 0) {
            free(s);
            return REMORA_ERR_INVALID_PARAM;
        }
        s->max_conns          = params->max_conns;
        s->max_conns_per_host = params->max_conns_per_host;
    }
    rm_list_init(&s->conns);
    rm_list_init(&s->retired);
    rm_list_init(&s->cm_slots);
    rm_list_init(&s->waits);
    rm_list_init(&s->pushq);
    rm_list_init(&s->pushes);
    atomic_init(&s->drained, 1);
    if (main != NULL) {
        s->reg  = main->reg;
        s->caps = main->caps;
        rm_registry_ref(s->reg);
        rm_conn_caps_ref(s->caps);
    } else if ((s->reg = rm_registry_create()) == NULL ||
               (s->caps = rm_conn_caps_create(s->max_conns, s->max_conns_per_host)) == NULL) {
        st = REMORA_ERR_NO_MEMORY;
        goto err_free;
    }
    if ((s->stage = rm_stage_pool_create(RM_STAGE_POOLED, RM_STAGE_KEEP)) == NULL) {
        st = REMORA_ERR_NO_MEMORY;
        goto err_free;
    }
    if ((st = copy_token(s, params)) != REMORA_OK)
        goto err_free;
    if (params && (params->field_mask & REMORA_SERVER_FIELD_ENCRYPT) && params->encrypt) {
        if (s->token == NULL) {
            rm_error("encryption needs a token: its keys are derived from it");
            st = REMORA_ERR_INVALID_PARAM;
            goto err_free;
        }
        s->encrypt = 1;
    }
    rm_engine_lock(ctx);
    st = start_listener(s, addr);
    if (st == REMORA_OK && main != NULL)
        rm_server_ring_worker_start(s);
    if (st == REMORA_OK && main == NULL)
        rm_engine_serving_add(ctx, s->instance);
    rm_engine_unlock(ctx);
    if (st != REMORA_OK)
        goto err_free;
    /* Accept only once every worker is up: a client accepted earlier could
     * find the server half made (and its regions not yet exposed). */
    if ((main == NULL && (st = start_lanes(s, params)) != REMORA_OK) ||
        (st = watch_listener(s)) != REMORA_OK) {
        remora_server_destroy(s);
        return st;
    }
    *server_p = s;
    return REMORA_OK;

err_free:
    if (s->stage)
        rm_stage_pool_release(s->stage);
    rm_registry_unref(s->reg);
    rm_conn_caps_unref(s->caps);
    free(s->token);
    free(s);
    return st;
}

remora_status_t remora_server_address(remora_server_h s, char *buf, size_t len)
{
    if (s == NULL || buf == NULL || len <= strlen(s->addr))
        return REMORA_ERR_INVALID_PARAM;
    memcpy(buf, s->addr, strlen(s->addr) + 1);
    return REMORA_OK;
}

void remora_server_destroy(remora_server_h s)
{
    rm_list_t *pos, *tmp;

    if (s == NULL)
        return;
    stop_lanes(s);
    rm_engine_lock(s->ctx);
    s->destroying = 1;
    if (s->main != NULL)
        rm_server_ring_worker_stop(s);
    else
        rm_engine_serving_remove(s->ctx, s->instance);
    rm_engine_remove_ticker(s->ctx, &s->ticker);
    if (!s->accept_paused) {
        rm_engine_unwatch(s->ctx, &s->listener);
        if (s->direct_port)
            rm_engine_unwatch(s->ctx, &s->direct);
    }
    close(s->listener.fd);
    if (s->direct_port)
        close(s->direct.fd);
    rm_list_for_each_safe(pos, tmp, &s->conns)
        conn_kill(rm_container_of(pos, rm_conn_t, link));
    rm_engine_unlock(s->ctx);

    /* Forced closes cancel what was in flight; wait for those callbacks. */
    if (rm_engine_wait(s->ctx, &s->drained, rm_deadline_ns(RM_DESTROY_WAIT_MS)) != REMORA_OK)
        rm_warn("server destroyed with %u connection(s) still completing; leaking them",
                s->nconns);

    rm_engine_lock(s->ctx);
    cm_slots_sweep(s, 1);
    if (s->main == NULL) { /* the table is ours; worker servers are gone by now */
        rm_registry_lock(s->reg);
        rm_list_for_each_safe(pos, tmp, &s->reg->regions) {
            rm_region_t *r = rm_container_of(pos, rm_region_t, link);
            rm_list_del(&r->link);
            rm_server_ring_region_gone(s, r);
            rm_server_signals_region_gone(s, r);
            rm_mem_unref(r->mem);
            free(r);
        }
        rm_registry_unlock(s->reg);
    }
    rm_list_for_each_safe(pos, tmp, &s->retired) {
        rm_retired_t *t = rm_container_of(pos, rm_retired_t, link);
        rm_mem_unref(t->mem);
        free(t);
    }
    rm_stage_pool_release(s->stage); /* buffers still out keep it alive */
    rm_engine_unlock(s->ctx);
    /* Connection callbacks already queued run before we return (not from
     * one of them: the progress thread would be waiting for itself). */
    if (!pthread_equal(pthread_self(), s->ctx->thread))
        for (int i = 0; i < RM_DESTROY_WAIT_MS && atomic_load(&s->events_pending); i++)
            usleep(1000);
    if (atomic_load(&s->events_pending))
        rm_warn("server destroyed with connection callbacks still queued; leaking it");
    else if (s->nconns == 0) { /* else late callbacks still point here */
        rm_registry_unref(s->reg);
        rm_conn_caps_unref(s->caps);
        free(s->token);
        free(s);
    }
}

/* Resolve params against mem: window and flags. */
static remora_status_t region_window(remora_mem_h mem, const remora_region_params_t *p,
                                     unsigned default_flags, size_t *off_p, size_t *len_p,
                                     unsigned *flags_p)
{
    size_t off = 0, len;
    unsigned flags = default_flags;

    if (p && (p->field_mask & REMORA_REGION_FIELD_OFFSET))
        off = p->offset;
    if (off >= mem->length)
        return REMORA_ERR_OUT_OF_RANGE;
    len = mem->length - off;
    if (p && (p->field_mask & REMORA_REGION_FIELD_LENGTH)) {
        if (p->length == 0 || p->length > len)
            return REMORA_ERR_OUT_OF_RANGE;
        len = p->length;
    }
    if (p && (p->field_mask & REMORA_REGION_FIELD_FLAGS)) {
        if (p->flags & ~(unsigned)REMORA_REGION_WRITABLE)
            return REMORA_ERR_INVALID_PARAM;
        flags = p->flags;
    }
    *off_p   = off;
    *len_p   = len;
    *flags_p = flags;
    return REMORA_OK;
}

remora_status_t rm_server_region_add(remora_server_h s, const char *name, remora_mem_h mem,
                                     size_t offset, size_t length, unsigned flags,
                                     const rm_region_role_t *role)
{
    rm_region_t *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return REMORA_ERR_NO_MEMORY;
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->mem        = mem;
    r->offset     = offset;
    r->length     = length;
    r->flags      = flags;
    if (role != NULL) {
        r->ring      = role->ring;
        r->ring_data = role->ring_data;
        r->signals   = role->signals;
    }
    rm_engine_lock(s->ctx);
    rm_registry_lock(s->reg);
    remora_status_t st = region_by_name(s, name) != NULL ? REMORA_ERR_EXISTS : region_seal(mem, flags);
    if (st == REMORA_OK) {
        rm_mem_ref(mem);
        rm_registry_insert(s->reg, r); /* served by every worker from here on */
    }
    rm_registry_unlock(s->reg);
    rm_engine_unlock(s->ctx);
    if (st != REMORA_OK)
        free(r);
    return st;
}

/* GPU memory a client may get staged: each worker's copy stream and small
 * staging buffers are made now, where no stream can be waiting on a
 * transfer, not on a transfer's path (mem/copyq.h says why). */
static void staging_prepare(remora_server_h s, const remora_mem_h mem)
{
    if (mem->type != REMORA_MEM_CUDA)
        return;
    for (unsigned i = 0; i <= s->nlanes; i++) {
        remora_server_h w = i ? s->lane[i - 1] : s;
        rm_engine_lock(w->ctx);
        if (rm_engine_copy_prepare(w->ctx, mem->device) != REMORA_OK)
            rm_info("GPU %d: staged copies stay synchronous on a worker", mem->device);
        rm_stage_pool_prepare(w->stage);
        rm_engine_unlock(w->ctx);
    }
}

remora_status_t remora_server_expose(remora_server_h s, const char *name, remora_mem_h mem,
                                     const remora_region_params_t *params)
{
    size_t off, len;
    unsigned flags;
    remora_status_t st;

    if (s == NULL || mem == NULL || !rm_name_valid(name) || mem->ctx != s->ctx)
        return REMORA_ERR_INVALID_PARAM;
    if ((st = region_window(mem, params, 0, &off, &len, &flags)) != REMORA_OK)
        return st;
    staging_prepare(s, mem);
    return rm_server_region_add(s, name, mem, off, len, flags, NULL);
}

remora_status_t remora_server_replace(remora_server_h s, const char *name, remora_mem_h mem,
                                      const remora_region_params_t *params)
{
    rm_region_t *r;
    remora_status_t st;
    size_t off, len;
    unsigned flags;
    rm_change_t ch = {.kind = RM_EVENT_CHANGED};

    if (s == NULL || mem == NULL || name == NULL || mem->ctx != s->ctx)
        return REMORA_ERR_INVALID_PARAM;
    staging_prepare(s, mem);
    rm_engine_lock(s->ctx);
    rm_registry_lock(s->reg);
    if ((r = region_by_name(s, name)) == NULL) {
        st = REMORA_ERR_NOT_FOUND;
        goto out;
    }
    if (r->ring || r->ring_data) { /* a ring's memory is the ring: not replaceable */
        st = REMORA_ERR_INVALID_PARAM;
        goto out;
    }
    if ((st = region_window(mem, params, r->flags, &off, &len, &flags)) != REMORA_OK ||
        (st = region_seal(mem, flags)) != REMORA_OK)
        goto out;
    /* One change, in the one table: every worker serves the new memory from here on. */
    ch.old = r->mem; /* the registry's reference, dropped by change_tell_workers */
    rm_mem_ref(mem);
    r->mem    = mem;
    r->offset = off;
    r->length = len;
    r->flags  = flags;
    r->generation++;
    ch.id         = r->id;
    ch.name       = r->name;
    ch.generation = r->generation;
    ch.length     = r->length;
    ch.epoch      = rm_registry_bump(s->reg);
    rm_registry_unlock(s->reg);
    change_tell(s, &ch);
    change_tell_workers(s, &ch); /* r stays: only the first worker's lock frees it */
    rm_engine_unlock(s->ctx);
    return REMORA_OK;
out:
    rm_registry_unlock(s->reg);
    rm_engine_unlock(s->ctx);
    return st;
}

/* Take a region away (lock held): clients hear REMOVED, memory is retired. */
remora_status_t rm_server_region_drop(remora_server_h s, const char *name)
{
    rm_region_t *r;
    rm_change_t ch = {.kind = RM_EVENT_REMOVED};

    rm_registry_lock(s->reg);
    if ((r = region_by_name(s, name)) == NULL) {
        rm_registry_unlock(s->reg);
        return REMORA_ERR_NOT_FOUND;
    }
    rm_list_del(&r->link); /* no worker finds it from here on */
    ch.epoch = rm_registry_bump(s->reg);
    rm_registry_unlock(s->reg);
    ch.id         = r->id;
    ch.name       = r->name;
    ch.generation = r->generation;
    ch.length     = r->length;
    ch.old        = r->mem;
    rm_server_ring_region_gone(s, r);
    rm_server_signals_region_gone(s, r);
    change_tell(s, &ch);
    change_tell_workers(s, &ch);
    free(r);
    return REMORA_OK;
}

remora_status_t remora_server_unexpose(remora_server_h s, const char *name)
{
    remora_status_t st;

    if (s == NULL || name == NULL)
        return REMORA_ERR_INVALID_PARAM;
    rm_engine_lock(s->ctx);
    rm_region_t *r = region_by_name(s, name);
    /* A GPU ring's elements go when the ring goes, not on their own. */
    st = r && r->ring_data ? REMORA_ERR_INVALID_PARAM : rm_server_region_drop(s, name);
    rm_engine_unlock(s->ctx);
    return st;
}

/* Connections that have not acknowledged epoch yet; with drop, close them. */
static unsigned conns_behind(remora_server_h s, uint64_t epoch, int drop)
{
    rm_list_t *pos, *tmp;
    unsigned n = 0;

    rm_list_for_each_safe(pos, tmp, &s->conns) {
        rm_conn_t *c = rm_container_of(pos, rm_conn_t, link);
        if (c->state != CONN_READY || c->acked_epoch >= epoch)
            continue;
        n++;
        if (drop) {
            rm_warn("client %s did not follow a region change in time; disconnecting it",
                    c->peer_host);
            conn_kill(c);
        }
    }
    return n;
}

/* One server (a lane's or the main one): wait, then drop the laggards. */
static unsigned sync_one(remora_server_h s, uint64_t deadline)
{
    rm_engine_lock(s->ctx);
    uint64_t epoch = rm_registry_epoch(s->reg);
    while (conns_behind(s, epoch, 0) > 0 && rm_now_ns() < deadline) {
        atomic_store(&s->acked, 0);
        rm_engine_unlock(s->ctx);
        uint64_t step = rm_now_ns() + 50000000u; /* look again at least every 50 ms */
        rm_engine_wait(s->ctx, &s->acked, step < deadline ? step : deadline);
        rm_engine_lock(s->ctx);
    }
    unsigned dropped = conns_behind(s, epoch, 1);
    rm_engine_unlock(s->ctx);
    return dropped;
}

remora_status_t remora_server_sync_clients(remora_server_h s, int timeout_ms, unsigned *dropped_p)
{
    uint64_t deadline;
    unsigned dropped;

    if (s == NULL || timeout_ms < 0)
        return REMORA_ERR_INVALID_PARAM;
    deadline = rm_deadline_ns(timeout_ms);
    dropped  = sync_one(s, deadline);
    for (unsigned i = 0; i < s->nlanes; i++)
        dropped += sync_one(s->lane[i], deadline);
    if (dropped_p)
        *dropped_p = dropped;
    return dropped ? REMORA_ERR_TIMED_OUT : REMORA_OK;
}
