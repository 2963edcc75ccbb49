/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Garbage on the listening port: plain TCP connections that send random
 * bytes, an HTTP request, bytes shaped like a UCX connection-manager header
 * or like remora's own bootstrap frames (docs/protocol.md §1) but wrong,
 * nothing at all, or half a frame. The server must survive all of it,
 * close what is not a remora client (at once when it is wrong, after the
 * bootstrap timeout when it is silent), keep serving real clients meanwhile,
 * and still shut down cleanly.
 *
 * Two CTest entries:
 *   it_garbage                 (no argument) everything above
 *   it_garbage_worker_address  (argument "worker-address") a well-formed
 *                              HELLO, then a CONNECT frame whose UCX worker
 *                              address is garbage.
 *
 * Why the second entry exists: UCX 1.13.1 aborts the process on a malformed
 * worker address (ucp/wireup/address.c:1051 `*addr_version ==
 * UCP_OBJECT_VERSION_V2' failed), so the server must check the address
 * before ucp_ep_create() sees it. On a server without a token, anyone who
 * reaches the port gets as far as CONNECT; one TCP connection must not be
 * able to kill the server.
 *
 * The frames are written out by hand here (not with wire.c's encoders): this
 * file is an independent reading of docs/protocol.md.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1024u * 1024u)
/* docs/protocol.md §1 */
#define BOOT_MAGIC   0x42524d52u
#define BOOT_VERSION 2u
#define BOOT_HDR_LEN 12u
#define BOOT_PAYLOAD_MAX 65540u
#define BOOT_TIMEOUT_MS 5000
enum { T_HELLO = 1, T_HELLO_REPLY = 2, T_AUTH = 3, T_CONNECT = 5, T_CONNECT_REPLY = 6,
       T_HEARTBEAT = 7 };
#define HELLO_LEN 78u /* TCP segment sizes 0: not known, not checked (§4.2) */

static int tcp_connect(const char *addr)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)it_addr_port(addr)),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send, ignoring a peer that closed on us (that is its right). */
static void send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

/* Wait up to ms for the server to close the connection (EOF or reset),
 * discarding anything it sends. Returns the ms it took, or -1 if still open. */
static double wait_closed(int fd, int ms)
{
    char buf[4096];
    double t0 = it_now_ms(), deadline = t0 + ms;

    while (it_now_ms() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 10) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return it_now_ms() - t0;
    }
    return -1;
}

/* A real client lists, reads a (1 MiB) completely and verifies it. */
static void assert_real_client_works(const it_server_t *s)
{
    it_client_t c;
    uint8_t *buf = malloc(MiB);
    remora_region_info_t *infos = NULL;
    size_t n = 0;

    assert_non_null(buf);
    it_assert_ok(it_client_open(&c, s->addr, NULL));
    it_assert_ok(remora_client_list(c.client, &infos, &n));
    assert_int_equal(n, 1);
    remora_region_info_free(infos);
    it_assert_ok(remora_client_read(c.client, "a", 0, buf, MiB));
    it_assert_pattern(buf, 0, MiB);
    it_client_close(&c);
    free(buf);
}

static void assert_alive(it_server_t *s, const char *what)
{
    it_sleep_ms(50);
    if (!it_server_alive(s)) {
        it_server_dump_log(s);
        fail_msg("the server died from %s on its listening port", what);
    }
}

/* Send junk on a fresh connection, expect the server to close it within
 * close_ms (or, with close_ms < 0, just to survive), and to stay up. */
static void junk_once(it_server_t *s, const void *junk, size_t len, int close_ms,
                      const char *what)
{
    int fd = tcp_connect(s->addr);

    assert_true(fd >= 0);
    send_all(fd, junk, len);
    double took = wait_closed(fd, close_ms < 0 ? 100 : close_ms);
    close(fd);
    assert_alive(s, what);
    if (close_ms >= 0 && took < 0)
        fail_msg("the server kept a connection open %d ms after %s", close_ms, what);
}

/* The 12-byte frame header: magic, u16 version, u8 type, u8 flags, u32 length. */
static void boot_hdr(uint8_t *p, uint16_t version, uint8_t type, uint8_t flags, uint32_t len)
{
    uint32_t m = BOOT_MAGIC;
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(m >> (8 * i));
    p[4] = (uint8_t)version;
    p[5] = (uint8_t)(version >> 8);
    p[6] = type;
    p[7] = flags;
    for (int i = 0; i < 4; i++)
        p[8 + i] = (uint8_t)(len >> (8 * i));
}

/* A complete HELLO frame (12 + 78 bytes) for protocol 2..2. */
static size_t hello_frame(uint8_t *p)
{
    boot_hdr(p, BOOT_VERSION, T_HELLO, 0, HELLO_LEN);
    memset(p + BOOT_HDR_LEN, 0, HELLO_LEN);
    memcpy(p + BOOT_HDR_LEN, "RMRA\x02\x00\x02\x00\x00\x00", 10); /* magic, 2..2, flags */
    it_fill_random(p + BOOT_HDR_LEN + 26, 32, 99);                   /* nonce */
    return BOOT_HDR_LEN + HELLO_LEN;
}

/* Read one frame's header and its payload's first up to 4 bytes (a reply's
 * status); skips heartbeats. Returns the type, or -1 on close/timeout. */
static int read_reply(int fd, int32_t *status, int ms)
{
    uint8_t h[BOOT_HDR_LEN], *payload;
    double deadline = it_now_ms() + ms;
    size_t have = 0, want = BOOT_HDR_LEN;

    for (;;) {
        while (have < want) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            if (it_now_ms() > deadline || poll(&pfd, 1, 10) < 0)
                return -1;
            if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = recv(fd, h + have, want - have, 0);
            if (n <= 0)
                return -1;
            have += (size_t)n;
        }
        uint32_t len = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 |
                       (uint32_t)h[11] << 24;
        if (len > BOOT_PAYLOAD_MAX || (payload = malloc(len + 1)) == NULL)
            return -1;
        for (size_t got = 0; got < len;) {
            ssize_t n = recv(fd, payload + got, len - got, 0);
            if (n <= 0) {
                free(payload);
                return -1;
            }
            got += (size_t)n;
        }
        if (h[6] == T_HEARTBEAT) {
            free(payload);
            have = 0;
            continue;
        }
        *status = len >= 4 ? (int32_t)((uint32_t)payload[0] | (uint32_t)payload[1] << 8 |
                                       (uint32_t)payload[2] << 16 | (uint32_t)payload[3] << 24)
                           : 0x7fffffff;
        free(payload);
        return h[6];
    }
}

/* ---------------------------------------------------------------- tests */

/* Random bytes of many sizes, several connections: each is closed at once
 * (a wrong magic), the server stays up and serves. */
static void test_random_bytes(void **state)
{
    static const size_t sizes[] = {1, 3, 8, 16, 63, 64, 200, 1024, 4096, 65536, 1 << 20};
    it_server_t s;
    uint8_t *junk = malloc(1 << 20);
    (void)state;

    assert_non_null(junk);
    it_must_start(&s, "--region", "a=1M", NULL);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            it_fill_random(junk, sizes[i], (uint64_t)round * 100u + i);
            if (junk[0] == (uint8_t)BOOT_MAGIC)
                junk[0] ^= 0x80; /* a random start that happens to be right is not junk */
            junk_once(&s, junk, sizes[i], 2000, "random bytes");
        }
        assert_real_client_works(&s);
    }
    assert_int_equal(it_server_stop(&s), 0);
    free(junk);
}

/* HTTP requests (as a port scanner would send) and a POST claiming a huge body. */
static void test_http_requests(void **state)
{
    static const char http[] = "GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: it\r\n"
                               "Connection: close\r\n\r\n";
    static const char post[] = "POST /regions HTTP/1.1\r\nContent-Length: 99999999\r\n\r\nabc";
    it_server_t s;
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    for (int i = 0; i < 5; i++)
        junk_once(&s, http, sizeof(http) - 1, 2000, "an HTTP GET");
    junk_once(&s, post, sizeof(post) - 1, 2000, "an HTTP POST");
    assert_real_client_works(&s);
    assert_int_equal(it_server_stop(&s), 0);
}

/* Bytes shaped like a UCX 1.13 TCP connection-manager header (8-byte length,
 * then status) with a length shorter than what follows: UCX's own listener
 * aborts on these (tcp_sockcm_ep.c:825), remora's bootstrap must not. */
static void test_ucx_cm_shaped_header(void **state)
{
    it_server_t s;
    uint8_t buf[4096];
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    memset(buf, 0, sizeof(buf));
    junk_once(&s, buf, 17, 2000, "17 zero bytes");
    junk_once(&s, buf, sizeof(buf), 2000, "4096 zero bytes");
    memset(buf, 0xff, sizeof(buf));
    junk_once(&s, buf, 64, 2000, "64 bytes of 0xff");
    memset(buf, 0, 64);
    buf[0] = 4;
    junk_once(&s, buf, 60, 2000, "a header claiming 4 bytes followed by 44");
    assert_real_client_works(&s);
    assert_int_equal(it_server_stop(&s), 0);
}

/* Frames that are wrong in their header: closed at once. */
static void test_bad_frame_header(void **state)
{
    it_server_t s;
    uint8_t buf[64];
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    boot_hdr(buf, BOOT_VERSION, T_HELLO, 0, HELLO_LEN);
    buf[3] ^= 1;
    junk_once(&s, buf, 4, 2000, "a wrong last magic byte");
    memcpy(buf, "RMRA", 4);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "the hello magic instead of the frame magic");
    boot_hdr(buf, 1, T_HELLO, 0, HELLO_LEN);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "frame version 1 (the old preamble)");
    boot_hdr(buf, 3, T_HELLO, 0, HELLO_LEN);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "frame version 3");
    boot_hdr(buf, 0, T_HELLO, 0, HELLO_LEN);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "frame version 0");
    boot_hdr(buf, BOOT_VERSION, 0, 0, HELLO_LEN);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "frame type 0");
    boot_hdr(buf, BOOT_VERSION, 8, 0, HELLO_LEN);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "frame type 8");
    boot_hdr(buf, BOOT_VERSION, 0xff, 0, HELLO_LEN);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "frame type 255");
    boot_hdr(buf, BOOT_VERSION, T_HELLO, 1, HELLO_LEN); /* CM is for CONNECT only */
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "HELLO with the CM flag");
    boot_hdr(buf, BOOT_VERSION, T_CONNECT, 2, 100);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "CONNECT with flags 2");
    boot_hdr(buf, BOOT_VERSION, T_HELLO, 0, BOOT_PAYLOAD_MAX + 1);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "a payload length of 65541");
    boot_hdr(buf, BOOT_VERSION, T_CONNECT, 0, 0xffffffffu);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "a payload length of 2^32-1");
    boot_hdr(buf, BOOT_VERSION, T_HELLO, 0, 0);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "an empty HELLO");
    boot_hdr(buf, BOOT_VERSION, T_HEARTBEAT, 0, 0);
    junk_once(&s, buf, BOOT_HDR_LEN, 2000, "a HEARTBEAT first");
    assert_real_client_works(&s);
    assert_int_equal(it_server_stop(&s), 0);
}

/* Connections that say nothing, or half a frame, and stay open: real
 * clients are served meanwhile; the server closes them after its bootstrap
 * timeout (5 s), not never; connect-and-close storms do no harm. */
static void test_silent_and_half_open_connections(void **state)
{
    enum { N = 6 };
    it_server_t s;
    int fds[N];
    uint8_t pre[BOOT_HDR_LEN + HELLO_LEN];
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    double t0 = it_now_ms();
    for (int i = 0; i < N; i++) {
        fds[i] = tcp_connect(s.addr);
        assert_true(fds[i] >= 0);
        if (i % 3 == 1) { /* half a header */
            boot_hdr(pre, BOOT_VERSION, T_HELLO, 0, HELLO_LEN);
            send_all(fds[i], pre, 6);
        } else if (i % 3 == 2) { /* a full header, part of the HELLO */
            hello_frame(pre);
            send_all(fds[i], pre, BOOT_HDR_LEN + 8);
        }
    }
    assert_real_client_works(&s);
    for (int i = 0; i < 50; i++) {
        int fd = tcp_connect(s.addr);
        assert_true(fd >= 0);
        close(fd);
    }
    assert_real_client_works(&s);
    for (int i = 0; i < N; i++) {
        double left = BOOT_TIMEOUT_MS + 3000 - (it_now_ms() - t0);
        double took = wait_closed(fds[i], left > 0 ? (int)left : 1);
        if (took < 0)
            fail_msg("connection %d still open %.0f ms after it was made (bootstrap "
                     "timeout %d ms)", i, it_now_ms() - t0, BOOT_TIMEOUT_MS);
        close(fds[i]);
    }
    if (it_now_ms() - t0 < BOOT_TIMEOUT_MS - 500)
        fail_msg("silent connections closed after %.0f ms, before the bootstrap timeout",
                 it_now_ms() - t0);
    assert_real_client_works(&s);
    assert_int_equal(it_server_stop(&s), 0);
}

/* Shutdown with garbage connections still open is prompt and clean. */
static void test_shutdown_with_garbage_open(void **state)
{
    it_server_t s;
    int fds[4];
    (void)state;

    it_must_start(&s, "--region", "a=1M", NULL);
    for (int i = 0; i < 4; i++) {
        fds[i] = tcp_connect(s.addr);
        assert_true(fds[i] >= 0);
    }
    it_sleep_ms(100);
    double t0 = it_now_ms();
    assert_int_equal(it_server_stop(&s), 0);
    if (it_now_ms() - t0 > 3000)
        fail_msg("shutdown with open garbage connections took %.0f ms", it_now_ms() - t0);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
}

/* HELLO, its reply, then CONNECT with addr: the server must answer
 * CONNECT_REPLY with an error and close, and stay up. Returns the status. */
static int32_t connect_with(it_server_t *s, const uint8_t *addr, uint32_t len, const char *what)
{
    uint8_t *buf = malloc(BOOT_HDR_LEN + HELLO_LEN + BOOT_HDR_LEN + len);
    int32_t st = 0;
    int fd = tcp_connect(s->addr), type;

    assert_non_null(buf);
    assert_true(fd >= 0);
    send_all(fd, buf, hello_frame(buf));
    type = read_reply(fd, &st, 5000);
    if (type != T_HELLO_REPLY || st != 0)
        fail_msg("%s: HELLO got frame type %d status %d", what, type, st);
    boot_hdr(buf, BOOT_VERSION, T_CONNECT, 0, len);
    memcpy(buf + BOOT_HDR_LEN, addr, len);
    send_all(fd, buf, BOOT_HDR_LEN + len);
    free(buf);
    type = read_reply(fd, &st, 5000);
    double took = wait_closed(fd, 2000);
    close(fd);
    assert_alive(s, what);
    if (type != T_CONNECT_REPLY)
        fail_msg("%s: got frame type %d instead of CONNECT_REPLY", what, type);
    if (st != REMORA_ERR_PROTOCOL && st != REMORA_ERR_TRANSPORT)
        fail_msg("%s: CONNECT_REPLY status %d (%s), expected PROTOCOL or TRANSPORT", what, st,
                 remora_status_string((remora_status_t)st));
    if (took < 0)
        fail_msg("%s: the server kept the connection open after refusing it", what);
    return st;
}

/* A well-formed HELLO, then CONNECT with a worker address that is not one:
 * each gets CONNECT_REPLY with an error and the connection closes. The
 * server checks the address's format version (low nibble of its first
 * byte) before UCX sees it: of the 16 nibbles, at most one gets past that
 * check (status TRANSPORT, from UCX); the rest get PROTOCOL. */
static void test_garbage_worker_address(void **state)
{
    it_server_t s;
    uint8_t *addr = malloc(4096);
    unsigned protocol = 0, transport = 0;
    (void)state;

    assert_non_null(addr);
    it_must_start(&s, "--region", "a=1M", NULL);
    for (unsigned nib = 0; nib < 16; nib++) {
        for (int kind = 0; kind < 3; kind++) {
            char what[96];
            uint32_t len = 100;
            if (kind == 0)
                memset(addr, 0xff, len);
            else if (kind == 1)
                memset(addr, 0, len);
            else {
                len = (uint32_t)(nib * 251 % 4000) + 8;
                it_fill_random(addr, len, nib + 1);
            }
            addr[0] = (uint8_t)((addr[0] & 0xf0) | nib);
            snprintf(what, sizeof(what), "a %s worker address of %u bytes, version nibble %u",
                     kind == 0 ? "0xff" : kind == 1 ? "zero" : "random", len, nib);
            if (connect_with(&s, addr, len, what) == REMORA_ERR_PROTOCOL)
                protocol++;
            else
                transport++;
        }
    }
    printf("# garbage worker addresses: %u refused by remora, %u by UCX\n", protocol, transport);
    assert_true(protocol >= 15 * 3);
    memset(addr, 0, 8);
    connect_with(&s, addr, 1, "a 1-byte worker address");
    connect_with(&s, addr, 7, "a 7-byte worker address");
    connect_with(&s, addr, 0, "an empty worker address");
    assert_real_client_works(&s);
    assert_int_equal(it_server_stop(&s), 0);
    free(addr);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_random_bytes, it_teardown_reap),
        cmocka_unit_test_teardown(test_http_requests, it_teardown_reap),
        cmocka_unit_test_teardown(test_ucx_cm_shaped_header, it_teardown_reap),
        cmocka_unit_test_teardown(test_bad_frame_header, it_teardown_reap),
        cmocka_unit_test_teardown(test_silent_and_half_open_connections, it_teardown_reap),
        cmocka_unit_test_teardown(test_shutdown_with_garbage_open, it_teardown_reap),
    };
    const struct CMUnitTest worker_address_tests[] = {
        cmocka_unit_test_teardown(test_garbage_worker_address, it_teardown_reap),
    };

    it_init("garbage");
    if (argc > 1 && strcmp(argv[1], "worker-address") == 0)
        return it_finish(cmocka_run_group_tests(worker_address_tests, NULL, NULL));
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
