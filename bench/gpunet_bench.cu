/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPUnet's microbenchmarks on remora GPU sockets, each beside a CPU client
 * doing the same against the same server in the same run (docs/gpunet.md):
 *   latency    64 B echo round trip over TCP loopback: GPU block vs CPU thread
 *   bandwidth  64 KiB sends streamed to a TCP sink: one GPU block vs one CPU thread
 *   blocks     N thread blocks (default 64), a socket each, vs N CPU threads
 *   gpu-gpu    4 MiB messages (256) from a kernel to a kernel of another
 *              process on the same GPU, vs a device-to-device copy of 4 MiB
 *              timed before and after (their mean)
 * Prints one line per figure and the ratios the targets name.
 *   gpunet_bench [--iters N] [--blocks N] [--mib-per-stream N]
 *                [--only latency|stream|blocks|gpu-gpu]  (that row alone)
 *                [--msg-kib N]  (the one-stream row's send size, default 64; with
 *                                --only stream that row alone, and how the
 *                                proxy moved the bytes: its ring or its bounce
 *                                buffer, REMORA_GPUNET_BOUNCE_MIN)
 *                [--gg-mib N]   (gpu-gpu message size, default 4)
 *                [--gg-inflight N] (queued gpu-gpu messages in flight, 1-8, default 8)
 *                [--sink-gpu N] (gpu-gpu receiver on GPU N, vs cudaMemcpyPeer; default 0)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "bench_util.h"
#include <time.h>
#include <unistd.h>

#include <remora/device/socket.cuh>
#include <remora/remora.h>

#define MSG_BW (64 << 10)
#define MSG_GG (4 << 20)
static int g_gg = MSG_GG; /* gpu-gpu message size (--gg-mib) */
/* Queued gpu-gpu messages in flight (--gg-inflight): by default a full
 * queue (RG_QDEPTH), as a sender streaming as fast as it can keeps it. */
static int g_inflight = (int)RG_QDEPTH;
static int g_sink_gpu;    /* the gpu-gpu receiver's GPU (--sink-gpu) */

/* ------------------------------------------------------------ CPU servers */

static void *echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg, one = 1;
    char buf[65536];
    ssize_t n;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
        for (ssize_t off = 0; off < n;) {
            ssize_t m = send(fd, buf + off, n - off, MSG_NOSIGNAL);
            if (m <= 0) { close(fd); return NULL; }
            off += m;
        }
    close(fd);
    return NULL;
}

/* Sink: read to end of stream, answer with the 8-byte count. */
static void *sink_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char *buf = (char *)malloc(1 << 20);
    unsigned long long total = 0;
    ssize_t n;
    while ((n = recv(fd, buf, 1 << 20, 0)) > 0)
        total += n;
    send(fd, &total, sizeof(total), MSG_NOSIGNAL);
    close(fd);
    free(buf);
    return NULL;
}

