/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of src/engine/seal.c: key derivation, sealing and opening of
 * messages and handshake payloads, tampering (body, header, tag, counter),
 * replays and the sliding window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "engine/seal.h"

static const char TOKEN[] = "a-token-of-24-bytes-long";

typedef struct {
    rm_seal_t *client, *server;
} pair_t;

static void nonces(uint8_t sn[RM_NONCE_LEN], uint8_t cn[RM_NONCE_LEN])
{
    for (int i = 0; i < RM_NONCE_LEN; i++) {
        sn[i] = (uint8_t)i;
        cn[i] = (uint8_t)(0x80 + i);
    }
}

static int setup(void **state)
{
    uint8_t sn[RM_NONCE_LEN], cn[RM_NONCE_LEN];
    pair_t *p = calloc(1, sizeof(*p));

    if (sodium_init() < 0 || p == NULL)
        return -1;
    nonces(sn, cn);
    p->client = rm_seal_new(RM_SEAL_CLIENT, TOKEN, strlen(TOKEN), sn, cn);
    p->server = rm_seal_new(RM_SEAL_SERVER, TOKEN, strlen(TOKEN), sn, cn);
    *state    = p;
    return p->client && p->server ? 0 : -1;
}

static int teardown(void **state)
{
    pair_t *p = *state;
    rm_seal_free(p->client);
    rm_seal_free(p->server);
    free(p);
    return 0;
}

/* A sealed message as it goes on the wire: header bytes and ciphertext. */
typedef struct {
    uint8_t hdr[RM_HDR_MAX];
    size_t  fixed, hlen;
    uint8_t body[256];
    size_t  len;
} msg_t;

static void seal_one(rm_seal_t *s, msg_t *m, const char *text)
{
    rm_hdr_t h = {.type = RM_MSG_READ, .req_id = 42, .region_id = 7, .offset = 4096,
                  .length = strlen(text)};

    memset(m, 0, sizeof(*m));
    m->fixed = rm_hdr_encode(&h, m->hdr);
    m->hdr[2] |= RM_HDR_FLAG_SEALED;
    m->len = strlen(text);
    rm_seal_msg(s, m->hdr, m->fixed, text, m->body, m->len);
    m->hlen = m->fixed + RM_HDR_SEAL_EXT;
}

static int open_one(rm_seal_t *s, const msg_t *m, uint8_t *out)
{
    rm_hdr_t h;

    if (rm_hdr_decode(m->hdr, m->hlen, &h) != 0 || !h.sealed)
        return -3;
    return rm_seal_open_msg(s, m->hdr, m->fixed, h.seal_counter, h.seal_tag, m->body, out,
                            m->len);
}

/* Client and server derive matching keys; each direction has its own. */
static void test_keys_pair_and_differ(void **state)
{
    pair_t *p = *state;

    assert_memory_equal(p->client->tx_key, p->server->rx_key, RM_SEAL_KEY_LEN);
    assert_memory_equal(p->client->rx_key, p->server->tx_key, RM_SEAL_KEY_LEN);
    assert_memory_not_equal(p->client->tx_key, p->client->rx_key, RM_SEAL_KEY_LEN);
}

/* Keys depend on the token and on both nonces, and are not the token. */
static void test_keys_depend_on_inputs(void **state)
{
    pair_t *p = *state;
    uint8_t sn[RM_NONCE_LEN], cn[RM_NONCE_LEN];
    rm_seal_t *other;

    nonces(sn, cn);
    other = rm_seal_new(RM_SEAL_CLIENT, "another-token-of-24-byte", 24, sn, cn);
    assert_memory_not_equal(other->tx_key, p->client->tx_key, RM_SEAL_KEY_LEN);
    rm_seal_free(other);
    sn[0] ^= 1;
    other = rm_seal_new(RM_SEAL_CLIENT, TOKEN, strlen(TOKEN), sn, cn);
    assert_memory_not_equal(other->tx_key, p->client->tx_key, RM_SEAL_KEY_LEN);
    rm_seal_free(other);
    sn[0] ^= 1;
    cn[RM_NONCE_LEN - 1] ^= 1;
    other = rm_seal_new(RM_SEAL_CLIENT, TOKEN, strlen(TOKEN), sn, cn);
    assert_memory_not_equal(other->tx_key, p->client->tx_key, RM_SEAL_KEY_LEN);
    rm_seal_free(other);
    assert_memory_not_equal(p->client->tx_key, TOKEN, RM_SEAL_KEY_LEN);
}

/* Round trip; the ciphertext does not contain the plain text. */
static void test_round_trip(void **state)
{
    pair_t *p = *state;
    const char *text = "MARKER-MARKER-MARKER-MARKER";
    uint8_t out[256];
    msg_t m;

    seal_one(p->client, &m, text);
    assert_null(memmem(m.body, m.len, "MARKER", 6));
    assert_int_equal(open_one(p->server, &m, out), 0);
    assert_memory_equal(out, text, m.len);
}

/* A flipped bit anywhere (body, fixed header, tag, counter) fails. */
static void test_tamper(void **state)
{
    pair_t *p = *state;
    uint8_t out[256];
    msg_t m, t;
    size_t where[][2] = {{0, 5}, {1, 0}, {1, 8}, {1, 24}, {2, 0}, {2, 15}, {3, 0}};

    seal_one(p->client, &m, "some body bytes");
    for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
        t = m;
        switch (where[i][0]) {
        case 0: t.body[where[i][1]] ^= 0x01; break;                /* body */
        case 1: t.hdr[where[i][1]] ^= 0x01; break;                 /* fixed header */
        case 2: t.hdr[t.fixed + 8 + where[i][1]] ^= 0x80; break;   /* tag */
        case 3: t.hdr[t.fixed + where[i][1]] ^= 0x02; break;       /* counter */
        }
        int rc = open_one(p->server, &t, out);
        assert_true(rc == -1 || rc == -3); /* -3: the header no longer decodes */
    }
    /* The untouched message still opens: failures remembered nothing. */
    assert_int_equal(open_one(p->server, &m, out), 0);
}

