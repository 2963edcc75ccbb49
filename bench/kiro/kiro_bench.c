/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kiro_bench: the KIRO side of bench/kiro.sh, written against the KIRO API.
 *
 *   kiro_bench serve PORT SIZE                 KiroServer serving SIZE bytes on 127.0.0.1
 *   kiro_bench sync ADDR PORT SECONDS          full-block kiro_client_sync loop -> GB/s
 *   kiro_bench ping ADDR PORT COUNT            kiro_client_ping_server -> p50/avg/p99 us
 *   kiro_bench sb-serve PORT SIZE RATE         serving KiroSb, stamped pushes at RATE Hz
 *   kiro_bench sb-clone ADDR PORT SECONDS      KiroSb clone: pushes seen, latency p50/p99
 *
 * Results are one JSON line on stdout. A pushed element starts with u64
 * sequence number (from 1) and u64 CLOCK_REALTIME ns at push, so latency
 * is the clone's clock minus the stamp (same host, same clock).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiro-client.h"
#include "kiro-sb.h"
#include "kiro-server.h"

static volatile sig_atomic_t stop;
static void on_signal (int sig) { (void) sig; stop = 1; }

static double now_s (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static uint64_t realtime_ns (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static int cmp_double (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double quantile (double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort (v, n, sizeof (*v), cmp_double);
    size_t i = (size_t) (q * (double) (n - 1) + 0.5);
    return v[i];
}

static void wait_for_signal (void)
{
    signal (SIGINT, on_signal);
    signal (SIGTERM, on_signal);
    printf ("ready\n");
    fflush (stdout);
    while (!stop)
        pause ();
}

static int cmd_serve (const char *port, size_t size)
{
    unsigned char *block = g_malloc (size);
    for (size_t i = 0; i < size; i++)
        block[i] = (unsigned char) i;
    KiroServer *s = kiro_server_new ();
    if (kiro_server_start (s, "127.0.0.1", port, block, size) != 0)
        return 1;
    wait_for_signal ();
    kiro_server_free (s);
    g_free (block);
    return 0;
}

static int cmd_sync (const char *addr, const char *port, double secs)
{
    KiroClient *c = kiro_client_new ();
    if (kiro_client_connect (c, addr, port) != 0)
        return 1;
    size_t size = kiro_client_get_memory_size (c);
    for (int i = 0; i < 5; i++) /* warm up */
        if (kiro_client_sync (c) != 0)
            return 1;
    unsigned long n = 0;
    double t0 = now_s (), t;
    do {
        if (kiro_client_sync (c) != 0)
            return 1;
        n++;
    } while ((t = now_s () - t0) < secs);
    printf ("{\"syncs\":%lu,\"size\":%zu,\"seconds\":%.3f,\"gbps\":%.3f}\n", n, size, t,
            (double) n * (double) size / t / 1e9);
    kiro_client_free (c);
    return 0;
}

static int cmd_ping (const char *addr, const char *port, size_t count)
{
    KiroClient *c = kiro_client_new ();
    double *v = g_new (double, count), sum = 0;
    if (kiro_client_connect (c, addr, port) != 0)
        return 1;
    for (size_t i = 0; i < 100; i++) /* warm up */
        kiro_client_ping_server (c);
    for (size_t i = 0; i < count; i++) {
        gint us = kiro_client_ping_server (c);
        if (us < 0)
            return 1;
        v[i] = us;
        sum += us;
    }
    double avg = sum / (double) count;
    printf ("{\"pings\":%zu,\"avg_us\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f}\n", count, avg,
            quantile (v, count, 0.5), quantile (v, count, 0.99));
    kiro_client_free (c);
    g_free (v);
    return 0;
}

static int cmd_sb_serve (const char *port, size_t size, double rate)
{
    KiroSb *sb = kiro_sb_new ();
    unsigned char *elem = g_malloc0 (size);
    if (size < 16 || !kiro_sb_serve (sb, size, "127.0.0.1", port))
        return 1;
    signal (SIGINT, on_signal);
    signal (SIGTERM, on_signal);
    printf ("ready\n");
    fflush (stdout);
    double period = 1.0 / rate, next = now_s ();
    for (uint64_t seq = 1; !stop; seq++) {
        next += period;
        double d = next - now_s ();
        if (d > 0)
            g_usleep ((gulong) (d * 1e6));
        uint64_t ts = realtime_ns ();
        memcpy (elem, &seq, 8);
        memcpy (elem + 8, &ts, 8);
        if (!kiro_sb_push (sb, elem))
            return 1;
    }
    kiro_sb_free (sb);
    g_free (elem);
    return 0;
}

typedef struct {
    KiroSb  *sb;
    GMutex   lock;
    uint64_t first, last, seen, missed;
    double  *lat;
    size_t   nlat, cap;
} clone_state_t;

static KiroContinueFlag on_sync (void *arg)
{
    clone_state_t *s = arg;
    const unsigned char *d = kiro_sb_get_data (s->sb);
    uint64_t seq, ts;
    memcpy (&seq, d, 8);
    memcpy (&ts, d + 8, 8);
    double lat_us = ((double) realtime_ns () - (double) ts) / 1e3;
    g_mutex_lock (&s->lock);
    if (s->first == 0)
        s->first = seq;
    else if (seq > s->last + 1)
        s->missed += seq - s->last - 1;
    s->last = seq;
    s->seen++;
    if (s->nlat < s->cap)
        s->lat[s->nlat++] = lat_us;
    g_mutex_unlock (&s->lock);
    return KIRO_CALLBACK_CONTINUE;
}

static int cmd_sb_clone (const char *addr, const char *port, double secs)
{
    clone_state_t s = {.sb = kiro_sb_new (), .cap = 10000000};
    s.lat = g_new (double, s.cap);
    g_mutex_init (&s.lock);
    kiro_sb_add_sync_callback (s.sb, on_sync, &s);
    if (!kiro_sb_clone (s.sb, addr, port))
        return 1;
    g_usleep ((gulong) (secs * 1e6));
    kiro_sb_stop (s.sb);
    g_mutex_lock (&s.lock);
    printf ("{\"seen\":%llu,\"missed\":%llu,\"first\":%llu,\"last\":%llu,\"lat_us_p50\":%.2f,"
            "\"lat_us_p99\":%.2f}\n",
            (unsigned long long) s.seen, (unsigned long long) s.missed,
            (unsigned long long) s.first, (unsigned long long) s.last,
            quantile (s.lat, s.nlat, 0.5), quantile (s.lat, s.nlat, 0.99));
    g_mutex_unlock (&s.lock);
    kiro_sb_free (s.sb);
    g_free (s.lat);
    return 0;
}

int main (int argc, char **argv)
{
    if (argc == 4 && strcmp (argv[1], "serve") == 0)
        return cmd_serve (argv[2], strtoull (argv[3], NULL, 0));
    if (argc == 5 && strcmp (argv[1], "sync") == 0)
        return cmd_sync (argv[2], argv[3], atof (argv[4]));
    if (argc == 5 && strcmp (argv[1], "ping") == 0)
        return cmd_ping (argv[2], argv[3], strtoull (argv[4], NULL, 0));
    if (argc == 5 && strcmp (argv[1], "sb-serve") == 0)
        return cmd_sb_serve (argv[2], strtoull (argv[3], NULL, 0), atof (argv[4]));
    if (argc == 5 && strcmp (argv[1], "sb-clone") == 0)
        return cmd_sb_clone (argv[2], argv[3], atof (argv[4]));
    fprintf (stderr, "usage: see the comment at the top of bench/kiro/kiro_bench.c\n");
    return 2;
}
