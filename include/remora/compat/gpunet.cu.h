/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPUnet's API on remora GPU sockets (docs/gpunet.md "GPUnet programs").
 *
 *   #include <remora/compat/gpunet.cu.h>      (instead of <gpunet.cu.h>)
 *
 * Device side: GPUnet's names, block-cooperative like GPUnet's (every thread
 * of the block calls with the same arguments) unless named single_thread_*.
 * Addresses are struct sockaddr_in, so peers are plain TCP (any CPU program,
 * nc, Python, or another GPU program that bound with single_thread_gbind_in).
 * Host side: GPUNETGlobals(device) starts remora's proxy for that GPU and
 * installs its handle for the kernels of this translation unit; hostloop()
 * waits for a stream's kernels with a timeout (the proxy runs on its own
 * thread, so single_hostloop() only yields).
 *
 * Differences from GPUnet: gpoll's timeout is GPU clock cycles converted at
 * 1 cycle = 1 ns; calls without a timeout get the proxy's default budget
 * (10 s) and then return a negative status instead of waiting forever.
 * Link with -lremora.
 */
#ifndef REMORA_COMPAT_GPUNET_CU_H
#define REMORA_COMPAT_GPUNET_CU_H

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime.h>

#include <remora/device/socket.cuh>
#include <remora/remora.h>

typedef unsigned char uchar;

/* GPUnet's poll bits (its values are those of poll.h). */
#define POLLIN_GPUNET  0x001
#define POLLOUT_GPUNET 0x004
#define POLLERR_GPUNET 0x008

#ifndef BEGIN_SINGLE_THREAD_PART
#define BEGIN_SINGLE_THREAD_PART                                                              \
    __syncthreads();                                                                          \
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
#define END_SINGLE_THREAD_PART __syncthreads()
#endif

struct gpollfd {
    int      fd;
    short    events;
    short    revents;
    unsigned rbytes;
    unsigned wbytes;
};

namespace rg_gpunet {

/* "tcp://A.B.C.D:PORT" from a sockaddr_in (network byte order fields). */
__device__ inline void format_in(const struct sockaddr_in *a, char *out)
{
    const unsigned char *ip = (const unsigned char *)&a->sin_addr.s_addr;
    const unsigned char *pp = (const unsigned char *)&a->sin_port;
    unsigned port = ((unsigned)pp[0] << 8) | pp[1];
    const char *pre = "tcp://";
    int n = 0;
    while (*pre)
        out[n++] = *pre++;
    for (int k = 0; k < 4; k++) {
        unsigned v = ip[k];
        if (v >= 100)
            out[n++] = (char)('0' + v / 100);
        if (v >= 10)
            out[n++] = (char)('0' + (v / 10) % 10);
        out[n++] = (char)('0' + v % 10);
        out[n++] = k < 3 ? '.' : ':';
    }
    char digits[6];
    int d = 0;
    do {
        digits[d++] = (char)('0' + port % 10);
        port /= 10;
    } while (port);
    while (d)
        out[n++] = digits[--d];
    out[n] = '\0';
}

} /* namespace rg_gpunet */

__device__ inline int gconnect_in(const struct sockaddr_in *addr)
{
    __shared__ char a[40];
    if (addr == NULL)
        return RG_EINVAL;
    BEGIN_SINGLE_THREAD_PART {
        rg_gpunet::format_in(addr, a);
    } END_SINGLE_THREAD_PART;
    return rg_connect(a);
}

__device__ inline int single_thread_gbind_in(const struct sockaddr_in *addr)
{
    char a[40];
    if (addr == NULL)
        return RG_EINVAL;
    rg_gpunet::format_in(addr, a);
    return rg_bind_thread(a);
}

__device__ inline int gaccept(int soc) { return rg_accept(soc); }
__device__ inline int gaccept_nb(int soc) { return rg_accept_nb(soc); }
__device__ inline int gsend(int sock, uchar *to_send, int size) { return rg_send(sock, to_send, size); }
__device__ inline int grecv(int sock, uchar *to_recv, int size) { return rg_recv(sock, to_recv, size); }
__device__ inline int grecv_nb(int sock, void *to_recv, int size) { return rg_recv_nb(sock, to_recv, size); }
__device__ inline int single_thread_gclose(int soc) { return rg_close_thread(soc); }
__device__ inline int single_thread_gshutdown(int soc, int how = SHUT_RDWR)
{
    (void)how; /* remora ends the sending direction; reading stays possible */
    return rg_shutdown_thread(soc);
}

