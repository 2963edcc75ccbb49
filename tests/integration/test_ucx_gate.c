/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCX's own TCP listening ports, reached by a peer that never did remora's
 * handshake (src/engine/gate.h, docs/security.md §2.1).
 *
 * UCX's TCP transport takes, on any connection to its listening port, an
 * 8-byte magic number and then frames; one of its internal frame types
 * writes the bytes that follow at an address the frame names. Before the
 * gate, the "attacker" below (25 bytes, no token) aborted a token-protected
 * server in UCX's assertions, after its memcpy to the address it chose.
 *
 * Each case runs the server in this process, so a canary buffer of ours is
 * the target: the attacker connects to every TCP interface the server's UCX
 * worker address names, from 127.0.0.1 (or from 127.0.0.2, another host to
 * the gate), and if the TCP handshake completes it sends the write. The
 * gate must keep the handshake from completing for every host that holds no
 * connection of the server's, before any client and while one is connected;
 * the canary must stay as it was and the server must go on serving.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/ucx_addr.h"
#include "remote/server.h"
#include "harness.h"

#define TOKEN "gate-test-token-0123456789abcdef"
#define REGION_SIZE 4096

static uint8_t canary[64];

typedef struct {
    struct sockaddr_storage sa[32];
    unsigned n;
} targets_t;

static void add_target(void *arg, const struct sockaddr_storage *ss)
{
    targets_t *t = arg;

    if (ss->ss_family == AF_INET && t->n < 32)
        t->sa[t->n++] = *ss;
}

/* The IPv4 TCP interfaces (address and UCX's listening port) of ctx's worker. */
static void ucx_ports(remora_context_h ctx, targets_t *t)
{
    t->n = 0;
    assert_int_equal(rm_ucx_addr_tcp(ctx->worker_addr, ctx->worker_addr_len, add_target, t), 0);
    assert_true(t->n > 0);
}

/* ... and those of a server's other workers, added to t. */
static void worker_ports(remora_server_h srv, targets_t *t)
{
    unsigned before = t->n;

    for (unsigned i = 0; i < srv->nlanes; i++)
        assert_int_equal(rm_ucx_addr_tcp(srv->lane_ctx[i]->worker_addr,
                                         srv->lane_ctx[i]->worker_addr_len, add_target, t), 0);
    assert_true(t->n > before);
}

/* Connect from src to sa within ms: 1 if the TCP handshake completed. */
static int reach(const struct sockaddr_storage *sa, const char *src, int ms, int *fd_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);

    assert_true(fd >= 0);
    inet_pton(AF_INET, src, &from.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
    if (connect(fd, (const struct sockaddr *)sa, sizeof(struct sockaddr_in)) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return 0;
    }
    if (poll(&p, 1, ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
        close(fd);
        return 0;
    }
    *fd_p = fd;
    return 1;
}

/* UCX's magic number, then a PUT request frame (id 33, a 20-byte header:
 * address, length, sequence) with 8 bytes for the canary. */
static void send_put(int fd)
{
    uint8_t frame[8 + 5 + 20 + 8];
    uint64_t magic = 0xCAFEBABE12345678ull, addr = (uintptr_t)canary, len = 8;
    uint32_t hlen = 20, sn = 1;

    memcpy(frame, &magic, 8);
    frame[8] = 33;
    memcpy(frame + 9, &hlen, 4);
    memcpy(frame + 13, &addr, 8);
    memcpy(frame + 21, &len, 8);
    memcpy(frame + 29, &sn, 4);
    memcpy(frame + 33, "PWNED!!!", 8);
    (void)!write(fd, frame, sizeof(frame));
}

/* Attack every port from src; returns how many TCP handshakes completed. */
static unsigned attack(const targets_t *t, const char *src)
{
    unsigned reached = 0;
    int fd;

    for (unsigned i = 0; i < t->n; i++) {
        if (!reach(&t->sa[i], src, 300, &fd))
            continue;
        reached++;
        send_put(fd);
        it_sleep_ms(200);
        close(fd);
    }
    return reached;
}

static void assert_canary(void)
{
    for (size_t i = 0; i < sizeof(canary); i++)
        assert_int_equal(canary[i], 0xa5);
}

static void server_open(remora_context_h *ctx, remora_server_h *srv, remora_mem_h *mem,
                        unsigned lanes, char *addr)
{
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                               REMORA_SERVER_FIELD_TOKEN,
                                 .listen_addr = "127.0.0.1:0",
                                 .token = TOKEN, .token_len = sizeof(TOKEN) - 1};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = REGION_SIZE};

    if (lanes) {
        sp.field_mask |= REMORA_SERVER_FIELD_LANES;
        sp.lanes = lanes;
    }
    memset(canary, 0xa5, sizeof(canary));
    it_assert_ok(remora_context_create(NULL, ctx));
    it_assert_ok(remora_server_create(*ctx, &sp, srv));
    it_assert_ok(remora_server_address(*srv, addr, IT_ADDR_MAX));
    it_assert_ok(remora_mem_create(*ctx, &mp, mem));
    remora_pattern_fill(remora_mem_address(*mem), 0, REGION_SIZE);
    it_assert_ok(remora_server_expose(*srv, "a", *mem, NULL));
}

