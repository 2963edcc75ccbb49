/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A GPU echo server on remora GPU sockets, in GPUnet's style: every thread
 * block accepts one connection on a shared listening socket and echoes it
 * until the client ends its stream.
 *
 *   gpu_echo_server PORT [BLOCKS]     (serves BLOCKS connections, then exits)
 *
 * Prints "listening on PORT" once the socket is bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/compat/gpunet.cu.h>


__device__ volatile int g_lsock = -100; /* -100: not bound yet */
__device__ int g_done;

__global__ void gpuserver(struct sockaddr_in *addr, int *served, int *bound)
{
    __shared__ int ls, sock;
    __shared__ uchar buf[16384];

    BEGIN_SINGLE_THREAD_PART {
        if (blockIdx.x == 0) {
            ls = single_thread_gbind_in(addr);
            g_lsock = ls;
            __threadfence_system();
            *(volatile int *)bound = ls >= 0 ? 1 : ls;
        } else {
            while ((ls = g_lsock) == -100) {}
        }
    } END_SINGLE_THREAD_PART;
    if (ls < 0)
        return;
    sock = gaccept(ls);
    if (sock >= 0) {
        int n;
        while ((n = grecv(sock, buf, sizeof(buf))) > 0) {
            int sent = 0, m;
            while (sent < n && (m = gsend(sock, buf + sent, n - sent)) > 0)
                sent += m;
            if (sent < n)
                break;
        }
        BEGIN_SINGLE_THREAD_PART {
            single_thread_gclose(sock);
            atomicAdd(served, 1);
        } END_SINGLE_THREAD_PART;
    }
    BEGIN_SINGLE_THREAD_PART {
        if (atomicAdd(&g_done, 1) == (int)gridDim.x - 1)
            single_thread_gclose(ls);
    } END_SINGLE_THREAD_PART;
}

int main(int argc, char **argv)
{
    struct sockaddr_in *addr;
    int *served, *bound;
    int blocks = argc > 2 ? atoi(argv[2]) : 1;

    if (argc < 2 || blocks < 1) {
        fprintf(stderr, "usage: %s PORT [BLOCKS]\n", argv[0]);
        return 2;
    }
    GPUNETGlobals gpunet(0);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaHostAlloc((void **)&addr, sizeof(*addr), cudaHostAllocMapped);
    cudaHostAlloc((void **)&served, sizeof(int), cudaHostAllocMapped);
    cudaHostAlloc((void **)&bound, sizeof(int), cudaHostAllocMapped);
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr->sin_port = htons((uint16_t)atoi(argv[1]));
    *served = 0;
    *bound = 0;
    gpuserver<<<blocks, 256, 0, stream>>>(addr, served, bound);
    for (int i = 0; i < 30000 && *(volatile int *)bound == 0; i++)
        usleep(1000);
    if (*(volatile int *)bound != 1) {
        fprintf(stderr, "%s: bind failed (%d)\n", argv[0], *(volatile int *)bound);
        _exit(1);
    }
    printf("listening on %s\n", argv[1]);
    fflush(stdout);
    int timeout_ms = getenv("GPU_ECHO_TIMEOUT_MS") ? atoi(getenv("GPU_ECHO_TIMEOUT_MS")) : 120000;
    if (gpunet.hostloop(stream, timeout_ms)) {
        fprintf(stderr, "%s: timed out with %d of %d connection(s) served\n", argv[0],
                *(volatile int *)served, blocks);
        _exit(1);
    }
    cudaError_t e = cudaStreamSynchronize(stream);
    printf("gpu_echo_server: served %d connection(s): %s\n", *served,
           e == cudaSuccess ? "OK" : cudaGetErrorString(e));
    return e == cudaSuccess && *served == blocks ? 0 : 1;
}
