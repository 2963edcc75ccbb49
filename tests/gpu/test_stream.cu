/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Stream-ordered operations on one GPU (docs/stream.md). The server lives in
 * this process on a context of its own, so everything runs through the
 * proxy on the path REMORA_PATH forces (CTest: staging over TCP, am); the
 * same-host IPC path between two processes is covered by
 * examples/stream_pingpong (scripts/gpu-stream.sh). Cases:
 *   sizes      put then get of 0, 1, 3, 63, 4097, 65537, 1 MiB + 7 and 1 GiB
 *              bytes at an unaligned offset, byte-exact;
 *   ring       3,000 puts of 1 B to 20 KB that do not wait for the proxy,
 *              from a GPU and a pinned host source a kernel refills before
 *              each (the channel's inline ring wraps dozens of times), then a
 *              flush: every byte at the target is the one of its put;
 *   graph      fill, put_signal ADD, get, check captured once and replayed
 *              300 times: the signal counts every replay, data exact;
 *   signals    100,000 queued stream signals ADD 1: exactly 100,000;
 *   wait       a stream waits with NEQ, EQ, GEQ; only the right value lets it go;
 *   bad args   default streams, unknown region, index and range: a status at once;
 *   order      a signal never overtakes earlier data: a 4 KiB put_signal into
 *              the GPU region then a signal (2,000 rounds), and eight 64 KiB
 *              puts into it (they do not hold the stream) then a 128 KiB
 *              put_signal into a host region (300 rounds), a kernel watching
 *              the signal word and the stamp at the end of the data: the
 *              stamp is never behind the word (the server lands writes into
 *              GPU memory by copies it finishes later; a thread writing 4 MiB
 *              blocks through the same connection meanwhile keeps the
 *              server's copy queue long, so that they finish late);
 *   two gpus   the same between GPU 0 and GPU 1 (skipped with fewer than two);
 *   dead peer  (first, before CUDA starts: fork) the server is killed in the
 *              middle of a pipeline: the stream finishes within the timeout
 *              and the error is reported.
 * Exit 77 without a GPU.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stream_common.h"

static int failures;
#define EXPECT(c) do { if (!(c)) { fprintf(stderr, "FAILED %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

/* ------------------------------------------------------------ dead peer (forked server) */

static pid_t spawn_host_server(char *addr, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        remora_context_h ctx;
        remora_server_h s;
        remora_mem_h mem;
        remora_signals_h sig;
        remora_server_params_t sp = {REMORA_SERVER_FIELD_LISTEN_ADDR, "127.0.0.1:0"};
        remora_mem_params_t mp = {};
        remora_region_params_t rp = {};
        char a[80];
        close(fds[0]);
        mp.field_mask = REMORA_MEM_FIELD_LENGTH;
        mp.length = 64 << 20;
        rp.field_mask = REMORA_REGION_FIELD_FLAGS;
        rp.flags = REMORA_REGION_WRITABLE;
        if (remora_context_create(NULL, &ctx) || remora_server_create(ctx, &sp, &s) ||
            remora_mem_create(ctx, &mp, &mem) || remora_server_expose(s, "buf", mem, &rp) ||
            remora_signals_create(ctx, 4, NULL, &sig) ||
            remora_server_expose_signals(s, "sig", sig) || remora_server_address(s, a, sizeof(a)))
            _exit(1);
        if (write(fds[1], a, strlen(a) + 1) < 0)
            _exit(1);
        for (;;)
            pause();
    }
    close(fds[1]);
    ssize_t n = read(fds[0], addr, len - 1);
    close(fds[0]);
    if (n <= 0)
        return -1;
    addr[n] = '\0';
    return pid;
}

static void test_dead_peer(pid_t pid, const char *addr)
{
    remora_context_h ctx;
    remora_client_h c;
    remora_client_params_t cp = {};
    cudaStream_t st;
    uint8_t *src;
    const int timeout_ms = 4000;

    cp.field_mask = REMORA_CLIENT_FIELD_TIMEOUT;
    cp.timeout_ms = timeout_ms;
    RK(remora_context_create(NULL, &ctx));
    RK(remora_client_connect(ctx, addr, &cp, &c));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMalloc(&src, 1 << 20));
    CK(cudaMemset(src, 7, 1 << 20));
    /* A long pipeline: puts and signals, the server dies while it runs. */
    int queued = 0;
    for (int i = 0; i < 3000; i++) {
        if (remora_stream_put(c, "buf", (uint64_t)(i % 64) << 20, src, 1 << 20, st) != REMORA_OK)
            break;
        if (remora_stream_signal(c, "sig", 0, REMORA_SIGNAL_ADD, 1, st) != REMORA_OK)
            break;
        queued++;
        if (i == 20) {
            usleep(20000);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
    }
    double t0 = now_us();
    CK(cudaStreamSynchronize(st)); /* must come back: errors never hang a stream */
    double waited_ms = (now_us() - t0) / 1e3;
    remora_status_t err = remora_stream_error(c, st);
    printf("dead peer: %d ops queued, stream finished %.0f ms after the queue was full, error %s\n",
           queued, waited_ms, remora_status_string(err));
    EXPECT(err != REMORA_OK);
    EXPECT(waited_ms < timeout_ms + 3000);
    EXPECT(remora_stream_put(c, "buf", 0, src, 64, st) != REMORA_OK); /* later ops fail at once */
    remora_client_disconnect(c);
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(src));
    remora_context_destroy(ctx);
}

