/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Reads and writes: requests split into chunk ops on one of these paths.
 *
 * - AM:  READ/WRITE messages; the payload moves by UCX rendezvous, straight
 *        into the caller's buffer (read) or out of it (write).
 * - STAGING: AM for GPU memory the loaded UCX cannot reach. The server
 *        copies between the GPU region and pinned buffers; here, a GPU
 *        buffer's chunk goes through a pinned buffer of its own. Chunks are
 *        pipelined (REMORA_WINDOW in flight): while one is copied to or from
 *        the GPU, others are on the wire.
 * - RMA: ucp_get_nbx/ucp_put_nbx with the region's remote key; a write ends
 *        with a flush so it is visible at the server when it completes.
 * - MAP: same host; a memcpy from or to the mapped server memory, done on
 *        the calling thread without the lock (a CUDA copy for a GPU buffer).
 * - IPC: same host, GPU region; the server's allocation opened through its
 *        CUDA IPC handle (once per region entry) and copied device-to-device
 *        (or to/from host) on the calling thread.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/seal.h"
#include "mem/cuda.h"
#include "mem/stage.h"
#include "remote/client.h"
#include "util/log.h"
#include "util/time.h"

#define RM_ABORT_WAIT_MS 2000
/* The least a lane is given of a split request: below this, one message
 * costs about as much as the bytes. */
#define RM_LANE_PART_MIN (512u << 10)

/* A chunk of a request: a data op on the client's pending list. Its reply
 * and its end come back through op.on_reply and op.on_done. */
typedef struct {
    rm_op_t          op;     /* first: rm_client_op_new allocates the chunk */
    remora_request_h req;
    char            *buf;    /* the caller's bytes of this chunk */
    size_t           len;
    uint64_t         offset; /* in the region */
    void            *stage;  /* staged chunk: the pinned buffer UCX uses instead of buf */
    rm_copy_t        copy;   /* a staged write's buf -> stage, before the send */
} rm_chunk_t;

/* A staged read's chunk landed in its pinned buffer, which goes on to the
 * caller's GPU buffer on the context's CUDA stream; the chunk's op is gone
 * by then, so this carries the rest. */
typedef struct {
    rm_copy_t        copy;
    remora_request_h req;
    void            *stage;
    size_t           len;
} rm_landing_t;

static rm_chunk_t *chunk_of(rm_op_t *op) { return rm_container_of(op, rm_chunk_t, op); }

/* Where UCX moves the chunk's bytes. */
static void *chunk_wire_buf(const rm_chunk_t *ch) { return ch->stage ? ch->stage : ch->buf; }

/* A part of a split request finished (any thread, any lock). */
static void part_done(remora_request_h whole, remora_status_t st)
{
    int ok = REMORA_OK;

    if (st != REMORA_OK)
        atomic_compare_exchange_strong(&whole->parts_status, &ok, (int)st);
    if (atomic_fetch_sub(&whole->parts_left, 1) == 1) {
        whole->status = (remora_status_t)atomic_load(&whole->parts_status);
        rm_engine_complete(whole->ctx, &whole->done);
    }
}

static void request_complete(remora_request_h req)
{
    remora_request_h whole = req->whole;
    remora_status_t st     = req->status;

    rm_client_region_put(req->client, req->region);
    req->region = NULL; /* maybe freed: rm_request_region_id reads region_id */
    rm_client_reg_put(req->reg);
    if (req->bulk)
        rm_engine_bulk_add(req->ctx, -1);
    rm_engine_complete(req->ctx, &req->done);
    if (whole) /* last: the whole may be freed once it hears from every part */
        part_done(whole, st);
}

/* ------------------------------------------------------------ UCX callbacks */

/* A UCX operation of an op called back. */
static void op_ucx_done(rm_op_t *op, ucs_status_t status)
{
    op->ucx_busy--;
    if (status != UCS_OK && op->status == REMORA_OK)
        op->status = op->client->disconnected ? op->client->disc_status
                                              : rm_status_from_ucs(status);
    rm_client_op_finish(op);
}

static void send_done_cb(void *arg, ucs_status_t status) { op_ucx_done(arg, status); }

static void rma_cb(void *request, ucs_status_t status, void *user_data)
{
    op_ucx_done(user_data, status);
    ucp_request_free(request);
}

