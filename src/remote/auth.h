/* SPDX-License-Identifier: BSD-3-Clause */
/* Challenge-response with a shared token: each side proves it knows the token
 * by an HMAC-SHA256 over both nonces; the token itself never travels. */
#ifndef RM_REMOTE_AUTH_H
#define RM_REMOTE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

typedef enum { RM_AUTH_CLIENT_PROOF, RM_AUTH_SERVER_PROOF } rm_auth_role_t;

/* mac = HMAC(token, label(role) || server_nonce || client_nonce) */
void rm_auth_proof(rm_auth_role_t role, const void *token, size_t token_len,
                   const uint8_t server_nonce[RM_NONCE_LEN],
                   const uint8_t client_nonce[RM_NONCE_LEN], uint8_t mac[RM_MAC_LEN]);
/* Constant-time check of a received proof; 0 when it matches. */
int rm_auth_check(rm_auth_role_t role, const void *token, size_t token_len,
                  const uint8_t server_nonce[RM_NONCE_LEN],
                  const uint8_t client_nonce[RM_NONCE_LEN], const uint8_t mac[RM_MAC_LEN]);
void rm_auth_nonce(uint8_t nonce[RM_NONCE_LEN]);
uint64_t rm_auth_random_u64(void);
/* A connection-manager ticket (wire.h: RM_BOOT_CM; made as a nonce is)
 * against what a peer sent, in constant time: 0 when it matches. */
int rm_auth_ticket_check(const uint8_t expect[RM_CM_TICKET_LEN], const uint8_t *got, size_t len);

#endif
