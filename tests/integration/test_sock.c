/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Host sockets (remora_sock_*) over real UCX: a server context with a
 * listener in this process, clients on other contexts, and a child process
 * (this program re-executed with --child) as a peer that gets killed.
 * Checks byte-exact echo from 1 B to 4 MiB with partial reads reassembled,
 * 64 sockets at once, EOF and close semantics, unknown services, timeouts,
 * poll, the backlog's bounds (sockets per connection, bytes per unaccepted
 * socket), and a killed peer turning into REMORA_ERR_DISCONNECTED in time.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static remora_context_h g_sctx;
static remora_server_h  g_server;
static char             g_addr[IT_ADDR_MAX];
static remora_sock_listener_h g_echo;
static pthread_t        g_echo_thread;
static atomic_int       g_stop;

/* Echo every accepted socket on its own thread until EOF or error. */
static void *echo_one(void *arg)
{
    remora_sock_h s = arg;
    char *buf = malloc(1 << 20);
    for (;;) {
        int64_t n = remora_sock_recv(s, buf, 1 << 20, 30000);
        if (n <= 0)
            break;
        for (int64_t off = 0; off < n;) {
            int64_t m = remora_sock_send(s, buf + off, (size_t)(n - off), 30000);
            if (m < 0)
                goto out;
            off += m;
        }
    }
out:
    free(buf);
    remora_sock_close(s);
    return NULL;
}

static void *echo_accept(void *arg)
{
    while (!atomic_load(&g_stop)) {
        remora_sock_h s;
        if (remora_sock_accept(g_echo, 100, &s) != REMORA_OK)
            continue;
        pthread_t t;
        pthread_create(&t, NULL, echo_one, s);
        pthread_detach(t);
    }
    return NULL;
}

static int group_setup(void **state)
{
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    if (remora_context_create(NULL, &g_sctx) != REMORA_OK ||
        remora_server_create(g_sctx, &sp, &g_server) != REMORA_OK ||
        remora_server_address(g_server, g_addr, sizeof(g_addr)) != REMORA_OK ||
        remora_sock_listen(g_server, "echo", &g_echo) != REMORA_OK)
        return -1;
    return pthread_create(&g_echo_thread, NULL, echo_accept, NULL);
}

static int group_teardown(void **state)
{
    atomic_store(&g_stop, 1);
    pthread_join(g_echo_thread, NULL);
    remora_sock_listener_destroy(g_echo);
    remora_server_destroy(g_server);
    remora_context_destroy(g_sctx);
    return 0;
}

