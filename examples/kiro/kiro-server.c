/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A KIRO camera-style server, written against the KIRO API as a KIRO user
 * would (it builds unchanged against KIRO 1.3 too): a KiroTrb of 15 frames
 * of 512x512 bytes served on all addresses; a new frame (its number in the
 * first 8 bytes, then a gray ramp) every 1/RATE s.
 *
 *   kiro-server [PORT [RATE]]        (defaults: 60010, 10 Hz)
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiro-server.h"
#include "kiro-trb.h"

#define WIDTH  512
#define HEIGHT 512

static volatile sig_atomic_t running = 1;
static void on_signal (int sig) { (void) sig; running = 0; }

int main (int argc, char **argv)
{
    const char *port = argc > 1 ? argv[1] : "60010";
    double rate = argc > 2 ? atof (argv[2]) : 10.0;
    KiroServer *server = kiro_server_new ();
    KiroTrb *rb = kiro_trb_new ();
    int ret = 1;

    if (rate <= 0)
        rate = 10.0;
    if (kiro_trb_reshape (rb, WIDTH * HEIGHT, 15) != 0) {
        g_critical ("cannot allocate the ring buffer");
        goto done;
    }
    if (kiro_server_start (server, NULL, port, kiro_trb_get_raw_buffer (rb),
                           kiro_trb_get_raw_size (rb)) < 0) {
        g_critical ("failed to start the server on port %s", port);
        goto done;
    }
    signal (SIGINT, on_signal);
    signal (SIGTERM, on_signal);
    g_message ("serving %u frames of %ux%u on port %s at %.1f Hz",
               (unsigned) kiro_trb_get_max_elements (rb), WIDTH, HEIGHT, port, rate);
    for (uint64_t frame = 0; running; frame++) {
        unsigned char *buf = kiro_trb_dma_push (rb);
        for (unsigned y = 0; y < HEIGHT; y++)
            for (unsigned x = 0; x < WIDTH; x++)
                buf[y * WIDTH + x] = (unsigned char) ((x * 256) / WIDTH + frame);
        memcpy (buf, &frame, sizeof frame);
        g_usleep ((gulong) (1e6 / rate));
    }
    ret = 0;
done:
    kiro_server_free (server); /* stop before the served memory goes */
    kiro_trb_free (rb);
    return ret;
}
