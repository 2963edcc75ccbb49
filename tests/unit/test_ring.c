/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of src/ring/ring.c: the ring memory format (ring_format.h), the
 * local producer and readers (push, reserve/commit, get, newest, oldest),
 * ring images (remora_ring_create_from_image), the seqlock under a concurrent
 * producer, and the stream frame helpers of tools/cli_util.c that check it.
 *
 * Design notes
 * - Expected header bytes, strides and slot offsets are written out by hand
 *   (or computed with local little-endian helpers), never taken from the code
 *   under test.
 * - Header parsing is handed a heap copy of exactly the bytes under test
 *   (dup_exact), so a read past the end is a heap overflow that the sanitizer
 *   build (REMORA_SANITIZE=ON) reports.
 * - Rings allocate through a remora context: one is made for the whole group.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cli_util.h"
#include "ring/ring.h"

static remora_context_h g_ctx;

/* ---------------------------------------------------------------- helpers */

static uint8_t *dup_exact(const void *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    assert_non_null(d);
    if (n)
        memcpy(d, p, n);
    return d;
}

static void le_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int parse_exact(const void *hdr, size_t len, uint64_t avail, rm_ring_shape_t *s)
{
    uint8_t *d = dup_exact(hdr, len);
    int rc     = rm_ring_hdr_parse(d, len, avail, s);
    free(d);
    return rc;
}

/* A header written by hand: the layout of ring_format.h. */
static void hand_hdr(uint8_t h[64], uint64_t elem, uint64_t cap, uint64_t stride, uint64_t head,
                     uint64_t claimed, uint64_t first)
{
    memset(h, 0, 64);
    memcpy(h, "RRNG", 4);
    h[4] = 1;  /* version, u16 */
    h[6] = 64; /* header length, u16 */
    le_put64(h + 8, elem);
    le_put64(h + 16, cap);
    le_put64(h + 24, stride);
    le_put64(h + 32, head);
    le_put64(h + 40, claimed);
    le_put64(h + 48, first);
}

static uint64_t hand_stride(uint64_t elem) { return 8 + (elem + 7) / 8 * 8; }

static remora_ring_h make_ring(size_t elem, size_t cap)
{
    remora_ring_params_t p = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                            REMORA_RING_FIELD_CAPACITY,
                              .elem_size  = elem,
                              .capacity   = cap};
    remora_ring_h r        = NULL;

    assert_int_equal(remora_ring_create(g_ctx, &p, &r), REMORA_OK);
    assert_non_null(r);
    return r;
}

static const uint8_t *ring_bytes_of(remora_ring_h r)
{
    return remora_mem_address(remora_ring_mem(r));
}

/* Element content for seq: every byte depends on seq and its index. */
static void fill_elem(uint8_t *buf, size_t n, uint64_t seq)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(seq * 131 + i * 7 + 1);
}

static void push_seq(remora_ring_h r, uint64_t expect_seq)
{
    size_t n     = remora_ring_elem_size(r);
    uint8_t *buf = malloc(n);
    uint64_t seq = UINT64_MAX;

    assert_non_null(buf);
    fill_elem(buf, n, expect_seq);
    assert_int_equal(remora_ring_push(r, buf, n, &seq), REMORA_OK);
    assert_int_equal(seq, expect_seq);
    free(buf);
}

/* get(seq) is REMORA_OK with the content fill_elem made for seq. */
static void assert_holds(remora_ring_h r, uint64_t seq)
{
    size_t n        = remora_ring_elem_size(r);
    uint8_t *buf    = malloc(n + 8), *want = malloc(n);

    assert_non_null(buf);
    assert_non_null(want);
    memset(buf, 0xee, n + 8);
    fill_elem(want, n, seq);
    assert_int_equal(remora_ring_get(r, seq, buf, n + 8), REMORA_OK);
    assert_memory_equal(buf, want, n);
    for (size_t i = n; i < n + 8; i++) /* nothing written past elem_size */
        assert_int_equal(buf[i], 0xee);
    free(buf);
    free(want);
}

static void assert_not_held(remora_ring_h r, uint64_t seq)
{
    size_t n     = remora_ring_elem_size(r);
    uint8_t *buf = malloc(n);

    assert_non_null(buf);
    assert_int_equal(remora_ring_get(r, seq, buf, n), REMORA_ERR_OUT_OF_RANGE);
    free(buf);
}

static void assert_newest(remora_ring_h r, uint64_t seq)
{
    size_t n     = remora_ring_elem_size(r);
    uint8_t *buf = malloc(n), *want = malloc(n);
    uint64_t got = UINT64_MAX;

    assert_non_null(buf);
    assert_non_null(want);
    fill_elem(want, n, seq);
    assert_int_equal(remora_ring_newest(r, buf, n, &got), REMORA_OK);
    assert_int_equal(got, seq);
    assert_memory_equal(buf, want, n);
    free(buf);
    free(want);
}

