/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KiroSb through the public API: serve/clone with callbacks, newest data,
 * push/push_dma/get_dma_pointer, freeze/thaw, get_data_blocking and its
 * bound, stop and reuse, errors; a clone of a plain served KiroTrb (paced
 * poll); a plain KiroClient reading a serving KiroSb; a served ring that is
 * not a KiroSb's (1-byte elements, from a plain remora server) refused.
 */
#include <string.h>

#include <remora/remora.h>

#include "kiro-client.h"
#include "kiro-sb.h"
#include "kiro-server.h"
#include "kiro-trb.h"
#include "kiro_test.h"

typedef struct {
    GMutex   lock;
    int      calls;
    int      remove_after;  /* return REMOVE at this call; 0: never */
    GThread *thread;        /* where the last call ran */
    KiroSb  *sb;
    uint32_t last_seen;
} counter_t;

static KiroContinueFlag count_cb (void *arg)
{
    counter_t *c = arg;
    g_mutex_lock (&c->lock);
    c->calls++;
    c->thread = g_thread_self ();
    c->last_seen = *(uint32_t *) kiro_sb_get_data (c->sb);
    int n = c->calls;
    g_mutex_unlock (&c->lock);
    return (c->remove_after && n >= c->remove_after) ? KIRO_CALLBACK_REMOVE : KIRO_CALLBACK_CONTINUE;
}

static int calls (counter_t *c)
{
    g_mutex_lock (&c->lock);
    int n = c->calls;
    g_mutex_unlock (&c->lock);
    return n;
}

static int wait_calls (counter_t *c, int n, double secs)
{
    double t0 = kt_now_s ();
    while (calls (c) < n && kt_now_s () - t0 < secs)
        g_usleep (1000);
    return calls (c);
}

static void elem (void *buf, uint32_t v, size_t size)
{
    memset (buf, (int) (v & 0xff), size);
    memcpy (buf, &v, 4);
}

typedef struct {
    KiroSb  *sb;
    void    *buf;
    size_t   size;
    uint32_t v;
    gulong   delay_us;
} pusher_t;

static gpointer pusher (gpointer arg)
{
    pusher_t *p = arg;
    g_usleep (p->delay_us);
    elem (p->buf, p->v, p->size);
    CHECK (kiro_sb_push (p->sb, p->buf));
    return NULL;
}

