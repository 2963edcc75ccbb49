/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KiroServer and KiroClient through the public API, in one process (each
 * object has its own remora context): every function, error returns, the
 * sync_partial range rules, ping, realloc with connected clients, two
 * servers and two clients side by side, an application's own GMainLoop
 * beside KIRO objects, and the idle CPU of a connected client.
 */
#include <string.h>

#include "kiro-client.h"
#include "kiro-server.h"
#include "kiro_test.h"

static void fill (unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char) (i * 7 + seed);
}

static void test_errors (void)
{
    char port[16];
    unsigned char block[64];
    KiroServer *s = kiro_server_new ();
    KiroClient *c = kiro_client_new ();

    CHECK (strcmp (g_type_name (KIRO_TYPE_SERVER), "KiroServer") == 0);
    CHECK (strcmp (g_type_name (KIRO_TYPE_CLIENT), "KiroClient") == 0);
    kt_free_port (port, sizeof port);
    CHECK (kiro_server_start (s, "127.0.0.1", port, NULL, 64) == -1);
    CHECK (kiro_server_start (s, "127.0.0.1", port, block, 0) == -1);
    CHECK (kiro_server_start (s, "no.such.host.invalid", port, block, 64) == -1);
    kiro_server_stop (s);                   /* not started: no-op */
    kiro_server_realloc (NULL, block, 64);  /* ignored */
    kiro_server_realloc (s, block, 64);     /* not started: warning, nothing else */

    /* client, unconnected */
    CHECK (kiro_client_get_memory (c) == NULL);
    CHECK (kiro_client_get_memory_size (c) == 0);
    CHECK (kiro_client_sync (c) == -1);
    CHECK (kiro_client_sync_partial (c, 0, 1, 0) == -1);
    CHECK (kiro_client_ping_server (c) == -1);
    kiro_client_disconnect (c); /* no-op */
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == -1); /* nobody listens */
    CHECK (kiro_client_connect (c, NULL, port) == -1);
    CHECK (kiro_client_connect (c, "127.0.0.1", NULL) == -1);
    CHECK (kiro_client_get_memory (c) == NULL);

    /* started twice */
    CHECK (kiro_server_start (s, "127.0.0.1", port, block, 64) == 0);
    CHECK (kiro_server_start (s, "127.0.0.1", port, block, 64) == -1);
    /* port taken by another server */
    KiroServer *s2 = kiro_server_new ();
    CHECK (kiro_server_start (s2, "127.0.0.1", port, block, 64) == -1);
    kiro_server_free (s2);
    /* connected twice: the first connection stays */
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == 0);
    void *m = kiro_client_get_memory (c);
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == -1);
    CHECK (kiro_client_get_memory (c) == m);
    CHECK (kiro_client_sync (c) == 0);
    kiro_client_free (c);
    kiro_server_free (s);
}

static void test_roundtrip (void)
{
    char port[16];
    size_t n = 1 << 20;
    unsigned char *block = g_malloc (n);
    fill (block, n, 1);
    KiroServer *s = kiro_server_new ();
    CHECK (kiro_server_start (s, NULL, kt_free_port (port, sizeof port), block, n) == 0);

    KiroClient *c = g_object_new (KIRO_TYPE_CLIENT, NULL);
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == 0);
    CHECK (kiro_client_get_memory_size (c) == n);
    unsigned char *m = kiro_client_get_memory (c);
    CHECK (m != NULL);
    CHECK (kiro_client_sync (c) == 0);
    CHECK (memcmp (m, block, n) == 0);

    /* in place: a plain write is visible at the next sync; the pointer is stable */
    block[12345] ^= 0xff;
    CHECK (kiro_client_sync (c) == 0);
    CHECK (kiro_client_get_memory (c) == m);
    CHECK (m[12345] == block[12345]);

    /* sync_partial: only the target range is written */
    memset (m, 0, n);
    CHECK (kiro_client_sync_partial (c, 100, 50, 1000) == 0);
    CHECK (memcmp (m + 1000, block + 100, 50) == 0);
    CHECK (m[999] == 0 && m[1050] == 0);
    /* size 0: to the end of the remote block */
    memset (m, 0, n);
    CHECK (kiro_client_sync_partial (c, n - 10, 0, 0) == 0);
    CHECK (memcmp (m, block + n - 10, 10) == 0 && m[10] == 0);
    /* range errors: -1 and no side effects, still connected */
    memset (m, 0xab, n);
    CHECK (kiro_client_sync_partial (c, n + 1, 0, 0) == -1);
    CHECK (kiro_client_sync_partial (c, n - 10, 11, 0) == -1);
    CHECK (kiro_client_sync_partial (c, 0, 10, n - 9) == -1);
    CHECK (kiro_client_sync_partial (c, 0, 0, 1) == -1); /* whole block does not fit at 1 */
    CHECK (kiro_client_sync_partial (c, n, 0, 0) == 0);  /* empty range at the end */
    for (size_t i = 0; i < n; i++)
        CHECK (m[i] == 0xab);
    CHECK (kiro_client_get_memory (c) == m);

    /* ping in microseconds */
    gint rtt = kiro_client_ping_server (c);
    CHECK (rtt >= 0 && rtt < 2000000);

    /* disconnect frees the copy; the object connects again */
    kiro_client_disconnect (c);
    CHECK (kiro_client_get_memory (c) == NULL && kiro_client_get_memory_size (c) == 0);
    CHECK (kiro_client_sync (c) == -1);
    CHECK (kiro_client_connect (c, "localhost", port) == 0);
    CHECK (kiro_client_sync (c) == 0);
    CHECK (memcmp (kiro_client_get_memory (c), block, n) == 0);

    /* stop: clients fail; restart on the same port works */
    kiro_server_stop (s);
    double t0 = kt_now_s ();
    while (kiro_client_sync (c) == 0 && kt_now_s () - t0 < 5)
        g_usleep (10000);
    CHECK (kiro_client_get_memory (c) == NULL);
    CHECK (kiro_server_start (s, "127.0.0.1", port, block, n) == 0);
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == 0);
    CHECK (kiro_client_sync (c) == 0);
    g_object_unref (c);
    g_object_unref (s);
    g_free (block);
}

