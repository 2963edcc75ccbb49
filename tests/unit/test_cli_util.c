/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of tools/cli_util.c: the test pattern, size and address parsing,
 * size formatting, JSON strings, sample statistics and stream frames.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli_util.h"

/* ---------------------------------------------------------------- pattern */

/* The pattern straight from its definition, one byte at a time. */
static uint8_t ref_byte(uint64_t o)
{
    uint64_t z = o / 8 + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint8_t)(z >> (8 * (o % 8)));
}

/* splitmix64(0) is the well-known first output of SplitMix64 seeded with 0. */
static void test_pattern_known_word(void **state)
{
    static const uint8_t word0[8] = {0xaf, 0xcd, 0x1d, 0x7b, 0x39, 0xa8, 0x20, 0xe2};
    uint8_t buf[8];

    (void)state;
    remora_pattern_fill(buf, 0, sizeof(buf));
    assert_memory_equal(buf, word0, sizeof(buf));
    assert_int_equal(remora_pattern_byte(7), 0xe2);
}

/* Fill matches the definition for every head/tail alignment and an unaligned buffer. */
static void test_pattern_fill_unaligned(void **state)
{
    static const uint64_t offsets[] = {0, 1, 3, 7, 8, 9, 15, 4096 + 5, (1ull << 40) + 3};
    static const size_t lengths[] = {0, 1, 2, 7, 8, 9, 16, 17, 63, 100, 1000};
    uint8_t raw[1024 + 1];

    (void)state;
    for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
        for (size_t j = 0; j < sizeof(lengths) / sizeof(lengths[0]); j++) {
            uint8_t *buf = raw + 1; /* never 8-aligned */
            remora_pattern_fill(buf, offsets[i], lengths[j]);
            for (size_t k = 0; k < lengths[j]; k++) {
                assert_int_equal(buf[k], ref_byte(offsets[i] + k));
            }
            assert_int_equal(remora_pattern_check(buf, offsets[i], lengths[j]), -1);
        }
    }
}

/* Any sub-range generated on its own equals that slice of the whole. */
static void test_pattern_subrange(void **state)
{
    enum { N = 4096 };
    uint8_t *whole = malloc(N), *part = malloc(N);

    (void)state;
    assert_non_null(whole);
    assert_non_null(part);
    remora_pattern_fill(whole, 0, N);
    for (size_t off = 0; off < 64; off += 5) {
        size_t len = N - off - 11;
        remora_pattern_fill(part, off, len);
        assert_memory_equal(part, whole + off, len);
        assert_int_equal(remora_pattern_check(whole + off, off, len), -1);
    }
    free(whole);
    free(part);
}

/* A flipped byte is found wherever it is: head, word body or tail. */
static void test_pattern_mismatch(void **state)
{
    enum { LEN = 203 };
    static const size_t flips[] = {0, 1, 4, 5, 12, 100, 195, 201, 202};
    uint8_t buf[LEN];
    const uint64_t off = 3; /* head of 5 bytes, then words, then a tail */

    (void)state;
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        remora_pattern_fill(buf, off, LEN);
        buf[flips[i]] ^= 0x40;
        assert_int_equal(remora_pattern_check(buf, off, LEN), (int64_t)flips[i]);
    }
    /* Two bad bytes: the first is reported. */
    remora_pattern_fill(buf, off, LEN);
    buf[150] ^= 1;
    buf[40] ^= 1;
    assert_int_equal(remora_pattern_check(buf, off, LEN), 40);
    /* The right bytes at the wrong offset do not pass. */
    remora_pattern_fill(buf, off, LEN);
    assert_int_not_equal(remora_pattern_check(buf, off + 8, LEN), -1);
    assert_int_equal(remora_pattern_check(buf, off, 0), -1);
}

/* ---------------------------------------------------------------- sizes */

static void test_parse_size_good(void **state)
{
    static const struct { const char *s; uint64_t v; } cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"007", 7},
        {"4K", 4096},
        {"4k", 4096},
        {"1M", 1u << 20},
        {"64m", 64u << 20},
        {"2G", 2ull << 30},
        {"1T", 1ull << 40},
        {"16777215T", 16777215ull << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    uint64_t v;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        v = 12345;
        assert_int_equal(remora_parse_size(cases[i].s, &v), 0);
        assert_true(v == cases[i].v);
    }
}

