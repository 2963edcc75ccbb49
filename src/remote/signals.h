/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Signal arrays (remora_signals_*): 64-bit words in shareable host memory
 * that peers set or add to and local streams or CPUs wait on.
 *
 * Design notes
 * - The words live in a library-allocated memory file (a remora_mem_h of
 *   the context), so a same-host client can map them and write them from its
 *   own GPU streams (src/gpu/stream.c, the direct path). With a CUDA driver
 *   they are page-locked and mapped for every device (DEVICEMAP | PORTABLE):
 *   cuStreamWaitValue64 waits on them.
 * - Every update is one atomic operation on the word (SET: store, ADD:
 *   fetch-add), from the progress thread (remote updates) or any caller
 *   thread (local ones); readers use atomic loads.
 * - `server` and `region` say where the array is exposed; guarded by the
 *   context lock, cleared when the region goes (server.c calls
 *   rm_server_signals_region_gone).
 */
#ifndef RM_REMOTE_SIGNALS_H
#define RM_REMOTE_SIGNALS_H

#include "remote/client.h"
#include "remote/server.h"

#define RM_SIGNALS_MAX (1u << 24)

struct remora_signals {
    remora_context_h ctx;
    remora_mem_h     mem;
    uint64_t        *words;
    size_t           count;
    void            *dev;        /* device address of words; NULL without CUDA */
    remora_server_h  server;     /* exposed there (lock held), or NULL */
    char             name[REMORA_NAME_MAX + 1];
};

/* Apply one update atomically; returns the new value. */
uint64_t rm_signals_apply(struct remora_signals *sig, size_t index, unsigned op, uint64_t value);
/* Whether word compares to value as cmp (remora_cmp_t) says. */
int rm_signals_cmp(uint64_t word, unsigned cmp, uint64_t value);

/* server_signals.c, lock held: message handlers and the hooks server.c calls. */
void rm_server_signal(rm_conn_t *c, const rm_hdr_t *hdr);
void rm_server_write_signal(rm_conn_t *c, const rm_hdr_t *hdr, void *body, size_t len,
                            const ucp_am_recv_param_t *param);
/* Check a WRITE_SIGNAL's signal before any byte moves / apply it once the data landed. */
remora_status_t rm_server_signal_check(remora_server_h s, const rm_sig_desc_t *d);
remora_status_t rm_server_signal_apply(remora_server_h s, const rm_sig_desc_t *d);
void rm_server_signals_region_gone(remora_server_h s, rm_region_t *r);
/* server.c: a WRITE (sig NULL) or the write of a WRITE_SIGNAL (body past the descriptor). */
void rm_server_handle_write(rm_conn_t *c, const rm_hdr_t *hdr, void *body, size_t len,
                            const ucp_am_recv_param_t *param, const rm_sig_desc_t *sig);

/* Client side (lock not held): send a SIGNAL, or a WRITE_SIGNAL carrying len
 * bytes of data (copied here: host memory, small enough for one eager
 * message). *op_p is a control op: wait for op->done, then free it
 * (rm_client_op_free) or abandon it, lock held. */
remora_status_t rm_client_signal_send(remora_client_h c, const char *name, size_t index,
                                      remora_signal_op_t op, uint64_t value, uint64_t deadline,
                                      rm_op_t **op_p);
remora_status_t rm_client_write_signal_send(remora_client_h c, const char *region,
                                            uint64_t offset, const void *data, size_t len,
                                            const char *signals, size_t index,
                                            remora_signal_op_t op, uint64_t value,
                                            uint64_t deadline, rm_op_t **op_p);

#endif