static void test_realloc (void)
{
    char port[16];
    size_t n1 = 4096, n2 = 3 * 4096 + 5, n3 = 100;
    unsigned char *b1 = g_malloc (n1), *b2 = g_malloc (n2), *b3 = g_malloc (n3);
    fill (b1, n1, 3);
    fill (b2, n2, 9);
    fill (b3, n3, 11);
    KiroServer *s = kiro_server_new ();
    CHECK (kiro_server_start (s, "127.0.0.1", kt_free_port (port, sizeof port), b1, n1) == 0);
    KiroClient *c[2] = {kiro_client_new (), kiro_client_new ()};
    for (int i = 0; i < 2; i++) {
        CHECK (kiro_client_connect (c[i], "127.0.0.1", port) == 0);
        CHECK (kiro_client_sync (c[i]) == 0);
        CHECK (memcmp (kiro_client_get_memory (c[i]), b1, n1) == 0);
    }
    double t_realloc = kt_now_s ();
    kiro_server_realloc (s, b2, n2); /* bigger */
    /* It returns once both clients followed (at once here, well within its
     * 2 s), and the old block is the caller's again: free it now (ASan
     * would see any later use). */
    CHECK (kt_now_s () - t_realloc < 1.5);
    g_free (b1);
    b1 = NULL;
    for (int i = 0; i < 2; i++) {
        /* the change travels as an event: a sync that ran before it arrived
         * still reads the first n1 bytes; it reaches the client promptly */
        double t0 = kt_now_s ();
        while (kiro_client_get_memory_size (c[i]) != n2 && kt_now_s () - t0 < 2) {
            CHECK (kiro_client_sync (c[i]) == 0);
            g_usleep (1000);
        }
        CHECK (kiro_client_sync (c[i]) == 0);
        CHECK (kiro_client_get_memory_size (c[i]) == n2);
        CHECK (memcmp (kiro_client_get_memory (c[i]), b2, n2) == 0);
    }
    kiro_server_realloc (s, b3, n3); /* smaller: the first sync after it already fits */
    for (int i = 0; i < 2; i++) {
        CHECK (kiro_client_sync (c[i]) == 0);
        CHECK (kiro_client_get_memory_size (c[i]) == n3);
        CHECK (memcmp (kiro_client_get_memory (c[i]), b3, n3) == 0);
    }
    /* a new client gets the new size */
    KiroClient *late = kiro_client_new ();
    CHECK (kiro_client_connect (late, "127.0.0.1", port) == 0);
    CHECK (kiro_client_get_memory_size (late) == n3);
    kiro_client_free (late);
    kiro_client_free (c[0]);
    kiro_client_free (c[1]);
    kiro_server_free (s);
    g_free (b1);
    g_free (b2);
    g_free (b3);
}

/* Two servers and two clients in one process, used from two threads at once. */
typedef struct {
    KiroClient    *c;
    unsigned char *block;
    size_t         n;
    int            rounds;
    int            ok;
} worker_t;