struct server { int fd; void *(*fn)(void *); };
static void *accept_loop(void *arg)
{
    struct server *s = (struct server *)arg;
    for (;;) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_t t;
        pthread_create(&t, NULL, s->fn, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

static int tcp_connect(unsigned port)
{
    struct sockaddr_in a = {};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? fd : -1;
}

/* ------------------------------------------------------------ CPU clients */

static double cpu_rtt_us(unsigned port, int iters)
{
    int fd = tcp_connect(port);
    char b[64] = {1};
    double t0 = 0;
    for (int i = -100; i < iters; i++) {
        if (i == 0) t0 = bench_now_s();
        send(fd, b, 64, 0);
        for (int got = 0; got < 64;) got += recv(fd, b + got, 64 - got, 0);
    }
    double us = (bench_now_s() - t0) / iters * 1e6;
    close(fd);
    return us;
}

struct stream_arg { unsigned port; size_t bytes, msg; double t0, t1; int ok; pthread_barrier_t *bar; };
static void *cpu_stream(void *arg)
{
    struct stream_arg *a = (struct stream_arg *)arg;
    char *buf = (char *)calloc(1, a->msg);
    int fd = tcp_connect(a->port);
    unsigned long long ack = 0;
    if (a->bar) pthread_barrier_wait(a->bar);
    a->t0 = bench_now_s();
    for (size_t sent = 0; sent < a->bytes;) {
        ssize_t m = send(fd, buf, a->msg, 0);
        if (m <= 0) break;
        sent += m;
    }
    shutdown(fd, SHUT_WR);
    a->ok = recv(fd, &ack, sizeof(ack), MSG_WAITALL) == sizeof(ack) && ack >= a->bytes;
    a->t1 = bench_now_s();
    close(fd);
    free(buf);
    return NULL;
}

static double cpu_streams_gbps(unsigned port, int n, size_t bytes, size_t msg)
{
    pthread_t t[256];
    struct stream_arg a[256];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, n);
    for (int i = 0; i < n; i++) {
        a[i] = (struct stream_arg){port, bytes, msg, 0, 0, 0, &bar};
        pthread_create(&t[i], NULL, cpu_stream, &a[i]);
    }
    double t0 = 1e30, t1 = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        if (!a[i].ok) return -1;
        t0 = a[i].t0 < t0 ? a[i].t0 : t0;
        t1 = a[i].t1 > t1 ? a[i].t1 : t1;
    }
    return (double)bytes * n / (t1 - t0) / 1e9;
}

/* ------------------------------------------------------------ kernels */

__global__ void k_pingpong(const char *addr, int iters, unsigned long long *ns, int *err)
{
    __shared__ uint8_t b[64];
    int s = rg_connect(addr);
    if (s < 0) { if (threadIdx.x == 0) *err = s; return; }
    unsigned long long t0 = 0, in_send = 0;
    for (int i = -100; i < iters; i++) {
        if (i == 0) { t0 = rg_detail::now_ns(); in_send = 0; }
        unsigned long long ts = rg_detail::now_ns();
        if (rg_send(s, b, 64) != 64) { if (threadIdx.x == 0) *err = -1000; break; }
        in_send += rg_detail::now_ns() - ts;
        for (int got = 0, r; got < 64; got += r)
            if ((r = rg_recv(s, b + got, 64 - got)) <= 0) { if (threadIdx.x == 0) *err = r ? r : -1001; goto out; }
    }
    if (threadIdx.x == 0) { ns[0] = rg_detail::now_ns() - t0; ns[1] = in_send; }
out:
    rg_close(s);
}

/* Each block streams `bytes` in `msg`-byte sends from src, ends the stream,
 * waits for the sink's 8-byte count; t[2b], t[2b+1] = start, end (the end:
 * after the last send, or with `landed` the sink's count). A send to a GPU
 * peer on this host returns once the peer's copy of it ended, so without
 * `landed` the end is when the last byte sits in the receiver's memory. */
__global__ void k_stream(const char *addr, const uint8_t *src, size_t bytes, int msg,
                         unsigned long long *t, int *err, bool landed = true, int warm = 0)
{
    __shared__ unsigned long long ack;
    int s = rg_connect(addr);
    if (s < 0) { if (threadIdx.x == 0) err[blockIdx.x] = s; return; }
    unsigned long long t0 = rg_detail::now_ns();
    const uint8_t *me = src + (size_t)blockIdx.x * msg;
    for (size_t sent = 0; sent < bytes;) {
        int off = (int)(sent % msg), r = rg_send(s, me + off, msg - off);
        if (r < 0) { if (threadIdx.x == 0) err[blockIdx.x] = r; rg_close(s); return; }
        if (sent < (size_t)warm * msg && sent + r >= (size_t)warm * msg)
            t0 = rg_detail::now_ns(); /* the first messages map buffers: not timed */
        sent += r;
    }
    unsigned long long t1 = rg_detail::now_ns();
    rg_shutdown(s);
    int got = 0, r;
    while (got < 8 && (r = rg_recv(s, (uint8_t *)&ack + got, 8 - got)) > 0) got += r;
    if (threadIdx.x == 0) {
        t[2 * blockIdx.x] = t0;
        t[2 * blockIdx.x + 1] = landed ? t1 : rg_detail::now_ns();
        err[blockIdx.x] = got == 8 && ack >= bytes ? 0 : -2000;
    }
    rg_close(s);
}

