/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Reach: does every TCP interface a peer's UCX worker address names answer,
 * before UCX is handed that address?
 *
 * Design notes
 * - UCX's TCP transport connects with a blocking connect() inside
 *   ucp_ep_create (UCX_TCP_CONN_NB defaults to n; with y, UCX 1.13 aborts in
 *   ucp_worker_destroy: docs/security.md 3.5). An interface that drops SYNs
 *   (unreachable, firewalled, or a remora peer whose gate is closed to us)
 *   holds the calling thread for TCP's SYN retries, 127 s by default: on a
 *   server, one worker and every connection on it.
 * - So first we connect to each of those interfaces ourselves, all at once
 *   and without blocking. One that answers (a SYN-ACK, a reset, an ICMP
 *   error: anything but silence) will not hold UCX's connect either; one
 *   still silent at the deadline fails the whole address.
 * - A probe closes as soon as it connected, having sent nothing: UCX's
 *   listener drops a connection that ends before its magic number, quietly.
 * - UCX connects to a loopback entry only from the same host (it carries a
 *   namespace id), so those are probed only when the caller says the peer
 *   is on this host: elsewhere 127.0.0.1 is some other process.
 * - This narrows the hole, it does not close it: a peer that answers the
 *   probe and drops UCX's SYN a moment later still holds the thread. And it
 *   is all or nothing: one silent interface refuses the peer, even one UCX
 *   might not have picked (UCX_NET_DEVICES leaves it out).
 * - The probes share one epoll fd: a server watches it from its progress
 *   loop (rm_reach_fd, rm_reach_step), a client blocks on it
 *   (rm_reach_wait). No locks, no UCX calls.
 */
#ifndef RM_ENGINE_REACH_H
#define RM_ENGINE_REACH_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

/* How long an interface may stay silent: TCP sends a lost SYN again after
 * one second, so one loss is survived. */
#define RM_REACH_LIMIT_MS 2000u
/* Interfaces probed at most; an address naming more is refused. */
#define RM_REACH_MAX 32u
/* Probes open at once in this process: each holds a socket for up to the
 * limit, and a peer past AUTH (anyone, without a token) chooses how many. */
#define RM_REACH_FDS_MAX 1024u

typedef struct rm_reach rm_reach_t;

/* Start probing every TCP interface addr (a UCX worker address of len
 * bytes) names; loopback ones only when same_host. REMORA_OK with *out, NULL
 * when every interface answered at once or there is none to probe (also an
 * address whose format this code does not read: ucx_addr.h);
 * REMORA_ERR_PROTOCOL when addr names more than RM_REACH_MAX;
 * REMORA_ERR_BUSY when RM_REACH_FDS_MAX probes are open;
 * REMORA_ERR_NO_MEMORY, REMORA_ERR_IO. */
remora_status_t rm_reach_start(const void *addr, size_t len, int same_host, rm_reach_t **out);

/* Readable when a probe has ended: then call rm_reach_step. */
int rm_reach_fd(const rm_reach_t *r);

/* Take in the probes that ended; 1 when every interface has answered. */
int rm_reach_step(rm_reach_t *r);

/* Block until every interface answered (REMORA_OK) or the deadline
 * (rm_now_ns clock; REMORA_ERR_TIMED_OUT). */
remora_status_t rm_reach_wait(rm_reach_t *r, uint64_t deadline_ns);

/* "HOST:PORT" of an interface that has not answered yet ("" if none). */
void rm_reach_silent(const rm_reach_t *r, char *buf, size_t len);

void rm_reach_free(rm_reach_t *r);

#endif
