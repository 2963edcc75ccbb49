/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of the CUDA layer: src/mem/cuda.c and CUDA memory in
 * remora_mem_create().
 *
 * Two modes, each an honest CTest entry:
 *   test_cuda            GPU checks; exits 77 (skipped) without a usable GPU.
 *   test_cuda --no-gpu   what a host without CUDA must do (UNSUPPORTED, every
 *                        pointer is host); exits 77 when CUDA *is* usable.
 * A third mode, --ipc-child HEX OFFSET LEN, is the second process of the IPC test.
 */
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "mem/copyq.h"
#include "mem/cuda.h"
#include "mem/mem.h"

extern char **environ;

#define LEN ((size_t)(4u << 20) + 13) /* not a multiple of anything */

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed + (i >> 12));
}

static remora_context_h new_context(void)
{
    remora_context_h ctx = NULL;
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    return ctx;
}

/* ---------------------------------------------------------------- without CUDA */

static void never_called(rm_copy_t *copy, remora_status_t st) { fail(); }

static void test_no_gpu_unsupported(void **state)
{
    rm_ptr_kind_t kind = RM_PTR_DEVICE;
    rm_cuda_stream_h s;
    rm_cuda_ipc_handle_t h;
    size_t off;
    void *p;
    int dev = 7, x = 0;

    assert_int_equal(rm_cuda_init(), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_cuda_device_count(), 0);
    assert_int_equal(rm_cuda_ptr_kind(&x, &kind, &dev), REMORA_OK);
    assert_int_equal(kind, RM_PTR_HOST);
    assert_int_equal(dev, -1);
    assert_int_equal(rm_cuda_mem_alloc(0, 64, &p), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_cuda_host_alloc(64, &p), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_cuda_stream_create(0, &s), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_cuda_ipc_get(&x, &h, &off), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_cuda_copy(&x, &dev, sizeof(x)), REMORA_ERR_UNSUPPORTED);

    rm_copyq_t *q = rm_copyq_create(); /* a queue starts nothing, and says why */
    rm_copy_t c;
    assert_non_null(q);
    assert_int_equal(rm_copyq_start(q, &c, &x, &dev, sizeof(x), never_called),
                     REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_copyq_busy(q), 0);
    assert_int_equal(rm_copyq_poll(q), 0);
    rm_copyq_destroy(q);

    /* the same with lanes and a submit thread (started, stopped at destroy) */
    rm_copyq_params_t params = {.lanes = 2, .submit_thread = 1, .spin_ns = 1000};
    assert_non_null(q = rm_copyq_create_with(&params));
    assert_int_equal(rm_copyq_start(q, &c, &x, &dev, sizeof(x), never_called),
                     REMORA_ERR_UNSUPPORTED);
    usleep(2000); /* the thread past its spin, asleep */
    rm_copyq_drain(q);
    rm_copyq_destroy(q);
    params.lanes = RM_COPYQ_LANES_MAX + 1;
    assert_null(rm_copyq_create_with(&params));
}

static void test_no_gpu_public(void **state)
{
    remora_cuda_attr_t a = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                          REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT |
                                          REMORA_CUDA_ATTR_FIELD_REASON};
    remora_cuda_device_attr_t d = {.field_mask = REMORA_CUDA_DEVICE_FIELD_NAME};
    int can;

    a.available = 1;
    assert_int_equal(remora_cuda_query(&a), REMORA_OK);
    assert_int_equal(a.available, 0);
    assert_int_equal(a.device_count, 0);
    assert_true(a.reason[0] != '\0');
    assert_int_equal(remora_cuda_device_query(0, &d), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(remora_cuda_can_access_peer(0, 0, &can), REMORA_ERR_UNSUPPORTED);
}

/* Which device's context runs a copy: the device memory's own, before any
 * pinned host memory's (a GPU 1 -> host copy queued on GPU 0 hung). */