static void client_open(it_client_t *c, const char *addr)
{
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_TOKEN,
                                 .token = TOKEN, .token_len = sizeof(TOKEN) - 1};
    uint8_t buf[256];

    it_assert_ok(it_client_open(c, addr, &cp));
    it_assert_ok(remora_client_read(c->client, "a", 100, buf, sizeof(buf)));
    it_assert_pattern(buf, 100, sizeof(buf));
}

static void assert_serving(const char *addr)
{
    it_client_t c;

    client_open(&c, addr);
    it_client_close(&c);
}

/* Before any client: nobody gets through, from any host. */
static void test_before_any_client(void **state)
{
    remora_context_h ctx;
    remora_server_h srv;
    remora_mem_h mem;
    char addr[IT_ADDR_MAX];
    targets_t t;
    (void)state;

    server_open(&ctx, &srv, &mem, 0, addr);
    ucx_ports(ctx, &t);
    assert_int_equal(attack(&t, "127.0.0.1"), 0);
    assert_int_equal(attack(&t, "127.0.0.2"), 0);
    assert_canary();
    assert_serving(addr);
    remora_server_destroy(srv);
    remora_mem_destroy(mem);
    remora_context_destroy(ctx);
}

/* While a client from 127.0.0.1 is connected, another host still cannot
 * reach the server's UCX ports, nor the client's; once it is gone, its host
 * cannot either. */
static void test_while_a_client_is_connected(void **state)
{
    remora_context_h ctx;
    remora_server_h srv;
    remora_mem_h mem;
    char addr[IT_ADDR_MAX];
    targets_t t, tc;
    it_client_t c;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    (void)state;

    server_open(&ctx, &srv, &mem, 0, addr);
    ucx_ports(ctx, &t);
    client_open(&c, addr);
    ucx_ports(c.ctx, &tc);
    assert_true(rm_gate_allows(rm_engine_gate(ctx), (struct sockaddr *)&lo));
    assert_int_equal(attack(&t, "127.0.0.2"), 0);
    assert_int_equal(attack(&tc, "127.0.0.2"), 0);
    assert_canary();
    uint8_t buf[64];
    it_assert_ok(remora_client_read(c.client, "a", 7, buf, sizeof(buf)));
    it_assert_pattern(buf, 7, sizeof(buf));
    it_client_close(&c);

    /* The server lets the host go once the connection is closed. */
    for (int i = 0; i < 100 && rm_gate_allows(rm_engine_gate(ctx), (struct sockaddr *)&lo); i++)
        it_sleep_ms(20);
    assert_false(rm_gate_allows(rm_engine_gate(ctx), (struct sockaddr *)&lo));
    assert_int_equal(attack(&t, "127.0.0.1"), 0);
    assert_canary();
    assert_serving(addr);
    remora_server_destroy(srv);
    remora_mem_destroy(mem);
    remora_context_destroy(ctx);
}

/* A server on several workers: every worker's ports are guarded, and a
 * client with lanes (a connection to each) still works. */
static void test_workers(void **state)
{
    remora_context_h ctx;
    remora_server_h srv;
    remora_mem_h mem;
    char addr[IT_ADDR_MAX];
    targets_t t;
    it_client_t c;
    (void)state;

    server_open(&ctx, &srv, &mem, 3, addr);
    ucx_ports(ctx, &t);
    worker_ports(srv, &t);
    assert_int_equal(attack(&t, "127.0.0.1"), 0);
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_TOKEN | REMORA_CLIENT_FIELD_LANES,
                                 .token = TOKEN, .token_len = sizeof(TOKEN) - 1, .lanes = 3};
    it_assert_ok(it_client_open(&c, addr, &cp));
    static uint8_t big[REGION_SIZE];
    it_assert_ok(remora_client_read(c.client, "a", 0, big, sizeof(big)));
    it_assert_pattern(big, 0, sizeof(big));
    assert_int_equal(attack(&t, "127.0.0.2"), 0);
    assert_canary();
    it_client_close(&c);
    remora_server_destroy(srv);
    remora_mem_destroy(mem);
    remora_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_before_any_client),
        cmocka_unit_test(test_while_a_client_is_connected),
        cmocka_unit_test(test_workers),
    };
    if (getenv("REMORA_UCX_GATE") && strcmp(getenv("REMORA_UCX_GATE"), "0") == 0) {
        printf("SKIPPED: REMORA_UCX_GATE=0 turns the gate off\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
