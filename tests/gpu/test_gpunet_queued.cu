/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Queued transfers between GPU sockets of two processes on one GPU (label
 * gpu; exit 77 without one). Each case prints PASSED or FAILED.
 *   1 queued sends and receives only, 1 MiB messages and an odd one, several
 *     in flight each way: byte-exact; then a wait for the first send, whose
 *     answer later ones took over, is RG_EINVAL and the last one's result
 *     is still there
 *   2 queued sends mixed with ring sends and a direct (blocking, large) send:
 *     the bytes arrive in the order the kernel sent them
 *   3 a queued send on a TCP socket (not supported), from shared memory, a
 *     bad ticket, a bad socket: negative status
 *   4 the peer killed with transfers queued: every wait returns an error
 *   5 a queued send of memory CUDA IPC cannot share (a stream-ordered pool
 *     allocation) fails with -1 and is not sent; the next one, and the
 *     connection, go on
 *   6 queued sends into a peer that receives with rg_recv into shared
 *     memory: the proxy copies the sends' bytes into its receive ring while
 *     more RTSQs arrive (none may land on the bytes being copied): byte-exact
 * The peer (test_gpunet_queued --echo PORT) echoes with queued receives and
 * sends; bytes that come through the ring first (RG_ERING) it takes with
 * rg_recv. With --echo-ring it echoes with rg_recv and rg_send through a
 * buffer in shared memory.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
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

#define SLOTS   4
#define SLOT    (2 << 20) /* the largest message */
#define KIND_Q  0         /* rg_send_post */
#define KIND_B  1         /* rg_send (ring when small, direct when large) */


/* ------------------------------------------------------------ kernels */

/* The peers' start: listen at addr (st[0] = 1 once bound, or the status)
 * and accept one connection. The socket, or < 0; *ls the listener. */
__device__ int listen_accept(const char *addr, int *st, int *ls)
{
    *ls = rg_bind(addr);
    if (threadIdx.x == 0) st[0] = *ls >= 0 ? 1 : *ls;
    __threadfence_system();
    return *ls < 0 ? *ls : rg_accept(*ls);
}

/* The peer: accept one connection and echo it with queued receives into
 * SLOTS slots and a queued send of each, until the end of the stream.
 * st[0] = 1 once bound; st[1] = bytes echoed or a status. */
__global__ void k_echo(const char *addr, uint8_t *buf, int *st)
{
    int ls, s = listen_accept(addr, st, &ls), tk[SLOTS], r = s < 0 ? s : 0;
    if (ls < 0) return;
    long long total = 0;
    for (int j = 0; j < SLOTS && s >= 0; j++)
        tk[j] = rg_recv_post(s, buf + (size_t)j * SLOT, SLOT);
    for (int j = 0; s >= 0; j = (j + 1) % SLOTS) {
        uint8_t *slot = buf + (size_t)j * SLOT;
        r = rg_recv_wait(s, tk[j]);
        if (r == RG_ERING) /* ring bytes first: one rg_recv takes them */
            r = rg_recv(s, slot, SLOT);
        if (r <= 0)
            break;
        int w = rg_send_wait(s, rg_send_post(s, slot, r));
        if (w != r) { r = w < 0 ? w : -2000; break; }
        total += r;
        tk[j] = rg_recv_post(s, slot, SLOT);
    }
    if (s >= 0) rg_close(s);
    rg_close(ls);
    if (threadIdx.x == 0) st[1] = r < 0 ? r : (int)total;
}

/* The same echo through shared memory: every byte through the rings. */
__global__ void k_echo_ring(const char *addr, int *st)
{
    __shared__ uint8_t sbuf[8192];
    int ls, s = listen_accept(addr, st, &ls), r = s < 0 ? s : 0;
    if (ls < 0) return;
    long long total = 0;
    while (s >= 0 && (r = rg_recv(s, sbuf, sizeof(sbuf))) > 0) {
        for (int k = 0, w; k < r; k += w)
            if ((w = rg_send(s, sbuf + k, r - k)) <= 0) { r = w ? w : -2000; break; }
        if (r < 0) break;
        total += r;
    }
    if (s >= 0) rg_close(s);
    rg_close(ls);
    if (threadIdx.x == 0) st[1] = r < 0 ? r : (int)total;
}

