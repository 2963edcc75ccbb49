/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Guide step 3b (docs/guide.md): a ring subscriber. It follows the ring
 * "frames" of a producer (step 3a), every element in order, checks each
 * frame's number and text, and prints a summary after COUNT frames.
 *
 *   guide_ring_subscriber HOST:PORT [COUNT]     default COUNT 1000
 */
#include <inttypes.h>
#include <string.h>

#include "guide.h"

int main(int argc, char **argv)
{
    remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_MODE, .mode = REMORA_SUB_EVERY};
    remora_context_h ctx;
    remora_client_h client;
    remora_sub_h sub;
    remora_elem_info_t info = {.field_mask = REMORA_ELEM_INFO_FIELD_SEQ |
                                             REMORA_ELEM_INFO_FIELD_DROPS};
    uint64_t count = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000, bad = 0, first = 0,
             drops0 = 0;

    if (argc < 2 || count == 0) {
        fprintf(stderr, "usage: guide_ring_subscriber HOST:PORT [COUNT]\n");
        return 2;
    }
    CHECK(remora_context_create(NULL, &ctx));
    CHECK(remora_client_connect(ctx, argv[1], NULL, &client));
    /* The subscription starts at the ring's head: the next frame pushed. */
    CHECK(remora_client_subscribe(client, "frames", &sp, &sub));

    size_t size = remora_sub_elem_size(sub);
    char *frame = malloc(size), expect[64];
    if (frame == NULL)
        return 1;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n;
        CHECK(remora_sub_next(sub, frame, size, &info, 5000));
        memcpy(&n, frame, sizeof(n));
        snprintf(expect, sizeof(expect), "frame %" PRIu64, info.seq);
        if (n != info.seq || strcmp(frame + sizeof(n), expect) != 0)
            bad++;
        if (i == 0) {
            first  = info.seq;
            drops0 = info.drops; /* any before the first frame */
        }
    }
    /* EVERY mode: a frame the ring overwrote before we got to it is a drop,
     * counted exactly; frames first .. first+count+drops-1 were seen or dropped
     * (drops counted from the first frame on). */
    printf("received %" PRIu64 " frames of %zu bytes, seq %" PRIu64 "..%" PRIu64
           ", %" PRIu64 " dropped, %" PRIu64 " bad\n",
           count, size, first, info.seq, info.drops - drops0, bad);
    free(frame);
    remora_sub_destroy(sub);
    remora_client_disconnect(client);
    remora_context_destroy(ctx);
    return bad == 0 && info.seq - first + 1 == count + (info.drops - drops0) ? 0 : 1;
}
