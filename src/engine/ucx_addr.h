/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Checking a peer's UCX worker address before UCX unpacks it.
 *
 * Design notes
 * - UCX trusts worker addresses: a truncated length, a NaN bandwidth or a
 *   zero-length TCP device address makes ucp_ep_create() read out of bounds,
 *   assert (select.c "score >= 0.0") or dereference NULL
 *   (uct_tcp_ep_set_dest_addr). The server hands UCX a peer's address only
 *   after AUTH, and only if it passes this check first.
 * - The check walks the packed layout of UCX's address formats v1 and v2
 *   (non-unified mode), bounds-checking every length, and then compares each
 *   transport the peer names that this worker also has with what this
 *   worker's own address says about it (the "shape", learned once at worker
 *   creation): the same capability flags, device/interface/endpoint address
 *   lengths this UCX build produces, finite and positive performance figures.
 *   Transports this worker lacks are only walked: UCX matches transports by
 *   name checksum and never looks further into those it does not have.
 * - TCP and InfiniBand/RoCE device addresses vary with the peer's
 *   interfaces (IPv4, IPv6, loopback; LID, GID, subnet), so they are checked
 *   by content: their flags, and the length those flags imply.
 * - When this worker's own address does not parse (a UCX whose format this
 *   code does not know, or unified mode), the shape is marked unknown and the
 *   check falls back to length and format version: the server says so once at
 *   start-up (docs/security.md).
 * - Pure functions over byte buffers: no UCX calls, no locks.
 */
#ifndef RM_ENGINE_UCX_ADDR_H
#define RM_ENGINE_UCX_ADDR_H

#include <stddef.h>
#include <stdint.h>

#define RM_UCX_ADDR_MAX_TLS 32

/* What this worker's address says about one of its transports. */
typedef struct {
    uint16_t csum;          /* UCX's CRC-16 of the transport name */
    uint32_t cap_flags;     /* packed capability flags (priority bits left out) */
    uint64_t dev_lens[4];   /* bitmaps of lengths seen, 0..255 */
    uint64_t iface_lens[4];
    uint64_t ep_lens[4];
} rm_ucx_tl_shape_t;

typedef struct {
    int               known; /* 0: own address did not parse; checks fall back */
    uint8_t           header; /* first byte: format version and (v1) flags */
    unsigned          num_tls;
    rm_ucx_tl_shape_t tls[RM_UCX_ADDR_MAX_TLS];
} rm_ucx_addr_shape_t;

/* Learns the shape from this worker's own address. Returns 0, or -1 (shape
 * marked unknown) when the address does not parse. */
int rm_ucx_addr_learn(rm_ucx_addr_shape_t *shape, const void *own, size_t len);

/* Returns 0 if UCX can be handed addr; otherwise -1 and *why (static text). */
int rm_ucx_addr_check(const rm_ucx_addr_shape_t *shape, const void *addr, size_t len,
                      const char **why);

/* Every TCP interface an address names, as the socket address UCX connects
 * to (a loopback device: 127.0.0.1 or ::1) with the interface's listening
 * port, zero-filled past it (copy it whole, compare it with memcmp). Each
 * once: an address may list one under several memory domains; past
 * RM_UCX_TCP_SEEN different ones, repeats are not looked for. Returns 0, or
 * -1 when the address does not parse (fn may have been called before). */
#define RM_UCX_TCP_SEEN 64
struct sockaddr_storage;
typedef void (*rm_ucx_tcp_fn)(void *arg, const struct sockaddr_storage *ss);
int rm_ucx_addr_tcp(const void *addr, size_t len, rm_ucx_tcp_fn fn, void *arg);

/* UCX's checksum of a transport name (CRC-16, polynomial 0x8408, as UCX). */
uint16_t rm_ucx_tl_csum(const char *name);

#endif