/* ------------------------------------------------------------ one GPU */

static unsigned long long *d_bad;

static unsigned long long take_bad(void)
{
    unsigned long long b = 0;
    CK(cudaMemcpy(&b, d_bad, sizeof(b), cudaMemcpyDeviceToHost));
    CK(cudaMemset(d_bad, 0, sizeof(b)));
    return b;
}

static void test_sizes(pair_t *p, cudaStream_t st, size_t cap)
{
    const size_t sizes[] = {0, 1, 3, 63, 4097, 65537, (1u << 20) + 7, (size_t)1 << 30};
    uint8_t *src, *dst;
    CK(cudaMalloc(&src, cap));
    CK(cudaMalloc(&dst, cap));
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        if (n + 5 > cap)
            continue;
        k_fill<<<grid_for(n), 256, 0, st>>>(src, n, k + 1, NULL);
        CK(cudaMemsetAsync(dst, 0, n ? n : 1, st));
        double t0 = now_us();
        RK(remora_stream_put(p->client, "buf", 5, src, n, st));
        RK(remora_stream_get(p->client, "buf", 5, dst, n, st));
        k_check<<<grid_for(n), 256, 0, st>>>(dst, n, k + 1, NULL, d_bad);
        CK(cudaStreamSynchronize(st));
        unsigned long long bad = take_bad();
        printf("sizes: %zu bytes put+get in %.0f us, %llu mismatched\n", n, now_us() - t0, bad);
        EXPECT(bad == 0);
        EXPECT(remora_stream_error(p->client, st) == REMORA_OK);
    }
    CK(cudaFree(src));
    CK(cudaFree(dst));
}

static void test_ring(pair_t *p, cudaStream_t st, size_t cap)
{
    const int n_ops = 3000;
    const size_t max_n = 20000;
    uint8_t *src_dev, *src_host, *dst;
    size_t total = 0;
    for (int i = 0; i < n_ops; i++)
        total += 1 + ((size_t)i * 7919u) % max_n;
    if (total > cap) {
        printf("ring: skipped, region of %zu bytes too small\n", cap);
        return;
    }
    CK(cudaMalloc(&src_dev, max_n));
    CK(cudaHostAlloc((void **)&src_host, max_n, cudaHostAllocMapped));
    CK(cudaMalloc(&dst, total));
    double t0 = now_us();
    size_t off = 0;
    for (int i = 0; i < n_ops; i++) {
        size_t n = 1 + ((size_t)i * 7919u) % max_n;
        uint8_t *src = i % 2 ? src_host : src_dev;
        k_fill<<<grid_for(n), 256, 0, st>>>(src, n, 1000 + (uint64_t)i, NULL);
        RK(remora_stream_put(p->client, "buf", off, src, n, st));
        off += n;
    }
    RK(remora_stream_flush(p->client, st));
    double us = (now_us() - t0) / n_ops;
    RK(remora_stream_get(p->client, "buf", 0, dst, total, st));
    off = 0;
    for (int i = 0; i < n_ops; i++) {
        size_t n = 1 + ((size_t)i * 7919u) % max_n;
        k_check<<<grid_for(n), 256, 0, st>>>(dst + off, n, 1000 + (uint64_t)i, NULL, d_bad);
        off += n;
    }
    CK(cudaStreamSynchronize(st));
    unsigned long long bad = take_bad();
    printf("ring: %d puts (%zu bytes, GPU and pinned sources refilled each time), %.1f us each, "
           "%llu mismatched\n", n_ops, total, us, bad);
    EXPECT(bad == 0);
    EXPECT(remora_stream_error(p->client, st) == REMORA_OK);
    CK(cudaFree(src_dev));
    CK(cudaFreeHost(src_host));
    CK(cudaFree(dst));
}