/* Send ops o = 0..nops-1 (lens/kinds[o % np], from src at offs[o % np])
 * and take the echo with queued receives into SLOTS slots, appended to dst
 * (wrapping at dst_cap). At most two messages are out unechoed, so the
 * peer always has a free slot. res[0] = bytes echoed back or a status. */
__global__ void k_client(const char *addr, const uint8_t *src, const int *lens, const int *kinds,
                         const long long *offs, int np, long long nops, long long total,
                         uint8_t *slots, uint8_t *dst, long long dst_cap, int *res)
{
    int s = rg_connect(addr);
    if (s < 0) { if (threadIdx.x == 0) res[0] = s; return; }
    int rt[SLOTS], st[SLOTS], r = 0, first_t = -1, last_t = -1, last_len = 0;
    long long sent = 0, got = 0, o = 0, sq = 0, sdone = 0;
    for (int j = 0; j < SLOTS; j++)
        rt[j] = rg_recv_post(s, slots + (size_t)j * SLOT, SLOT);
    for (int j = 0; got < total && r >= 0;) {
        /* send while at most two messages are unechoed */
        while (o < nops && sent - got + lens[o % np] <= 2LL * SLOT && r >= 0) {
            const uint8_t *from = src + offs[o % np];
            int len = lens[o % np];
            if (kinds[o % np] == KIND_Q) {
                if (sq - sdone == SLOTS) { /* reap the oldest queued send */
                    int w = rg_send_wait(s, st[sdone % SLOTS]);
                    if (w <= 0) r = w ? w : -2001;
                    sdone++;
                }
                int t = rg_send_post(s, from, len);
                if (t < 0) r = t;
                else st[sq++ % SLOTS] = t;
                if (first_t < 0) first_t = t;
                last_t = t;
                last_len = len;
            } else {
                for (int k = 0, w; k < len && r >= 0; k += w)
                    if ((w = rg_send(s, from + k, len - k)) <= 0) r = w ? w : -2002;
            }
            sent += len;
            o++;
        }
        if (r < 0) break;
        uint8_t *slot = slots + (size_t)j * SLOT;
        int n = rg_recv_wait(s, rt[j]);
        if (n == RG_ERING)
            n = rg_recv(s, slot, SLOT);
        if (n <= 0) { r = n ? n : -2003; break; }
        for (int k = threadIdx.x; k < n; k += blockDim.x)
            dst[(got + k) % dst_cap] = slot[k];
        __syncthreads();
        got += n;
        rt[j] = rg_recv_post(s, slot, SLOT);
        j = (j + 1) % SLOTS;
    }
    while (sdone < sq && r >= 0) {
        int w = rg_send_wait(s, st[sdone++ % SLOTS]);
        if (w < 0) r = w;
    }
    if (r >= 0 && sq > (long long)RG_QDEPTH) {
        /* A result is gone once RG_QDEPTH later entries completed; the last one's stays. */
        if (rg_send_wait(s, first_t) != RG_EINVAL) r = -2004;
        else if (rg_send_wait(s, last_t) != last_len) r = -2005;
    }
    rg_close(s);
    if (threadIdx.x == 0) res[0] = r < 0 ? r : (int)(got >> 10); /* KiB */
}

