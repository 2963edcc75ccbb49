/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An idle process does not spin (DESIGN.md: progress blocks on the worker's
 * event fd after a short spin). Measured over 2 s windows:
 *   - the server, with no client and with an idle client connected, from
 *     /proc/PID/stat (utime + stime, in clock ticks);
 *   - the library client in this process, from CLOCK_PROCESS_CPUTIME_ID
 *     (every thread of this process: the progress thread included);
 * each after some traffic, so "it went back to sleep" is tested too.
 * Limit: 2% of one core.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WINDOW_MS 2000
#define LIMIT_FRACTION 0.02

static double process_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double ticks_to_ms(long ticks) { return (double)ticks * 1000.0 / (double)sysconf(_SC_CLK_TCK); }

/* Some traffic first, then quiet. */
static void some_traffic(remora_client_h c)
{
    uint8_t *buf = malloc(1 << 20);
    double rtt;

    assert_non_null(buf);
    for (int i = 0; i < 20; i++) {
        it_assert_ok(remora_client_read(c, "a", 0, buf, 1 << 20));
        it_assert_ok(remora_client_ping(c, &rtt));
    }
    it_assert_pattern(buf, 0, 1 << 20);
    free(buf);
}

static void check(const char *who, double cpu_ms, double wall_ms)
{
    double frac = cpu_ms / wall_ms;
    printf("# %s: %.1f ms CPU in %.0f ms (%.2f%% of a core)\n", who, cpu_ms, wall_ms, frac * 100);
    if (frac > LIMIT_FRACTION)
        fail_msg("%s used %.1f ms of CPU in %.0f ms idle (%.2f%% of a core, limit %.0f%%)", who,
                 cpu_ms, wall_ms, frac * 100, LIMIT_FRACTION * 100);
}

/* A server nobody talks to sleeps. */
static void test_server_alone_is_idle(void **state)
{
    it_server_t s;
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    it_sleep_ms(300); /* let start-up work finish */
    long t0 = it_proc_cpu_ticks(s.pid);
    double w0 = it_now_ms();
    it_sleep_ms(WINDOW_MS);
    long t1 = it_proc_cpu_ticks(s.pid);
    double w1 = it_now_ms();
    assert_true(t0 >= 0 && t1 >= 0);
    check("server, no client", ticks_to_ms(t1 - t0), w1 - w0);
    assert_int_equal(it_server_stop(&s), 0);
}

/* A server and a library client, connected, both idle after traffic. */
static void test_connected_pair_is_idle(void **state)
{
    it_server_t s;
    it_client_t c;
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    it_assert_ok(it_client_open(&c, s.addr, NULL));
    some_traffic(c.client);
    it_sleep_ms(300);

    long t0 = it_proc_cpu_ticks(s.pid);
    double c0 = process_cpu_ms(), w0 = it_now_ms();
    it_sleep_ms(WINDOW_MS);
    long t1 = it_proc_cpu_ticks(s.pid);
    double c1 = process_cpu_ms(), w1 = it_now_ms();
    assert_true(t0 >= 0 && t1 >= 0);
    check("server, idle client connected", ticks_to_ms(t1 - t0), w1 - w0);
    check("library client (this process)", c1 - c0, w1 - w0);

    /* Still connected and working after the quiet spell. */
    some_traffic(c.client);
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

/* Several idle clients on one server, each in its own context. */
static void test_many_idle_clients(void **state)
{
    enum { N = 4 };
    it_server_t s;
    it_client_t c[N];
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    for (int i = 0; i < N; i++) {
        it_assert_ok(it_client_open(&c[i], s.addr, NULL));
        some_traffic(c[i].client);
    }
    it_sleep_ms(300);
    long t0 = it_proc_cpu_ticks(s.pid);
    double c0 = process_cpu_ms(), w0 = it_now_ms();
    it_sleep_ms(WINDOW_MS);
    long t1 = it_proc_cpu_ticks(s.pid);
    double c1 = process_cpu_ms(), w1 = it_now_ms();
    check("server, 4 idle clients", ticks_to_ms(t1 - t0), w1 - w0);
    /* Four contexts, four progress threads: the limit is per client. */
    check("4 library clients (per client)", (c1 - c0) / N, w1 - w0);
    for (int i = 0; i < N; i++)
        it_client_close(&c[i]);
    assert_int_equal(it_server_stop(&s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_server_alone_is_idle, it_teardown_reap),
        cmocka_unit_test_teardown(test_connected_pair_is_idle, it_teardown_reap),
        cmocka_unit_test_teardown(test_many_idle_clients, it_teardown_reap),
    };

    it_init("idle-cpu");
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
