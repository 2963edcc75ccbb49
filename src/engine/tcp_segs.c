/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCX's TCP segment sizes: which this context uses, and whether a peer's
 * fit them.
 *
 * UCX's TCP transport receives each message into one receive segment, so a
 * peer's send segments must fit ours: a larger one trips UCX's assertion
 * (uct_tcp_ep_progress_am_rx) and takes the process down. UCX exchanges no
 * settings, so remora peers tell each other theirs in the hello and refuse a
 * peer that does not fit before any UCX endpoint exists.
 *
 * Which sizes: where rendezvous data goes by zero copy (connection-manager
 * endpoints, remora's default from UCX 1.16 on), the part of it that
 * arrives with its header is copied out of a receive segment, so small
 * receive segments copy less. UCX's own 8 KiB / 64 KiB read 1 MiB blocks
 * about 7 % faster than 256 KiB / 512 KiB on one connection, and ucp_am_bw
 * 30 % faster (docs/performance.md, session 37). Where it goes as
 * active-message fragments of one send segment each (UCX 1.13's
 * worker-address endpoints, which get no zero-copy lanes with peer-failure
 * handling; REMORA_CM=0 on any version), 256 KiB fragments read 3x faster
 * than 8 KiB ones. So the choice follows rm_ucx_cm_wanted: a process that
 * sets REMORA_CM=0 for its servers picks the large ones, and its clients
 * must then run with the same setting (they are told so when they do not).
 */
#include "engine.h"
#include "ucx_addr.h"

#include <stdio.h>
#include <stdlib.h>

#include <ucs/config/parser.h>

/* UCX's defaults, and what remora picks for worker-address endpoints (and
 * what every remora before the hello carried sizes used). */
#define SEG_UCX_TX  (8u << 10)
#define SEG_UCX_RX  (64u << 10)
#define SEG_OLD_TX  (256u << 10)
#define SEG_OLD_RX  (512u << 10)

/* A UCX memory-units setting in bytes, read by the parser UCX reads it
 * with; 0 for "auto", "inf" or past 4 GiB (not known, not checked). */
static uint32_t memunits(const char *s)
{
    size_t v;

    return ucs_config_sscanf_memunits(s, &v, NULL) && v <= UINT32_MAX ? (uint32_t)v : 0;
}

void rm_tcp_segs_config(remora_context_h ctx, ucp_config_t *config)
{
    const char *tx = getenv("UCX_TCP_TX_SEG_SIZE"), *rx = getenv("UCX_TCP_RX_SEG_SIZE");
    char v[16];

    if (tx != NULL || rx != NULL) { /* the user's: the one not set keeps UCX's default */
        ctx->tcp_tx_seg = tx ? memunits(tx) : SEG_UCX_TX;
        ctx->tcp_rx_seg = rx ? memunits(rx) : SEG_UCX_RX;
        return;
    }
    /* REMORA_CM=0 (or UCX before 1.16) means worker-address endpoints. */
    int zcopy_lanes = rm_ucx_cm_wanted();
    ctx->tcp_tx_seg = zcopy_lanes ? SEG_UCX_TX : SEG_OLD_TX;
    ctx->tcp_rx_seg = zcopy_lanes ? SEG_UCX_RX : SEG_OLD_RX;
    /* UCX takes transport settings here by their unprefixed names; only its
     * TCP transport has these two. */
    snprintf(v, sizeof(v), "%u", ctx->tcp_tx_seg);
    ucp_config_modify(config, "TX_SEG_SIZE", v);
    snprintf(v, sizeof(v), "%u", ctx->tcp_rx_seg);
    ucp_config_modify(config, "RX_SEG_SIZE", v);
}

static void count_one(void *arg, const struct sockaddr_storage *ss)
{
    (void)ss;
    (*(unsigned *)arg)++;
}

void rm_tcp_segs_known(remora_context_h ctx)
{
    unsigned n = 0;

    /* A worker without TCP interfaces never receives a TCP segment. */
    if (rm_ucx_addr_tcp(ctx->worker_addr, ctx->worker_addr_len, count_one, &n) == 0 && n == 0)
        ctx->tcp_tx_seg = ctx->tcp_rx_seg = 0;
}

static unsigned kib(uint32_t bytes)
{
    return (bytes + 1023) >> 10;
}

/* One side's sends do not fit the other's receive segments: why, and the
 * setting (var) to change on this side to value bytes. */
static remora_status_t misfit(char *why, size_t n, const char *sender, uint32_t sends,
                              const char *receiver, uint32_t receives, const char *var,
                              uint32_t value)
{
    snprintf(why, n,
             "%s UCX sends TCP segments of %u KiB, larger than %s receive segments (%u KiB): "
             "set %s=%uk here, or run both on one remora and UCX version with one REMORA_CM "
             "(remora uses 8k/64k with UCX's connection manager, 256k/512k without)",
             sender, kib(sends), receiver, kib(receives), var, kib(value));
    return REMORA_ERR_UNSUPPORTED;
}

remora_status_t rm_tcp_segs_fit(remora_context_h ctx, int sent, uint32_t peer_tx,
                                uint32_t peer_rx, char *why, size_t n)
{
    if (!sent) { /* an older remora: its sizes were fixed */
        peer_tx = SEG_OLD_TX;
        peer_rx = SEG_OLD_RX;
    }
    if (ctx->tcp_rx_seg && peer_tx > ctx->tcp_rx_seg)
        return misfit(why, n, "the peer's", peer_tx, "this side's", ctx->tcp_rx_seg,
                      "UCX_TCP_RX_SEG_SIZE", peer_tx);
    if (peer_rx && ctx->tcp_tx_seg > peer_rx)
        return misfit(why, n, "this side's", ctx->tcp_tx_seg, "the peer's", peer_rx,
                      "UCX_TCP_TX_SEG_SIZE", peer_rx);
    return REMORA_OK;
}
