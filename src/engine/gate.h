/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The gate: which hosts may open a TCP connection to UCX's own listening
 * sockets.
 *
 * Design notes
 * - UCX's TCP transport trusts whoever connects to its listening port. After
 *   its 8-byte magic number, a frame of its internal PUT type writes the bytes
 *   that follow at whatever address the frame names, and malformed frames fail
 *   assertions that abort the process (UCX 1.13 through today's releases:
 *   docs/security.md §2.1). Those ports answer anyone who reaches the
 *   interface, without remora's handshake: token or not, 25 bytes crash a
 *   server.
 * - So every listening TCP socket of this context's UCX workers (found by the
 *   ports of the TCP interfaces in each worker's own address) and of its
 *   connection-manager listeners carries a classic BPF socket filter that
 *   drops every packet whose source address is not an allowed host. With no
 *   host allowed a SYN is never answered. A socket accepted from a listener
 *   keeps the filter the listener had at that moment.
 * - A host is allowed while a connection of ours with it is past AUTH (a
 *   server's view: from CONNECT on) or being made by us (a client's: from
 *   CONNECT on), through a pass (rm_gate_pass_t) the connection holds:
 *   its bootstrap peer address and the TCP interfaces of the peer's worker
 *   address. Counted per host; each change recompiles the program and
 *   attaches it to every guarded listener (SO_ATTACH_FILTER swaps it
 *   atomically).
 * - What it cannot do: tell two processes on one host apart. Any process on
 *   an allowed host (this one's too, for a loopback server with a client)
 *   can reach UCX's ports; what it can do there is UCX's, not remora's, to
 *   bound.
 * - One gate per root context, shared by its lanes; a mutex of its own, a
 *   leaf (taken under a context lock, never the other way round).
 */
#ifndef RM_ENGINE_GATE_H
#define RM_ENGINE_GATE_H

#include <stdint.h>
#include <sys/socket.h>

#include <remora/remora.h>

typedef struct rm_gate rm_gate_t;

/* A host as the filter compares it: IPv4 (v4-mapped IPv6 folded in) or IPv6. */
typedef struct {
    uint8_t family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
} rm_gate_host_t;

/* The hosts one connection has allowed. Zeroed is empty. */
#define RM_GATE_PASS_MAX 32
typedef struct {
    unsigned       n;
    rm_gate_host_t hosts[RM_GATE_PASS_MAX];
} rm_gate_pass_t;

/* The most distinct hosts allowed at once (the program must stay within the
 * kernel's 4,096 instructions, and half of net.core.optmem_max: about 250
 * IPv4 hosts at the 20,480 bytes kernels before 6.8 allow, 1,000 from 6.8
 * on); a connection past it is refused (BUSY). */
#define RM_GATE_HOSTS_MAX 1000

/* NULL when disabled (REMORA_UCX_GATE=0) or out of memory. */
rm_gate_t *rm_gate_create(void);
void rm_gate_destroy(rm_gate_t *g);

/* Guard the listening sockets of the TCP interfaces named by own, a worker's
 * own UCX address, tagged with owner. Returns how many were found, -1 if the
 * address does not parse. Safe with g NULL (returns 0). */
int rm_gate_guard_worker(rm_gate_t *g, const void *owner, const void *own, size_t len);
/* Guard the listening socket bound to sa's port and family. 0 or -1. */
int rm_gate_guard_listener(rm_gate_t *g, const void *owner, const struct sockaddr *sa);
/* Stop guarding owner's sockets (before they close). */
void rm_gate_forget(rm_gate_t *g, const void *owner);

/* Add sa's host and every TCP interface host that the n UCX worker
 * addresses ucx[i] (of ucx_len[i] bytes) name to pass and allow them, all or
 * none: REMORA_ERR_BUSY when they do not all fit (the hosts pass held before
 * stay). One swap of the program however many. With g NULL, nothing. */
remora_status_t rm_gate_open(rm_gate_t *g, rm_gate_pass_t *pass, const struct sockaddr *sa,
                             const void *const ucx[], const size_t ucx_len[], unsigned n);
/* Whether a socket whose peer is peer and whose own end is own joins two
 * processes of one host: peer is a loopback address or own's very address
 * (v4-mapped IPv6 counted as IPv4). */
int rm_gate_same_host(const struct sockaddr *peer, const struct sockaddr *own);
/* Give back every host of pass; pass is empty afterwards. */
void rm_gate_close(rm_gate_t *g, rm_gate_pass_t *pass);

/* Whether sa's host is allowed now, and how many more hosts of family fit
 * (tests, diagnostics). */
int rm_gate_allows(rm_gate_t *g, const struct sockaddr *sa);
unsigned rm_gate_room(rm_gate_t *g, int family);

#endif