/* Block-cooperative poll; nclock_timeout in cycles, taken as ns. */
__device__ inline int gpoll(struct gpollfd *fds, size_t nfds, int nclock_timeout)
{
    __shared__ struct rg_pollfd p[64];
    __shared__ int r;
    if (fds == NULL || nfds > 64)
        return RG_EINVAL;
    BEGIN_SINGLE_THREAD_PART {
        for (size_t i = 0; i < nfds; i++) {
            p[i].sock    = fds[i].fd;
            p[i].events  = (short)(((fds[i].events & POLLIN_GPUNET) ? RG_POLLIN : 0) |
                                   ((fds[i].events & POLLOUT_GPUNET) ? RG_POLLOUT : 0));
            p[i].revents = 0;
        }
        r = rg_poll_thread(p, (int)nfds, nclock_timeout > 0 ? (uint64_t)nclock_timeout : 1);
        for (size_t i = 0; i < nfds; i++) {
            rg_sock_shm_t *sh = rg_default_net && fds[i].fd >= 0 &&
                                        (unsigned)fds[i].fd < rg_default_net->max_socks
                                    ? (rg_sock_shm_t *)(uintptr_t)rg_default_net->socks + fds[i].fd
                                    : NULL;
            fds[i].revents = (short)(((p[i].revents & RG_POLLIN) ? POLLIN_GPUNET : 0) |
                                     ((p[i].revents & RG_POLLOUT) ? POLLOUT_GPUNET : 0) |
                                     ((p[i].revents & RG_POLLERR) ? POLLERR_GPUNET : 0));
            fds[i].rbytes = sh ? (unsigned)(sh->rx_head - sh->rx_tail) : 0;
            fds[i].wbytes = sh ? (unsigned)(rg_default_net->ring_size -
                                            (sh->tx_head - sh->tx_tail)) : 0;
        }
    } END_SINGLE_THREAD_PART;
    return r;
}

/* ---------------------------------------------------------------- host */

class GPUNETGlobals {
public:
    /* Start remora's proxy for GPU `gpudev` and install it for this
     * translation unit's kernels. Exits with a message on failure, as
     * GPUnet's constructor did. */
    explicit GPUNETGlobals(int gpudev) : ctx_(NULL), net_(NULL)
    {
        remora_status_t st;
        cudaSetDevice(gpudev);
        cudaFree(0); /* the device's primary context, shared with remora */
        if ((st = remora_context_create(NULL, &ctx_)) != REMORA_OK ||
            (st = remora_gpunet_create(ctx_, gpudev, NULL, &net_)) != REMORA_OK) {
            fprintf(stderr, "GPUNETGlobals: %s\n", remora_status_string(st));
            exit(1);
        }
        if (rg_install(remora_gpunet_device_handle(net_)) != cudaSuccess) {
            fprintf(stderr, "GPUNETGlobals: cannot install the device handle\n");
            exit(1);
        }
    }
    ~GPUNETGlobals()
    {
        remora_gpunet_destroy(net_);
        remora_context_destroy(ctx_);
    }
    /* GPUnet's host loop step: the proxy runs by itself; this only yields. */
    void single_hostloop(cudaStream_t) { sched_yield(); }
    /* Wait until the kernels of `stream` are done (0), or timeout_ms passed
     * (1; 0 = no limit). */
    int hostloop(cudaStream_t stream, int timeout_ms)
    {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (cudaStreamQuery(stream) == cudaErrorNotReady) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
            if (timeout_ms > 0 && ms > timeout_ms)
                return 1;
            struct timespec nap = {0, 200000};
            nanosleep(&nap, NULL);
        }
        return 0;
    }
    remora_gpunet_h net() const { return net_; }
    remora_context_h context() const { return ctx_; }

private:
    remora_context_h ctx_;
    remora_gpunet_h  net_;
};

/* GPUnet's gpunet_loop(), under a name of its own (microbench_util.h keeps its own). */
static inline int remora_gpunet_loop(GPUNETGlobals *g, cudaStream_t stream, int timeout_ms)
{
    return g->hostloop(stream, timeout_ms);
}

#endif
