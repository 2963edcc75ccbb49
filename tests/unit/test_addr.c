/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Unit tests of rm_parse_addr / rm_format_addr (src/engine/ep.c): HOST:PORT
 * and [IPv6]:PORT addresses. Only numeric hosts and "localhost" are used, so
 * no test depends on DNS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "engine/engine.h"

/* The port of a parsed address (either family), or -1. */
static int port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)(const void *)ss)->sin6_port);
    return -1;
}

static void assert_parses(const char *addr, int family, int port)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;

    memset(&ss, 0, sizeof(ss));
    assert_int_equal(rm_parse_addr(addr, &ss, &len), REMORA_OK);
    if (family != AF_UNSPEC)
        assert_int_equal(ss.ss_family, family);
    assert_int_equal(len, ss.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                  : sizeof(struct sockaddr_in6));
    assert_int_equal(port_of(&ss), port);
}

/* Outputs are written only on success. */
static void assert_rejects(const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len = 12345;

    memset(&ss, 0xa5, sizeof(ss));
    print_message("rejects \"%s\"\n", addr ? addr : "(null)");
    assert_int_equal(rm_parse_addr(addr, &ss, &len), REMORA_ERR_ADDRESS);
    assert_int_equal(len, 12345);
}

/* IPv4, localhost and bracketed IPv6 with ports at both ends of the range. */
static void test_parse_accepts(void **state)
{
    assert_parses("127.0.0.1:0", AF_INET, 0);
    assert_parses("127.0.0.1:65535", AF_INET, 65535);
    assert_parses("0.0.0.0:13337", AF_INET, 13337);
    assert_parses("localhost:80", AF_UNSPEC, 80);
    assert_parses("[::1]:5", AF_INET6, 5);
    assert_parses("[::]:65535", AF_INET6, 65535);
    assert_parses("[2001:db8::1]:443", AF_INET6, 443);
}

/* The parsed IPv4 address is the one written. */
static void test_parse_v4_address(void **state)
{
    struct sockaddr_storage ss;
    socklen_t len;
    const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)&ss;

    assert_int_equal(rm_parse_addr("10.1.2.3:4", &ss, &len), REMORA_OK);
    assert_int_equal(ntohl(in->sin_addr.s_addr), 0x0a010203u);
}

/* Empty, missing port or host, port out of range or not a number, unbracketed
 * IPv6, and broken brackets are rejected. */
static void test_parse_rejects(void **state)
{
    static const char *bad[] = {
        "",
        "127.0.0.1",
        ":80",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "127.0.0.1:99999999999999999999",
        "127.0.0.1:-1",
        "127.0.0.1:8x",
        "127.0.0.1:0x50",
        "::1:5",
        "[::1]5",
        "[::1]x80",
        "[::1",
        "[::1]",
        "[::1]:",
        "[]:80",
        "[::1]:5:6",
        "1.2.3.4:5:6",
    };

    assert_rejects(NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_rejects(bad[i]);
}

/* A host part longer than 255 bytes is rejected before any lookup. */
static void test_parse_rejects_long_host(void **state)
{
    char addr[300];

    memset(addr, '1', 256);
    strcpy(addr + 256, ":80");
    assert_rejects(addr);
}

/* Parse, format, compare: the canonical text comes back unchanged. */
static void assert_round_trip(const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char out[64];

    assert_int_equal(rm_parse_addr(addr, &ss, &len), REMORA_OK);
    rm_format_addr((const struct sockaddr *)&ss, out, sizeof(out));
    assert_string_equal(out, addr);
}

static void test_format_round_trip(void **state)
{
    assert_round_trip("127.0.0.1:0");
    assert_round_trip("192.168.10.200:65535");
    assert_round_trip("[::1]:5");
    assert_round_trip("[2001:db8::1]:443");
    assert_round_trip("[::]:13337");
}

/* An unknown family formats as "?"; a short buffer truncates but stays a
 * terminated string. */
static void test_format_edges(void **state)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char out[8];

    memset(&ss, 0, sizeof(ss));
    ss.ss_family = AF_UNIX;
    rm_format_addr((const struct sockaddr *)&ss, out, sizeof(out));
    assert_string_equal(out, "?");

    assert_int_equal(rm_parse_addr("127.0.0.1:65535", &ss, &len), REMORA_OK);
    rm_format_addr((const struct sockaddr *)&ss, out, sizeof(out));
    assert_string_equal(out, "127.0.0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_accepts),
        cmocka_unit_test(test_parse_v4_address),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_parse_rejects_long_host),
        cmocka_unit_test(test_format_round_trip),
        cmocka_unit_test(test_format_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
