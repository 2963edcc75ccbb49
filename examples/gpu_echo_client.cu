/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPUnet's echo client, on remora GPU sockets: the kernel below is the one
 * printed in GPUnet's README, unchanged; each thread block connects its own
 * socket and echoes NR_MSG messages of BUF_SIZE bytes.
 *
 *   gpu_echo_client HOST PORT [BLOCKS] [--check]
 *
 * --check runs a variant kernel that fills each message with a pattern and
 * verifies the echo byte for byte (exit status 1 on any difference).
 * The peer is any TCP echo server (e.g. gpu_echo_server, or
 * `python3 -c ...`, see scripts/gpu-gpunet.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netdb.h>

#include <remora/compat/gpunet.cu.h>

#define BUF_SIZE 1024
#define NR_MSG   100

    __global__ void gpuclient(struct sockaddr_in *addr, int* tb_alloc_tbl, int nr_tb) {
      __shared__ int sock;
      __shared__ uchar buf[BUF_SIZE];
      int ret, i;
    
      while ((sock = gconnect_in(addr)) < 0) {};
      assert(sock >= 0);

      for (i = 0; i < NR_MSG; i++) {
        int recved = 0, sent = 0;
    
        do {
          ret = gsend(sock, buf + sent, BUF_SIZE - sent);
          if (ret < 0) {
            goto out;
          } else {
            sent += ret;
          }
        } while (sent < BUF_SIZE);
        
        __syncthreads(); 
      
        do {
          ret = grecv(sock, buf + recved, BUF_SIZE - recved);
          if (ret < 0) {
            goto out;
          } else {
            recved += ret;
          }
        } while (recved < BUF_SIZE);
        
        __syncthreads();
      }

      out:
      BEGIN_SINGLE_THREAD_PART {
          single_thread_gclose(sock);
      } END_SINGLE_THREAD_PART;
    }

/* The same exchange, with a pattern per block and message, checked. */
__global__ void gpuclient_checked(struct sockaddr_in *addr, int *errors)
{
    __shared__ int sock;
    __shared__ uchar out[BUF_SIZE], in[BUF_SIZE];
    __shared__ int bad;

    sock = gconnect_in(addr);
    if (sock < 0) {
        BEGIN_SINGLE_THREAD_PART { atomicAdd(errors, 1); } END_SINGLE_THREAD_PART;
        return;
    }
    for (int m = 0; m < NR_MSG; m++) {
        for (int i = threadIdx.x; i < BUF_SIZE; i += blockDim.x)
            out[i] = (uchar)(i * 7 + m * 13 + blockIdx.x * 31);
        bad = 0;
        __syncthreads();
        int sent = 0, recved = 0, ret;
        while (sent < BUF_SIZE) {
            if ((ret = gsend(sock, out + sent, BUF_SIZE - sent)) < 0)
                goto fail;
            sent += ret;
        }
        while (recved < BUF_SIZE) {
            if ((ret = grecv(sock, in + recved, BUF_SIZE - recved)) <= 0)
                goto fail;
            recved += ret;
        }
        for (int i = threadIdx.x; i < BUF_SIZE; i += blockDim.x)
            if (in[i] != out[i])
                bad = 1;
        __syncthreads();
        if (bad)
            goto fail;
    }
    BEGIN_SINGLE_THREAD_PART { single_thread_gclose(sock); } END_SINGLE_THREAD_PART;
    return;
fail:
    BEGIN_SINGLE_THREAD_PART {
        atomicAdd(errors, 1);
        single_thread_gclose(sock);
    } END_SINGLE_THREAD_PART;
}

int main(int argc, char **argv)
{
    struct addrinfo hints, *ai;
    struct sockaddr_in *addr;
    int *errors, blocks = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : 1;
    bool check = argc > 3 && strcmp(argv[argc - 1], "--check") == 0;

    if (argc < 3 || blocks < 1) {
        fprintf(stderr, "usage: %s HOST PORT [BLOCKS] [--check]\n", argv[0]);
        return 2;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
        fprintf(stderr, "%s: cannot resolve %s:%s\n", argv[0], argv[1], argv[2]);
        return 2;
    }
    GPUNETGlobals gpunet(0);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaHostAlloc((void **)&addr, sizeof(*addr), cudaHostAllocMapped);
    cudaHostAlloc((void **)&errors, sizeof(*errors), cudaHostAllocMapped);
    memcpy(addr, ai->ai_addr, sizeof(*addr));
    *errors = 0;
    freeaddrinfo(ai);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (check)
        gpuclient_checked<<<blocks, 256, 0, stream>>>(addr, errors);
    else
        gpuclient<<<blocks, 256, 0, stream>>>(addr, NULL, blocks);
    if (gpunet.hostloop(stream, 120000)) {
        fprintf(stderr, "%s: the kernel did not finish in 120 s\n", argv[0]);
        _exit(1); /* the kernel still runs: leave without tearing down under it */
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cudaError_t e = cudaStreamSynchronize(stream);
    double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
    printf("gpu_echo_client: %d block(s) x %d messages of %d B%s: %s, %.0f us, errors %d\n",
           blocks, NR_MSG, BUF_SIZE, check ? " (checked)" : "",
           e == cudaSuccess && *errors == 0 ? "OK" : "FAILED", us, *errors);
    return e == cudaSuccess && *errors == 0 ? 0 : 1;
}
