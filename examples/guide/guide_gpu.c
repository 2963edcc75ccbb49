/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Guide step 5 (docs/guide.md): a GPU region. One process serves 1 MiB of
 * GPU memory and, through a second context, reads it into host memory and
 * into GPU memory of its own (on one host the path is CUDA IPC: device to
 * device), then writes into it from the host. Without a CUDA driver or GPU
 * it says why and exits 77 (the test then counts as skipped).
 *
 *   guide_gpu [DEVICE]     default 0
 */
#include <string.h>

#include "guide.h"

#define SIZE (1u << 20)

int main(int argc, char **argv)
{
    int device = argc > 1 ? atoi(argv[1]) : 0;
    remora_cuda_attr_t cuda = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                             REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT |
                                             REMORA_CUDA_ATTR_FIELD_REASON};
    CHECK(remora_cuda_query(&cuda));
    if (!cuda.available || device >= cuda.device_count) {
        printf("no GPU %d here: %s\n", device, cuda.available ? "no such device" : cuda.reason);
        return 77;
    }

    /* The server side: GPU memory, filled from the host with remora_copy. */
    remora_mem_params_t gp = {.field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE |
                                            REMORA_MEM_FIELD_DEVICE,
                              .length = SIZE, .type = REMORA_MEM_CUDA, .device = device};
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_region_params_t rp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags      = REMORA_REGION_WRITABLE};
    remora_context_h sctx;
    remora_server_h server;
    remora_mem_h gpu_region;
    unsigned char *host = malloc(SIZE), *back = malloc(SIZE);
    char addr[80];

    if (host == NULL || back == NULL)
        return 1;
    for (size_t i = 0; i < SIZE; i++)
        host[i] = (unsigned char)(i * 7 + 1);
    CHECK(remora_context_create(NULL, &sctx));
    CHECK(remora_mem_create(sctx, &gp, &gpu_region));
    CHECK(remora_copy(remora_mem_address(gpu_region), host, SIZE)); /* host -> GPU */
    CHECK(remora_server_create(sctx, &sp, &server));
    CHECK(remora_server_expose(server, "gpu", gpu_region, &rp));
    remora_mem_destroy(gpu_region);
    CHECK(remora_server_address(server, addr, sizeof(addr)));

    /* The client side: a context of its own, as another process would have. */
    remora_context_h cctx;
    remora_client_h client;
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE |
                                               REMORA_REGION_INFO_FIELD_MEM_TYPE};
    remora_path_t path;
    remora_mem_h landing; /* GPU memory to read into */

    CHECK(remora_context_create(NULL, &cctx));
    CHECK(remora_client_connect(cctx, addr, NULL, &client));
    CHECK(remora_client_lookup(client, "gpu", &info));
    printf("region gpu: %llu bytes of %s memory\n", (unsigned long long)info.size,
           info.mem_type == REMORA_MEM_CUDA ? "GPU" : "host");

    /* GPU region -> host buffer. */
    CHECK(remora_client_read(client, "gpu", 0, back, SIZE));
    if (memcmp(back, host, SIZE) != 0) {
        fprintf(stderr, "host read: wrong bytes\n");
        return 1;
    }
    /* GPU region -> GPU buffer (any read or write may use GPU memory). */
    CHECK(remora_mem_create(cctx, &gp, &landing));
    CHECK(remora_client_read(client, "gpu", 0, remora_mem_address(landing), SIZE));
    CHECK(remora_copy(back, remora_mem_address(landing), SIZE));
    if (memcmp(back, host, SIZE) != 0) {
        fprintf(stderr, "GPU read: wrong bytes\n");
        return 1;
    }
    /* Host buffer -> GPU region. */
    memset(host, 0xab, 4096);
    CHECK(remora_client_write(client, "gpu", 0, host, 4096));
    CHECK(remora_client_read(client, "gpu", 0, back, 4096));
    CHECK(remora_client_region_path(client, "gpu", &path));
    printf("read into host and GPU memory, wrote from the host, over the %s path: %s\n",
           remora_path_string(path), memcmp(back, host, 4096) == 0 ? "ok" : "WRONG");

    remora_mem_destroy(landing);
    remora_client_disconnect(client);
    remora_context_destroy(cctx);
    remora_server_destroy(server);
    remora_context_destroy(sctx);
    free(host);
    free(back);
    return 0;
}