static void recv_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    op_ucx_done(user_data, status);
    ucp_request_free(request);
}

/* A rendezvous payload UCX moved into GPU memory itself. */
static void recv_gpu_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    rm_engine_gpu_ucx_add(((rm_op_t *)user_data)->client->ctx, -1);
    recv_cb(request, status, length, user_data);
}

/* An encrypted read's payload landed (in the caller's buffer or the staging
 * buffer): decrypt it there, in place. reply_hdr holds its header. */
static void sealed_landed(rm_op_t *op, ucs_status_t status)
{
    rm_chunk_t *ch = chunk_of(op);

    if (status == UCS_OK) {
        remora_status_t st = rm_peer_seal_open(&op->client->peer, &op->reply_hdr,
                                               chunk_wire_buf(ch), ch->len);
        if (st != REMORA_OK && op->status == REMORA_OK)
            op->status = st;
    }
}

static void recv_sealed_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
    sealed_landed(user_data, status);
    op_ucx_done(user_data, status);
    ucp_request_free(request);
}

/* Account for the result of a UCX call that may complete at once. */
static void op_track(rm_op_t *op, ucs_status_ptr_t ret)
{
    if (UCS_PTR_IS_PTR(ret))
        return; /* the callback will run */
    op_ucx_done(op, UCS_PTR_STATUS(ret));
}

/* ------------------------------------------------------------ chunks */

static void chunk_am(rm_chunk_t *ch, remora_request_h req)
{
    remora_client_h c = req->client;
    rm_op_t *op = &ch->op;
    const rm_rregion_t *r = req->region;
    int gpu_buf = ch->stage == NULL && req->gpu_buf; /* UCX moves the caller's GPU buffer */
    rm_hdr_t hdr = {.type = req->write ? RM_MSG_WRITE : RM_MSG_READ, .req_id = op->req_id,
                    .region_id = r->id, .offset = ch->offset, .length = ch->len,
                    .kind = (req->path == REMORA_PATH_STAGING ? RM_RW_STAGED : 0) |
                            (gpu_buf ? RM_RW_GPU_BUF : 0)};
    rm_send_params_t sp = {0};
    remora_status_t st;

    if (req->write) {
        sp.body     = chunk_wire_buf(ch);
        sp.body_len = ch->len;
        sp.cuda     = gpu_buf;
        sp.to_gpu   = req->path == REMORA_PATH_AM && r->mem_type == REMORA_MEM_CUDA &&
                      (r->flags & RM_REGION_WIRE_UCX);
        sp.memh     = sp.cuda && req->reg ? req->reg->memh : NULL;
        sp.done     = send_done_cb;
        sp.arg      = op;
        sp.bulk     = 1;
        op->ucx_busy++;
    }
    /* Held across the send: a send that fails the connection on the spot
     * (client_fail finishes every pending op) must not free op under us. */
    op->ucx_busy++;
    st = rm_peer_send(&c->peer, RM_AM_ID_TO_SERVER, &hdr, &sp);
    op->ucx_busy--;
    if (st != REMORA_OK) {
        if (req->write)
            op->ucx_busy--; /* done will not run */
        if (!op->replied) {
            op->status  = st;
            op->replied = 1;
        }
    }
    rm_client_op_finish(op); /* finished if it failed, here or in client_fail */
}

static void chunk_rma(rm_chunk_t *ch, remora_request_h req)
{
    remora_client_h c = req->client;
    rm_op_t *op       = &ch->op;
    uint64_t raddr    = req->region->remote_addr + ch->offset;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = rma_cb, .user_data = op};
    ucs_status_ptr_t ret;

    if (req->gpu_buf) { /* not left to UCX's detection (engine.c: memtype cache) */
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    op->replied = 1; /* one-sided: the UCX callback is the whole answer */
    op->ucx_busy++;
    if (req->write)
        ret = ucp_put_nbx(c->peer.ep, ch->buf, ch->len, raddr, req->region->rkey, &p);
    else
        ret = ucp_get_nbx(c->peer.ep, ch->buf, ch->len, raddr, req->region->rkey, &p);
    op_track(op, ret);
}

/* A staged write's bytes are in its pinned buffer: send them, unless the
 * connection failed meanwhile (then the op has its answer already). */