static void test_graph(pair_t *p, cudaStream_t st)
{
    const size_t n = 4096;
    const int replays = 300;
    uint8_t *src, *dst;
    uint64_t *seed, v = 0;
    cudaGraph_t g;
    cudaGraphExec_t ge;

    CK(cudaMalloc(&src, n));
    CK(cudaMalloc(&dst, n));
    CK(cudaMalloc(&seed, sizeof(uint64_t)));
    CK(cudaMemset(seed, 0, sizeof(uint64_t)));
    RK(remora_signals_update(p->sig, 1, REMORA_SIGNAL_SET, 0));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    k_bump<<<1, 1, 0, st>>>(seed);
    k_fill<<<grid_for(n), 256, 0, st>>>(src, n, 0, seed);
    RK(remora_stream_put_signal(p->client, "buf", 100, src, n, "sig", 1, REMORA_SIGNAL_ADD, 1, st));
    RK(remora_stream_get(p->client, "buf", 100, dst, n, st));
    k_check<<<grid_for(n), 256, 0, st>>>(dst, n, 0, seed, d_bad);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double t0 = now_us();
    for (int i = 0; i < replays; i++)
        CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    double us = (now_us() - t0) / replays;
    RK(remora_signals_read(p->sig, 1, &v));
    unsigned long long bad = take_bad();
    printf("graph: %d replays, %.1f us each, signal %llu, %llu mismatched\n", replays, us,
           (unsigned long long)v, bad);
    EXPECT(v == (uint64_t)replays);
    EXPECT(bad == 0);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(src));
    CK(cudaFree(dst));
    CK(cudaFree(seed));
}

static void test_signals(pair_t *p, cudaStream_t st)
{
    const int n = 100000;
    uint64_t v = 0;
    RK(remora_signals_update(p->sig, 2, REMORA_SIGNAL_SET, 0));
    double t0 = now_us();
    for (int i = 0; i < n; i++)
        RK(remora_stream_signal(p->client, "sig", 2, REMORA_SIGNAL_ADD, 1, st));
    RK(remora_stream_flush(p->client, st));
    CK(cudaStreamSynchronize(st));
    double us = now_us() - t0;
    RK(remora_signals_read(p->sig, 2, &v));
    printf("signals: %d queued ADD 1 -> %llu, %.0f signals/s\n", n, (unsigned long long)v,
           n / (us / 1e6));
    EXPECT(v == (uint64_t)n);
}

__global__ void k_mark(volatile uint64_t *m, uint64_t v) { *m = v; }

static int marked(volatile uint64_t *m, uint64_t v, int ms)
{
    for (int i = 0; i < ms * 10; i++) {
        if (*m == v)
            return 1;
        usleep(100);
    }
    return *m == v;
}

