/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Signals on the CPU (no GPU needed): a server process exposes a signal
 * array; clients set and add to it over the network.
 * - SET and ADD land exactly; 8 clients adding at once sum exactly;
 * - remora_signals_wait with GEQ (wrap-safe), EQ and NEQ, and its timeout;
 * - `remora ls` and remora_client_list show KIND signals;
 * - bad index, a plain region as signals, an unknown name, a bad op, a
 *   plain write into the signal array: a clear status, and the server
 *   keeps serving;
 * - WRITE_SIGNAL (the message behind put_signal): the data is in the region
 *   when the signal is seen;
 * - stream operations without a GPU: REMORA_ERR_UNSUPPORTED, or
 *   REMORA_ERR_INVALID_PARAM for bad arguments, at once.
 * The server lives in this process, on a context of its own; clients use
 * other contexts (a server's own context cannot be a client of it).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "harness.h"
#include "remote/signals.h"
#include "util/time.h"

#define NSIG      16
#define NCLIENTS  8
#define NADDS     2000

typedef struct {
    remora_context_h ctx;
    remora_server_h  server;
    remora_signals_h sig;
    remora_mem_h     data;
    char             addr[80];
    remora_context_h cctx;
    remora_client_h  client;
} fixture_t;

static fixture_t g;

static int setup(void **state)
{
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 4096};
    remora_region_params_t rp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags = REMORA_REGION_WRITABLE};

    assert_int_equal(remora_context_create(NULL, &g.ctx), REMORA_OK);
    assert_int_equal(remora_server_create(g.ctx, &sp, &g.server), REMORA_OK);
    assert_int_equal(remora_signals_create(g.ctx, NSIG, NULL, &g.sig), REMORA_OK);
    assert_int_equal(remora_server_expose_signals(g.server, "sig", g.sig), REMORA_OK);
    assert_int_equal(remora_mem_create(g.ctx, &mp, &g.data), REMORA_OK);
    memset(remora_mem_address(g.data), 0, mp.length);
    assert_int_equal(remora_server_expose(g.server, "data", g.data, &rp), REMORA_OK);
    assert_int_equal(remora_server_address(g.server, g.addr, sizeof(g.addr)), REMORA_OK);
    assert_int_equal(remora_context_create(NULL, &g.cctx), REMORA_OK);
    assert_int_equal(remora_client_connect(g.cctx, g.addr, NULL, &g.client), REMORA_OK);
    *state = &g;
    return 0;
}

static int teardown(void **state)
{
    remora_client_disconnect(g.client);
    remora_context_destroy(g.cctx);
    remora_server_destroy(g.server);
    remora_signals_destroy(g.sig);
    remora_mem_destroy(g.data);
    remora_context_destroy(g.ctx);
    return 0;
}

static uint64_t word(size_t i)
{
    uint64_t v = 0;
    assert_int_equal(remora_signals_read(g.sig, i, &v), REMORA_OK);
    return v;
}

static void test_set_and_add(void **state)
{
    assert_int_equal(remora_client_signal(g.client, "sig", 3, REMORA_SIGNAL_SET, 42), REMORA_OK);
    assert_int_equal(word(3), 42);
    assert_int_equal(remora_client_signal(g.client, "sig", 3, REMORA_SIGNAL_ADD, 8), REMORA_OK);
    assert_int_equal(word(3), 50);
    /* ADD wraps modulo 2^64. */
    assert_int_equal(remora_client_signal(g.client, "sig", 4, REMORA_SIGNAL_SET, UINT64_MAX),
                     REMORA_OK);
    assert_int_equal(remora_client_signal(g.client, "sig", 4, REMORA_SIGNAL_ADD, 2), REMORA_OK);
    assert_int_equal(word(4), 1);
    /* The last slot, and a local update seen as such. */
    assert_int_equal(remora_client_signal(g.client, "sig", NSIG - 1, REMORA_SIGNAL_SET, 7),
                     REMORA_OK);
    assert_int_equal(word(NSIG - 1), 7);
    assert_int_equal(remora_signals_update(g.sig, NSIG - 1, REMORA_SIGNAL_ADD, 1), REMORA_OK);
    assert_int_equal(remora_signals_host_ptr(g.sig)[NSIG - 1], 8);
}

