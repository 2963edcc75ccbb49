/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rings end to end: `remora stream serve` processes, `remora stream read`
 * processes and library subscribers in this process, over real UCX.
 * CTest runs it under several environments (default paths, TCP only, TCP
 * with inline notifications off so every element is pushed by the server,
 * and the same with pushes off so every element comes by batched fetch).
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* A number from a one-line JSON object: "key":N. -1 when absent. */
static double json_num(const char *json, const char *key)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    if (json == NULL || (p = strstr(json, pat)) == NULL)
        return -1;
    return strtod(p + strlen(pat), NULL);
}

static void assert_clean_summary(const it_run_t *r, double min_elements)
{
    if (r->status != 0)
        fail_msg("stream read exited %d:\n%s\n%s", r->status, r->out, r->err);
    if (json_num(r->out, "elements") < min_elements || json_num(r->out, "torn") != 0 ||
        json_num(r->out, "corrupt") != 0)
        fail_msg("unexpected summary: %s", r->out);
}

/* ---------------------------------------------------------------- CLI */

/* Four subscribers on a producer at full speed: >= 100,000 elements each, none torn. */
static void test_four_subscribers_never_torn(void **state)
{
    it_server_t s;
    it_proc_t p[4];
    char target[IT_ADDR_MAX + 8];
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "t=1Kx4096", "--rate", "max", NULL);
    snprintf(target, sizeof(target), "%s/t", s.addr);
    for (int i = 0; i < 4; i++)
        assert_int_equal(it_cli_spawn(&p[i], NULL, "stream", "read", target, "--count", "100000",
                                      "--verify", "--json", "--timeout", "20000", NULL), 0);
    for (int i = 0; i < 4; i++) {
        it_run_t r;
        assert_int_equal(it_proc_wait(&p[i], 240000, &r), 0);
        print_message("subscriber %d: %s", i, r.out);
        assert_clean_summary(&r, 100000);
        it_run_free(&r);
    }
    assert_int_equal(it_server_stop(&s), 0);
}

/* `ls` shows the ring beside plain regions' columns; --json says kind. */
static void test_ls_shows_ring(void **state)
{
    it_server_t s;
    it_run_t r;
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "frames=4Kx16", "--rate", "100", NULL);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "ls", s.addr, "--json", NULL);
    assert_int_equal(r.status, 0);
    it_assert_contains(r.out, "\"name\":\"frames\"");
    it_assert_contains(r.out, "\"kind\":\"ring\"");
    it_assert_contains(r.out, "\"access\":\"ro\"");
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);
}

static void read_shape(const char *ring, const char *rate, const char *count)
{
    it_server_t s;
    it_run_t r;
    char target[IT_ADDR_MAX + 8];

    it_must_start(&s, "stream", "serve", "--ring", ring, "--rate", rate, NULL);
    snprintf(target, sizeof(target), "%s/%.*s", s.addr, (int)strcspn(ring, "="), ring);
    it_cli_run(&r, 180000, "stream", "read", target, "--count", count,
                                "--verify", "--json", "--timeout", "30000", NULL);
    print_message("%s: %s", ring, r.out);
    assert_clean_summary(&r, atof(count));
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);
}

/* 1-slot ring, 8-byte elements, 64 MiB elements. */
static void test_edge_shapes(void **state)
{
    (void)state;
    read_shape("one=4Kx1", "2000", "500");
    read_shape("tiny=8x64", "100000", "20000"); /* 640 us of history: fetchable anywhere */
    read_shape("big=64Mx2", "4", "3");
}

/* ---------------------------------------------------------------- bad input */