static void test_wait(pair_t *p, cudaStream_t st)
{
    volatile uint64_t *mark;
    uint64_t *dmark;
    CK(cudaHostAlloc((void **)&mark, sizeof(uint64_t), cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&dmark, (void *)mark, 0));
    *mark = 0;
    RK(remora_signals_update(p->sig, 3, REMORA_SIGNAL_SET, 0));

    RK(remora_stream_wait(p->sig, 3, REMORA_CMP_NEQ, 0, st));
    k_mark<<<1, 1, 0, st>>>(dmark, 1);
    RK(remora_stream_wait(p->sig, 3, REMORA_CMP_EQ, 7, st));
    k_mark<<<1, 1, 0, st>>>(dmark, 2);
    RK(remora_stream_wait(p->sig, 3, REMORA_CMP_GEQ, 10, st));
    k_mark<<<1, 1, 0, st>>>(dmark, 3);

    EXPECT(!marked(mark, 1, 200));                 /* NEQ 0 with the word 0: waits */
    RK(remora_client_signal(p->client, "sig", 3, REMORA_SIGNAL_SET, 5));
    EXPECT(marked(mark, 1, 2000));
    EXPECT(!marked(mark, 2, 200));                 /* EQ 7 with 5: waits */
    RK(remora_client_signal(p->client, "sig", 3, REMORA_SIGNAL_ADD, 2));
    EXPECT(marked(mark, 2, 2000));
    EXPECT(!marked(mark, 3, 200));                 /* GEQ 10 with 7: waits */
    RK(remora_client_signal(p->client, "sig", 3, REMORA_SIGNAL_ADD, 3));
    EXPECT(marked(mark, 3, 2000));
    CK(cudaStreamSynchronize(st));
    printf("wait: NEQ, EQ, GEQ each held the stream until the right value\n");
    CK(cudaFreeHost((void *)mark));
}

__global__ void k_set64(uint64_t *p, uint64_t v) { *p = v; }

/* Each time the signal word moves, the stamp at the head of the data must
 * already show that round or a later one. Ends when the word reaches last,
 * or after about 20 s of the GPU's clock. */
__global__ void k_watch(volatile const uint64_t *word, volatile const uint64_t *stamp, uint64_t last,
                        unsigned long long *behind, unsigned long long *moves)
{
    uint64_t v = 0;
    long long t0 = clock64();
    while (v != last && clock64() - t0 < 40000000000ll) {
        uint64_t w = *word;
        if (w == v)
            continue;
        v = w;
        __threadfence(); /* the stamp is read after the word */
        if (*stamp < v)
            atomicAdd(behind, 1ull);
        atomicAdd(moves, 1ull);
    }
}

#define ORDER_A     ((uint64_t)1 << 20) /* where each case's data goes */
#define ORDER_B     ((uint64_t)2 << 20)
#define ORDER_BUSY  ((uint64_t)4 << 20) /* the busy writer's */
#define ORDER_SMALL ((size_t)4 << 10)
#define ORDER_PUTS  8                  /* puts of RM_STREAM_INLINE (64 KiB) */
#define ORDER_LARGE ((size_t)ORDER_PUTS << 16)
#define ORDER_HOST  ((size_t)128 << 10)
static uint8_t *g_small, *g_large, *g_host_src;

/* Host writes of 4 MiB blocks from GPU memory through the stream's own
 * client (so the same server worker and copy queue), until told to stop. */
typedef struct {
    pair_t     *p;
    uint64_t    off;
    void       *src;
    volatile int stop;
    int         writes;
} busy_t;

#define BUSY_LEN ((size_t)4 << 20)

static void *busy_writer(void *arg)
{
    busy_t *b = (busy_t *)arg;
    while (!b->stop && remora_client_write(b->p->client, "buf", b->off, b->src, BUSY_LEN) ==
                           REMORA_OK)
        b->writes++;
    return NULL;
}

/* rounds of: stamp i into *stamp_src, then `round` enqueues the data and
 * the signal that must follow it (word sig_i := i); a kernel on another
 * stream watches word and stamp. Returns the times the stamp was behind.
 * Every kernel is launched once before the watcher: CUDA loads kernels
 * lazily, and a load waits for the kernels running (the watcher). */
