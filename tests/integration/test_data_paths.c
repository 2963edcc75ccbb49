/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A library client against spawned servers, over one data path per CTest
 * registration (see CMakeLists.txt): the environment (UCX_TLS, REMORA_PATH,
 * REMORA_CHUNK_SIZE) picks the path, REMORA_IT_EXPECT_PATH says which one
 * remora_client_region_path must report.
 *
 * Two servers for the whole program:
 *   ro: a (24 MiB + 13 bytes, pattern), b (4 KiB, pattern), read-only
 *   rw: w (16 MiB, zeros), p (16 MiB, pattern), --writable
 * Writes go to disjoint ranges of w, one per test, so tests stay independent.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MiB (1024u * 1024u)
#define A_SIZE (24u * MiB + 13u)
#define B_SIZE 4096u
#define W_SIZE (16u * MiB)
#define P_SIZE (16u * MiB)

/* Ranges of w, one per writer. */
#define W_ROUNDTRIP_OFF 3u               /* 9 MiB + 5 */
#define W_ROUNDTRIP_LEN (9u * MiB + 5u)
#define W_SMALL_OFF     (10u * MiB + 1u) /* single bytes */
#define W_CTX_OFF       (11u * MiB)      /* 1 MiB, concurrent contexts */
#define W_PROC_OFF      (12u * MiB)      /* 2 MiB, concurrent processes */
#define W_THREAD_OFF    (14u * MiB)      /* 4 x 256 KiB, threads on one client */

static it_server_t g_ro, g_rw;
static it_client_t g_c;
static char g_a[IT_ADDR_MAX + 8], g_w[IT_ADDR_MAX + 8];

static remora_path_t expected_path(void)
{
    const char *e = getenv("REMORA_IT_EXPECT_PATH");

    if (e == NULL || strcmp(e, "map") == 0)
        return REMORA_PATH_MAP;
    if (strcmp(e, "am") == 0)
        return REMORA_PATH_AM;
    if (strcmp(e, "rma") == 0)
        return REMORA_PATH_RMA;
    return REMORA_PATH_AUTO;
}

/* Same-host mapping needs a shared-memory transport: not under UCX_TLS=tcp. */
static bool mapping_expected(void)
{
    const char *tls = getenv("UCX_TLS");
    return tls == NULL || strstr(tls, "tcp") == NULL || strstr(tls, "posix") != NULL ||
           strstr(tls, "sm") != NULL;
}

static int group_setup(void **state)
{
    (void)state;
    if (it_server_start(&g_ro, "--region", "a=25165837", "--region", "b=4096", NULL) != 0)
        return -1;
    if (it_server_start(&g_rw, "--region", "w=16M:zero", "--region", "p=16M", "--writable",
                        NULL) != 0)
        return -1;
    snprintf(g_a, sizeof(g_a), "%s/a", g_ro.addr);
    snprintf(g_w, sizeof(g_w), "%s/w", g_rw.addr);
    if (it_client_open(&g_c, g_ro.addr, NULL) != REMORA_OK)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    int rc = 0;
    (void)state;
    it_client_close(&g_c);
    /* A clean shutdown after everything the tests did is part of the test. */
    if (it_server_stop(&g_ro) != 0 || it_server_stop(&g_rw) != 0)
        rc = -1;
    it_reap_all();
    return rc;
}

/* A client of the rw server, for the tests that write. */
static void open_rw(it_client_t *c)
{
    it_assert_ok(it_client_open(c, g_rw.addr, NULL));
}

/* ---------------------------------------------------------------- tests */