static void assert_oldest(remora_ring_h r, uint64_t seq)
{
    size_t n     = remora_ring_elem_size(r);
    uint8_t *buf = malloc(n), *want = malloc(n);
    uint64_t got = UINT64_MAX;

    assert_non_null(buf);
    assert_non_null(want);
    fill_elem(want, n, seq);
    assert_int_equal(remora_ring_oldest(r, buf, n, &got), REMORA_OK);
    assert_int_equal(got, seq);
    assert_memory_equal(buf, want, n);
    free(buf);
    free(want);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int group_setup(void **state)
{
    remora_context_params_t p = {.field_mask = REMORA_CONTEXT_FIELD_NAME, .name = "test_ring"};
    return remora_context_create(&p, &g_ctx) == REMORA_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    remora_context_destroy(g_ctx);
    g_ctx = NULL;
    return 0;
}

/* ---------------------------------------------------------------- format */

static void test_stride(void **state)
{
    assert_int_equal(rm_ring_stride(1), 16);
    assert_int_equal(rm_ring_stride(8), 16);
    assert_int_equal(rm_ring_stride(9), 24);
    assert_int_equal(rm_ring_stride(13), 24);
    assert_int_equal(rm_ring_stride(16), 24);
    assert_int_equal(rm_ring_stride(4096), 4104);
    assert_int_equal(rm_ring_stride(RM_RING_ELEM_MAX), RM_RING_ELEM_MAX + 8);
}

static void test_bytes_bounds(void **state)
{
    assert_int_equal(rm_ring_bytes(0, 1), 0);
    assert_int_equal(rm_ring_bytes(1, 0), 0);
    assert_int_equal(rm_ring_bytes(0, 0), 0);
    assert_int_equal(rm_ring_bytes(RM_RING_ELEM_MAX + 1, 1), 0);
    assert_int_equal(rm_ring_bytes(UINT64_MAX, 1), 0);
    assert_int_equal(rm_ring_bytes(1, RM_RING_CAP_MAX + 1), 0);
    assert_int_equal(rm_ring_bytes(1, UINT64_MAX), 0);

    /* In bounds: 64 + capacity * stride. */
    assert_int_equal(rm_ring_bytes(1, 1), 64 + 16);
    assert_int_equal(rm_ring_bytes(8, 1), 64 + 16);
    assert_int_equal(rm_ring_bytes(13, 3), 64 + 3 * 24);
    assert_int_equal(rm_ring_bytes(4096, 8), 64 + 8 * 4104);
    assert_int_equal(rm_ring_bytes(RM_RING_ELEM_MAX, 1), 64 + 8 + (1ull << 40));
    assert_int_equal(rm_ring_bytes(1, RM_RING_CAP_MAX), 64 + 16 * (1ull << 32));

    /* Both at their maximum: 2^32 * (2^40 + 8) does not fit in 64 bits. */
    assert_int_equal(rm_ring_bytes(RM_RING_ELEM_MAX, RM_RING_CAP_MAX), 0);

    /* The overflow boundary for the largest element, computed in 128 bits:
     * the largest capacity whose ring fits in a u64, and one more. */
    unsigned __int128 stride = (unsigned __int128)RM_RING_ELEM_MAX + 8;
    uint64_t max_cap = (uint64_t)(((unsigned __int128)UINT64_MAX - 64) / stride);
    assert_true(max_cap <= RM_RING_CAP_MAX);
    assert_true(64 + (unsigned __int128)max_cap * stride <= UINT64_MAX);
    assert_true(64 + (unsigned __int128)(max_cap + 1) * stride > UINT64_MAX);
    assert_int_equal(rm_ring_bytes(RM_RING_ELEM_MAX, max_cap),
                     (uint64_t)(64 + (unsigned __int128)max_cap * stride));
    assert_int_equal(rm_ring_bytes(RM_RING_ELEM_MAX, max_cap + 1), 0);
}

static void test_hdr_init_parse_round_trip(void **state)
{
    static const struct { uint64_t elem, cap, first; } cases[] = {
        {1, 1, 0}, {8, 16, 0}, {13, 3, 7}, {4096, 8, 123456789}, {RM_RING_ELEM_MAX, 1, 0},
        {24, RM_RING_CAP_MAX, (1ull << 62) - 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t h[RM_RING_HDR_LEN + 8];
        rm_ring_shape_t s;
        uint64_t bytes = rm_ring_bytes(cases[i].elem, cases[i].cap);

        memset(h, 0xcc, sizeof(h));
        rm_ring_hdr_init(h, cases[i].elem, cases[i].cap, cases[i].first, 0);
        assert_int_equal(h[RM_RING_HDR_LEN], 0xcc); /* writes exactly 64 bytes */
        memset(&s, 0xa5, sizeof(s));
        assert_int_equal(parse_exact(h, RM_RING_HDR_LEN, bytes, &s), 0);
        assert_int_equal(s.elem_size, cases[i].elem);
        assert_int_equal(s.capacity, cases[i].cap);
        assert_int_equal(s.stride, hand_stride(cases[i].elem));
        assert_int_equal(s.head, cases[i].first);
        assert_int_equal(s.claimed, cases[i].first);
        assert_int_equal(s.first, cases[i].first);
        /* The init'd header equals the hand-written one. */
        uint8_t hand[64];
        hand_hdr(hand, cases[i].elem, cases[i].cap, hand_stride(cases[i].elem), cases[i].first,
                 cases[i].first, cases[i].first);
        assert_memory_equal(h, hand, 64);
        /* A longer buffer parses the same. */
        assert_int_equal(parse_exact(h, sizeof(h), bytes, &s), 0);
    }
}

static void test_hdr_layout_literal(void **state)
{
    static const uint8_t expect[64] = {
        'R', 'R', 'N', 'G', 0x01, 0x00, 0x40, 0x00,               /* magic, ver 1, len 64 */
        0x0d, 0, 0, 0, 0, 0, 0, 0,                                /* elem_size 13 */
        0x03, 0, 0, 0, 0, 0, 0, 0,                                /* capacity 3 */
        0x18, 0, 0, 0, 0, 0, 0, 0,                                /* stride 24 */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,           /* head */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,           /* claimed */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,           /* first */
        0, 0, 0, 0, 0, 0, 0, 0,                                   /* reserved */
    };
    uint8_t h[64];

    memset(h, 0x77, sizeof(h));
    rm_ring_hdr_init(h, 13, 3, 0x0102030405060708ull, 0);
    assert_memory_equal(h, expect, 64);
    assert_int_equal(RM_RING_MAGIC, le_get64((const uint8_t[8]){'R', 'R', 'N', 'G'}));
    assert_int_equal(rm_ring_get64(expect + 32), 0x0102030405060708ull);
    assert_int_equal(rm_ring_get64(expect + 1), 0x0d00400001474e52ull); /* any alignment */
}

/* A live ring's memory: the header as readers see it, and the stamped slots. */
static void test_live_ring_layout(void **state)
{
    remora_ring_h r = make_ring(13, 3);
    const uint8_t *m = ring_bytes_of(r);
    uint8_t e[13];
    void *slot;

    assert_int_equal(remora_mem_length(remora_ring_mem(r)), 64 + 3 * 24);
    assert_memory_equal(m, "RRNG\x01\x00\x40\x00", 8);
    assert_int_equal(le_get64(m + 8), 13);
    assert_int_equal(le_get64(m + 16), 3);
    assert_int_equal(le_get64(m + 24), 24);
    for (int i = 0; i < 3; i++) /* never written */
        assert_int_equal(le_get64(m + 64 + 24 * i), 0);

    for (uint64_t s = 0; s < 4; s++)
        push_seq(r, s);
    assert_int_equal(le_get64(m + 32), 4); /* head */
    assert_int_equal(le_get64(m + 40), 4); /* claimed */
    assert_int_equal(le_get64(m + 48), 0); /* first */
    assert_int_equal(le_get64(m + 56), 0);
    /* seq 3 in slot 0, 1 in slot 1, 2 in slot 2; stamps 2s+2 */
    static const uint64_t in_slot[3] = {3, 1, 2};
    for (int i = 0; i < 3; i++) {
        fill_elem(e, 13, in_slot[i]);
        assert_int_equal(le_get64(m + 64 + 24 * i), 2 * in_slot[i] + 2);
        assert_memory_equal(m + 64 + 24 * i + 8, e, 13);
    }

    /* A reservation: claimed = head + 1, the slot's stamp odd (2s+1). */
    assert_int_equal(remora_ring_reserve(r, &slot), REMORA_OK);
    assert_ptr_equal(slot, m + 64 + 24 * 1 + 8);
    assert_int_equal(le_get64(m + 32), 4);
    assert_int_equal(le_get64(m + 40), 5);
    assert_int_equal(le_get64(m + 64 + 24), 2 * 4 + 1);
    memset(slot, 0x5a, 13);
    uint64_t seq = 0;
    assert_int_equal(remora_ring_commit(r, &seq), REMORA_OK);
    assert_int_equal(seq, 4);
    assert_int_equal(le_get64(m + 32), 5);
    assert_int_equal(le_get64(m + 40), 5);
    assert_int_equal(le_get64(m + 64 + 24), 2 * 4 + 2);
    remora_ring_destroy(r);
}

static void test_hdr_parse_rejects(void **state)
{
    const uint64_t elem = 13, cap = 3, bytes = 64 + 3 * 24;
    uint8_t good[64], h[64];
    rm_ring_shape_t s;

    hand_hdr(good, elem, cap, 24, 10, 10, 4);
    assert_int_equal(parse_exact(good, 64, bytes, &s), 0);
    assert_int_equal(parse_exact(good, 64, UINT64_MAX, &s), 0);

#define REJECT(len, avail) assert_int_equal(parse_exact(h, (len), (avail), &s), -1)
#define ACCEPT(len, avail) assert_int_equal(parse_exact(h, (len), (avail), &s), 0)

    /* Short buffers, every length below 64. */
    memcpy(h, good, 64);
    for (size_t n = 0; n < 64; n++)
        REJECT(n, bytes);

    /* Magic: each byte, and the other byte order. */
    for (int i = 0; i < 4; i++) {
        memcpy(h, good, 64);
        h[i] ^= 0x20;
        REJECT(64, bytes);
    }
    memcpy(h, good, 64);
    memcpy(h, "GNRR", 4);
    REJECT(64, bytes);

    /* Version: 0, 2, and 1 with a high byte. */
    memcpy(h, good, 64);
    h[4] = 2;
    REJECT(64, bytes);
    h[4] = 0;
    REJECT(64, bytes);
    h[4] = 1;
    h[5] = 1;
    REJECT(64, bytes);

    /* Header length: 63, 65, 0, 64 + 256. */
    static const uint8_t lens[][2] = {{63, 0}, {65, 0}, {0, 0}, {64, 1}};
    for (size_t i = 0; i < 4; i++) {
        memcpy(h, good, 64);
        h[6] = lens[i][0];
        h[7] = lens[i][1];
        REJECT(64, bytes);
    }

    /* Stride: one too small, one too large, 16 (elem rounded down), 0. */
    static const uint64_t strides[] = {23, 25, 16, 0, 32};
    for (size_t i = 0; i < sizeof(strides) / sizeof(strides[0]); i++) {
        hand_hdr(h, elem, cap, strides[i], 10, 10, 4);
        REJECT(64, UINT64_MAX);
    }

    /* elem 0, capacity 0 (with a matching stride for elem 0). */
    hand_hdr(h, 0, cap, hand_stride(0), 10, 10, 4);
    REJECT(64, UINT64_MAX);
    hand_hdr(h, elem, 0, 24, 10, 10, 4);
    REJECT(64, UINT64_MAX);
    /* Bounds: elem > 2^40, capacity > 2^32, and the overflowing product. */
    hand_hdr(h, RM_RING_ELEM_MAX + 1, 1, hand_stride(RM_RING_ELEM_MAX + 1), 0, 0, 0);
    REJECT(64, UINT64_MAX);
    hand_hdr(h, 8, RM_RING_CAP_MAX + 1, 16, 0, 0, 0);
    REJECT(64, UINT64_MAX);
    hand_hdr(h, RM_RING_ELEM_MAX, RM_RING_CAP_MAX, hand_stride(RM_RING_ELEM_MAX), 0, 0, 0);
    REJECT(64, UINT64_MAX);

    /* The ring must fit in avail: exactly is fine, one byte less is not. */
    memcpy(h, good, 64);
    ACCEPT(64, bytes);
    REJECT(64, bytes - 1);
    REJECT(64, 64);
    REJECT(64, 0);

    /* Counters: first <= head <= claimed <= head + 1 < 2^62. */
    hand_hdr(h, elem, cap, 24, 10, 10, 11); /* first > head */
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, 10, 10, 10); /* first == head: empty clone */
    ACCEPT(64, bytes);
    hand_hdr(h, elem, cap, 24, 10, 9, 4); /* claimed < head */
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, 10, 11, 4); /* claimed == head + 1 */
    ACCEPT(64, bytes);
    hand_hdr(h, elem, cap, 24, 10, 12, 4); /* claimed > head + 1 */
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, 10, UINT64_MAX, 4);
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, 1ull << 62, 1ull << 62, 0); /* claimed == 2^62 */
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, (1ull << 62) - 1, 1ull << 62, 0);
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, (1ull << 62) - 1, (1ull << 62) - 1, 0);
    ACCEPT(64, bytes);
    hand_hdr(h, elem, cap, 24, UINT64_MAX, UINT64_MAX, UINT64_MAX);
    REJECT(64, bytes);

    /* The last word, data_stride: 0 (elements in the slots), or the element
     * pitch of a separate data block (a GPU ring), whose slots are bare stamps. */
    memcpy(h, good, 64);
    le_put64(h + 56, 0xdeadbeef);
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 8, 10, 10, 4);
    le_put64(h + 56, (elem + 7) / 8 * 8);
    ACCEPT(64, 64 + 8 * cap); /* the control block alone */
    REJECT(64, 64 + 8 * cap - 1);
    le_put64(h + 56, (elem + 7) / 8 * 8 + 8); /* wrong pitch */
    REJECT(64, bytes);
    hand_hdr(h, elem, cap, 24, 10, 10, 4); /* slots must be bare stamps */
    le_put64(h + 56, (elem + 7) / 8 * 8);
    REJECT(64, bytes);
