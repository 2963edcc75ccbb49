/* SPDX-License-Identifier: BSD-3-Clause */
/* Small helpers the reference benchmarks share (header-only). */
#ifndef REMORA_BENCH_UTIL_H
#define REMORA_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0, n) (sorts v). */
static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), bench_cmp_double);
    return v[n / 2];
}

#endif