static void chunk_staged(rm_copy_t *copy, remora_status_t st)
{
    rm_chunk_t *ch = rm_container_of(copy, rm_chunk_t, copy);
    rm_op_t *op    = &ch->op;

    op->ucx_busy--;
    if (st == REMORA_OK && !op->replied) {
        chunk_am(ch, ch->req);
        return;
    }
    if (!op->replied) {
        op->status  = st;
        op->replied = 1;
    }
    rm_client_op_finish(op);
}

/*
 * A GPU buffer's chunk: a pinned buffer stands in for it. A write fills it
 * first, on the context's CUDA stream (chunk_staged sends it):
 * REMORA_INPROGRESS. REMORA_OK: ready to go (a read's, or a write copied
 * synchronously). On an error the op has finished.
 */
static remora_status_t stage_chunk(rm_chunk_t *ch, remora_request_h req)
{
    rm_op_t *op        = &ch->op;
    remora_status_t st = REMORA_ERR_NO_MEMORY;

    if ((ch->stage = rm_stage_get(req->client->stage, ch->len)) != NULL)
        st = req->write ? rm_engine_copy(req->ctx, &ch->copy, ch->stage, ch->buf, ch->len,
                                         chunk_staged)
                        : REMORA_OK;
    if (st == REMORA_INPROGRESS) {
        op->ucx_busy++; /* until chunk_staged: a failing connection must not finish it */
        return st;
    }
    if (st != REMORA_OK) {
        op->status  = st;
        op->replied = 1;
        rm_client_op_finish(op);
    }
    return st;
}

static void chunk_done(rm_op_t *op);
static ucs_status_t on_reply(rm_op_t *op, const rm_hdr_t *hdr, void *body, size_t len,
                             const ucp_am_recv_param_t *param);

/* A chunk of req's (lock held): its reply and its end come back here. */
static rm_chunk_t *chunk_new(remora_request_h req, uint8_t reply_type)
{
    rm_op_t *op = rm_client_op_new(req->client, reply_type, sizeof(rm_chunk_t));

    if (op == NULL)
        return NULL;
    op->on_reply = on_reply;
    op->on_done  = chunk_done;
    chunk_of(op)->req = req;
    return chunk_of(op);
}

static void issue_chunk(remora_request_h req)
{
    size_t n = req->length - req->issued;
    int am   = req->path == REMORA_PATH_AM || req->path == REMORA_PATH_STAGING;
    rm_chunk_t *ch;

    if (n > req->chunk)
        n = req->chunk;
    ch = chunk_new(req, !am ? 0 : req->write ? RM_MSG_WRITE_REPLY : RM_MSG_READ_REPLY);
    if (ch == NULL) {
        if (req->status == REMORA_OK)
            req->status = REMORA_ERR_NO_MEMORY;
        return;
    }
    ch->buf    = req->buf + req->issued;
    ch->len    = n;
    ch->offset = req->offset + req->issued;
    req->issued += n;
    req->inflight++;
    if (req->dev_buf && stage_chunk(ch, req) != REMORA_OK)
        return; /* failed, or a write being staged (chunk_staged sends it) */
    if (am)
        chunk_am(ch, req);
    else
        chunk_rma(ch, req);
}

/* Puts are complete locally when their callback runs; the flush makes them
 * complete at the server too. */
static void issue_flush(remora_request_h req)
{
    remora_client_h c = req->client;
    rm_chunk_t *ch    = chunk_new(req, 0);
    rm_op_t *op       = ch ? &ch->op : NULL;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = rma_cb, .user_data = op};

    req->flushed = 1;
    if (op == NULL) {
        req->status = REMORA_ERR_NO_MEMORY;
        request_complete(req);
        return;
    }
    op->replied = 1;
    op->ucx_busy++;
    req->inflight++;
    op_track(op, ucp_ep_flush_nbx(c->peer.ep, &p));
}

/* The connection req started on failed, or was replaced by a reconnect (its
 * region ids mean nothing there): req fails, and issues nothing more. */
static void check_link(remora_request_h req)
{
    remora_client_h c = req->client;

    if (req->status != REMORA_OK)
        return;
    if (c->disconnected)
        req->status = c->disc_status;
    else if (c->conn_gen != req->conn_gen)
        req->status = REMORA_ERR_DISCONNECTED;
}

