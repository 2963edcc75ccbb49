/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU sockets on a real GPU (label gpu; exit 77 without one). Each case
 * prints PASSED or FAILED; the exit status is the number of failures.
 *   1 echo 1 B..4 MiB with a CPU remora peer (global-memory buffers)
 *   1b the same with a TCP peer through a proxy whose sends of 4 KiB or
 *      more are copied out by its copy engine (the bounce buffer), and that
 *      peer reset mid-stream
 *   2 echo with a TCP peer from shared memory, odd sizes, partial sends
 *   2b 50 connections one right after another in one block, byte-exact
 *   3 64 thread blocks, a socket each, at once
 *   4 a GPU server (remora:SERVICE) accepting 3 CPU clients
 *   5 a GPU peer in another process (gpu_echo_server, same GPU), byte-exact
 *   5b a GPU peer in another process echoing from global memory: device to
 *      device (CUDA IPC), 1 B..4 MiB, partial sends and receives, byte-exact;
 *      that peer killed mid-stream -> the kernel's calls fail in time
 *   6 the TCP peer reset mid-transfer: the kernel's calls fail in time
 *   7 the proxy destroyed under a waiting kernel: error, no hang
 *   8 bad arguments: NULL buffer, bad socket, bad address
 *   9 two GPUs: a GPU peer on the other GPU (skipped with fewer than 2)
 * Usage: test_gpunet [GPU_ECHO_SERVER_BINARY]
 *        test_gpunet --global-echo PORT N   (the peer of 5b: echo N connections)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <remora/device/socket.cuh>
#include <remora/remora.h>

#include "gpu_test_util.h"


/* ------------------------------------------------------------ kernels */

/* Echo `len` bytes of src through socket-connect(addr) into dst, pieces of `piece`. */
__global__ void k_echo(const char *addr, const uint8_t *src, uint8_t *dst, int len, int piece,
                       int *result)
{
    __shared__ int s;
    s = rg_connect(addr);
    if (s < 0) {
        if (threadIdx.x == 0) result[blockIdx.x] = s;
        return;
    }
    int sent = 0, got = 0, r = 0;
    while (got < len) {
        if (sent < len) {
            int k = len - sent < piece ? len - sent : piece;
            r = rg_send(s, src + sent, k);
            if (r < 0) break;
            sent += r;
        }
        r = rg_recv(s, dst + got, len - got);
        if (r <= 0) { r = r ? r : -100; break; }
        got += r;
        r = 0;
    }
    rg_close(s);
    if (threadIdx.x == 0) result[blockIdx.x] = r < 0 ? r : got;
}

/* Connect, echo `rounds` x `len` bytes through shared memory, check, close:
 * 1 or a status; *sock (if given) the socket it had. */
__device__ int echo_shared_once(const char *addr, int len, int rounds, int salt, int *sock = NULL)
{
    __shared__ uint8_t out[8192], in[8192];
    __shared__ int s, bad;
    s = rg_connect(addr);
    if (sock) *sock = s;
    if (s < 0) return s;
    int r = 0;
    for (int m = 0; m < rounds && r >= 0; m++) {
        for (int i = threadIdx.x; i < len; i += blockDim.x)
            out[i] = (uint8_t)(i * 3 + m + blockIdx.x * 17 + salt);
        bad = 0;
        __syncthreads();
        int sent = 0, got = 0;
        while (sent < len && (r = rg_send(s, out + sent, len - sent)) > 0) sent += r;
        while (r >= 0 && got < len && (r = rg_recv(s, in + got, len - got)) > 0) got += r;
        if (r <= 0 && got < len) { r = r ? r : -100; break; }
        for (int i = threadIdx.x; i < len; i += blockDim.x)
            if (in[i] != out[i]) bad = 1;
        __syncthreads();
        if (bad) r = -200;
        __syncthreads(); /* every thread read bad before the next round clears it */
    }
    rg_close(s);
    return r < 0 ? r : 1;
}

/* Each block: one connection's echo (echo_shared_once). */
__global__ void k_echo_shared(const char *addr, int len, int rounds, int *result)
{
    int r = echo_shared_once(addr, len, rounds, 0);
    if (threadIdx.x == 0) result[blockIdx.x] = r;
}

