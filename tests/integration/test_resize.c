/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A region replaced while a client is connected: the server runs with
 * --resize a=8M@1500 (16 MiB, then 8 MiB of fresh pattern memory 1.5 s after
 * it started listening). The client must get REGION_CHANGED with the new size
 * and generation 2, and from then on see the new region: reads past 8 MiB are
 * out of range without the caller having to look the region up again.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MiB (1024u * 1024u)
#define OLD_SIZE (16u * MiB)
#define NEW_SIZE (8u * MiB)
#define RESIZE_AT_MS 1500

typedef struct events {
    pthread_mutex_t mx;
    pthread_cond_t  cv;
    int             n;
    remora_event_t  ev[8];
    char            names[8][REMORA_NAME_MAX + 1];
    double          at_ms[8];
} events_t;

static events_t g_ev = {.mx = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void on_event(const remora_event_t *e, void *arg)
{
    events_t *ev = arg;

    pthread_mutex_lock(&ev->mx);
    if (ev->n < 8) {
        ev->ev[ev->n] = *e;
        snprintf(ev->names[ev->n], sizeof(ev->names[0]), "%s", e->name ? e->name : "");
        ev->ev[ev->n].name = NULL; /* valid only during the callback */
        ev->at_ms[ev->n] = it_now_ms();
        ev->n++;
    }
    pthread_cond_broadcast(&ev->cv);
    pthread_mutex_unlock(&ev->mx);
}

/* Wait until at least n events arrived or timeout_ms passed; returns the count. */
static int wait_events(events_t *ev, int n, int timeout_ms)
{
    double deadline = it_now_ms() + timeout_ms;
    int got;

    pthread_mutex_lock(&ev->mx);
    while (ev->n < n && it_now_ms() < deadline) {
        pthread_mutex_unlock(&ev->mx);
        it_sleep_ms(5);
        pthread_mutex_lock(&ev->mx);
    }
    got = ev->n;
    pthread_mutex_unlock(&ev->mx);
    return got;
}

/* The whole story, in order: before, the event, after. */
static void test_region_changed_event_and_new_size(void **state)
{
    it_server_t s;
    it_client_t c;
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_EVENT_CB,
                                .event_cb = on_event, .event_arg = &g_ev};
    remora_region_info_t info = {0};
    uint8_t *buf = malloc(OLD_SIZE);
    uint8_t small[16];
    double t0;
    (void)state;

    assert_non_null(buf);
    it_must_start(&s, "--region", "a=16M", "--region", "other=64K", "--resize", "a=8M@1500", NULL);
    t0 = it_now_ms();
    it_assert_ok(it_client_open(&c, s.addr, &p));

    /* Before the resize: 16 MiB, generation 1, all of it readable. */
    it_assert_ok(remora_client_lookup(c.client, "a", &info));
    if (info.generation != 1)
        fail_msg("the resize happened before the client was ready (%.0f ms after start); "
                 "raise RESIZE_AT_MS", it_now_ms() - t0);
    assert_int_equal(info.size, OLD_SIZE);
    it_assert_ok(remora_client_read(c.client, "a", 0, buf, OLD_SIZE));
    it_assert_pattern(buf, 0, OLD_SIZE);
    it_assert_ok(remora_client_read(c.client, "a", OLD_SIZE - 8, small, 8));
    assert_int_equal(wait_events(&g_ev, 0, 0), 0);

    /* The event: exactly one, REGION_CHANGED, for a, 8 MiB, generation 2. */
    if (wait_events(&g_ev, 1, RESIZE_AT_MS + 10000) < 1)
        fail_msg("no REGION_CHANGED event within %d ms", RESIZE_AT_MS + 10000);
    it_sleep_ms(200); /* nothing else should follow */
    pthread_mutex_lock(&g_ev.mx);
    assert_int_equal(g_ev.n, 1);
    assert_int_equal(g_ev.ev[0].type, REMORA_EVENT_REGION_CHANGED);
    assert_string_equal(g_ev.names[0], "a");
    assert_int_equal(g_ev.ev[0].size, NEW_SIZE);
    assert_int_equal(g_ev.ev[0].generation, 2);
    pthread_mutex_unlock(&g_ev.mx);

    /* After it, with no lookup in between: the old tail is out of range. */
    it_assert_status(remora_client_read(c.client, "a", NEW_SIZE - 8, small, 16),
                     REMORA_ERR_OUT_OF_RANGE);
    it_assert_status(remora_client_read(c.client, "a", NEW_SIZE, small, 1),
                     REMORA_ERR_OUT_OF_RANGE);
    it_assert_status(remora_client_read(c.client, "a", OLD_SIZE - 8, small, 8),
                     REMORA_ERR_OUT_OF_RANGE);

    /* lookup and list report the new size and generation. */
    it_assert_ok(remora_client_lookup(c.client, "a", &info));
    assert_int_equal(info.size, NEW_SIZE);
    assert_int_equal(info.generation, 2);
    remora_region_info_t *infos = NULL;
    size_t n = 0;
    it_assert_ok(remora_client_list(c.client, &infos, &n));
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(infos[i].name, "a") == 0) {
            assert_int_equal(infos[i].size, NEW_SIZE);
            assert_int_equal(infos[i].generation, 2);
        } else {
            assert_int_equal(infos[i].size, 64 * 1024);
            assert_int_equal(infos[i].generation, 1); /* untouched */
        }
    }
    remora_region_info_free(infos);

    /* The new memory holds the pattern over its whole size, on every path. */
    memset(buf, 0, OLD_SIZE);
    it_assert_ok(remora_client_read(c.client, "a", 0, buf, NEW_SIZE));
    it_assert_pattern(buf, 0, NEW_SIZE);
    it_assert_ok(remora_client_read(c.client, "a", NEW_SIZE - 1, small, 1));
    it_assert_pattern(small, NEW_SIZE - 1, 1);

    /* A client that connects now sees only the new region. */
    it_client_t c2;
    it_assert_ok(it_client_open(&c2, s.addr, NULL));
    it_assert_ok(remora_client_lookup(c2.client, "a", &info));
    assert_int_equal(info.size, NEW_SIZE);
    assert_int_equal(info.generation, 2);
    it_assert_ok(remora_client_read(c2.client, "a", 12345, buf, NEW_SIZE - 12345));
    it_assert_pattern(buf, 12345, NEW_SIZE - 12345);
    it_assert_status(remora_client_read(c2.client, "a", NEW_SIZE, small, 1),
                     REMORA_ERR_OUT_OF_RANGE);
    it_client_close(&c2);

    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
    free(buf);
}

