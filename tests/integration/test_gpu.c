/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU memory end to end, on a machine with a GPU (skipped, exit 77, without):
 * every local host/GPU buffer x remote host/GPU region x path (IPC, staging,
 * UCX itself where it handles CUDA memory, and the automatic choice),
 * byte-exact reads and writes, large (rendezvous) and small (eager); two GPUs (NVLink or
 * PCIe peer) when there are two; a ring subscription landing in GPU memory;
 * a GPU region replaced while a client holds its IPC mapping; a server killed
 * while a client copies from its GPU memory.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GPU_REGION (64u << 20)

static int g_ngpus;
static it_server_t g_host, g_gpu; /* --region r=64M on the host / on GPU 0, writable */

/* A buffer in host memory (gpu < 0) or on a GPU, from the client's context. */
typedef struct buf {
    void        *p;
    remora_mem_h mem;
} buf_t;

static void buf_alloc(buf_t *b, remora_context_h ctx, int gpu, size_t len)
{
    memset(b, 0, sizeof(*b));
    if (gpu < 0) {
        assert_non_null(b->p = malloc(len));
        return;
    }
    remora_mem_params_t p = {.field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE |
                                           REMORA_MEM_FIELD_DEVICE,
                             .length = len, .type = REMORA_MEM_CUDA, .device = gpu};
    it_assert_ok(remora_mem_create(ctx, &p, &b->mem));
    b->p = remora_mem_address(b->mem);
}

static void buf_free(buf_t *b)
{
    if (b->mem)
        remora_mem_destroy(b->mem);
    else
        free(b->p);
}

/* The bytes of buf (any memory) hold the pattern for [off, off+len). */
static void assert_buf_pattern(const void *buf, uint64_t off, size_t len)
{
    uint8_t *host = malloc(len);
    assert_non_null(host);
    it_assert_ok(remora_copy(host, buf, len));
    it_assert_pattern(host, off, len);
    free(host);
}

static int group_setup(void **state)
{
    remora_cuda_attr_t a = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                          REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT};
    (void)state;
    if (remora_cuda_query(&a) != REMORA_OK || !a.available || a.device_count < 1)
        it_skip_all("no CUDA device");
    g_ngpus = a.device_count;
    if (it_server_start(&g_host, "--region", "r=64M", "--writable", NULL) != 0 ||
        it_server_start(&g_gpu, "--region", "r=64M", "--writable", "--gpu", "0", NULL) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = it_server_stop(&g_gpu) == 0 && it_server_stop(&g_host) == 0 ? 0 : -1;
    it_reap_all();
    return rc;
}

/* Read the whole region and an odd sub-range, write a range back and read it
 * again: local buffer on `gpu` (-1: host), client forced to `path`. */
static void exercise(const char *addr, int gpu, remora_path_t path, remora_path_t want)
{
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_PATH, .path = path};
    it_client_t c;
    buf_t b, w;
    remora_path_t got;
    const uint64_t off = 12345, len = (5u << 20) + 7;

    it_assert_ok(it_client_open(&c, addr, &cp));
    it_assert_ok(remora_client_region_path(c.client, "r", &got));
    if (got != want)
        fail_msg("path %s, expected %s", remora_path_string(got), remora_path_string(want));
    buf_alloc(&b, c.ctx, gpu, GPU_REGION);
    it_assert_ok(remora_client_read(c.client, "r", 0, b.p, GPU_REGION));
    assert_buf_pattern(b.p, 0, GPU_REGION);
    it_assert_ok(remora_client_read(c.client, "r", off, b.p, len));
    assert_buf_pattern(b.p, off, len);

    /* Write the pattern of another offset, read it back into a host buffer. */
    const uint64_t woff = 3u << 20, src = 40u << 20;
    size_t wlen = (2u << 20) + 3;
    buf_alloc(&w, c.ctx, gpu, wlen);
    uint8_t *host = malloc(wlen), *back = malloc(wlen);
    remora_pattern_fill(host, src, wlen);
    it_assert_ok(remora_copy(w.p, host, wlen));
    it_assert_ok(remora_client_write(c.client, "r", woff, w.p, wlen));
    it_assert_ok(remora_client_read(c.client, "r", woff, back, wlen));
    it_assert_pattern(back, src, wlen);
    /* Small: eager messages, whose bytes UCX hands over in host memory; a
     * GPU side gets a CUDA copy of them. */
    const uint64_t soff = 7u << 20;
    const size_t slen = 333;
    it_assert_ok(remora_client_write(c.client, "r", soff, w.p, slen));
    it_assert_ok(remora_client_read(c.client, "r", soff, b.p, slen));
    assert_buf_pattern(b.p, src, slen);
    /* Put the pattern back for the next case. */
    remora_pattern_fill(host, woff, wlen);
    it_assert_ok(remora_client_write(c.client, "r", woff, host, wlen));
    remora_pattern_fill(host, soff, slen);
    it_assert_ok(remora_client_write(c.client, "r", soff, host, slen));
    free(host);
    free(back);
    buf_free(&w);
    buf_free(&b);
    it_client_close(&c);
}

