/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Dead peers. A server that stops answering (SIGSTOP: the process is there,
 * its sockets open, so TCP reports nothing) must be taken for dead by its
 * clients within the peer timeout (2 s default; heartbeats every 500 ms):
 *   a. a blocking read, a blocking write and a ring subscription's
 *      remora_sub_next each fail with REMORA_ERR_DISCONNECTED within 2.5 s;
 *   b. `remora stream read` against a stopped `stream serve` exits non-zero
 *      within 5 s;
 *   c. without heartbeats from the server (REMORA_HEARTBEAT_MS=0 in its
 *      environment only), a read with a client timeout of 1000 ms fails
 *      after 1.0-1.6 s: a request's timeout is its own.
 * And a stall of one's own is not the peer's death:
 *   d. a server and its subscriber both stopped for 3 s (a VM paused, a host
 *      too loaded to run either), then resumed in either order: the
 *      subscription goes on and `remora stream read` exits 0.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define A_SIZE (256u * 1024u)
#define DEAD_MS 2500.0

/* Requests must reach the server: the map path (same host) reads without it. */
static const remora_client_params_t g_am = {.field_mask = REMORA_CLIENT_FIELD_PATH,
                                            .path = REMORA_PATH_AM};

typedef struct op {
    it_client_t     *c;
    int              write;
    double           t_stop;   /* when the server was stopped */
    remora_status_t  st;
    double           took_ms;  /* from t_stop */
} op_t;

static volatile double g_t_stop;

/* UCX 1.13.1 aborts when it discards an endpoint that still has a wire-up
 * reply queued: a server resumed after its clients gave up on it can hit
 * that (ucp_request.c:684 "got REP message", or tcp_ep.c:478). Only that
 * abort, on that UCX, is waived. */
static bool ucx_1_13_wakeup_abort(const it_server_t *s)
{
    remora_context_h ctx;
    remora_context_attr_t a = {0};
    char line[1024];
    bool hit = false;
    FILE *f;

    if (remora_context_create(NULL, &ctx) != REMORA_OK)
        return false;
    bool old = remora_context_query(ctx, &a) == REMORA_OK && a.ucx_major == 1 && a.ucx_minor <= 13;
    remora_context_destroy(ctx);
    if (!old || (f = fopen(s->log_path, "r")) == NULL)
        return false;
    while (!hit && fgets(line, sizeof(line), f))
        hit = strstr(line, "ucp_request.c:684") || strstr(line, "tcp_ep.c:478");
    fclose(f);
    return hit;
}

static void *blocking_op(void *arg)
{
    op_t *op = arg;
    uint8_t *buf = malloc(A_SIZE);

    while (g_t_stop == 0)
        it_sleep_ms(1);
    memset(buf, 0x5a, A_SIZE);
    op->st = op->write ? remora_client_write(op->c->client, "a", 0, buf, A_SIZE)
                       : remora_client_read(op->c->client, "a", 0, buf, A_SIZE);
    op->took_ms = it_now_ms() - g_t_stop;
    free(buf);
    return NULL;
}

