/*
 * The CUDA references GPU reads are compared with: a device-to-device copy on
 * one GPU (what cudaMemcpy DeviceToDevice does), and a copy from GPU SRC to
 * GPU DST with peer access enabled (what cudaMemcpyPeer does), through the
 * same driver entry point (cuMemcpy) remora itself uses.
 *   cuda_copy_bench SIZE REPS SRC_GPU DST_GPU
 * Prints one JSON line: median GB/s (1e9) of REPS copies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mem/cuda.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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
    for (int i = 0; i < reps; i++) {
        double t = now_s();
        rm_cuda_copy(dst, src, size); /* synchronous: returns when the copy is done */
        gbps[i] = (double)size / (now_s() - t) / 1e9;
    }
    qsort(gbps, (size_t)reps, sizeof(*gbps), cmp_double);
    printf("{\"op\":\"%s\",\"size\":%zu,\"src\":%d,\"dst\":%d,\"gbps\":%.3f}\n",
           from == to ? "cuda_dtod" : "cuda_peer", size, from, to, gbps[reps / 2]);
    rm_cuda_mem_free(from, src);
    rm_cuda_mem_free(to, dst);
    free(gbps);
    return 0;
}