static void test_bad_input(void **state)
{
    it_server_t s, plain;
    it_client_t c;
    remora_sub_h sub;
    remora_sub_params_t bad_mode = {.field_mask = REMORA_SUB_FIELD_MODE, .mode = 7};
    it_run_t r;
    char target[IT_ADDR_MAX + 16];
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "r=64x16", "--rate", "100", NULL);
    it_must_start(&plain, "--region", "p=4096", NULL);
    it_assert_ok(it_client_open(&c, s.addr, NULL));
    it_assert_status(remora_client_subscribe(c.client, "missing", NULL, &sub), REMORA_ERR_NOT_FOUND);
    it_assert_status(remora_client_subscribe(c.client, "r", &bad_mode, &sub),
                     REMORA_ERR_INVALID_PARAM);
    it_assert_status(remora_client_subscribe(c.client, "", NULL, &sub), REMORA_ERR_INVALID_PARAM);
    it_client_close(&c);
    it_assert_ok(it_client_open(&c, plain.addr, NULL));
    it_assert_status(remora_client_subscribe(c.client, "p", NULL, &sub), REMORA_ERR_INVALID_PARAM);
    it_client_close(&c);

    snprintf(target, sizeof(target), "%s/missing", s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", target, "--count", "1", NULL);
    assert_int_equal(r.status, 1);
    it_assert_contains(r.err, "not found");
    it_run_free(&r);
    snprintf(target, sizeof(target), "%s/p", plain.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", target, "--count", "1", NULL);
    assert_int_equal(r.status, 1);
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "serve", "--ring", "x=4x10", NULL);
    assert_int_equal(r.status, 2); /* elements under 8 bytes cannot carry a frame */
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", target, "--mode", "some", NULL);
    assert_int_equal(r.status, 2);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&plain), 0);
    assert_int_equal(it_server_stop(&s), 0);
}

static void test_bad_token(void **state)
{
    it_server_t s;
    char tok[512], bad[512];
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_TOKEN,
                                .token = "nope-nope-nope-nope", .token_len = 19};
    it_client_t c;
    it_run_t r;
    char target[IT_ADDR_MAX + 8];
    (void)state;

    it_tmp_path(tok, sizeof(tok), "ring-token");
    it_tmp_path(bad, sizeof(bad), "ring-bad-token");
    assert_int_equal(it_write_file(tok, "ring-secret-0123\n", 17), 0);
    assert_int_equal(it_write_file(bad, "ring-secreT-0123\n", 17), 0);
    it_must_start(&s, "stream", "serve", "--ring", "r=64x16", "--rate", "100", "--token-file",
                  tok, NULL);
    it_assert_status(it_client_open(&c, s.addr, &p), REMORA_ERR_AUTH);
    snprintf(target, sizeof(target), "%s/r", s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", target, "--count", "10",
                                "--token-file", bad, NULL);
    assert_int_equal(r.status, 1);
    it_assert_contains(r.err, "auth");
    it_run_free(&r);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", target, "--count", "10",
                                "--verify", "--token-file", tok, NULL);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);
}

/* A clone saved to a file replays as a source; damaged files are refused. */
static void test_clone_file_source(void **state)
{
    it_server_t s, replay;
    it_run_t r;
    char target[IT_ADDR_MAX + 8], file[512], bad[512];
    size_t len;
    uint8_t *img;
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "r=4Kx32", "--rate", "2000", NULL);
    snprintf(target, sizeof(target), "%s/r", s.addr);
    /* Reading 32 elements proves the ring holds a full lap, however slow the machine
       (a fixed sleep left it empty once on a loaded CI runner). */
    it_cli_run(&r, 60000, "stream", "read", target, "--count", "32", NULL);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    it_tmp_path(file, sizeof(file), "ring.img");
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "clone", target, file, NULL);
    assert_int_equal(r.status, 0);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&s), 0);

    it_must_start(&replay, "stream", "serve", "--source", file, "--rate", "5000", NULL);
    snprintf(target, sizeof(target), "%s/stream", replay.addr);
    it_cli_run(&r, 60000, "stream", "read", target, "--count", "2000",
                                "--verify", "--json", NULL);
    assert_clean_summary(&r, 2000);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&replay), 0);

    /* Damaged images: each is refused with a clear message, exit 1. */
    assert_non_null(img = it_read_file(file, &len));
    struct { const char *what; size_t off; uint8_t val; size_t len; } cases[] = {
        {"bad magic", 0, 'X', len},       {"version 9", 4, 9, len},
        {"header length", 6, 65, len},    {"stride", 24, 0xff, len},
        {"claimed < head", 40, 0, len},   {"truncated body", 0, 'R', len - 100},
        {"truncated header", 0, 'R', 40},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t *copy = malloc(len);
        memcpy(copy, img, len);
        copy[cases[i].off] = cases[i].val;
        if (cases[i].off == 40) { /* claimed = head - 1: zeroing one byte of it is a no-op
                                     when head's low byte is 0 already (1 run in 256) */
            uint64_t head = 0;
            for (int b = 7; b >= 0; b--)
                head = head << 8 | copy[32 + b];
            assert_true(head > 0);
            for (int b = 0; b < 8; b++)
                copy[40 + b] = (uint8_t)((head - 1) >> (8 * b));
        }
        it_tmp_path(bad, sizeof(bad), "bad.img");
        assert_int_equal(it_write_file(bad, copy, cases[i].len), 0);
        free(copy);
        it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "serve", "--listen",
                                    "127.0.0.1:0", "--source", bad, NULL);
        if (r.status != 1 || strstr(r.err, "not a ring image") == NULL)
            fail_msg("%s: exit %d, stderr:\n%s", cases[i].what, r.status, r.err);
        it_run_free(&r);
    }
    free(img);
}