typedef struct {
    int             n;
    remora_status_t st;
} adder_t;

static void *adder(void *arg)
{
    adder_t *a = arg;
    remora_context_h ctx;
    remora_client_h c;

    a->st = remora_context_create(NULL, &ctx);
    if (a->st != REMORA_OK)
        return NULL;
    if ((a->st = remora_client_connect(ctx, g.addr, NULL, &c)) == REMORA_OK) {
        for (int i = 0; i < NADDS && a->st == REMORA_OK; i++)
            a->st = remora_client_signal(c, "sig", 5, REMORA_SIGNAL_ADD, (uint64_t)a->n);
        remora_client_disconnect(c);
    }
    remora_context_destroy(ctx);
    return NULL;
}

static void test_eight_clients_add_exactly(void **state)
{
    pthread_t t[NCLIENTS];
    adder_t a[NCLIENTS];
    uint64_t want = 0;

    assert_int_equal(remora_signals_update(g.sig, 5, REMORA_SIGNAL_SET, 0), REMORA_OK);
    for (int i = 0; i < NCLIENTS; i++) {
        a[i].n = i + 1;
        want += (uint64_t)(i + 1) * NADDS;
        assert_int_equal(pthread_create(&t[i], NULL, adder, &a[i]), 0);
    }
    for (int i = 0; i < NCLIENTS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].st, REMORA_OK);
    }
    assert_int_equal(word(5), want);
}

typedef struct {
    unsigned delay_ms;
    size_t   index;
    uint64_t value;
} later_t;

static void *set_later(void *arg)
{
    later_t *l = arg;
    remora_context_h ctx;
    remora_client_h c;

    it_sleep_ms(l->delay_ms);
    if (remora_context_create(NULL, &ctx) != REMORA_OK)
        return NULL;
    if (remora_client_connect(ctx, g.addr, NULL, &c) == REMORA_OK) {
        remora_client_signal(c, "sig", l->index, REMORA_SIGNAL_SET, l->value);
        remora_client_disconnect(c);
    }
    remora_context_destroy(ctx);
    return NULL;
}

static void test_wait_cmp(void **state)
{
    pthread_t t;
    uint64_t v = 0;
    double t0;

    assert_int_equal(remora_signals_update(g.sig, 6, REMORA_SIGNAL_SET, 10), REMORA_OK);
    /* Already true: at once, with the value. */
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_GEQ, 10, 0, &v), REMORA_OK);
    assert_int_equal(v, 10);
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_EQ, 10, 0, NULL), REMORA_OK);
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_NEQ, 11, 0, NULL), REMORA_OK);
    /* False: each times out, after about its timeout. */
    t0 = it_now_ms();
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_GEQ, 11, 200, NULL),
                     REMORA_ERR_TIMED_OUT);
    assert_true(it_now_ms() - t0 >= 190 && it_now_ms() - t0 < 2000);
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_EQ, 9, 50, NULL), REMORA_ERR_TIMED_OUT);
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_NEQ, 10, 50, NULL),
                     REMORA_ERR_TIMED_OUT);
    /* GEQ is wrap-safe: 2 is "after" UINT64_MAX - 1. */
    assert_int_equal(remora_signals_update(g.sig, 7, REMORA_SIGNAL_SET, 2), REMORA_OK);
    assert_int_equal(remora_signals_wait(g.sig, 7, REMORA_CMP_GEQ, UINT64_MAX - 1, 0, NULL),
                     REMORA_OK);
    /* Satisfied by a remote peer while waiting. */
    later_t l = {.delay_ms = 100, .index = 6, .value = 99};
    assert_int_equal(pthread_create(&t, NULL, set_later, &l), 0);
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_NEQ, 10, 10000, &v), REMORA_OK);
    assert_int_equal(v, 99);
    pthread_join(t, NULL);
    l.value = 1234;
    assert_int_equal(pthread_create(&t, NULL, set_later, &l), 0);
    assert_int_equal(remora_signals_wait(g.sig, 6, REMORA_CMP_EQ, 1234, 10000, &v), REMORA_OK);
    pthread_join(t, NULL);
    /* Bad arguments. */
    assert_int_equal(remora_signals_wait(g.sig, NSIG, REMORA_CMP_EQ, 0, 0, NULL),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_signals_wait(g.sig, 0, (remora_cmp_t)7, 0, 0, NULL),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_signals_wait(NULL, 0, REMORA_CMP_EQ, 0, 0, NULL),
                     REMORA_ERR_INVALID_PARAM);
}