static void test_parse_size_bad(void **state)
{
    static const char *const cases[] = {
        "", "K", "-1", "+1", " 1", "1 ", "1.5K", "1KB", "1KiB", "1KK", "1X", "0x10", "1e3",
        "18446744073709551616",  /* 2^64 */
        "99999999999999999999999",
        "16777216T",             /* 2^64 after the suffix */
        "17179869184G",          /* 2^64 */
    };
    uint64_t v = 777;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(remora_parse_size(cases[i], &v), -1);
    }
    assert_int_equal(remora_parse_size(NULL, &v), -1);
    assert_true(v == 777); /* untouched on failure */
}

/* ---------------------------------------------------------------- addresses */

static void test_parse_target_good(void **state)
{
    remora_target_t t;
    const char *why = NULL;

    (void)state;
    assert_int_equal(remora_parse_target("127.0.0.1:60010/frames", &t, &why), 0);
    assert_string_equal(t.addr, "127.0.0.1:60010");
    assert_string_equal(t.host, "127.0.0.1");
    assert_int_equal(t.port, 60010);
    assert_string_equal(t.name, "frames");

    assert_int_equal(remora_parse_target("[::1]:60010/x", &t, &why), 0);
    assert_string_equal(t.addr, "[::1]:60010");
    assert_string_equal(t.host, "::1");
    assert_int_equal(t.port, 60010);
    assert_string_equal(t.name, "x");

    /* The name is everything after the first '/' following the port. */
    assert_int_equal(remora_parse_target("node-7.lan:1/cam/0:raw", &t, &why), 0);
    assert_string_equal(t.addr, "node-7.lan:1");
    assert_string_equal(t.name, "cam/0:raw");

    /* No name: HOST:PORT alone; port 0 parses (meaning "any" for --listen). */
    assert_int_equal(remora_parse_target("localhost:0", &t, &why), 0);
    assert_string_equal(t.addr, "localhost:0");
    assert_int_equal(t.port, 0);
    assert_string_equal(t.name, "");

    assert_int_equal(remora_parse_target("[fe80::1%eth0]:65535", &t, &why), 0);
    assert_string_equal(t.host, "fe80::1%eth0");
    assert_int_equal(t.port, 65535);
}

static void test_parse_target_bad(void **state)
{
    static const char *const cases[] = {
        "127.0.0.1",          /* missing port */
        "127.0.0.1/frames",   /* missing port */
        "127.0.0.1:/frames",  /* missing port number */
        "127.0.0.1:",         /* missing port number */
        "127.0.0.1:abc/x",    /* port not a number */
        "127.0.0.1:65536/x",  /* port out of range */
        "127.0.0.1:-1/x",
        ":60010/x",           /* missing host */
        "",
        "[::1/x",             /* unterminated bracket */
        "[::1]/x",            /* missing port */
        "[]:1/x",             /* empty host */
        "::1:60010/x",        /* IPv6 without brackets */
        "fe80::1:80",
        "host:1/",            /* empty name */
        "127.0.0.1:000060010", /* more than 5 digits (the address buffer overflowed) */
    };
    char long_name[300 + 16], zeros[2048];
    remora_target_t t;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *why = NULL;
        assert_int_equal(remora_parse_target(cases[i], &t, &why), -1);
        assert_non_null(why);
    }
    /* A host of the longest length and a port of 1,000 leading zeros. */
    memset(zeros, 'h', REMORA_HOST_MAX - 2);
    zeros[REMORA_HOST_MAX - 2] = ':';
    memset(zeros + REMORA_HOST_MAX - 1, '0', 1000);
    strcpy(zeros + REMORA_HOST_MAX - 1 + 1000, "1/x");
    assert_int_equal(remora_parse_target(zeros, &t, NULL), -1);
    snprintf(long_name, sizeof(long_name), "h:1/");
    memset(long_name + 4, 'n', REMORA_NAME_MAX + 1);
    long_name[4 + REMORA_NAME_MAX + 1] = '\0';
    assert_int_equal(remora_parse_target(long_name, &t, NULL), -1);
    long_name[4 + REMORA_NAME_MAX] = '\0'; /* exactly the maximum */
    assert_int_equal(remora_parse_target(long_name, &t, NULL), 0);
    assert_int_equal(strlen(t.name), REMORA_NAME_MAX);
}

/* ---------------------------------------------------------------- formatting */