/*
 * Chunks may end inside issue_chunk (a send that fails at once, an RMA that
 * completes at once), so chunk_end runs nested in this loop. `issuing` makes
 * the nested ones only count: the loop goes on issuing (no recursion per
 * chunk), and only the outermost frame ends the request (request_try_end),
 * exactly once, touching nothing of req after.
 */
static void issue_more(remora_request_h req)
{
    req->issuing = 1;
    check_link(req);
    while (req->status == REMORA_OK && req->issued < req->length &&
           req->inflight < req->window) {
        issue_chunk(req);
        check_link(req);
    }
    req->issuing = 0;
}

/* Nothing in flight: flush a write's puts, or complete. req may be freed on
 * return. */
static void request_try_end(remora_request_h req)
{
    if (req->inflight)
        return;
    if (req->status == REMORA_OK && req->write && req->path == REMORA_PATH_RMA && !req->flushed)
        issue_flush(req); /* ends in chunk_end */
    else
        request_complete(req);
}

/* A chunk of req's is over, with status st: issue more, or end the request. */
static void chunk_end(remora_request_h req, remora_status_t st)
{
    req->inflight--;
    if (st != REMORA_OK && req->status == REMORA_OK)
        req->status = st;
    if (req->issuing)
        return; /* ended inside issue_chunk: the loop above decides */
    issue_more(req);
    request_try_end(req);
}

static void chunk_landed(rm_copy_t *copy, remora_status_t st)
{
    rm_landing_t *l = rm_container_of(copy, rm_landing_t, copy);

    rm_stage_put(l->req->client->stage, l->stage, l->len);
    chunk_end(l->req, st);
    free(l);
}

/* An op of a request finished (its reply is in and UCX is done with it). */
static void chunk_done(rm_op_t *op)
{
    rm_chunk_t *ch       = chunk_of(op);
    remora_request_h req = ch->req;
    remora_status_t st   = op->status;

    if (ch->stage && !req->write && st == REMORA_OK) { /* on to the GPU */
        rm_landing_t *l = malloc(sizeof(*l));
        if (l == NULL) { /* as good, only slower */
            st = rm_cuda_copy(ch->buf, ch->stage, ch->len);
        } else {
            *l = (rm_landing_t){.req = req, .stage = ch->stage, .len = ch->len};
            st = rm_engine_copy(req->ctx, &l->copy, ch->buf, ch->stage, ch->len, chunk_landed);
            if (st == REMORA_INPROGRESS)
                return;
            free(l);
        }
    }
    if (ch->stage)
        rm_stage_put(req->client->stage, ch->stage, ch->len);
    chunk_end(req, st);
}

/* A reply for a data op arrived. */
static ucs_status_t on_reply(rm_op_t *op, const rm_hdr_t *hdr, void *body, size_t len,
                             const ucp_am_recv_param_t *param)
{
    remora_client_h c = op->client;
    rm_chunk_t *ch     = chunk_of(op);
    remora_status_t st = (remora_status_t)hdr->status;

    if (st > 0 || st < REMORA_ERR_VERSION || (hdr->type == RM_MSG_ERROR && st == REMORA_OK))
        st = REMORA_ERR_PROTOCOL;
    if (st == REMORA_OK && hdr->type == RM_MSG_READ_REPLY) {
        if (len != ch->len) {
            rm_warn("read reply of %zu bytes for a %zu-byte request", len, ch->len);
            st = REMORA_ERR_PROTOCOL; /* returning drops a rendezvous payload */
        } else if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
            ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                     UCP_OP_ATTR_FIELD_USER_DATA,
                                     .cb.recv_am = recv_cb, .user_data = op};
            if (c->peer.seal) {
                op->reply_hdr = *hdr;
                p.cb.recv_am  = recv_sealed_cb;
            } else if (ch->stage == NULL && ch->req->gpu_buf) {
                p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
                p.memory_type = UCS_MEMORY_TYPE_CUDA;
                p.cb.recv_am  = recv_gpu_cb;
                if (ch->req->reg) {
                    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
                    p.memh = ch->req->reg->memh;
                }
            }
            op->ucx_busy++;
            op->replied = 1;
            ucs_status_ptr_t ret = rm_engine_am_recv_data(c->ctx, body, chunk_wire_buf(ch),
                                                          len, &p);
            if (c->peer.seal && !UCS_PTR_IS_PTR(ret)) /* landed at once: no callback */
                sealed_landed(op, UCS_PTR_STATUS(ret));
            op_track(op, ret);
            return UCS_OK;
        } else if (ch->stage == NULL && ch->req->gpu_buf && len) {
            /* eager reply into a GPU buffer UCX took (not staged): a CUDA copy */
            if (rm_cuda_copy(ch->buf, body, len) != REMORA_OK)
                st = REMORA_ERR_IO;
        } else {
            memcpy(chunk_wire_buf(ch), body, len);
        }
    }
    if (op->status == REMORA_OK)
        op->status = st;
    op->replied = 1;
    rm_client_op_finish(op);
    return UCS_OK;
}

