/* SPDX-License-Identifier: BSD-3-Clause */
#include "remote/auth.h"

#include <string.h>

#include <sodium.h>

void rm_auth_proof(rm_auth_role_t role, const void *token, size_t token_len,
                   const uint8_t server_nonce[RM_NONCE_LEN],
                   const uint8_t client_nonce[RM_NONCE_LEN], uint8_t mac[RM_MAC_LEN])
{
    static const char *labels[] = {"remora-v1 client proof", "remora-v1 server proof"};
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, token, token_len);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)labels[role], strlen(labels[role]));
    crypto_auth_hmacsha256_update(&st, server_nonce, RM_NONCE_LEN);
    crypto_auth_hmacsha256_update(&st, client_nonce, RM_NONCE_LEN);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

int rm_auth_check(rm_auth_role_t role, const void *token, size_t token_len,
                  const uint8_t server_nonce[RM_NONCE_LEN],
                  const uint8_t client_nonce[RM_NONCE_LEN], const uint8_t mac[RM_MAC_LEN])
{
    uint8_t expect[RM_MAC_LEN];

    rm_auth_proof(role, token, token_len, server_nonce, client_nonce, expect);
    return crypto_verify_32(expect, mac) == 0 ? 0 : -1;
}

void rm_auth_nonce(uint8_t nonce[RM_NONCE_LEN]) { randombytes_buf(nonce, RM_NONCE_LEN); }

int rm_auth_ticket_check(const uint8_t expect[RM_CM_TICKET_LEN], const uint8_t *got, size_t len)
{
    _Static_assert(RM_CM_TICKET_LEN == 32, "crypto_verify_32 compares 32 bytes");
    return len == RM_CM_TICKET_LEN && crypto_verify_32(expect, got) == 0 ? 0 : -1;
}

uint64_t rm_auth_random_u64(void)
{
    uint64_t v;
    randombytes_buf(&v, sizeof(v));
    return v;
}