/* remora_client_region_path reports the path this registration selects. */
static void test_path_is_the_expected_one(void **state)
{
    remora_path_t path = REMORA_PATH_AUTO;
    (void)state;

    it_assert_ok(remora_client_region_path(g_c.client, "a", &path));
    if (path != expected_path())
        fail_msg("region path is %s, expected %s (UCX_TLS=%s REMORA_PATH=%s)",
                 remora_path_string(path), remora_path_string(expected_path()),
                 getenv("UCX_TLS") ? getenv("UCX_TLS") : "-",
                 getenv("REMORA_PATH") ? getenv("REMORA_PATH") : "-");
    /* Under REMORA_LANES (with servers serving as many), every lane is up. */
    const char *lanes = getenv("REMORA_LANES");
    assert_int_equal(remora_client_lanes(g_c.client), lanes ? (unsigned)atoi(lanes) : 1u);
}

/* The whole 24 MiB + 13 region (several default chunks) arrives exactly. */
static void test_full_read_matches_pattern(void **state)
{
    uint8_t *buf = malloc(A_SIZE);
    (void)state;

    assert_non_null(buf);
    memset(buf, 0xEE, A_SIZE);
    it_assert_ok(remora_client_read(g_c.client, "a", 0, buf, A_SIZE));
    it_assert_pattern(buf, 0, A_SIZE);
    free(buf);
}

/* Unaligned offsets and lengths, first and last byte, chunk-crossing ranges;
 * the bytes around the destination range are not touched. */
static void test_partial_reads_unaligned(void **state)
{
    static const struct { uint64_t off; size_t len; } cases[] = {
        {0, 1}, {1, 1}, {7, 9}, {A_SIZE - 1, 1}, {A_SIZE - 13, 13}, {A_SIZE - 4099, 4099},
        {12345, 3000001}, {4 * MiB - 3, 4 * MiB + 7}, {4 * MiB, 4 * MiB}, {65535, 65537},
        {8191, 8193}, {1, A_SIZE - 1}, {3 * MiB + 5, 9 * MiB + 11},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = cases[i].len;
        uint8_t *buf = malloc(len + 64);
        assert_non_null(buf);
        memset(buf, 0xA5, len + 64);
        it_assert_ok(remora_client_read(g_c.client, "a", cases[i].off, buf + 32, len));
        it_assert_pattern(buf + 32, cases[i].off, len);
        for (size_t k = 0; k < 32; k++) {
            if (buf[k] != 0xA5 || buf[32 + len + k] != 0xA5)
                fail_msg("read of [%llu, +%zu) wrote outside its buffer",
                         (unsigned long long)cases[i].off, len);
        }
        free(buf);
    }
}

/* Zero-length reads succeed anywhere in [0, size], even with a NULL buffer. */
static void test_zero_length_reads(void **state)
{
    uint8_t byte = 0x5A;
    remora_request_h req = NULL;
    (void)state;

    it_assert_ok(remora_client_read(g_c.client, "a", 0, &byte, 0));
    it_assert_ok(remora_client_read(g_c.client, "a", A_SIZE, &byte, 0));
    it_assert_ok(remora_client_read(g_c.client, "a", 12345, NULL, 0));
    assert_int_equal(byte, 0x5A);
    it_assert_ok(remora_client_read_nb(g_c.client, "a", A_SIZE, NULL, 0, &req));
    assert_non_null(req);
    it_assert_ok(remora_request_wait(req, -1));
    it_assert_ok(remora_request_test(req));
    remora_request_release(req);
    /* A NULL buffer with a length is the caller's mistake. */
    it_assert_status(remora_client_read(g_c.client, "a", 0, NULL, 1), REMORA_ERR_INVALID_PARAM);
}

/* Reads several times the chunk size, at an unaligned offset, in one call. */
static void test_read_larger_than_chunk(void **state)
{
    const size_t len = 13 * MiB + 77;
    const uint64_t off = 5 * MiB + 3;
    uint8_t *buf = malloc(len);
    (void)state;

    assert_non_null(buf);
    it_assert_ok(remora_client_read(g_c.client, "a", off, buf, len));
    it_assert_pattern(buf, off, len);
    free(buf);
}

/* Write 9 MiB + 5 of random bytes at offset 3 of a zero region, read them
 * back exactly; the bytes just before and after are still zero. */