/* ------------------------------------------------------------ requests */

static remora_status_t check_request(const rm_rregion_t *r, uint64_t offset, size_t length,
                                     int write)
{
    if (offset > r->size || length > r->size - offset)
        return REMORA_ERR_OUT_OF_RANGE;
    if (write && !(r->access & REMORA_ACCESS_WRITE))
        return REMORA_ERR_READ_ONLY;
    if (r->path == REMORA_PATH_AUTO) /* a forced path this region cannot take */
        return REMORA_ERR_UNSUPPORTED;
    return REMORA_OK;
}

/* Same host: copy on the calling thread; the region's mapping (or IPC
 * handle) stays while we use it, since the request holds the entry. */
static void run_local(remora_request_h req, char *remote, int cuda)
{
    char *dst = req->write ? remote : req->buf, *src = req->write ? req->buf : remote;

    rm_engine_unlock(req->ctx);
    if (cuda)
        req->status = rm_cuda_copy(dst, src, req->length);
    else
        memcpy(dst, src, req->length);
    rm_engine_lock(req->ctx);
    request_complete(req);
}

/* What the caller's buffer is: *gpu_p for GPU memory, *dev_p when UCX
 * cannot reach it (then it is staged). */
static remora_status_t classify_buffer(remora_client_h c, const void *buf, int *gpu_p,
                                       int *dev_p, int *device_p)
{
    rm_ptr_kind_t kind = RM_PTR_HOST;
    int device = -1;

    *dev_p = *gpu_p = 0;
    *device_p = -1;
    if (buf == NULL || !rm_cuda_in_process())
        return REMORA_OK; /* without the driver loaded, no pointer is GPU memory */
    if (rm_cuda_ptr_kind(buf, &kind, &device) != REMORA_OK)
        return REMORA_OK;
    if (kind == RM_PTR_MANAGED) {
        rm_info("managed (unified) memory buffers are not supported");
        return REMORA_ERR_UNSUPPORTED;
    }
    *gpu_p = kind == RM_PTR_DEVICE;
    *dev_p = *gpu_p && !c->ucx_cuda;
    *device_p = *gpu_p ? device : -1;
    return REMORA_OK;
}

static remora_status_t request_start(remora_client_h c, const char *name, uint64_t offset,
                                     void *buf, size_t length, int write,
                                     remora_request_h whole, uint64_t deadline,
                                     remora_request_h *req_p);

/* A request's fields every path sets; NULL when out of memory. */
static remora_request_h request_new(remora_client_h c, void *buf, uint64_t offset, size_t length,
                                    int write)
{
    remora_request_h req = calloc(1, sizeof(*req));

    if (req != NULL) {
        req->client     = c;
        req->ctx        = c->ctx;
        req->timeout_ms = c->timeout_ms;
        req->write      = write;
        req->buf        = buf;
        req->offset     = offset;
        req->length     = length;
        req->chunk      = c->chunk_size;
        req->window     = c->window;
    }
    return req;
}

/*
 * Split a request across this connection and its lanes (endpoints to the
 * server's other workers): up to one part per lane, none under
 * RM_LANE_PART_MIN, starting one lane further on each time so that requests
 * smaller than two parts take turns. Every part uses the region as this
 * client's one cache has it (r, copied here under the lock): the server's
 * workers share one region table, so its id names the same region through
 * each of them. Called with the lock held; returns without it, after which
 * r may be freed by a region event (no reference is taken). The parts
 * complete the whole through one counter (part_done); a part whose lane
 * fails finishes with that lane's error, so the whole fails, never hangs.
 */
