/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Fault injection for tests that link remora_internal: error paths that real
 * failures reach only under memory exhaustion, made reachable on demand.
 *
 * Design notes
 * - Off unless a test arms it: a disarmed check is one relaxed atomic load.
 * - Process-wide and any thread: a test arms a fault, then drives the code
 *   that takes it (the server's progress thread, typically).
 */
#ifndef RM_UTIL_FAULT_H
#define RM_UTIL_FAULT_H

#include <stddef.h>

/* The next `count` sends of message type `type` (RM_MSG_*, by any peer of
 * the process) fail as if memory ran out; count 0 disarms. */
void rm_fault_send_arm(unsigned type, unsigned count);

/* The same, after the next `skip` sends of that type went through. */
void rm_fault_send_arm_after(unsigned type, unsigned skip, unsigned count);

/* Whether a send of this type is to fail now (and count it taken). */
int rm_fault_send_take(unsigned type);

/* The next `count` sends of `type` see their endpoint fail inside the send
 * (UCX calls the error callback from within ucp_am_send_nbx), and then
 * return OK as if UCX had queued the message (queued) or fail. */
void rm_fault_ep_fail_arm(unsigned type, unsigned count, int queued);
/* Whether this send is to do that; *queued: how it returns. */
int rm_fault_ep_fail_take(unsigned type, int *queued);

/* A misbehaving server: the next `count` ring pushes (RM_MSG_RING_NOTIFY
 * sent with an element) are followed by an ERROR of the same req_id instead
 * of waiting for their verdict (server_ring.c). */
void rm_fault_stray_arm(unsigned type, unsigned count);
int rm_fault_stray_take(unsigned type);
/* A lying server: the next `count` region descriptors it sends name map_fd
 * (of this process) as the region's memory file, when map_fd >= 0, and
 * carry rkey (rkey_len bytes, copied; at most 256) as the region's key, when
 * rkey_len > 0 (server.c, region_describe). */
void rm_fault_lie_arm(int map_fd, const void *rkey, size_t rkey_len, unsigned count);
/* Whether the next descriptor is to lie; what it says in *map_fd (-1: the
 * truth) and *rkey / *rkey_len (0: the truth). */
int rm_fault_lie_take(int *map_fd, const void **rkey, size_t *rkey_len);
/* A server whose LANES replies name `port` alone (0 disarms). */
void rm_fault_lanes_port_arm(unsigned port);
unsigned rm_fault_lanes_port(void);

/* A server that ignores its subscribers' credit: the next `count` ring
 * pushes send every element from the wanted one on, up to the ring's end,
 * however few bytes the RING_WAIT asked for (server_ring.c). */
void rm_fault_overpush_arm(unsigned count);
int rm_fault_overpush_take(void);

#endif
