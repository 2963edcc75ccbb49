/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The `remora` command: every failure exits non-zero with exactly one clear
 * line on stderr ("remora: CMD TARGET: ..."), and data round trips through
 * files are byte-exact.
 *
 * Servers for the whole program:
 *   ro: a (1 MiB, pattern), z (64 KiB, zeros), read-only
 *   rw: w (48 MiB, zeros), --writable
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1024u * 1024u)

static it_server_t g_ro, g_rw;
static char g_a[IT_ADDR_MAX + 8], g_z[IT_ADDR_MAX + 8], g_w[IT_ADDR_MAX + 8];

static int group_setup(void **state)
{
    (void)state;
    if (it_server_start(&g_ro, "--region", "a=1M", "--region", "z=64K:zero", NULL) != 0 ||
        it_server_start(&g_rw, "--region", "w=48M:zero", "--writable", NULL) != 0)
        return -1;
    snprintf(g_a, sizeof(g_a), "%s/a", g_ro.addr);
    snprintf(g_z, sizeof(g_z), "%s/z", g_ro.addr);
    snprintf(g_w, sizeof(g_w), "%s/w", g_rw.addr);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = (it_server_stop(&g_ro) == 0 && it_server_stop(&g_rw) == 0) ? 0 : -1;
    it_reap_all();
    return rc;
}

/* The run failed the way a runtime or usage error must: the exit code, one
 * "remora: " line on stderr containing `needle`, nothing on stdout. */
static void assert_one_error_line(it_run_t *r, int exit_code, const char *needle)
{
    if (r->status != exit_code)
        fail_msg("exit status %d, expected %d; stderr:\n%s", r->status, exit_code, r->err);
    if (it_count_lines(r->err) != 1)
        fail_msg("expected exactly one stderr line, got %zu:\n%s", it_count_lines(r->err),
                 r->err);
    if (strncmp(r->err, "remora: ", 8) != 0)
        fail_msg("stderr line does not start with 'remora: ': %s", r->err);
    it_assert_contains(r->err, needle);
    if (r->out_len != 0)
        fail_msg("unexpected stdout: %s", r->out);
}

/* Malformed addresses are usage errors (exit 2) that say what is wrong. */
static void test_malformed_address(void **state)
{
    static const char *bad[] = {
        "foo/a", "127.0.0.1/a", "127.0.0.1:/a", "127.0.0.1:99999/a", "127.0.0.1:12x/a",
        ":1234/a", "[::1/a",
    };
    it_run_t r;
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", bad[i], NULL);
        assert_one_error_line(&r, 2, "bad address");
        it_assert_contains(r.err, bad[i]);
        it_run_free(&r);
    }
    /* A region name where none belongs, and none where one must be. */
    char t[IT_ADDR_MAX + 8];
    snprintf(t, sizeof(t), "%s/a", g_ro.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", t, NULL);
    assert_one_error_line(&r, 2, "unexpected region name");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_ro.addr, NULL);
    assert_one_error_line(&r, 2, "missing region name");
    it_run_free(&r);
    /* Option values too: a negative warm-up is a usage error. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", t, "--warmup", "-1", NULL);
    assert_one_error_line(&r, 2, "bad --warmup");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", t, "--warmup", "3", "--seconds", "2", NULL);
    assert_one_error_line(&r, 2, "leaves nothing");
    it_run_free(&r);
}

/* A port nothing listens on: exit 1, "connection refused", quickly. */
static void test_refused_connection(void **state)
{
    char addr[IT_ADDR_MAX], t[IT_ADDR_MAX + 8];
    int fd = it_refusing_port(addr);
    it_run_t r;
    (void)state;

    assert_true(fd >= 0);
    snprintf(t, sizeof(t), "%s/a", addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, "--verify", NULL);
    assert_one_error_line(&r, 1, "connection refused");
    it_assert_contains(r.err, addr);
    if (r.elapsed_ms > 5000)
        fail_msg("refused connection took %.0f ms to report", r.elapsed_ms);
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ping", addr, NULL);
    assert_one_error_line(&r, 1, "connection refused");
    it_run_free(&r);
    close(fd);
}

/* A region the server does not have. */
static void test_missing_region(void **state)
{
    char t[IT_ADDR_MAX + 8];
    it_run_t r;
    (void)state;

    snprintf(t, sizeof(t), "%s/nope", g_ro.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, NULL);
    assert_one_error_line(&r, 1, "region not found");
    it_assert_contains(r.err, "nope");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "bench", t, "--iters", "1", NULL);
    assert_one_error_line(&r, 1, "region not found");
    it_run_free(&r);
}