static remora_status_t split_start(remora_client_h c, const rm_rregion_t *r, uint64_t offset,
                                   char *buf, size_t length, int write,
                                   uint64_t deadline, remora_request_h *req_p)
{
    unsigned lanes = c->nlanes + 1, parts = (unsigned)(length / RM_LANE_PART_MIN);
    unsigned first = atomic_fetch_add(&c->lane_next, 1);
    remora_request_h req = request_new(c, buf, offset, length, write);

    if (req == NULL) {
        rm_engine_unlock(c->ctx);
        return REMORA_ERR_NO_MEMORY;
    }
    /* Only what the active-message path needs: no key, mapping or handle. */
    rm_list_init(&req->view.link);
    req->view.id         = r->id;
    req->region_id       = r->id;
    req->view.size       = r->size;
    req->view.generation = r->generation;
    req->view.access     = r->access;
    req->view.mem_type   = r->mem_type;
    req->view.flags      = r->flags;
    req->view.path       = REMORA_PATH_AM;
    snprintf(req->view.name, sizeof(req->view.name), "%s", r->name);
    rm_engine_unlock(c->ctx);
    parts           = parts > lanes ? lanes : parts;
    req->path       = REMORA_PATH_AM;
    req->generation = req->view.generation; /* r may be gone: the lock is released */
    atomic_init(&req->parts_left, (int)parts);
    atomic_init(&req->parts_status, REMORA_OK);
    size_t each = length / parts;
    for (unsigned i = 0; i < parts; i++) {
        size_t off = i * each, len = i + 1 == parts ? length - off : each;
        unsigned k = (first + i) % lanes;
        remora_status_t st = request_start(k ? c->lane[k - 1] : c, NULL, offset + off,
                                           buf + off, len, write, req, deadline,
                                           &req->part[i]);
        if (st != REMORA_OK && k) /* that lane is gone: this connection takes the part */
            st = request_start(c, NULL, offset + off, buf + off, len, write, req, deadline,
                               &req->part[i]);
        if (st != REMORA_OK && i == 0) {
            free(req);
            return st;
        }
        if (st != REMORA_OK) { /* the parts not started report the error */
            while (i++ < parts)
                part_done(req, st);
            break;
        }
        req->nparts = i + 1;
    }
    *req_p = req;
    return REMORA_OK;
}

/* A part's own copy of the whole's view of the region: detached from any
 * cache, freed by its request's end (rm_client_region_put). Takes the lock. */
static remora_status_t part_region(remora_client_h c, remora_request_h whole, rm_rregion_t **r_p)
{
    rm_rregion_t *r = malloc(sizeof(*r));

    if (r == NULL)
        return REMORA_ERR_NO_MEMORY;
    *r = whole->view;
    rm_list_init(&r->link);
    r->detached = 1;
    *r_p = r;
    rm_engine_lock(c->ctx);
    return REMORA_OK;
}

void rm_client_staging_prepare(remora_client_h c, int device)
{
    if (device >= 0 && rm_engine_copy_prepare(c->ctx, device) == REMORA_OK)
        rm_stage_pool_prepare(c->stage);
}

/* UCX copies GPU to GPU itself on this host (its cuda_ipc rendezvous). Each
 * chunk then costs a rendezvous round trip against a copy that takes
 * microseconds: 4 MiB chunks, 4 in flight, held a 256 MiB read to 0.12x of a
 * device-to-device copy on the H100 host; 64 MiB, 16 in flight, reach
 * 0.74-0.77x (32 MiB 0.65x, 128 MiB 0.62x). With the buffer registered
 * (req->reg) a rendezvous costs less, and one for the whole request was
 * fastest (docs/gpu-ucx.md). The user's REMORA_CHUNK_SIZE / REMORA_WINDOW
 * still win where they ask for more. */
static void ucx_ipc_shape(remora_request_h req)
{
    size_t chunk = req->reg && req->length > RM_UCX_IPC_CHUNK ? req->length : RM_UCX_IPC_CHUNK;

    if (req->chunk < chunk)
        req->chunk = chunk;
    if (req->window < RM_UCX_IPC_WINDOW)
        req->window = RM_UCX_IPC_WINDOW;
}

