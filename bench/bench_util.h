/* SPDX-License-Identifier: BSD-3-Clause */
/* Small helpers the reference benchmarks share (header-only). */
#ifndef REMORA_BENCH_UTIL_H
#define REMORA_BENCH_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double bench_now_us(void) { return bench_now_s() * 1e6; }

/* Spin until *w >= v (a word a GPU stream writes, counting up); exit after
 * a second: a stream that never answers. */
static inline void bench_await_u64(volatile uint64_t *w, uint64_t v)
{
    double until = bench_now_s() + 1;

    while (*w < v)
        if (bench_now_s() > until) {
            fprintf(stderr, "the stream did not write %llu within 1 s\n", (unsigned long long)v);
            exit(1);
        }
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

/* A listening TCP socket on a free loopback port (*port), or -1. */
static inline int bench_listen_loopback(unsigned *port)
{
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        return -1;
    a.sin_family      = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 256) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

#endif
