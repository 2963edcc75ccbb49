/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A server message that cannot be sent (memory ran out: src/util/fault.h
 * makes it happen on demand) on a live connection. The client must hear of
 * it at once, as DISCONNECTED, not wait for an answer that never comes: a
 * ring subscriber would wait forever (its waits have no timeout), a read
 * for its whole timeout. Other clients of the server go on. In process,
 * real UCX over loopback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "harness.h"
#include "util/fault.h"
#include "wire/wire.h"

#define CLIENT_TIMEOUT_MS 10000
#define PROMPT_MS         2000.0 /* well inside the client's timeout */

typedef struct {
    remora_context_h ctx;
    remora_server_h  server;
    remora_ring_h    ring;
    remora_mem_h     mem;
    char             addr[IT_ADDR_MAX];
} world_t;

static void world_open(world_t *w)
{
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                             REMORA_RING_FIELD_CAPACITY,
                               .elem_size = 256, .capacity = 64};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 4096};

    memset(w, 0, sizeof(*w));
    it_assert_ok(remora_context_create(NULL, &w->ctx));
    it_assert_ok(remora_server_create(w->ctx, &sp, &w->server));
    it_assert_ok(remora_server_address(w->server, w->addr, sizeof(w->addr)));
    it_assert_ok(remora_ring_create(w->ctx, &rp, &w->ring));
    it_assert_ok(remora_server_expose_ring(w->server, "r", w->ring));
    it_assert_ok(remora_mem_create(w->ctx, &mp, &w->mem));
    memset(remora_mem_address(w->mem), 0x5a, 4096);
    it_assert_ok(remora_server_expose(w->server, "m", w->mem, NULL));
}

static void world_close(world_t *w)
{
    rm_fault_send_arm(0, 0);
    remora_ring_destroy(w->ring);
    remora_server_destroy(w->server);
    remora_mem_destroy(w->mem);
    remora_context_destroy(w->ctx);
}

/* Over active messages: the same-host `map` path would read without asking. */
static void client_open(it_client_t *c, const world_t *w)
{
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT |
                                              REMORA_CLIENT_FIELD_PATH,
                                .timeout_ms = CLIENT_TIMEOUT_MS, .path = REMORA_PATH_AM};
    it_assert_ok(it_client_open(c, w->addr, &p));
}

static void commit_one(remora_ring_h ring)
{
    void *slot;
    it_assert_ok(remora_ring_reserve(ring, &slot));
    memset(slot, 0x11, remora_ring_elem_size(ring));
    remora_ring_commit(ring, NULL);
}

/* Another client, connected all along, still reads byte-exact. */
static void bystander_reads(it_client_t *b)
{
    uint8_t buf[4096];
    it_assert_ok(remora_client_read(b->client, "m", 0, buf, sizeof(buf)));
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0x5a);
}

/* The answer to a subscriber's wait is lost: DISCONNECTED, promptly. */
static void test_lost_ring_answer(void **state)
{
    world_t w;
    it_client_t c, b;
    remora_sub_h sub;
    uint8_t elem[256];
    remora_status_t st;
    (void)state;

    world_open(&w);
    client_open(&c, &w);
    client_open(&b, &w);
    it_assert_ok(remora_client_subscribe(c.client, "r", NULL, &sub));
    commit_one(w.ring);
    it_assert_ok(remora_sub_next(sub, elem, sizeof(elem), NULL, 5000));
    rm_fault_send_arm(RM_MSG_RING_NOTIFY, 1);
    commit_one(w.ring);
    double t0 = it_now_ms();
    while ((st = remora_sub_next(sub, elem, sizeof(elem), NULL, 200)) == REMORA_ERR_TIMED_OUT &&
           it_now_ms() - t0 < 3 * PROMPT_MS)
        ;
    double took = it_now_ms() - t0;
    print_message("lost ring answer: %s after %.0f ms\n", remora_status_string(st), took);
    /* The element may have come with the answer to the wait armed ahead:
     * the next call then sees the connection gone. */
    if (st == REMORA_OK)
        while ((st = remora_sub_next(sub, elem, sizeof(elem), NULL, 200)) == REMORA_ERR_TIMED_OUT &&
               it_now_ms() - t0 < 3 * PROMPT_MS)
            ;
    it_assert_status(st, REMORA_ERR_DISCONNECTED);
    assert_true(it_now_ms() - t0 < PROMPT_MS);
    bystander_reads(&b);
    remora_sub_destroy(sub);
    it_client_close(&c);
    it_client_close(&b);
    world_close(&w);
}

/* A read's reply is lost: DISCONNECTED, not a wait for the whole timeout. */
static void test_lost_read_reply(void **state)
{
    world_t w;
    it_client_t c, b;
    uint8_t buf[64];
    (void)state;

    world_open(&w);
    client_open(&c, &w);
    client_open(&b, &w);
    it_assert_ok(remora_client_read(c.client, "m", 0, buf, sizeof(buf)));
    rm_fault_send_arm(RM_MSG_READ_REPLY, 1);
    double t0 = it_now_ms();
    remora_status_t st = remora_client_read(c.client, "m", 0, buf, sizeof(buf));
    double took = it_now_ms() - t0;
    print_message("lost read reply: %s after %.0f ms\n", remora_status_string(st), took);
    it_assert_status(st, REMORA_ERR_DISCONNECTED);
    assert_true(took < PROMPT_MS);
    bystander_reads(&b);
    /* A new connection to the same server works. */
    it_client_close(&c);
    client_open(&c, &w);
    it_assert_ok(remora_client_read(c.client, "m", 0, buf, sizeof(buf)));
    it_client_close(&c);
    it_client_close(&b);
    world_close(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_ring_answer),
        cmocka_unit_test(test_lost_read_reply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