/* Start a request; a region lookup it needs is bounded by the deadline. */
static remora_status_t request_start(remora_client_h c, const char *name, uint64_t offset,
                                     void *buf, size_t length, int write,
                                     remora_request_h whole, uint64_t deadline,
                                     remora_request_h *req_p)
{
    rm_rregion_t *r;
    remora_request_h req;
    remora_status_t st;

    if (c == NULL || req_p == NULL || (buf == NULL && length))
        return REMORA_ERR_INVALID_PARAM;
    st = whole ? part_region(c, whole, &r) : rm_client_region_get(c, name, deadline, &r);
    if (st != REMORA_OK)
        return st; /* the lock is held only on success */
    if (c->disconnected)
        st = c->disc_status;
    else
        st = check_request(r, offset, length, write);
    int dev_buf = 0, gpu_buf = 0, buf_dev = -1;
    if (st == REMORA_OK)
        st = classify_buffer(c, buf, &gpu_buf, &dev_buf, &buf_dev);
    if (c->peer.seal) /* the CPU seals: every GPU buffer through staging */
        dev_buf = gpu_buf;
    if (st == REMORA_OK && whole == NULL && c->nlanes && r->path == REMORA_PATH_AM && !gpu_buf &&
        length >= RM_LANE_PART_MIN)
        return split_start(c, r, offset, buf, length, write, deadline, req_p);
    if (st == REMORA_OK && (req = request_new(c, buf, offset, length, write)) == NULL)
        st = REMORA_ERR_NO_MEMORY;
    if (st != REMORA_OK) {
        rm_engine_unlock(c->ctx);
        if (whole)
            free(r); /* the part's copy, never used */
        return st;
    }
    req->whole      = whole;
    req->region     = r;
    req->region_id  = r->id;
    req->path       = r->path;
    req->dev_buf    = dev_buf;
    req->gpu_buf    = gpu_buf;
    if (gpu_buf && !dev_buf)
        rm_engine_cuda_enter(c->ctx, buf_dev); /* UCX copies it, maybe on this thread */
    if (dev_buf && req->path == REMORA_PATH_RMA)
        req->path = REMORA_PATH_STAGING; /* UCX cannot put/get GPU memory here */
    if (req->path == REMORA_PATH_STAGING)
        req->dev_buf = dev_buf = gpu_buf; /* staging: pinned buffers on both sides,
                                           * even where UCX could take the GPU buffer */
    if (dev_buf) /* a caller's thread, not a stream's: the earliest safe place */
        rm_client_staging_prepare(c, buf_dev);
    if (write && req->path == REMORA_PATH_MAP && !r->map_writable)
        req->path = REMORA_PATH_AM; /* the server's file is sealed read-only */
    if ((dev_buf || r->path == REMORA_PATH_STAGING) && req->chunk > RM_STAGE_CHUNK)
        req->chunk = RM_STAGE_CHUNK;
    if (req->path == REMORA_PATH_AM && gpu_buf && !dev_buf) { /* UCX moves the GPU buffer */
        req->reg = rm_client_reg_get(c, buf, length);
        if (c->same_host && r->mem_type == REMORA_MEM_CUDA)
            ucx_ipc_shape(req);
    }
    r->users++;
    *req_p = req;
    if (length == 0 || req->path == REMORA_PATH_MAP || req->path == REMORA_PATH_IPC) {
        /* Nothing for UCX to do: no need to wake the progress thread. */
        char *remote = NULL;
        if (length && req->path == REMORA_PATH_IPC &&
            (req->status = rm_client_region_ipc(r, buf_dev, &remote)) != REMORA_OK)
            request_complete(req);
        else if (length && req->path == REMORA_PATH_IPC)
            run_local(req, remote + offset, 1);
        else if (length)
            run_local(req, (char *)r->mapped + offset, gpu_buf);
        else
            request_complete(req);
        rm_engine_unlock(c->ctx);
        return REMORA_OK;
    }
    if (length >= RM_ENGINE_BULK_MIN) { /* moves while the caller works (rm_engine_bulk_add) */
        req->bulk = 1;
        rm_engine_bulk_add(req->ctx, 1);
    }
    req->conn_gen = c->conn_gen;
    issue_more(req);
    request_try_end(req);
    rm_engine_unlock(c->ctx);
    rm_engine_kick(c->ctx);
    return REMORA_OK;
}