/* Offsets and lengths past the end of the region. */
static void test_out_of_range(void **state)
{
    it_run_t r;
    (void)state;

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_a, "--offset", "2M", NULL);
    assert_one_error_line(&r, 1, "out of range");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_a, "--offset", "1048575", "--length", "2",
               NULL);
    assert_one_error_line(&r, 1, "out of range");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "write", g_w, "--offset", "48M", "--pattern", "--length",
               "1", NULL);
    assert_one_error_line(&r, 1, "out of range");
    it_run_free(&r);
    /* The last byte itself is fine. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_a, "--offset", "1048575", "--length", "1",
               "--verify", NULL);
    if (r.status != 0)
        fail_msg("reading the last byte: exit %d: %s", r.status, r.err);
    it_run_free(&r);
}

/* Writing a read-only region. */
static void test_write_read_only(void **state)
{
    it_run_t r;
    (void)state;

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "write", g_a, "--pattern", "--length", "16", NULL);
    assert_one_error_line(&r, 1, "read-only");
    it_run_free(&r);
}

/* A wrong token file. */
static void test_bad_token(void **state)
{
    it_server_t s;
    char tok[512], bad[512], t[IT_ADDR_MAX + 8];
    it_run_t r;
    (void)state;

    it_tmp_path(tok, sizeof(tok), "cli-token");
    it_tmp_path(bad, sizeof(bad), "cli-bad-token");
    assert_int_equal(it_write_file(tok, "right-token-0123\n", 17), 0);
    assert_int_equal(it_write_file(bad, "wrong-token-0123\n", 17), 0);
    it_must_start(&s, "--region", "a=4K", "--token-file", tok, NULL);
    snprintf(t, sizeof(t), "%s/a", s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, "--verify", "--token-file", bad, NULL);
    assert_one_error_line(&r, 1, "authentication");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, "--verify", "--token-file", tok, NULL);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    /* A token shorter than 16 bytes (after its one trailing newline) is a
     * usage error that says how long it is, for clients and both servers. */
    char short_tok[512];
    it_tmp_path(short_tok, sizeof(short_tok), "cli-short-token");
    assert_int_equal(it_write_file(short_tok, "15-byte-token..\n", 16), 0);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, "--verify", "--token-file", short_tok, NULL);
    assert_one_error_line(&r, 2, "is 15 bytes; at least 16 are required");
    it_assert_contains(r.err, short_tok);
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "serve", "--listen", "127.0.0.1:0", "--token-file",
               short_tok, NULL);
    assert_one_error_line(&r, 2, "is 15 bytes; at least 16 are required");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "serve", "--listen", "127.0.0.1:0",
               "--token-file", short_tok, NULL);
    assert_one_error_line(&r, 2, "is 15 bytes; at least 16 are required");
    it_run_free(&r);
    /* Exactly 16 bytes is enough: the right length, the wrong token. */
    assert_int_equal(it_write_file(short_tok, "16-byte-token...\n", 17), 0);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, "--verify", "--token-file", short_tok, NULL);
    assert_one_error_line(&r, 1, "authentication");
    it_run_free(&r);
    /* A token file that does not exist is a usage error. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", s.addr, "--token-file", "/nonexistent/token", NULL);
    assert_one_error_line(&r, 2, "/nonexistent/token");
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);
}

/* :host places a region in host memory (beside --gpu ones); it follows a
 * pattern or zero fill, never a file's path, and nothing else may follow. */
