/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Guide step 3a (docs/guide.md): a ring producer. It exposes a ring "frames"
 * of 256 elements of 4 KiB, prints "listening HOST:PORT", then pushes one
 * frame a millisecond until SIGINT or SIGTERM. Each frame begins with its
 * number and a line of text; subscribers (step 3b) check both.
 *
 *   guide_ring_producer [HOST:PORT]
 */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "guide.h"

#define FRAME_SIZE 4096

int main(int argc, char **argv)
{
    sigset_t signals = guide_block_signals();
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = argc > 1 ? argv[1] : "127.0.0.1:60010"};
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY,
                               .elem_size  = FRAME_SIZE,
                               .capacity   = 256};
    remora_context_h ctx;
    remora_server_h server;
    remora_ring_h ring;
    char addr[80];

    CHECK(remora_context_create(NULL, &ctx));
    CHECK(remora_ring_create(ctx, &rp, &ring));
    CHECK(remora_server_create(ctx, &sp, &server));
    CHECK(remora_server_expose_ring(server, "frames", ring));
    CHECK(remora_server_address(server, addr, sizeof(addr)));
    printf("listening %s\n", addr);
    fflush(stdout);

    const struct timespec period = {0, 1000 * 1000}, no_wait = {0, 0};
    for (uint64_t n = 0;; n++) {
        /* Zero-copy: fill the next slot in place, then publish it. */
        void *slot;
        uint64_t seq;
        CHECK(remora_ring_reserve(ring, &slot));
        memcpy(slot, &n, sizeof(n));
        snprintf((char *)slot + sizeof(n), FRAME_SIZE - sizeof(n), "frame %" PRIu64, n);
        CHECK(remora_ring_commit(ring, &seq)); /* seq == n: numbers start at 0 */
        int sig = sigtimedwait(&signals, NULL, &no_wait); /* -1: none pending */
        if (sig == SIGINT || sig == SIGTERM)
            break;
        nanosleep(&period, NULL);
    }
    printf("pushed %" PRIu64 " frames\n", remora_ring_head(ring));
    remora_server_destroy(server);
    remora_ring_destroy(ring);
    remora_context_destroy(ctx);
    return 0;
}