static void test_write_then_read_back(void **state)
{
    it_client_t c;
    uint8_t *data = malloc(W_ROUNDTRIP_LEN), *back = malloc(W_ROUNDTRIP_LEN + 6);
    remora_path_t path;
    (void)state;

    assert_non_null(data);
    assert_non_null(back);
    open_rw(&c);
    it_assert_ok(remora_client_region_path(c.client, "w", &path));
    assert_int_equal(path, expected_path());
    it_fill_random(data, W_ROUNDTRIP_LEN, 1);
    it_assert_ok(remora_client_write(c.client, "w", W_ROUNDTRIP_OFF, data, W_ROUNDTRIP_LEN));
    memset(back, 0xEE, W_ROUNDTRIP_LEN + 6);
    it_assert_ok(remora_client_read(c.client, "w", 0, back, W_ROUNDTRIP_LEN + 6));
    assert_memory_equal(back, "\0\0\0", 3);
    assert_memory_equal(back + 3, data, W_ROUNDTRIP_LEN);
    assert_memory_equal(back + 3 + W_ROUNDTRIP_LEN, "\0\0\0", 3);

    /* Single bytes, the last byte of the region, and a zero-length write at its end. */
    uint8_t one = 0x7E, got[3] = {0};
    it_assert_ok(remora_client_write(c.client, "w", W_SMALL_OFF, &one, 1));
    it_assert_ok(remora_client_read(c.client, "w", W_SMALL_OFF - 1, got, 3));
    assert_memory_equal(got, "\0\x7e\0", 3);
    it_assert_ok(remora_client_write(c.client, "w", W_SIZE - 1, &one, 1));
    it_assert_ok(remora_client_read(c.client, "w", W_SIZE - 1, got, 1));
    assert_int_equal(got[0], 0x7E);
    it_assert_ok(remora_client_write(c.client, "w", W_SIZE, &one, 0));

    /* A second, independent client sees the written bytes too. */
    it_client_t c2;
    open_rw(&c2);
    memset(back, 0, W_ROUNDTRIP_LEN);
    it_assert_ok(remora_client_read(c2.client, "w", W_ROUNDTRIP_OFF, back, W_ROUNDTRIP_LEN));
    assert_memory_equal(back, data, W_ROUNDTRIP_LEN);
    it_client_close(&c2);
    it_client_close(&c);
    free(data);
    free(back);
}

/* Every range not inside the region is REMORA_ERR_OUT_OF_RANGE, overflowing ones included. */
static void test_out_of_range(void **state)
{
    static const struct { uint64_t off; uint64_t len; } cases[] = {
        {A_SIZE + 1, 0}, {A_SIZE, 1}, {A_SIZE - 1, 2}, {0, A_SIZE + 1}, {UINT64_MAX, 1},
        {UINT64_MAX, 0}, {1, SIZE_MAX}, {UINT64_MAX - 2, 8}, {A_SIZE + 4096, 4096},
    };
    uint8_t buf[16];
    remora_request_h req = (remora_request_h)(uintptr_t)0x1;
    it_client_t c;
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        remora_status_t st = remora_client_read(g_c.client, "a", cases[i].off, buf,
                                                (size_t)cases[i].len);
        if (st != REMORA_ERR_OUT_OF_RANGE)
            fail_msg("read [%llu, +%llu) of a %u-byte region: %s, expected out of range",
                     (unsigned long long)cases[i].off, (unsigned long long)cases[i].len,
                     A_SIZE, remora_status_string(st));
    }
    /* The non-blocking form fails the same way and creates no request. */
    it_assert_status(remora_client_read_nb(g_c.client, "a", A_SIZE, buf, 1, &req),
                     REMORA_ERR_OUT_OF_RANGE);
    assert_ptr_equal(req, (remora_request_h)(uintptr_t)0x1);
    /* Writes too. */
    open_rw(&c);
    it_assert_status(remora_client_write(c.client, "w", W_SIZE, buf, 1), REMORA_ERR_OUT_OF_RANGE);
    it_assert_status(remora_client_write(c.client, "w", W_SIZE - 8, buf, 16),
                     REMORA_ERR_OUT_OF_RANGE);
    it_client_close(&c);
    /* The connection is still fine. */
    it_assert_ok(remora_client_read(g_c.client, "a", A_SIZE - 16, buf, 16));
    it_assert_pattern(buf, A_SIZE - 16, 16);
}