/* One block: `cycles` connections one right after another, each echoing
 * checked bytes; a new connection in a slot whose last one sent a moment
 * ago must not reuse that one's send state (socket_abi.h, send shadows).
 * result[1]: how many connections had the slot of the one before. */
__global__ void k_reconnect(const char *addr, int cycles, int *result)
{
    int r = 1, last = -1, reused = 0, s = -1;
    for (int c = 0; c < cycles && r == 1; c++) {
        r = echo_shared_once(addr, 100 + c * 37 % 900, 3, c, &s);
        reused += s == last;
        last = s;
    }
    if (threadIdx.x == 0) {
        result[0] = r;
        result[1] = reused;
    }
}

/* Listen on addr; accept n connections one after another and echo each to
 * EOF through buf (cap bytes). result[1] = 1 once bound; result[0] = the
 * connections served, or the status that ended it. */
__device__ void echo_server(const char *addr, uint8_t *buf, int cap, int n, int *result,
                            unsigned long long *accept_fail_ns = nullptr)
{
    int ls = rg_bind(addr), served = 0, r = 0;
    if (ls < 0) { if (threadIdx.x == 0) result[0] = ls; return; }
    if (threadIdx.x == 0) result[1] = 1; /* bound */
    __threadfence_system();
    unsigned long long t0 = rg_detail::now_ns();
    for (int c = 0; c < n; c++) {
        int s = rg_accept(ls);
        if (s < 0 && accept_fail_ns && threadIdx.x == 0)
            *accept_fail_ns = rg_detail::now_ns() - t0; /* by the GPU's clock */
        if (s < 0) { r = s; break; }
        while ((r = rg_recv(s, buf, cap)) > 0) {
            int sent = 0, m = 0;
            while (sent < r && (m = rg_send(s, buf + sent, r - sent)) > 0) sent += m;
        }
        rg_close(s);
        served++;
    }
    rg_close(ls);
    if (threadIdx.x == 0) result[0] = r < 0 ? r : served;
}

/* ... through shared memory (the rings). */
__global__ void k_server(const char *addr, int n, int *result, unsigned long long *fail_ns)
{
    __shared__ uint8_t buf[4096];
    echo_server(addr, buf, sizeof(buf), n, result, fail_ns);
}

/* ... through global memory: large receives and sends go device to device. */
__global__ void k_global_server(const char *addr, uint8_t *buf, int cap, int n, int *result)
{
    echo_server(addr, buf, cap, n, result);
}

/* Stream to a peer that dies: keep sending until an error; then recv. */
__global__ void k_until_error(const char *addr, uint8_t *buf, int *result, unsigned long long *ns)
{
    int s = rg_connect(addr);
    if (s < 0) { if (threadIdx.x == 0) result[0] = s; return; }
    if (threadIdx.x == 0) result[2] = 1; /* connected */
    __threadfence_system();
    int r;
    unsigned long long t0 = rg_detail::now_ns();
    while ((r = rg_send(s, buf, 65536)) > 0) {}
    int r2 = rg_recv(s, buf, 16);
    if (threadIdx.x == 0) { result[0] = r; result[1] = r2; *ns = rg_detail::now_ns() - t0; }
    rg_close(s);
}

/* Wait in recv on a silent socket; the host destroys the proxy meanwhile. */
__global__ void k_wait(const char *addr, int *result)
{
    __shared__ uint8_t b[16];
    int s = rg_connect(addr);
    if (threadIdx.x == 0) result[1] = s >= 0 ? 1 : s;
    __threadfence_system();
    if (s < 0) return;
    int r = rg_recv_on(rg_default_net, s, b, sizeof(b), 30000000000ull);
    if (threadIdx.x == 0) result[0] = r;
    r = rg_send(s, b, 4);
    if (threadIdx.x == 0) result[2] = r;
}

__global__ void k_bad(const char *good_addr, int *result)
{
    __shared__ uint8_t b[16];
    int s = rg_connect(good_addr);
    result[0] = rg_send(s, NULL, 8);      /* NULL buffer */
    result[1] = rg_recv(12345, b, 8);     /* socket out of range */
    result[2] = rg_send(77, b, 8);        /* not open */
    result[3] = rg_connect("udp://x:1");  /* bad address */
    result[4] = rg_recv(s, b, -1);        /* negative length */
    result[5] = rg_recv_on(rg_default_net, s, b, 8, 100000000ull); /* 100 ms of silence */
    rg_close(s);
}