static void test_host_region(void **state)
{
    (void)state;
    exercise(g_host.addr, -1, REMORA_PATH_AUTO, REMORA_PATH_MAP);
    exercise(g_host.addr, 0, REMORA_PATH_AUTO, REMORA_PATH_MAP);
    exercise(g_host.addr, -1, REMORA_PATH_STAGING, REMORA_PATH_AM);
    exercise(g_host.addr, 0, REMORA_PATH_STAGING, REMORA_PATH_AM);
}

/* Whether UCX here (and so in the servers, started with the same
 * environment) handles CUDA memory: a UCX built with CUDA, with a GPU. */
static int ucx_handles_cuda(void)
{
    remora_context_h ctx;
    remora_context_attr_t a = {0};
    int yes = 0;

    it_assert_ok(remora_context_create(NULL, &ctx));
    if (remora_context_query(ctx, &a) == REMORA_OK)
        yes = (a.ucx_mem_types & (1u << REMORA_MEM_CUDA)) != 0;
    remora_context_destroy(ctx);
    return yes;
}

static void test_gpu_region(void **state)
{
    /* forced active messages: straight through UCX where it registered the
     * GPU region, else (a UCX without CUDA) staging */
    remora_path_t am = ucx_handles_cuda() ? REMORA_PATH_AM : REMORA_PATH_STAGING;
    (void)state;
    print_message("UCX handles CUDA memory: %s\n", am == REMORA_PATH_AM ? "yes" : "no");
    exercise(g_gpu.addr, -1, REMORA_PATH_AM, am);
    exercise(g_gpu.addr, 0, REMORA_PATH_AM, am);
    exercise(g_gpu.addr, -1, REMORA_PATH_AUTO, REMORA_PATH_IPC);
    exercise(g_gpu.addr, 0, REMORA_PATH_AUTO, REMORA_PATH_IPC);
    exercise(g_gpu.addr, -1, REMORA_PATH_IPC, REMORA_PATH_IPC);
    exercise(g_gpu.addr, 0, REMORA_PATH_IPC, REMORA_PATH_IPC);
    exercise(g_gpu.addr, -1, REMORA_PATH_STAGING, REMORA_PATH_STAGING);
    exercise(g_gpu.addr, 0, REMORA_PATH_STAGING, REMORA_PATH_STAGING);
}

/* GPU buffers that UCX moves itself (am path) are registered once per
 * allocation and kept (client_reg.c): reads and writes through more
 * allocations than it keeps, some freed and made again (often at the same
 * address, then with a new buffer ID), every one byte-exact. */
static void test_gpu_buffers_come_and_go(void **state)
{
    enum { NBUF = 12 };
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_PATH, .path = REMORA_PATH_AM};
    it_client_t c;
    buf_t b[NBUF];
    size_t len[NBUF];
    (void)state;

    if (!ucx_handles_cuda())
        skip(); /* GPU buffers go through staging: nothing is registered */
    it_assert_ok(it_client_open(&c, g_gpu.addr, &cp));
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < NBUF; i++) {
            uint64_t off = (uint64_t)i * 65536 + (uint64_t)round * 4096;
            if (round == 0 || i % 3 == 0) {
                if (round)
                    buf_free(&b[i]); /* and made again, likely where it was */
                len[i] = (1u << 20) + (size_t)i * 4099 + (size_t)round;
                buf_alloc(&b[i], c.ctx, 0, len[i]);
            }
            it_assert_ok(remora_client_read(c.client, "r", off, b[i].p, len[i]));
            assert_buf_pattern(b[i].p, off, len[i]);
            /* the bytes go back where they came from: the region stays as it was */
            it_assert_ok(remora_client_write(c.client, "r", off, b[i].p, len[i]));
        }
    for (int i = 0; i < NBUF; i++) {
        it_assert_ok(remora_client_read(c.client, "r", 0, b[i].p, len[i]));
        assert_buf_pattern(b[i].p, 0, len[i]);
        buf_free(&b[i]);
    }
    it_client_close(&c);
}

