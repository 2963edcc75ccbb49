/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Reconnecting clients (remora.h, "Reconnecting"), against real `remora
 * stream serve` processes.
 *
 * 1. restarts: a server killed (SIGKILL) and restarted on the same port
 *    REMORA_IT_RESTARTS times (default 20) under one reconnecting client
 *    doing reads and 4 subscriber threads (`every` mode). Checked:
 *    - every restart is followed: the first successful read after the new
 *      server printed `listening` comes within 2 s (measured, asserted);
 *    - every subscriber gets elements of every new instance before the next
 *      kill (a 5 s bound), and its drops are exact: for each server instance
 *      it saw, the span is last delivered seq + 1 less the seq it started
 *      from there (the first instance: the head at subscribe; later ones: 0,
 *      as sequence numbers restart), and delivered + drops == sum of spans;
 *    - no torn or corrupt frame; a RECONNECTED event per restart, all with
 *      new_instance set;
 *    - /proc/self/fd count and RSS are flat from restart 5 to the last.
 *    Elements are assigned to server instances by their frame timestamp
 *    (CLOCK_REALTIME, stamped by the producer): the test notes the time
 *    after each killed server is reaped (noted before the kill, a frame the
 *    dying producer stamped meanwhile was taken for the next instance's), and
 *    an instance's frames are all older than its kill and newer than the
 *    previous one.
 * 2. same_instance: the server SIGSTOPped for 2.5 s (heartbeats declare it
 *    dead after 2 s), then SIGCONT: the client reconnects to the same
 *    instance (event: new_instance 0), subscriptions resume with exact drops.
 * 3. off: without reconnecting (the library's default), a restarted server is
 *    not followed: DISCONNECTED stays, one final DISCONNECTED event.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"

#define RING        "cam"
#define RING_SPEC   RING "=256x256" /* small: a restart costs drops */
#define RATE        "2000"
#define NSUBS       4
#define MAX_INST    1024
#define FOLLOW_MS   2000.0

/* ---------------------------------------------------------------- helpers */

/* A port free now, for a server restarted on it again and again. */
static void free_addr(char addr[IT_ADDR_MAX])
{
    assert_int_equal(it_restart_addr(addr), 0);
}

static void start_at(it_server_t *s, const char *addr)
{
    if (it_server_start(s, "stream", "serve", "--listen", addr, "--ring", RING_SPEC, "--rate",
                        RATE, NULL) != 0)
        fail_msg("could not start remora stream serve at %s", addr);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static long rss_kib(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld %ld", &pages, &rss), 2);
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- events */

typedef struct events {
    atomic_int disconnected, reconnecting, final, reconnected, new_instance, same_instance;
} events_t;

static void on_event(const remora_event_t *ev, void *arg)
{
    events_t *e = arg;

    if (ev->type == REMORA_EVENT_DISCONNECTED) {
        atomic_fetch_add(&e->disconnected, 1);
        atomic_fetch_add(ev->reconnecting ? &e->reconnecting : &e->final, 1);
    } else if (ev->type == REMORA_EVENT_RECONNECTED) {
        atomic_fetch_add(&e->reconnected, 1);
        atomic_fetch_add(ev->new_instance ? &e->new_instance : &e->same_instance, 1);
    }
}

static remora_client_params_t rc_params(events_t *ev, int enable)
{
    remora_client_params_t p = {
        .field_mask = REMORA_CLIENT_FIELD_EVENT_CB | REMORA_CLIENT_FIELD_RECONNECT |
                      REMORA_CLIENT_FIELD_TIMEOUT,
        .timeout_ms = 5000,
        .event_cb   = on_event,
        .event_arg  = ev,
        .reconnect  = {.enable = enable},
    };
    return p;
}

/* ---------------------------------------------------------------- subscribers */

/* Kill times (realtime ns), noted once each killed server is reaped:
 * instance i's frames are older than kill[i], instance i+1's newer. */
static uint64_t       g_kill[MAX_INST];
static atomic_int     g_nkill;

static int instance_of(uint64_t ts)
{
    int n = atomic_load(&g_nkill), i = 0;
    while (i < n && g_kill[i] < ts)
        i++;
    return i;
}

typedef struct subscriber {
    remora_client_h client;
    remora_sub_h    sub;
    pthread_t       thread;
    atomic_int      stop;
    atomic_int      inst_seen;  /* newest instance an element came from (-1: none) */
    remora_status_t end;        /* the error that ended it, if any */
    /* Accounting, see the file's notes. */
    int      inst;              /* instance of the last element */
    uint64_t base, last;        /* seq it started from in inst, last delivered */
    uint64_t spans, delivered, drops, instances, bad, backwards;
    /* Per instance, to say where an account does not add up. */
    uint64_t i_first[MAX_INST], i_deliv[MAX_INST], i_drops0[MAX_INST];
} subscriber_t;

static void close_span(subscriber_t *s)
{
    if (s->inst < 0)
        return;
    uint64_t span = s->last + 1 - s->base, got = s->i_deliv[s->inst] + s->drops -
                                                  s->i_drops0[s->inst];
    s->spans += span;
    if (got != span)
        printf("  instance %d: seqs %llu..%llu from %llu: span %llu, delivered %llu + drops "
               "%llu = %llu\n", s->inst, (unsigned long long)s->i_first[s->inst],
               (unsigned long long)s->last, (unsigned long long)s->base,
               (unsigned long long)span, (unsigned long long)s->i_deliv[s->inst],
               (unsigned long long)(s->drops - s->i_drops0[s->inst]), (unsigned long long)got);
}

static void *sub_main(void *arg)
{
    subscriber_t *s = arg;
    remora_elem_info_t info = {0};
    const void *elem;

    while (!atomic_load(&s->stop)) {
        remora_status_t st = remora_sub_next_ref(s->sub, &elem, &info, 200);
        if (st == REMORA_ERR_TIMED_OUT)
            continue;
        if (st != REMORA_OK) {
            s->end = st;
            break;
        }
        int inst = instance_of(remora_frame_timestamp(elem, info.size));
        if (remora_frame_check(elem, info.size, info.seq) != REMORA_FRAME_OK)
            s->bad++;
        if (inst != s->inst) {
            if (inst < s->inst)
                s->backwards++; /* an old instance's element after a new one's */
            close_span(s);
            /* The first instance from the head at subscribe (the drops so far
             * say how far the first element is past it); later ones from 0. */
            s->base = s->inst < 0 ? info.seq - (info.drops - s->drops) : 0;
            s->inst = inst;
            s->i_first[inst]  = info.seq;
            s->i_drops0[inst] = s->drops;
            s->instances++;
            atomic_store(&s->inst_seen, inst);
        } else if (info.seq <= s->last) {
            s->backwards++;
        }
        s->last  = info.seq;
        s->drops = info.drops;
        s->delivered++;
        s->i_deliv[inst]++;
    }
    return NULL;
}

static void subs_start(subscriber_t *subs, int n, remora_client_h client)
{
    for (int i = 0; i < n; i++) {
        memset(&subs[i], 0, sizeof(subs[i]));
        subs[i].client = client;
        subs[i].inst   = -1;
        atomic_init(&subs[i].inst_seen, -1);
        remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_MODE, .mode = REMORA_SUB_EVERY};
        it_assert_ok(remora_client_subscribe(client, RING, &sp, &subs[i].sub));
        assert_int_equal(pthread_create(&subs[i].thread, NULL, sub_main, &subs[i]), 0);
    }
}

/* Stop, join and check the accounting of every subscriber. */
static void subs_finish(subscriber_t *subs, int n, int min_instances)
{
    for (int i = 0; i < n; i++) {
        subscriber_t *s = &subs[i];
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
        remora_sub_destroy(s->sub);
        close_span(s);
        printf("  subscriber %d: %llu delivered + %llu drops = %llu; spans of %llu instance(s) "
               "= %llu\n", i, (unsigned long long)s->delivered, (unsigned long long)s->drops,
               (unsigned long long)(s->delivered + s->drops), (unsigned long long)s->instances,
               (unsigned long long)s->spans);
        if (s->end != REMORA_OK)
            fail_msg("subscriber %d ended: %s", i, remora_status_string(s->end));
        assert_int_equal(s->bad, 0);
        assert_int_equal(s->backwards, 0);
        assert_true(s->instances >= (uint64_t)min_instances);
        assert_int_equal(s->delivered + s->drops, s->spans);
    }
}

/* Wait until every subscriber got an element of instance inst. */
static void subs_await(subscriber_t *subs, int n, int inst, int timeout_ms)
{
    double end = it_now_ms() + timeout_ms;

    for (int i = 0; i < n; i++)
        while (atomic_load(&subs[i].inst_seen) < inst) {
            if (it_now_ms() > end)
                fail_msg("subscriber %d got nothing of server instance %d in %d ms", i, inst,
                         timeout_ms);
            it_sleep_ms(5);
        }
}

/* ---------------------------------------------------------------- 1. restarts */

static void test_restarts(void **state)
{
    (void)state;
    const char *env = getenv("REMORA_IT_RESTARTS");
    int restarts = env ? atoi(env) : 20;
    char addr[IT_ADDR_MAX];
    it_server_t s;
    it_client_t c;
    events_t ev = {0};
    subscriber_t subs[NSUBS];
    uint8_t buf[64];
    double worst = 0, sum = 0;
    int fds5 = 0;
    long rss5 = 0;

    assert_true(restarts >= 6 && restarts < MAX_INST);
    atomic_store(&g_nkill, 0);
    free_addr(addr);
    start_at(&s, addr);
    remora_client_params_t p = rc_params(&ev, 1);
    it_assert_ok(it_client_open(&c, addr, &p));
    subs_start(subs, NSUBS, c.client);
    subs_await(subs, NSUBS, 0, 5000);

    for (int r = 1; r <= restarts; r++) {
        it_sleep_ms(100 + (unsigned)(r * 37 % 150)); /* elements flow meanwhile */
        it_server_kill(&s); /* and reaped: its producer stamps nothing after this */
        g_kill[r - 1] = realtime_ns();
        atomic_store(&g_nkill, r);
        it_sleep_ms((unsigned)(r * 53 % 120)); /* down for a while, sometimes not at all */
        start_at(&s, addr);
        double listening = it_now_ms(), ok;
        remora_status_t st;
        for (;;) {
            st = remora_client_read(c.client, RING, 0, buf, sizeof(buf));
            ok = it_now_ms();
            if (st == REMORA_OK || ok - listening > 10 * FOLLOW_MS)
                break;
            if (st != REMORA_ERR_DISCONNECTED && st != REMORA_ERR_NOT_FOUND)
                fail_msg("restart %d: read: %s", r, remora_status_string(st));
            it_sleep_ms(2);
        }
        it_assert_ok(st);
        double follow = ok - listening;
        sum += follow;
        if (follow > worst)
            worst = follow;
        if (follow > FOLLOW_MS)
            fail_msg("restart %d followed after %.0f ms (> %.0f)", r, follow, FOLLOW_MS);
        subs_await(subs, NSUBS, r, 5000);
        if (r == 5) {
            fds5 = count_fds();
            rss5 = rss_kib();
        }
    }
    int fds = count_fds();
    long rss = rss_kib();
    printf("  %d restarts: follow mean %.1f ms, worst %.1f ms; fds %d -> %d, RSS %ld -> %ld KiB "
           "(restart 5 -> last); events: %d disconnected (%d reconnecting, %d final), "
           "%d reconnected (%d new instance)\n",
           restarts, sum / restarts, worst, fds5, fds, rss5, rss, atomic_load(&ev.disconnected),
           atomic_load(&ev.reconnecting), atomic_load(&ev.final), atomic_load(&ev.reconnected),
           atomic_load(&ev.new_instance));
    subs_finish(subs, NSUBS, restarts + 1);
    assert_int_equal(atomic_load(&ev.reconnected), restarts);
    assert_int_equal(atomic_load(&ev.new_instance), restarts);
    assert_int_equal(atomic_load(&ev.reconnecting), restarts);
    assert_int_equal(atomic_load(&ev.final), 0);
    assert_true(fds <= fds5 + 2);
#if defined(__SANITIZE_ADDRESS__)
    /* ASan keeps freed memory in quarantine (256 MiB by default): RSS grows by design. */
    assert_true(rss <= rss5 + 256 * 1024);
#else
    assert_true(rss <= rss5 + 16 * 1024);
#endif
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- 2. same instance */

static void test_same_instance(void **state)
{
    (void)state;
    char addr[IT_ADDR_MAX];
    it_server_t s;
    it_client_t c;
    events_t ev = {0};
    subscriber_t subs[2];
    uint8_t buf[64];

    atomic_store(&g_nkill, 0); /* one instance throughout */
    free_addr(addr);
    start_at(&s, addr);
    remora_client_params_t p = rc_params(&ev, 1);
    it_assert_ok(it_client_open(&c, addr, &p));
    subs_start(subs, 2, c.client);
    subs_await(subs, 2, 0, 5000);
    uint64_t before[2] = {subs[0].delivered, subs[1].delivered};
    (void)before;

    assert_true(it_stop_process(s.pid, 5000));
    it_sleep_ms(2500); /* past the 2 s peer timeout... */
    double t_stop = it_now_ms(); /* ...and until the client said so (slower under ASan) */
    while (atomic_load(&ev.disconnected) == 0 && it_now_ms() - t_stop < 10000)
        it_sleep_ms(10);
    kill(s.pid, SIGCONT);
    double t0 = it_now_ms();
    remora_status_t st;
    do {
        st = remora_client_read(c.client, RING, 0, buf, sizeof(buf));
        if (st != REMORA_OK)
            it_sleep_ms(5);
    } while (st != REMORA_OK && it_now_ms() - t0 < 10000);
    it_assert_ok(st);
    printf("  same instance: read again %.0f ms after SIGCONT\n", it_now_ms() - t0);
    while (atomic_load(&ev.reconnected) == 0 && it_now_ms() - t0 < 15000)
        it_sleep_ms(10); /* events come from the progress thread */
    assert_int_equal(atomic_load(&ev.reconnected), 1);
    assert_int_equal(atomic_load(&ev.same_instance), 1);
    assert_int_equal(atomic_load(&ev.new_instance), 0);
    /* Elements keep coming on the same numbering. */
    uint64_t mark[2] = {subs[0].delivered, subs[1].delivered};
    for (int i = 0; i < 2; i++) {
        double end = it_now_ms() + 5000;
        while (subs[i].delivered < mark[i] + 100 && it_now_ms() < end)
            it_sleep_ms(10);
        assert_true(subs[i].delivered >= mark[i] + 100);
    }
    subs_finish(subs, 2, 1);
    for (int i = 0; i < 2; i++)
        assert_int_equal(subs[i].instances, 1);
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- 3. off */

static void test_off(void **state)
{
    (void)state;
    char addr[IT_ADDR_MAX];
    it_server_t s;
    it_client_t c;
    events_t ev = {0};
    uint8_t buf[64];

    free_addr(addr);
    start_at(&s, addr);
    remora_client_params_t p = rc_params(&ev, 0);
    p.field_mask &= ~(uint64_t)REMORA_CLIENT_FIELD_RECONNECT; /* the default: off */
    it_assert_ok(it_client_open(&c, addr, &p));
    it_assert_ok(remora_client_read(c.client, RING, 0, buf, sizeof(buf)));
    it_server_kill(&s);
    start_at(&s, addr);
    double t0 = it_now_ms();
    while (it_now_ms() - t0 < 1500) {
        it_assert_status(remora_client_read(c.client, RING, 0, buf, sizeof(buf)),
                         REMORA_ERR_DISCONNECTED);
        it_sleep_ms(50);
    }
    assert_int_equal(atomic_load(&ev.disconnected), 1);
    assert_int_equal(atomic_load(&ev.final), 1);
    assert_int_equal(atomic_load(&ev.reconnected), 0);
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- 4. CLI */

/* `remora stream read` reconnects by default; --no-reconnect ends with the server. */
static void test_cli_stream_read(void **state)
{
    (void)state;
    char addr[IT_ADDR_MAX], target[IT_ADDR_MAX + 8];
    it_server_t s;
    it_proc_t p, q;
    it_run_t r, rq;

    free_addr(addr);
    snprintf(target, sizeof(target), "%s/" RING, addr);
    start_at(&s, addr);
    assert_int_equal(it_cli_spawn(&p, NULL, "stream", "read", target, "--seconds", "4", "--json",
                                  "--verify", NULL), 0);
    assert_int_equal(it_cli_spawn(&q, NULL, "stream", "read", target, "--seconds", "4",
                                  "--no-reconnect", NULL), 0);
    it_sleep_ms(1200);
    it_server_kill(&s);
    start_at(&s, addr);
    it_proc_wait(&p, 20000, &r);
    it_proc_wait(&q, 20000, &rq);
    printf("  stream read: %s", r.out);
    assert_int_equal(r.status, 0);
    it_assert_contains(r.out, "\"reconnects\":1,");
    it_assert_contains(r.out, "\"torn\":0,\"corrupt\":0");
    assert_true(rq.status > 0 && rq.status < 128); /* the stream ended with the server */
    it_assert_contains(rq.err, "disconnected");
    it_run_free(&r);
    it_run_free(&rq);
    assert_int_equal(it_server_stop(&s), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test_teardown(test_restarts, it_teardown_reap),
        cmocka_unit_test_teardown(test_same_instance, it_teardown_reap),
        cmocka_unit_test_teardown(test_off, it_teardown_reap),
        cmocka_unit_test_teardown(test_cli_stream_read, it_teardown_reap),
    };

    it_init("reconnect");
    unsetenv("REMORA_RECONNECT"); /* test 3 checks the library's default */
    return it_finish(it_run_tests("reconnect", all, sizeof(all) / sizeof(all[0]), argc, argv));
}