remora_status_t remora_client_read_nb(remora_client_h c, const char *name, uint64_t offset,
                                      void *buf, size_t length, remora_request_h *req_p)
{
    return request_start(c, name, offset, buf, length, 0, NULL,
                         c ? rm_deadline_ns(c->timeout_ms) : 0, req_p);
}

remora_status_t remora_client_write_nb(remora_client_h c, const char *name, uint64_t offset,
                                       const void *buf, size_t length, remora_request_h *req_p)
{
    /* The buffer is only read on a write; the cast keeps one request type. */
    return request_start(c, name, offset, (void *)(uintptr_t)buf, length, 1, NULL,
                         c ? rm_deadline_ns(c->timeout_ms) : 0, req_p);
}

remora_status_t remora_request_test(remora_request_h req)
{
    if (req == NULL)
        return REMORA_ERR_INVALID_PARAM;
    return atomic_load(&req->done) ? req->status : REMORA_INPROGRESS;
}

remora_status_t remora_request_wait(remora_request_h req, int timeout_ms)
{
    if (req == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (timeout_ms < 0)
        timeout_ms = req->timeout_ms;
    if (rm_engine_wait(req->ctx, &req->done, rm_deadline_ns(timeout_ms)) != REMORA_OK)
        return REMORA_ERR_TIMED_OUT;
    return req->status;
}

/* A request that would not finish: close the connection so UCX cancels what
 * still targets the caller's buffer, then wait for that. */
static void request_abort(remora_request_h req)
{
    for (unsigned i = 0; i < req->nparts; i++)
        if (!atomic_load(&req->part[i]->done))
            rm_client_abort(req->part[i]->client, REMORA_ERR_TIMED_OUT);
    if (req->nparts == 0)
        rm_client_abort(req->client, REMORA_ERR_TIMED_OUT);
    if (rm_engine_wait(req->ctx, &req->done, rm_deadline_ns(RM_ABORT_WAIT_MS)) != REMORA_OK)
        rm_error("request still in flight after its connection was closed");
}

/* A finished request, and its parts (all finished before it). */
static void request_free(remora_request_h req)
{
    for (unsigned i = 0; i < req->nparts; i++)
        free(req->part[i]);
    free(req);
}

int rm_request_release_ended(remora_request_h req)
{
    if (req == NULL)
        return 1;
    if (!atomic_load(&req->done) && remora_request_wait(req, -1) == REMORA_ERR_TIMED_OUT)
        request_abort(req);
    if (!atomic_load(&req->done))
        return 0; /* leaked rather than freed under UCX's feet */
    request_free(req);
    return 1;
}

void remora_request_release(remora_request_h req) { (void)rm_request_release_ended(req); }

uint32_t rm_request_region_id(remora_request_h req)
{
    return req->region_id;
}

/* A blocking call's whole time, lookup included, is the client's timeout. */
static remora_status_t run_blocking(remora_status_t st, remora_request_h req, uint64_t deadline)
{
    uint64_t now = rm_now_ns();

    if (st != REMORA_OK)
        return st;
    st = remora_request_wait(req, now >= deadline ? 0 : (int)((deadline - now + 999999u) / 1000000u));
    if (st == REMORA_ERR_TIMED_OUT && !atomic_load(&req->done))
        request_abort(req);
    if (atomic_load(&req->done))
        request_free(req);
    return st;
}

remora_status_t remora_client_read(remora_client_h c, const char *name, uint64_t offset,
                                   void *buf, size_t length)
{
    remora_request_h req = NULL;
    uint64_t deadline    = c ? rm_deadline_ns(c->timeout_ms) : 0;
    remora_status_t st   = request_start(c, name, offset, buf, length, 0, NULL, deadline, &req);
    return run_blocking(st, req, deadline);
}

remora_status_t remora_client_write(remora_client_h c, const char *name, uint64_t offset,
                                    const void *buf, size_t length)
{
    remora_request_h req = NULL;
    uint64_t deadline    = c ? rm_deadline_ns(c->timeout_ms) : 0;
    remora_status_t st   = request_start(c, name, offset, (void *)(uintptr_t)buf, length, 1, NULL,
                                         deadline, &req);
    return run_blocking(st, req, deadline);
}
