/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Optional encryption of a connection ("sealing"); see seal.c's design notes
 * and docs/protocol.md §14.
 *
 * The low-level functions (rm_seal_*) take a seal and bytes, so they can be
 * tested without a connection. The peer-level ones (rm_peer_seal_*) are the
 * hooks the engine and the remote layer call; all run with the context lock
 * held, like everything else on a peer.
 */
#ifndef RM_ENGINE_SEAL_H
#define RM_ENGINE_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

#define RM_SEAL_KEY_LEN  32
/* Counters a receiver remembers below the highest it accepted: a message
 * (a rendezvous body completing late) older than this is refused. */
#define RM_SEAL_WINDOW   4096u
/* A sealed bootstrap payload is this much longer than the plain one. */
#define RM_SEAL_BOOT_EXTRA RM_SEAL_TAG_LEN

typedef enum { RM_SEAL_CLIENT = 0, RM_SEAL_SERVER = 1 } rm_seal_role_t;

struct rm_seal {
    uint8_t  tx_key[RM_SEAL_KEY_LEN]; /* this side -> peer */
    uint8_t  rx_key[RM_SEAL_KEY_LEN]; /* peer -> this side */
    uint8_t  tx_dir, rx_dir;          /* nonce byte 0: 1 client->server, 2 server->client */
    uint64_t tx_next;                 /* the next message's counter; from 1 */
    uint64_t rx_top;                  /* highest counter accepted; 0: none yet */
    uint64_t rx_seen[RM_SEAL_WINDOW / 64]; /* bit ctr % WINDOW, for top-WINDOW < ctr <= top */
};

/* Derive both session keys from the token and both handshake nonces
 * (after AUTH succeeded). NULL when out of memory. Free with rm_seal_free,
 * which wipes the keys. */
rm_seal_t *rm_seal_new(rm_seal_role_t role, const void *token, size_t token_len,
                       const uint8_t server_nonce[RM_NONCE_LEN],
                       const uint8_t client_nonce[RM_NONCE_LEN]);
void rm_seal_free(rm_seal_t *s);

/*
 * One message. hdr holds the encoded header with its seal extension
 * (rm_hdr_encode of a header with sealed = 1); fixed_len is its fixed part.
 * Encrypts len bytes of in into out (may be the same), with the fixed part as
 * additional data and the next counter as nonce, and writes counter and tag
 * into the extension.
 */
void rm_seal_msg(rm_seal_t *s, uint8_t *hdr, size_t fixed_len, const void *in, void *out,
                 size_t len);
/*
 * Check and decrypt one message: ad is the fixed part of its header as
 * received. 0: authentic and new, out (may be in) holds the plain bytes and
 * the counter is remembered; -1: the tag does not verify (out is zeroed);
 * -2: a counter already accepted or too old (a replay; nothing decrypted).
 */
int rm_seal_open_msg(rm_seal_t *s, const uint8_t *ad, size_t ad_len, uint64_t counter,
                     const uint8_t tag[RM_SEAL_TAG_LEN], const void *in, void *out, size_t len);
/* Whether a counter could still be accepted (not seen, not too old). */
int rm_seal_fresh(const rm_seal_t *s, uint64_t counter);

/* A bootstrap payload (CONNECT, CONNECT_REPLY): out gets len + RM_SEAL_BOOT_EXTRA
 * bytes; the frame's type, flags and status are additional data. Each
 * direction seals exactly one such payload per connection. */
void rm_seal_boot(rm_seal_t *s, unsigned type, unsigned flags, int32_t status, const void *in,
                  size_t len, uint8_t *out);
/* 0 and len - RM_SEAL_BOOT_EXTRA plain bytes in out; -1 when not authentic. */
int  rm_seal_boot_open(rm_seal_t *s, unsigned type, unsigned flags, int32_t status,
                       const uint8_t *in, size_t len, uint8_t *out);

/* ------------------------------------------------------------ peer hooks */

/* Start sealing the peer's connection (after AUTH); REMORA_ERR_NO_MEMORY. */
remora_status_t rm_peer_seal_start(rm_peer_t *peer, rm_seal_role_t role, const void *token,
                                   size_t token_len, const uint8_t server_nonce[RM_NONCE_LEN],
                                   const uint8_t client_nonce[RM_NONCE_LEN]);
/* Wipe and free the keys (rm_peer_close does). */
void rm_peer_seal_stop(rm_peer_t *peer);

/* Sending (ep.c): mark the encoded header sealed, encrypt the body into a new
 * buffer (*cipher_p, NULL for an empty body; free() it after the send),
 * extend *hlen_p. -1 when out of memory. */
int rm_peer_seal_send(rm_peer_t *peer, uint8_t *hdr, size_t *hlen_p, const void *body,
                      size_t len, void **cipher_p);
/* Receiving (engine.c's AM handler, for a sealed peer): check and decrypt an
 * eager message and hand the plain one to on_message. A rendezvous body is
 * handed on still encrypted, after its header was checked: the receiver
 * opens it with rm_peer_seal_open once it has landed. A message that fails
 * a check is dropped and the connection fails (REMORA_ERR_PROTOCOL, at the
 * next tick). */
ucs_status_t rm_peer_seal_recv(rm_peer_t *peer, const void *header, size_t header_len,
                               void *data, size_t len, const ucp_am_recv_param_t *param);
/* Open a rendezvous body that landed in buf, in place. REMORA_ERR_PROTOCOL
 * (buf zeroed, connection failing) when not authentic or replayed. */
remora_status_t rm_peer_seal_open(rm_peer_t *peer, const rm_hdr_t *hdr, void *buf, size_t len);

/* Handshake payloads: a malloc()ed sealed (wrap) or plain (unwrap) copy.
 * Unwrap fails with REMORA_ERR_PROTOCOL when the payload is not authentic. */
remora_status_t rm_peer_seal_wrap(rm_peer_t *peer, unsigned type, unsigned flags,
                                  int32_t status, const void *in, size_t len, uint8_t **out_p,
                                  size_t *out_len_p);
remora_status_t rm_peer_seal_unwrap(rm_peer_t *peer, unsigned type, unsigned flags,
                                    int32_t status, const void *in, size_t len, uint8_t **out_p,
                                    size_t *out_len_p);

#endif
