/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCX's TCP segment sizes (src/engine/tcp_segs.c): what a context records
 * (remora's choice by how servers connect, or the environment's, read as UCX reads
 * memory units), and the rule a peer's hello is held to (each side's send
 * segments fit the other's receive segments; an older peer is taken for
 * 256k/512k; 0 is not checked). The refusals on real connections:
 * tests/integration/test_tcp_segs.c. Also the rendezvous threshold for host
 * bodies (REMORA_RNDV_MIN), and that lanes take the parent's settings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine.h"

#define K 1024u

/* A context created under UCX_TCP_TX_SEG_SIZE=tx, UCX_TCP_RX_SEG_SIZE=rx
 * (NULL: unset); its recorded sizes. */
static void recorded(const char *tx, const char *rx, uint32_t *tx_p, uint32_t *rx_p)
{
    remora_context_h ctx;

    unsetenv("UCX_TCP_TX_SEG_SIZE");
    unsetenv("UCX_TCP_RX_SEG_SIZE");
    if (tx)
        setenv("UCX_TCP_TX_SEG_SIZE", tx, 1);
    if (rx)
        setenv("UCX_TCP_RX_SEG_SIZE", rx, 1);
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    *tx_p = ctx->tcp_tx_seg;
    *rx_p = ctx->tcp_rx_seg;
    remora_context_destroy(ctx);
    unsetenv("UCX_TCP_TX_SEG_SIZE");
    unsetenv("UCX_TCP_RX_SEG_SIZE");
}

static void test_defaults_by_version(void **state)
{
    uint32_t tx, rx;
    (void)state;

    recorded(NULL, NULL, &tx, &rx);
    if (rm_ucx_cm_wanted()) {
        assert_int_equal(tx, 8 * K);
        assert_int_equal(rx, 64 * K);
    } else {
        assert_int_equal(tx, 256 * K);
        assert_int_equal(rx, 512 * K);
    }
}

static void test_environment_read_as_ucx_does(void **state)
{
    uint32_t tx, rx;
    (void)state;

    recorded("32k", "1MB", &tx, &rx);
    assert_int_equal(tx, 32 * K);
    assert_int_equal(rx, 1024 * K);
    recorded("65536", "128kb", &tx, &rx);
    assert_int_equal(tx, 64 * K);
    assert_int_equal(rx, 128 * K);
    /* one set: the other keeps UCX's default */
    recorded(NULL, "256K", &tx, &rx);
    assert_int_equal(tx, 8 * K);
    assert_int_equal(rx, 256 * K);
    recorded("16k", NULL, &tx, &rx);
    assert_int_equal(tx, 16 * K);
    assert_int_equal(rx, 64 * K);
}

static remora_status_t fit(uint32_t own_tx, uint32_t own_rx, int sent, uint32_t tx, uint32_t rx,
                           char *why, size_t n)
{
    struct remora_context ctx;

    memset(&ctx, 0, sizeof(ctx));
    ctx.tcp_tx_seg = own_tx;
    ctx.tcp_rx_seg = own_rx;
    why[0]         = '\0';
    return rm_tcp_segs_fit(&ctx, sent, tx, rx, why, n);
}

static void test_fit_rule(void **state)
{
    char why[256];
    (void)state;

    assert_int_equal(fit(8 * K, 64 * K, 1, 8 * K, 64 * K, why, sizeof(why)), REMORA_OK);
    assert_int_equal(fit(8 * K, 64 * K, 1, 64 * K, 8 * K, why, sizeof(why)), REMORA_OK);
    /* the peer's sends do not fit our receive segments */
    assert_int_equal(fit(8 * K, 64 * K, 1, 256 * K, 512 * K, why, sizeof(why)),
                     REMORA_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "256 KiB"));
    assert_non_null(strstr(why, "UCX_TCP_RX_SEG_SIZE=256k"));
    /* ours do not fit the peer's */
    assert_int_equal(fit(256 * K, 512 * K, 1, 8 * K, 64 * K, why, sizeof(why)),
                     REMORA_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "UCX_TCP_TX_SEG_SIZE=64k"));
    /* an older peer sent none: 256k/512k */
    assert_int_equal(fit(256 * K, 512 * K, 0, 0, 0, why, sizeof(why)), REMORA_OK);
    assert_int_equal(fit(8 * K, 64 * K, 0, 0, 0, why, sizeof(why)), REMORA_ERR_UNSUPPORTED);
    /* 0, on either side, is not checked */
    assert_int_equal(fit(8 * K, 64 * K, 1, 0, 0, why, sizeof(why)), REMORA_OK);
    assert_int_equal(fit(0, 0, 1, 256 * K, 4 * K, why, sizeof(why)), REMORA_OK);
    /* a short buffer still gets a terminated message */
    assert_int_equal(fit(8 * K, 64 * K, 1, 256 * K, 512 * K, why, 8), REMORA_ERR_UNSUPPORTED);
    assert_int_equal(strlen(why), 7);
}

/* The context's rendezvous threshold under REMORA_RNDV_MIN=v (NULL: unset). */
static uint32_t rndv_min(const char *v)
{
    remora_context_h ctx;
    uint32_t min;

    unsetenv("REMORA_RNDV_MIN");
    if (v)
        setenv("REMORA_RNDV_MIN", v, 1);
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    min = ctx->rndv_min;
    remora_context_destroy(ctx);
    unsetenv("REMORA_RNDV_MIN");
    return min;
}

/* 64 KiB where UCX 1.16's manager endpoints carry rendezvous by zero copy,
 * else UCX's choice (0); the environment's value wins, a bad one is refused. */
static void test_rndv_min(void **state)
{
    uint32_t dflt = rm_ucx_at_least(1, 16) && rm_ucx_cm_wanted() ? 64 * K : 0;
    (void)state;

    assert_int_equal(rndv_min(NULL), dflt);
    assert_int_equal(rndv_min("4096"), 4096);
    assert_int_equal(rndv_min("0"), 0);
    assert_int_equal(rndv_min("lots"), dflt);
    assert_int_equal(rndv_min("-1"), dflt);
}

/* A lane shares its parent's UCX context, so it sends and receives with the
 * parent's segments and rendezvous threshold. */
static void test_lane_takes_parent_settings(void **state)
{
    remora_context_h ctx, lane;
    (void)state;

    setenv("REMORA_RNDV_MIN", "12345", 1);
    setenv("UCX_TCP_TX_SEG_SIZE", "16k", 1);
    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);
    unsetenv("REMORA_RNDV_MIN");
    unsetenv("UCX_TCP_TX_SEG_SIZE");
    assert_int_equal(rm_engine_lane_create(ctx, &lane), REMORA_OK);
    assert_int_equal(lane->rndv_min, 12345);
    assert_int_equal(lane->tcp_tx_seg, ctx->tcp_tx_seg);
    assert_int_equal(lane->tcp_rx_seg, ctx->tcp_rx_seg);
    remora_context_destroy(lane);
    remora_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_by_version),
        cmocka_unit_test(test_environment_read_as_ucx_does),
        cmocka_unit_test(test_fit_rule),
        cmocka_unit_test(test_rndv_min),
        cmocka_unit_test(test_lane_takes_parent_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
