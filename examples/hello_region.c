/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hello_region: the smallest complete remora program. It serves a region and
 * reads it back in one process, or, with an address, reads from a running
 * `remora serve`:
 *
 *   hello_region                       # self-contained
 *   hello_region 127.0.0.1:60010 NAME  # client of a running server
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/remora.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        remora_status_t st_ = (call);                                                \
        if (st_ != REMORA_OK) {                                                      \
            fprintf(stderr, "%s: %s\n", #call, remora_status_string(st_));           \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static void read_and_show(remora_context_h ctx, const char *addr, const char *name)
{
    remora_client_h client;
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE |
                                               REMORA_REGION_INFO_FIELD_GENERATION};
    remora_path_t path;
    char buf[64] = {0};
    double rtt;

    CHECK(remora_client_connect(ctx, addr, NULL, &client));
    CHECK(remora_client_lookup(client, name, &info));
    CHECK(remora_client_read(client, name, 0, buf, info.size < 63 ? info.size : 63));
    CHECK(remora_client_region_path(client, name, &path));
    CHECK(remora_client_ping(client, &rtt));
    printf("%s/%s: %llu bytes, generation %llu, path %s, round trip %.1f us\n", addr, name,
           (unsigned long long)info.size, (unsigned long long)info.generation,
           remora_path_string(path), rtt);
    printf("first bytes: \"%.*s\"\n", 32, buf);
    remora_client_disconnect(client);
}

int main(int argc, char **argv)
{
    remora_context_h ctx;

    CHECK(remora_context_create(NULL, &ctx));
    if (argc == 3) {
        read_and_show(ctx, argv[1], argv[2]);
    } else {
        static const char text[] = "hello from a remora region";
        remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 4096};
        remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                     .listen_addr = "127.0.0.1:0"};
        remora_mem_h mem;
        remora_server_h server;
        char addr[80];

        CHECK(remora_mem_create(ctx, &mp, &mem));
        memset(remora_mem_address(mem), 0, 4096);
        memcpy(remora_mem_address(mem), text, sizeof(text));
        CHECK(remora_server_create(ctx, &sp, &server));
        CHECK(remora_server_expose(server, "greeting", mem, NULL));
        CHECK(remora_server_address(server, addr, sizeof(addr)));
        /* A client needs a context of its own (one UCX worker cannot connect to itself). */
        remora_context_h client_ctx;
        CHECK(remora_context_create(NULL, &client_ctx));
        read_and_show(client_ctx, addr, "greeting");
        remora_context_destroy(client_ctx);
        remora_server_destroy(server);
        remora_mem_destroy(mem);
    }
    remora_context_destroy(ctx);
    return 0;
}