static void test_serve_clone (void)
{
    char port[16];
    const size_t size = 64 * 1024;
    void *buf = g_malloc (size);
    KiroSb *srv = kiro_sb_new (), *cl = g_object_new (KIRO_TYPE_SB, NULL);

    CHECK (strcmp (g_type_name (KIRO_TYPE_SB), "KiroSb") == 0);
    CHECK (kiro_sb_get_size (srv) == 0);
    CHECK (kiro_sb_serve (srv, 0, "127.0.0.1", "1") == FALSE);
    CHECK (kiro_sb_serve (srv, size, "127.0.0.1", kt_free_port (port, sizeof port)) == TRUE);
    CHECK (kiro_sb_serve (srv, size, "127.0.0.1", port) == FALSE); /* already serving */
    CHECK (kiro_sb_clone (srv, "127.0.0.1", port) == FALSE);
    CHECK (kiro_sb_get_size (srv) == size);
    CHECK (kiro_sb_get_data (srv) != NULL);
    CHECK (*(uint32_t *) kiro_sb_get_data (srv) == 0); /* zeroed before any push */

    /* serving: push copies in as the newest; TRUE on success (KIRO's doc) */
    elem (buf, 1, size);
    CHECK (kiro_sb_push (srv, buf) == TRUE);
    CHECK (*(uint32_t *) kiro_sb_get_data (srv) == 1);
    void *next = kiro_sb_get_dma_pointer (srv);
    void *dma  = kiro_sb_push_dma (srv);
    CHECK (next == dma); /* get_dma_pointer names the slot the next push writes */
    elem (dma, 2, size);
    CHECK (kiro_sb_get_data (srv) == dma);

    counter_t c = {.sb = cl};
    g_mutex_init (&c.lock);
    CHECK (kiro_sb_clone (cl, "127.0.0.1", port) == TRUE);
    CHECK (kiro_sb_clone (cl, "127.0.0.1", port) == FALSE); /* already cloning */
    CHECK (kiro_sb_serve (cl, size, NULL, NULL) == FALSE);
    CHECK (kiro_sb_get_size (cl) == size);
    CHECK (*(uint32_t *) kiro_sb_get_data (cl) == 2); /* the clone starts with the newest */
    CHECK (kiro_sb_push (cl, buf) == FALSE);
    CHECK (kiro_sb_push_dma (cl) == NULL);
    CHECK (kiro_sb_get_dma_pointer (cl) == NULL);

    gulong id = kiro_sb_add_sync_callback (cl, count_cb, &c);
    gulong id2 = kiro_sb_add_sync_callback (cl, count_cb, &c);
    CHECK (id > 0 && id2 > 0 && id != id2);
    CHECK (kiro_sb_remove_sync_callback (cl, id2) == TRUE);
    CHECK (kiro_sb_remove_sync_callback (cl, id2) == FALSE);
    CHECK (kiro_sb_remove_sync_callback (cl, 987654) == FALSE);

    /* every push, paced, is seen, and get_data is the newest (not KIRO's lap-old one) */
    for (uint32_t v = 3; v < 13; v++) {
        elem (buf, v, size);
        CHECK (kiro_sb_push (srv, buf));
        CHECK (wait_calls (&c, (int) v - 2, 5) == (int) v - 2);
        g_mutex_lock (&c.lock);
        CHECK (c.last_seen == v);
        CHECK (c.thread != g_thread_self ()); /* a library thread */
        g_mutex_unlock (&c.lock);
        unsigned char *d = kiro_sb_get_data (cl);
        CHECK (*(uint32_t *) d == v && d[size - 1] == (v & 0xff));
    }

    /* freeze: nothing taken in, no callback; thaw: the newest comes */
    kiro_sb_freeze (cl);
    int before = calls (&c);
    elem (buf, 50, size);
    CHECK (kiro_sb_push (srv, buf));
    g_usleep (200000);
    CHECK (calls (&c) == before);
    CHECK (*(uint32_t *) kiro_sb_get_data (cl) == 12);
    kiro_sb_thaw (cl);
    elem (buf, 51, size);
    CHECK (kiro_sb_push (srv, buf));
    CHECK (wait_calls (&c, before + 1, 5) == before + 1);
    CHECK (*(uint32_t *) kiro_sb_get_data (cl) == 51);

    /* a callback returning REMOVE goes away */
    kiro_sb_clear_sync_callbacks (cl);
    counter_t r = {.sb = cl, .remove_after = 2};
    g_mutex_init (&r.lock);
    gulong rid = kiro_sb_add_sync_callback (cl, count_cb, &r);
    for (uint32_t v = 60; v < 64; v++) {
        elem (buf, v, size);
        CHECK (kiro_sb_push (srv, buf));
        g_usleep (50000);
    }
    CHECK (calls (&r) == 2);
    CHECK (kiro_sb_remove_sync_callback (cl, rid) == FALSE); /* removed itself */
    CHECK (calls (&c) == before + 1); /* cleared */

    /* get_data_blocking: the next element, pushed from another thread later */
    pusher_t pu = {.sb = srv, .buf = buf, .size = size, .v = 70, .delay_us = 100000};
    GThread *t = g_thread_new ("push", pusher, &pu);
    double t0 = kt_now_s ();
    unsigned char *d = kiro_sb_get_data_blocking (cl);
    CHECK (kt_now_s () - t0 >= 0.05);
    CHECK (d != NULL && *(uint32_t *) d == 70);
    g_thread_join (t);
    /* on the serving side too: it waits for the next push */
    pu.v = 71;
    t = g_thread_new ("push", pusher, &pu);
    d = kiro_sb_get_data_blocking (srv);
    CHECK (d != NULL && *(uint32_t *) d == 71);
    g_thread_join (t);
    /* bounded: nothing comes -> NULL after KIRO_TIMEOUT_MS (once the clone has 71) */
    t0 = kt_now_s ();
    while (*(uint32_t *) kiro_sb_get_data (cl) != 71 && kt_now_s () - t0 < 5)
        g_usleep (1000);
    CHECK (*(uint32_t *) kiro_sb_get_data (cl) == 71);
    g_usleep (50000);
    g_setenv ("KIRO_TIMEOUT_MS", "300", TRUE);
    t0 = kt_now_s ();
    CHECK (kiro_sb_get_data_blocking (cl) == NULL);
    double dt = kt_now_s () - t0;
    CHECK (dt >= 0.25 && dt < 3);
    g_unsetenv ("KIRO_TIMEOUT_MS");

    /* a plain KiroClient reads a serving KiroSb: KIRO's TRB layout (16 slots
     * where KIRO had 3: the layout names its own count) */
    KiroClient *pc = kiro_client_new ();
    CHECK (kiro_client_connect (pc, "127.0.0.1", port) == 0);
    CHECK (kiro_client_get_memory_size (pc) == 24 + 16 * size);
    CHECK (kiro_client_sync (pc) == 0);
    KiroTrb *view = kiro_trb_new ();
    kiro_trb_adopt (view, kiro_client_get_memory (pc));
    CHECK (kiro_trb_get_max_elements (view) == 16 && kiro_trb_get_element_size (view) == size);
    CHECK (*(uint32_t *) kiro_trb_get_element (view, 1) == 71);
    kiro_trb_purge (view, FALSE);
    kiro_trb_free (view);
    kiro_client_free (pc);

    /* stop: back to the initial state, usable again */
    kiro_sb_stop (cl);
    CHECK (kiro_sb_get_size (cl) == 0);
    CHECK (kiro_sb_get_data (cl) == NULL);
    CHECK (kiro_sb_get_data_blocking (cl) == NULL);
    CHECK (kiro_sb_add_sync_callback (cl, count_cb, &c) > 0); /* KIRO crashed here */
    CHECK (kiro_sb_clone (cl, "127.0.0.1", port) == TRUE);
    CHECK (*(uint32_t *) kiro_sb_get_data (cl) == 71);
    kiro_sb_stop (cl);
    kiro_sb_stop (cl); /* twice: no-op */

    /* the server goes away: the clone's blocking wait ends early with NULL */
    CHECK (kiro_sb_clone (cl, "127.0.0.1", port) == TRUE);
    kiro_sb_stop (srv);
    t0 = kt_now_s ();
    CHECK (kiro_sb_get_data_blocking (cl) == NULL);
    CHECK (kt_now_s () - t0 < 5);
    CHECK (kiro_sb_clone (srv, "127.0.0.1", port) == FALSE); /* nobody serves now */

    g_object_unref (srv);
    g_object_unref (cl);
    g_mutex_clear (&c.lock);
    g_mutex_clear (&r.lock);
    g_free (buf);
}