/* A host region asked to go through IPC: a clear error, not a crash. */
static void test_ipc_refused_for_host_region(void **state)
{
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_PATH, .path = REMORA_PATH_IPC};
    it_client_t c;
    uint8_t b[64];
    (void)state;

    it_assert_ok(it_client_open(&c, g_host.addr, &cp));
    it_assert_status(remora_client_read(c.client, "r", 0, b, sizeof(b)), REMORA_ERR_UNSUPPORTED);
    it_client_close(&c);
}

/* A region on GPU 1 served by this process, whose thread has GPU 0's
 * context (the first GPU 0 buffer made on a thread binds it there): a UCX
 * with CUDA must still register it (in GPU 1's context: in GPU 0's, UCX
 * 1.13 found no such allocation and the region lost UCX's path), so forced
 * active messages go through UCX. */
static void region_on_gpu1(void)
{
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE |
                                            REMORA_MEM_FIELD_DEVICE,
                              .length = GPU_REGION, .type = REMORA_MEM_CUDA, .device = 1};
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_region_params_t rp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags = REMORA_REGION_WRITABLE};
    remora_path_t am = ucx_handles_cuda() ? REMORA_PATH_AM : REMORA_PATH_STAGING;
    remora_context_h ctx;
    remora_mem_h mem;
    remora_server_h srv;
    char addr[80];
    uint8_t *host = malloc(GPU_REGION);

    assert_non_null(host);
    it_assert_ok(remora_context_create(NULL, &ctx));
    buf_t first; /* binds this thread to GPU 0, should this case run alone */
    buf_alloc(&first, ctx, 0, 4096);
    buf_free(&first);
    it_assert_ok(remora_mem_create(ctx, &mp, &mem));
    remora_pattern_fill(host, 0, GPU_REGION);
    it_assert_ok(remora_copy(remora_mem_address(mem), host, GPU_REGION));
    it_assert_ok(remora_server_create(ctx, &sp, &srv));
    it_assert_ok(remora_server_expose(srv, "r", mem, &rp));
    it_assert_ok(remora_server_address(srv, addr, sizeof(addr)));
    exercise(addr, 1, REMORA_PATH_AM, am);
    exercise(addr, 0, REMORA_PATH_AM, am);
    exercise(addr, -1, REMORA_PATH_AM, am);
    remora_server_destroy(srv);
    remora_mem_destroy(mem);
    remora_context_destroy(ctx);
    free(host);
}

/* Two GPUs: region on GPU 0, buffer on GPU 1 (peer copy over NVLink/PCIe),
 * and a region on GPU 1. */
static void test_two_gpus(void **state)
{
    (void)state;
    if (g_ngpus < 2)
        skip();
    region_on_gpu1();
    exercise(g_gpu.addr, 1, REMORA_PATH_AUTO, REMORA_PATH_IPC);
    exercise(g_gpu.addr, 1, REMORA_PATH_STAGING, REMORA_PATH_STAGING);
    exercise(g_gpu.addr, 1, REMORA_PATH_AM,
             ucx_handles_cuda() ? REMORA_PATH_AM : REMORA_PATH_STAGING);
}

/* Ring elements land in GPU memory and check out there. */
static void test_ring_into_gpu(void **state)
{
    it_server_t s;
    it_client_t c;
    remora_sub_h sub;
    remora_elem_info_t info = {0};
    buf_t g;
    uint8_t *host = malloc(1 << 20);
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "f=1Mx16", "--rate", "500", NULL);
    it_assert_ok(it_client_open(&c, s.addr, NULL));
    it_assert_ok(remora_client_subscribe(c.client, "f", NULL, &sub));
    buf_alloc(&g, c.ctx, 0, 1 << 20);
    for (int i = 0; i < 200; i++) {
        it_assert_ok(remora_sub_next(sub, g.p, 1 << 20, &info, 5000));
        it_assert_ok(remora_copy(host, g.p, 1 << 20));
        assert_int_equal(remora_frame_check(host, 1 << 20, info.seq), REMORA_FRAME_OK);
    }
    remora_sub_destroy(sub);
    buf_free(&g);
    it_client_close(&c);
    free(host);
    assert_int_equal(it_server_stop(&s), 0);
}

