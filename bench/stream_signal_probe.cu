/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stream_signal_probe: what a server's WRITE_SIGNAL costs between a message
 * arriving and a waiting stream going on, when the region is GPU memory
 * reached by staging (docs/stream.md, "What bounds queued signals and a TCP
 * hop"), and whether the copy's stream writing the signal word itself would
 * be quicker than the CPU writing it once it saw the copy end.
 *
 * One process, no remora. Stream S loops { cuStreamWaitValue64(flag >= i);
 * cuStreamWriteValue64(ack = i) }. For each i, once S has waited 20 us, the
 * CPU plays the server: 64 B into a pinned buffer, cuMemcpyHtoDAsync into
 * GPU memory on copy stream C, then
 *   cpu_signal       C writes a completion word; the CPU polls it, then
 *                    writes flag = i (what the server does)
 *   gpu_signal       C writes flag = i itself after the copy, then the word
 *   cpu_signal_kick  as cpu_signal, plus a memop on a third stream
 * and times until ack == i. Two passes of each.
 *   stream_signal_probe [ROUNDS]   prints "stream_signal mode=M p50= p90= p99= us"
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define CKR(x)                                                                     \
    do {                                                                           \
        CUresult r_ = (x);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)r_);    \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2000, ndev = 0;
    if (rounds < 10)
        rounds = 10;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no GPU\n");
        return 77;
    }
    cudaSetDevice(0);
    cudaFree(0);
    volatile uint64_t *words; /* flag [0], ack [8], completion [16], kick [24]: own lines */
    uint64_t *dwords;
    uint8_t *stage, *dst;
    if (cudaHostAlloc((void **)&words, 4096, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&dwords, (void *)words, 0) != cudaSuccess ||
        cudaHostAlloc((void **)&stage, 4096, cudaHostAllocDefault) != cudaSuccess ||
        cudaMalloc(&dst, 4096) != cudaSuccess) {
        fprintf(stderr, "cannot allocate\n");
        return 1;
    }
    cudaStream_t s, c, k;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking);
    double *lat = (double *)malloc(sizeof(double) * (size_t)rounds);
    static const char *modes[] = {"cpu_signal", "gpu_signal", "cpu_signal_kick"};
    for (int pass = 0; pass < 2; pass++) {
        for (int m = 0; m < 3; m++) {
            memset((void *)words, 0, 4096);
            for (int i = 1; i <= rounds; i++) {
                CKR(cuStreamWaitValue64((CUstream)s, (CUdeviceptr)dwords, (cuuint64_t)i,
                                        CU_STREAM_WAIT_VALUE_GEQ));
                CKR(cuStreamWriteValue64((CUstream)s, (CUdeviceptr)(dwords + 8), (cuuint64_t)i, 0));
                bench_await_u64(&words[8], (uint64_t)(i - 1));
                double t0 = bench_now_us();
                while (bench_now_us() - t0 < 20) {
                }
                double t1 = bench_now_us(); /* the message is here */
                memset(stage, i & 0xff, 64);
                CKR(cuMemcpyHtoDAsync((CUdeviceptr)dst, stage, 64, (CUstream)c));
                if (m == 1)
                    CKR(cuStreamWriteValue64((CUstream)c, (CUdeviceptr)dwords, (cuuint64_t)i, 0));
                CKR(cuStreamWriteValue64((CUstream)c, (CUdeviceptr)(dwords + 16), (cuuint64_t)i, 0));
                if (m != 1) {
                    bench_await_u64(&words[16], (uint64_t)i);
                    words[0] = (uint64_t)i;
                    if (m == 2)
                        CKR(cuStreamWriteValue64((CUstream)k, (CUdeviceptr)(dwords + 24),
                                                 (cuuint64_t)i, 0));
                }
                bench_await_u64(&words[8], (uint64_t)i);
                lat[i - 1] = bench_now_us() - t1;
            }
            cudaDeviceSynchronize();
            qsort(lat, (size_t)rounds, sizeof(double), bench_cmp_double);
            printf("stream_signal mode=%s p50=%.2f p90=%.2f p99=%.2f us\n", modes[m],
                   lat[rounds / 2], lat[rounds * 9 / 10], lat[rounds * 99 / 100]);
        }
    }
    free(lat);
    return 0;
}