static void test_copy_pick(void **state)
{
    (void)state;
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_PINNED_HOST, 0, RM_PTR_DEVICE, 1), 1);
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_DEVICE, 1, RM_PTR_PINNED_HOST, 0), 1);
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_DEVICE, 0, RM_PTR_DEVICE, 1), 0);
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_HOST, -1, RM_PTR_MANAGED, 2), 2);
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_PINNED_HOST, 1, RM_PTR_HOST, -1), 1);
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_HOST, -1, RM_PTR_PINNED_HOST, 2), 2);
    assert_int_equal(rm_cuda_copy_pick(RM_PTR_HOST, -1, RM_PTR_HOST, -1), 0);
}

static void test_no_gpu_mem(void **state)
{
    remora_context_h ctx = new_context();
    remora_mem_params_t p = {
        .field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE,
        .length     = 4096,
        .type       = REMORA_MEM_CUDA,
    };
    static uint8_t buf[4096];
    remora_mem_h mem = NULL;

    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_ERR_UNSUPPORTED);
    assert_null(mem);
    /* Host memory said to be CUDA memory is a caller's mistake. */
    p.field_mask |= REMORA_MEM_FIELD_ADDRESS;
    p.address = buf;
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_ERR_INVALID_PARAM);
    p.field_mask &= ~(uint64_t)REMORA_MEM_FIELD_TYPE;
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_OK);
    assert_int_equal(remora_mem_type(mem), REMORA_MEM_HOST);
    assert_int_equal(remora_mem_device(mem), -1);
    assert_non_null(mem->memh);
    assert_int_equal(mem->has_ipc, 0);
    remora_mem_destroy(mem);
    remora_context_destroy(ctx);
}

/* ---------------------------------------------------------------- with CUDA */