/* The same with queued sends: up to RG_QDEPTH / 2 messages in flight, out
 * of as many slots of src. */
#define GG_INFLIGHT RG_QDEPTH /* at most; --gg-inflight picks how many */
/* The gpu-gpu reference: GB/s of 1,000 back-to-back copies of one message
 * (cudaMemcpyPeer: on one GPU a device-to-device copy), after one warm-up. */
static double copy_gbps(uint8_t *dst, const uint8_t *src)
{
    double t0 = 0;
    for (int i = -1; i < 1000; i++) {
        if (i == 0) {
            cudaDeviceSynchronize();
            t0 = bench_now_s();
        }
        cudaMemcpyPeer(dst, g_sink_gpu, src, 0, g_gg);
    }
    cudaDeviceSynchronize();
    return 1000.0 * g_gg / (bench_now_s() - t0) / 1e9;
}

#define GG_WARM     4         /* messages before the clock starts (first mappings) */
__global__ void k_stream_q(const char *addr, const uint8_t *src, size_t bytes, int msg,
                           unsigned long long *t, int *err, int warm, int inflight)
{
    __shared__ unsigned long long ack;
    int s = rg_connect(addr), tk[GG_INFLIGHT], r = 0;
    if (s < 0) { if (threadIdx.x == 0) err[0] = s; return; }
    unsigned long long t0 = rg_detail::now_ns(), in_post = 0, in_wait = 0;
    size_t n = bytes / msg, m = 0, done = 0;
    for (; done < n && r >= 0;) {
        unsigned long long a = rg_detail::now_ns();
        if (m < n && m - done < (size_t)inflight) {
            r = tk[m % inflight] = rg_send_post(s, src + (m % inflight) * (size_t)msg, msg);
            m++;
            in_post += rg_detail::now_ns() - a;
            continue;
        }
        if ((r = rg_send_wait(s, tk[done % inflight])) != msg) {
            if (r >= 0)
                r = -2001; /* a queued send is taken whole */
            continue;
        }
        if (++done == (size_t)warm) {
            t0 = rg_detail::now_ns(); /* the first messages map buffers: not timed */
            in_post = in_wait = 0;
            continue;
        }
        in_wait += rg_detail::now_ns() - a;
    }
    if (threadIdx.x == 0) { t[2] = in_post; t[3] = in_wait; }
    if (r < 0) { if (threadIdx.x == 0) err[0] = r; rg_close(s); return; }
    unsigned long long t1 = rg_detail::now_ns(); /* every copy into the sink ended */
    rg_shutdown(s);
    int got = 0;
    while (got < 8 && (r = rg_recv(s, (uint8_t *)&ack + got, 8 - got)) > 0) got += r;
    if (threadIdx.x == 0) {
        t[0] = t0;
        t[1] = t1;
        err[0] = got == 8 && ack >= bytes ? 0 : -2000;
    }
    rg_close(s);
}

/* The GPU sink of the gpu-gpu case (another process): accept one stream,
 * receive it into dst in pieces of cap bytes, answer with the count. */
__global__ void k_gpu_sink(const char *addr, uint8_t *dst, int cap, int *state)
{
    int ls = rg_bind(addr);
    if (threadIdx.x == 0) state[0] = ls >= 0 ? 1 : ls;
    __threadfence_system();
    if (ls < 0) return;
    int s = rg_accept(ls);
    unsigned long long total = 0;
    int r;
    while (s >= 0 && (r = rg_recv(s, dst + total % cap, cap - (int)(total % cap))) > 0)
        total += r;
    __shared__ unsigned long long tot;
    tot = total;
    if (s >= 0) rg_send(s, &tot, 8);
    if (s >= 0) rg_close(s);
    rg_close(ls);
    if (threadIdx.x == 0) state[1] = (int)(total >> 20);
}