static void test_listed_as_signals(void **state)
{
    remora_region_info_t *infos = NULL, info = {0};
    size_t n = 0;
    int seen = 0;
    it_run_t r;

    assert_int_equal(remora_client_list(g.client, &infos, &n), REMORA_OK);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(infos[i].name, "sig") == 0) {
            seen = 1;
            assert_int_equal(infos[i].kind, REMORA_REGION_SIGNALS);
            assert_int_equal(infos[i].size, NSIG * sizeof(uint64_t));
            assert_int_equal(infos[i].access, REMORA_ACCESS_READ);
        } else {
            assert_int_equal(infos[i].kind, REMORA_REGION_PLAIN);
        }
    }
    remora_region_info_free(infos);
    assert_true(seen);
    assert_int_equal(remora_client_lookup(g.client, "sig", &info), REMORA_OK);
    assert_int_equal(info.kind, REMORA_REGION_SIGNALS);

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", g.addr, NULL);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "sig"));
    assert_non_null(strstr(r.out, "signals"));
    it_run_free(&r);
}

static void test_bad_arguments(void **state)
{
    uint8_t b[8] = {0};

    assert_int_equal(remora_client_signal(g.client, "sig", NSIG, REMORA_SIGNAL_SET, 1),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_client_signal(g.client, "sig", SIZE_MAX, REMORA_SIGNAL_ADD, 1),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_client_signal(g.client, "data", 0, REMORA_SIGNAL_SET, 1),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_client_signal(g.client, "nope", 0, REMORA_SIGNAL_SET, 1),
                     REMORA_ERR_NOT_FOUND);
    assert_int_equal(remora_client_signal(g.client, "sig", 0, (remora_signal_op_t)9, 1),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_client_signal(NULL, "sig", 0, REMORA_SIGNAL_SET, 1),
                     REMORA_ERR_INVALID_PARAM);
    /* Signal words change by signal operations only. */
    assert_int_equal(remora_client_write(g.client, "sig", 0, b, sizeof(b)), REMORA_ERR_READ_ONLY);
    /* Still serving. */
    assert_int_equal(remora_client_signal(g.client, "sig", 0, REMORA_SIGNAL_SET, 5), REMORA_OK);
    assert_int_equal(word(0), 5);
    /* Local arrays. */
    assert_int_equal(remora_signals_update(g.sig, NSIG, REMORA_SIGNAL_SET, 1), REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_signals_create(g.ctx, 0, NULL, &(remora_signals_h){0}),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_server_expose_signals(g.server, "sig2", g.sig), REMORA_ERR_BUSY);
}