/* ---------------------------------------------------------------- library subscribers */

typedef struct producer {
    remora_ring_h ring;
    atomic_int    stop, paused;
    unsigned      pause_us;
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    size_t es = remora_ring_elem_size(p->ring);

    while (!atomic_load(&p->stop)) {
        void *slot;
        if (atomic_load(&p->paused)) {
            it_sleep_ms(1);
            continue;
        }
        uint64_t seq = remora_ring_head(p->ring);
        if (remora_ring_reserve(p->ring, &slot) != REMORA_OK)
            break;
        remora_frame_seal(slot, es, seq, 1, remora_frame_payload(slot, es, seq, NULL));
        remora_ring_commit(p->ring, NULL);
        if (p->pause_us)
            usleep(p->pause_us);
    }
    return NULL;
}

/* A server in this process (its own context) exposing one ring. */
typedef struct local_ring {
    remora_context_h ctx;
    remora_server_h  server;
    producer_t       prod;
    pthread_t        thread;
    char             addr[IT_ADDR_MAX];
} local_ring_t;

static const remora_server_params_t local_listen = {
    .field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR, .listen_addr = "127.0.0.1:0"};

static remora_ring_params_t ring_shape(size_t elem, size_t cap)
{
    return (remora_ring_params_t){.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                                REMORA_RING_FIELD_CAPACITY,
                                  .elem_size = elem, .capacity = cap};
}

/* The server and its ring "r", no producer thread (the test commits). */
static void local_ring_open(local_ring_t *l, size_t elem, size_t cap)
{
    remora_ring_params_t rp = ring_shape(elem, cap);

    memset(l, 0, sizeof(*l));
    it_assert_ok(remora_context_create(NULL, &l->ctx));
    it_assert_ok(remora_ring_create(l->ctx, &rp, &l->prod.ring));
    it_assert_ok(remora_server_create(l->ctx, &local_listen, &l->server));
    it_assert_ok(remora_server_address(l->server, l->addr, sizeof(l->addr)));
    it_assert_ok(remora_server_expose_ring(l->server, "r", l->prod.ring));
}

static void local_ring_close(local_ring_t *l)
{
    remora_ring_destroy(l->prod.ring); /* unexposes it */
    remora_server_destroy(l->server);
    remora_context_destroy(l->ctx);
}

static void local_ring_start(local_ring_t *l, size_t elem, size_t cap, unsigned pause_us)
{
    local_ring_open(l, elem, cap);
    it_assert_status(remora_server_expose_ring(l->server, "r2", l->prod.ring), REMORA_ERR_BUSY);
    l->prod.pause_us = pause_us;
    assert_int_equal(pthread_create(&l->thread, NULL, produce, &l->prod), 0);
}

static void local_ring_stop(local_ring_t *l)
{
    atomic_store(&l->prod.stop, 1);
    pthread_join(l->thread, NULL);
    local_ring_close(l);
}

/* Drops are exact: every gap in delivered sequence numbers is counted, and
 * nothing else; every element is intact. */