#undef REJECT
#undef ACCEPT
}

/* A header copied while the producer runs: counters only range-checked,
 * claimed raised to at least head. */
static void test_hdr_parse_live(void **state)
{
    const uint64_t bytes = 64 + 3 * 24;
    uint8_t h[64];
    rm_ring_shape_t s, t;

    hand_hdr(h, 13, 3, 24, 10, 11, 4);
    assert_int_equal(parse_exact(h, 64, bytes, &s), 0);
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), 0);
    assert_memory_equal(&s, &t, sizeof(s));

    hand_hdr(h, 13, 3, 24, 10, 7, 4); /* claimed read before head moved on */
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), 0);
    assert_int_equal(t.head, 10);
    assert_int_equal(t.claimed, 10);
    assert_int_equal(t.first, 4);
    hand_hdr(h, 13, 3, 24, 10, 500, 4); /* claimed read after head */
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), 0);
    assert_int_equal(t.claimed, 500);

    hand_hdr(h, 13, 3, 24, 10, 10, 11); /* first > head */
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), -1);
    hand_hdr(h, 13, 3, 24, 10, 1ull << 62, 4);
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), -1);
    hand_hdr(h, 13, 3, 24, 10, 10, 4);
    assert_int_equal(rm_ring_hdr_parse_live(h, 63, bytes, &t), -1);
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes - 1, &t), -1);
    hand_hdr(h, 13, 3, 16, 10, 10, 4);
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), -1);
    hand_hdr(h, 13, 3, 24, 10, 10, 4);
    h[4] = 2;
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), -1);
}

/* Sequences stay below 2^62 (so 2s+2 stamps cannot wrap): that must hold for
 * head too, also in the live parse, which raises claimed to head. */
static void test_hdr_parse_live_head_bound(void **state)
{
    const uint64_t bytes = 64 + 3 * 24;
    uint8_t h[64];
    rm_ring_shape_t t;

    hand_hdr(h, 13, 3, 24, (1ull << 62) - 1, 0, 0);
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), 0);
    assert_int_equal(t.claimed, (1ull << 62) - 1);

    hand_hdr(h, 13, 3, 24, 1ull << 63, 0, 0); /* head out of bounds, claimed below it */
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), -1);
    hand_hdr(h, 13, 3, 24, UINT64_MAX, 5, 0);
    assert_int_equal(rm_ring_hdr_parse_live(h, 64, bytes, &t), -1);
}

/* ---------------------------------------------------------------- local API */