static void test_region_placement(void **state)
{
    it_server_t s;
    it_run_t r;
    char t[160];

    assert_int_equal(it_server_start(&s, "--region", "h=64K:zero:host", "--region", "p=4K:host",
                                     NULL), 0);
    snprintf(t, sizeof(t), "%s/p", s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", t, "--verify", NULL);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);
    const char *bad[] = {"x=1M:hosts", "x=1M:host:zero", "x=1M:zero:host:host", "x=1M::host"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        it_cli_run(&r, IT_CLI_TIMEOUT_MS, "serve", "--listen", "127.0.0.1:0", "--region", bad[i],
                   NULL);
        assert_one_error_line(&r, 2, "[:host]");
        it_run_free(&r);
    }
}

/* read --verify: exit 0 on the pattern; exit 3 naming the first bad offset otherwise. */
static void test_read_verify(void **state)
{
    it_run_t r;
    (void)state;

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_a, "--verify", NULL);
    if (r.status != 0)
        fail_msg("read --verify exited %d: %s", r.status, r.err);
    it_assert_contains(r.err, "1048576");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_a, "--verify", "--offset", "4095", "--length",
               "300001", NULL);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    /* Zeros are not the pattern: the first byte of z already differs
     * (pattern byte 0 is 0xaf), so the bad offset named is 0 + the start. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_z, "--verify", "--offset", "100", NULL);
    if (r.status != 3)
        fail_msg("read --verify of zeros exited %d, expected 3: %s", r.status, r.err);
    it_assert_contains(r.err, "100");
    it_run_free(&r);
}

/* write -i FILE then read -o FILE: byte-exact, at an unaligned offset, more
 * than the CLI's 32 MiB streaming chunk; and read -o - to stdout. */
static void test_file_round_trip(void **state)
{
    const size_t len = 40u * MiB + 3u;
    char in[512], out[512], len_s[32];
    uint8_t *data = malloc(len), *back;
    size_t back_len = 0;
    it_run_t r;
    (void)state;

    assert_non_null(data);
    it_fill_random(data, len, 7);
    it_tmp_path(in, sizeof(in), "roundtrip.in");
    it_tmp_path(out, sizeof(out), "roundtrip.out");
    assert_int_equal(it_write_file(in, data, len), 0);
    snprintf(len_s, sizeof(len_s), "%zu", len);

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "write", g_w, "--offset", "5", "-i", in, NULL);
    if (r.status != 0)
        fail_msg("write -i exited %d: %s", r.status, r.err);
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_w, "--offset", "5", "--length", len_s, "-o", out,
               NULL);
    if (r.status != 0)
        fail_msg("read -o exited %d: %s", r.status, r.err);
    assert_int_equal(r.out_len, 0);
    it_run_free(&r);
    back = it_read_file(out, &back_len);
    assert_non_null(back);
    assert_int_equal(back_len, len);
    assert_memory_equal(back, data, len);
    free(back);

    /* The bytes around the written range are still zero. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_w, "--offset", "0", "--length", "5", "-o", "-",
               NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.out_len, 5);
    assert_memory_equal(r.out, "\0\0\0\0\0", 5);
    it_run_free(&r);

    /* stdin in, stdout out. */
    it_cli_run_env(&r, IT_CLI_TIMEOUT_MS, NULL, in, "write", g_w, "--offset", "45M", "--length",
                   "1000", NULL);
    if (r.status != 0)
        fail_msg("write -i - exited %d: %s", r.status, r.err);
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_w, "--offset", "45M", "--length", "1000", "-o",
               "-", NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.out_len, 1000);
    assert_memory_equal(r.out, data, 1000);
    it_run_free(&r);
    free(data);
}

/* write --pattern, then read --verify of the same range. */
static void test_write_pattern_then_verify(void **state)
{
    it_run_t r;
    (void)state;

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "write", g_w, "--offset", "46M", "--pattern", "--length",
               "1M", NULL);
    if (r.status != 0)
        fail_msg("write --pattern exited %d: %s", r.status, r.err);
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", g_w, "--offset", "46M", "--length", "1M",
               "--verify", NULL);
    if (r.status != 0)
        fail_msg("read --verify after write --pattern exited %d: %s", r.status, r.err);
    it_run_free(&r);
}

/* ls lists every region with its size, and --json is one object per line. */
static void test_ls(void **state)
{
    it_run_t r;
    (void)state;

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", g_ro.addr, NULL);
    assert_int_equal(r.status, 0);
    it_assert_contains(r.out, "1048576");
    it_assert_contains(r.out, "65536");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", g_ro.addr, "--json", NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(it_count_lines(r.out), 2);
    it_assert_contains(r.out, "\"name\":\"a\"");
    it_assert_contains(r.out, "\"size\":1048576");
    it_run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_address),
        cmocka_unit_test(test_refused_connection),
        cmocka_unit_test(test_missing_region),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_write_read_only),
        cmocka_unit_test(test_bad_token),
        cmocka_unit_test(test_read_verify),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_write_pattern_then_verify),
        cmocka_unit_test(test_ls),
        cmocka_unit_test(test_region_placement),
    };

    it_init("cli");
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
