/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rm_warn_peer (src/util/log.h): lines a peer can cause at will. A burst
 * from one call site gives RM_LOG_PEER_BURST lines a second, then the
 * first line of a later second counts those left out; another call site
 * has its own budget. Lines go to a log sink (remora_context_params_t's
 * log_cb, here pushed directly).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/log.h"

static unsigned g_lines, g_counts;

static void sink(remora_log_level_t level, const char *where, const char *msg, void *arg)
{
    (void)level;
    (void)where;
    (void)arg;
    g_lines++;
    if (strstr(msg, "lines like the next left out") != NULL)
        g_counts++;
}

static void flood(unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        rm_warn_peer("malformed message %u", i);
}

static void other_site(void) { rm_warn_peer("another kind of refusal"); }

static void test_peer_lines_limited(void **state)
{
    (void)state;
    rm_log_init();
    rm_log_sink_t *s = rm_log_sink_push(sink, NULL);
    assert_non_null(s);
    flood(100000); /* within a second or two: a burst each, and one count */
    assert_true(g_lines >= RM_LOG_PEER_BURST && g_lines <= 2 * RM_LOG_PEER_BURST + 1);
    unsigned before = g_lines;
    other_site(); /* its own budget */
    assert_int_equal(g_lines, before + 1);
    sleep(1); /* a new second: the next line first says how many were dropped */
    g_lines = g_counts = 0;
    flood(1);
    assert_int_equal(g_counts, 1);
    assert_int_equal(g_lines, 2);
    rm_log_sink_remove(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_lines_limited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