/* Case 3 on a TCP socket of `addr` and a closed socket number. */
__global__ void k_bad(const char *addr, uint8_t *gbuf, int *res)
{
    __shared__ uint8_t sbuf[64];
    int s = rg_connect(addr);
    int a = rg_send_post(s, gbuf, 64);        /* a TCP peer: not supported */
    int b = rg_recv_post(s, gbuf, 64);
    int c = rg_send_wait(s, -5);              /* a bad ticket */
    int d = rg_send_post(-1, gbuf, 64);       /* a bad socket */
    int e = rg_recv_wait(100000, 1);
    int f = rg_recv_post(s, sbuf, 64);        /* shared memory */
    if (threadIdx.x == 0) {
        res[0] = s >= 0 ? 0 : s;
        res[1] = a; res[2] = b; res[3] = c; res[4] = d; res[5] = e; res[6] = f;
    }
    rg_close(s);
}

/* Case 5: an unshareable buffer, then a good one echoed back into dst. */
__global__ void k_unshareable(const char *addr, const uint8_t *pool, const uint8_t *src,
                              uint8_t *dst, int len, int *res)
{
    int s = rg_connect(addr);
    if (s < 0) { if (threadIdx.x == 0) res[0] = s; return; }
    int bad = rg_send_wait(s, rg_send_post(s, pool, len));
    int rt = rg_recv_post(s, dst, len);
    int sent = rg_send_wait(s, rg_send_post(s, src, len));
    int got = rg_recv_wait(s, rt);
    rg_close(s);
    if (threadIdx.x == 0) { res[0] = bad; res[1] = sent; res[2] = got; }
}

/* ------------------------------------------------------------ host */

static remora_gpunet_h start_net(void)
{
    remora_context_h ctx;
    remora_gpunet_h net;
    remora_gpunet_params_t gp = {};
    gp.field_mask = REMORA_GPUNET_FIELD_TIMEOUT_MS;
    gp.timeout_ms = 10000;
    if (remora_context_create(NULL, &ctx) || remora_gpunet_create(ctx, 0, &gp, &net) ||
        rg_install(remora_gpunet_device_handle(net)))
        return NULL;
    return net;
}

/* The peer process: echo one connection, exit 0 if it ended cleanly. */
static int echo_child(const char *port, int ring)
{
    if (start_net() == NULL)
        return 1;
    char addr[64];
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%s", port);
    uint8_t *buf;
    int *st = mapped_ints(2);
    cudaMalloc(&buf, (size_t)SLOTS * SLOT);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (ring)
        k_echo_ring<<<1, 256, 0, s>>>(dev_string(addr), st);
    else
        k_echo<<<1, 256, 0, s>>>(dev_string(addr), buf, st);
    if (cudaGetLastError() != cudaSuccess)
        _exit(2);
    for (int i = 0; i < 20000 && !((volatile int *)st)[0]; i++) usleep(500);
    printf("listening %d\n", st[0]);
    fflush(stdout);
    int ok = wait_stream(s, 120000);
    fprintf(stderr, "  echo peer: %d\n", st[1]);
    _exit(ok && st[1] >= 0 ? 0 : 1);
}

static const char *g_echo_mode = "--echo"; /* or --echo-ring */

static pid_t start_echo(unsigned *port)
{
    int probe = bench_listen_loopback(port), fds[2];
    close(probe);
    char ports[16], line[64] = "";
    snprintf(ports, sizeof(ports), "%u", *port);
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        execl("/proc/self/exe", "test_gpunet_queued", g_echo_mode, ports, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    int ok = fgets(line, sizeof(line), f) != NULL && !strncmp(line, "listening 1", 11);
    fclose(f);
    if (!ok) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); return -1; }
    return pid;
}

/* Run ops (np of them, repeated to nops) against a fresh echo peer; the
 * echo must come back byte-exact when it is not repeated. */