/* A message sealed by the server does not open as one from the client
 * (direction), and a message opens only once (replay). */
static void test_direction_and_replay(void **state)
{
    pair_t *p = *state;
    uint8_t out[256];
    msg_t m;

    seal_one(p->server, &m, "reply");
    assert_int_equal(open_one(p->server, &m, out), -1); /* reflected back */
    assert_int_equal(open_one(p->client, &m, out), 0);
    assert_int_equal(open_one(p->client, &m, out), -2); /* replayed */
}

/* Out of order within the window is fine; older than the window, or counter
 * 0, is refused. */
static void test_window(void **state)
{
    pair_t *p = *state;
    uint8_t out[256];
    msg_t first, m;

    seal_one(p->client, &first, "first");
    for (unsigned i = 0; i < RM_SEAL_WINDOW / 2; i++) {
        seal_one(p->client, &m, "x");
        assert_int_equal(open_one(p->server, &m, out), 0);
    }
    assert_int_equal(open_one(p->server, &first, out), 0); /* late, but inside */
    assert_int_equal(open_one(p->server, &first, out), -2);

    seal_one(p->client, &first, "old");
    for (unsigned i = 0; i < RM_SEAL_WINDOW; i++) {
        seal_one(p->client, &m, "y");
        assert_int_equal(open_one(p->server, &m, out), 0);
    }
    assert_int_equal(open_one(p->server, &first, out), -2); /* too old */
    assert_false(rm_seal_fresh(p->server, 0));
}

/* An empty body still authenticates its header. */
static void test_empty_body(void **state)
{
    pair_t *p = *state;
    uint8_t out[1];
    msg_t m;

    seal_one(p->client, &m, "");
    assert_int_equal(open_one(p->server, &m, out), 0);
    seal_one(p->client, &m, "");
    m.hdr[8] ^= 1; /* req_id */
    assert_int_equal(open_one(p->server, &m, out), -1);
}

/* Handshake payloads: round trip; type, flags and status are bound. */
static void test_boot(void **state)
{
    pair_t *p = *state;
    const char addr[] = "worker-address-bytes";
    uint8_t sealed[sizeof(addr) + RM_SEAL_BOOT_EXTRA], out[sizeof(addr)];

    rm_seal_boot(p->client, RM_BOOT_CONNECT, RM_BOOT_CM, 0, addr, sizeof(addr), sealed);
    assert_null(memmem(sealed, sizeof(sealed), "worker", 6));
    assert_int_equal(rm_seal_boot_open(p->server, RM_BOOT_CONNECT, RM_BOOT_CM, 0, sealed,
                                       sizeof(sealed), out), 0);
    assert_memory_equal(out, addr, sizeof(addr));
    assert_int_equal(rm_seal_boot_open(p->server, RM_BOOT_CONNECT, 0, 0, sealed,
                                       sizeof(sealed), out), -1);
    assert_int_equal(rm_seal_boot_open(p->server, RM_BOOT_CONNECT_REPLY, RM_BOOT_CM, 0, sealed,
                                       sizeof(sealed), out), -1);
    assert_int_equal(rm_seal_boot_open(p->client, RM_BOOT_CONNECT, RM_BOOT_CM, 0, sealed,
                                       sizeof(sealed), out), -1); /* wrong direction */
    sealed[3] ^= 4;
    assert_int_equal(rm_seal_boot_open(p->server, RM_BOOT_CONNECT, RM_BOOT_CM, 0, sealed,
                                       sizeof(sealed), out), -1);
    assert_int_equal(rm_seal_boot_open(p->server, RM_BOOT_CONNECT, RM_BOOT_CM, 0, sealed,
                                       RM_SEAL_BOOT_EXTRA - 1, out), -1);
}

/* The wire header: the sealed flag and extension round-trip; a sealed
 * header of the wrong length is malformed. */
static void test_header_extension(void **state)
{
    rm_hdr_t h = {.type = RM_MSG_PING, .req_id = 9, .sealed = 1, .seal_counter = 0x0102030405ull};
    rm_hdr_t d;
    uint8_t buf[RM_HDR_MAX];
    size_t n;

    memset(h.seal_tag, 0xab, sizeof(h.seal_tag));
    n = rm_hdr_encode(&h, buf);
    assert_int_equal(n, 16 + RM_HDR_SEAL_EXT);
    assert_int_equal(buf[2], RM_HDR_FLAG_SEALED);
    assert_int_equal(rm_hdr_decode(buf, n, &d), 0);
    assert_true(d.sealed);
    assert_int_equal(d.seal_counter, h.seal_counter);
    assert_memory_equal(d.seal_tag, h.seal_tag, RM_SEAL_TAG_LEN);
    assert_int_not_equal(rm_hdr_decode(buf, 16, &d), 0);
    buf[2] = 0;
    assert_int_not_equal(rm_hdr_decode(buf, n, &d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keys_pair_and_differ, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys_depend_on_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tamper, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direction_and_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_boot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_extension, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
