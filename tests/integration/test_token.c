/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A server with --token-file: only clients that know the token get anywhere.
 * The token file ends with a newline, which the CLI strips; the library
 * clients here pass the bare bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define TOKEN "s3cret-token-for-remora-tests"

static it_server_t g_s;
static char g_token_file[512], g_wrong_file[512];

static int group_setup(void **state)
{
    (void)state;
    it_tmp_path(g_token_file, sizeof(g_token_file), "token");
    it_tmp_path(g_wrong_file, sizeof(g_wrong_file), "wrong-token");
    if (it_write_file(g_token_file, TOKEN "\n", strlen(TOKEN) + 1) != 0 ||
        it_write_file(g_wrong_file, "S3cret-token-for-remora-tests\n", strlen(TOKEN) + 1) != 0)
        return -1;
    return it_server_start(&g_s, "--region", "a=1M", "--token-file", g_token_file, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = it_server_stop(&g_s) == 0 ? 0 : -1;
    it_reap_all();
    return rc;
}

static remora_client_params_t token_params(const char *tok, size_t len)
{
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_TOKEN, .token = tok,
                                .token_len = len};
    return p;
}

/* The right token: connect, list, read, all work. */
static void test_right_token_works(void **state)
{
    remora_client_params_t p = token_params(TOKEN, strlen(TOKEN));
    it_client_t c;
    remora_region_info_t *infos = NULL;
    size_t n = 0;
    uint8_t buf[4096];
    (void)state;

    it_assert_ok(it_client_open(&c, g_s.addr, &p));
    it_assert_ok(remora_client_list(c.client, &infos, &n));
    assert_int_equal(n, 1);
    assert_string_equal(infos[0].name, "a");
    remora_region_info_free(infos);
    it_assert_ok(remora_client_read(c.client, "a", 1000, buf, sizeof(buf)));
    it_assert_pattern(buf, 1000, sizeof(buf));
    it_client_close(&c);
}

/* A wrong token fails the connect with REMORA_ERR_AUTH: one byte off, a
 * prefix, a longer one, the right one plus the newline the CLI strips.
 * Repeated 200 times: the client must report the refusal as AUTH every time,
 * never as whatever a closing connection looks like. (Regression: with the
 * library as of commit 96c25fd the server force-closed a refused connection
 * as soon as its AUTH_REPLY was sent, and 1 to 50% of attempts got
 * CONNECTION_REFUSED instead.) */
static void test_wrong_token_is_auth_error(void **state)
{
    static const char *wrong[] = {
        "S3cret-token-for-remora-tests", "s3cret-token-for-remora-test",
        TOKEN "x", TOKEN "\n", "0123456789abcdef",
    };
    (void)state;

    for (size_t i = 0; i < 40 * sizeof(wrong) / sizeof(wrong[0]); i++) {
        const char *tok = wrong[i % (sizeof(wrong) / sizeof(wrong[0]))];
        remora_client_params_t p = token_params(tok, strlen(tok));
        it_client_t c;
        remora_status_t st = it_client_open(&c, g_s.addr, &p);
        if (st != REMORA_ERR_AUTH) {
            if (st == REMORA_OK)
                it_client_close(&c);
            fail_msg("attempt %zu, token '%s': %s, expected %s", i + 1, tok,
                     remora_status_string(st), remora_status_string(REMORA_ERR_AUTH));
        }
        assert_null(c.client);
    }
}

/* Tokens shorter than REMORA_TOKEN_MIN are refused before anything is sent,
 * by clients and by servers. */
static void test_short_token_is_invalid(void **state)
{
    remora_client_params_t p = token_params("fifteen-bytes!!", 15);
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_TOKEN,
                                 .token = "x", .token_len = 1};
    remora_context_h ctx;
    remora_server_h srv = NULL;
    it_client_t c;
    (void)state;

    it_assert_status(it_client_open(&c, g_s.addr, &p), REMORA_ERR_INVALID_PARAM);
    it_assert_ok(remora_context_create(NULL, &ctx));
    it_assert_status(remora_server_create(ctx, &sp, &srv), REMORA_ERR_INVALID_PARAM);
    assert_null(srv);
    remora_context_destroy(ctx);
}

/* No token at all: REMORA_ERR_AUTH too. */
static void test_no_token_is_auth_error(void **state)
{
    it_client_t c;
    (void)state;

    it_assert_status(it_client_open(&c, g_s.addr, NULL), REMORA_ERR_AUTH);
}

/* A client that holds a token refuses a server that does not ask for one
 * (docs/protocol.md §6: it expects the server to prove it knows the token). */
static void test_token_client_refuses_open_server(void **state)
{
    remora_client_params_t p = token_params(TOKEN, strlen(TOKEN));
    it_server_t open_server;
    it_client_t c;
    (void)state;

    it_must_start(&open_server, "--region", "a=4K", NULL);
    it_assert_status(it_client_open(&c, open_server.addr, &p), REMORA_ERR_AUTH);
    it_assert_ok(it_client_open(&c, open_server.addr, NULL));
    it_client_close(&c);
    assert_int_equal(it_server_stop(&open_server), 0);
}

/* After all the refused attempts the server still serves the right token. */
static void test_server_still_serves(void **state)
{
    (void)state;
    test_right_token_works(state);
    assert_true(it_server_alive(&g_s));
}

/* CLI: a bad token file, or none, exits 1 with one line about authentication. */
static void test_cli_bad_token(void **state)
{
    it_run_t r;
    (void)state;

    for (int i = 0; i < 20; i++) { /* repeated: see test_wrong_token_is_auth_error */
        it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", g_s.addr, "--token-file", g_wrong_file, NULL);
        assert_int_equal(r.status, 1);
        assert_int_equal(it_count_lines(r.err), 1);
        it_assert_contains(r.err, "authentication");
        assert_string_equal(r.out, "");
        it_run_free(&r);
    }

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", g_s.addr, NULL);
    assert_int_equal(r.status, 1);
    assert_int_equal(it_count_lines(r.err), 1);
    it_assert_contains(r.err, "authentication");
    it_run_free(&r);

    char target[IT_ADDR_MAX + 8];
    snprintf(target, sizeof(target), "%s/a", g_s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", target, "--verify", "--token-file", g_wrong_file,
               NULL);
    assert_int_equal(r.status, 1);
    it_assert_contains(r.err, "authentication");
    it_run_free(&r);
}

/* CLI: the right token file (trailing newline stripped) works. */
static void test_cli_right_token(void **state)
{
    it_run_t r;
    char target[IT_ADDR_MAX + 8];
    (void)state;

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", g_s.addr, "--token-file", g_token_file, NULL);
    if (r.status != 0)
        fail_msg("remora ls exited %d: %s", r.status, r.err);
    it_assert_contains(r.out, "a ");
    it_run_free(&r);
    snprintf(target, sizeof(target), "%s/a", g_s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", target, "--verify", "--token-file", g_token_file,
               NULL);
    if (r.status != 0)
        fail_msg("remora read --verify exited %d: %s", r.status, r.err);
    it_run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_token_works),
        cmocka_unit_test(test_wrong_token_is_auth_error),
        cmocka_unit_test(test_no_token_is_auth_error),
        cmocka_unit_test(test_short_token_is_invalid),
        cmocka_unit_test(test_cli_bad_token),
        cmocka_unit_test(test_cli_right_token),
        cmocka_unit_test(test_token_client_refuses_open_server),
        cmocka_unit_test(test_server_still_serves),
    };

    it_init("token");
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
