/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Signal arrays: creation, local updates and waits, exposure by a server,
 * the SIGNAL / WRITE_SIGNAL handlers, and the client's host form
 * (remora_client_signal). See signals.h for the design notes and
 * docs/protocol.md for the messages.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mem/cuda.h"
#include "mem/mem.h"
#include "remote/client.h"
#include "remote/signals.h"
#include "util/log.h"
#include "util/time.h"

/* ------------------------------------------------------------ words */

uint64_t rm_signals_apply(struct remora_signals *sig, size_t index, unsigned op, uint64_t value)
{
    uint64_t *w = &sig->words[index];

    if (op == RM_SIG_ADD)
        return __atomic_add_fetch(w, value, __ATOMIC_SEQ_CST);
    __atomic_store_n(w, value, __ATOMIC_SEQ_CST);
    return value;
}

int rm_signals_cmp(uint64_t word, unsigned cmp, uint64_t value)
{
    switch (cmp) {
    case REMORA_CMP_GEQ: return (int64_t)(word - value) >= 0;
    case REMORA_CMP_EQ:  return word == value;
    case REMORA_CMP_NEQ: return word != value;
    default:             return 0;
    }
}

/* ------------------------------------------------------------ public: arrays */

remora_status_t remora_signals_create(remora_context_h ctx, size_t count,
                                      const remora_signals_params_t *params,
                                      remora_signals_h *signals_p)
{
    struct remora_signals *sig;
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH};
    uint64_t init = 0;
    remora_status_t st;

    if (ctx == NULL || signals_p == NULL || count == 0 || count > RM_SIGNALS_MAX)
        return REMORA_ERR_INVALID_PARAM;
    if (params && (params->field_mask & ~(uint64_t)REMORA_SIGNALS_FIELD_INIT))
        return REMORA_ERR_INVALID_PARAM;
    if (params && (params->field_mask & REMORA_SIGNALS_FIELD_INIT))
        init = params->init;
    if ((sig = calloc(1, sizeof(*sig))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    mp.length = count * sizeof(uint64_t);
    if ((st = remora_mem_create(ctx, &mp, &sig->mem)) != REMORA_OK) {
        free(sig);
        return st;
    }
    sig->ctx   = ctx;
    sig->count = count;
    sig->words = sig->mem->addr;
    for (size_t i = 0; i < count; i++)
        __atomic_store_n(&sig->words[i], init, __ATOMIC_RELAXED);
    /* Streams of this process wait on the words: map them for the devices.
     * Only where the driver is already loaded or loads: a CPU-only process
     * goes on without. */
    if (rm_cuda_init() == REMORA_OK && rm_cuda_device_count() > 0 &&
        rm_cuda_host_register_mapped(sig->words, mp.length, &sig->dev) != REMORA_OK) {
        rm_warn("signals: cannot map %zu signal words for the GPU; streams cannot wait on them",
                count);
        sig->dev = NULL;
    }
    *signals_p = sig;
    return REMORA_OK;
}

void remora_signals_destroy(remora_signals_h sig)
{
    if (sig == NULL)
        return;
    rm_engine_lock(sig->ctx);
    remora_server_h s = sig->server;
    char name[REMORA_NAME_MAX + 1];
    snprintf(name, sizeof(name), "%s", sig->name);
    rm_engine_unlock(sig->ctx);
    if (s != NULL)
        remora_server_unexpose(s, name);
    if (sig->dev != NULL)
        rm_cuda_host_unregister(sig->words);
    remora_mem_destroy(sig->mem); /* a region's retired reference may keep it a while */
    free(sig);
}

size_t remora_signals_count(remora_signals_h sig) { return sig ? sig->count : 0; }

volatile uint64_t *remora_signals_host_ptr(remora_signals_h sig) { return sig ? sig->words : NULL; }

remora_status_t remora_signals_device_ptr(remora_signals_h sig, void **dev_p)
{
    if (sig == NULL || dev_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (sig->dev == NULL)
        return REMORA_ERR_UNSUPPORTED;
    *dev_p = sig->dev;
    return REMORA_OK;
}

remora_status_t remora_signals_read(remora_signals_h sig, size_t index, uint64_t *value_p)
{
    if (sig == NULL || value_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (index >= sig->count)
        return REMORA_ERR_OUT_OF_RANGE;
    *value_p = __atomic_load_n(&sig->words[index], __ATOMIC_ACQUIRE);
    return REMORA_OK;
}

remora_status_t remora_signals_update(remora_signals_h sig, size_t index, remora_signal_op_t op,
                                      uint64_t value)
{
    if (sig == NULL || (op != REMORA_SIGNAL_SET && op != REMORA_SIGNAL_ADD))
        return REMORA_ERR_INVALID_PARAM;
    if (index >= sig->count)
        return REMORA_ERR_OUT_OF_RANGE;
    rm_signals_apply(sig, index, op == REMORA_SIGNAL_ADD ? RM_SIG_ADD : RM_SIG_SET, value);
    return REMORA_OK;
}

remora_status_t remora_signals_wait(remora_signals_h sig, size_t index, remora_cmp_t cmp,
                                    uint64_t value, int timeout_ms, uint64_t *value_p)
{
    uint64_t deadline, start = rm_now_ns(), w;
    long nap_ns = 1000;

    if (sig == NULL || (unsigned)cmp > REMORA_CMP_NEQ)
        return REMORA_ERR_INVALID_PARAM;
    if (index >= sig->count)
        return REMORA_ERR_OUT_OF_RANGE;
    deadline = start + (uint64_t)(timeout_ms < 0 ? REMORA_DEFAULT_TIMEOUT_MS : timeout_ms) * 1000000u;
    for (;;) {
        w = __atomic_load_n(&sig->words[index], __ATOMIC_ACQUIRE);
        if (rm_signals_cmp(w, cmp, value))
            break;
        uint64_t now = rm_now_ns();
        if (now >= deadline)
            return REMORA_ERR_TIMED_OUT;
        if (now - start < 20000u) { /* 20 µs of spinning, then naps growing to 100 µs */
            rm_cpu_relax();
            continue;
        }
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 100000)
            nap_ns *= 2;
    }
    if (value_p)
        *value_p = w;
    return REMORA_OK;
}

/* ------------------------------------------------------------ server */

remora_status_t remora_server_expose_signals(remora_server_h s, const char *name,
                                             remora_signals_h sig)
{
    remora_status_t st;

    if (s == NULL || sig == NULL || !rm_name_valid(name) || sig->ctx != s->ctx)
        return REMORA_ERR_INVALID_PARAM;
    rm_engine_lock(s->ctx);
    st = sig->server ? REMORA_ERR_BUSY : REMORA_OK;
    if (st == REMORA_OK) {
        sig->server = s; /* claimed while the lock is dropped */
        snprintf(sig->name, sizeof(sig->name), "%s", name);
    }
    rm_engine_unlock(s->ctx);
    if (st != REMORA_OK)
        return st;
    /* Writable, so the memory file stays unsealed and same-host clients can
     * map it for their streams; plain writes are refused (server.c). Marked
     * as signals from its first moment in the table: a region that was
     * plain for a while took plain writes and answered signals with
     * INVALID_PARAM (test_workers' signals under change). */
    st = rm_server_region_add(s, name, sig->mem, 0, sig->count * sizeof(uint64_t),
                              REMORA_REGION_WRITABLE, &(rm_region_role_t){.signals = sig});
    if (st != REMORA_OK) {
        rm_engine_lock(s->ctx);
        sig->server = NULL;
        rm_engine_unlock(s->ctx);
    }
    return st;
}

void rm_server_signals_region_gone(remora_server_h s, rm_region_t *r)
{
    if (r->signals && r->signals->server == s)
        r->signals->server = NULL;
    r->signals = NULL;
}

/* The table's lock held: a region that leaves the table loses its array
 * (rm_server_signals_region_gone) under the first worker's lock only, so a
 * connection on another worker must not look at r->signals without it. */
static remora_status_t signal_target(remora_server_h s, uint32_t region_id, uint64_t index,
                                     rm_region_t **r_p)
{
    rm_region_t *r = rm_registry_by_id(s->reg, region_id);

    if (r == NULL)
        return REMORA_ERR_NOT_FOUND;
    if (r->signals == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (index >= r->signals->count)
        return REMORA_ERR_OUT_OF_RANGE;
    *r_p = r;
    return REMORA_OK;
}

remora_status_t rm_server_signal_check(remora_server_h s, const rm_sig_desc_t *d)
{
    rm_region_t *r;

    rm_registry_lock(s->reg);
    remora_status_t st = signal_target(s, d->region_id, d->index, &r);
    rm_registry_unlock(s->reg);
    return st;
}

remora_status_t rm_server_signal_apply(remora_server_h s, const rm_sig_desc_t *d)
{
    rm_region_t *r;

    rm_registry_lock(s->reg);
    remora_status_t st = signal_target(s, d->region_id, d->index, &r);
    if (st == REMORA_OK)
        rm_signals_apply(r->signals, d->index, d->op, d->value);
    rm_registry_unlock(s->reg);
    return st;
}

void rm_server_write_signal(rm_conn_t *c, const rm_hdr_t *hdr, void *body, size_t len,
                            const ucp_am_recv_param_t *param)
{
    rm_sig_desc_t d;
    remora_status_t st = REMORA_OK;

    if (rm_sig_desc_decode(body, len, &d) != 0)
        st = REMORA_ERR_PROTOCOL;
    else
        st = rm_server_signal_check(c->server, &d);
    if (st != REMORA_OK) {
        rm_info_peer("WRITE_SIGNAL from %s refused: %s", c->peer_host, remora_status_string(st));
        rm_conn_reply(c, RM_MSG_WRITE_REPLY, hdr->req_id, st, NULL);
        return;
    }
    rm_server_handle_write(c, hdr, (char *)body + RM_SIG_DESC_LEN, len - RM_SIG_DESC_LEN, param,
                           &d);
}

void rm_server_signal(rm_conn_t *c, const rm_hdr_t *hdr)
{
    rm_sig_desc_t d = {.region_id = hdr->region_id, .op = hdr->kind, .index = hdr->offset,
                       .value = hdr->length};
    remora_status_t st = rm_server_signal_apply(c->server, &d);

    if (st != REMORA_OK)
        rm_info_peer("SIGNAL from %s refused: %s", c->peer_host, remora_status_string(st));
    rm_conn_reply(c, RM_MSG_SIGNAL_REPLY, hdr->req_id, st, NULL);
}

/* ------------------------------------------------------------ client: host form */

/* Send a SIGNAL (lock not held); *op_p is the control op to wait for. */
remora_status_t rm_client_signal_send(remora_client_h c, const char *name, size_t index,
                                      remora_signal_op_t op, uint64_t value, uint64_t deadline,
                                      rm_op_t **op_p)
{
    rm_rregion_t *r;
    remora_status_t st;

    if (c == NULL || name == NULL || op_p == NULL ||
        (op != REMORA_SIGNAL_SET && op != REMORA_SIGNAL_ADD))
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_client_region_get(c, name, deadline, &r)) != REMORA_OK)
        return st;
    if (c->disconnected)
        st = c->disc_status;
    else if (!(r->flags & RM_REGION_WIRE_SIGNALS))
        st = REMORA_ERR_INVALID_PARAM;
    else if (index >= r->size / sizeof(uint64_t))
        st = REMORA_ERR_OUT_OF_RANGE;
    if (st == REMORA_OK) {
        rm_hdr_t hdr = {.type = RM_MSG_SIGNAL, .region_id = r->id,
                        .kind = op == REMORA_SIGNAL_ADD ? RM_SIG_ADD : RM_SIG_SET,
                        .offset = index, .length = value};
        rm_send_params_t sp = {0};
        if ((*op_p = rm_client_op_send(c, &hdr, RM_MSG_SIGNAL_REPLY, &sp)) == NULL)
            st = REMORA_ERR_NO_MEMORY;
    }
    rm_engine_unlock(c->ctx);
    if (st == REMORA_OK)
        rm_engine_kick(c->ctx);
    return st;
}

remora_status_t remora_client_signal(remora_client_h c, const char *name, size_t index,
                                     remora_signal_op_t op, uint64_t value)
{
    uint64_t deadline;
    rm_op_t *o = NULL;
    remora_status_t st;

    if (c == NULL)
        return REMORA_ERR_INVALID_PARAM;
    deadline = rm_deadline_ns(c->timeout_ms);
    if ((st = rm_client_signal_send(c, name, index, op, value, deadline, &o)) != REMORA_OK)
        return st;
    st = rm_engine_wait(c->ctx, &o->done, deadline);
    rm_engine_lock(c->ctx);
    if (st == REMORA_OK) {
        st = o->status;
        rm_client_op_free(o);
    } else {
        rm_client_op_abandon(o);
    }
    rm_engine_unlock(c->ctx);
    return st;
}

remora_status_t rm_client_write_signal_send(remora_client_h c, const char *region,
                                            uint64_t offset, const void *data, size_t len,
                                            const char *signals, size_t index,
                                            remora_signal_op_t op, uint64_t value,
                                            uint64_t deadline, rm_op_t **op_p)
{
    rm_rregion_t *r, *sr;
    uint32_t sig_id = 0, region_id = 0;
    remora_status_t st;
    uint8_t *body = NULL;

    if (c == NULL || region == NULL || signals == NULL || op_p == NULL ||
        (data == NULL && len) || (op != REMORA_SIGNAL_SET && op != REMORA_SIGNAL_ADD))
        return REMORA_ERR_INVALID_PARAM;
    if ((st = rm_client_region_get(c, signals, deadline, &sr)) != REMORA_OK)
        return st;
    if (!(sr->flags & RM_REGION_WIRE_SIGNALS))
        st = REMORA_ERR_INVALID_PARAM;
    else if (index >= sr->size / sizeof(uint64_t))
        st = REMORA_ERR_OUT_OF_RANGE;
    sig_id = sr->id;
    rm_engine_unlock(c->ctx);
    if (st != REMORA_OK)
        return st;
    if ((st = rm_client_region_get(c, region, deadline, &r)) != REMORA_OK)
        return st;
    if (c->disconnected)
        st = c->disc_status;
    else if (offset > r->size || len > r->size - offset)
        st = REMORA_ERR_OUT_OF_RANGE;
    else if (!(r->access & REMORA_ACCESS_WRITE))
        st = REMORA_ERR_READ_ONLY;
    else if ((body = malloc(RM_SIG_DESC_LEN + (len ? len : 1))) == NULL)
        st = REMORA_ERR_NO_MEMORY;
    region_id = r->id;
    if (st == REMORA_OK) {
        rm_sig_desc_t d = {.region_id = sig_id, .op = op == REMORA_SIGNAL_ADD ? RM_SIG_ADD : RM_SIG_SET,
                           .index = index, .value = value};
        rm_hdr_t hdr = {.type = RM_MSG_WRITE_SIGNAL, .region_id = region_id, .offset = offset,
                        .length = len};
        rm_sig_desc_encode(body, &d);
        if (len)
            memcpy(body + RM_SIG_DESC_LEN, data, len);
        /* Forced eager: the server parses the descriptor in place. */
        rm_send_params_t sp = {.body = body, .body_free = body, .body_len = RM_SIG_DESC_LEN + len};
        if ((*op_p = rm_client_op_send(c, &hdr, RM_MSG_WRITE_REPLY, &sp)) == NULL)
            st = REMORA_ERR_NO_MEMORY;
    }
    rm_engine_unlock(c->ctx);
    if (st == REMORA_OK)
        rm_engine_kick(c->ctx);
    return st;
}