static int echo_ops(cudaStream_t st, const int *hl, const int *hk, int np, long long nops,
                    int kill_after_ms, int *result)
{
    int ok = 1;
    unsigned port;
    long long off = 0, *ho = (long long *)malloc(np * sizeof(long long)), total = 0;
    for (int k = 0; k < np; k++) { ho[k] = off; off += hl[k]; }
    total = off * (nops / np); /* nops is a multiple of np */
    uint8_t *src, *dst, *slots, *hs = (uint8_t *)malloc(off), *hd = (uint8_t *)malloc(off);
    int *dl, *dk;
    long long *doffs, dst_cap = nops == np ? off : SLOT;
    cudaMalloc(&src, off);
    cudaMalloc(&dst, dst_cap);
    cudaMalloc(&slots, (size_t)SLOTS * SLOT);
    cudaMalloc(&dl, np * sizeof(int));
    cudaMalloc(&dk, np * sizeof(int));
    cudaMalloc(&doffs, np * sizeof(long long));
    for (long long i = 0; i < off; i++) hs[i] = (uint8_t)(i * 2654435761u >> 11);
    cudaMemcpy(src, hs, off, cudaMemcpyHostToDevice);
    cudaMemcpy(dl, hl, np * sizeof(int), cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk, np * sizeof(int), cudaMemcpyHostToDevice);
    cudaMemcpy(doffs, ho, np * sizeof(long long), cudaMemcpyHostToDevice);
    cudaMemset(dst, 0, dst_cap);
    pid_t pid = start_echo(&port);
    CHECK(pid > 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
    int *res = mapped_ints(1);
    double t0 = now_ms();
    k_client<<<1, 256, 0, st>>>(dev_string(addr), src, dl, dk, doffs, np, nops, total, slots,
                                dst, dst_cap, res);
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) {
        printf("  launch: %s\n", cudaGetErrorString(le));
        ok = 0;
    }
    if (kill_after_ms) {
        usleep(kill_after_ms * 1000);
        kill(pid, SIGKILL);
        t0 = now_ms();
    }
    CHECK(wait_stream(st, 60000));
    *result = res[0];
    printf("  %lld ops, %lld bytes: client %d (%.1f ms%s)\n", nops, total, res[0], now_ms() - t0,
           kill_after_ms ? " after the kill" : "");
    if (!kill_after_ms) {
        CHECK(res[0] == (int)(total >> 10));
        cudaMemcpy(hd, dst, off, cudaMemcpyDeviceToHost);
        if (nops == np) {
            long long bad = -1;
            for (long long i = 0; i < off && bad < 0; i++)
                if (hd[i] != hs[i]) bad = i;
            if (bad >= 0) printf("  first byte off at %lld\n", bad);
            CHECK(bad < 0);
        }
    }
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    if (!kill_after_ms)
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cudaFree(src); cudaFree(dst); cudaFree(slots); cudaFree(dl); cudaFree(dk); cudaFree(doffs);
    free(hs); free(hd); free(ho);
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
    if (argc == 3 && (!strcmp(argv[1], "--echo") || !strcmp(argv[1], "--echo-ring")))
        return echo_child(argv[2], !strcmp(argv[1], "--echo-ring"));
    if (start_net() == NULL) {
        printf("FAILED setup: GPU socket proxy\n");
        return 1;
    }
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    int r;
    /* 1 */
    {
        int lens[17], kinds[17] = {};
        for (int k = 0; k < 16; k++) lens[k] = 1 << 20;
        lens[16] = 100003;
        report("queued sends and receives, 16 x 1 MiB + 100003 B, byte-exact",
               echo_ops(st, lens, kinds, 17, 17, 0, &r));
    }
    /* 2 */
    {
        const int lens[]  = {100, 1 << 20, 77, 300001, 65536, 1, 1000, 2 << 20, 5, 4096};
        const int kinds[] = {KIND_B, KIND_Q, KIND_B, KIND_B, KIND_Q, KIND_Q, KIND_B, KIND_Q,
                             KIND_B, KIND_Q};
        report("queued sends between ring and direct sends keep their order, byte-exact",
               echo_ops(st, lens, kinds, 10, 10, 0, &r));
    }
    /* 3 */
    {
        int ok = 1, *res = mapped_ints(7);
        unsigned port;
        int lfd = bench_listen_loopback(&port);
        char addr[64];
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
        uint8_t *g;
        cudaMalloc(&g, 64);
        k_bad<<<1, 64, 0, st>>>(dev_string(addr), g, res);
        int cfd = accept(lfd, NULL, NULL);
        CHECK(wait_stream(st, 15000));
        printf("  connect %d, send_post %d, recv_post %d, bad ticket %d, bad socket %d, %d, "
               "shared memory %d\n", res[0], res[1], res[2], res[3], res[4], res[5], res[6]);
        CHECK(res[0] == 0 && res[1] == REMORA_ERR_UNSUPPORTED && res[2] == REMORA_ERR_UNSUPPORTED &&
              res[3] == REMORA_ERR_INVALID_PARAM && res[4] == REMORA_ERR_INVALID_PARAM &&
              res[5] == REMORA_ERR_INVALID_PARAM && res[6] == REMORA_ERR_INVALID_PARAM);
        close(cfd);
        close(lfd);
        cudaFree(g);
        report("queued transfers: unsupported peer and bad arguments -> negative status", ok);
    }
    /* 5 */
    {
        int ok = 1, *res = mapped_ints(3);
        const int len = 65536;
        unsigned port;
        uint8_t *pool = NULL, *src, *dst, *hs = (uint8_t *)malloc(len), *hd = (uint8_t *)malloc(len);
        pid_t pid = start_echo(&port);
        CHECK(pid > 0);
        CHECK(cudaMallocAsync((void **)&pool, len, st) == cudaSuccess);
        cudaStreamSynchronize(st);
        cudaMalloc(&src, len);
        cudaMalloc(&dst, len);
        for (int i = 0; i < len; i++) hs[i] = (uint8_t)(i * 13 + 1);
        cudaMemcpy(src, hs, len, cudaMemcpyHostToDevice);
        char addr[64];
        snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%u", port);
        k_unshareable<<<1, 256, 0, st>>>(dev_string(addr), pool, src, dst, len, res);
        CHECK(wait_stream(st, 30000));
        printf("  pool buffer %d, then sent %d, echoed %d\n", res[0], res[1], res[2]);
        cudaMemcpy(hd, dst, len, cudaMemcpyDeviceToHost);
        CHECK(res[0] == REMORA_ERR_INVALID_PARAM && res[1] == len && res[2] == len &&
              memcmp(hd, hs, len) == 0);
        if (pid > 0) waitpid(pid, NULL, 0);
        cudaFreeAsync(pool, st);
        cudaFree(src);
        cudaFree(dst);
        free(hs);
        free(hd);
        report("a queued send of unshareable memory fails alone; the connection goes on", ok);
    }
    /* 6 */
    {
        /* The client takes no echo before it has sent everything: to post
         * message k it reaps message k - 4, which completes once the peer
         * drained its receive ring, i.e. echoed messages 1 .. k - 5. Those
         * echoes must fit where they wait (the peer's send ring, 256 KiB,
         * the client's receive ring, 192 KiB of it usable, the socket):
         * 6 x 48 KiB here; 8 x 256 KiB deadlocked. */
        int lens[11], kinds[11] = {};
        for (int k = 0; k < 10; k++) lens[k] = 48 << 10;
        lens[10] = 70001;
        g_echo_mode = "--echo-ring";
        report("queued sends into a peer's ring receives (shared memory), byte-exact",
               echo_ops(st, lens, kinds, 11, 11, 0, &r));
        g_echo_mode = "--echo";
    }
    /* 4, last: a killed peer can leave CUDA errors behind (MPS) */
    {
        int ok = 1, lens[1] = {1 << 20}, kinds[1] = {KIND_Q};
        echo_ops(st, lens, kinds, 1, 1LL << 40, 300, &r);
        CHECK(r == REMORA_ERR_DISCONNECTED);
        report("peer killed with transfers queued: the kernel's waits fail in time", ok);
    }
    printf("%d failure(s)\n", g_failed);
    fflush(stdout);
    _exit(g_failed ? 1 : 0);
}