/* The message behind put_signal: data, then the signal, in one message. */
static void test_write_signal(void **state)
{
    remora_client_h c = g.client;
    uint8_t src[64], back[64];
    rm_op_t *op = NULL;

    for (int round = 1; round <= 50; round++) {
        for (size_t i = 0; i < sizeof(src); i++)
            src[i] = (uint8_t)(i * 13 + (size_t)round);
        assert_int_equal(rm_client_write_signal_send(c, "data", 64 * (uint64_t)round, src,
                                                     sizeof(src), "sig", 8, REMORA_SIGNAL_SET,
                                                     (uint64_t)round, rm_deadline_ns(5000), &op),
                         REMORA_OK);
        /* The CPU sees the signal, then the data must be there. */
        assert_int_equal(remora_signals_wait(g.sig, 8, REMORA_CMP_EQ, (uint64_t)round, 5000, NULL),
                         REMORA_OK);
        assert_memory_equal((uint8_t *)remora_mem_address(g.data) + 64 * round, src, sizeof(src));
        assert_int_equal(rm_engine_wait(c->ctx, &op->done, rm_deadline_ns(5000)), REMORA_OK);
        rm_engine_lock(c->ctx);
        assert_int_equal(op->status, REMORA_OK);
        rm_client_op_free(op);
        rm_engine_unlock(c->ctx);
    }
    assert_int_equal(remora_client_read(c, "data", 64 * 50, back, sizeof(back)), REMORA_OK);
    assert_memory_equal(back, src, sizeof(src));
    /* Out of range: refused before any byte moves, signal untouched. */
    assert_int_equal(rm_client_write_signal_send(c, "data", 4096 - 8, src, 64, "sig", 8,
                                                 REMORA_SIGNAL_SET, 777, rm_deadline_ns(5000), &op),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(rm_client_write_signal_send(c, "data", 0, src, 64, "sig", NSIG,
                                                 REMORA_SIGNAL_SET, 777, rm_deadline_ns(5000), &op),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(word(8), 50);
}

static void test_stream_ops_without_gpu(void **state)
{
    remora_cuda_attr_t a = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE};
    uint8_t b[8];
    void *not_a_stream = (void *)(uintptr_t)0x1;

    remora_cuda_query(&a);
    /* Argument checks come first, GPU or not. */
    assert_int_equal(remora_stream_put(NULL, "data", 0, b, 8, NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_stream_signal(NULL, "sig", 0, REMORA_SIGNAL_SET, 1, NULL),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_stream_wait(NULL, 0, REMORA_CMP_EQ, 1, NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_stream_wait(g.sig, NSIG, REMORA_CMP_EQ, 1, NULL),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_stream_error(NULL, NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_stream_put_signal(g.client, "data", 0, b, 8, NULL, 0,
                                              REMORA_SIGNAL_SET, 1, NULL),
                     REMORA_ERR_INVALID_PARAM);
    if (a.available) {
        print_message("CUDA is available: the GPU tests (it_stream) cover the rest\n");
        return;
    }
    assert_int_equal(remora_stream_put(g.client, "data", 0, b, 8, NULL), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(remora_stream_get(g.client, "data", 0, b, 8, not_a_stream),
                     REMORA_ERR_UNSUPPORTED);
    assert_int_equal(remora_stream_signal(g.client, "sig", 0, REMORA_SIGNAL_ADD, 1, NULL),
                     REMORA_ERR_UNSUPPORTED);
    assert_int_equal(remora_stream_flush(g.client, NULL), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(remora_stream_wait(g.sig, 0, REMORA_CMP_EQ, 1, NULL), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(remora_stream_error(g.client, NULL), REMORA_OK);
    void *dev = NULL;
    assert_int_equal(remora_signals_device_ptr(g.sig, &dev), REMORA_ERR_UNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_add),
        cmocka_unit_test(test_eight_clients_add_exactly),
        cmocka_unit_test(test_wait_cmp),
        cmocka_unit_test(test_listed_as_signals),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_write_signal),
        cmocka_unit_test(test_stream_ops_without_gpu),
    };
    it_init("signals");
    return it_finish(cmocka_run_group_tests(tests, setup, teardown));
}
