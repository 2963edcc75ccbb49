/* SPDX-License-Identifier: BSD-3-Clause */
// C++ use as in libuca's KIRO camera plugin: the headers included as
// <kiro/...> inside extern "C", objects made with g_object_new and the
// KIRO_*() casts, dropped with g_object_unref.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include <kiro/kiro-client.h>
#include <kiro/kiro-server.h>
#include <kiro/kiro-trb.h>
#include <kiro/kiro-sb.h>
}
#include "kiro_test.h"

int main ()
{
    char port[16];
    KiroTrb *rb = KIRO_TRB (g_object_new (KIRO_TYPE_TRB, NULL));
    CHECK (kiro_trb_reshape (rb, 512 * 512, 15) == 0);
    for (int i = 0; i < 17; i++) {
        unsigned char *slot = static_cast<unsigned char *> (kiro_trb_dma_push (rb));
        std::memset (slot, i, 512 * 512);
    }
    KiroServer *srv = KIRO_SERVER (g_object_new (KIRO_TYPE_SERVER, NULL));
    CHECK (kiro_server_start (srv, NULL, kt_free_port (port, sizeof port), kiro_trb_get_raw_buffer (rb),
                              kiro_trb_get_raw_size (rb)) == 0);

    // the plugin: connect, sync, adopt, per grab sync + refresh + element(max - 2)
    KiroClient *client = KIRO_CLIENT (g_object_new (KIRO_TYPE_CLIENT, NULL));
    KiroTrb *view = KIRO_TRB (g_object_new (KIRO_TYPE_TRB, NULL));
    CHECK (KIRO_IS_CLIENT (client) && KIRO_IS_TRB (view) && !KIRO_IS_SERVER (client));
    CHECK (kiro_client_connect (client, "127.0.0.1", port) == 0);
    CHECK (kiro_client_sync (client) == 0);
    kiro_trb_adopt (view, kiro_client_get_memory (client));
    std::vector<unsigned char> frame (512 * 512);
    for (int grab = 0; grab < 3; grab++) {
        unsigned char *slot = static_cast<unsigned char *> (kiro_trb_dma_push (rb));
        std::memset (slot, 100 + grab, 512 * 512);
        CHECK (kiro_client_sync (client) == 0);
        kiro_trb_refresh (view);
        uint64_t max = kiro_trb_get_max_elements (view);
        CHECK (max == 15);
        std::memmove (frame.data (), kiro_trb_get_element (view, (glong) max - 2), frame.size ());
        // element 13 = the 13th newest of 18 + grab pushes: push #5 + grab (0-based), value 5 + grab
        CHECK (frame[0] == 5 + grab);
        CHECK (*static_cast<unsigned char *> (kiro_trb_get_element (view, 1)) == 100 + grab);
    }
    kiro_trb_purge (view, FALSE);
    g_object_unref (view);
    g_object_unref (client);

    KiroSb *sb = KIRO_SB (g_object_new (KIRO_TYPE_SB, NULL));
    CHECK (KIRO_IS_SB (sb));
    CHECK (kiro_sb_get_size (sb) == 0);
    g_object_unref (sb);

    g_object_unref (srv);
    g_object_unref (rb);
    std::printf ("kiro c++: ok\n");
    return 0;
}
