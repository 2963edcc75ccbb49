/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The hand-off rule of a driver that leaves with large transfers in flight
 * (src/engine/engine.h, rm_engine_away_avg): a new context hands off; a
 * caller that keeps coming back quickly stops getting hand-offs; one that
 * starts working between waits gets them again at once; a single very long
 * pause is forgotten after a bounded number of quick returns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/engine.h"

/* Returns until the average is no longer due; their count. */
static int returns_until_quiet(uint64_t *avg, uint64_t away_ns, int max)
{
    int n = 0;
    while (rm_engine_hand_off_due(*avg) && n < max) {
        *avg = rm_engine_away_avg(*avg, away_ns);
        n++;
    }
    return n;
}

/* The average of a caller that has shown it comes back after 1 us. */
static uint64_t quick_caller(void)
{
    uint64_t avg = RM_HAND_OFF_AWAY_START_NS;
    returns_until_quiet(&avg, 1000, 1000);
    return avg;
}

static void test_new_context_hands_off(void **state)
{
    (void)state;
    assert_true(rm_engine_hand_off_due(RM_HAND_OFF_AWAY_START_NS));
    assert_false(rm_engine_hand_off_due(RM_HAND_OFF_AWAY_NS - 1));
    assert_true(rm_engine_hand_off_due(RM_HAND_OFF_AWAY_NS));
}

static void test_quick_caller_learnt(void **state)
{
    (void)state;
    uint64_t avg = RM_HAND_OFF_AWAY_START_NS;
    int n = returns_until_quiet(&avg, 5000, 1000); /* back after 5 us each time */
    assert_in_range(n, 8, 16);                     /* about a dozen */
    for (int i = 0; i < 1000; i++) {               /* and it stays quiet */
        avg = rm_engine_away_avg(avg, 5000);
        assert_false(rm_engine_hand_off_due(avg));
    }
}

static void test_working_caller_hands_off_at_once(void **state)
{
    (void)state;
    uint64_t avg = rm_engine_away_avg(quick_caller(), 1000000); /* 1 ms of work on its block */
    assert_true(rm_engine_hand_off_due(avg));
    for (int i = 0; i < 100; i++) /* steady work of 100 us a block */
        avg = rm_engine_away_avg(avg, 100000);
    assert_true(rm_engine_hand_off_due(avg));
}

static void test_long_pause_bounded(void **state)
{
    (void)state;
    uint64_t avg = rm_engine_away_avg(quick_caller(), UINT64_MAX / 2); /* an hour asleep, say */
    assert_true(avg <= RM_HAND_OFF_AWAY_MAX_NS);
    assert_in_range(returns_until_quiet(&avg, 1000, 1000), 1, 60);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_context_hands_off),
        cmocka_unit_test(test_quick_caller_learnt),
        cmocka_unit_test(test_working_caller_hands_off_at_once),
        cmocka_unit_test(test_long_pause_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
