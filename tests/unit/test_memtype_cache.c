/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora turns UCX's memory-type cache off before its first UCX context
 * (engine.c, config_memtype_cache): with a UCX built with CUDA, the cache
 * takes GPU memory it never saw allocated for host memory. A user's
 * UCX_MEMTYPE_CACHE wins. Runs with any UCX (the option exists without CUDA).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <remora/remora.h>
#include <ucs/config/global_opts.h>

static void memtype_cache_value(char *out, size_t len)
{
    assert_int_equal(ucs_global_opts_get_value("MEMTYPE_CACHE", out, len), UCS_OK);
}

static void test_off_after_context(void **state)
{
    remora_context_h ctx;
    char v[32];
    (void)state;

    unsetenv("UCX_MEMTYPE_CACHE");
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    memtype_cache_value(v, sizeof(v));
    assert_string_equal(v, "n");
    remora_context_destroy(ctx);
}

static void test_user_setting_wins(void **state)
{
    remora_context_h ctx;
    char v[32];
    (void)state;

    /* as if the process had started with UCX_MEMTYPE_CACHE=y */
    assert_int_equal(ucs_global_opts_set_value("MEMTYPE_CACHE", "y"), UCS_OK);
    setenv("UCX_MEMTYPE_CACHE", "y", 1);
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    memtype_cache_value(v, sizeof(v));
    assert_string_equal(v, "y");
    remora_context_destroy(ctx);
    unsetenv("UCX_MEMTYPE_CACHE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_after_context),
        cmocka_unit_test(test_user_setting_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