/* Send all of buf and read len bytes back, in pieces of at most `piece`. */
static void echo_exact(remora_sock_h s, size_t len, size_t piece, uint64_t seed)
{
    uint8_t *out = malloc(len), *in = malloc(len);
    size_t sent = 0, got = 0;

    assert_non_null(out);
    assert_non_null(in);
    it_fill_random(out, len, seed);
    while (got < len) {
        if (sent < len) {
            size_t n = len - sent < piece ? len - sent : piece;
            int64_t m = remora_sock_send(s, out + sent, n, 10000);
            assert_true(m > 0 && (size_t)m <= n);
            sent += (size_t)m;
        }
        int64_t r = remora_sock_recv(s, in + got, len - got < piece ? len - got : piece,
                                     sent > got ? 10000 : 0);
        if (r == REMORA_ERR_TIMED_OUT)
            continue;
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_memory_equal(in, out, len);
    free(out);
    free(in);
}

static void test_echo_sizes(void **state)
{
    it_client_t c;
    remora_sock_h s;

    it_assert_ok(it_client_open(&c, g_addr, NULL));
    it_assert_ok(remora_sock_connect(c.client, "echo", 5000, &s));
    for (size_t len = 1; len <= (4u << 20); len *= 4)
        echo_exact(s, len, len, len);
    echo_exact(s, 4u << 20, 4u << 20, 9);
    echo_exact(s, 1000003, 777, 10); /* odd pieces, many partial reads */
    remora_sock_close(s);
    it_client_close(&c);
}

typedef struct par { remora_client_h client; int idx; int ok; } par_t;

static void *par_one(void *arg)
{
    par_t *p = arg;
    remora_sock_h s;
    uint8_t out[65536], in[65536];

    if (remora_sock_connect(p->client, "echo", 10000, &s) != REMORA_OK)
        return NULL;
    it_fill_random(out, sizeof(out), (uint64_t)p->idx);
    for (int round = 0; round < 8; round++) {
        size_t got = 0;
        if (remora_sock_send(s, out, sizeof(out), 10000) != (int64_t)sizeof(out))
            goto out;
        while (got < sizeof(in)) {
            int64_t r = remora_sock_recv(s, in + got, sizeof(in) - got, 10000);
            if (r <= 0)
                goto out;
            got += (size_t)r;
        }
        if (memcmp(in, out, sizeof(in)) != 0)
            goto out;
    }
    p->ok = 1;
out:
    remora_sock_close(s);
    return NULL;
}

/* 64 sockets on one connection, each echoing its own bytes at once. */
static void test_many_sockets(void **state)
{
    it_client_t c;
    pthread_t t[64];
    par_t p[64];

    it_assert_ok(it_client_open(&c, g_addr, NULL));
    for (int i = 0; i < 64; i++) {
        p[i] = (par_t){.client = c.client, .idx = i};
        pthread_create(&t[i], NULL, par_one, &p[i]);
    }
    for (int i = 0; i < 64; i++) {
        pthread_join(t[i], NULL);
        assert_true(p[i].ok);
    }
    it_client_close(&c);
}

/* Shutdown: the echo side reads EOF, closes, and we read our bytes then EOF;
 * a send after the peer closed fails. Nonexistent service: NOT_FOUND. */
static void test_eof_close(void **state)
{
    it_client_t c;
    remora_sock_h s;
    char buf[16];

    it_assert_ok(it_client_open(&c, g_addr, NULL));
    it_assert_status(remora_sock_connect(c.client, "nobody", 5000, &s), REMORA_ERR_NOT_FOUND);
    it_assert_ok(remora_sock_connect(c.client, "echo", 5000, &s));
    assert_int_equal(remora_sock_send(s, "hello", 5, 5000), 5);
    it_assert_ok(remora_sock_shutdown(s));
    assert_int_equal(remora_sock_send(s, "x", 1, 5000), REMORA_ERR_INVALID_PARAM);
    size_t got = 0;
    while (got < 5) {
        int64_t r = remora_sock_recv(s, buf + got, sizeof(buf) - got, 5000);
        assert_true(r > 0);
        got += (size_t)r;
    }
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(remora_sock_recv(s, buf, sizeof(buf), 5000), 0);
    assert_int_equal(remora_sock_recv(s, buf, sizeof(buf), 5000), 0);
    remora_sock_close(s);
    it_client_close(&c);
}

/* recv with nothing to read: 0 ms returns at once, 200 ms after ~200 ms;
 * poll sees POLLOUT at once and POLLIN when the echo comes back. */
static void test_timeouts_poll(void **state)
{
    it_client_t c;
    remora_sock_h s;
    char buf[8];
    unsigned ev = REMORA_SOCK_POLLIN, rev = 0;

    it_assert_ok(it_client_open(&c, g_addr, NULL));
    it_assert_ok(remora_sock_connect(c.client, "echo", 5000, &s));
    double t0 = it_now_ms();
    assert_int_equal(remora_sock_recv(s, buf, sizeof(buf), 0), REMORA_ERR_TIMED_OUT);
    assert_true(it_now_ms() - t0 < 500); /* no wait, give or take a preemption */
    t0 = it_now_ms();
    assert_int_equal(remora_sock_recv(s, buf, sizeof(buf), 200), REMORA_ERR_TIMED_OUT);
    double dt = it_now_ms() - t0;
    assert_true(dt >= 190 && dt < 2000);
    assert_int_equal(remora_sock_poll(&s, &ev, &rev, 1, 100), 0);
    ev = REMORA_SOCK_POLLOUT;
    assert_int_equal(remora_sock_poll(&s, &ev, &rev, 1, 100), 1);
    assert_int_equal(rev, REMORA_SOCK_POLLOUT);
    assert_int_equal(remora_sock_send(s, "ping", 4, 1000), 4);
    ev = REMORA_SOCK_POLLIN;
    assert_int_equal(remora_sock_poll(&s, &ev, &rev, 1, 5000), 1);
    assert_int_equal(rev, REMORA_SOCK_POLLIN);
    assert_true(remora_sock_recv(s, buf, sizeof(buf), 0) > 0);
    remora_sock_close(s);
    it_client_close(&c);
}

/* ---------------------------------------------------------------- the backlog */

/* One connection's unaccepted sockets of a service past 64 get BUSY; another
 * client still connects, and the first again once one of its is accepted. */
static void test_backlog_cap(void **state)
{
    enum { CAP = 64 };
    remora_sock_listener_h l;
    remora_sock_h s[CAP], other, more, a;
    it_client_t c, c2;

    it_assert_ok(remora_sock_listen(g_server, "later", &l));
    it_assert_ok(it_client_open(&c, g_addr, NULL));
    it_assert_ok(it_client_open(&c2, g_addr, NULL));
    for (int i = 0; i < CAP; i++)
        it_assert_ok(remora_sock_connect(c.client, "later", 5000, &s[i]));
    it_assert_status(remora_sock_connect(c.client, "later", 5000, &more), REMORA_ERR_BUSY);
    it_assert_ok(remora_sock_connect(c2.client, "later", 5000, &other));
    it_assert_ok(remora_sock_accept(l, 1000, &a));
    it_assert_ok(remora_sock_connect(c.client, "later", 5000, &more));
    remora_sock_close(a);
    remora_sock_close(more);
    remora_sock_close(other);
    for (int i = 0; i < CAP; i++)
        remora_sock_close(s[i]);
    remora_sock_listener_destroy(l);
    it_client_close(&c2);
    it_client_close(&c);
}

/* Sends until a send moves nothing in 1 s; the bytes that went. */
static size_t send_until_blocked(remora_sock_h s, const uint8_t *buf, size_t len)
{
    size_t sent = 0;
    int64_t m;

    while (sent < len && (m = remora_sock_send(s, buf + sent, len - sent, 1000)) > 0)
        sent += (size_t)m;
    return sent;
}

static void send_all(remora_sock_h s, const uint8_t *buf, size_t len)
{
    for (size_t sent = 0; sent < len;) {
        int64_t m = remora_sock_send(s, buf + sent, len - sent, 10000);
        assert_true(m > 0);
        sent += (size_t)m;
    }
}

static void recv_exact(remora_sock_h s, uint8_t *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        int64_t r = remora_sock_recv(s, buf + got, len - got, 10000);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

/* A socket not yet accepted takes one message (64 KiB) of its peer's bytes,
 * not a whole window; accepted, it opens the full REMORA_SOCK_WINDOW, whether
 * bytes came before the accept or only after, and every byte arrives. */
static void test_unaccepted_window(void **state)
{
    const size_t len = REMORA_SOCK_WINDOW + (1u << 20);
    uint8_t *out = malloc(len), *in = malloc(len);
    remora_sock_listener_h l;
    it_client_t c;

    assert_non_null(out);
    assert_non_null(in);
    it_fill_random(out, len, 77);
    it_assert_ok(remora_sock_listen(g_server, "later", &l));
    it_assert_ok(it_client_open(&c, g_addr, NULL));
    for (int accept_first = 0; accept_first < 2; accept_first++) {
        remora_sock_h s, a;
        size_t sent = 0;

        it_assert_ok(remora_sock_connect(c.client, "later", 5000, &s));
        if (!accept_first) {
            int64_t early = remora_sock_send(s, out, len, 1000);
            assert_true(early > 0 && early <= (64 << 10));
            assert_int_equal(remora_sock_send(s, out + early, len - (size_t)early, 0),
                             REMORA_ERR_TIMED_OUT);
            sent = (size_t)early;
        }
        it_assert_ok(remora_sock_accept(l, 1000, &a));
        sent += send_until_blocked(s, out + sent, len - sent);
        assert_int_equal(sent, REMORA_SOCK_WINDOW); /* nothing read yet */
        recv_exact(a, in, sent);
        send_all(s, out + sent, len - sent);
        recv_exact(a, in + sent, len - sent);
        assert_memory_equal(in, out, len);
        remora_sock_close(a);
        remora_sock_close(s);
    }
    remora_sock_listener_destroy(l);
    it_client_close(&c);
    free(out);
    free(in);
}

/* ---------------------------------------------------------------- a peer that dies */

/* --child: a server whose "sink" service accepts one socket and reads
 * nothing, and whose "talk" service sends 1 MiB then goes quiet. Prints its
 * address, then waits to be killed. */
static int child_main(void)
{
    remora_context_h ctx;
    remora_server_h srv;
    remora_sock_listener_h l;
    char addr[IT_ADDR_MAX];
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    static char big[1 << 20];

    /* Gone with the test, also when an assertion ends it before its kill:
     * an orphan would loop here forever, holding ctest's output open. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
        return 1;
    if (remora_context_create(NULL, &ctx) != REMORA_OK ||
        remora_server_create(ctx, &sp, &srv) != REMORA_OK ||
        remora_server_address(srv, addr, sizeof(addr)) != REMORA_OK ||
        remora_sock_listen(srv, "talk", &l) != REMORA_OK)
        return 1;
    printf("%s\n", addr);
    fflush(stdout);
    for (;;) {
        remora_sock_h s;
        if (remora_sock_accept(l, 1000, &s) == REMORA_OK)
            remora_sock_send(s, big, sizeof(big), 10000);
    }
}

static const char *g_self;

static void test_peer_killed(void **state)
{
    int fds[2];
    char addr[IT_ADDR_MAX] = "";
    it_client_t c;
    remora_sock_h s;
    char *buf = malloc(1 << 20);
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT,
                                 .timeout_ms = 5000};

    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        execl(g_self, g_self, "--child", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    assert_non_null(fgets(addr, sizeof(addr), f));
    addr[strcspn(addr, "\n")] = '\0';
    it_assert_ok(it_client_open(&c, addr, &cp));
    it_assert_ok(remora_sock_connect(c.client, "talk", 5000, &s));
    int64_t r = remora_sock_recv(s, buf, 1 << 20, 5000);
    assert_true(r > 0); /* mid-transfer */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    double t0 = it_now_ms();
    size_t total = (size_t)r;
    for (;;) {
        r = remora_sock_recv(s, buf, 1 << 20, 10000);
        if (r <= 0)
            break;
        total += (size_t)r;
    }
    double dt = it_now_ms() - t0;
    print_message("peer killed after %zu bytes; recv failed after %.0f ms: %s\n", total, dt,
                  remora_status_string((remora_status_t)r));
    assert_int_equal(r, REMORA_ERR_DISCONNECTED);
    assert_true(dt < 5000); /* its connection's EOF tells, not the peer timeout */
    assert_int_equal(remora_sock_send(s, buf, 10, 1000), REMORA_ERR_DISCONNECTED);
    remora_sock_close(s);
    it_client_close(&c);
    fclose(f);
    free(buf);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0)
        return child_main();
    g_self = argv[0];
    it_init("sock");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_sizes),
        cmocka_unit_test(test_many_sockets),
        cmocka_unit_test(test_eof_close),
        cmocka_unit_test(test_timeouts_poll),
        cmocka_unit_test(test_backlog_cap),
        cmocka_unit_test(test_unaccepted_window),
        cmocka_unit_test(test_peer_killed),
    };
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
