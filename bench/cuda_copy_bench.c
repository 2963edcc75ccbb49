/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA references GPU reads are compared with: a device-to-device copy on
 * one GPU (what cudaMemcpy DeviceToDevice does), and a copy from GPU SRC to
 * GPU DST with peer access enabled (what cudaMemcpyPeer does), through the
 * same driver entry point (cuMemcpy) remora itself uses.
 *   cuda_copy_bench SIZE REPS SRC_GPU DST_GPU
 * Prints one JSON line: the median GB/s (1e9) of REPS copies, and the GB/s of
 * all REPS together (what a benchmark that times a whole run, as `remora
 * bench` does, compares with).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"

#include "mem/cuda.h"


int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 10, from = argc > 3 ? atoi(argv[3]) : 0,
        to = argc > 4 ? atoi(argv[4]) : 0;
    void *src = NULL, *dst = NULL;
    double *gbps = calloc(reps > 0 ? (size_t)reps : 1, sizeof(*gbps));

    if (rm_cuda_init() != REMORA_OK || gbps == NULL || reps < 1 ||
        rm_cuda_mem_alloc(from, size, &src) != REMORA_OK ||
        rm_cuda_mem_alloc(to, size, &dst) != REMORA_OK) {
        fprintf(stderr, "cuda_copy_bench: no CUDA, or cannot allocate\n");
        return 1;
    }
    if (from != to) {
        rm_cuda_enable_peer_access(to, from);
        rm_cuda_enable_peer_access(from, to);
    }
    rm_cuda_copy(dst, src, size); /* warm-up */
    double t0 = bench_now_s();
    for (int i = 0; i < reps; i++) {
        double t = bench_now_s();
        rm_cuda_copy(dst, src, size); /* synchronous: returns when the copy is done */
        gbps[i] = (double)size / (bench_now_s() - t) / 1e9;
    }
    double total = (double)size * reps / (bench_now_s() - t0) / 1e9;
    double median = bench_median(gbps, (size_t)reps);
    printf("{\"op\":\"%s\",\"size\":%zu,\"src\":%d,\"dst\":%d,\"gbps\":%.3f,"
           "\"gbps_total\":%.3f}\n",
           from == to ? "cuda_dtod" : "cuda_peer", size, from, to, median, total);
    rm_cuda_mem_free(from, src);
    rm_cuda_mem_free(to, dst);
    free(gbps);
    return 0;
}