/* A region that does not exist is REMORA_ERR_NOT_FOUND for every call that names it. */
static void test_missing_region(void **state)
{
    uint8_t buf[8];
    remora_region_info_t info = {0};
    remora_path_t path;
    remora_request_h req = NULL;
    (void)state;

    it_assert_status(remora_client_read(g_c.client, "nope", 0, buf, 8), REMORA_ERR_NOT_FOUND);
    it_assert_status(remora_client_read_nb(g_c.client, "nope", 0, buf, 8, &req),
                     REMORA_ERR_NOT_FOUND);
    assert_null(req);
    it_assert_status(remora_client_lookup(g_c.client, "nope", &info), REMORA_ERR_NOT_FOUND);
    it_assert_status(remora_client_region_path(g_c.client, "nope", &path), REMORA_ERR_NOT_FOUND);
    /* Names differing only in case or by a prefix are other names. */
    it_assert_status(remora_client_lookup(g_c.client, "A", &info), REMORA_ERR_NOT_FOUND);
    it_assert_status(remora_client_lookup(g_c.client, "aa", &info), REMORA_ERR_NOT_FOUND);
}

/* Writing a region exposed read-only is REMORA_ERR_READ_ONLY, and nothing changes. */
static void test_write_read_only(void **state)
{
    uint8_t data[64], back[64];
    remora_request_h req = NULL;
    (void)state;

    memset(data, 0, sizeof(data));
    it_assert_status(remora_client_write(g_c.client, "a", 0, data, sizeof(data)),
                     REMORA_ERR_READ_ONLY);
    it_assert_status(remora_client_write_nb(g_c.client, "a", 100, data, 1, &req),
                     REMORA_ERR_READ_ONLY);
    assert_null(req);
    it_assert_status(remora_client_write(g_c.client, "b", B_SIZE - 1, data, 1),
                     REMORA_ERR_READ_ONLY);
    it_assert_ok(remora_client_read(g_c.client, "a", 0, back, sizeof(back)));
    it_assert_pattern(back, 0, sizeof(back));
}

static const remora_region_info_t *find_info(const remora_region_info_t *infos, size_t n,
                                             const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(infos[i].name, name) == 0)
            return &infos[i];
    return NULL;
}

/* list: every region once, with size, host memory, access and generation 1. */
static void test_list_fields(void **state)
{
    remora_region_info_t *infos = NULL;
    size_t n = 0;
    const remora_region_info_t *a, *b;
    it_client_t c;
    (void)state;

    it_assert_ok(remora_client_list(g_c.client, &infos, &n));
    assert_int_equal(n, 2);
    a = find_info(infos, n, "a");
    b = find_info(infos, n, "b");
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->size, A_SIZE);
    assert_int_equal(a->access, REMORA_ACCESS_READ);
    assert_int_equal(a->generation, 1);
    assert_int_equal(a->mem_type, REMORA_MEM_HOST);
    assert_int_equal(b->size, B_SIZE);
    assert_int_equal(b->access, REMORA_ACCESS_READ);
    assert_int_equal(b->generation, 1);
    remora_region_info_free(infos);

    open_rw(&c);
    it_assert_ok(remora_client_list(c.client, &infos, &n));
    assert_int_equal(n, 2);
    a = find_info(infos, n, "w");
    assert_non_null(a);
    assert_int_equal(a->size, W_SIZE);
    assert_int_equal(a->access, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);
    assert_int_equal(a->generation, 1);
    assert_int_equal(a->mem_type, REMORA_MEM_HOST);
    remora_region_info_free(infos);
    it_client_close(&c);
}

