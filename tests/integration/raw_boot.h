/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A raw bootstrap peer for tests: speaks remora's bootstrap frames
 * (docs/protocol.md §1) on a plain blocking TCP socket, one frame at a time,
 * so a test can send any frame in any order and see exactly what the server
 * answers. It uses the library's own encoders (wire.h) and proof (auth.h):
 * link remora_internal.
 *
 * Design notes
 * - The socket stays blocking for sends; receives poll with a timeout.
 * - After the handshake the server sends HEARTBEAT frames every 500 ms and
 *   takes a peer silent for 2 s for dead: rb_tick() sends ours when due and
 *   reads and discards theirs. Call it from every wait loop.
 */
#ifndef REMORA_IT_RAW_BOOT_H
#define REMORA_IT_RAW_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

#include "wire/wire.h"

typedef struct rb_sock {
    int      fd;                 /* -1 when closed */
    uint8_t *buf;                /* received, not yet consumed */
    size_t   have, cap;
    uint8_t  client_nonce[RM_NONCE_LEN];
    uint8_t  server_nonce[RM_NONCE_LEN];
    uint16_t server_flags;       /* from HELLO_REPLY */
    double   last_tx_ms;
    unsigned heartbeats_rx;
} rb_sock_t;

/* A received frame, copied out of the socket buffer. */
typedef struct rb_frame {
    unsigned type, flags;
    uint8_t *payload; /* malloc'd (NULL when empty) */
    uint32_t len;
} rb_frame_t;

/* Connect to "HOST:PORT". 0, or -1 with nothing open. */
int  rb_dial(rb_sock_t *s, const char *addr);
/* The same from a chosen IPv4 source address (127.0.0.2...: another host to
 * the server's per-address caps). */
int  rb_dial_from(rb_sock_t *s, const char *addr, const char *src_ip);
void rb_close(rb_sock_t *s);
void rb_frame_free(rb_frame_t *f);

/* Write raw bytes / one frame / one frame with a raw header. 0 or -1. */
int rb_send_bytes(rb_sock_t *s, const void *buf, size_t len);
int rb_send_frame(rb_sock_t *s, unsigned type, unsigned flags, const void *payload, uint32_t len);

/* Wait up to ms for the next frame (heartbeats included unless skip_hb).
 * 0: a frame; -1: the socket was closed (EOF or reset) or garbage came;
 * -2: nothing within ms. */
int rb_recv(rb_sock_t *s, int ms, bool skip_hb, rb_frame_t *f);

/* Has the server closed the socket? Waits up to ms, discarding heartbeats
 * (and, counted in *other_p when not NULL, any other frame). */
bool rb_closed_within(rb_sock_t *s, int ms, unsigned *other_p);

/* The handshake, step by step. Each returns the reply's status, or
 * REMORA_ERR_DISCONNECTED when the socket closed without a reply,
 * REMORA_ERR_TIMED_OUT when none came, REMORA_ERR_PROTOCOL for a malformed
 * or unexpected one. */
remora_status_t rb_hello(rb_sock_t *s, uint16_t pmin, uint16_t pmax, rm_hello_t *theirs);
/* A proof computed from token (or a wrong one when token is NULL). */
remora_status_t rb_auth(rb_sock_t *s, const void *token, size_t token_len);
/* CONNECT with addr; the server's worker address (malloc'd) in *out. */
remora_status_t rb_connect(rb_sock_t *s, const void *addr, size_t len, void **out,
                           size_t *out_len);

/* HELLO (+AUTH when the server asks and token is given), no CONNECT. */
remora_status_t rb_hello_auth(rb_sock_t *s, const void *token, size_t token_len);

/* Send a heartbeat when 250 ms have passed since the last frame we sent, and
 * read and discard whatever heartbeats arrived. */
void rb_tick(rb_sock_t *s);

double rb_now_ms(void);

#endif