static gpointer worker (gpointer arg)
{
    worker_t *w = arg;
    w->ok = 1;
    for (int i = 0; i < w->rounds; i++) {
        if (kiro_client_sync (w->c) != 0 || kiro_client_ping_server (w->c) < 0 ||
            memcmp (kiro_client_get_memory (w->c), w->block, w->n) != 0)
            w->ok = 0;
    }
    return NULL;
}

static void test_two_and_two (void)
{
    char p[2][16];
    size_t n = 256 * 1024;
    unsigned char *b[2] = {g_malloc (n), g_malloc (n)};
    KiroServer *s[2];
    worker_t w[2];
    GThread *t[2];

    for (int i = 0; i < 2; i++) {
        fill (b[i], n, 20 + i);
        s[i] = kiro_server_new ();
        CHECK (kiro_server_start (s[i], "127.0.0.1", kt_free_port (p[i], sizeof p[i]), b[i], n) == 0);
    }
    for (int i = 0; i < 2; i++) {
        w[i] = (worker_t){.c = kiro_client_new (), .block = b[i], .n = n, .rounds = 50};
        CHECK (kiro_client_connect (w[i].c, "127.0.0.1", p[i]) == 0);
    }
    for (int i = 0; i < 2; i++)
        t[i] = g_thread_new ("w", worker, &w[i]);
    for (int i = 0; i < 2; i++) {
        g_thread_join (t[i]);
        CHECK (w[i].ok);
    }
    /* stopping one server leaves the other pair working */
    kiro_server_free (s[0]);
    CHECK (kiro_client_sync (w[1].c) == 0);
    CHECK (memcmp (kiro_client_get_memory (w[1].c), b[1], n) == 0);
    for (int i = 0; i < 2; i++)
        kiro_client_free (w[i].c);
    kiro_server_free (s[1]);
    g_free (b[0]);
    g_free (b[1]);
}

/* The application's own default-context GMainLoop keeps running beside KIRO
 * objects made before and while it runs. */
typedef struct {
    GMainLoop  *loop;
    int         ticks;
    KiroClient *c;
    int         syncs_ok;
} app_t;

static gboolean tick (gpointer arg)
{
    app_t *a = arg;
    a->ticks++;
    if (kiro_client_sync (a->c) == 0)
        a->syncs_ok++;
    if (a->ticks == 20) {
        g_main_loop_quit (a->loop);
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static void test_own_main_loop (void)
{
    char port[16];
    unsigned char block[4096];
    fill (block, sizeof block, 5);
    KiroServer *s = kiro_server_new ();
    CHECK (kiro_server_start (s, "127.0.0.1", kt_free_port (port, sizeof port), block, sizeof block) == 0);
    app_t a = {.loop = g_main_loop_new (NULL, FALSE), .c = kiro_client_new ()};
    CHECK (kiro_client_connect (a.c, "127.0.0.1", port) == 0);
    g_timeout_add (10, tick, &a);
    double t0 = kt_now_s ();
    g_main_loop_run (a.loop); /* with KIRO this blocked while a KIRO loop owned the context */
    double dt = kt_now_s () - t0;
    CHECK (a.ticks == 20 && a.syncs_ok == 20);
    CHECK (dt < 5.0);
    CHECK (g_main_context_acquire (NULL)); /* KIRO holds no claim on the default context */
    g_main_context_release (NULL);
    g_main_loop_unref (a.loop);
    kiro_client_free (a.c);
    kiro_server_free (s);
}

static void test_idle_cpu (void)
{
    char port[16];
    unsigned char block[4096] = {0};
    KiroServer *s = kiro_server_new ();
    CHECK (kiro_server_start (s, "127.0.0.1", kt_free_port (port, sizeof port), block, sizeof block) == 0);
    KiroClient *c = kiro_client_new ();
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == 0);
    CHECK (kiro_client_sync (c) == 0);
    g_usleep (200000);
    double c0 = kt_cpu_s (), t0 = kt_now_s ();
    g_usleep (2000000);
    double share = (kt_cpu_s () - c0) / (kt_now_s () - t0);
    printf ("idle server + connected client: %.2f%% of a core\n", 100 * share);
    CHECK (share < 0.02); /* server and client together, both idle */
    kiro_client_free (c);
    kiro_server_free (s);
}

int main (void)
{
    test_errors ();
    test_roundtrip ();
    test_realloc ();
    test_two_and_two ();
    test_own_main_loop ();
    test_idle_cpu ();
    printf ("kiro net: ok\n");
    return 0;
}