/* lookup: the same fields for one region, and the name copied back. */
static void test_lookup_fields(void **state)
{
    remora_region_info_t info = {0};
    (void)state;

    memset(&info, 0xFF, sizeof(info));
    info.field_mask = 0; /* every field */
    it_assert_ok(remora_client_lookup(g_c.client, "a", &info));
    assert_string_equal(info.name, "a");
    assert_int_equal(info.size, A_SIZE);
    assert_int_equal(info.access, REMORA_ACCESS_READ);
    assert_int_equal(info.generation, 1);
    assert_int_equal(info.mem_type, REMORA_MEM_HOST);
    it_assert_ok(remora_client_lookup(g_c.client, "b", &info));
    assert_string_equal(info.name, "b");
    assert_int_equal(info.size, B_SIZE);
}

/* ping: a positive, plausible round-trip time. */
static void test_ping(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        double rtt = -1.0;
        it_assert_ok(remora_client_ping(g_c.client, &rtt));
        if (!(rtt > 0.0 && rtt < 5e6))
            fail_msg("ping %d: rtt %f us", i, rtt);
    }
}

/* Same host: remora_client_map gives the server's bytes, unless no shared memory. */
static void test_map(void **state)
{
    const void *addr = NULL;
    size_t len = 0;
    remora_status_t st;
    (void)state;

    st = remora_client_map(g_c.client, "a", &addr, &len);
    if (!mapping_expected()) {
        it_assert_status(st, REMORA_ERR_UNSUPPORTED);
        assert_null(addr);
        return;
    }
    it_assert_ok(st);
    assert_non_null(addr);
    assert_int_equal(len, A_SIZE);
    it_assert_pattern(addr, 0, A_SIZE);
    it_assert_ok(remora_client_unmap(g_c.client, addr));
    it_assert_status(remora_client_unmap(g_c.client, addr), REMORA_ERR_NOT_FOUND);
}

/* 32 non-blocking reads of distinct ranges in flight at once; each gets its own bytes. */
static void test_many_requests_in_flight(void **state)
{
    enum { N = 32 };
    remora_request_h reqs[N];
    uint8_t *bufs[N];
    uint64_t offs[N];
    size_t lens[N];
    (void)state;

    for (int i = 0; i < N; i++) {
        offs[i] = (uint64_t)i * 700001u + (uint64_t)i;
        lens[i] = (i % 8 == 0) ? 4 * MiB + (size_t)i * 3 : 65536 + (size_t)i * 4099;
        bufs[i] = malloc(lens[i]);
        assert_non_null(bufs[i]);
        memset(bufs[i], 0xEE, lens[i]);
        it_assert_ok(remora_client_read_nb(g_c.client, "a", offs[i], bufs[i], lens[i], &reqs[i]));
        assert_non_null(reqs[i]);
    }
    for (int i = N - 1; i >= 0; i--) { /* in reverse, for good measure */
        it_assert_ok(remora_request_wait(reqs[i], -1));
        it_assert_ok(remora_request_test(reqs[i]));
    }
    for (int i = 0; i < N; i++) {
        it_assert_pattern(bufs[i], offs[i], lens[i]);
        remora_request_release(reqs[i]);
        free(bufs[i]);
    }
}

/* ---------------------------------------------------------------- concurrency */

typedef struct worker {
    pthread_t        thread;
    remora_client_h  client;   /* shared client, or NULL: open an own context */
    const char      *addr;
    int              id;
    bool             writer;
    char             error[256];
} worker_t;

static void worker_fail(worker_t *w, const char *what, remora_status_t st, uint64_t off)
{
    if (w->error[0] == '\0')
        snprintf(w->error, sizeof(w->error), "thread %d: %s: %s at offset %llu", w->id, what,
                 remora_status_string(st), (unsigned long long)off);
}