static void test_format_size(void **state)
{
    static const struct { uint64_t v; const char *s; } cases[] = {
        {0, "0 B"},
        {1023, "1023 B"},
        {1024, "1 KiB"},
        {1536, "1.5 KiB"},
        {64ull << 20, "64 MiB"},
        {(2ull << 30) + (1ull << 29), "2.5 GiB"},
        {1ull << 40, "1 TiB"},
        {UINT64_MAX, "16.0 EiB"},
    };
    char buf[32];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_string_equal(remora_format_size(cases[i].v, buf, sizeof(buf)), cases[i].s);
    }
}

static void test_json_string(void **state)
{
    char buf[64];

    (void)state;
    assert_int_equal(remora_json_string("frames", buf, sizeof(buf)), 8);
    assert_string_equal(buf, "\"frames\"");
    remora_json_string("a\"b\\c\nd\x01", buf, sizeof(buf));
    assert_string_equal(buf, "\"a\\\"b\\\\c\\u000ad\\u0001\"");
    remora_json_string("caf\xc3\xa9", buf, sizeof(buf)); /* valid UTF-8 passes */
    assert_string_equal(buf, "\"caf\xc3\xa9\"");
    remora_json_string("x\xff" "y\xc3", buf, sizeof(buf)); /* invalid UTF-8 is replaced */
    assert_string_equal(buf, "\"x\\ufffdy\\ufffd\"");
    /* Truncation: the needed length is returned, the output stays terminated. */
    assert_int_equal(remora_json_string("abcdef", buf, 4), 8);
    assert_int_equal(strlen(buf), 3);
}

/* ---------------------------------------------------------------- statistics */

static void test_stats(void **state)
{
    double five[] = {5, 1, 3, 2, 4};
    double hundred[100];
    remora_stats_t st;

    (void)state;
    remora_stats_compute(five, 5, &st);
    assert_int_equal(st.count, 5);
    assert_true(st.min == 1 && st.max == 5 && st.avg == 3 && st.p50 == 3 && st.p99 == 5);

    for (int i = 0; i < 100; i++) {
        hundred[i] = 100 - i; /* 100..1, unsorted */
    }
    remora_stats_compute(hundred, 100, &st);
    assert_true(st.p50 == 50 && st.p99 == 99 && st.max == 100 && st.avg == 50.5);

    remora_stats_compute(NULL, 0, &st);
    assert_int_equal(st.count, 0);
    assert_true(st.min == 0 && st.max == 0 && st.p99 == 0);
}

/* ---------------------------------------------------------------- frames */

/* Frames on both sides of the size from which a streamed payload goes past
 * the caches, at aligned and unaligned addresses, written either way: each
 * one checks, a frame of another sequence number is torn, one changed byte
 * is corrupt. */
static void test_frame_round_trip(void **state)
{
    (void)state;
    static const size_t sizes[] = {8, 23, 24, 25, 64, 1000, (256u << 10) + 23,
                                   (256u << 10) + 24, (256u << 10) + 31, (1u << 20) + 5};
    uint8_t *mem = malloc((1u << 20) + 64);
    assert_non_null(mem);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t off = 0; off < 2; off++) {
            uint8_t *e = mem + off * 3;
            size_t es = sizes[k];
            uint64_t seq = 1000 + k;
            for (int streamed = 0; streamed < 2; streamed++) {
                uint64_t partial = streamed ? remora_frame_payload_streamed(e, es, seq, NULL)
                                            : remora_frame_payload(e, es, seq, NULL);
                remora_frame_seal(e, es, seq, 42, partial);
                assert_int_equal(remora_frame_check(e, es, seq), REMORA_FRAME_OK);
                assert_int_equal(remora_frame_check(e, es, seq + 1), REMORA_FRAME_TORN);
                if (es > 24) {
                    e[es - 1] ^= 1;
                    assert_int_equal(remora_frame_check(e, es, seq), REMORA_FRAME_CORRUPT);
                }
            }
        }
    }
    free(mem);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pattern_known_word),
        cmocka_unit_test(test_pattern_fill_unaligned),
        cmocka_unit_test(test_pattern_subrange),
        cmocka_unit_test(test_pattern_mismatch),
        cmocka_unit_test(test_parse_size_good),
        cmocka_unit_test(test_parse_size_bad),
        cmocka_unit_test(test_parse_target_good),
        cmocka_unit_test(test_parse_target_bad),
        cmocka_unit_test(test_format_size),
        cmocka_unit_test(test_json_string),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_frame_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