/* A ring whose elements live in GPU memory: the local API, then remote
 * subscribers over IPC and over staging, into host and GPU buffers. */
static void test_gpu_resident_ring(void **state)
{
    remora_context_h ctx;
    remora_ring_h ring;
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                             REMORA_RING_FIELD_CAPACITY |
                                             REMORA_RING_FIELD_MEM_TYPE | REMORA_RING_FIELD_DEVICE,
                               .elem_size = 4096, .capacity = 8, .mem_type = REMORA_MEM_CUDA};
    uint8_t in[4096], out[4096];
    uint64_t seq;
    (void)state;

    it_assert_ok(remora_context_create(NULL, &ctx));
    it_assert_ok(remora_ring_create(ctx, &rp, &ring));
    for (uint64_t i = 0; i < 12; i++) {
        remora_frame_seal(in, sizeof(in), i, 7, remora_frame_payload(in, sizeof(in), i, NULL));
        it_assert_ok(remora_ring_push(ring, in, sizeof(in), &seq));
        assert_int_equal(seq, i);
    }
    it_assert_status(remora_ring_push(ring, in, 100, NULL), REMORA_ERR_INVALID_PARAM);
    it_assert_ok(remora_ring_get(ring, 9, out, sizeof(out)));
    assert_int_equal(remora_frame_check(out, sizeof(out), 9), REMORA_FRAME_OK);
    it_assert_status(remora_ring_get(ring, 3, out, sizeof(out)), REMORA_ERR_OUT_OF_RANGE);
    it_assert_ok(remora_ring_newest(ring, out, sizeof(out), &seq));
    assert_int_equal(seq, 11);
    remora_ring_destroy(ring);
    remora_context_destroy(ctx);

    /* Remote: the producer's ring elements sit on GPU 0. */
    it_server_t s;
    it_must_start(&s, "stream", "serve", "--ring", "g=1Mx16", "--rate", "500", "--gpu", "0", NULL);
    remora_path_t paths[] = {REMORA_PATH_AUTO, REMORA_PATH_STAGING};
    for (int p = 0; p < 2; p++) {
        remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_PATH, .path = paths[p]};
        it_client_t c;
        remora_sub_h sub;
        remora_elem_info_t info = {0};
        remora_region_info_t ri = {0};
        buf_t g;
        uint8_t *host = malloc(1 << 20);

        it_assert_ok(it_client_open(&c, s.addr, &cp));
        it_assert_ok(remora_client_lookup(c.client, "g#data", &ri)); /* the elements' region */
        assert_int_equal(ri.mem_type, REMORA_MEM_CUDA);
        it_assert_ok(remora_client_subscribe(c.client, "g", NULL, &sub));
        buf_alloc(&g, c.ctx, 0, 1 << 20);
        for (int i = 0; i < 100; i++) {
            void *dst = (i & 1) ? g.p : host; /* into GPU and host memory alike */
            it_assert_ok(remora_sub_next(sub, dst, 1 << 20, &info, 5000));
            it_assert_ok(remora_copy(host, dst, 1 << 20));
            assert_int_equal(remora_frame_check(host, 1 << 20, info.seq), REMORA_FRAME_OK);
        }
        remora_ring_h copy;
        it_assert_status(remora_client_clone_ring(c.client, "g", &copy), REMORA_ERR_UNSUPPORTED);
        remora_sub_destroy(sub);
        buf_free(&g);
        free(host);
        it_client_close(&c);
    }
    assert_int_equal(it_server_stop(&s), 0);
}

/* The region is replaced while the client holds its IPC mapping: the next
 * reads see the new memory (new size, new handle), not the old. */