typedef struct hammer {
    remora_client_h client;
    volatile int    stop;
    long            ok_low, ok_high, oor_high;
    char            error[256];
} hammer_t;

/* Read a low range (valid before and after) and a high range (valid only
 * before) over and over: every read is either right or out of range. */
static void *hammer_thread(void *arg)
{
    hammer_t *h = arg;
    uint8_t *buf = malloc(2 * MiB);

    while (buf && !h->stop && h->error[0] == '\0') {
        remora_status_t st = remora_client_read(h->client, "a", 1 * MiB + 3, buf, 2 * MiB);
        if (st != REMORA_OK || remora_pattern_check(buf, 1 * MiB + 3, 2 * MiB) >= 0) {
            snprintf(h->error, sizeof(h->error), "low read: %s%s", remora_status_string(st),
                     st == REMORA_OK ? " but wrong bytes" : "");
            break;
        }
        h->ok_low++;
        st = remora_client_read(h->client, "a", 12 * MiB + 1, buf, 2 * MiB);
        if (st == REMORA_OK && remora_pattern_check(buf, 12 * MiB + 1, 2 * MiB) < 0) {
            if (h->oor_high) {
                snprintf(h->error, sizeof(h->error), "high read succeeded after it had "
                         "been out of range");
                break;
            }
            h->ok_high++;
        } else if (st == REMORA_ERR_OUT_OF_RANGE) {
            h->oor_high++;
        } else {
            snprintf(h->error, sizeof(h->error), "high read: %s%s", remora_status_string(st),
                     st == REMORA_OK ? " but wrong bytes" : "");
        }
    }
    free(buf);
    return NULL;
}

/* Reads running while the region is replaced see the old or the new region,
 * never wrong bytes, never an error other than out of range. */