static void follow(remora_sub_mode_t mode, size_t elem, size_t cap, unsigned pause_us,
                   uint64_t want, uint64_t stall_every)
{
    local_ring_t l;
    it_client_t c;
    remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_MODE, .mode = mode};
    remora_sub_h sub;
    remora_elem_info_t info = {0};
    uint8_t *buf = malloc(elem);
    uint64_t start, last = 0, n = 0, gaps = 0;

    local_ring_start(&l, elem, cap, pause_us);
    it_assert_ok(it_client_open(&c, l.addr, NULL));
    atomic_store(&l.prod.paused, 1);
    it_sleep_ms(20);
    start = remora_ring_head(l.prod.ring);
    it_assert_ok(remora_client_subscribe(c.client, "r", &sp, &sub));
    atomic_store(&l.prod.paused, 0);
    while (n < want) {
        it_assert_ok(remora_sub_next(sub, buf, elem, &info, 10000));
        if (remora_frame_check(buf, elem, info.seq) != REMORA_FRAME_OK)
            fail_msg("element %llu is torn or corrupt", (unsigned long long)info.seq);
        if (n > 0 && info.seq <= last)
            fail_msg("sequence went from %llu to %llu", (unsigned long long)last,
                     (unsigned long long)info.seq);
        gaps += info.seq - (n ? last + 1 : start);
        if (info.drops != gaps)
            fail_msg("drops %llu but gaps %llu", (unsigned long long)info.drops,
                     (unsigned long long)gaps);
        last = info.seq;
        n++;
        if (stall_every && n % stall_every == 0)
            it_sleep_ms(50); /* a consumer that falls behind: the ring overruns */
    }
    print_message("mode %d, %zu B x %zu: %llu delivered up to seq %llu, %llu drops\n", mode, elem,
                  cap, (unsigned long long)n, (unsigned long long)last,
                  (unsigned long long)info.drops);
    if (stall_every)
        assert_true(info.drops > 0); /* the stalls overran the ring: drops were counted */
    remora_sub_destroy(sub);
    it_client_close(&c);
    local_ring_stop(&l);
    free(buf);
}

static void test_drops_exact_every(void **state)
{
    (void)state;
    /* Producers are paced so that a ring holds more history than a network
     * round trip lasts even on fast machines (with inline notifications off,
     * every element is fetched); the consumer stalls now and then, so the
     * ring overruns and drops happen wherever this runs. */
    follow(REMORA_SUB_EVERY, 256, 256, 2, 20000, 2000);
    follow(REMORA_SUB_EVERY, 100000, 16, 50, 300, 100); /* fetched in batches */
    follow(REMORA_SUB_EVERY, 64, 4096, 200, 2000, 0);   /* paced, no stalls */
}

static void test_latest_increasing(void **state)
{
    (void)state;
    follow(REMORA_SUB_LATEST, 256, 256, 2, 3000, 500);
    follow(REMORA_SUB_LATEST, 100000, 8, 50, 200, 50);
}

typedef struct cb_state {
    atomic_uint_fast64_t n, bad, last;
    atomic_int           ended;
    remora_status_t      end_status;
} cb_state_t;

static void on_elem(const void *elem, const remora_elem_info_t *info, remora_status_t st,
                    void *arg)
{
    cb_state_t *s = arg;
    if (elem == NULL) {
        s->end_status = st;
        atomic_store(&s->ended, 1);
        return;
    }
    if (remora_frame_check(elem, info->size, info->seq) != REMORA_FRAME_OK ||
        (atomic_load(&s->n) && info->seq <= atomic_load(&s->last)))
        atomic_fetch_add(&s->bad, 1);
    atomic_store(&s->last, info->seq);
    atomic_fetch_add(&s->n, 1);
}

/* The callback form, and its end when the server goes away. */
static void test_callback_form(void **state)
{
    local_ring_t l;
    it_client_t c;
    cb_state_t cs = {0};
    remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_CB, .cb = on_elem, .cb_arg = &cs};
    remora_sub_h sub;
    uint8_t buf[64];
    (void)state;

    local_ring_start(&l, 512, 256, 50);
    it_assert_ok(it_client_open(&c, l.addr, NULL));
    it_assert_ok(remora_client_subscribe(c.client, "r", &sp, &sub));
    it_assert_status(remora_sub_next(sub, buf, sizeof(buf), NULL, 0), REMORA_ERR_INVALID_PARAM);
    for (int i = 0; i < 500 && atomic_load(&cs.n) < 2000; i++)
        it_sleep_ms(10);
    assert_true(atomic_load(&cs.n) >= 2000);
    assert_int_equal(atomic_load(&cs.bad), 0);
    local_ring_stop(&l); /* the server goes: the callback hears why */
    for (int i = 0; i < 300 && !atomic_load(&cs.ended); i++)
        it_sleep_ms(10);
    assert_true(atomic_load(&cs.ended));
    assert_true(cs.end_status != REMORA_OK);
    remora_sub_destroy(sub);
    it_client_close(&c);
}

static uint64_t ring_waits_received(remora_server_h s)
{
    remora_server_stats_t st = {.field_mask = REMORA_SERVER_STATS_FIELD_RING_WAITS};

    it_assert_ok(remora_server_stats(s, &st));
    return st.ring_waits;
}

/* A paced stream keeps a second wait armed: once an answer brought a lone
 * element, the server holds waits for the next two elements while the
 * subscriber is between calls, so a commit is answered at once. */