/* ------------------------------------------------------------ host peers */

static void *tcp_echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    static __thread char buf[65536];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
        for (ssize_t off = 0; off < n;) {
            ssize_t m = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (m <= 0) { close(fd); return NULL; }
            off += m;
        }
    close(fd);
    return NULL;
}

static void *tcp_echo_accept(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) return NULL;
        pthread_t t;
        pthread_create(&t, NULL, tcp_echo_conn, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

static remora_sock_listener_h g_echo;
static void *rsock_echo_one(void *arg)
{
    remora_sock_h s = (remora_sock_h)arg;
    char *buf = (char *)malloc(1 << 20);
    int64_t n;
    while ((n = remora_sock_recv(s, buf, 1 << 20, 30000)) > 0)
        for (int64_t off = 0; off < n;) {
            int64_t m = remora_sock_send(s, buf + off, (size_t)(n - off), 30000);
            if (m < 0) goto out;
            off += m;
        }
out:
    free(buf);
    remora_sock_close(s);
    return NULL;
}
static void *rsock_echo_accept(void *arg)
{
    for (;;) {
        remora_sock_h s;
        if (remora_sock_accept(g_echo, 1000, &s) == REMORA_OK) {
            pthread_t t;
            pthread_create(&t, NULL, rsock_echo_one, s);
            pthread_detach(t);
        }
    }
    return NULL;
}

static int echo_sizes(cudaStream_t st, const char *addr)
{
    int ok = 1;
    const int max = 4 << 20;
    uint8_t *src, *dst, *h = (uint8_t *)malloc(max), *back = (uint8_t *)malloc(max);
    int *res = mapped_ints(1);
    char *a = dev_string(addr);
    cudaMalloc(&src, max);
    cudaMalloc(&dst, max);
    for (int i = 0; i < max; i++) h[i] = (uint8_t)(i * 2654435761u >> 13);
    cudaMemcpy(src, h, max, cudaMemcpyHostToDevice);
    int sizes[] = {1, 7, 64, 1000, 4096, 65536, 100003, 1 << 20, max};
    for (int len : sizes) {
        int piece = len > 4096 ? len / 3 + 1 : len;
        cudaMemset(dst, 0, max);
        k_echo<<<1, 256, 0, st>>>(a, src, dst, len, piece, res);
        if (!wait_stream(st, 60000)) { printf("  %d B: kernel did not finish\n", len); return 0; }
        cudaMemcpy(back, dst, len, cudaMemcpyDeviceToHost);
        if (*res != len || memcmp(back, h, len) != 0) {
            printf("  %d B: result %d, %s\n", len, *res, memcmp(back, h, len) ? "bytes differ" : "bytes equal");
            ok = 0;
        }
    }
    cudaFree(src); cudaFree(dst); cudaFree(a); free(h); free(back);
    return ok;
}

/* The peer of cases 5b and 9, another process on GPU `dev`. */
static int global_echo_child(const char *port, int n, int dev)
{
    remora_context_h ctx;
    remora_gpunet_h net;
    remora_gpunet_params_t gp = {};
    gp.field_mask = REMORA_GPUNET_FIELD_TIMEOUT_MS;
    gp.timeout_ms = 10000;
    if (cudaSetDevice(dev) != cudaSuccess || cudaFree(0) != cudaSuccess)
        return 1;
    if (remora_context_create(NULL, &ctx) || remora_gpunet_create(ctx, dev, &gp, &net) ||
        rg_install(remora_gpunet_device_handle(net)))
        return 1;
    char addr[64];
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%s", port);
    uint8_t *buf;
    int *res = mapped_ints(2);
    cudaMalloc(&buf, 4 << 20);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    k_global_server<<<1, 1024, 0, st>>>(dev_string(addr), buf, 4 << 20, n, res);
    for (int i = 0; i < 20000 && !((volatile int *)res)[1] && !((volatile int *)res)[0]; i++)
        usleep(500);
    printf("listening %d\n", res[1]);
    fflush(stdout);
    int ok = wait_stream(st, 120000);
    _exit(ok && res[0] == n ? 0 : 1);
}

/* Start the peer of 5b or 9 on GPU dev; its pid, with *port set, or -1. */
static pid_t start_global_echo(unsigned *port, int n, int dev)
{
    int probe = bench_listen_loopback(port), fds[2];
    close(probe);
    char ports[16], ns[16], ds[16], line[64] = "";
    snprintf(ports, sizeof(ports), "%u", *port);
    snprintf(ns, sizeof(ns), "%d", n);
    snprintf(ds, sizeof(ds), "%d", dev);
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        execl("/proc/self/exe", "test_gpunet", "--global-echo", ports, ns, ds, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    int ok = fgets(line, sizeof(line), f) != NULL && !strncmp(line, "listening 1", 11);
    fclose(f);
    if (!ok) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); return -1; }
    return pid;
}