static void test_replaced_under_ipc(void **state)
{
    it_server_t s;
    it_client_t c;
    remora_region_info_t info = {0};
    buf_t b;
    (void)state;

    it_must_start(&s, "--region", "r=16M", "--gpu", "0", "--resize", "r=32M@1500", NULL);
    it_assert_ok(it_client_open(&c, s.addr, NULL));
    buf_alloc(&b, c.ctx, 0, 32u << 20);
    it_assert_ok(remora_client_read(c.client, "r", 0, b.p, 16u << 20)); /* opens the handle */
    assert_buf_pattern(b.p, 0, 16u << 20);
    for (int i = 0; i < 100; i++) {
        it_assert_ok(remora_client_lookup(c.client, "r", &info));
        if (info.size == (32u << 20))
            break;
        it_sleep_ms(50);
    }
    assert_int_equal(info.size, 32u << 20);
    assert_int_equal(info.generation, 2);
    it_assert_ok(remora_client_read(c.client, "r", 0, b.p, 32u << 20));
    assert_buf_pattern(b.p, 0, 32u << 20);
    buf_free(&b);
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

typedef struct reader {
    const char   *addr;
    remora_path_t path;
    atomic_int    reads, errors;
    remora_status_t last;
} reader_t;

static void *read_forever(void *arg)
{
    reader_t *r = arg;
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_PATH | REMORA_CLIENT_FIELD_TIMEOUT,
                                 .path = r->path, .timeout_ms = 5000};
    it_client_t c;
    buf_t b;

    if (it_client_open(&c, r->addr, &cp) != REMORA_OK) {
        r->last = REMORA_ERR_CONNECTION_REFUSED;
        return NULL;
    }
    buf_alloc(&b, c.ctx, 0, 256u << 20);
    for (;;) {
        remora_status_t st = remora_client_read(c.client, "r", 0, b.p, 256u << 20);
        r->last = st;
        if (st != REMORA_OK) {
            atomic_fetch_add(&r->errors, 1);
            break;
        }
        atomic_fetch_add(&r->reads, 1);
    }
    /* Every later call fails at once. */
    r->last = remora_client_read(c.client, "r", 0, b.p, 4096);
    buf_free(&b);
    it_client_close(&c);
    return NULL;
}

/* The server dies while clients copy from its GPU memory (IPC, staging, and
 * am: UCX itself where it handles CUDA memory, else staging again): they get
 * an error, no crash, no hang. */
static void test_server_killed_mid_copy(void **state)
{
    it_server_t s;
    reader_t r[3] = {{.path = REMORA_PATH_IPC}, {.path = REMORA_PATH_STAGING},
                     {.path = REMORA_PATH_AM}};
    pthread_t t[3];
    (void)state;

    it_must_start(&s, "--region", "r=256M", "--gpu", "0", NULL);
    for (int i = 0; i < 3; i++) {
        r[i].addr = s.addr;
        assert_int_equal(pthread_create(&t[i], NULL, read_forever, &r[i]), 0);
    }
    for (int i = 0; i < 200 && (atomic_load(&r[0].reads) < 2 || atomic_load(&r[1].reads) < 1 ||
                                atomic_load(&r[2].reads) < 1); i++)
        it_sleep_ms(20);
    it_server_kill(&s);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    print_message("ipc: %d reads before the kill; staging: %d; am: %d; then: %s / %s / %s\n",
                  atomic_load(&r[0].reads), atomic_load(&r[1].reads), atomic_load(&r[2].reads),
                  remora_status_string(r[0].last), remora_status_string(r[1].last),
                  remora_status_string(r[2].last));
    /* IPC copies need no server, so they may go on; the connection's end still shows. */
    for (int i = 0; i < 3; i++)
        it_assert_status(r[i].last, REMORA_ERR_DISCONNECTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_region),
        cmocka_unit_test(test_gpu_region),
        cmocka_unit_test(test_gpu_buffers_come_and_go),
        cmocka_unit_test(test_ipc_refused_for_host_region),
        cmocka_unit_test(test_two_gpus),
        /* No reaping teardowns: the group's servers must live on. */
        cmocka_unit_test(test_ring_into_gpu),
        cmocka_unit_test(test_gpu_resident_ring),
        cmocka_unit_test(test_replaced_under_ipc),
        cmocka_unit_test(test_server_killed_mid_copy),
    };

    it_init("gpu");
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
