/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A KIRO client, written against the KIRO API as a KIRO user would (it
 * builds unchanged against KIRO 1.3 too): connect, adopt the client's
 * memory as a KiroTrb, then sync and show the newest frame's number,
 * the round trip and the sync throughput; stops when a sync fails (the
 * server went away) or after COUNT syncs.
 *
 *   kiro-client ADDRESS [PORT [COUNT]]       (defaults: 60010, 20)
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiro-client.h"
#include "kiro-trb.h"

int main (int argc, char **argv)
{
    if (argc < 2) {
        fprintf (stderr, "usage: %s ADDRESS [PORT [COUNT]]\n", argv[0]);
        return 2;
    }
    const char *port = argc > 2 ? argv[2] : "60010";
    int count = argc > 3 ? atoi (argv[3]) : 20;
    KiroClient *client = kiro_client_new ();
    KiroTrb *trb = kiro_trb_new ();

    if (kiro_client_connect (client, argv[1], port) < 0) {
        kiro_client_free (client);
        kiro_trb_free (trb);
        return 255;
    }
    size_t size = kiro_client_get_memory_size (client);
    g_message ("connected: %zu bytes", size);
    if (kiro_client_sync (client) < 0)
        goto out;
    kiro_trb_adopt (trb, kiro_client_get_memory (client));
    GTimer *timer = g_timer_new ();
    for (int i = 0; i < count; i++) {
        g_timer_start (timer);
        if (kiro_client_sync (client) < 0) {
            g_message ("the server went away");
            break;
        }
        double secs = g_timer_elapsed (timer, NULL);
        kiro_trb_refresh (trb);
        uint64_t frame;
        memcpy (&frame, kiro_trb_get_element (trb, 1), sizeof frame);
        printf ("frame %" PRIu64 "  ping %d us  sync %.2f GB/s\n", frame,
                kiro_client_ping_server (client), (double) size / secs / 1e9);
        g_usleep (100000);
    }
    g_timer_destroy (timer);
out:
    kiro_trb_purge (trb, FALSE); /* the memory is the client's */
    kiro_trb_free (trb);
    kiro_client_free (client);
    return 0;
}
