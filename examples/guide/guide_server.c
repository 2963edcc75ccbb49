/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Guide step 1 (docs/guide.md): a server. It exposes one writable region,
 * "greeting" (64 KiB, starting with a line of text), prints
 * "listening HOST:PORT" and serves until SIGINT or SIGTERM. On SIGUSR1 it
 * replaces the region with a fresh one twice the size: clients watching it
 * get a REGION_CHANGED event (step 4).
 *
 *   guide_server [HOST:PORT]      default 127.0.0.1:60010; port 0: any free port
 */
#include <pthread.h>
#include <string.h>

#include "guide.h"

/* A new region of `size` bytes: a line of text, then zeros. The caller drops
 * its reference once the server holds one. */
static remora_mem_h make_greeting(remora_context_h ctx, size_t size, int version)
{
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = size};
    remora_mem_h mem;

    CHECK(remora_mem_create(ctx, &mp, &mem));
    memset(remora_mem_address(mem), 0, size);
    snprintf(remora_mem_address(mem), size, "hello from the guide server (version %d)\n",
             version);
    return mem;
}

int main(int argc, char **argv)
{
    sigset_t signals = guide_block_signals();
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = argc > 1 ? argv[1] : "127.0.0.1:60010"};
    remora_region_params_t rp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags      = REMORA_REGION_WRITABLE};
    remora_context_h ctx;
    remora_server_h server;
    remora_mem_h mem;
    size_t size = 64 << 10;
    int version = 1, sig = 0;
    char addr[80];

    CHECK(remora_context_create(NULL, &ctx));
    CHECK(remora_server_create(ctx, &sp, &server));
    mem = make_greeting(ctx, size, version);
    CHECK(remora_server_expose(server, "greeting", mem, &rp));
    remora_mem_destroy(mem); /* the region keeps the memory alive */

    CHECK(remora_server_address(server, addr, sizeof(addr)));
    printf("listening %s\n", addr);
    fflush(stdout);

    while (sigwait(&signals, &sig) == 0 && sig == SIGUSR1) {
        size *= 2;
        mem = make_greeting(ctx, size, ++version);
        CHECK(remora_server_replace(server, "greeting", mem, NULL));
        remora_mem_destroy(mem);
        printf("replaced greeting: %zu bytes, version %d\n", size, version);
        fflush(stdout);
    }
    remora_server_destroy(server); /* closes every connection, frees the region */
    remora_context_destroy(ctx);
    return 0;
}
