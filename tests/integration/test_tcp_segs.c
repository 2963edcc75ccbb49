/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCX's TCP segment sizes across a connection (src/engine/tcp_segs.c,
 * docs/protocol.md §4.2). UCX's TCP transport aborts a process that receives
 * a segment larger than its receive segments, so peers tell each other
 * theirs in the hello and refuse a misfit before any UCX endpoint exists:
 * - a client whose send segments the server cannot receive, and one that
 *   cannot receive the server's, stop after the hello and say what to set;
 *   the server logs the refusal and keeps serving;
 * - an older client (a 70-byte hello, taken for remora's old 256k/512k)
 *   that does not fit gets the server's hello and then UNSUPPORTED for its
 *   next frame;
 * - peers that agree on small segments move data byte-exact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "raw_boot.h"

static const char *const small[] = {"UCX_TCP_TX_SEG_SIZE=8k", "UCX_TCP_RX_SEG_SIZE=64k", NULL};
static const char *const large[] = {"UCX_TCP_TX_SEG_SIZE=256k", "UCX_TCP_RX_SEG_SIZE=512k", NULL};

/* `remora ls ADDR` under env must fail naming hint; the server logs its
 * refusal and still serves a client that fits. */
static void assert_refused(const char *const *server_env, const char *const *client_env,
                           const char *hint)
{
    it_server_t s;
    it_run_t r;
    char region[IT_ADDR_MAX + 8], *log;

    assert_int_equal(it_server_start_env(&s, server_env, "--region", "a=1M", NULL), 0);
    snprintf(region, sizeof(region), "%s/a", s.addr);
    it_cli_run_env(&r, 20000, client_env, NULL, "ls", s.addr, NULL);
    if (r.status == 0 || strstr(r.err, hint) == NULL)
        fprintf(stderr, "ls: status %d, stderr:\n%s\n", r.status, r.err);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.err, hint));
    it_run_free(&r);

    it_cli_run_env(&r, 20000, server_env, NULL, "read", region, "--verify", NULL);
    if (r.status != 0)
        fprintf(stderr, "read: status %d, stderr:\n%s\n", r.status, r.err);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    log = it_server_log(&s);
    assert_non_null(strstr(log, "refusing client"));
    free(log);
    assert_int_equal(it_server_stop(&s), 0);
}

static void test_client_sends_too_large(void **state)
{
    (void)state;
    assert_refused(small, large, "UCX_TCP_TX_SEG_SIZE=64k");
}

static void test_client_receives_too_small(void **state)
{
    (void)state;
    assert_refused(large, small, "UCX_TCP_RX_SEG_SIZE=256k");
}

/* An older client's hello (70 bytes, no sizes: 256k/512k assumed). */
static void test_older_client_refused_at_connect(void **state)
{
    rm_hello_t mine = {.proto_min = RM_PROTO_VERSION, .proto_max = RM_PROTO_VERSION}, theirs;
    const uint8_t *rest;
    uint32_t rest_len;
    remora_status_t st;
    it_server_t s;
    rb_sock_t sock;
    rb_frame_t f;
    rm_wbuf_t w;
    void *out;
    size_t out_len;

    (void)state;
    assert_int_equal(it_server_start_env(&s, small, "--region", "a=1M", NULL), 0);
    assert_int_equal(rb_dial(&sock, s.addr), 0);
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &mine);
    assert_false(w.failed);
    assert_int_equal(rb_send_frame(&sock, RM_BOOT_HELLO, 0, w.data, 70), 0);
    rm_wbuf_free(&w);

    /* The server still answers with its hello, its sizes in it... */
    assert_int_equal(rb_recv(&sock, 5000, true, &f), 0);
    assert_int_equal(f.type, RM_BOOT_HELLO_REPLY);
    assert_int_equal(rm_boot_reply_split(&(rm_boot_frame_t){.payload = f.payload, .len = f.len},
                                         &st, &rest, &rest_len),
                     0);
    it_assert_ok(st);
    assert_int_equal(rm_hello_decode(rest, rest_len, &theirs), 0);
    assert_int_equal(theirs.tcp_segs_sent, 1);
    assert_int_equal(theirs.tcp_tx_seg, 8u << 10);
    assert_int_equal(theirs.tcp_rx_seg, 64u << 10);
    rb_frame_free(&f);

    /* ... and refuses what comes next, before UCX sees anything. */
    st = rb_connect(&sock, "not a worker address", 20, &out, &out_len);
    assert_int_equal(st, REMORA_ERR_UNSUPPORTED);
    free(out);
    assert_true(rb_closed_within(&sock, 5000, NULL));
    rb_close(&sock);
    assert_true(it_server_alive(&s));
    assert_int_equal(it_server_stop(&s), 0);
}

/* Both sides on UCX's own 8k/64k: reads and writes byte-exact (on UCX 1.13
 * rendezvous data then goes as 8 KiB fragments). */
static void test_small_segments_move_data(void **state)
{
    it_server_t s;
    it_run_t r;
    char path[512], region[IT_ADDR_MAX + 8];
    size_t len = 3u << 20;
    uint8_t *data = malloc(len);

    (void)state;
    assert_non_null(data);
    it_fill_random(data, len, 37);
    it_tmp_path(path, sizeof(path), "segs.in");
    assert_int_equal(it_write_file(path, data, len), 0);
    assert_int_equal(it_server_start_env(&s, small, "--region", "w=4M:zero", "--writable", NULL),
                     0);
    snprintf(region, sizeof(region), "%s/w", s.addr);
    it_cli_run_env(&r, 30000, small, NULL, "write", region, "-i", path, NULL);
    if (r.status != 0)
        fprintf(stderr, "write: status %d, stderr:\n%s\n", r.status, r.err);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    it_cli_run_env(&r, 30000, small, NULL, "read", region, "--length", "3M", "-o", "-", NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.out_len, len);
    assert_memory_equal(r.out, data, len);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_client_sends_too_large, it_teardown_reap),
        cmocka_unit_test_teardown(test_client_receives_too_small, it_teardown_reap),
        cmocka_unit_test_teardown(test_older_client_refused_at_connect, it_teardown_reap),
        cmocka_unit_test_teardown(test_small_segments_move_data, it_teardown_reap),
    };

    it_init("tcp_segs");
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