/* A KiroSb cloning a plain served KiroTrb (a KiroServer, no ring): the
 * paced poll; each dma_push is seen, get_data is the newest. */
static void test_clone_plain_trb (void)
{
    char port[16];
    KiroTrb *trb = kiro_trb_new ();
    CHECK (kiro_trb_reshape (trb, 4096, 15) == 0);
    KiroServer *s = kiro_server_new ();
    CHECK (kiro_server_start (s, NULL, kt_free_port (port, sizeof port), kiro_trb_get_raw_buffer (trb),
                              kiro_trb_get_raw_size (trb)) == 0);
    KiroSb *cl = kiro_sb_new ();
    counter_t c = {.sb = cl};
    g_mutex_init (&c.lock);
    kiro_sb_add_sync_callback (cl, count_cb, &c);
    CHECK (kiro_sb_clone (cl, "127.0.0.1", port) == TRUE);
    CHECK (kiro_sb_get_size (cl) == 4096);
    for (uint32_t v = 1; v <= 20; v++) {
        void *slot = kiro_trb_dma_push (trb);
        elem (slot, v, 4096);
        CHECK (wait_calls (&c, (int) v, 5) == (int) v);
        CHECK (*(uint32_t *) kiro_sb_get_data (cl) == v);
        g_usleep (5000); /* paced at 200 Hz: the poll runs every 1 ms */
    }
    g_mutex_lock (&c.lock);
    CHECK (c.last_seen == 20);
    g_mutex_unlock (&c.lock);
    /* not a TRB: a block whose header is garbage cannot be cloned */
    KiroServer *junk = kiro_server_new ();
    char jport[16];
    unsigned char garbage[64] = {0};
    CHECK (kiro_server_start (junk, "127.0.0.1", kt_free_port (jport, sizeof jport), garbage, sizeof garbage) == 0);
    KiroSb *cl2 = kiro_sb_new ();
    CHECK (kiro_sb_clone (cl2, "127.0.0.1", jport) == FALSE);
    kiro_sb_free (cl2);
    kiro_server_free (junk);
    /* a header that claims more than the block holds (256 MiB of 1-byte
     * elements in 4 KiB): refused, not read past the block */
    static unsigned char liar[4096];
    uint64_t claim = 256u << 20, one = 1;
    memcpy (liar, &claim, 8);
    memcpy (liar + 8, &one, 8);
    junk = kiro_server_new ();
    CHECK (kiro_server_start (junk, "127.0.0.1", kt_free_port (jport, sizeof jport), liar, sizeof liar) == 0);
    cl2 = kiro_sb_new ();
    CHECK (kiro_sb_clone (cl2, "127.0.0.1", jport) == FALSE);
    kiro_sb_free (cl2);
    kiro_server_free (junk);
    kiro_sb_free (cl);
    kiro_server_free (s);
    kiro_trb_free (trb);
    g_mutex_clear (&c.lock);
}

