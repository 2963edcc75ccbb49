/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rm_env_u64 (src/util/env.h): the REMORA_* integers. Unset or empty: the
 * default; a decimal integer in range: taken; anything else (signs, garbage,
 * out of range, overflow): refused, the default used.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "util/env.h"

#define VAR "REMORA_TEST_ENV_U64"

static uint64_t with(const char *value)
{
    if (value)
        setenv(VAR, value, 1);
    else
        unsetenv(VAR);
    return rm_env_u64(VAR, 7, 1, 1000);
}

static void test_env_u64(void **state)
{
    (void)state;
    assert_int_equal(with(NULL), 7);
    assert_int_equal(with(""), 7);
    assert_int_equal(with("1"), 1);
    assert_int_equal(with("1000"), 1000);
    assert_int_equal(with("0"), 7);    /* below min */
    assert_int_equal(with("1001"), 7); /* above max */
    assert_int_equal(with("-5"), 7);   /* strtoull would wrap it */
    assert_int_equal(with("12abc"), 7);
    assert_int_equal(with("abc"), 7);
    assert_int_equal(with("99999999999999999999999"), 7); /* overflow */
    assert_int_equal(with(" 5"), 7);  /* digits only: strtoull would skip blanks */
    assert_int_equal(with(" -5"), 7); /* ... and then wrap a sign */
    assert_int_equal(with("+5"), 7);
    unsetenv(VAR);
    assert_int_equal(rm_env_u64(VAR, 0, 0, UINT64_MAX), 0);
    setenv(VAR, "18446744073709551615", 1);
    assert_true(rm_env_u64(VAR, 0, 0, UINT64_MAX) == UINT64_MAX);
    unsetenv(VAR);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_u64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