/* ... with queued receives into `inflight` slots of cap bytes. */
__global__ void k_gpu_sink_q(const char *addr, uint8_t *dst, int cap, int *state, int inflight)
{
    int ls = rg_bind(addr), tk[GG_INFLIGHT];
    if (threadIdx.x == 0) state[0] = ls >= 0 ? 1 : ls;
    __threadfence_system();
    if (ls < 0) return;
    int s = rg_accept(ls), r = 0;
    unsigned long long total = 0;
    for (int j = 0; j < inflight && s >= 0; j++)
        tk[j] = rg_recv_post(s, dst + (size_t)j * cap, cap);
    for (int j = 0; s >= 0; j = (j + 1) % inflight) {
        if ((r = rg_recv_wait(s, tk[j])) <= 0)
            break;
        total += r;
        tk[j] = rg_recv_post(s, dst + (size_t)j * cap, cap);
    }
    __shared__ unsigned long long tot;
    tot = total;
    if (s >= 0) rg_send(s, &tot, 8);
    if (s >= 0) rg_close(s);
    rg_close(ls);
    if (threadIdx.x == 0) state[1] = r < 0 ? r : (int)(total >> 20);
}

static char *dev_string(const char *s)
{
    char *d;
    cudaMalloc(&d, strlen(s) + 1);
    cudaMemcpy(d, s, strlen(s) + 1, cudaMemcpyHostToDevice);
    return d;
}

/* The kernel just launched on st ran to the end: a launch that failed (too
 * many registers for the block size, say) counts as a failure, never as a
 * figure. */
static int wait_stream(cudaStream_t st, double seconds)
{
    if (cudaGetLastError() != cudaSuccess)
        return 0;
    double until = bench_now_s() + seconds;
    while (cudaStreamQuery(st) == cudaErrorNotReady)
        if (bench_now_s() > until) return 0;
        else usleep(100);
    return cudaStreamSynchronize(st) == cudaSuccess;
}

static remora_gpunet_h g_net; /* the proxy of main's kernels */

static remora_gpunet_h start_net(remora_context_h *ctx, int device)
{
    remora_gpunet_params_t p = {};
    remora_gpunet_h net;
    p.field_mask = REMORA_GPUNET_FIELD_RING_SIZE | REMORA_GPUNET_FIELD_MAX_SOCKS;
    p.ring_size = 1 << 20;
    p.max_socks = 160;
    cudaSetDevice(device);
    cudaFree(0);
    if (remora_context_create(NULL, ctx) || remora_gpunet_create(*ctx, device, &p, &net) ||
        rg_install(remora_gpunet_device_handle(net)) != cudaSuccess) {
        fprintf(stderr, "gpunet_bench: cannot start the GPU socket proxy\n");
        exit(1);
    }
    return net;
}

static int sink_child(const char *port, int queued)
{
    remora_context_h ctx;
    start_net(&ctx, g_sink_gpu);
    char addr[64];
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%s", port);
    uint8_t *dst;
    int *state;
    cudaMalloc(&dst, (size_t)g_gg * GG_INFLIGHT);
    cudaHostAlloc((void **)&state, 2 * sizeof(int), cudaHostAllocMapped);
    state[0] = state[1] = 0;
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (queued)
        k_gpu_sink_q<<<1, 1024, 0, st>>>(dev_string(addr), dst, g_gg, state, g_inflight);
    else
        k_gpu_sink<<<1, 1024, 0, st>>>(dev_string(addr), dst, g_gg, state);
    while (!((volatile int *)state)[0]) usleep(100);
    printf("ready %d\n", state[0]);
    fflush(stdout);
    int ok = wait_stream(st, 90);
    _exit(ok && state[0] == 1 ? 0 : 1);
}

int main(int argc, char **argv)
{
    int iters = 10000, blocks = 64, mib = 64, ngpu = 0;
    const char *only = NULL;
    int msg_bw = MSG_BW;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--gg-mib")) g_gg = atoi(argv[i + 1]) << 20;
        if (!strcmp(argv[i], "--gg-inflight")) g_inflight = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--sink-gpu")) g_sink_gpu = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--gpu-sink")) return sink_child(argv[i + 1], 0);
        if (!strcmp(argv[i], "--gpu-sink-q")) return sink_child(argv[i + 1], 1);
        if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--blocks")) blocks = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--mib-per-stream")) mib = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--only")) only = argv[i + 1];
        if (!strcmp(argv[i], "--msg-kib")) msg_bw = atoi(argv[i + 1]) << 10;
    }
