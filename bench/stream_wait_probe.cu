/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * stream_wait_probe: how late does a CUDA stream notice a word written by
 * the CPU, as a function of how long it has been waiting? And does a memop
 * queued on another stream of the same context ("a kick") make it look
 * again sooner?
 *
 * Why: two-process put_signal ping-pongs sit at ~300 us a round trip on one
 * GPU and on two (docs/stream.md, "Round trips between two processes"),
 * while the same with both ranks in one process takes ~23 us. If a wait
 * that has been blocked for long is only re-polled at a coarse interval,
 * the wake-up latency here grows with the delay; if a kick helps, remora's
 * server can kick after writing a signal word.
 *
 * One process, no remora: stream S loops { cuStreamWaitValue64(flag >= i);
 * cuStreamWriteValue64(ack = i) }. The CPU, for each i, busy-waits `delay`
 * microseconds after the previous ack (S is blocked meanwhile), writes
 * flag = i (optionally kicks), and times until ack == i.
 *   stream_wait_probe [ROUNDS]     prints one line per delay and mode
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#define CKR(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 2000, ndev = 0;
    if (rounds < 10) rounds = 10;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no GPU\n");
        return 77;
    }
    cudaSetDevice(0);
    cudaFree(0);
    volatile uint64_t *words;
    uint64_t *dwords;
    if (cudaHostAlloc((void **)&words, 4096, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&dwords, (void *)words, 0) != cudaSuccess) {
        fprintf(stderr, "cannot map host memory\n");
        return 1;
    }
    cudaStream_t s, k;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking);
    static const int delays[] = {0, 5, 20, 50, 100, 200, 500};
    double *lat = (double *)malloc(sizeof(double) * (size_t)rounds);
    for (int kick = 0; kick < 2; kick++) {
        for (size_t d = 0; d < sizeof(delays) / sizeof(delays[0]); d++) {
            memset((void *)words, 0, 4096);
            /* flag at words[0], ack at words[8] (another cache line), kick word at words[16] */
            for (int i = 1; i <= rounds; i++) {
                CKR(cuStreamWaitValue64((CUstream)s, (CUdeviceptr)dwords, (cuuint64_t)i,
                                        CU_STREAM_WAIT_VALUE_GEQ));
                CKR(cuStreamWriteValue64((CUstream)s, (CUdeviceptr)(dwords + 8), (cuuint64_t)i, 0));
                if (i % 256 == 0 || i == rounds) { /* the CPU runs the queued rounds meanwhile */
                    for (int j = i - (i % 256 ? i % 256 : 256) + 1; j <= i; j++) {
                        bench_await_u64(&words[8], (uint64_t)(j - 1));
                        double t0 = bench_now_us();
                        while (bench_now_us() - t0 < delays[d]) {}
                        double t1 = bench_now_us();
                        words[0] = (uint64_t)j;
                        if (kick)
                            CKR(cuStreamWriteValue64((CUstream)k, (CUdeviceptr)(dwords + 16),
                                                     (cuuint64_t)j, 0));
                        bench_await_u64(&words[8], (uint64_t)j);
                        lat[j - 1] = bench_now_us() - t1;
                    }
                }
            }
            cudaStreamSynchronize(s);
            cudaStreamSynchronize(k);
            qsort(lat, (size_t)rounds, sizeof(double), bench_cmp_double);
            printf("wait_probe mode=%s blocked_us=%d wake_us_p50=%.2f p90=%.2f p99=%.2f\n",
                   kick ? "kick" : "plain", delays[d], lat[rounds / 2], lat[rounds * 9 / 10],
                   lat[rounds * 99 / 100]);
        }
    }
    free(lat);
    return 0;
}