static void test_reads_across_the_replace(void **state)
{
    it_server_t s;
    it_client_t c;
    hammer_t h = {0};
    pthread_t t;
    remora_region_info_t info = {0};
    (void)state;

    it_must_start(&s, "--region", "a=16M", "--resize", "a=8M@1500", NULL);
    it_assert_ok(it_client_open(&c, s.addr, NULL));
    h.client = c.client;
    assert_int_equal(pthread_create(&t, NULL, hammer_thread, &h), 0);
    /* Until the new generation is visible, and a little longer. */
    double deadline = it_now_ms() + RESIZE_AT_MS + 10000;
    do {
        it_sleep_ms(50);
        it_assert_ok(remora_client_lookup(c.client, "a", &info));
    } while (info.generation == 1 && it_now_ms() < deadline && h.error[0] == '\0');
    it_sleep_ms(300);
    h.stop = 1;
    pthread_join(t, NULL);
    if (h.error[0])
        fail_msg("%s (ok low %ld, ok high %ld, out of range %ld)", h.error, h.ok_low, h.ok_high,
                 h.oor_high);
    assert_int_equal(info.generation, 2);
    assert_true(h.ok_high > 0);  /* it ran before the replace */
    assert_true(h.oor_high > 0); /* and after */
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

/* An in-process server (the library API; the CLI cannot unexpose): a
 * region removed gives REGION_REMOVED and then NOT_FOUND; a region replaced
 * by a window (offset, length) of other memory gives REGION_CHANGED with the
 * window's size and reads that see exactly that window. */
static void test_removed_and_windowed_replace(void **state)
{
    events_t ev = {.mx = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    remora_context_h sctx;
    remora_server_h server;
    remora_mem_h m1, m2;
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 1u << 20};
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_EVENT_CB,
                                 .event_cb = on_event, .event_arg = &ev};
    remora_region_params_t window = {.field_mask = REMORA_REGION_FIELD_OFFSET |
                                                   REMORA_REGION_FIELD_LENGTH,
                                     .offset = 4096, .length = 8192};
    remora_region_info_t info = {0};
    char addr[IT_ADDR_MAX];
    uint8_t buf[8192];
    it_client_t c;
    (void)state;

    it_assert_ok(remora_context_create(NULL, &sctx));
    it_assert_ok(remora_mem_create(sctx, &mp, &m1));
    it_assert_ok(remora_mem_create(sctx, &mp, &m2));
    remora_pattern_fill(remora_mem_address(m1), 0, 1u << 20);
    it_fill_random(remora_mem_address(m2), 1u << 20, 5);
    it_assert_ok(remora_server_create(sctx, &sp, &server));
    it_assert_ok(remora_server_address(server, addr, sizeof(addr)));
    it_assert_ok(remora_server_expose(server, "gone", m1, NULL));
    it_assert_ok(remora_server_expose(server, "win", m1, NULL));
    it_assert_status(remora_server_expose(server, "win", m1, NULL), REMORA_ERR_EXISTS);

    it_assert_ok(it_client_open(&c, addr, &cp));
    it_assert_ok(remora_client_read(c.client, "gone", 100, buf, 100));
    it_assert_pattern(buf, 100, 100);
    it_assert_ok(remora_client_read(c.client, "win", 0, buf, 16));

    /* Removed. */
    it_assert_ok(remora_server_unexpose(server, "gone"));
    if (wait_events(&ev, 1, 10000) < 1)
        fail_msg("no REGION_REMOVED event");
    pthread_mutex_lock(&ev.mx);
    assert_int_equal(ev.ev[0].type, REMORA_EVENT_REGION_REMOVED);
    assert_string_equal(ev.names[0], "gone");
    pthread_mutex_unlock(&ev.mx);
    it_assert_status(remora_client_read(c.client, "gone", 100, buf, 100), REMORA_ERR_NOT_FOUND);
    it_assert_status(remora_client_lookup(c.client, "gone", &info), REMORA_ERR_NOT_FOUND);
    it_assert_status(remora_server_unexpose(server, "gone"), REMORA_ERR_NOT_FOUND);

    /* Replaced by a window of other memory. */
    it_assert_ok(remora_server_replace(server, "win", m2, &window));
    if (wait_events(&ev, 2, 10000) < 2)
        fail_msg("no REGION_CHANGED event");
    pthread_mutex_lock(&ev.mx);
    assert_int_equal(ev.ev[1].type, REMORA_EVENT_REGION_CHANGED);
    assert_string_equal(ev.names[1], "win");
    assert_int_equal(ev.ev[1].size, 8192);
    assert_int_equal(ev.ev[1].generation, 2);
    pthread_mutex_unlock(&ev.mx);
    it_assert_ok(remora_client_read(c.client, "win", 0, buf, 8192));
    assert_memory_equal(buf, (uint8_t *)remora_mem_address(m2) + 4096, 8192);
    it_assert_status(remora_client_read(c.client, "win", 8192, buf, 1), REMORA_ERR_OUT_OF_RANGE);
    it_assert_ok(remora_client_lookup(c.client, "win", &info));
    assert_int_equal(info.size, 8192);
    assert_int_equal(info.generation, 2);
    assert_int_equal(info.access, REMORA_ACCESS_READ);

    it_client_close(&c);
    remora_server_destroy(server);
    remora_mem_destroy(m1);
    remora_mem_destroy(m2);
    remora_context_destroy(sctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_region_changed_event_and_new_size, it_teardown_reap),
        cmocka_unit_test_teardown(test_reads_across_the_replace, it_teardown_reap),
        cmocka_unit_test_teardown(test_removed_and_windowed_replace, it_teardown_reap),
    };

    it_init("resize");
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