/* Reads of pseudo-random ranges of a, each verified. */
static void worker_reads(worker_t *w, remora_client_h c, int iters)
{
    uint64_t x = 0x1234567ull + (uint64_t)w->id * 7919u;
    uint8_t *buf = malloc(2 * MiB);

    for (int i = 0; i < iters && buf && w->error[0] == '\0'; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = 1 + (size_t)((x >> 33) % (2 * MiB));
        uint64_t off = (x >> 7) % (A_SIZE - len + 1);
        remora_status_t st = remora_client_read(c, "a", off, buf, len);
        if (st != REMORA_OK)
            worker_fail(w, "read", st, off);
        else if (remora_pattern_check(buf, off, len) >= 0)
            worker_fail(w, "pattern mismatch", REMORA_OK, off);
    }
    free(buf);
}

/* Writes of random bytes to the worker's own range of w, each read back. */
static void worker_writes(worker_t *w, remora_client_h c, uint64_t base, size_t span, int iters)
{
    uint8_t *data = malloc(span), *back = malloc(span);

    for (int i = 0; i < iters && data && back && w->error[0] == '\0'; i++) {
        it_fill_random(data, span, (uint64_t)w->id * 1000u + (uint64_t)i);
        remora_status_t st = remora_client_write(c, "w", base, data, span);
        if (st == REMORA_OK)
            st = remora_client_read(c, "w", base, back, span);
        if (st != REMORA_OK)
            worker_fail(w, "write/read", st, base);
        else if (memcmp(data, back, span) != 0)
            worker_fail(w, "write read back differs", REMORA_OK,
                        base);
    }
    free(data);
    free(back);
}

static void *shared_client_worker(void *arg)
{
    worker_t *w = arg;
    if (w->writer)
        worker_writes(w, w->client, W_THREAD_OFF + (uint64_t)w->id * 256u * 1024u, 256u * 1024u,
                      20);
    else
        worker_reads(w, w->client, 40);
    return NULL;
}

/* Four threads read and two write through one client at the same time. */
static void test_threads_share_one_client(void **state)
{
    enum { NR = 4, NW = 2 };
    worker_t w[NR + NW];
    it_client_t rw;
    (void)state;

    open_rw(&rw);
    memset(w, 0, sizeof(w));
    for (int i = 0; i < NR + NW; i++) {
        w[i].id = i;
        w[i].writer = i >= NR;
        w[i].client = w[i].writer ? rw.client : g_c.client;
        assert_int_equal(pthread_create(&w[i].thread, NULL, shared_client_worker, &w[i]), 0);
    }
    for (int i = 0; i < NR + NW; i++)
        pthread_join(w[i].thread, NULL);
    it_client_close(&rw);
    for (int i = 0; i < NR + NW; i++)
        if (w[i].error[0])
            fail_msg("%s", w[i].error);
}

static void *own_context_worker(void *arg)
{
    worker_t *w = arg;
    it_client_t c;
    remora_status_t st = it_client_open(&c, w->addr, NULL);

    if (st != REMORA_OK) {
        worker_fail(w, "connect", st, 0);
        return NULL;
    }
    if (w->writer)
        worker_writes(w, c.client, W_CTX_OFF, MiB, 10);
    else
        worker_reads(w, c.client, 25);
    it_client_close(&c);
    return NULL;
}