static void test_create_rejects(void **state)
{
    remora_ring_params_t p = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                            REMORA_RING_FIELD_CAPACITY,
                              .elem_size  = 8,
                              .capacity   = 4};
    remora_ring_params_t q;
    remora_ring_h r = (remora_ring_h)(uintptr_t)0x1;

    assert_int_equal(remora_ring_create(NULL, &p, &r), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_create(g_ctx, NULL, &r), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_create(g_ctx, &p, NULL), REMORA_ERR_INVALID_PARAM);
    q            = p;
    q.field_mask = REMORA_RING_FIELD_ELEM_SIZE;
    assert_int_equal(remora_ring_create(g_ctx, &q, &r), REMORA_ERR_INVALID_PARAM);
    q.field_mask = REMORA_RING_FIELD_CAPACITY;
    assert_int_equal(remora_ring_create(g_ctx, &q, &r), REMORA_ERR_INVALID_PARAM);
    q = p, q.elem_size = 0;
    assert_int_equal(remora_ring_create(g_ctx, &q, &r), REMORA_ERR_INVALID_PARAM);
    q = p, q.capacity = 0;
    assert_int_equal(remora_ring_create(g_ctx, &q, &r), REMORA_ERR_INVALID_PARAM);
    q = p, q.elem_size = (size_t)RM_RING_ELEM_MAX + 1;
    assert_int_equal(remora_ring_create(g_ctx, &q, &r), REMORA_ERR_INVALID_PARAM);
    q = p, q.capacity = (size_t)RM_RING_CAP_MAX + 1;
    assert_int_equal(remora_ring_create(g_ctx, &q, &r), REMORA_ERR_INVALID_PARAM);
    assert_ptr_equal(r, (remora_ring_h)(uintptr_t)0x1); /* untouched on failure */

    r = make_ring(8, 4);
    assert_int_equal(remora_ring_elem_size(r), 8);
    assert_int_equal(remora_ring_capacity(r), 4);
    assert_non_null(remora_ring_mem(r));
    assert_int_equal(remora_mem_length(remora_ring_mem(r)), 64 + 4 * 16);
    remora_ring_destroy(r);
}