#define ROW(name) (only == NULL || !strcmp(only, name))
    if (only && !ROW("latency") && !ROW("stream") && !ROW("blocks") && !ROW("gpu-gpu")) {
        fprintf(stderr, "gpunet_bench: --only latency|stream|blocks|gpu-gpu, not '%s'\n", only);
        return 2;
    }
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        printf("WAIVED: no CUDA device\n");
        return 77;
    }
    if (blocks < 1 || blocks > 128) blocks = 64;
    if (msg_bw < 1024 || (size_t)msg_bw > (size_t)blocks * MSG_GG) msg_bw = MSG_BW;
    if (g_sink_gpu < 0 || g_sink_gpu >= ngpu) {
        printf("WAIVED: --sink-gpu %d, %d GPU(s) here\n", g_sink_gpu, ngpu);
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    remora_context_h ctx;
    g_net = start_net(&ctx, 0);
    unsigned eport, sport;
    static struct server es, ss;
    es.fd = bench_listen_loopback(&eport); es.fn = echo_conn;
    ss.fd = bench_listen_loopback(&sport); ss.fn = sink_conn;
    pthread_t t;
    pthread_create(&t, NULL, accept_loop, &es);
    pthread_create(&t, NULL, accept_loop, &ss);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    char addr[64];
    int fails = 0;

    /* latency */
    unsigned long long *ns;
    int *err;
    cudaHostAlloc((void **)&ns, 256 * sizeof(*ns), cudaHostAllocMapped);
    cudaHostAlloc((void **)&err, 256 * sizeof(int), cudaHostAllocMapped);
    /* Rounds alternate CPU and GPU clients, so both see the same state of
     * the machine; the medians are reported (single runs on the 16-core
     * host moved by +-20 %). */
    enum { ROUNDS = 5 };
    double cpu_r[ROUNDS] = {0}, gpu_r[ROUNDS] = {0}, diff_r[ROUNDS] = {0};
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", eport);
    for (int r = 0; r < ROUNDS && ROW("latency"); r++) {
        cpu_r[r] = cpu_rtt_us(eport, iters);
        *err = 0;
        k_pingpong<<<1, 32, 0, st>>>(dev_string(addr), iters, ns, err);
        if (!wait_stream(st, 60) || *err) { printf("latency: GPU kernel failed (%d)\n", *err); fails++; }
        gpu_r[r] = *ns / 1e3 / iters;
        diff_r[r] = gpu_r[r] - cpu_r[r];
        printf("latency round %d: cpu=%.2f gpu=%.2f us (the kernel's rg_send %.2f us)\n", r + 1,
               cpu_r[r], gpu_r[r], ns[1] / 1e3 / iters);
    }
    double cpu_rtt = bench_median(cpu_r, ROUNDS), gpu_rtt = bench_median(gpu_r, ROUNDS);
    double d_rtt = bench_median(diff_r, ROUNDS);
    if (ROW("latency"))
        printf("latency_64B_rtt_us cpu=%.2f gpu=%.2f gpu-cpu=%.2f (medians of %d alternating rounds; "
           "target <= 6.00) %s\n", cpu_rtt, gpu_rtt, d_rtt, ROUNDS, d_rtt <= 6 ? "MET" : "NOT MET");

    /* one stream */
    size_t bytes = (size_t)mib << 20;
    uint8_t *src;
    cudaMalloc(&src, (size_t)blocks * MSG_GG);
    cudaMemset(src, 7, (size_t)blocks * MSG_GG);
    if (ROW("stream")) {
        double cpu_bw = cpu_streams_gbps(sport, 1, bytes * 4, msg_bw);
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", sport);
        char *saddr = dev_string(addr);
        memset(err, 0, 256 * sizeof(int));
        memset(ns, 0, 256 * sizeof(*ns));
        remora_gpunet_stats_t gs0 = {}, gs1 = {};
        gs0.field_mask = gs1.field_mask = ~0ull;
        remora_gpunet_stats(g_net, &gs0);
        k_stream<<<1, 1024, 0, st>>>(saddr, src, bytes * 4, msg_bw, ns, err, false);
        if (!wait_stream(st, 120) || err[0]) { printf("bandwidth: GPU kernel failed (%d)\n", err[0]); fails++; }
        remora_gpunet_stats(g_net, &gs1);
        double gpu_bw = bytes * 4 / ((ns[1] - ns[0]) / 1e9) / 1e9;
        printf("stream_%dKiB_GBps cpu=%.2f gpu=%.2f ratio=%.2f (target >= 0.80) %s"
               " [proxy: %.0f%% of the bytes through its bounce buffer, %llu sends back to the ring]\n",
               msg_bw >> 10, cpu_bw, gpu_bw, gpu_bw / cpu_bw, gpu_bw / cpu_bw >= 0.8 ? "MET" : "NOT MET",
               100.0 * (gs1.bounce_bytes - gs0.bounce_bytes) / (double)(bytes * 4),
               (unsigned long long)(gs1.bounce_to_ring - gs0.bounce_to_ring));
    }
    if (ROW("blocks")) {
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", sport);
        char *saddr = dev_string(addr);

        /* N blocks */
        double cpu_agg = cpu_streams_gbps(sport, blocks, bytes, MSG_BW);
        memset(err, 0, 256 * sizeof(int));
        memset(ns, 0, 256 * sizeof(*ns));
        k_stream<<<blocks, 256, 0, st>>>(saddr, src, bytes, MSG_BW, ns, err, false);
        int ok = wait_stream(st, 180);
        unsigned long long t0 = ~0ull, t1 = 0;
        for (int b = 0; b < blocks; b++) {
            if (err[b]) ok = 0;
            t0 = ns[2 * b] < t0 ? ns[2 * b] : t0;
            t1 = ns[2 * b + 1] > t1 ? ns[2 * b + 1] : t1;
        }
        if (!ok) { printf("blocks: GPU kernel failed\n"); fails++; }
        double gpu_agg = (double)bytes * blocks / ((t1 - t0) / 1e9) / 1e9;
        printf("blocks_%d_x_64KiB_GBps cpu=%.2f gpu=%.2f ratio=%.2f (target >= 0.80) %s\n", blocks,
               cpu_agg, gpu_agg, gpu_agg / cpu_agg, gpu_agg / cpu_agg >= 0.8 ? "MET" : "NOT MET");
    }

    if (!ROW("gpu-gpu")) {
        printf("done: %d failure(s)\n", fails);
        _exit(fails ? 1 : 0);
    }
    /* gpu-gpu: baseline a device-to-device copy of one message, one at a
     * time: cudaMemcpy on one GPU, cudaMemcpyPeer to the sink's GPU. */
    if (g_gg < (1 << 20) || g_gg > (size_t)blocks * MSG_GG)
        g_gg = MSG_GG;
    if (g_inflight < 1 || g_inflight > (int)GG_INFLIGHT || (size_t)g_inflight * g_gg > (size_t)blocks * MSG_GG)
        g_inflight = (int)GG_INFLIGHT;
    /* 256 messages at least: at 4 MiB a run of 64 lasted 0.6 ms, and its
     * ramp and the GPU's clock moved the figure by +-20 %. */
    size_t gg_total = (size_t)g_gg * 256 > ((size_t)1 << 30) ? (size_t)g_gg * 256 : (size_t)1 << 30;
    uint8_t *d2;
    cudaSetDevice(g_sink_gpu);
    cudaMalloc(&d2, g_gg);
    cudaSetDevice(0);
    if (g_sink_gpu != 0 && cudaDeviceEnablePeerAccess(g_sink_gpu, 0) != cudaSuccess)
        cudaGetLastError(); /* already enabled, or no peer access: the copy stages then */
    /* The reference is taken before and after the rows; their mean is the
     * ratios' base (it moved 558-986 GB/s between runs of one machine). */
    double d2d_before = copy_gbps(d2, src), gg_row[2] = {0, 0}, q_post_us = 0, q_wait_us = 0;
    const char *base = g_sink_gpu ? "memcpy_peer" : "d2d_memcpy";
    /* Blocking sends and receives (one message at a time), then queued ones
     * (GG_INFLIGHT in flight), each against a sink process of its own. */
    for (int queued = 0; queued < 2; queued++) {
        unsigned gport;
        int probe = bench_listen_loopback(&gport);
        close(probe);
        char ports[16];
        snprintf(ports, sizeof(ports), "%u", gport);
        int fds[2];
        if (pipe(fds)) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fds[1], 1);
            char mibs[16];
            char sgpu[16];
            char infl[16];
            snprintf(mibs, sizeof(mibs), "%d", g_gg >> 20);
            snprintf(sgpu, sizeof(sgpu), "%d", g_sink_gpu);
            snprintf(infl, sizeof(infl), "%d", g_inflight);
            execl("/proc/self/exe", argv[0], "--gg-mib", mibs, "--sink-gpu", sgpu, "--gg-inflight",
                  infl, queued ? "--gpu-sink-q" : "--gpu-sink", ports, (char *)NULL);
            _exit(127);
        }
        close(fds[1]);
        char line[64] = "";
        FILE *f = fdopen(fds[0], "r");
        if (!fgets(line, sizeof(line), f) || strncmp(line, "ready 1", 7)) {
            printf("gpu-gpu: the GPU sink process did not start (%s)\n", line);
            fails++;
        } else {
            snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", gport);
            char *gaddr = dev_string(addr);
            memset(err, 0, 256 * sizeof(int));
            memset(ns, 0, 256 * sizeof(*ns));
            if (queued)
                k_stream_q<<<1, 1024, 0, st>>>(gaddr, src, gg_total, g_gg, ns, err, GG_WARM,
                                               g_inflight);
            else
                k_stream<<<1, 1024, 0, st>>>(gaddr, src, gg_total, g_gg, ns, err, true, GG_WARM);
            if (!wait_stream(st, 120) || err[0]) {
                printf("gpu-gpu%s: GPU kernel failed (%d)\n", queued ? " queued" : "", err[0]);
                fails++;
            } else {
                double nmsg = (double)(gg_total / g_gg - GG_WARM);
                gg_row[queued] = nmsg * g_gg / ((ns[1] - ns[0]) / 1e9) / 1e9;
                if (queued) { /* the sending kernel's own time, a message */
                    q_post_us = ns[2] / 1e3 / nmsg;
                    q_wait_us = ns[3] / 1e3 / nmsg;
                }
            }
        }
        fclose(f);
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("gpu-gpu%s: the sink process failed\n", queued ? " queued" : "");
            fails++;
        }
    }
    double d2d_after = copy_gbps(d2, src), d2d = (d2d_before + d2d_after) / 2;
    size_t nmsg = gg_total / g_gg - GG_WARM;
    for (int queued = 0; queued < 2; queued++) {
        double gg = gg_row[queued];
        if (gg <= 0)
            continue;
        printf("gpu_gpu_%s%dMiB_GBps gpus=0,%d %s=%.1f (%.1f before, %.1f after) gpu_sockets=%.2f "
               "ratio=%.3f (target >= 0.50) %s (%.1f us a message, %zu messages)\n",
               queued ? "queued_" : "", g_gg >> 20, g_sink_gpu, base, d2d, d2d_before, d2d_after,
               gg, gg / d2d, gg / d2d >= 0.5 ? "MET" : "NOT MET", g_gg / gg / 1e3, nmsg);
        if (queued)
            printf("  %d in flight; the sending kernel a message: %.1f us posting, %.1f us "
                   "waiting\n", g_inflight, q_post_us, q_wait_us);
    }
    printf("done: %d failure(s)\n", fails);
    _exit(fails ? 1 : 0);
}