static void test_paced_wait_armed_ahead(void **state)
{
    local_ring_t l;
    it_client_t c;
    remora_sub_h sub;
    remora_elem_info_t info = {0};
    uint8_t elem[64] = {1}, buf[64];
    (void)state;

    local_ring_open(&l, 64, 64);
    remora_ring_h ring     = l.prod.ring;
    remora_server_h server = l.server;
    it_assert_ok(it_client_open(&c, l.addr, NULL));
    it_assert_ok(remora_client_subscribe(c.client, "r", NULL, &sub));
    uint64_t w0 = ring_waits_received(server);
    it_assert_ok(remora_ring_push(ring, elem, sizeof(elem), NULL));
    it_assert_ok(remora_sub_next(sub, buf, sizeof(buf), &info, 5000));
    assert_int_equal(info.seq, 0);
    /* Nothing more: the call waits for element 1 with a wait for 2 behind it. */
    it_assert_status(remora_sub_next(sub, buf, sizeof(buf), &info, 200), REMORA_ERR_TIMED_OUT);
    /* Waits for 0, 1 and 2; where elements never come inline (the fetch
     * and push variants: REMORA_RING_INLINE=0) only 0 and 1. */
    const char *inl = getenv("REMORA_RING_INLINE");
    uint64_t expect = inl && strtoull(inl, NULL, 0) < sizeof(elem) ? 2 : 3;
    uint64_t armed = ring_waits_received(server) - w0;
    for (int i = 0; i < 200 && armed < expect; i++) { /* a loaded machine: let them land */
        it_sleep_ms(10);
        armed = ring_waits_received(server) - w0;
    }
    if (armed != expect)
        fail_msg("%llu waits reached the server, not %llu", (unsigned long long)armed,
                 (unsigned long long)expect);
    for (uint64_t k = 1; k <= 4; k++) {
        elem[0] = (uint8_t)k;
        it_assert_ok(remora_ring_push(ring, elem, sizeof(elem), NULL));
        it_assert_ok(remora_sub_next(sub, buf, sizeof(buf), &info, 5000));
        assert_int_equal(info.seq, k);
        assert_int_equal(info.drops, 0);
        assert_int_equal(buf[0], (uint8_t)k);
    }
    remora_sub_destroy(sub);
    it_client_close(&c);
    local_ring_close(&l);
}

/* The client goes before its subscriptions: they fail cleanly and can still
 * be destroyed (the client's memory goes with the last of them). */
static void test_disconnect_before_destroy(void **state)
{
    local_ring_t l;
    remora_context_h ctx;
    remora_client_h cl;
    remora_sub_h sub, cbsub;
    cb_state_t cs = {0};
    remora_sub_params_t cp = {.field_mask = REMORA_SUB_FIELD_CB, .cb = on_elem, .cb_arg = &cs};
    uint8_t buf[512];
    (void)state;

    local_ring_start(&l, 512, 64, 200);
    it_assert_ok(remora_context_create(NULL, &ctx));
    it_assert_ok(remora_client_connect(ctx, l.addr, NULL, &cl));
    it_assert_ok(remora_client_subscribe(cl, "r", NULL, &sub));
    it_assert_ok(remora_client_subscribe(cl, "r", &cp, &cbsub));
    it_assert_ok(remora_sub_next(sub, buf, sizeof(buf), NULL, 5000));
    for (int i = 0; i < 300 && atomic_load(&cs.n) < 10; i++)
        it_sleep_ms(10);
    double t0 = it_now_ms();
    remora_client_disconnect(cl);
    assert_true(it_now_ms() - t0 < 1000); /* a pending wait does not hold it up */
    /* Elements already fetched may still come out; then the end shows. */
    remora_status_t st = REMORA_OK;
    for (int i = 0; i < 1000 && st == REMORA_OK; i++)
        st = remora_sub_next(sub, buf, sizeof(buf), NULL, 1000);
    assert_true(st != REMORA_OK && st != REMORA_ERR_TIMED_OUT);
    for (int i = 0; i < 300 && !atomic_load(&cs.ended); i++)
        it_sleep_ms(10);
    assert_true(atomic_load(&cs.ended));
    remora_sub_destroy(sub);
    remora_sub_destroy(cbsub);
    remora_context_destroy(ctx);
    local_ring_stop(&l);
}

