/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Guide step 2 (docs/guide.md): a client. It lists the server's regions,
 * reads the start of "greeting", writes a line into it and reads that back.
 *
 *   guide_client HOST:PORT
 */
#include <string.h>

#include "guide.h"

int main(int argc, char **argv)
{
    remora_context_h ctx;
    remora_client_h client;
    remora_region_info_t *regions;
    size_t count;
    remora_path_t path;
    char text[128] = {0};
    static const char note[] = "a client was here\n";
    const uint64_t at = 4096; /* where the client writes */

    if (argc != 2) {
        fprintf(stderr, "usage: guide_client HOST:PORT\n");
        return 2;
    }
    CHECK(remora_context_create(NULL, &ctx));
    CHECK(remora_client_connect(ctx, argv[1], NULL, &client));

    CHECK(remora_client_list(client, &regions, &count));
    for (size_t i = 0; i < count; i++)
        printf("region %s: %llu bytes, %s, generation %llu\n", regions[i].name,
               (unsigned long long)regions[i].size,
               (regions[i].access & REMORA_ACCESS_WRITE) ? "writable" : "read-only",
               (unsigned long long)regions[i].generation);
    remora_region_info_free(regions);

    /* Blocking read of the first bytes. */
    CHECK(remora_client_read(client, "greeting", 0, text, sizeof(text) - 1));
    CHECK(remora_client_region_path(client, "greeting", &path));
    printf("read over the %s path: %s", remora_path_string(path), text);

    /* Write, then read back with a non-blocking request. */
    CHECK(remora_client_write(client, "greeting", at, note, sizeof(note)));
    remora_request_h req;
    memset(text, 0, sizeof(text));
    CHECK(remora_client_read_nb(client, "greeting", at, text, sizeof(note), &req));
    CHECK(remora_request_wait(req, -1)); /* other work could be done meanwhile */
    remora_request_release(req);
    if (memcmp(text, note, sizeof(note)) != 0) {
        fprintf(stderr, "read back something else: %s\n", text);
        return 1;
    }
    printf("wrote and read back at %llu: %s", (unsigned long long)at, text);

    remora_client_disconnect(client);
    remora_context_destroy(ctx);
    return 0;
}