/* Four contexts read while a fifth writes another region, all at once. */
static void test_contexts_concurrent(void **state)
{
    enum { N = 5 };
    worker_t w[N];
    (void)state;

    memset(w, 0, sizeof(w));
    for (int i = 0; i < N; i++) {
        w[i].id = 10 + i;
        w[i].writer = i == N - 1;
        w[i].addr = w[i].writer ? g_rw.addr : g_ro.addr;
        assert_int_equal(pthread_create(&w[i].thread, NULL, own_context_worker, &w[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(w[i].thread, NULL);
    for (int i = 0; i < N; i++)
        if (w[i].error[0])
            fail_msg("%s", w[i].error);
}

/* Four `remora read --verify` processes and one `remora write` process at once;
 * the readers of p see only the pattern, the written bytes are exact. */
static void test_processes_concurrent(void **state)
{
    enum { NR = 4 };
    it_proc_t readers[NR], writer;
    it_run_t r;
    char p_target[IT_ADDR_MAX + 8], file[512], off[32];
    uint8_t *data = malloc(2 * MiB), *back = malloc(2 * MiB);
    it_client_t c;
    (void)state;

    assert_non_null(data);
    assert_non_null(back);
    it_fill_random(data, 2 * MiB, 99);
    it_tmp_path(file, sizeof(file), "proc-write.bin");
    assert_int_equal(it_write_file(file, data, 2 * MiB), 0);
    snprintf(p_target, sizeof(p_target), "%s/p", g_rw.addr);
    snprintf(off, sizeof(off), "%u", W_PROC_OFF);

    assert_int_equal(it_cli_spawn(&writer, NULL, "write", g_w, "--offset", off, "-i", file,
                                  NULL), 0);
    for (int i = 0; i < NR; i++) {
        const char *t = i % 2 ? p_target : g_a;
        assert_int_equal(it_cli_spawn(&readers[i], NULL, "read", t, "--verify", NULL), 0);
    }
    for (int i = 0; i < NR; i++) {
        it_proc_wait(&readers[i], IT_CLI_TIMEOUT_MS, &r);
        if (r.status != 0)
            fail_msg("reader %d exited %d: %s", i, r.status, r.err);
        it_run_free(&r);
    }
    it_proc_wait(&writer, IT_CLI_TIMEOUT_MS, &r);
    if (r.status != 0)
        fail_msg("writer exited %d: %s", r.status, r.err);
    it_run_free(&r);

    open_rw(&c);
    it_assert_ok(remora_client_read(c.client, "w", W_PROC_OFF, back, 2 * MiB));
    assert_memory_equal(back, data, 2 * MiB);
    it_assert_ok(remora_client_read(c.client, "p", 0, back, 2 * MiB));
    it_assert_pattern(back, 0, 2 * MiB);
    it_client_close(&c);
    free(data);
    free(back);
}

/* The map path needs a shared-memory transport UCX can use here; a machine
 * without one (no /dev/shm, say) cannot test it: skip rather than fail. */
static void skip_if_no_shared_memory(void)
{
    remora_context_h ctx;
    remora_context_attr_t attr = {0};

    if (expected_path() != REMORA_PATH_MAP)
        return;
    if (remora_context_create(NULL, &ctx) != REMORA_OK)
        return; /* the tests will say why */
    if (remora_context_query(ctx, &attr) == REMORA_OK && strstr(attr.transports, "posix") == NULL &&
        strstr(attr.transports, "sysv") == NULL && strstr(attr.transports, "xpmem") == NULL) {
        remora_context_destroy(ctx);
        it_skip_all("UCX has no shared-memory transport here; the map path cannot be tested");
    }
    remora_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_is_the_expected_one),
        cmocka_unit_test(test_full_read_matches_pattern),
        cmocka_unit_test(test_partial_reads_unaligned),
        cmocka_unit_test(test_zero_length_reads),
        cmocka_unit_test(test_read_larger_than_chunk),
        cmocka_unit_test(test_write_then_read_back),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_missing_region),
        cmocka_unit_test(test_write_read_only),
        cmocka_unit_test(test_list_fields),
        cmocka_unit_test(test_lookup_fields),
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_map),
        cmocka_unit_test(test_many_requests_in_flight),
        cmocka_unit_test(test_threads_share_one_client),
        cmocka_unit_test(test_contexts_concurrent),
        cmocka_unit_test(test_processes_concurrent),
    };

    it_init("data-paths");
    skip_if_no_shared_memory();
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