/* A clone holds the remote ring's elements under the same sequence numbers. */
static void test_clone_api(void **state)
{
    local_ring_t l;
    it_client_t c;
    remora_ring_h copy;
    uint8_t buf[1024];
    uint64_t seq;
    (void)state;

    local_ring_start(&l, 1000, 128, 100);
    it_sleep_ms(100);
    it_assert_ok(it_client_open(&c, l.addr, NULL));
    it_assert_ok(remora_client_clone_ring(c.client, "r", &copy));
    assert_int_equal(remora_ring_elem_size(copy), 1000);
    assert_int_equal(remora_ring_capacity(copy), 128);
    assert_true(remora_ring_head(copy) > 0);
    /* Only elements committed before the copy started count (later ones may
     * be half-copied): the newest held is at most the head. */
    it_assert_ok(remora_ring_newest(copy, buf, sizeof(buf), &seq));
    assert_true(seq < remora_ring_head(copy));
    assert_int_equal(remora_frame_check(buf, 1000, seq), REMORA_FRAME_OK);
    it_assert_ok(remora_ring_oldest(copy, buf, sizeof(buf), &seq));
    uint64_t held = 0;
    for (; seq < remora_ring_head(copy); seq++) {
        if (remora_ring_get(copy, seq, buf, sizeof(buf)) != REMORA_OK)
            continue;
        assert_int_equal(remora_frame_check(buf, 1000, seq), REMORA_FRAME_OK);
        held++;
    }
    assert_true(held >= 64); /* all but the few the producer overwrote meanwhile */
    it_assert_status(remora_client_clone_ring(c.client, "nope", &copy), REMORA_ERR_NOT_FOUND);
    remora_ring_destroy(copy);
    it_client_close(&c);
    local_ring_stop(&l);
}

/* Elements the producer pushes during ms milliseconds. */
static uint64_t pushes_during(remora_ring_h ring, unsigned ms)
{
    uint64_t h0 = remora_ring_head(ring);
    it_sleep_ms(ms);
    return remora_ring_head(ring) - h0;
}

/* A subscriber that stops dead (SIGSTOP, its socket filling up) or crawls
 * never holds the producer back: the producer never waits for anyone.
 * The baseline is taken with both subscribers live, so that CPU sharing (two
 * cores, sanitizers, other tests in parallel) weighs on both figures alike;
 * the stopped figure is the best of four windows, as blocking would bring
 * every window to ~0 while a busy neighbour only dents some. */
static void test_stopped_subscriber_never_slows_producer(void **state)
{
    local_ring_t l;
    it_proc_t p[2];
    char target[IT_ADDR_MAX + 8];
    (void)state;

    local_ring_start(&l, 4096, 256, 0);
    snprintf(target, sizeof(target), "%s/r", l.addr);
    for (int i = 0; i < 2; i++)
        assert_int_equal(it_cli_spawn(&p[i], NULL, "stream", "read", target, "--seconds", "30",
                                      NULL), 0);
    it_sleep_ms(500);
    uint64_t live = pushes_during(l.prod.ring, 500);
    assert_true(it_stop_process(p[0].pid, 5000)); /* one dead, one still reading */
    it_sleep_ms(200);
    uint64_t stopped = 0;
    for (int w = 0; w < 4; w++) {
        uint64_t n = pushes_during(l.prod.ring, 500);
        stopped = n > stopped ? n : stopped;
    }
    print_message("producer: %llu pushes/0.5 s with two live subscribers, %llu (best of 4) "
                  "with one stopped\n",
                  (unsigned long long)live, (unsigned long long)stopped);
    assert_true(live > 0);
    assert_true(stopped * 4 >= live);
    it_proc_kill(&p[0]);
    it_proc_kill(&p[1]);
    local_ring_stop(&l);
}

static void produce_n(remora_ring_h ring, unsigned n)
{
    size_t es = remora_ring_elem_size(ring);

    for (unsigned i = 0; i < n; i++) {
        void *slot;
        uint64_t seq = remora_ring_head(ring);
        it_assert_ok(remora_ring_reserve(ring, &slot));
        remora_frame_seal(slot, es, seq, 1, remora_frame_payload(slot, es, seq, NULL));
        remora_ring_commit(ring, NULL);
    }
}

/* A ring replaced under its name while a fetching subscriber is behind it:
 * the subscriber says NOT_FOUND, and never takes the new ring's elements
 * for the old one's (reads go by name; the elements' stamps match). */
