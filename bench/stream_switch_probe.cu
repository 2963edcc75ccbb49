/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stream_switch_probe: what a round trip between two processes' CUDA
 * streams costs, with nothing of remora, as a function of what each round
 * asks of the GPU (docs/stream.md, "Round trips between two processes").
 *
 * Why: two-process ping-pongs on one GPU sit at ~290 us a round trip while
 * the same two streams in one process take ~23 us. The modes separate
 * stream memory operations (executed by the GPU's front end) from work for
 * an engine (a kernel, a copy), which needs the GPU to switch to the
 * process's context.
 *
 * Two processes (fork, before CUDA is touched): rank r on GPU r when there
 * are two, both on GPU 0 otherwise. Each round rank 1 waits for round i,
 * then answers; rank 0 sends round i, then waits for the answer. Modes:
 *   memops      cuStreamWaitValue64 / cuStreamWriteValue64 on shared host words
 *   memops_gpu  the same, the words in the waiting rank's GPU memory (CUDA IPC)
 *   kernel      memops + one empty kernel after each wait
 *   copy        memops + a 64 B cudaMemcpyAsync into the peer's buffer (CUDA IPC)
 *   copy_ce     the same copy by cuMemcpyBatchAsync, PREFER_OVERLAP_WITH_COMPUTE
 *   spin        one 1-thread kernel a round spins on its host word, stores the peer's
 *   stream_switch_probe [ROUNDS]   prints "switch_probe gpus=N mode=M rtt_us=X"
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CKR(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)

enum { M_MEMOPS, M_MEMOPS_GPU, M_KERNEL, M_COPY, M_COPY_CE, M_SPIN, M_N };
static const char *mode_name[M_N] = {"memops", "memops_gpu", "kernel", "copy", "copy_ce", "spin"};

struct shared {
    volatile uint64_t word[2];       /* word[r]: the round that reached rank r */
    cudaIpcMemHandle_t handle[2];    /* each rank's GPU buffer: 8 words, then 64 B */
    volatile int have[2], at[2][M_N + 1];
};

static void meet(struct shared *sh, int rank, int k)
{
    sh->at[rank][k] = 1;
    __sync_synchronize();
    while (!sh->at[1 - rank][k])
        usleep(10);
}

__global__ void empty_kernel(int *unused)
{
    if (unused)
        *unused = 0;
}

/* first: store the peer's word, then wait for ours; else the other way. */
__global__ void spin_kernel(volatile uint64_t *mine, volatile uint64_t *peer, uint64_t v, int first)
{
    if (first) {
        *peer = v;
        __threadfence_system();
    }
    while (*mine < v) {}
    if (!first) {
        __threadfence_system();
        *peer = v;
    }
}

/* One round of rank `rank` in mode m: wait/answer or send/wait. */
static void round_trip(int m, int rank, uint64_t v, cudaStream_t st, uint64_t *hw, uint8_t *mine,
                       uint8_t *peer, uint8_t *src, const CUmemcpyAttributes *ce)
{
    CUstream s = (CUstream)st;
    CUdeviceptr wait_on = m == M_MEMOPS_GPU ? (CUdeviceptr)mine : (CUdeviceptr)(hw + rank);
    CUdeviceptr answer  = m == M_MEMOPS_GPU ? (CUdeviceptr)peer : (CUdeviceptr)(hw + 1 - rank);

    if (m == M_SPIN) {
        spin_kernel<<<1, 1, 0, st>>>((volatile uint64_t *)(hw + rank),
                                     (volatile uint64_t *)(hw + 1 - rank), v, rank == 0);
        return;
    }
    if (rank == 1) {
        CKR(cuStreamWaitValue64(s, wait_on, v, CU_STREAM_WAIT_VALUE_GEQ));
        if (m == M_KERNEL)
            empty_kernel<<<1, 1, 0, st>>>(NULL);
    }
    if (m == M_COPY)
        CK(cudaMemcpyAsync(peer + 64, src, 64, cudaMemcpyDeviceToDevice, st));
    if (m == M_COPY_CE) {
        CUdeviceptr d = (CUdeviceptr)(peer + 64), sp = (CUdeviceptr)src;
        size_t n = 64, idx = 0;
        CKR(cuMemcpyBatchAsync(&d, &sp, &n, 1, (CUmemcpyAttributes *)ce, &idx, 1, s));
    }
    CKR(cuStreamWriteValue64(s, answer, v, 0));
    if (rank == 0) {
        CKR(cuStreamWaitValue64(s, wait_on, v, CU_STREAM_WAIT_VALUE_GEQ));
        if (m == M_KERNEL)
            empty_kernel<<<1, 1, 0, st>>>(NULL);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2000, ngpu = 0;
    struct shared *sh = (struct shared *)mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || rounds < 10)
        return 2;
    memset((void *)sh, 0, 4096);
    pid_t pid = fork();
    int rank = pid == 0 ? 1 : 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        if (rank == 0)
            printf("SKIPPED: no GPU\n");
        return rank == 0 ? (waitpid(pid, NULL, 0), 77) : 77;
    }
    CK(cudaSetDevice(ngpu > 1 ? rank : 0));
    CK(cudaHostRegister((void *)sh, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable));
    uint64_t *hw;
    CK(cudaHostGetDevicePointer((void **)&hw, (void *)sh, 0));
    uint8_t *mine, *peer, *src;
    CK(cudaMalloc(&mine, 128));
    CK(cudaMalloc(&src, 64));
    CK(cudaMemset(mine, 0, 128));
    CK(cudaMemset(src, rank + 1, 64));
    CK(cudaIpcGetMemHandle(&sh->handle[rank], mine));
    __sync_synchronize();
    sh->have[rank] = 1;
    while (!sh->have[1 - rank])
        usleep(100);
    CK(cudaIpcOpenMemHandle((void **)&peer, sh->handle[1 - rank], cudaIpcMemLazyEnablePeerAccess));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CUmemcpyAttributes ce;
    memset(&ce, 0, sizeof(ce));
    ce.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    ce.flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
    ce.srcLocHint.type = ce.dstLocHint.type = CU_MEM_LOCATION_TYPE_DEVICE;

    for (int m = 0; m < M_N; m++) {
        /* Spinning kernels of two processes on one GPU take a time slice each. */
        int n = m == M_SPIN && ngpu == 1 ? 50 : rounds, warm = n / 10;
        uint64_t base = (uint64_t)(m + 1) << 32;
        double t0 = 0;
        meet(sh, rank, m);
        for (int i = 1; i <= n; i++) {
            if (i == warm + 1) {
                CK(cudaStreamSynchronize(st));
                t0 = bench_now_s();
            }
            round_trip(m, rank, base + (uint64_t)i, st, hw, mine, peer, src, &ce);
        }
        CK(cudaStreamSynchronize(st));
        if (rank == 0)
            printf("switch_probe gpus=%d mode=%s rtt_us=%.2f rounds=%d\n", ngpu > 1 ? 2 : 1,
                   mode_name[m], (bench_now_s() - t0) * 1e6 / (n - warm), n - warm);
        fflush(stdout);
    }
    meet(sh, rank, M_N);
    CK(cudaIpcCloseMemHandle(peer));
    if (rank == 0) {
        int status = 0;
        waitpid(pid, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    return 0;
}
