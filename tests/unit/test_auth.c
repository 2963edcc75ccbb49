/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of src/remote/auth.c: the HMAC-SHA256 challenge-response proof
 * and its constant-time check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "remote/auth.h"

static const char TOKEN[] = "secret-token";

typedef struct {
    uint8_t server_nonce[RM_NONCE_LEN];
    uint8_t client_nonce[RM_NONCE_LEN];
} nonces_t;

static nonces_t fixed_nonces(void)
{
    nonces_t n;
    for (int i = 0; i < RM_NONCE_LEN; i++) {
        n.server_nonce[i] = (uint8_t)i;
        n.client_nonce[i] = (uint8_t)(0x40 + i);
    }
    return n;
}

static void proof(rm_auth_role_t role, const char *token, const nonces_t *n,
                  uint8_t mac[RM_MAC_LEN])
{
    rm_auth_proof(role, token, strlen(token), n->server_nonce, n->client_nonce, mac);
}

static int setup(void **state)
{
    return sodium_init() < 0 ? -1 : 0;
}

/* The proof is HMAC-SHA256(token, label || server_nonce || client_nonce),
 * checked against values computed independently (Python's hmac module). */
static void test_proof_known_answer(void **state)
{
    static const uint8_t client_expect[RM_MAC_LEN] = {
        0x72, 0x76, 0x61, 0xb2, 0x4f, 0xb5, 0x10, 0xa1, 0x2c, 0xf0, 0x0e,
        0x76, 0x2f, 0x89, 0x86, 0x29, 0xe6, 0xa7, 0x35, 0x3b, 0x57, 0x34,
        0x38, 0x89, 0x73, 0xa2, 0x57, 0x55, 0x53, 0x66, 0xbf, 0xb3};
    static const uint8_t server_expect[RM_MAC_LEN] = {
        0xc2, 0x3c, 0x69, 0xd6, 0x06, 0x3f, 0xc1, 0x36, 0xa9, 0xd0, 0x4f,
        0xea, 0x1d, 0x95, 0x25, 0xf5, 0xe3, 0xdf, 0x99, 0x58, 0x16, 0x18,
        0x7e, 0x24, 0x9a, 0x5e, 0x55, 0xc2, 0x4f, 0xe7, 0x67, 0x33};
    nonces_t n = fixed_nonces();
    uint8_t mac[RM_MAC_LEN];

    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &n, mac);
    assert_memory_equal(mac, client_expect, RM_MAC_LEN);
    proof(RM_AUTH_SERVER_PROOF, TOKEN, &n, mac);
    assert_memory_equal(mac, server_expect, RM_MAC_LEN);
}

/* The same inputs give the same proof. */
static void test_proof_deterministic(void **state)
{
    nonces_t n = fixed_nonces();
    uint8_t a[RM_MAC_LEN], b[RM_MAC_LEN];

    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &n, a);
    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &n, b);
    assert_memory_equal(a, b, RM_MAC_LEN);
}

/* The client's and the server's proofs differ (no reflection). */
static void test_proof_differs_by_role(void **state)
{
    nonces_t n = fixed_nonces();
    uint8_t a[RM_MAC_LEN], b[RM_MAC_LEN];

    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &n, a);
    proof(RM_AUTH_SERVER_PROOF, TOKEN, &n, b);
    assert_memory_not_equal(a, b, RM_MAC_LEN);
}

/* A different token, even one byte longer or shorter, gives another proof. */
static void test_proof_differs_by_token(void **state)
{
    nonces_t n = fixed_nonces();
    uint8_t a[RM_MAC_LEN], b[RM_MAC_LEN];

    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &n, a);
    proof(RM_AUTH_CLIENT_PROOF, "secret-tokeN", &n, b);
    assert_memory_not_equal(a, b, RM_MAC_LEN);
    proof(RM_AUTH_CLIENT_PROOF, "secret-token!", &n, b);
    assert_memory_not_equal(a, b, RM_MAC_LEN);
    proof(RM_AUTH_CLIENT_PROOF, "secret-toke", &n, b);
    assert_memory_not_equal(a, b, RM_MAC_LEN);
    proof(RM_AUTH_CLIENT_PROOF, "", &n, b);
    assert_memory_not_equal(a, b, RM_MAC_LEN);
}

/* Changing any single byte of either nonce changes the proof, and swapping
 * the two nonces does too. */
static void test_proof_differs_by_each_nonce(void **state)
{
    nonces_t n = fixed_nonces(), m;
    uint8_t a[RM_MAC_LEN], b[RM_MAC_LEN];

    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &n, a);
    for (int i = 0; i < RM_NONCE_LEN; i++) {
        m = n;
        m.server_nonce[i] ^= 0x80;
        proof(RM_AUTH_CLIENT_PROOF, TOKEN, &m, b);
        assert_memory_not_equal(a, b, RM_MAC_LEN);
        m = n;
        m.client_nonce[i] ^= 0x01;
        proof(RM_AUTH_CLIENT_PROOF, TOKEN, &m, b);
        assert_memory_not_equal(a, b, RM_MAC_LEN);
    }
    memcpy(m.server_nonce, n.client_nonce, RM_NONCE_LEN);
    memcpy(m.client_nonce, n.server_nonce, RM_NONCE_LEN);
    proof(RM_AUTH_CLIENT_PROOF, TOKEN, &m, b);
    assert_memory_not_equal(a, b, RM_MAC_LEN);
}

/* The check accepts the right MAC and rejects it with any one bit flipped,
 * with the other role's MAC, and under another token. */
static void test_check(void **state)
{
    nonces_t n = fixed_nonces();
    uint8_t mac[RM_MAC_LEN];
    const size_t tl = strlen(TOKEN);

    proof(RM_AUTH_SERVER_PROOF, TOKEN, &n, mac);
    assert_int_equal(rm_auth_check(RM_AUTH_SERVER_PROOF, TOKEN, tl, n.server_nonce,
                                   n.client_nonce, mac), 0);
    for (int bit = 0; bit < RM_MAC_LEN * 8; bit++) {
        mac[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_equal(rm_auth_check(RM_AUTH_SERVER_PROOF, TOKEN, tl, n.server_nonce,
                                       n.client_nonce, mac), -1);
        mac[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    assert_int_equal(rm_auth_check(RM_AUTH_CLIENT_PROOF, TOKEN, tl, n.server_nonce,
                                   n.client_nonce, mac), -1);
    assert_int_equal(rm_auth_check(RM_AUTH_SERVER_PROOF, "other", 5, n.server_nonce,
                                   n.client_nonce, mac), -1);
}

/* Two fresh nonces are not equal (32 random bytes each). */
static void test_nonce_fresh(void **state)
{
    uint8_t a[RM_NONCE_LEN], b[RM_NONCE_LEN];

    rm_auth_nonce(a);
    rm_auth_nonce(b);
    assert_memory_not_equal(a, b, RM_NONCE_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proof_known_answer),
        cmocka_unit_test(test_proof_deterministic),
        cmocka_unit_test(test_proof_differs_by_role),
        cmocka_unit_test(test_proof_differs_by_token),
        cmocka_unit_test(test_proof_differs_by_each_nonce),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_nonce_fresh),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