static void test_replaced_ring_not_followed(void **state)
{
    remora_ring_params_t rp = ring_shape(4096, 64);
    /* Batches of about three elements: the subscriber stays behind, so it
     * goes on fetching without a wait (whose answer would say NOT_FOUND). */
    remora_sub_params_t bp = {.field_mask = REMORA_SUB_FIELD_MODE | REMORA_SUB_FIELD_BATCH_BYTES,
                              .mode = REMORA_SUB_EVERY, .batch_bytes = 16384};
    local_ring_t l;
    remora_sub_h sub;
    remora_elem_info_t info = {0};
    it_client_t c;
    uint8_t buf[4096];
    remora_status_t st = REMORA_OK;
    unsigned taken = 0;
    (void)state;

    local_ring_open(&l, rp.elem_size, rp.capacity);
    it_assert_ok(it_client_open(&c, l.addr, NULL));
    setenv("REMORA_RING_PUSH", "0", 1); /* the fetch path: reads of the slots */
    setenv("REMORA_RING_INLINE", "0", 1);
    it_assert_ok(remora_client_subscribe(c.client, "r", &bp, &sub));
    unsetenv("REMORA_RING_PUSH");
    unsetenv("REMORA_RING_INLINE");
    produce_n(l.prod.ring, 50);
    it_assert_ok(remora_sub_next(sub, buf, sizeof(buf), &info, 5000));
    /* Behind by 49 when the ring goes and another, of the same shape, takes
     * its name and passes its head. */
    remora_ring_destroy(l.prod.ring); /* unexposes it */
    it_assert_ok(remora_ring_create(l.ctx, &rp, &l.prod.ring));
    it_assert_ok(remora_server_expose_ring(l.server, "r", l.prod.ring));
    produce_n(l.prod.ring, 120);
    for (int i = 0; i < 200 && (st = remora_sub_next(sub, buf, sizeof(buf), &info, 2000)) == REMORA_OK; i++) {
        assert_true(info.seq < 50); /* the old ring's, fetched before it went */
        taken++;
    }
    print_message("after the replacement: %u more of the old ring's elements, then %s\n", taken,
                  remora_status_string(st));
    it_assert_status(st, REMORA_ERR_NOT_FOUND);
    remora_sub_destroy(sub);
    it_client_close(&c);
    local_ring_close(&l);
}

/* Whether a server counter reaches [lo, hi] within ms. */
static bool server_stat_reaches(remora_server_h s, uint64_t field, uint64_t lo, uint64_t hi,
                                unsigned ms)
{
    for (unsigned t = 0; t <= ms; t += 10) {
        remora_server_stats_t st = {.field_mask = field};
        it_assert_ok(remora_server_stats(s, &st));
        uint64_t v = field == REMORA_SERVER_STATS_FIELD_CONNS ? st.conns : st.ring_subscribers;
        if (v >= lo && v <= hi)
            return true;
        it_sleep_ms(10);
    }
    return false;
}

/* A ring replaced under its name while a subscriber's connection was down:
 * the subscriber reconnects to the same server instance and says NOT_FOUND,
 * as it would have connected, instead of taking the new ring's elements as
 * the sequel of the old one's (same shape, stamps that match their seq). */
static void test_replaced_ring_while_reconnecting(void **state)
{
    static const char *const fast_env[] = {"REMORA_HEARTBEAT_MS=100", "REMORA_PEER_TIMEOUT_MS=600",
                                           NULL};
    remora_ring_params_t rp = ring_shape(4096, 64);
    char target[IT_ADDR_MAX + 8];
    local_ring_t l;
    it_proc_t p;
    it_run_t r;
    (void)state;

    setenv("REMORA_HEARTBEAT_MS", "100", 1); /* the server drops a silent client in 0.6 s */
    setenv("REMORA_PEER_TIMEOUT_MS", "600", 1);
    local_ring_open(&l, rp.elem_size, rp.capacity);
    unsetenv("REMORA_HEARTBEAT_MS");
    unsetenv("REMORA_PEER_TIMEOUT_MS");
    snprintf(target, sizeof(target), "%s/r", l.addr);
    assert_int_equal(it_cli_spawn(&p, fast_env, "stream", "read", target, "--verify",
                                  "--seconds", "10", NULL), 0);
    /* Subscribed (a wait armed): it follows from the head. */
    assert_true(server_stat_reaches(l.server, REMORA_SERVER_STATS_FIELD_RING_SUBSCRIBERS, 1, 1,
                                    5000));
    produce_n(l.prod.ring, 50);
    it_sleep_ms(300);
    assert_true(it_stop_process(p.pid, 5000));
    /* The server takes it for dead and closes its connection; only then does
     * the ring go (NOT_FOUND on the old connection would prove nothing). */
    assert_true(server_stat_reaches(l.server, REMORA_SERVER_STATS_FIELD_CONNS, 0, 0, 5000));
    remora_ring_destroy(l.prod.ring);
    it_assert_ok(remora_ring_create(l.ctx, &rp, &l.prod.ring));
    it_assert_ok(remora_server_expose_ring(l.server, "r", l.prod.ring));
    produce_n(l.prod.ring, 120);
    kill(p.pid, SIGCONT);
    double t0 = it_now_ms();
    it_proc_wait(&p, 15000, &r);
    print_message("reader exit %d %.0f ms after SIGCONT: %s", r.status, it_now_ms() - t0,
                  r.err);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "reconnected (the same server instance)"));
    assert_non_null(strstr(r.err, "not found"));
    assert_true(it_now_ms() - t0 < 8000); /* well before its --seconds */
    it_run_free(&r);
    local_ring_close(&l);
}