/* A plain remora server serving a KiroTrb and, beside it, a ring of the
 * clones' name whose elements are 1 byte: a clone read 8 bytes (a TRB
 * offset) from each one, 7 past the element (ASan: heap-buffer-overflow on
 * the subscription thread). It is refused, and nothing is read. */
static void test_clone_foreign_ring (void)
{
    char port[16], addr[32];
    KiroTrb *trb = kiro_trb_new ();
    CHECK (kiro_trb_reshape (trb, 8, 4) == 0);
    size_t raw_size = kiro_trb_get_raw_size (trb);
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR, .listen_addr = addr};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = raw_size};
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY,
                               .elem_size = 1, .capacity = 4};
    remora_context_h ctx;
    remora_server_h server;
    remora_mem_h mem;
    remora_ring_h ring;
    void *slot;

    snprintf (addr, sizeof addr, "127.0.0.1:%s", kt_free_port (port, sizeof port));
    CHECK (remora_context_create (NULL, &ctx) == REMORA_OK);
    CHECK (remora_server_create (ctx, &sp, &server) == REMORA_OK);
    CHECK (remora_mem_create (ctx, &mp, &mem) == REMORA_OK);
    memcpy (remora_mem_address (mem), kiro_trb_get_raw_buffer (trb), raw_size);
    CHECK (remora_server_expose (server, "kiro", mem, NULL) == REMORA_OK);
    CHECK (remora_ring_create (ctx, &rp, &ring) == REMORA_OK);
    CHECK (remora_server_expose_ring (server, "kiro.sb", ring) == REMORA_OK);
    CHECK (remora_ring_reserve (ring, &slot) == REMORA_OK);
    *(uint8_t *) slot = 0x41;
    CHECK (remora_ring_commit (ring, NULL) == REMORA_OK);

    KiroSb *cl = kiro_sb_new ();
    CHECK (kiro_sb_clone (cl, "127.0.0.1", port) == FALSE);
    for (int i = 0; i < 3; i++) { /* what a subscription left behind would take */
        CHECK (remora_ring_reserve (ring, &slot) == REMORA_OK);
        *(uint8_t *) slot = 0x42;
        CHECK (remora_ring_commit (ring, NULL) == REMORA_OK);
        g_usleep (20000);
    }
    kiro_sb_free (cl);
    CHECK (remora_server_unexpose (server, "kiro.sb") == REMORA_OK);
    remora_ring_destroy (ring);
    remora_server_destroy (server);
    remora_mem_destroy (mem);
    remora_context_destroy (ctx);
    kiro_trb_free (trb);
}

int main (void)
{
    test_serve_clone ();
    test_clone_plain_trb ();
    test_clone_foreign_ring ();
    printf ("kiro sb: ok\n");
    return 0;
}
