/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the stream-ordered operation tests and benchmark (.cu). */
#ifndef REMORA_STREAM_COMMON_H
#define REMORA_STREAM_COMMON_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <remora/remora.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define RK(x) do { remora_status_t s_ = (x); if (s_ != REMORA_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, remora_status_string(s_)); exit(1); } } while (0)

static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

__device__ __forceinline__ uint8_t pat(uint64_t seed, size_t j)
{
    return (uint8_t)(seed * 131u + j * 7u + (j >> 8) * 3u);
}

__global__ void k_fill(uint8_t *p, size_t n, uint64_t seed, const uint64_t *dseed)
{
    uint64_t s = dseed ? *dseed : seed;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        p[j] = pat(s, j);
}

__global__ void k_check(const uint8_t *p, size_t n, uint64_t seed, const uint64_t *dseed,
                        unsigned long long *bad)
{
    uint64_t s = dseed ? *dseed : seed;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        if (p[j] != pat(s, j))
            atomicAdd(bad, 1ull);
}

__global__ void k_bump(uint64_t *v) { ++*v; }

static inline int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b == 0 ? 1 : b > 4096 ? 4096 : b);
}

/* A server (own context) exposing GPU region "buf" of `size` bytes and
 * signal array "sig"; a client (second context) connected to it. */
typedef struct {
    remora_context_h sctx, cctx;
    remora_server_h  server;
    remora_mem_h     mem;
    remora_signals_h sig;
    remora_client_h  client;
    char             addr[80];
} pair_t;

static inline void pair_open(pair_t *p, size_t size, int timeout_ms)
{
    remora_server_params_t sp = {REMORA_SERVER_FIELD_LISTEN_ADDR, "127.0.0.1:0"};
    remora_mem_params_t mp = {};
    remora_region_params_t rp = {};
    remora_client_params_t cp = {};

    RK(remora_context_create(NULL, &p->sctx));
    RK(remora_context_create(NULL, &p->cctx));
    RK(remora_server_create(p->sctx, &sp, &p->server));
    mp.field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE;
    mp.length = size;
    mp.type = REMORA_MEM_CUDA;
    RK(remora_mem_create(p->sctx, &mp, &p->mem));
    rp.field_mask = REMORA_REGION_FIELD_FLAGS;
    rp.flags = REMORA_REGION_WRITABLE;
    RK(remora_server_expose(p->server, "buf", p->mem, &rp));
    RK(remora_signals_create(p->sctx, 16, NULL, &p->sig));
    RK(remora_server_expose_signals(p->server, "sig", p->sig));
    RK(remora_server_address(p->server, p->addr, sizeof(p->addr)));
    cp.field_mask = REMORA_CLIENT_FIELD_TIMEOUT;
    cp.timeout_ms = timeout_ms;
    RK(remora_client_connect(p->cctx, p->addr, &cp, &p->client));
}

static inline void pair_close(pair_t *p)
{
    remora_client_disconnect(p->client);
    remora_context_destroy(p->cctx);
    remora_server_destroy(p->server);
    remora_signals_destroy(p->sig);
    remora_mem_destroy(p->mem);
    remora_context_destroy(p->sctx);
}

#endif