/* The producer dies: the subscriber knows within 2 s; after a restart it subscribes again. */
static void test_producer_killed_then_back(void **state)
{
    it_server_t s;
    it_client_t c;
    remora_sub_h sub;
    remora_elem_info_t info = {0};
    uint8_t buf[4096];
    char addr[IT_ADDR_MAX];
    remora_status_t st;
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "r=4Kx64", "--rate", "1000", NULL);
    snprintf(addr, sizeof(addr), "%s", s.addr);
    it_assert_ok(it_client_open(&c, addr, NULL));
    it_assert_ok(remora_client_subscribe(c.client, "r", NULL, &sub));
    it_assert_ok(remora_sub_next(sub, buf, sizeof(buf), &info, 5000));
    it_server_kill(&s);
    double t0 = it_now_ms();
    do {
        st = remora_sub_next(sub, buf, sizeof(buf), &info, 500);
    } while (st == REMORA_OK && it_now_ms() - t0 < 5000);
    double took = it_now_ms() - t0;
    print_message("subscriber saw %s %.0f ms after the kill\n", remora_status_string(st), took);
    it_assert_status(st, REMORA_ERR_DISCONNECTED);
    assert_true(took < 2000);
    remora_sub_destroy(sub);
    it_client_close(&c);

    it_must_start(&s, "stream", "serve", "--listen", addr, "--ring", "r=4Kx64", "--rate", "1000", NULL);
    it_assert_ok(it_client_open(&c, addr, NULL));
    it_assert_ok(remora_client_subscribe(c.client, "r", NULL, &sub));
    for (int i = 0; i < 100; i++) {
        it_assert_ok(remora_sub_next(sub, buf, sizeof(buf), &info, 5000));
        assert_int_equal(remora_frame_check(buf, sizeof(buf), info.seq), REMORA_FRAME_OK);
    }
    remora_sub_destroy(sub);
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_ls_shows_ring, it_teardown_reap),
        cmocka_unit_test_teardown(test_four_subscribers_never_torn, it_teardown_reap),
        cmocka_unit_test_teardown(test_edge_shapes, it_teardown_reap),
        cmocka_unit_test_teardown(test_bad_input, it_teardown_reap),
        cmocka_unit_test_teardown(test_bad_token, it_teardown_reap),
        cmocka_unit_test_teardown(test_clone_file_source, it_teardown_reap),
        cmocka_unit_test_teardown(test_drops_exact_every, it_teardown_reap),
        cmocka_unit_test_teardown(test_latest_increasing, it_teardown_reap),
        cmocka_unit_test_teardown(test_callback_form, it_teardown_reap),
        cmocka_unit_test_teardown(test_paced_wait_armed_ahead, it_teardown_reap),
        cmocka_unit_test_teardown(test_clone_api, it_teardown_reap),
        cmocka_unit_test_teardown(test_disconnect_before_destroy, it_teardown_reap),
        cmocka_unit_test_teardown(test_producer_killed_then_back, it_teardown_reap),
        cmocka_unit_test_teardown(test_replaced_ring_not_followed, it_teardown_reap),
        cmocka_unit_test_teardown(test_replaced_ring_while_reconnecting, it_teardown_reap),
        cmocka_unit_test_teardown(test_stopped_subscriber_never_slows_producer, it_teardown_reap),
    };

    it_init("ring");
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
