/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stream_pingpong: two processes, each a remora server (a GPU region "buf"
 * and a signal array "sig") and a client of the other. Rank 0's kernel fills
 * a buffer, remora_stream_put_signal sends it to rank 1's "buf" and sets
 * rank 1's signal; rank 1's stream waits for the signal, a kernel verifies
 * the bytes and fills the answer, which goes back the same way. Byte-exact,
 * every round; no host thread touches the data path.
 *
 *   stream_pingpong RANK LISTEN_PORT PEER_PORT [ITERS] [SIZE] [--raw|--raw-local]
 *                   [--local] [--bare] [--gpu N]
 *
 * --gpu N puts this rank on GPU N (default 0): ranks on two GPUs measure
 * the path between GPUs (peer copies over NVLink or PCIe) without the one
 * GPU switching between the two processes' contexts.
 *
 * Both processes run on one host (127.0.0.1); the path is the client's
 * (REMORA_PATH, UCX_TLS): same-host GPU regions take CUDA IPC with the
 * copy and the signal on the stream itself, REMORA_PATH=staging goes
 * through the proxy and TCP.
 * --raw runs the baseline instead: the same ping-pong with only
 * cuMemcpyAsync into the peer's buffer (CUDA IPC) and cuStreamWriteValue64 /
 * cuStreamWaitValue64 on a shared host word, with no remora at all.
 * --raw-local runs that baseline with both ranks in this one process (two
 * streams of one context; RANK and the ports are ignored): the same GPU
 * work without the GPU switching between two processes' contexts, which
 * is what most of a two-process round trip on one GPU is (docs/stream.md).
 * --local runs both remora ranks in this one process, each on a thread of
 * its own with its own contexts, server and client (RANK is ignored; rank 0
 * listens on LISTEN_PORT, rank 1 on PEER_PORT): the same remora path between
 * two streams of one GPU context, so the round trip is the path's and not
 * the GPU switching between two processes.
 * --bare leaves the kernels out of the loop (each round is a stream wait and
 * a put_signal; the bytes are filled once and checked once at the end):
 * the round trip of the operations themselves.
 * RANK 0 prints "rtt_us=..." (mean round trip) and "PASSED" or "FAILED".
 * Exit: 0 passed, 1 failed, 77 no GPU (skipped).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <remora/remora.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define RK(x) do { remora_status_t s_ = (x); if (s_ != REMORA_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, remora_status_string(s_)); exit(1); } } while (0)
#define DK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

__device__ __forceinline__ uint8_t pattern(uint64_t round, size_t j, int rank)
{
    return (uint8_t)(round * 31u + j * 7u + (unsigned)rank * 101u);
}