/* 5b, second part: the GPU peer killed mid-stream. */
/* A TCP peer reset while the kernel streams 64 KiB sends from global memory. */
static int reset_case(cudaStream_t st)
{
    int ok = 1, *res = mapped_ints(3);
    unsigned long long *ns;
    cudaHostAlloc((void **)&ns, sizeof(*ns), cudaHostAllocMapped);
    unsigned port;
    int lfd = bench_listen_loopback(&port);
    char addr[64];
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    char *a = dev_string(addr);
    uint8_t *buf;
    cudaMalloc(&buf, 65536);
    k_until_error<<<1, 256, 0, st>>>(a, buf, res, ns);
    int pfd = accept(lfd, NULL, NULL);
    char sink[65536];
    recv(pfd, sink, sizeof(sink), 0); /* mid-transfer */
    struct linger lg = {1, 0};
    setsockopt(pfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(pfd);
    CHECK(wait_stream(st, 15000));
    printf("  send -> %d, recv -> %d, %.1f ms after the first send\n", res[0], res[1], *ns / 1e6);
    CHECK(res[0] == REMORA_ERR_DISCONNECTED && res[1] == REMORA_ERR_DISCONNECTED);
    close(lfd);
    cudaFree(buf);
    cudaFree(a);
    return ok;
}

/* 1b: a second proxy, installed for the kernels of this case only, whose
 * sends of 4 KiB or more go through its bounce buffer. */
static int bounce_case(remora_context_h ctx, remora_gpunet_h main_net, cudaStream_t st,
                       unsigned tport)
{
    int ok = 1;
    remora_gpunet_h net;
    char addr[64];
    setenv("REMORA_GPUNET_BOUNCE_MIN", "4096", 1);
    int made = remora_gpunet_create(ctx, 0, NULL, &net) == REMORA_OK;
    unsetenv("REMORA_GPUNET_BOUNCE_MIN");
    CHECK(made);
    if (!made) return 0;
    CHECK(rg_install(remora_gpunet_device_handle(net)) == cudaSuccess);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", tport);
    CHECK(echo_sizes(st, addr));
    remora_gpunet_stats_t gs = {};
    gs.field_mask = ~0ull;
    CHECK(remora_gpunet_stats(net, &gs) == REMORA_OK);
    printf("  %llu sends (%llu bytes) copied out by the proxy, %llu back to the ring, %llu ring bytes\n",
           (unsigned long long)gs.bounce_sends, (unsigned long long)gs.bounce_bytes,
           (unsigned long long)gs.bounce_to_ring, (unsigned long long)gs.ring_bytes);
    CHECK(gs.bounce_sends > 0 && gs.bounce_bytes > (4u << 20));
    CHECK(reset_case(st));
    remora_gpunet_destroy(net);
    CHECK(rg_install(remora_gpunet_device_handle(main_net)) == cudaSuccess);
    return ok;
}

static void peer_killed_case(cudaStream_t st, uint8_t *src)
{
    char addr[64];
    unsigned port;
    int ok = 1;
    int *r3 = mapped_ints(3);
    unsigned long long *ns;
    cudaHostAlloc((void **)&ns, sizeof(*ns), cudaHostAllocMapped);
    pid_t pid = start_global_echo(&port, 1, 0);
    CHECK(pid > 0);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    k_until_error<<<1, 256, 0, st>>>(dev_string(addr), src, r3, ns);
    for (int i = 0; i < 20000 && !((volatile int *)r3)[2]; i++) usleep(500);
    usleep(200000); /* mid-stream */
    if (pid > 0) kill(pid, SIGKILL);
    double t0 = now_ms();
    CHECK(wait_stream(st, 15000));
    printf("  send -> %d, recv -> %d, %.1f ms after the kill\n", r3[0], r3[1], now_ms() - t0);
    CHECK(r3[0] == REMORA_ERR_DISCONNECTED && r3[1] == REMORA_ERR_DISCONNECTED);
    if (pid > 0) waitpid(pid, NULL, 0);
    report("GPU peer (global memory) killed mid-stream: kernel gets an error", ok);
}

/* 5b and 9: a kernel here echoes 1 B..4 MiB, in pieces, through a GPU peer
 * process on GPU `dev` whose kernel receives into and sends from global
 * memory (device to device when large), byte-exact. */
static int echo_global(cudaStream_t st, int dev)
{
    static const int lens[] = {1, 64, 4096, 65536, 300001, 1 << 20, 4 << 20, 4 << 20};
    static const int pieces[] = {1, 64, 4096, 65536, 4099, 1 << 20, 4 << 20, 1 << 20};
    const int n = sizeof(lens) / sizeof(lens[0]);
    int ok = 1;
    unsigned port;
    char addr[64];
    pid_t pid = start_global_echo(&port, n, dev);
    CHECK(pid > 0);
    uint8_t *src, *dst, *hs = (uint8_t *)malloc(4 << 20), *hd = (uint8_t *)malloc(4 << 20);
    cudaMalloc(&src, 4 << 20);
    cudaMalloc(&dst, 4 << 20);
    for (int i = 0; i < (4 << 20); i++) hs[i] = (uint8_t)(i * 7 + (i >> 13));
    cudaMemcpy(src, hs, 4 << 20, cudaMemcpyHostToDevice);
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    char *a = dev_string(addr);
    int *res = mapped_ints(1);
    for (int k = 0; k < n && pid > 0 && ok; k++) {
        cudaMemset(dst, 0, 4 << 20);
        double t0 = now_ms();
        k_echo<<<1, 1024, 0, st>>>(a, src, dst, lens[k], pieces[k], res);
        CHECK(wait_stream(st, 60000));
        CHECK(res[0] == lens[k]);
        cudaMemcpy(hd, dst, lens[k], cudaMemcpyDeviceToHost);
        CHECK(memcmp(hd, hs, lens[k]) == 0);
        printf("  %d bytes in pieces of %d, peer on GPU %d: %d (%.1f ms)\n", lens[k], pieces[k],
               dev, res[0], now_ms() - t0);
    }
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cudaFree(src);
    cudaFree(dst);
    free(hs);
    free(hd);
    return ok;
}

int main(int argc, char **argv)
{
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        printf("WAIVED: no CUDA device\n");
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    cudaSetDevice(0);
    cudaFree(0);
    if (argc == 5 && !strcmp(argv[1], "--global-echo"))
        return global_echo_child(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 2 && !strcmp(argv[1], "--peer-killed")) { /* that case alone */
        remora_context_h c;
        remora_gpunet_h n;
        remora_gpunet_params_t p = {};
        p.field_mask = REMORA_GPUNET_FIELD_TIMEOUT_MS;
        p.timeout_ms = 10000;
        uint8_t *src;
        cudaStream_t s;
        if (remora_context_create(NULL, &c) || remora_gpunet_create(c, 0, &p, &n) ||
            rg_install(remora_gpunet_device_handle(n)))
            return 1;
        cudaMalloc(&src, 4 << 20);
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        peer_killed_case(s, src);
        _exit(g_failed ? 1 : 0);
    }
    remora_context_h ctx;
    remora_server_h srv;
    remora_gpunet_h net;
    char saddr[128], addr[256];
    remora_server_params_t sp = {};
    sp.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR;
    sp.listen_addr = "127.0.0.1:0";
    if (remora_context_create(NULL, &ctx) || remora_server_create(ctx, &sp, &srv) ||
        remora_server_address(srv, saddr, sizeof(saddr)) || remora_sock_listen(srv, "echo", &g_echo)) {
        printf("FAILED setup: remora server\n");
        return 1;
    }
    remora_gpunet_params_t gp = {};
    gp.field_mask = REMORA_GPUNET_FIELD_SERVER | REMORA_GPUNET_FIELD_TIMEOUT_MS;
    gp.server = srv;
    gp.timeout_ms = 10000;
    if (remora_gpunet_create(ctx, 0, &gp, &net) || rg_install(remora_gpunet_device_handle(net))) {
        printf("FAILED setup: remora_gpunet_create\n");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, rsock_echo_accept, NULL);
    unsigned tport;
    int tfd = bench_listen_loopback(&tport);
    pthread_create(&t, NULL, tcp_echo_accept, (void *)(intptr_t)tfd);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);

    /* 1 */
    snprintf(addr, sizeof(addr), "remora://%s/echo", saddr);
    report("echo 1 B..4 MiB, CPU remora peer", echo_sizes(st, addr));
    /* 1b */
    report("echo 1 B..4 MiB through the proxy's bounce buffer, TCP peer; peer reset",
           bounce_case(ctx, net, st, tport));
    /* 2 */
    {
        int ok = 1, *res = mapped_ints(1);
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", tport);
        char *a = dev_string(addr);
        int lens[] = {1, 3, 777, 8192};
        for (int len : lens) {
            k_echo_shared<<<1, 128, 0, st>>>(a, len, 20, res);
            CHECK(wait_stream(st, 30000));
            CHECK(*res == 1);
        }
        report("echo from shared memory, TCP peer", ok);
        /* 2b */
        ok = 1;
        int *rc = mapped_ints(2);
        k_reconnect<<<1, 128, 0, st>>>(a, 50, rc);
        CHECK(wait_stream(st, 60000));
        printf("  50 connections: %d, %d of them in the slot of the one before\n", rc[0], rc[1]);
        CHECK(rc[0] == 1);
        CHECK(rc[1] > 0); /* else the case tested nothing */
        report("50 connections one after another, byte-exact", ok);
        /* 3 */
        int *r64 = mapped_ints(64);
        k_echo_shared<<<64, 128, 0, st>>>(a, 8192, 50, r64);
        CHECK(wait_stream(st, 60000));
        int good = 0;
        for (int i = 0; i < 64; i++) good += r64[i] == 1;
        if (good != 64) printf("  %d of 64 blocks echoed correctly\n", good);
        CHECK(good == 64);
        report("64 thread blocks, a socket each", ok);
    }
    /* 4 */
    {
        int ok = 1, *res = mapped_ints(2);
        char *a = dev_string("remora:gpusrv");
        /* The client's context before the kernel: with a CUDA-enabled UCX,
         * creating one sometimes waits until running kernels end (UCX's
         * CUDA start-up synchronizes the device), here until the server
         * kernel's accept gave up (docs/gpunet.md). */
        remora_context_h cctx;
        remora_client_h cl;
        CHECK(remora_context_create(NULL, &cctx) == REMORA_OK);
        unsigned long long *fail_ns = (unsigned long long *)mapped_ints(2);
        *fail_ns = 0;
        k_server<<<1, 128, 0, st>>>(a, 3, res, fail_ns);
        for (int i = 0; i < 20000 && !((volatile int *)res)[1] && !((volatile int *)res)[0]; i++) usleep(500);
        CHECK(remora_client_connect(cctx, saddr, NULL, &cl) == REMORA_OK);
        for (int c = 0; ok && c < 3; c++) {
            remora_sock_h s;
            char out[3000], in[3000];
            for (int i = 0; i < 3000; i++) out[i] = (char)(i + c);
            remora_status_t cst = remora_sock_connect(cl, "gpusrv", 10000, &s);
            if (cst != REMORA_OK)
                printf("  client %d: connect: %s (kernel: bound %d, result %d after %.1f ms)\n",
                       c, remora_status_string(cst), ((volatile int *)res)[1],
                       ((volatile int *)res)[0], *(volatile unsigned long long *)fail_ns / 1e6);
            CHECK(cst == REMORA_OK);
            if (!ok) break;
            CHECK(remora_sock_send(s, out, 3000, 10000) == 3000);
            size_t got = 0;
            int64_t r;
            while (got < 3000 && (r = remora_sock_recv(s, in + got, 3000 - got, 10000)) > 0) got += r;
            CHECK(got == 3000 && memcmp(in, out, 3000) == 0);
            remora_sock_close(s);
        }
        CHECK(wait_stream(st, 30000));
        CHECK(res[0] == 3);
        remora_client_disconnect(cl);
        remora_context_destroy(cctx);
        report("GPU server accepting 3 CPU clients", ok);
    }
    /* 5 */
    if (argc > 1) {
        int ok = 1, fds[2];
        unsigned port;
        int probe = bench_listen_loopback(&port);
        close(probe);
        char ports[16];
        snprintf(ports, sizeof(ports), "%u", port);
        if (pipe(fds) != 0) { perror("pipe"); return 1; }
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fds[1], 1);
            execl(argv[1], argv[1], ports, "4", (char *)NULL);
            _exit(127);
        }
        close(fds[1]);
        char line[128] = "";
        FILE *f = fdopen(fds[0], "r");
        CHECK(fgets(line, sizeof(line), f) != NULL && strstr(line, "listening"));
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
        char *a = dev_string(addr);
        int *r4 = mapped_ints(4);
        k_echo_shared<<<4, 128, 0, st>>>(a, 8192, 100, r4);
        CHECK(wait_stream(st, 60000));
        for (int i = 0; i < 4; i++) CHECK(r4[i] == 1);
        int status = -1;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        fclose(f);
        report("GPU peer in another process (same GPU), byte-exact", ok);
    } else {
        printf("WAIVED GPU peer in another process: no gpu_echo_server path given\n");
    }
    /* 5b */
    {
        uint8_t *src;
        cudaMalloc(&src, 4 << 20);
        report("GPU peer in another process, global memory (device to device), byte-exact",
               echo_global(st, 0));
        peer_killed_case(st, src);
        cudaFree(src);
    }
    /* 6 */
    report("peer killed mid-transfer: kernel gets an error", reset_case(st));
    /* 8 (before 7, which ends the proxy) */
    {
        int ok = 1, *res = mapped_ints(6);
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", tport);
        char *a = dev_string(addr);
        k_bad<<<1, 64, 0, st>>>(a, res);
        CHECK(wait_stream(st, 15000));
        printf("  %d %d %d %d %d %d\n", res[0], res[1], res[2], res[3], res[4], res[5]);
        CHECK(res[0] == REMORA_ERR_INVALID_PARAM && res[1] == REMORA_ERR_INVALID_PARAM &&
              res[2] == REMORA_ERR_INVALID_PARAM && res[3] == REMORA_ERR_ADDRESS &&
              res[4] == REMORA_ERR_INVALID_PARAM && res[5] == REMORA_ERR_TIMED_OUT);
        report("bad arguments -> negative status", ok);
    }
    /* 9 */
    if (ngpu < 2)
        printf("WAIVED two GPUs: %d GPU(s) here (a separate two-GPU issue)\n", ngpu);
    else
        report("GPU peer on the other GPU (device to device across GPUs), byte-exact",
               echo_global(st, 1));
    /* 7 */
    {
        int ok = 1, *res = mapped_ints(3);
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", tport);
        char *a = dev_string(addr);
        k_wait<<<1, 64, 0, st>>>(a, res);
        for (int i = 0; i < 20000 && !((volatile int *)res)[1]; i++) usleep(500);
        usleep(100000);
        remora_gpunet_destroy(net);
        CHECK(wait_stream(st, 5000));
        printf("  recv -> %d, send -> %d\n", res[0], res[2]);
        CHECK(res[0] == REMORA_ERR_CANCELED && res[2] == REMORA_ERR_CANCELED);
        report("proxy destroyed while a kernel holds a socket", ok);
    }
    printf("%d failure(s)\n", g_failed);
    fflush(stdout);
    _exit(g_failed ? 1 : 0); /* echo threads still block in accept */
}