static void test_devices(void **state)
{
    rm_cuda_device_info_t info;
    int version = 0, can = 0;

    assert_true(rm_cuda_device_count() > 0);
    assert_int_equal(rm_cuda_driver_version(&version), REMORA_OK);
    assert_true(version >= 11000);
    assert_int_equal(rm_cuda_device_info(0, &info), REMORA_OK);
    assert_true(info.name[0] != '\0' && info.total_mem > 0 && info.unified_addressing);
    assert_int_equal(rm_cuda_device_info(rm_cuda_device_count(), &info),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(rm_cuda_can_access_peer(0, 0, &can), REMORA_OK);
    assert_int_equal(can, 1);
}

static void expect_kind(const void *p, rm_ptr_kind_t want, int want_dev)
{
    rm_ptr_kind_t kind;
    int dev;

    assert_int_equal(rm_cuda_ptr_kind(p, &kind, &dev), REMORA_OK);
    assert_int_equal(kind, want);
    if (want_dev != -2)
        assert_int_equal(dev, want_dev);
}

static void test_ptr_kind(void **state)
{
    void *pageable = malloc(LEN), *pinned, *dev, *managed;
    int on_stack;

    assert_non_null(pageable);
    expect_kind(&on_stack, RM_PTR_HOST, -1);
    expect_kind(pageable, RM_PTR_HOST, -1);
    assert_int_equal(rm_cuda_host_register(pageable, LEN), REMORA_OK);
    expect_kind(pageable, RM_PTR_PINNED_HOST, -2);
    assert_int_equal(rm_cuda_host_unregister(pageable), REMORA_OK);
    expect_kind(pageable, RM_PTR_HOST, -1);

    assert_int_equal(rm_cuda_host_alloc(LEN, &pinned), REMORA_OK);
    expect_kind(pinned, RM_PTR_PINNED_HOST, -2);
    assert_int_equal(rm_cuda_mem_alloc(0, LEN, &dev), REMORA_OK);
    expect_kind(dev, RM_PTR_DEVICE, 0);
    expect_kind((char *)dev + 12345, RM_PTR_DEVICE, 0);
    assert_int_equal(rm_cuda_mem_alloc_managed(0, 1 << 20, &managed), REMORA_OK);
    expect_kind(managed, RM_PTR_MANAGED, -2);

    assert_int_equal(rm_cuda_mem_free(0, managed), REMORA_OK);
    assert_int_equal(rm_cuda_mem_free(0, dev), REMORA_OK);
    assert_int_equal(rm_cuda_host_free(pinned), REMORA_OK);
    free(pageable);
}

static void test_copy_sync(void **state)
{
    uint8_t *src = malloc(LEN), *back = malloc(LEN), *pinned;
    void *d1, *d2;

    assert_non_null(src);
    assert_non_null(back);
    fill(src, LEN, 1);
    assert_int_equal(rm_cuda_mem_alloc(0, LEN, &d1), REMORA_OK);
    assert_int_equal(rm_cuda_mem_alloc(0, LEN, &d2), REMORA_OK);
    assert_int_equal(rm_cuda_host_alloc(LEN, (void **)&pinned), REMORA_OK);
    /* pageable -> device -> device -> pinned -> compare */
    assert_int_equal(rm_cuda_copy(d1, src, LEN), REMORA_OK);
    assert_int_equal(rm_cuda_copy(d2, d1, LEN), REMORA_OK);
    memset(pinned, 0, LEN);
    assert_int_equal(rm_cuda_copy(pinned, d2, LEN), REMORA_OK);
    assert_memory_equal(pinned, src, LEN);
    /* an unaligned middle piece back to pageable memory */
    memset(back, 0, LEN);
    assert_int_equal(rm_cuda_copy(back + 3, (uint8_t *)d1 + 7, 1000), REMORA_OK);
    assert_memory_equal(back + 3, src + 7, 1000);
    assert_int_equal(rm_cuda_copy(back, src, 0), REMORA_OK);

    rm_cuda_host_free(pinned);
    rm_cuda_mem_free(0, d2);
    rm_cuda_mem_free(0, d1);
    free(back);
    free(src);
}

/* ---------------------------------------------------------------- copy queue */

#define NCOPIES 24

typedef struct {
    rm_copy_t       copy;
    int             index;
    int            *order;   /* where callbacks write their indices, in call order */
    int            *ncalled;
    remora_status_t status;
    rm_copyq_t     *q;       /* chain: the callback starts this copy next */
    rm_copy_t      *next;
    void           *next_dst, *next_src;
    size_t          next_len;
} tcopy_t;

static void tcopy_done(rm_copy_t *copy, remora_status_t st)
{
    tcopy_t *t = rm_container_of(copy, tcopy_t, copy);

    t->status = st;
    t->order[(*t->ncalled)++] = t->index;
    if (t->next != NULL) /* a callback may start another copy */
        assert_int_equal(rm_copyq_start(t->q, t->next, t->next_dst, t->next_src, t->next_len,
                                        tcopy_done), REMORA_OK);
}

/* Held: copies share the release's completion write; none ends before the
 * release, all do after it, in order. */
static void held_copies(rm_copyq_t *q, tcopy_t *t, int *order, int *ncalled, void *dev,
                        uint8_t *pinned, const uint8_t *src, size_t piece)
{
    memset(pinned, 0, LEN);
    *ncalled = 0;
    t[0].next = NULL;
    rm_copyq_hold(q);
    for (int i = 0; i < NCOPIES; i++)
        assert_int_equal(rm_copyq_start(q, &t[i].copy, pinned + i * piece,
                                        (uint8_t *)dev + i * piece, piece, tcopy_done), REMORA_OK);
    for (int spins = 0; spins < 100000; spins++)
        assert_int_equal(rm_copyq_poll(q), 0); /* no word written yet */
    rm_copyq_release(q);
    for (int spins = 0; rm_copyq_busy(q) && spins < 10000000; spins++)
        rm_copyq_poll(q);
    assert_int_equal(*ncalled, NCOPIES);
    for (int i = 0; i < NCOPIES; i++)
        assert_int_equal(order[i], i);
    assert_memory_equal(pinned, src, NCOPIES * piece);
}

/* A copy the driver refuses (a range past the end of both buffers), started
 * between good ones: it ends with an error, in its turn; the others land. */
static void refused_copy(rm_copyq_t *q, tcopy_t *t, int *order, int *ncalled, void *dev,
                         uint8_t *pinned, const uint8_t *src, size_t piece)
{
    const int bad = NCOPIES / 2;

    memset(pinned, 0, LEN);
    *ncalled = 0;
    t[0].next = NULL;
    for (int i = 0; i < NCOPIES; i++) {
        t[i].status = REMORA_ERR_IO;
        size_t len = i == bad ? 4 * LEN : piece;
        assert_int_equal(rm_copyq_start(q, &t[i].copy, pinned + i * piece,
                                        (uint8_t *)dev + i * piece, len, tcopy_done), REMORA_OK);
    }
    for (int spins = 0; rm_copyq_busy(q) && spins < 10000000; spins++)
        rm_copyq_poll(q);
    assert_int_equal(*ncalled, NCOPIES);
    for (int i = 0; i < NCOPIES; i++) {
        assert_int_equal(order[i], i);
        if (i == bad)
            assert_int_not_equal(t[i].status, REMORA_OK);
        else
            assert_int_equal(t[i].status, REMORA_OK);
    }
    assert_memory_equal(pinned, src, bad * piece);
    assert_memory_equal(pinned + (bad + 1) * piece, src + (bad + 1) * piece,
                        (NCOPIES - bad - 1) * piece);
}

/* Copies marked d2d (rm_copy_t.d2d): device -> device and device -> pinned
 * take cuMemcpyDtoDAsync; a pageable source falls back; all byte-exact. */
static void d2d_copies(rm_copyq_t *q, tcopy_t *t, int *ncalled, void *dev, uint8_t *pinned,
                       const uint8_t *src, size_t piece)
{
    void *dev2 = NULL;
    assert_int_equal(rm_cuda_mem_alloc(0, 3 * piece, &dev2), REMORA_OK);
    *ncalled = 0;
    memset(pinned, 0, 3 * piece);
    const void *from[3] = {dev, (uint8_t *)dev + piece, src + 2 * piece};
    for (int i = 0; i < 3; i++) {
        t[i].next = NULL;
        t[i].copy.d2d = 1;
        assert_int_equal(rm_copyq_start(q, &t[i].copy, (uint8_t *)dev2 + i * piece, from[i],
                                        piece, tcopy_done), REMORA_OK);
    }
    rm_copyq_drain(q);
    assert_int_equal(*ncalled, 3);
    t[3].copy.d2d = 1;
    assert_int_equal(rm_copyq_start(q, &t[3].copy, pinned, dev2, 3 * piece, tcopy_done),
                     REMORA_OK);
    rm_copyq_drain(q);
    assert_int_equal(*ncalled, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(t[i].status, REMORA_OK);
        t[i].copy.d2d = 0;
    }
    assert_memory_equal(pinned, src, 3 * piece);
    rm_cuda_mem_free(0, dev2);
}

/* Copies start only on a prepared device; they end in start order; each
 * callback runs once, from a poll (never from start), with the bytes in
 * place; callbacks can start copies; drain waits for all; bad arguments
 * start nothing. All of that holds with several lanes (streams) and with a
 * submit thread making the CUDA calls; with the thread, a copy the driver
 * refuses ends alone with its error. */
static void copyq_cases(unsigned lanes, int submit)
{
    const size_t piece = LEN / NCOPIES;
    uint8_t *src = malloc(LEN), *pinned;
    void *dev;
    tcopy_t t[NCOPIES + 1] = {0};
    int order[NCOPIES + 1], ncalled = 0;
    rm_copyq_params_t params = {.lanes = lanes, .submit_thread = submit, .spin_ns = 1000000};
    rm_copyq_t *q = rm_copyq_create_with(&params);

    assert_non_null(q);
    assert_non_null(src);
    fill(src, LEN, 5);
    assert_int_equal(rm_cuda_mem_alloc(0, LEN, &dev), REMORA_OK);
    assert_int_equal(rm_cuda_host_alloc(LEN, (void **)&pinned), REMORA_OK);
    memcpy(pinned, src, LEN);
    for (int i = 0; i <= NCOPIES; i++)
        t[i] = (tcopy_t){.index = i, .order = order, .ncalled = &ncalled, .q = q,
                         .status = REMORA_ERR_IO};

    /* nothing starts on a device that was not prepared */
    assert_int_equal(rm_copyq_start(q, &t[0].copy, dev, pinned, piece, tcopy_done),
                     REMORA_ERR_UNSUPPORTED);
    assert_int_equal(rm_copyq_prepare(q, 0), REMORA_OK);
    assert_int_equal(rm_copyq_prepare(q, 0), REMORA_OK); /* idempotent */
    assert_int_equal(rm_copyq_prepare(q, rm_cuda_device_count()), REMORA_ERR_INVALID_PARAM);

    /* pinned -> device in pieces, all in flight at once */
    for (int i = 0; i < NCOPIES; i++)
        assert_int_equal(rm_copyq_start(q, &t[i].copy, (uint8_t *)dev + i * piece,
                                        pinned + i * piece, piece, tcopy_done), REMORA_OK);
    assert_int_equal(ncalled, 0); /* never from start */
    assert_int_equal(rm_copyq_busy(q), NCOPIES);
    for (int spins = 0; rm_copyq_busy(q) && spins < 10000000; spins++)
        rm_copyq_poll(q);
    assert_int_equal(rm_copyq_busy(q), 0);
    assert_int_equal(ncalled, NCOPIES);
    for (int i = 0; i < NCOPIES; i++) {
        assert_int_equal(order[i], i);
        assert_int_equal(t[i].status, REMORA_OK);
    }

    /* device -> pinned; the first callback starts one more copy, which the
     * drain waits for too */
    memset(pinned, 0, LEN);
    ncalled = 0;
    t[0].next     = &t[NCOPIES].copy;
    t[0].next_dst = pinned + NCOPIES * piece;
    t[0].next_src = (uint8_t *)dev + NCOPIES * piece;
    t[0].next_len = LEN - NCOPIES * piece;
    assert_int_equal(rm_cuda_copy((uint8_t *)dev + NCOPIES * piece, src + NCOPIES * piece,
                                  LEN - NCOPIES * piece), REMORA_OK);
    for (int i = 0; i < NCOPIES; i++)
        assert_int_equal(rm_copyq_start(q, &t[i].copy, pinned + i * piece,
                                        (uint8_t *)dev + i * piece, piece, tcopy_done), REMORA_OK);
    rm_copyq_drain(q);
    assert_int_equal(rm_copyq_busy(q), 0);
    assert_int_equal(ncalled, NCOPIES + 1);
    assert_int_equal(order[NCOPIES], NCOPIES);
    assert_memory_equal(pinned, src, LEN);

    d2d_copies(q, t, &ncalled, dev, pinned, src, piece);

    if (submit)
        refused_copy(q, t, order, &ncalled, dev, pinned, src, piece);
    else
        held_copies(q, t, order, &ncalled, dev, pinned, src, piece);

    /* bad arguments: nothing starts, no callback */
    ncalled = 0;
    assert_int_equal(rm_copyq_start(q, &t[0].copy, NULL, src, 8, tcopy_done),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(rm_copyq_start(q, NULL, pinned, src, 8, tcopy_done),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(rm_copyq_start(q, &t[0].copy, pinned, src, 8, NULL),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(rm_copyq_poll(q), 0);
    assert_int_equal(ncalled, 0);

    rm_copyq_destroy(q);
    rm_cuda_host_free(pinned);
    rm_cuda_mem_free(0, dev);
    free(src);
}

static void test_copyq(void **state) { copyq_cases(1, 0); }
static void test_copyq_lanes(void **state) { copyq_cases(3, 0); }
static void test_copyq_submit_thread(void **state) { copyq_cases(2, 1); }

/* A chunk of the double buffer below: free again once its copy ended. */
typedef struct dbuf_chunk {
    rm_copy_t copy;
    int       busy;
} dbuf_chunk_t;

static void dbuf_landed(rm_copy_t *copy, remora_status_t st)
{
    assert_int_equal(st, REMORA_OK);
    rm_container_of(copy, dbuf_chunk_t, copy)->busy = 2; /* landed, not yet taken */
}

/* Device -> host through two pinned chunks on a copy queue: what the staging
 * path does. Each chunk is reused only after its copy's callback said the
 * copy out of the GPU into it ended, and its bytes were taken. */
static void test_copy_double_buffered(void **state)
{
    enum { CHUNK = 256 << 10, NCHUNKS = 17 };
    const size_t total = (size_t)CHUNK * NCHUNKS - 999;
    uint8_t *src = malloc(total), *dst = malloc(total), *stage[2];
    rm_copyq_t *q = rm_copyq_create();
    dbuf_chunk_t c[2];
    size_t at[2] = {0, 0}, len[2] = {0, 0};
    void *dev;

    memset(c, 0, sizeof(c));
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(q);
    fill(src, total, 9);
    assert_int_equal(rm_cuda_mem_alloc(0, total, &dev), REMORA_OK);
    assert_int_equal(rm_cuda_copy(dev, src, total), REMORA_OK);
    assert_int_equal(rm_copyq_prepare(q, 0), REMORA_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rm_cuda_host_alloc(CHUNK, (void **)&stage[i]), REMORA_OK);
    for (size_t off = 0, k = 0; off < total || c[0].busy || c[1].busy; k++) {
        int b = (int)(k % 2);

        for (long spins = 0; c[b].busy == 1 && spins < 100000000; spins++)
            rm_copyq_poll(q);
        assert_int_not_equal(c[b].busy, 1);
        if (c[b].busy == 2) {
            memcpy(dst + at[b], stage[b], len[b]);
            c[b].busy = 0;
        }
        if (off < total) {
            len[b] = total - off < CHUNK ? total - off : CHUNK;
            at[b]  = off;
            c[b].busy = 1;
            assert_int_equal(rm_copyq_start(q, &c[b].copy, stage[b], (uint8_t *)dev + off, len[b],
                                            dbuf_landed),
                             REMORA_OK);
            off += len[b];
        }
    }
    assert_memory_equal(dst, src, total);
    rm_copyq_destroy(q);
    for (int i = 0; i < 2; i++)
        rm_cuda_host_free(stage[i]);
    rm_cuda_mem_free(0, dev);
    free(dst);
    free(src);
}

/* The other process of the IPC test: open the handle, check the pattern at
 * the offset, close. Exit 0 when the bytes match, 3 when the open fails. */
static int ipc_child(const char *hex, const char *off_text, const char *len_text)
{
    rm_cuda_ipc_handle_t h;
    size_t off = strtoul(off_text, NULL, 10), len = strtoul(len_text, NULL, 10);
    uint8_t *want = malloc(len), *got = malloc(len);
    void *base;
    int ok;

    if (want == NULL || got == NULL || strlen(hex) != 2 * sizeof(h.bytes))
        return 2;
    for (size_t i = 0; i < sizeof(h.bytes); i++)
        sscanf(hex + 2 * i, "%2hhx", &h.bytes[i]);
    if (rm_cuda_ipc_open(0, &h, &base) != REMORA_OK)
        return 3;
    fill(want, len, 42);
    ok = rm_cuda_copy(got, (uint8_t *)base + off, len) == REMORA_OK && memcmp(got, want, len) == 0;
    rm_cuda_ipc_close(0, base);
    free(want);
    free(got);
    return ok ? 0 : 4;
}

static void test_ipc(void **state)
{
    const size_t len = 1 << 20, inner = 8192;
    uint8_t *pattern = malloc(len);
    rm_cuda_ipc_handle_t h;
    char hex[2 * RM_CUDA_IPC_HANDLE_SIZE + 1], off_text[32], len_text[32];
    char *argv[] = {"/proc/self/exe", "--ipc-child", hex, off_text, len_text, NULL};
    size_t off = 1;
    void *dev, *base;
    pid_t pid;
    int wst;

    assert_non_null(pattern);
    assert_int_equal(rm_cuda_mem_alloc(0, len + inner, &dev), REMORA_OK);
    fill(pattern, len, 42);
    assert_int_equal(rm_cuda_copy((uint8_t *)dev + inner, pattern, len), REMORA_OK);
    assert_int_equal(rm_cuda_ipc_get(pattern, &h, &off), REMORA_ERR_INVALID_PARAM);
    /* A pointer inside an allocation: the handle names the base. */
    assert_int_equal(rm_cuda_ipc_get((uint8_t *)dev + inner, &h, &off), REMORA_OK);
    assert_int_equal(off, inner);
    /* The driver normally refuses handles of the process that made them. */
    if (rm_cuda_ipc_open(0, &h, &base) == REMORA_OK) {
        print_message("note: same-process IPC open was allowed\n");
        rm_cuda_ipc_close(0, base);
    }
    /* The real use: another process maps the allocation and reads at off. */
    for (size_t i = 0; i < sizeof(h.bytes); i++)
        snprintf(hex + 2 * i, 3, "%02x", h.bytes[i]);
    snprintf(off_text, sizeof(off_text), "%zu", off);
    snprintf(len_text, sizeof(len_text), "%zu", len);
    assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    if (WEXITSTATUS(wst) == 3)
        print_message("skipped: the driver refused cuIpcOpenMemHandle in a second process\n");
    else
        assert_int_equal(WEXITSTATUS(wst), 0);
    free(pattern);
    rm_cuda_mem_free(0, dev);
}

static void test_mem_create(void **state)
{
    remora_context_h ctx = new_context();
    remora_context_attr_t attr = {0};
    remora_mem_params_t p = {
        .field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE | REMORA_MEM_FIELD_DEVICE,
        .length     = LEN,
        .type       = REMORA_MEM_CUDA,
        .device     = 0,
    };
    remora_mem_h mem;
    rm_ptr_kind_t kind;
    int dev, ucx_cuda;

    assert_int_equal(remora_context_query(ctx, &attr), REMORA_OK);
    ucx_cuda = (attr.ucx_mem_types & (1u << REMORA_MEM_CUDA)) != 0;

    /* allocated by the library */
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_OK);
    assert_int_equal(remora_mem_type(mem), REMORA_MEM_CUDA);
    assert_int_equal(remora_mem_device(mem), 0);
    assert_int_equal(remora_mem_length(mem), LEN);
    assert_int_equal(rm_cuda_ptr_kind(remora_mem_address(mem), &kind, &dev), REMORA_OK);
    assert_int_equal(kind, RM_PTR_DEVICE);
    assert_true(mem->has_ipc);
    assert_int_equal(mem->ipc_offset, 0);
    assert_int_equal(mem->memh != NULL, ucx_cuda);
    /* Remote keys are packed when a peer first needs one, and only with RMA
     * on (REMORA_RMA=1): none yet, and asking gives one exactly then. */
    assert_int_equal(mem->rkey_len, 0);
    const void *rkey = NULL;
    size_t rkey_len = 0;
    remora_status_t rs = rm_mem_rkey(mem, 1, &rkey, &rkey_len);
    if (ucx_cuda && ctx->rma) {
        assert_int_equal(rs, REMORA_OK);
        assert_true(rkey_len > 0);
    } else {
        assert_int_equal(rs, REMORA_ERR_UNSUPPORTED);
    }
    remora_mem_destroy(mem);

    /* an unknown device */
    p.device = rm_cuda_device_count();
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_ERR_INVALID_PARAM);
    remora_context_destroy(ctx);
}

static void test_mem_register(void **state)
{
    remora_context_h ctx = new_context();
    remora_mem_params_t p = {
        .field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_ADDRESS,
        .length     = 65536,
    };
    void *dev, *pinned, *managed;
    remora_mem_h mem;

    assert_int_equal(rm_cuda_mem_alloc(0, 1 << 20, &dev), REMORA_OK);
    assert_int_equal(rm_cuda_host_alloc(65536, &pinned), REMORA_OK);
    assert_int_equal(rm_cuda_mem_alloc_managed(0, 65536, &managed), REMORA_OK);

    /* device memory, given without a type, in the middle of its allocation */
    p.address = (char *)dev + 4096;
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_OK);
    assert_int_equal(remora_mem_type(mem), REMORA_MEM_CUDA);
    assert_int_equal(remora_mem_device(mem), 0);
    assert_ptr_equal(remora_mem_address(mem), p.address);
    assert_true(mem->has_ipc);
    assert_int_equal(mem->ipc_offset, 4096);
    remora_mem_destroy(mem); /* must not free the caller's memory */
    expect_kind(dev, RM_PTR_DEVICE, 0);

    /* said to be host memory: refused */
    p.field_mask |= REMORA_MEM_FIELD_TYPE;
    p.type = REMORA_MEM_HOST;
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_ERR_INVALID_PARAM);
    p.field_mask &= ~(uint64_t)REMORA_MEM_FIELD_TYPE;

    /* pinned host memory is host memory */
    p.address = pinned;
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_OK);
    assert_int_equal(remora_mem_type(mem), REMORA_MEM_HOST);
    assert_int_equal(remora_mem_device(mem), -1);
    assert_non_null(mem->memh);
    remora_mem_destroy(mem);

    /* managed memory is refused */
    p.address = managed;
    assert_int_equal(remora_mem_create(ctx, &p, &mem), REMORA_ERR_UNSUPPORTED);

    rm_cuda_mem_free(0, managed);
    rm_cuda_host_free(pinned);
    rm_cuda_mem_free(0, dev);
    remora_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest no_gpu[] = {
        cmocka_unit_test(test_no_gpu_unsupported),
        cmocka_unit_test(test_no_gpu_public),
        cmocka_unit_test(test_no_gpu_mem),
        cmocka_unit_test(test_copy_pick),
    };
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_ptr_kind),
        cmocka_unit_test(test_copy_sync),
        cmocka_unit_test(test_copy_double_buffered),
        cmocka_unit_test(test_copyq),
        cmocka_unit_test(test_copyq_lanes),
        cmocka_unit_test(test_copyq_submit_thread),
        cmocka_unit_test(test_ipc),
        cmocka_unit_test(test_mem_create),
        cmocka_unit_test(test_mem_register),
    };
    int have_gpu;

    if (argc == 5 && strcmp(argv[1], "--ipc-child") == 0)
        return rm_cuda_init() == REMORA_OK ? ipc_child(argv[2], argv[3], argv[4]) : 77;
    have_gpu = rm_cuda_init() == REMORA_OK && rm_cuda_device_count() > 0;
    if (argc == 2 && strcmp(argv[1], "--no-gpu") == 0) {
        if (have_gpu) {
            printf("SKIP: CUDA is usable here; the no-GPU checks do not apply\n");
            return 77;
        }
        return cmocka_run_group_tests_name("cuda_no_gpu", no_gpu, NULL, NULL);
    }
    if (!have_gpu) {
        printf("SKIP: no usable CUDA driver or device\n");
        return 77;
    }
    return cmocka_run_group_tests_name("cuda", gpu, NULL, NULL);
}