static unsigned long long watch_order(pair_t *p, cudaStream_t st, const char *what, size_t sig_i,
                                      uint64_t stamp_off, uint64_t *stamp_src, int rounds,
                                      void (*round)(pair_t *, cudaStream_t, uint64_t))
{
    unsigned long long *cnt, h[2];
    void *sig_dev;
    cudaStream_t ws;
    CK(cudaMalloc(&cnt, 2 * sizeof(*cnt)));
    CK(cudaMemset(cnt, 0, 2 * sizeof(*cnt)));
    CK(cudaStreamCreateWithFlags(&ws, cudaStreamNonBlocking));
    RK(remora_signals_update(p->sig, sig_i, REMORA_SIGNAL_SET, 0));
    RK(remora_signals_device_ptr(p->sig, &sig_dev));
    const uint64_t *stamp = (const uint64_t *)((char *)remora_mem_address(p->mem) + stamp_off);
    CK(cudaMemset((void *)stamp, 0, sizeof(uint64_t)));
    CK(cudaDeviceSynchronize());
    busy_t busy = {};
    pthread_t bt;
    busy.p   = p;
    busy.off = ORDER_BUSY;
    CK(cudaMalloc(&busy.src, BUSY_LEN));
    k_watch<<<1, 1, 0, ws>>>((const uint64_t *)sig_dev + sig_i, stamp, (uint64_t)rounds, cnt,
                             cnt + 1);
    EXPECT(pthread_create(&bt, NULL, busy_writer, &busy) == 0);
    double t0 = now_us();
    for (int i = 1; i <= rounds; i++) {
        k_set64<<<1, 1, 0, st>>>(stamp_src, (uint64_t)i);
        round(p, st, (uint64_t)i);
    }
    RK(remora_stream_flush(p->client, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaStreamSynchronize(ws));
    busy.stop = 1;
    pthread_join(bt, NULL);
    CK(cudaFree(busy.src));
    CK(cudaMemcpy(h, cnt, sizeof(h), cudaMemcpyDeviceToHost));
    printf("order: %s: %d rounds in %.0f us beside %d host writes of 4 MiB, the signal moved %llu "
           "times, the data behind it %llu times\n", what, rounds, now_us() - t0, busy.writes, h[1],
           h[0]);
    EXPECT(h[1] > 0);
    EXPECT(remora_stream_error(p->client, st) == REMORA_OK);
    CK(cudaStreamDestroy(ws));
    CK(cudaFree(cnt));
    return h[0];
}


static void round_put_signal_then_signal(pair_t *p, cudaStream_t st, uint64_t i)
{
    RK(remora_stream_put_signal(p->client, "buf", ORDER_A, g_small, ORDER_SMALL, "sig", 8,
                                REMORA_SIGNAL_ADD, 1, st));
    RK(remora_stream_signal(p->client, "sig", 9, REMORA_SIGNAL_SET, i, st));
}

static void round_puts_then_put_signal(pair_t *p, cudaStream_t st, uint64_t i)
{
    for (size_t k = 0; k < ORDER_PUTS; k++)
        RK(remora_stream_put(p->client, "buf", ORDER_B + (k << 16), g_large + (k << 16),
                             (size_t)1 << 16, st));
    RK(remora_stream_put_signal(p->client, "hbuf", 0, g_host_src, ORDER_HOST, "sig", 10,
                                REMORA_SIGNAL_SET, i, st));
}

static void test_order(pair_t *p, cudaStream_t st, size_t cap)
{
    remora_mem_params_t mp = {};
    remora_region_params_t rp = {};
    remora_mem_h host;

    if (cap < ORDER_BUSY + BUSY_LEN) {
        printf("order: skipped, region of %zu bytes too small\n", cap);
        return;
    }
    mp.field_mask = REMORA_MEM_FIELD_LENGTH;
    mp.length = ORDER_HOST;
    rp.field_mask = REMORA_REGION_FIELD_FLAGS;
    rp.flags = REMORA_REGION_WRITABLE;
    RK(remora_mem_create(p->sctx, &mp, &host));
    RK(remora_server_expose(p->server, "hbuf", host, &rp));
    CK(cudaMalloc(&g_small, ORDER_SMALL));
    CK(cudaMalloc(&g_large, ORDER_LARGE));
    CK(cudaMalloc(&g_host_src, ORDER_HOST));
    CK(cudaMemset(g_host_src, 3, ORDER_HOST));
    uint64_t *large_end = (uint64_t *)(g_large + ORDER_LARGE) - 1;
    k_set64<<<1, 1, 0, st>>>(large_end, 0); /* loaded before any watcher runs */
    CK(cudaStreamSynchronize(st));
    EXPECT(watch_order(p, st, "4 KiB put_signal into GPU memory, then a signal", 9, ORDER_A,
                       (uint64_t *)g_small, 2000, round_put_signal_then_signal) == 0);
    EXPECT(watch_order(p, st, "8 puts of 64 KiB into GPU memory, then a 128 KiB put_signal into "
                       "host memory", 10, ORDER_B + ORDER_LARGE - sizeof(uint64_t), large_end, 300,
                       round_puts_then_put_signal) == 0);
    RK(remora_server_unexpose(p->server, "hbuf"));
    remora_mem_destroy(host);
    CK(cudaFree(g_small));
    CK(cudaFree(g_large));
    CK(cudaFree(g_host_src));
}

static void test_bad_args(pair_t *p, cudaStream_t st)
{
    uint8_t *src;
    CK(cudaMalloc(&src, 64));
    /* The default streams are refused (a destroyed handle cannot be checked,
     * by remora as by CUDA: it is not tried). */
    EXPECT(remora_stream_put(p->client, "buf", 0, src, 64, (cudaStream_t)0) ==
           REMORA_ERR_INVALID_PARAM);
    EXPECT(remora_stream_signal(p->client, "sig", 0, REMORA_SIGNAL_SET, 1, cudaStreamPerThread) ==
           REMORA_ERR_INVALID_PARAM);
    EXPECT(remora_stream_put(p->client, "nope", 0, src, 64, st) == REMORA_ERR_NOT_FOUND);
    EXPECT(remora_stream_put(p->client, "buf", remora_mem_length(p->mem) - 8, src, 64, st) ==
           REMORA_ERR_OUT_OF_RANGE);
    EXPECT(remora_stream_get(p->client, "buf", UINT64_MAX, src, 1, st) == REMORA_ERR_OUT_OF_RANGE);
    EXPECT(remora_stream_signal(p->client, "sig", 16, REMORA_SIGNAL_SET, 1, st) ==
           REMORA_ERR_OUT_OF_RANGE);
    EXPECT(remora_stream_signal(p->client, "buf", 0, REMORA_SIGNAL_SET, 1, st) ==
           REMORA_ERR_INVALID_PARAM);
    EXPECT(remora_stream_put_signal(p->client, "buf", 0, src, 64, "sig", 99, REMORA_SIGNAL_SET, 1,
                                    st) == REMORA_ERR_OUT_OF_RANGE);
    EXPECT(remora_stream_put(p->client, "sig", 0, src, 8, st) == REMORA_ERR_INVALID_PARAM);
    EXPECT(remora_stream_wait(p->sig, 16, REMORA_CMP_EQ, 1, st) == REMORA_ERR_OUT_OF_RANGE);
    EXPECT(remora_stream_put(p->client, "buf", 0, NULL, 64, st) == REMORA_ERR_INVALID_PARAM);
    EXPECT(remora_stream_error(p->client, st) == REMORA_OK); /* rejected, not failed */
    printf("bad args: every one refused at enqueue\n");
    CK(cudaFree(src));
}

/* Wait for st up to `ms`; 0 if it did not finish (a stream must never hang). */
static int sync_within(cudaStream_t st, int ms)
{
    double until = now_us() + ms * 1e3;
    cudaError_t e;
    while ((e = cudaStreamQuery(st)) == cudaErrorNotReady && now_us() < until)
        usleep(200);
    if (e == cudaErrorNotReady)
        return 0;
    CK(e);
    return 1;
}

/* One step of the two-GPU case: enqueued, then the stream must finish. */
#define TWO_STEP(what, call)                                                          \
    do {                                                                              \
        double t0_ = now_us();                                                        \
        remora_status_t s_ = (call);                                                  \
        int done_ = s_ == REMORA_OK && sync_within(st, 15000);                        \
        printf("two gpus: %-28s %s, stream %s (%.0f us), error %s\n", what,           \
               remora_status_string(s_), done_ ? "finished" : "STUCK", now_us() - t0_,  \
               remora_status_string(remora_stream_error(p.client, st)));              \
        EXPECT(done_ && remora_stream_error(p.client, st) == REMORA_OK);              \
        if (!done_)                                                                   \
            return; /* the rest would wait behind it */                               \
    } while (0)

static void test_two_gpus(int ndev)
{
    if (ndev < 2) {
        printf("SKIPPED two gpus: %d GPU(s) here, the case needs 2\n", ndev);
        return;
    }
    pair_t p;
    cudaStream_t st;
    uint8_t *src, *dst;
    const size_t n = (16u << 20) + 3;
    CK(cudaSetDevice(0));
    pair_open(&p, 64 << 20, 10000); /* the region on GPU 0 */
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaMalloc(&src, n));
    CK(cudaMalloc(&dst, n));
    unsigned long long *bad;
    CK(cudaMalloc(&bad, sizeof(*bad)));
    CK(cudaMemset(bad, 0, sizeof(*bad)));
    k_fill<<<grid_for(n), 256, 0, st>>>(src, n, 77, NULL);
    CK(cudaStreamSynchronize(st));
    /* Small first (the source copied on the stream), then large (the
     * stream waits for the proxy to read it), then back. */
    TWO_STEP("signal", remora_stream_signal(p.client, "sig", 1, REMORA_SIGNAL_ADD, 1, st));
    TWO_STEP("put 64 B", remora_stream_put(p.client, "buf", 1, src, 64, st));
    TWO_STEP("put_signal 16 MiB + 3", remora_stream_put_signal(p.client, "buf", 1, src, n, "sig",
                                                               0, REMORA_SIGNAL_ADD, 1, st));
    TWO_STEP("get 16 MiB + 3", remora_stream_get(p.client, "buf", 1, dst, n, st));
    k_check<<<grid_for(n), 256, 0, st>>>(dst, n, 77, NULL, bad);
    CK(cudaStreamSynchronize(st));
    unsigned long long b = 0;
    uint64_t v = 0;
    CK(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
    RK(remora_signals_read(p.sig, 0, &v));
    printf("two gpus: %zu bytes GPU1 -> GPU0 region -> GPU1, %llu mismatched, signal %llu\n", n, b,
           (unsigned long long)v);
    EXPECT(b == 0 && v == 1);
    remora_stream_release(p.client, st);
    CK(cudaStreamDestroy(st));
    pair_close(&p);
    CK(cudaSetDevice(0));
}

int main(void)
{
    char addr[80];
    int ndev = 0;

    setvbuf(stdout, NULL, _IOLBF, 0); /* a case that hangs shows where */
    if (getenv("TEST_STREAM_ONLY_TWO_GPUS")) { /* that case alone (it needs 2 GPUs) */
        CK(cudaGetDeviceCount(&ndev));
        test_two_gpus(ndev);
        printf("%s\n", failures ? "FAILED" : "PASSED");
        return failures ? 1 : 0;
    }
    /* Fork the doomed server before this process starts CUDA. */
    pid_t pid = spawn_host_server(addr, sizeof(addr));
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        if (pid > 0)
            kill(pid, SIGKILL);
        printf("SKIPPED: no GPU\n");
        return 77;
    }
    if (pid <= 0) {
        fprintf(stderr, "cannot start the server for the dead-peer case\n");
        return 1;
    }
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d_bad, sizeof(*d_bad)));
    CK(cudaMemset(d_bad, 0, sizeof(*d_bad)));
    test_dead_peer(pid, addr);

    size_t free_b = 0, total = 0;
    CK(cudaMemGetInfo(&free_b, &total));
    size_t cap = free_b > ((size_t)4 << 30) ? ((size_t)1 << 30) + 64 : (64u << 20);
    pair_t p;
    pair_open(&p, cap, 10000);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    test_sizes(&p, st, cap);
    test_ring(&p, st, cap);
    test_graph(&p, st);
    test_signals(&p, st);
    test_wait(&p, st);
    test_order(&p, st, cap);
    test_bad_args(&p, st);
    CK(cudaStreamSynchronize(st));
    RK(remora_stream_release(p.client, st));
    CK(cudaStreamDestroy(st));
    pair_close(&p);
    test_two_gpus(ndev);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
