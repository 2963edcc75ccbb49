/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Server and client in one process: with two contexts, and with one context
 * over UCX's connection manager (REMORA_CM=1, the default from UCX 1.16 on),
 * bytes read back exactly; with one context over worker addresses
 * (REMORA_CM=0, the default before) the connect fails cleanly with
 * REMORA_ERR_UNSUPPORTED instead of mixing up the two roles.
 */
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "engine/spin.h"
#include "remote/server.h"

typedef struct {
    remora_context_h ctx;
    remora_mem_h     mem;
    remora_server_h  server;
    char             addr[80];
} fixture_t;

static int setup(void **state)
{
    static fixture_t f;
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 1 << 20};
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};

    assert_int_equal(remora_context_create(NULL, &f.ctx), REMORA_OK);
    assert_int_equal(remora_mem_create(f.ctx, &mp, &f.mem), REMORA_OK);
    for (size_t i = 0; i < mp.length; i++)
        ((uint8_t *)remora_mem_address(f.mem))[i] = (uint8_t)(i * 7 + 3);
    assert_int_equal(remora_server_create(f.ctx, &sp, &f.server), REMORA_OK);
    assert_int_equal(remora_server_expose(f.server, "r", f.mem, NULL), REMORA_OK);
    assert_int_equal(remora_server_address(f.server, f.addr, sizeof(f.addr)), REMORA_OK);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    remora_server_destroy(f->server);
    remora_mem_destroy(f->mem);
    remora_context_destroy(f->ctx);
    return 0;
}

static void test_second_context_reads_exact_bytes(void **state)
{
    fixture_t *f = *state;
    remora_context_h ctx;
    remora_client_h c;
    static uint8_t buf[1 << 20];

    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    assert_int_equal(remora_client_connect(ctx, f->addr, NULL, &c), REMORA_OK);
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(remora_client_read(c, "r", 0, buf, sizeof(buf)), REMORA_OK);
    assert_memory_equal(buf, remora_mem_address(f->mem), sizeof(buf));
    remora_client_disconnect(c);
    remora_context_destroy(ctx);
}

static void test_same_context(void **state)
{
    fixture_t *f = *state;
    remora_client_h c = NULL;
    static uint8_t buf[4096];

    if (!f->server->cm) { /* as the server decided (REMORA_CM, the UCX version) */
        assert_int_equal(remora_client_connect(f->ctx, f->addr, NULL, &c),
                         REMORA_ERR_UNSUPPORTED);
        assert_null(c);
        return;
    }
    assert_int_equal(remora_client_connect(f->ctx, f->addr, NULL, &c), REMORA_OK);
    assert_int_equal(remora_client_read(c, "r", 1000, buf, sizeof(buf)), REMORA_OK);
    assert_memory_equal(buf, (uint8_t *)remora_mem_address(f->mem) + 1000, sizeof(buf));
    remora_client_disconnect(c);
}

/* Slots this process holds once its threads have gone idle (at most 2 s). */
static unsigned held_once_idle(void)
{
    unsigned held;

    for (int i = 0; i < 200 && (held = rm_spin_held(NULL)) != 0; i++)
        usleep(10000);
    return held;
}

/* Spin slots (src/engine/spin.h) are given back: once reads are done and
 * the server's and client's progress threads have gone to sleep, no thread
 * of this process holds one. Where no table is open (REMORA_SPIN_SLOTS=0,
 * 8 cores or more by default) or other processes held every slot throughout,
 * nothing was taken and the test says so and skips. */
static void test_spin_slots_given_back(void **state)
{
    fixture_t *f = *state;
    remora_context_h ctx;
    remora_client_h c;
    static uint8_t buf[64 << 10];
    unsigned long before, after;
    unsigned held;

    if (rm_spin_slots() == 0) {
        printf("# no spin-slot table in this process (REMORA_SPIN_SLOTS)\n");
        skip();
    }
    rm_spin_held(&before);
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    assert_int_equal(remora_client_connect(ctx, f->addr, NULL, &c), REMORA_OK);
    for (int i = 0; i < 200; i++)
        assert_int_equal(remora_client_read(c, "r", 0, buf, sizeof(buf)), REMORA_OK);
    rm_spin_held(&after);
    /* Idle: every thread gives its slot back before it sleeps. */
    held = held_once_idle();
    remora_client_disconnect(c);
    remora_context_destroy(ctx);
    if (after == before) {
        printf("# no slot was free during the reads (other processes held all %u)\n",
               rm_spin_slots());
        skip();
    }
    printf("# %lu slots taken during 200 reads; held once idle: %u\n", after - before,
           held);
    assert_int_equal(held, 0);
    /* And after: the fixture's server spins on the disconnect it is told of,
     * then sleeps again, giving its slot back (the destroyed context's
     * threads are gone). */
    assert_int_equal(held_once_idle(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_context_reads_exact_bytes),
        cmocka_unit_test(test_same_context),
        cmocka_unit_test(test_spin_slots_given_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
