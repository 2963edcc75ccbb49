/* SPDX-License-Identifier: BSD-3-Clause */
/* memcpy bandwidth of SIZE bytes (default 256 MiB), median of REPS copies:
 * the reference a same-host remora read is compared with. Prints GB/s (1e9). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"


int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
    int reps    = argc > 2 ? atoi(argv[2]) : 10;
    char *src = malloc(size), *dst = malloc(size);
    double *gbps = calloc((size_t)reps, sizeof(*gbps));

    if (src == NULL || dst == NULL || gbps == NULL || reps < 1) {
        fprintf(stderr, "memcpy_bench: cannot allocate\n");
        return 1;
    }
    for (size_t i = 0; i < size; i++) /* touch every page, non-zero data */
        src[i] = (char)(i * 131u);
    memset(dst, 1, size);
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_s();
        memcpy(dst, src, size);
        gbps[r] = (double)size / (bench_now_s() - t0) / 1e9;
        src[r] ^= dst[size - 1 - (size_t)r]; /* keep the copy observable */
    }
    double median = bench_median(gbps, (size_t)reps);
    printf("{\"op\":\"memcpy\",\"size\":%zu,\"reps\":%d,\"gbps\":%.3f}\n", size, reps, median);
    free(src);
    free(dst);
    free(gbps);
    return 0;
}
