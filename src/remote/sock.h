/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Byte-stream sockets over remora connections (sock.c), the internal hooks.
 * The client and the server hand socket messages here; the GPU proxy
 * (src/gpu/gpunet.c) uses the readiness hints.
 */
#ifndef RM_REMOTE_SOCK_H
#define RM_REMOTE_SOCK_H

#include "engine/engine.h"

/* A socket message (RM_MSG_IS_SOCK, not CONNECT_REPLY) arrived on peer; lock
 * held. server: the server it came to, NULL when it came from a server. */
void rm_sock_on_message(rm_peer_t *peer, remora_server_h server, const rm_hdr_t *hdr,
                        const void *body, size_t len);
/* peer's connection is gone: its sockets fail, its unaccepted ones go (lock held). */
void rm_sock_peer_gone(rm_peer_t *peer);

/* Lock-free hints for pollers: bytes waiting to be read (or 1 when recv would
 * return at once with 0 or an error), bytes sendable now. */
size_t rm_sock_rx_hint(remora_sock_h s);
size_t rm_sock_tx_hint(remora_sock_h s);
/* A connection queued on the listener, hint without the lock. */
int rm_sock_listener_hint(remora_sock_listener_h l);

#endif