/* Round numbers come from the stream's own counter (graph-replay safe). */
__global__ void fill(uint8_t *p, size_t n, const uint64_t *round, int rank)
{
    for (size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
        p[j] = pattern(*round, j, rank);
}

__global__ void verify(const volatile uint8_t *p, size_t n, const uint64_t *round, int rank,
                       unsigned long long *errors)
{
    for (size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
        if (p[j] != pattern(*round, j, rank))
            atomicAdd(errors, 1ull);
}

__global__ void bump(uint64_t *round) { ++*round; }

static int run_raw(int rank, int iters, size_t size);
static int run_raw_local(int iters, size_t size);
static int run_rank(int rank, const char *lport, const char *pport, int iters, size_t size,
                    int bare);

static int g_local; /* --local: the ranks are threads of this process */
static int g_dev;   /* --gpu N: this rank's GPU (default 0) */

struct local_rank {
    int         rank, iters, bare, rc;
    size_t      size;
    const char *lport, *pport;
};

static void *local_main(void *arg)
{
    struct local_rank *r = (struct local_rank *)arg;
    CK(cudaSetDevice(g_dev));
    r->rc = run_rank(r->rank, r->lport, r->pport, r->iters, r->size, r->bare);
    return NULL;
}

/* Both ranks in this process, a thread each (--local). */
static int run_local(const char *p0, const char *p1, int iters, size_t size, int bare)
{
    struct local_rank r[2] = {{0, iters, bare, 1, size, p0, p1}, {1, iters, bare, 1, size, p1, p0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, local_main, &r[i]) != 0) {
            fprintf(stderr, "cannot start rank %d's thread\n", i);
            return 1;
        }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    return r[0].rc || r[1].rc;
}

int main(int argc, char **argv)
{
    int ndev = 0, raw = 0, raw_local = 0, local = 0, bare = 0;
    if (argc < 4) {
        fprintf(stderr, "usage: %s RANK LISTEN_PORT PEER_PORT [ITERS] [SIZE] [--raw] [--gpu N]\n", argv[0]);
        return 2;
    }
    int rank = atoi(argv[1]);
    int iters = argc > 4 && argv[4][0] != '-' ? atoi(argv[4]) : 10000;
    size_t size = argc > 5 && argv[5][0] != '-' ? strtoull(argv[5], NULL, 0) : 64;
    for (int i = 4; i < argc; i++) {
        raw |= strcmp(argv[i], "--raw") == 0;
        raw_local |= strcmp(argv[i], "--raw-local") == 0;
        local |= strcmp(argv[i], "--local") == 0;
        bare |= strcmp(argv[i], "--bare") == 0;
        if (strcmp(argv[i], "--gpu") == 0 && i + 1 < argc)
            g_dev = atoi(argv[i + 1]);
    }
    /* Kernels loaded with the module, not at their first launch (see the
     * comment before the loop); measured: with lazy loading the TCP
     * (staging) ping-pong hung in round 1, with eager loading it passed.
     * The launches before the loop keep it correct where a caller forces
     * lazy loading. */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no GPU\n");
        return 77;
    }
    if (g_dev < 0 || g_dev >= ndev) {
        printf("SKIPPED: --gpu %d, %d GPU(s) here\n", g_dev, ndev);
        return 77;
    }
    CK(cudaSetDevice(g_dev));
    if (raw_local)
        return run_raw_local(iters, size);
    if (raw)
        return run_raw(rank, iters, size);
    g_local = local;
    if (local)
        return run_local(argv[2], argv[3], iters, size, bare);
    return run_rank(rank, argv[2], argv[3], iters, size, bare);
}

/* One remora rank: a server of "buf" and "sig", a client of the peer's. */
static int run_rank(int rank, const char *lport, const char *pport, int iters, size_t size,
                    int bare)
{
    char listen[64], peer[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%s", lport);
    snprintf(peer, sizeof(peer), "127.0.0.1:%s", pport);
    remora_context_h sctx, cctx;
    remora_server_h server;
    remora_client_h client = NULL;
    remora_mem_h mem;
    remora_signals_h sig;
    RK(remora_context_create(NULL, &sctx));
    RK(remora_context_create(NULL, &cctx));
    remora_server_params_t sp = {REMORA_SERVER_FIELD_LISTEN_ADDR, listen};
    RK(remora_server_create(sctx, &sp, &server));
    remora_mem_params_t mp = {};
    mp.field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE | REMORA_MEM_FIELD_DEVICE;
    mp.length = size ? size : 1;
    mp.type = REMORA_MEM_CUDA;
    mp.device = g_dev;
    RK(remora_mem_create(sctx, &mp, &mem));
    remora_region_params_t rp = {};
    rp.field_mask = REMORA_REGION_FIELD_FLAGS;
    rp.flags = REMORA_REGION_WRITABLE;
    RK(remora_server_expose(server, "buf", mem, &rp));
    RK(remora_signals_create(sctx, 4, NULL, &sig));
    RK(remora_server_expose_signals(server, "sig", sig));
    for (int t = 0; t < 300; t++) { /* the peer may not listen yet */
        if (remora_client_connect(cctx, peer, NULL, &client) == REMORA_OK)
            break;
        client = NULL;
        usleep(100000);
    }
    if (client == NULL) {
        fprintf(stderr, "cannot connect to %s\n", peer);
        return 1;
    }
    remora_path_t path = REMORA_PATH_AUTO;
    for (int t = 0; t < 100 && remora_client_region_path(client, "buf", &path) != REMORA_OK; t++)
        usleep(100000); /* the peer exposes its regions right after listening */
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    uint8_t *src;
    uint64_t *round;
    unsigned long long *errors, herr = 0;
    CK(cudaMalloc(&src, size ? size : 1));
    CK(cudaMalloc(&round, sizeof(uint64_t)));
    CK(cudaMalloc(&errors, sizeof(*errors)));
    CK(cudaMemset(round, 0, sizeof(uint64_t)));
    CK(cudaMemset(errors, 0, sizeof(*errors)));
    uint8_t *local = (uint8_t *)remora_mem_address(mem);
    int blocks = (int)((size + 255) / 256 > 1024 ? 1024 : (size + 255) / 256 + 1);
    /* Every kernel loaded before a stream waits. With CUDA's lazy loading
     * (the default since 12.2) a kernel's first launch loads it, and that
     * load waits for the device while holding the driver: launched behind
     * a remora_stream_wait whose signal this process's own server must
     * deliver with a CUDA copy (the staging path), it never returns, the
     * server's progress thread blocks in that copy, and the peer declares
     * it dead (docs/stream.md, "Rules for callers"). */
    bump<<<1, 1, 0, st>>>(round);
    fill<<<blocks, 256, 0, st>>>(src, size, round, rank);
    verify<<<blocks, 256, 0, st>>>(local, size, round, 0, errors);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemset(round, 0, sizeof(uint64_t)));
    CK(cudaMemset(errors, 0, sizeof(*errors)));
    if (bare) { /* round 1's bytes, sent every round */
        bump<<<1, 1, 0, st>>>(round);
        fill<<<blocks, 256, 0, st>>>(src, size, round, rank);
    }
    CK(cudaStreamSynchronize(st));

    /* Rank 0 sends, rank 1 answers; both count rounds on the stream. */
    double t0 = 0;
    for (int i = 1; i <= iters + 1; i++) { /* round 1 is the warm-up, not timed */
        if (i == 2) {
            CK(cudaStreamSynchronize(st));
            t0 = now_us();
        }
        if (!bare)
            bump<<<1, 1, 0, st>>>(round);
        if (rank == 1) {
            RK(remora_stream_wait(sig, 0, REMORA_CMP_GEQ, (uint64_t)i, st));
            if (!bare)
                verify<<<blocks, 256, 0, st>>>(local, size, round, 0, errors);
        }
        if (!bare)
            fill<<<blocks, 256, 0, st>>>(src, size, round, rank);
        RK(remora_stream_put_signal(client, "buf", 0, src, size, "sig", 0, REMORA_SIGNAL_SET,
                                    (uint64_t)i, st));
        if (rank == 0) {
            RK(remora_stream_wait(sig, 0, REMORA_CMP_GEQ, (uint64_t)i, st));
            if (!bare)
                verify<<<blocks, 256, 0, st>>>(local, size, round, 1, errors);
        }
    }
    CK(cudaStreamSynchronize(st));
    double t1 = now_us();
    if (bare) { /* the peer's round 1 bytes, checked once */
        RK(remora_stream_wait(sig, 0, REMORA_CMP_GEQ, (uint64_t)iters + 1, st));
        verify<<<blocks, 256, 0, st>>>(local, size, round, 1 - rank, errors);
    }
    RK(remora_stream_flush(client, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(&herr, errors, sizeof(herr), cudaMemcpyDeviceToHost));
    remora_status_t serr = remora_stream_error(client, st);
    int ok = herr == 0 && serr == REMORA_OK;
    if (rank == 0)
        printf("path=%s%s%s size=%zu iters=%d rtt_us=%.2f mismatched_bytes=%llu stream_error=%s %s\n",
               remora_path_string(path), bare ? " bare" : "", g_local ? " local" : "", size, iters,
               (t1 - t0) / iters, herr,
               remora_status_string(serr), ok ? "PASSED" : "FAILED");
    else
        printf("rank1 mismatched_bytes=%llu %s\n", herr, ok ? "PASSED" : "FAILED");
    fflush(stdout);
    /* Let the peer finish with our memory before it goes away. */
    RK(remora_client_signal(client, "sig", 3, REMORA_SIGNAL_ADD, 1));
    remora_signals_wait(sig, 3, REMORA_CMP_GEQ, 1, 30000, NULL);
    remora_stream_release(client, st);
    remora_client_disconnect(client);
    remora_server_destroy(server);
    remora_signals_destroy(sig);
    remora_mem_destroy(mem);
    remora_context_destroy(cctx);
    remora_context_destroy(sctx);
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------ the baseline */

struct raw_shared {
    volatile uint64_t flag[2];            /* flag[r]: round that reached rank r */
    cudaIpcMemHandle_t handle[2];
    volatile int       have[2];
};

static int run_raw(int rank, int iters, size_t size)
{
    const char *name = getenv("REMORA_RAW_SHM") ? getenv("REMORA_RAW_SHM") : "/remora_raw_pingpong";
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror("shm_open");
        return 1;
    }
    struct raw_shared *sh = (struct raw_shared *)mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                                      MAP_SHARED, fd, 0);
    CK(cudaHostRegister((void *)sh, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable));
    uint64_t *dflag;
    CK(cudaHostGetDevicePointer((void **)&dflag, (void *)sh, 0));
    uint8_t *buf, *src, *peer;
    uint64_t *round;
    unsigned long long *errors, herr = 0;
    CK(cudaMalloc(&buf, size ? size : 1));
    CK(cudaMalloc(&src, size ? size : 1));
    CK(cudaMalloc(&round, sizeof(uint64_t)));
    CK(cudaMalloc(&errors, sizeof(*errors)));
    CK(cudaMemset(round, 0, sizeof(uint64_t)));
    CK(cudaMemset(errors, 0, sizeof(*errors)));
    CK(cudaIpcGetMemHandle(&sh->handle[rank], buf));
    __sync_synchronize();
    sh->have[rank] = 1;
    for (int t = 0; !sh->have[1 - rank]; t++) {
        if (t > 300000) {
            fprintf(stderr, "raw: no peer\n");
            return 1;
        }
        usleep(100);
    }
    __sync_synchronize();
    CK(cudaIpcOpenMemHandle((void **)&peer, sh->handle[1 - rank], cudaIpcMemLazyEnablePeerAccess));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int blocks = (int)((size + 255) / 256 > 1024 ? 1024 : (size + 255) / 256 + 1);
    double t0 = 0;
    for (int i = 1; i <= iters + 1; i++) {
        if (i == 2) {
            CK(cudaStreamSynchronize(st));
            t0 = now_us();
        }
        bump<<<1, 1, 0, st>>>(round);
        if (rank == 1) {
            DK(cuStreamWaitValue64(st, (CUdeviceptr)(dflag + 1), (uint64_t)i, CU_STREAM_WAIT_VALUE_GEQ));
            verify<<<blocks, 256, 0, st>>>(buf, size, round, 0, errors);
        }
        fill<<<blocks, 256, 0, st>>>(src, size, round, rank);
        CK(cudaMemcpyAsync(peer, src, size, cudaMemcpyDeviceToDevice, st));
        DK(cuStreamWriteValue64(st, (CUdeviceptr)(dflag + (1 - rank)), (uint64_t)i, 0));
        if (rank == 0) {
            DK(cuStreamWaitValue64(st, (CUdeviceptr)(dflag + 0), (uint64_t)i, CU_STREAM_WAIT_VALUE_GEQ));
            verify<<<blocks, 256, 0, st>>>(buf, size, round, 1, errors);
        }
    }
    CK(cudaStreamSynchronize(st));
    double t1 = now_us();
    CK(cudaMemcpy(&herr, errors, sizeof(herr), cudaMemcpyDeviceToHost));
    if (rank == 0)
        printf("path=raw size=%zu iters=%d rtt_us=%.2f mismatched_bytes=%llu %s\n", size, iters,
               (t1 - t0) / iters, herr, herr ? "FAILED" : "PASSED");
    fflush(stdout);
    /* Both done before either unmaps the other's buffer. */
    sh->have[rank] = 2;
    for (int t = 0; sh->have[1 - rank] != 2 && t < 300000; t++)
        usleep(100);
    CK(cudaIpcCloseMemHandle(peer));
    if (rank == 0)
        shm_unlink(name);
    return herr ? 1 : 0;
}

/* The baseline in one process: rank r's work on stream st[r], flags in one
 * mapped host page, copies within the device. Every round is queued behind
 * a gate first and the clock runs from opening it, so the figure is the
 * GPU's round trip, not the host's launch rate (at most 64 rounds: all
 * must fit in the streams' queues). */
static int run_raw_local(int iters, size_t size)
{
    if (iters > 64)
        iters = 64;
    volatile uint64_t *flag;
    uint64_t *dflag;
    CK(cudaHostAlloc((void **)&flag, 4096, cudaHostAllocMapped));
    flag[0] = flag[1] = flag[2] = 0;
    CK(cudaHostGetDevicePointer((void **)&dflag, (void *)flag, 0));
    uint8_t *buf[2], *src[2];
    uint64_t *round[2];
    unsigned long long *errors, herr = 0;
    cudaStream_t st[2];
    for (int r = 0; r < 2; r++) {
        CK(cudaMalloc(&buf[r], size ? size : 1));
        CK(cudaMalloc(&src[r], size ? size : 1));
        CK(cudaMalloc(&round[r], sizeof(uint64_t)));
        CK(cudaMemset(round[r], 0, sizeof(uint64_t)));
        CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    }
    CK(cudaMalloc(&errors, sizeof(*errors)));
    CK(cudaMemset(errors, 0, sizeof(*errors)));
    int blocks = (int)((size + 255) / 256 > 1024 ? 1024 : (size + 255) / 256 + 1);
    for (int r = 0; r < 2; r++) { /* every kernel loaded before anything waits */
        bump<<<1, 1, 0, st[r]>>>(round[r]);
        fill<<<blocks, 256, 0, st[r]>>>(src[r], size, round[r], r);
        verify<<<blocks, 256, 0, st[r]>>>(buf[r], size, round[r], 0, errors);
    }
    CK(cudaDeviceSynchronize());
    for (int r = 0; r < 2; r++)
        CK(cudaMemset(round[r], 0, sizeof(uint64_t)));
    CK(cudaMemset(errors, 0, sizeof(*errors)));
    CK(cudaDeviceSynchronize());
    for (int r = 0; r < 2; r++)
        DK(cuStreamWaitValue64(st[r], (CUdeviceptr)(dflag + 2), 1, CU_STREAM_WAIT_VALUE_GEQ));
    for (int i = 1; i <= iters; i++) {
        for (int rank = 0; rank < 2; rank++) {
            cudaStream_t s = st[rank];
            bump<<<1, 1, 0, s>>>(round[rank]);
            if (rank == 1) {
                DK(cuStreamWaitValue64(s, (CUdeviceptr)(dflag + 1), (uint64_t)i, CU_STREAM_WAIT_VALUE_GEQ));
                verify<<<blocks, 256, 0, s>>>(buf[1], size, round[1], 0, errors);
            }
            fill<<<blocks, 256, 0, s>>>(src[rank], size, round[rank], rank);
            CK(cudaMemcpyAsync(buf[1 - rank], src[rank], size, cudaMemcpyDeviceToDevice, s));
            DK(cuStreamWriteValue64(s, (CUdeviceptr)(dflag + (1 - rank)), (uint64_t)i, 0));
            if (rank == 0) {
                DK(cuStreamWaitValue64(s, (CUdeviceptr)(dflag + 0), (uint64_t)i, CU_STREAM_WAIT_VALUE_GEQ));
                verify<<<blocks, 256, 0, s>>>(buf[0], size, round[0], 1, errors);
            }
        }
    }
    double t0 = now_us();
    __atomic_store_n((uint64_t *)&flag[2], 1, __ATOMIC_RELEASE); /* the gate opens */
    CK(cudaDeviceSynchronize());
    double t1 = now_us();
    CK(cudaMemcpy(&herr, errors, sizeof(herr), cudaMemcpyDeviceToHost));
    printf("path=raw-local size=%zu iters=%d rtt_us=%.2f mismatched_bytes=%llu %s\n", size, iters,
           (t1 - t0) / iters, herr, herr ? "FAILED" : "PASSED");
    return herr ? 1 : 0;
}