static void test_stopped_server(void **state)
{
    it_server_t s, ss;
    it_client_t c_read, c_write, c_sub;
    remora_sub_h sub;
    uint8_t elem[64];
    remora_elem_info_t info = {0};
    pthread_t tr, tw;
    op_t r = {.c = &c_read}, w = {.c = &c_write, .write = 1};
    (void)state;

    it_must_start(&s, "--region", "a=256K", "--writable", NULL);
    it_must_start(&ss, "stream", "serve", "--ring", "r=64x16", "--rate", "100", NULL);
    it_assert_ok(it_client_open(&c_read, s.addr, &g_am));
    it_assert_ok(it_client_open(&c_write, s.addr, &g_am));
    it_assert_ok(it_client_open(&c_sub, ss.addr, NULL));
    it_assert_ok(remora_client_subscribe(c_sub.client, "r", NULL, &sub));
    it_assert_ok(remora_sub_next(sub, elem, sizeof(elem), &info, 5000));
    uint8_t probe[64];
    it_assert_ok(remora_client_read(c_read.client, "a", 0, probe, sizeof(probe)));

    g_t_stop = 0;
    assert_int_equal(pthread_create(&tr, NULL, blocking_op, &r), 0);
    assert_int_equal(pthread_create(&tw, NULL, blocking_op, &w), 0);
    assert_true(it_stop_process(s.pid, 2000));
    assert_true(it_stop_process(ss.pid, 2000));
    g_t_stop = it_now_ms();

    /* The subscription: every element it still holds, then the failure. */
    remora_status_t sst;
    do
        sst = remora_sub_next(sub, elem, sizeof(elem), &info, 10000);
    while (sst == REMORA_OK && it_now_ms() - g_t_stop < 10000);
    double sub_ms = it_now_ms() - g_t_stop;
    pthread_join(tr, NULL);
    pthread_join(tw, NULL);
    printf("# stopped server: read %s after %.0f ms, write %s after %.0f ms, sub_next %s after "
           "%.0f ms\n", remora_status_string(r.st), r.took_ms, remora_status_string(w.st),
           w.took_ms, remora_status_string(sst), sub_ms);
    kill(s.pid, SIGCONT);
    kill(ss.pid, SIGCONT);
    it_assert_status(r.st, REMORA_ERR_DISCONNECTED);
    it_assert_status(w.st, REMORA_ERR_DISCONNECTED);
    it_assert_status(sst, REMORA_ERR_DISCONNECTED);
    if (r.took_ms >= DEAD_MS || w.took_ms >= DEAD_MS || sub_ms >= DEAD_MS)
        fail_msg("a dead server noticed too late: read %.0f, write %.0f, sub %.0f ms (< %.0f)",
                 r.took_ms, w.took_ms, sub_ms, DEAD_MS);
    remora_sub_destroy(sub);
    it_client_close(&c_read);
    it_client_close(&c_write);
    it_client_close(&c_sub);
    /* Resumed, the servers serve new clients (and did not crash on waking
     * to endpoints their clients gave up on). */
    it_sleep_ms(300);
    if (!it_server_alive(&s) || !it_server_alive(&ss)) {
        it_server_t *dead = it_server_alive(&s) ? &ss : &s;
        it_server_dump_log(dead);
        if (ucx_1_13_wakeup_abort(dead)) {
            /* Known UCX 1.13 bug, not remora's: see docs/security.md §4. */
            printf("# WAIVED: the resumed server hit UCX 1.13's wire-up assertion; "
                   "the clients' side of this test passed\n");
            it_server_stop(it_server_alive(&s) ? &s : &ss);
            return;
        }
        fail_msg("a server died after SIGCONT (log above)");
    }
    it_assert_ok(it_client_open(&c_read, s.addr, NULL));
    it_assert_ok(remora_client_read(c_read.client, "a", 0, probe, sizeof(probe)));
    it_client_close(&c_read);
    assert_int_equal(it_server_stop(&s), 0);
    assert_int_equal(it_server_stop(&ss), 0);
}

static void test_stream_read_stopped_server(void **state)
{
    it_server_t ss;
    it_proc_t p;
    it_run_t run;
    char target[IT_ADDR_MAX + 8];
    (void)state;

    it_must_start(&ss, "stream", "serve", "--ring", "r=64x16", "--rate", "100", NULL);
    snprintf(target, sizeof(target), "%s/r", ss.addr);
    assert_int_equal(it_cli_spawn(&p, NULL, "stream", "read", target, "--no-reconnect", "--seconds", "60", NULL),
                     0);
    it_sleep_ms(1500); /* connected and consuming */
    assert_true(it_stop_process(ss.pid, 2000));
    double t0 = it_now_ms();
    it_proc_wait(&p, 8000, &run); /* run.status says how it ended */
    double took = it_now_ms() - t0;
    printf("# stream read against a stopped server: exit %d after %.0f ms\n", run.status, took);
    kill(ss.pid, SIGCONT);
    if (run.status == 0 || run.status == -1)
        fail_msg("remora stream read exited %d (stderr: %s)", run.status, run.err);
    if (took >= 5000)
        fail_msg("remora stream read took %.0f ms to give up (< 5000)", took);
    it_run_free(&run);

    /* Reconnecting (the default): it keeps trying while the server is
     * stopped, and exits 1 once --reconnect-for has run out. */
    assert_int_equal(it_cli_spawn(&p, NULL, "stream", "read", target, "--reconnect-for", "1500",
                                  "--timeout", "1000", "--seconds", "60", NULL), 0);
    it_sleep_ms(1500); /* connected and consuming */
    assert_true(it_stop_process(ss.pid, 2000));
    t0 = it_now_ms();
    it_proc_wait(&p, 15000, &run);
    took = it_now_ms() - t0;
    kill(ss.pid, SIGCONT);
    printf("# reconnecting stream read, server stopped: exit %d after %.0f ms\n", run.status, took);
    /* ~2 s to notice, then 1.5 s of attempts: not at once, not never. */
    if (run.status == 0 || run.status == -1 || took < 3000 || took >= 10000)
        fail_msg("reconnecting stream read: exit %d after %.0f ms (stderr: %s)", run.status, took,
                 run.err);
    it_run_free(&run);
    assert_int_equal(it_server_stop(&ss), 0);
}

