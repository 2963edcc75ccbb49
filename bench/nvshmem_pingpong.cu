/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nvshmem_pingpong: NVSHMEM's stream-ordered put-with-signal ping-pong
 * between two processes, the reference remora's stream_pingpong is compared
 * with (docs/stream.md). Not part of the build: NVSHMEM ships with Python
 * wheels (nvidia-nvshmem-cu13) on the GPU machines, and scripts/gpu-stream.sh
 * compiles this against the wheel when it finds one.
 *
 * Two processes (fork, before CUDA is touched), rank r on GPU r (both on
 * GPU 0 with one GPU, which NVSHMEM may refuse). Each round, rank 0
 * nvshmemx_putmem_signal_on_stream(SIZE bytes, signal = i) to rank 1 and
 * nvshmemx_signal_wait_until_on_stream(its signal >= i); rank 1 the other
 * way round. Bootstrap: NVSHMEM's unique-ID bootstrap, the ID passed in
 * shared memory.
 *   nvshmem_pingpong [ROUNDS] [SIZE]  prints "nvshmem_pingpong size=S rtt_us=X"
 */
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>
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

struct shared {
    nvshmemx_uniqueid_t id;
    volatile int have_id;
};

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10000, ngpu = 0;
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 0) : 64;
    struct shared *sh = (struct shared *)mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED || rounds < 10 || size == 0)
        return 2;
    memset((void *)sh, 0, sizeof(*sh));
    pid_t pid = fork();
    int rank = pid == 0 ? 1 : 0;
    CK(cudaGetDeviceCount(&ngpu));
    CK(cudaSetDevice(ngpu > 1 ? rank : 0));
    if (rank == 0) {
        nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
        if (nvshmemx_get_uniqueid(&id) != 0) {
            fprintf(stderr, "nvshmemx_get_uniqueid failed\n");
            return 1;
        }
        sh->id = id;
        __sync_synchronize();
        sh->have_id = 1;
    } else {
        while (!sh->have_id)
            usleep(100);
        __sync_synchronize();
    }
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_uniqueid_t id = sh->id;
    nvshmemx_set_attr_uniqueid_args(rank, 2, &id, &attr);
    if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
        fprintf(stderr, "rank %d: nvshmemx_init_attr failed\n", rank);
        return 1;
    }
    int me = nvshmem_my_pe(), peer = 1 - me;
    uint8_t *buf = (uint8_t *)nvshmem_malloc(size), *src;
    uint64_t *sig = (uint64_t *)nvshmem_malloc(sizeof(uint64_t));
    CK(cudaMalloc(&src, size));
    CK(cudaMemset(src, me + 1, size));
    CK(cudaMemset(sig, 0, sizeof(uint64_t)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    nvshmem_barrier_all();
    int warm = rounds / 10;
    double t0 = 0;
    for (int i = 1; i <= rounds; i++) {
        if (i == warm + 1) {
            CK(cudaStreamSynchronize(st));
            t0 = bench_now_s();
        }
        if (me == 1)
            nvshmemx_signal_wait_until_on_stream(sig, NVSHMEM_CMP_GE, (uint64_t)i, st);
        nvshmemx_putmem_signal_on_stream(buf, src, size, sig, (uint64_t)i, NVSHMEM_SIGNAL_SET, peer, st);
        if (me == 0)
            nvshmemx_signal_wait_until_on_stream(sig, NVSHMEM_CMP_GE, (uint64_t)i, st);
    }
    CK(cudaStreamSynchronize(st));
    double rtt = (bench_now_s() - t0) * 1e6 / (rounds - warm);
    /* The last round's bytes are the peer's. */
    uint8_t first = 0;
    CK(cudaMemcpy(&first, buf, 1, cudaMemcpyDeviceToHost));
    if (me == 0)
        printf("nvshmem_pingpong gpus=%d size=%zu rtt_us=%.2f rounds=%d %s\n", ngpu > 1 ? 2 : 1, size,
               rtt, rounds - warm, first == (uint8_t)(peer + 1) ? "PASSED" : "FAILED");
    fflush(stdout);
    nvshmem_barrier_all();
    nvshmem_free(buf);
    nvshmem_free(sig);
    nvshmem_finalize();
    if (rank == 0) {
        int status = 0;
        waitpid(pid, &status, 0);
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 && first == (uint8_t)(peer + 1) ? 0 : 1;
    }
    return 0;
}