static void test_null_params(void **state)
{
    remora_ring_h r = make_ring(16, 4);
    uint8_t buf[32] = {0};
    uint64_t seq    = 77;
    void *slot      = NULL;

    assert_int_equal(remora_ring_push(NULL, buf, 16, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_push(r, NULL, 1, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_reserve(NULL, &slot), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_reserve(r, NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_commit(NULL, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(seq, 77);
    assert_int_equal(remora_ring_head(r), 0); /* none of the above pushed */

    assert_int_equal(remora_ring_push(r, buf, 16, NULL), REMORA_OK); /* seq_p may be NULL */
    assert_int_equal(remora_ring_get(NULL, 0, buf, 16), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_get(r, 0, NULL, 16), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_get(r, 0, buf, 15), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_get(r, 0, buf, 16), REMORA_OK);
    assert_int_equal(remora_ring_newest(NULL, buf, 16, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_newest(r, NULL, 16, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_newest(r, buf, 15, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_newest(r, buf, 16, NULL), REMORA_OK);
    assert_int_equal(remora_ring_oldest(NULL, buf, 16, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_oldest(r, NULL, 16, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_oldest(r, buf, 15, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_oldest(r, buf, 16, NULL), REMORA_OK);
    assert_int_equal(seq, 77);

    assert_int_equal(remora_ring_head(NULL), 0);
    assert_int_equal(remora_ring_elem_size(NULL), 0);
    assert_int_equal(remora_ring_capacity(NULL), 0);
    assert_null(remora_ring_mem(NULL));
    remora_ring_destroy(NULL);

    assert_int_equal(remora_ring_create_from_image(NULL, ring_bytes_of(r), 64 + 4 * 24, &r),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_create_from_image(g_ctx, NULL, 64 + 4 * 24, &r),
                     REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_create_from_image(g_ctx, ring_bytes_of(r), 64 + 4 * 24, NULL),
                     REMORA_ERR_INVALID_PARAM);
    remora_ring_destroy(r);
}

static void test_empty_ring(void **state)
{
    remora_ring_h r = make_ring(16, 4);
    uint8_t buf[16];
    uint64_t seq = 77;

    assert_int_equal(remora_ring_head(r), 0);
    assert_not_held(r, 0);
    assert_not_held(r, 1);
    assert_not_held(r, UINT64_MAX);
    assert_int_equal(remora_ring_newest(r, buf, 16, &seq), REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_ring_oldest(r, buf, 16, &seq), REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(seq, 77);
    remora_ring_destroy(r);
}

static void test_push_get(void **state)
{
    remora_ring_h r = make_ring(32, 8);

    for (uint64_t s = 0; s < 5; s++) {
        push_seq(r, s);
        assert_int_equal(remora_ring_head(r), s + 1);
        assert_newest(r, s);
        assert_oldest(r, 0);
    }
    for (uint64_t s = 0; s < 5; s++)
        assert_holds(r, s);
    assert_not_held(r, 5);
    assert_not_held(r, 6);
    assert_not_held(r, UINT64_MAX);
    remora_ring_destroy(r);
}

static void test_push_short_zero_fills(void **state)
{
    remora_ring_h r = make_ring(24, 1); /* one slot: the short push reuses dirty memory */
    uint8_t full[24], buf[24], want[24] = {0};
    uint64_t seq;

    memset(full, 0xab, sizeof(full));
    assert_int_equal(remora_ring_push(r, full, 24, &seq), REMORA_OK);
    assert_int_equal(seq, 0);
    assert_int_equal(remora_ring_push(r, "xyz", 3, &seq), REMORA_OK);
    assert_int_equal(seq, 1);
    memcpy(want, "xyz", 3);
    assert_int_equal(remora_ring_get(r, 1, buf, sizeof(buf)), REMORA_OK);
    assert_memory_equal(buf, want, 24);
    /* The slot in memory too (elem 24 has no padding). */
    assert_memory_equal(ring_bytes_of(r) + 64 + 8, want, 24);

    /* len 0 (elem may then be NULL): an all-zero element. */
    assert_int_equal(remora_ring_push(r, full, 24, &seq), REMORA_OK);
    assert_int_equal(remora_ring_push(r, NULL, 0, &seq), REMORA_OK);
    assert_int_equal(seq, 3);
    memset(want, 0, sizeof(want));
    assert_int_equal(remora_ring_get(r, 3, buf, sizeof(buf)), REMORA_OK);
    assert_memory_equal(buf, want, 24);
    remora_ring_destroy(r);
}

static void test_push_too_long(void **state)
{
    remora_ring_h r = make_ring(16, 4);
    uint8_t big[17] = {1};
    uint64_t seq    = 77;

    assert_int_equal(remora_ring_push(r, big, 17, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_push(r, big, SIZE_MAX, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(seq, 77);
    assert_int_equal(remora_ring_head(r), 0);
    assert_int_equal(le_get64(ring_bytes_of(r) + 40), 0); /* nothing claimed */
    assert_int_equal(le_get64(ring_bytes_of(r) + 64), 0); /* slot untouched */
    assert_int_equal(remora_ring_push(r, big, 16, &seq), REMORA_OK);
    assert_int_equal(seq, 0);
    remora_ring_destroy(r);
}

static void test_reserve_commit(void **state)
{
    remora_ring_h r = make_ring(32, 4);
    uint8_t buf[32], want[32];
    void *slot = NULL, *slot2 = (void *)(uintptr_t)0x1;
    uint64_t seq = 77;

    /* commit without a reservation */
    assert_int_equal(remora_ring_commit(r, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(seq, 77);

    for (uint64_t s = 0; s < 6; s++) /* full and wrapped: holds 2..5 */
        push_seq(r, s);

    assert_int_equal(remora_ring_reserve(r, &slot), REMORA_OK);
    assert_non_null(slot);
    /* The slot is seq 6's: slot 6 % 4 = 2, in the ring's memory. */
    assert_ptr_equal(slot, ring_bytes_of(r) + 64 + 2 * 40 + 8);
    fill_elem(slot, 32, 6);

    /* Not visible before the commit. */
    assert_int_equal(remora_ring_head(r), 6);
    assert_not_held(r, 6);
    assert_newest(r, 5);
    /* Its slot held seq 2 (the oldest): gone from the moment of the reserve. */
    assert_not_held(r, 2);
    assert_oldest(r, 3);
    assert_holds(r, 3);
    assert_holds(r, 5);

    /* One reservation at a time; no push meanwhile. */
    assert_int_equal(remora_ring_reserve(r, &slot2), REMORA_ERR_BUSY);
    assert_ptr_equal(slot2, (void *)(uintptr_t)0x1);
    assert_int_equal(remora_ring_push(r, buf, 32, &seq), REMORA_ERR_BUSY);
    assert_int_equal(seq, 77);
    assert_int_equal(remora_ring_head(r), 6);

    assert_int_equal(remora_ring_commit(r, &seq), REMORA_OK);
    assert_int_equal(seq, 6);
    assert_int_equal(remora_ring_head(r), 7);
    assert_holds(r, 6);
    assert_newest(r, 6);
    assert_oldest(r, 3);
    assert_not_held(r, 2);

    /* Commit again without a reservation; then push works again. */
    assert_int_equal(remora_ring_commit(r, &seq), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_ring_head(r), 7);
    push_seq(r, 7);

    /* A reserve/commit with seq_p NULL, content written in place. */
    assert_int_equal(remora_ring_reserve(r, &slot), REMORA_OK);
    memset(slot, 0x3c, 32);
    assert_int_equal(remora_ring_commit(r, NULL), REMORA_OK);
    memset(want, 0x3c, 32);
    assert_int_equal(remora_ring_get(r, 8, buf, 32), REMORA_OK);
    assert_memory_equal(buf, want, 32);
    remora_ring_destroy(r);
}

static void test_overwrite(void **state)
{
    const uint64_t cap = 5, k = 3;
    remora_ring_h r = make_ring(40, cap);

    for (uint64_t s = 0; s < cap; s++)
        push_seq(r, s);
    assert_oldest(r, 0);
    for (uint64_t s = cap; s < cap + k; s++)
        push_seq(r, s);
    assert_int_equal(remora_ring_head(r), cap + k);
    for (uint64_t s = 0; s < k; s++)
        assert_not_held(r, s);
    for (uint64_t s = k; s < cap + k; s++)
        assert_holds(r, s);
    assert_not_held(r, cap + k);
    assert_oldest(r, k);
    assert_newest(r, cap + k - 1);

    /* Many laps later. */
    for (uint64_t s = cap + k; s < 1000; s++)
        push_seq(r, s);
    assert_oldest(r, 1000 - cap);
    assert_newest(r, 999);
    assert_not_held(r, 1000 - cap - 1);
    assert_not_held(r, 0);
    for (uint64_t s = 1000 - cap; s < 1000; s++)
        assert_holds(r, s);
    remora_ring_destroy(r);
}

static void test_one_slot(void **state)
{
    remora_ring_h r = make_ring(16, 1);
    uint8_t buf[16];
    void *slot;

    assert_int_equal(remora_mem_length(remora_ring_mem(r)), 64 + 24);
    push_seq(r, 0);
    assert_holds(r, 0);
    assert_newest(r, 0);
    assert_oldest(r, 0);
    for (uint64_t s = 1; s < 10; s++) {
        push_seq(r, s);
        assert_holds(r, s);
        assert_not_held(r, s - 1);
        assert_newest(r, s);
        assert_oldest(r, s);
    }
    /* A reservation takes the only slot: nothing is held until the commit. */
    assert_int_equal(remora_ring_reserve(r, &slot), REMORA_OK);
    fill_elem(slot, 16, 10);
    assert_not_held(r, 9);
    assert_not_held(r, 10);
    assert_int_equal(remora_ring_oldest(r, buf, 16, NULL), REMORA_ERR_OUT_OF_RANGE);
    /* newest: the only slot is being overwritten: nothing is held. */
    assert_int_not_equal(remora_ring_newest(r, buf, 16, NULL), REMORA_OK);
    assert_int_equal(remora_ring_commit(r, NULL), REMORA_OK);
    assert_holds(r, 10);
    assert_newest(r, 10);
    remora_ring_destroy(r);
}

static void test_elem_8(void **state)
{
    remora_ring_h r  = make_ring(8, 4);
    const uint8_t *m = ring_bytes_of(r);

    assert_int_equal(le_get64(m + 24), 16); /* stride: stamp + 8 */
    for (uint64_t s = 0; s < 6; s++) {
        uint64_t v = 0x1111111111111111ull * (s + 1), got = 0, seq;
        assert_int_equal(remora_ring_push(r, &v, 8, &seq), REMORA_OK);
        assert_int_equal(seq, s);
        assert_int_equal(le_get64(m + 64 + 16 * (s % 4)), 2 * s + 2);
        assert_int_equal(le_get64(m + 64 + 16 * (s % 4) + 8), v);
        assert_int_equal(remora_ring_get(r, s, &got, 8), REMORA_OK);
        assert_int_equal(got, v);
    }
    uint64_t got = 0, seq = 0;
    assert_int_equal(remora_ring_oldest(r, &got, 8, &seq), REMORA_OK);
    assert_int_equal(seq, 2);
    assert_int_equal(got, 0x3333333333333333ull);
    remora_ring_destroy(r);
}

static void test_elem_13(void **state)
{
    const uint64_t cap = 4;
    remora_ring_h r    = make_ring(13, cap);
    const uint8_t *m   = ring_bytes_of(r);
    uint8_t e[13];

    assert_int_equal(le_get64(m + 24), 24);
    assert_int_equal(remora_mem_length(remora_ring_mem(r)), 64 + cap * 24);
    for (uint64_t s = 0; s < 11; s++)
        push_seq(r, s);
    for (uint64_t s = 11 - cap; s < 11; s++) {
        const uint8_t *slot = m + 64 + 24 * (s % cap);
        fill_elem(e, 13, s);
        assert_int_equal(le_get64(slot), 2 * s + 2);
        assert_memory_equal(slot + 8, e, 13);
        assert_holds(r, s);
    }
    assert_oldest(r, 7);
    assert_newest(r, 10);
    remora_ring_destroy(r);
}

/* ---------------------------------------------------------------- images */

/* A copy of the ring's whole memory. */
static uint8_t *image_of(remora_ring_h r, size_t *len)
{
    remora_mem_h m = remora_ring_mem(r);
    *len           = remora_mem_length(m);
    return dup_exact(remora_mem_address(m), *len);
}

static remora_ring_h from_image(const uint8_t *img, size_t len)
{
    uint8_t *d      = dup_exact(img, len);
    remora_ring_h c = NULL;
    assert_int_equal(remora_ring_create_from_image(g_ctx, d, len, &c), REMORA_OK);
    assert_non_null(c);
    free(d);
    return c;
}

static void test_image_round_trip(void **state)
{
    const uint64_t cap = 5, n = 13; /* wrapped: holds 8..12 */
    remora_ring_h r    = make_ring(20, cap);
    size_t len;

    for (uint64_t s = 0; s < n; s++)
        push_seq(r, s);
    uint8_t *img    = image_of(r, &len);
    remora_ring_h c = from_image(img, len);

    assert_int_equal(remora_ring_head(c), remora_ring_head(r));
    assert_int_equal(remora_ring_elem_size(c), 20);
    assert_int_equal(remora_ring_capacity(c), cap);
    assert_int_equal(remora_mem_length(remora_ring_mem(c)), len);
    assert_oldest(c, n - cap);
    assert_newest(c, n - 1);
    for (uint64_t s = 0; s < n - cap; s++)
        assert_not_held(c, s);
    for (uint64_t s = n - cap; s < n; s++)
        assert_holds(c, s);
    assert_not_held(c, n);
    /* The clone's memory: the same header but for first (where the clone
     * starts), and the same stamped slots for the held elements. */
    const uint8_t *cm = ring_bytes_of(c);
    assert_memory_equal(cm, img, 48);
    assert_int_equal(le_get64(cm + 48), n - cap);
    for (uint64_t s = n - cap; s < n; s++)
        assert_memory_equal(cm + 64 + 32 * (s % cap), img + 64 + 32 * (s % cap), 8 + 20);

    /* The clone carries on where the original was. */
    push_seq(c, n);
    assert_holds(c, n);
    assert_oldest(c, n - cap + 1);

    /* An image of an empty ring, and of a partly filled one. */
    remora_ring_h e = make_ring(20, cap);
    uint8_t *eimg   = image_of(e, &len);
    remora_ring_h ec = from_image(eimg, len);
    uint8_t buf[20];
    assert_int_equal(remora_ring_head(ec), 0);
    assert_int_equal(remora_ring_newest(ec, buf, 20, NULL), REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_ring_oldest(ec, buf, 20, NULL), REMORA_ERR_OUT_OF_RANGE);
    push_seq(e, 0);
    push_seq(e, 1);
    free(eimg);
    eimg = image_of(e, &len);
    remora_ring_destroy(ec);
    ec = from_image(eimg, len);
    assert_oldest(ec, 0);
    assert_newest(ec, 1);
    assert_holds(ec, 0);
    assert_holds(ec, 1);
    assert_not_held(ec, 2);

    /* An image with trailing bytes is accepted (the header says the size). */
    uint8_t *longer = malloc(len + 100);
    assert_non_null(longer);
    memcpy(longer, eimg, len);
    memset(longer + len, 0xff, 100);
    remora_ring_destroy(ec);
    ec = from_image(longer, len + 100);
    assert_newest(ec, 1);
    free(longer);

    remora_ring_destroy(ec);
    remora_ring_destroy(e);
    free(eimg);
    remora_ring_destroy(c);
    remora_ring_destroy(r);
    free(img);
}

static void test_image_corrupt_stamp(void **state)
{
    const uint64_t cap = 5, n = 13; /* holds 8..12 */
    remora_ring_h r    = make_ring(20, cap);
    size_t len;

    for (uint64_t s = 0; s < n; s++)
        push_seq(r, s);
    uint8_t *img = image_of(r, &len);
    const size_t stride = 8 + 24;

    /* Each held element in turn: its stamp zeroed, odd (being written), or a
     * previous lap's (a stale slot): exactly that element is left out. */
    for (uint64_t bad = n - cap; bad < n; bad++) {
        const uint64_t stamps[3] = {0, 2 * bad + 1, 2 * (bad - cap) + 2};
        for (int k = 0; k < 3; k++) {
            uint8_t *copy = dup_exact(img, len);
            le_put64(copy + 64 + stride * (bad % cap), stamps[k]);
            remora_ring_h c = from_image(copy, len);

            assert_int_equal(remora_ring_head(c), n);
            assert_not_held(c, bad);
            for (uint64_t s = n - cap; s < n; s++)
                if (s != bad)
                    assert_holds(c, s);
            assert_oldest(c, bad == n - cap ? n - cap + 1 : n - cap);
            if (bad != n - 1) {
                assert_newest(c, n - 1);
            } else {
                /* The newest is missing: never it, nor stale bytes; the
                 * newest one held (n - 2) instead. */
                uint8_t buf[20], want[20];
                uint64_t seq = UINT64_MAX;
                remora_status_t rc = remora_ring_newest(c, buf, 20, &seq);
                fill_elem(want, 20, n - 2);
                if (rc == REMORA_OK) {
                    assert_int_equal(seq, n - 2);
                    assert_memory_equal(buf, want, 20);
                }
            }
            remora_ring_destroy(c);
            free(copy);
        }
    }
    remora_ring_destroy(r);
    free(img);
}

static void test_image_malformed(void **state)
{
    remora_ring_h r = make_ring(20, 5);
    remora_ring_h c = (remora_ring_h)(uintptr_t)0x1;
    size_t len;

    for (uint64_t s = 0; s < 7; s++)
        push_seq(r, s);
    uint8_t *img = image_of(r, &len);
    uint8_t *d;

#define EXPECT_PROTOCOL(buf, n)                                                            \
    do {                                                                                   \
        d = dup_exact((buf), (n));                                                         \
        assert_int_equal(remora_ring_create_from_image(g_ctx, d, (n), &c), REMORA_ERR_PROTOCOL); \
        free(d);                                                                           \
    } while (0)

    EXPECT_PROTOCOL(img, 0);
    EXPECT_PROTOCOL(img, 63);
    EXPECT_PROTOCOL(img, 64);
    assert_int_equal(len, 64 + 5 * 32);
    EXPECT_PROTOCOL(img, (size_t)(64 + 5 * 32 - 1)); /* truncated body */
    EXPECT_PROTOCOL(img, (size_t)(64 + 4 * 32));    /* one slot short */

    uint8_t *bad = dup_exact(img, len);
    bad[0]       = 'X';
    EXPECT_PROTOCOL(bad, len);
    memcpy(bad, img, len);
    bad[4] = 2; /* version */
    EXPECT_PROTOCOL(bad, len);
    memcpy(bad, img, len);
    le_put64(bad + 24, 40); /* stride (32 for elem 20) */
    EXPECT_PROTOCOL(bad, len);
    memcpy(bad, img, len);
    le_put64(bad + 16, 6); /* capacity beyond the image */
    EXPECT_PROTOCOL(bad, len);
    memcpy(bad, img, len);
    le_put64(bad + 40, 9); /* claimed > head + 1 */
    EXPECT_PROTOCOL(bad, len);
    memcpy(bad, img, len);
    le_put64(bad + 48, 8); /* first > head */
    EXPECT_PROTOCOL(bad, len);

    /* Random bytes of various lengths (a fixed generator). */
    uint64_t x = 0x243f6a8885a308d3ull;
    for (int i = 0; i < 200; i++) {
        size_t n = 1 + (size_t)(i * 37) % 400;
        uint8_t *rnd = malloc(n);
        assert_non_null(rnd);
        for (size_t j = 0; j < n; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rnd[j] = (uint8_t)x;
        }
        if (i % 2) /* half of them with the right magic and version */
            memcpy(rnd, "RRNG\x01\x00\x40\x00", n < 8 ? n : 8);
        EXPECT_PROTOCOL(rnd, n);
        free(rnd);
    }
#undef EXPECT_PROTOCOL
    assert_ptr_equal(c, (remora_ring_h)(uintptr_t)0x1); /* untouched */
    free(bad);
    free(img);
    remora_ring_destroy(r);
}

/* ---------------------------------------------------------------- concurrency */

#define CONC_ELEM 4096
#define CONC_CAP  8

typedef struct conc {
    remora_ring_h r;
    atomic_int    stop;
    uint64_t      pushes;
    int           producer_err;
} conc_t;

typedef struct reader_stats {
    conc_t  *c;
    unsigned id;
    uint64_t ok, torn, corrupt, busy, other;
    uint64_t oor_recent; /* seq in [head - capacity, head) when chosen: overwritten */
    uint64_t oor_behind; /* seq < head - capacity when chosen: must be OUT_OF_RANGE */
    uint64_t behind_ok;  /* ... and came back OK: a bug */
    uint64_t newest_ok;
    uint64_t ts_bad;
} reader_stats_t;

static void *producer_main(void *arg)
{
    conc_t *c = arg;
    void *slot;
    uint64_t seq;

    while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
        uint64_t want = c->pushes;
        if (remora_ring_reserve(c->r, &slot) != REMORA_OK) {
            c->producer_err = 1;
            break;
        }
        uint64_t partial = remora_frame_payload(slot, CONC_ELEM, want, NULL);
        remora_frame_seal(slot, CONC_ELEM, want, now_ns(), partial);
        if (remora_ring_commit(c->r, &seq) != REMORA_OK || seq != want) {
            c->producer_err = 2;
            break;
        }
        c->pushes++;
    }
    return NULL;
}

static void count_frame(reader_stats_t *st, const uint8_t *buf, uint64_t seq, uint64_t t_after)
{
    switch (remora_frame_check(buf, CONC_ELEM, seq)) {
    case REMORA_FRAME_OK:      st->ok++; break;
    case REMORA_FRAME_TORN:    st->torn++; break;
    case REMORA_FRAME_CORRUPT: st->corrupt++; break;
    default:                   st->other++; break;
    }
    if (remora_frame_timestamp(buf, CONC_ELEM) > t_after)
        st->ts_bad++;
}

static void *reader_main(void *arg)
{
    reader_stats_t *st = arg;
    remora_ring_h r    = st->c->r;
    uint8_t *buf       = malloc(CONC_ELEM);
    uint64_t x         = 0x9e3779b97f4a7c15ull * (st->id + 1), i = 0;

    if (buf == NULL)
        return NULL;
    while (!atomic_load_explicit(&st->c->stop, memory_order_relaxed)) {
        uint64_t head = remora_ring_head(r), seq;
        remora_status_t rc;

        if (head == 0)
            continue;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        switch (i++ % 6) {
        case 0: /* newest */
            rc = remora_ring_newest(r, buf, CONC_ELEM, &seq);
            if (rc == REMORA_OK) {
                st->newest_ok++;
                if (seq + 1 < head) /* older than a head seen before */
                    st->other++;
                count_frame(st, buf, seq, now_ns());
            } else if (rc == REMORA_ERR_BUSY) {
                st->busy++;
            } else {
                st->other++;
            }
            continue;
        case 1: seq = head - 1; break;                                  /* most recent */
        case 2: seq = head > 2 ? head - 2 : 0; break;
        case 3: seq = head > CONC_CAP ? head - CONC_CAP : 0; break;     /* oldest: racing */
        case 4: seq = head - 1 - x % (head < CONC_CAP ? head : CONC_CAP); break;
        default: /* already overwritten when chosen */
            if (head <= CONC_CAP)
                continue;
            seq = x % (head - CONC_CAP);
            break;
        }
        int behind = head > CONC_CAP && seq < head - CONC_CAP;
        rc         = remora_ring_get(r, seq, buf, CONC_ELEM);
        if (rc == REMORA_OK) {
            if (behind)
                st->behind_ok++;
            count_frame(st, buf, seq, now_ns());
        } else if (rc == REMORA_ERR_OUT_OF_RANGE) {
            if (behind)
                st->oor_behind++;
            else
                st->oor_recent++;
        } else {
            st->other++;
        }
    }
    free(buf);
    return NULL;
}

static void test_seqlock_concurrent(void **state)
{
    conc_t c = {.r = make_ring(CONC_ELEM, CONC_CAP)};
    reader_stats_t st[2];
    pthread_t prod, rd[2];

    atomic_init(&c.stop, 0);
    memset(st, 0, sizeof(st));
    for (unsigned i = 0; i < 2; i++) {
        st[i].c  = &c;
        st[i].id = i;
        assert_int_equal(pthread_create(&rd[i], NULL, reader_main, &st[i]), 0);
    }
    assert_int_equal(pthread_create(&prod, NULL, producer_main, &c), 0);
    struct timespec ts = {.tv_sec = 1, .tv_nsec = 500000000};
    nanosleep(&ts, NULL);
    atomic_store(&c.stop, 1);
    pthread_join(prod, NULL);
    for (unsigned i = 0; i < 2; i++)
        pthread_join(rd[i], NULL);

    reader_stats_t t = {0};
    for (unsigned i = 0; i < 2; i++) {
        t.ok += st[i].ok, t.torn += st[i].torn, t.corrupt += st[i].corrupt;
        t.busy += st[i].busy, t.other += st[i].other, t.oor_recent += st[i].oor_recent;
        t.oor_behind += st[i].oor_behind, t.behind_ok += st[i].behind_ok;
        t.newest_ok += st[i].newest_ok, t.ts_bad += st[i].ts_bad;
    }
    print_message("seqlock: %llu pushes; reads: %llu ok (%llu newest), %llu torn, %llu corrupt, "
                  "%llu out-of-range in window, %llu out-of-range behind, %llu busy, "
                  "%llu other\n",
                  (unsigned long long)c.pushes, (unsigned long long)t.ok,
                  (unsigned long long)t.newest_ok, (unsigned long long)t.torn,
                  (unsigned long long)t.corrupt, (unsigned long long)t.oor_recent,
                  (unsigned long long)t.oor_behind, (unsigned long long)t.busy,
                  (unsigned long long)t.other);

    assert_int_equal(c.producer_err, 0);
    assert_int_equal(remora_ring_head(c.r), c.pushes);
    assert_int_equal(t.torn, 0);
    assert_int_equal(t.corrupt, 0);
    assert_int_equal(t.behind_ok, 0);
    assert_int_equal(t.other, 0);
    assert_int_equal(t.ts_bad, 0);
    assert_true(c.pushes > 10000);
    assert_true(t.ok > 1000);
    assert_true(t.newest_ok > 100);
    assert_true(t.oor_recent > 0); /* overwrites while or before reading were detected */
    assert_true(t.oor_behind > 0);

    /* Quiescent again: the ring holds exactly the last capacity frames. */
    uint8_t *buf = malloc(CONC_ELEM);
    assert_non_null(buf);
    for (uint64_t s = c.pushes - CONC_CAP; s < c.pushes; s++) {
        assert_int_equal(remora_ring_get(c.r, s, buf, CONC_ELEM), REMORA_OK);
        assert_int_equal(remora_frame_check(buf, CONC_ELEM, s), REMORA_FRAME_OK);
    }
    assert_int_equal(remora_ring_get(c.r, c.pushes - CONC_CAP - 1, buf, CONC_ELEM),
                     REMORA_ERR_OUT_OF_RANGE);
    free(buf);
    remora_ring_destroy(c.r);
}

/* ---------------------------------------------------------------- frames */

static uint8_t *make_frame(size_t size, uint64_t seq, uint64_t ts)
{
    uint8_t *f = malloc(size);
    assert_non_null(f);
    memset(f, 0xee, size);
    uint64_t partial = remora_frame_payload(f, size, seq, NULL);
    remora_frame_seal(f, size, seq, ts, partial);
    return f;
}

static void test_frame_sizes(void **state)
{
    static const size_t sizes[] = {8, 16, 24, 25, 4096 + 3};
    const uint64_t ts           = 0x1122334455667788ull;

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n   = sizes[i];
        uint8_t *f = make_frame(n, 42, ts);

        assert_int_equal(remora_frame_check(f, n, 42), REMORA_FRAME_OK);
        assert_int_equal(le_get64(f), 42); /* seq first, little-endian */
        assert_int_equal(remora_frame_check(f, n, 41), REMORA_FRAME_TORN);
        assert_int_equal(remora_frame_check(f, n, 43), REMORA_FRAME_TORN);
        assert_int_equal(remora_frame_check(f, n, 42ull | (1ull << 40)), REMORA_FRAME_TORN);
        assert_int_equal(remora_frame_timestamp(f, n), n >= 16 ? ts : 0);
        if (n >= 16)
            assert_int_equal(le_get64(f + 8), ts);

        if (n >= 24) {
            /* Every byte after seq is covered by the checksum: flipping any
             * one bit of timestamp, checksum or payload is CORRUPT. */
            for (size_t b = 8; b < n; b += (n > 100 ? 97 : 1)) {
                for (int bit = 0; bit < 8; bit += 7) {
                    f[b] ^= (uint8_t)(1u << bit);
                    assert_int_equal(remora_frame_check(f, n, 42), REMORA_FRAME_CORRUPT);
                    f[b] ^= (uint8_t)(1u << bit);
                }
            }
            f[n - 1] ^= 1; /* the last payload byte, also of 4099 */
            assert_int_equal(remora_frame_check(f, n, 42), REMORA_FRAME_CORRUPT);
            f[n - 1] ^= 1;
            assert_int_equal(remora_frame_check(f, n, 42), REMORA_FRAME_OK);
        } else {
            /* No room for a checksum: only seq is checked. */
            f[n - 1] ^= 0xff;
            assert_int_equal(remora_frame_check(f, n, 42), n == 8 ? REMORA_FRAME_TORN
                                                                   : REMORA_FRAME_OK);
        }
        free(f);
    }
    /* Below 8 bytes there is nothing to check. */
    uint8_t tiny[4] = {1, 2, 3, 4};
    assert_int_equal(remora_frame_check(tiny, 4, 99), REMORA_FRAME_OK);
    assert_int_equal(remora_frame_timestamp(tiny, 4), 0);
}

static void test_frame_torn_mix(void **state)
{
    static const size_t sizes[] = {25, 64, 4096 + 3};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n   = sizes[i];
        uint8_t *a = make_frame(n, 100, 1000), *b = make_frame(n, 101, 1000);
        uint8_t *mix = malloc(n);
        assert_non_null(mix);

        /* Payloads of two frames never share bytes (seq-dependent). */
        assert_memory_not_equal(a + 24, b + 24, n - 24);

        /* First half of A, second half of B, delivered as A: the checksum
         * (in A's header) does not cover B's payload. */
        size_t half = n / 2 > 24 ? n / 2 : 24;
        memcpy(mix, a, half);
        memcpy(mix + half, b + half, n - half);
        assert_int_equal(remora_frame_check(mix, n, 100), REMORA_FRAME_CORRUPT);
        /* ... delivered as B: the seq says A. */
        assert_int_equal(remora_frame_check(mix, n, 101), REMORA_FRAME_TORN);

        /* A's header with all of B's payload. */
        memcpy(mix, a, 24);
        memcpy(mix + 24, b + 24, n - 24);
        assert_int_equal(remora_frame_check(mix, n, 100), REMORA_FRAME_CORRUPT);
        /* B's seq and timestamp with A's checksum and payload. */
        memcpy(mix, b, 16);
        memcpy(mix + 16, a + 16, n - 16);
        assert_int_equal(remora_frame_check(mix, n, 101), REMORA_FRAME_CORRUPT);

        free(a);
        free(b);
        free(mix);
    }
}

static void test_frame_payload_src(void **state)
{
    const size_t n = 100;
    uint8_t src[76], *f = malloc(n);
    assert_non_null(f);

    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 3);
    uint64_t partial = remora_frame_payload(f, n, 7, src);
    assert_memory_equal(f + 24, src, sizeof(src));
    remora_frame_seal(f, n, 7, 555, partial);
    assert_int_equal(remora_frame_check(f, n, 7), REMORA_FRAME_OK);
    assert_int_equal(remora_frame_timestamp(f, n), 555);
    /* A different timestamp under the same checksum is CORRUPT. */
    le_put64(f + 8, 556);
    assert_int_equal(remora_frame_check(f, n, 7), REMORA_FRAME_CORRUPT);
    /* remora_frame_payload of a frame without payload room. */
    assert_int_equal(remora_frame_payload(f, 24, 7, NULL), 0);
    free(f);

    /* Timestamps are what seal wrote, real clock values included. */
    uint64_t t0 = now_ns();
    uint8_t *g  = make_frame(64, 3, t0);
    assert_int_equal(remora_frame_timestamp(g, 64), t0);
    assert_true(remora_frame_timestamp(g, 64) <= now_ns());
    free(g);
}

/* The producer's rate as pushes on several workers sample it: samples that
 * reach the lock out of order (an older clock or head than the last taken)
 * leave the estimate alone instead of dragging it toward zero. */
static void test_rate_out_of_order(void **state)
{
    remora_ring_h r = make_ring(64, 64);
    const uint64_t ms = 1000000u;
    (void)state;

    assert_true(rm_ring_rate(r, 0, 10 * ms) == 0); /* first sample: nothing measured */
    double rate = rm_ring_rate(r, 300, 13 * ms); /* 300 in 3 ms: 100,000/s */
    assert_true(rate > 99999 && rate < 100001);
    for (int i = 0; i < 8; i++) { /* stragglers: older clock, older head */
        assert_true(rm_ring_rate(r, 290, 12 * ms + (uint64_t)i) == rate);
        assert_true(rm_ring_rate(r, 299, 13 * ms - 1) == rate);
    }
    rate = rm_ring_rate(r, 600, 16 * ms); /* the same pace: the estimate holds */
    assert_true(rate > 99999 && rate < 100001);
    remora_ring_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stride),
        cmocka_unit_test(test_bytes_bounds),
        cmocka_unit_test(test_hdr_init_parse_round_trip),
        cmocka_unit_test(test_hdr_layout_literal),
        cmocka_unit_test(test_live_ring_layout),
        cmocka_unit_test(test_hdr_parse_rejects),
        cmocka_unit_test(test_hdr_parse_live),
        cmocka_unit_test(test_hdr_parse_live_head_bound),
        cmocka_unit_test(test_create_rejects),
        cmocka_unit_test(test_null_params),
        cmocka_unit_test(test_empty_ring),
        cmocka_unit_test(test_push_get),
        cmocka_unit_test(test_push_short_zero_fills),
        cmocka_unit_test(test_push_too_long),
        cmocka_unit_test(test_reserve_commit),
        cmocka_unit_test(test_overwrite),
        cmocka_unit_test(test_one_slot),
        cmocka_unit_test(test_elem_8),
        cmocka_unit_test(test_elem_13),
        cmocka_unit_test(test_image_round_trip),
        cmocka_unit_test(test_image_corrupt_stamp),
        cmocka_unit_test(test_image_malformed),
        cmocka_unit_test(test_seqlock_concurrent),
        cmocka_unit_test(test_frame_sizes),
        cmocka_unit_test(test_frame_torn_mix),
        cmocka_unit_test(test_frame_payload_src),
        cmocka_unit_test(test_rate_out_of_order),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