static void test_request_timeout_is_its_own(void **state)
{
    it_server_t s;
    static const char *const env[] = {"REMORA_HEARTBEAT_MS=0", NULL};
    it_client_t c;
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT |
                                              REMORA_CLIENT_FIELD_PATH,
                                .timeout_ms = 1000, .path = REMORA_PATH_AM};
    uint8_t *buf = malloc(A_SIZE);
    (void)state;

    assert_non_null(buf);
    if (it_server_start_env(&s, env, "--region", "a=256K", NULL) != 0)
        fail_msg("could not start remora serve");
    it_assert_ok(it_client_open(&c, s.addr, &p));
    it_assert_ok(remora_client_read(c.client, "a", 0, buf, 64));
    assert_true(it_stop_process(s.pid, 2000));
    double t0 = it_now_ms();
    remora_status_t st = remora_client_read(c.client, "a", 0, buf, A_SIZE);
    double took = it_now_ms() - t0;
    printf("# read with timeout 1000 ms, server stopped, no server heartbeats: %s after %.0f ms\n",
           remora_status_string(st), took);
    kill(s.pid, SIGCONT);
    assert_int_not_equal(st, REMORA_OK);
    if (took < 1000 || took > 1600)
        fail_msg("a read with a 1000 ms timeout failed after %.0f ms (%s), not in 1000-1600 ms",
                 took, remora_status_string(st));
    it_client_close(&c);
    free(buf);
    assert_int_equal(it_server_stop(&s), 0);
}

/* d: stop a `stream serve` and a `stream read` of it together for 3 s, more
 * than the peer timeout, then resume first one, 200 ms later the other. The
 * first to run again has heard nothing from the other for 3 s, but was not
 * running either: neither may take the other for dead. */
static void both_stopped_round(int reader_first)
{
    it_server_t ss;
    it_proc_t p;
    it_run_t run;
    char target[IT_ADDR_MAX + 8];

    it_must_start(&ss, "stream", "serve", "--ring", "r=64x16", "--rate", "100", NULL);
    snprintf(target, sizeof(target), "%s/r", ss.addr);
    assert_int_equal(it_cli_spawn(&p, NULL, "stream", "read", target, "--no-reconnect",
                                  "--seconds", "6", NULL), 0);
    it_sleep_ms(1500); /* connected and consuming */
    assert_true(it_stop_process(ss.pid, 2000));
    assert_true(it_stop_process(p.pid, 2000));
    it_sleep_ms(3000);
    kill(reader_first ? p.pid : ss.pid, SIGCONT);
    it_sleep_ms(200);
    kill(reader_first ? ss.pid : p.pid, SIGCONT);
    it_proc_wait(&p, 15000, &run);
    printf("# both stopped 3 s, %s resumed first: stream read exit %d\n",
           reader_first ? "the reader" : "the server", run.status);
    if (run.status != 0)
        fail_msg("stream read exited %d after a stall of both ends (stderr: %s)", run.status,
                 run.err);
    it_run_free(&run);
    assert_int_equal(it_server_stop(&ss), 0);
}

static void test_both_stopped(void **state)
{
    (void)state;
    both_stopped_round(1);
    both_stopped_round(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stopped_server, it_teardown_reap),
        cmocka_unit_test_teardown(test_stream_read_stopped_server, it_teardown_reap),
        cmocka_unit_test_teardown(test_request_timeout_is_its_own, it_teardown_reap),
        cmocka_unit_test_teardown(test_both_stopped, it_teardown_reap),
    };

    it_init("liveness");
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
