/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers the GPU socket test programs share (test_gpunet.cu,
 * test_gpunet_queued.cu): case reporting, device strings, mapped result
 * words, a bounded wait for a kernel; the loopback listener is the
 * benchmarks' (bench_listen_loopback). Include once, from the program's one
 * translation unit.
 */
#ifndef REMORA_TESTS_GPU_TEST_UTIL_H
#define REMORA_TESTS_GPU_TEST_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../bench/bench_util.h"

static int g_failed;
#define CHECK(c) do { if (!(c)) { printf("  check failed: %s (line %d)\n", #c, __LINE__); ok = 0; } } while (0)
static void report(const char *name, int ok)
{
    printf("%s %s\n", ok ? "PASSED" : "FAILED", name);
    fflush(stdout);
    g_failed += !ok;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* s copied into device memory, for a kernel's address argument. */
static char *dev_string(const char *s)
{
    char *d;
    cudaMalloc(&d, strlen(s) + 1);
    cudaMemcpy(d, s, strlen(s) + 1, cudaMemcpyHostToDevice);
    return d;
}

/* n zeroed ints a kernel writes and the host reads. */
static int *mapped_ints(int n)
{
    int *p = NULL;
    cudaError_t e = cudaHostAlloc((void **)&p, n * sizeof(int), cudaHostAllocMapped);
    if (e != cudaSuccess) { /* a CUDA error made sticky by an earlier case */
        printf("FAILED mapped memory: %s\n", cudaGetErrorString(e));
        _exit(1);
    }
    memset(p, 0, n * sizeof(int));
    return p;
}

/* 1 once the stream's kernels finished without error, 0 after ms or on one. */
static int wait_stream(cudaStream_t st, int ms)
{
    for (int i = 0; i < ms * 10; i++) {
        if (cudaStreamQuery(st) != cudaErrorNotReady) return cudaStreamSynchronize(st) == cudaSuccess;
        usleep(100);
    }
    return 0;
}

#endif
