/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The gate's filter on real listening sockets (src/engine/gate.h): which
 * sources complete a TCP handshake with a guarded listener, as hosts are
 * let in and out. 127.0.0.2 stands for another host.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/gate.h"

/* A listening socket on addr (port 0: any); its address in *sa. */
static int listener(int family, const char *addr, struct sockaddr_storage *sa)
{
    int fd = socket(family, SOCK_STREAM, 0);
    socklen_t len = sizeof(*sa);

    assert_true(fd >= 0);
    memset(sa, 0, sizeof(*sa));
    sa->ss_family = (sa_family_t)family;
    if (family == AF_INET)
        inet_pton(AF_INET, addr, &((struct sockaddr_in *)sa)->sin_addr);
    else
        inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)sa)->sin6_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)sa, family == AF_INET ? sizeof(struct sockaddr_in)
                                                                       : sizeof(struct sockaddr_in6)),
                     0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)sa, &len), 0);
    return fd;
}

static void sockaddr_of(int family, const char *ip, struct sockaddr_storage *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->ss_family = (sa_family_t)family;
    if (family == AF_INET)
        assert_int_equal(inet_pton(AF_INET, ip, &((struct sockaddr_in *)sa)->sin_addr), 1);
    else
        assert_int_equal(inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)sa)->sin6_addr), 1);
}

/* Whether a connection from src to sa completes its handshake within ms. */
static int reaches(const struct sockaddr_storage *sa, const char *src, int ms)
{
    int family = sa->ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_storage from;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int err = 0, ok;
    socklen_t el = sizeof(err);

    sockaddr_of(family, src, &from);
    assert_int_equal(bind(fd, (struct sockaddr *)&from, len), 0);
    if (connect(fd, (const struct sockaddr *)sa, len) != 0 && errno != EINPROGRESS) {
        close(fd);
        return 0;
    }
    ok = poll(&p, 1, ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && !err;
    close(fd);
    return ok;
}

static void test_ipv4(void **state)
{
    rm_gate_t *g = rm_gate_create();
    struct sockaddr_storage sa, lo, other;
    rm_gate_pass_t a = {0}, b = {0};
    int fd = listener(AF_INET, "127.0.0.1", &sa);
    (void)state;

    assert_non_null(g);
    assert_true(reaches(&sa, "127.0.0.1", 500)); /* not guarded yet */
    assert_int_equal(rm_gate_guard_listener(g, g, (struct sockaddr *)&sa), 0);
    assert_false(reaches(&sa, "127.0.0.1", 300));
    assert_false(reaches(&sa, "127.0.0.2", 300));

    sockaddr_of(AF_INET, "127.0.0.1", &lo);
    sockaddr_of(AF_INET, "127.0.0.2", &other);
    assert_int_equal(rm_gate_open(g, &a, (struct sockaddr *)&lo, NULL, NULL, 0), REMORA_OK);
    assert_true(reaches(&sa, "127.0.0.1", 500));
    assert_false(reaches(&sa, "127.0.0.2", 300));
    assert_true(rm_gate_allows(g, (struct sockaddr *)&lo));
    assert_false(rm_gate_allows(g, (struct sockaddr *)&other));

    /* Counted per host: a second pass for it, the first given back. */
    assert_int_equal(rm_gate_open(g, &b, (struct sockaddr *)&lo, NULL, NULL, 0), REMORA_OK);
    assert_int_equal(rm_gate_open(g, &b, (struct sockaddr *)&lo, NULL, NULL, 0), REMORA_OK); /* no-op */
    assert_int_equal(b.n, 1);
    rm_gate_close(g, &a);
    assert_int_equal(a.n, 0);
    assert_true(reaches(&sa, "127.0.0.1", 500));
    rm_gate_close(g, &b);
    assert_false(reaches(&sa, "127.0.0.1", 300));

    rm_gate_forget(g, g);
    close(fd);
    rm_gate_destroy(g);
}

/* IPv6 hosts, and v4-mapped addresses counted as IPv4 ones. */
static void test_ipv6(void **state)
{
    rm_gate_t *g = rm_gate_create();
    struct sockaddr_storage sa, v6, mapped, v4;
    rm_gate_pass_t a = {0}, m = {0};
    int fd;
    (void)state;

    struct sockaddr_in6 probe = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&probe, sizeof(probe)) != 0) {
        if (fd >= 0)
            close(fd);
        skip(); /* no IPv6 here */
    }
    close(fd);
    fd = listener(AF_INET6, "::1", &sa);
    assert_int_equal(rm_gate_guard_listener(g, g, (struct sockaddr *)&sa), 0);
    assert_false(reaches(&sa, "::1", 300));
    sockaddr_of(AF_INET6, "::1", &v6);
    /* Other IPv6 hosts that differ from ::1 in each of its four words, and
     * IPv4 hosts, let nothing through for ::1. */
    static const char *const others[] = {"fd00::1", "0:1::1", "::1:0:0:1", "::1:0:1", "::2",
                                         "127.0.0.1", "10.1.2.3"};
    rm_gate_pass_t op[7] = {{0}};
    struct sockaddr_storage o;
    for (unsigned i = 0; i < 7; i++) {
        sockaddr_of(strchr(others[i], ':') ? AF_INET6 : AF_INET, others[i], &o);
        assert_int_equal(rm_gate_open(g, &op[i], (struct sockaddr *)&o, NULL, NULL, 0), REMORA_OK);
    }
    assert_false(reaches(&sa, "::1", 300));
    assert_int_equal(rm_gate_open(g, &a, (struct sockaddr *)&v6, NULL, NULL, 0), REMORA_OK);
    assert_true(reaches(&sa, "::1", 500));
    rm_gate_close(g, &a);
    assert_false(reaches(&sa, "::1", 300));
    for (unsigned i = 0; i < 7; i++)
        rm_gate_close(g, &op[i]);

    sockaddr_of(AF_INET6, "::ffff:127.0.0.1", &mapped);
    sockaddr_of(AF_INET, "127.0.0.1", &v4);
    assert_int_equal(rm_gate_open(g, &m, (struct sockaddr *)&mapped, NULL, NULL, 0), REMORA_OK);
    assert_true(rm_gate_allows(g, (struct sockaddr *)&v4));
    rm_gate_close(g, &m);

    rm_gate_forget(g, g);
    close(fd);
    rm_gate_destroy(g);
}

/* As many IPv4 hosts as the gate says fit (the kernel's 4,096 instructions,
 * half of net.core.optmem_max) attach, each of them checked; one more is
 * refused and its pass left empty; a host already in the set takes no room. */
static void test_full(void **state)
{
    static rm_gate_pass_t pass[RM_GATE_HOSTS_MAX + 1];
    rm_gate_t *g = rm_gate_create();
    struct sockaddr_storage sa, h;
    int fd = listener(AF_INET, "127.0.0.1", &sa);
    unsigned n = rm_gate_room(g, AF_INET);
    char ip[32];
    (void)state;

    print_message("room for %u IPv4 hosts\n", n);
    assert_true(n >= 200 && n <= RM_GATE_HOSTS_MAX);
    assert_int_equal(rm_gate_guard_listener(g, g, (struct sockaddr *)&sa), 0);
    for (unsigned i = 0; i < n; i++) {
        /* 127.0.0.1 last: the program's final test lets it in */
        unsigned k = n - 1 - i;
        snprintf(ip, sizeof(ip), "127.0.%u.%u", 3 + k / 250, 1 + k % 250);
        if (i == n - 1)
            snprintf(ip, sizeof(ip), "127.0.0.1");
        sockaddr_of(AF_INET, ip, &h);
        assert_int_equal(rm_gate_open(g, &pass[i], (struct sockaddr *)&h, NULL, NULL, 0), REMORA_OK);
    }
    assert_int_equal(rm_gate_room(g, AF_INET), 0);
    sockaddr_of(AF_INET, "127.0.0.2", &h);
    assert_int_equal(rm_gate_open(g, &pass[n], (struct sockaddr *)&h, NULL, NULL, 0), REMORA_ERR_BUSY);
    assert_int_equal(pass[n].n, 0);
    assert_true(reaches(&sa, "127.0.0.1", 500));
    assert_true(reaches(&sa, "127.0.3.7", 500));
    assert_false(reaches(&sa, "127.0.0.2", 300));
    /* A host already in the set takes no room. */
    rm_gate_pass_t two = {0};
    sockaddr_of(AF_INET, "127.0.3.7", &h);
    assert_int_equal(rm_gate_open(g, &two, (struct sockaddr *)&h, NULL, NULL, 0), REMORA_OK);
    assert_int_equal(two.n, 1);
    rm_gate_close(g, &pass[0]);
    for (unsigned i = 1; i < n; i++)
        rm_gate_close(g, &pass[i]);
    rm_gate_close(g, &two);
    assert_false(reaches(&sa, "127.0.0.1", 300));
    assert_int_equal(rm_gate_room(g, AF_INET), n);
    rm_gate_forget(g, g);
    close(fd);
    rm_gate_destroy(g);
}

/* A guarded socket that closed is dropped, not guarded again under a number
 * reused by another socket; a listener that later gets that number and is
 * guarded in its own right gets the filter. */
static void test_closed_listener(void **state)
{
    rm_gate_t *g = rm_gate_create();
    struct sockaddr_storage sa, sb, lo;
    rm_gate_pass_t a = {0};
    int fd = listener(AF_INET, "127.0.0.1", &sa), fd2;
    (void)state;

    assert_int_equal(rm_gate_guard_listener(g, g, (struct sockaddr *)&sa), 0);
    close(fd);
    fd2 = listener(AF_INET, "127.0.0.1", &sb); /* most likely the same number */
    sockaddr_of(AF_INET, "127.0.0.9", &lo);
    assert_int_equal(rm_gate_open(g, &a, (struct sockaddr *)&lo, NULL, NULL, 0), REMORA_OK);
    assert_true(reaches(&sb, "127.0.0.1", 500));
    rm_gate_close(g, &a);
    assert_true(reaches(&sb, "127.0.0.1", 500));
    assert_int_equal(rm_gate_guard_listener(g, g, (struct sockaddr *)&sb), 0);
    assert_false(reaches(&sb, "127.0.0.1", 300));
    rm_gate_forget(g, g);
    close(fd2);
    rm_gate_destroy(g);
}

/* Matched by address as well as port: a listener on another address with
 * the same port number is not guarded. */
static void test_same_port_other_address(void **state)
{
    rm_gate_t *g = rm_gate_create();
    struct sockaddr_storage sa, sb;
    int fd = listener(AF_INET, "127.0.0.1", &sa), fd2;
    (void)state;

    fd2 = socket(AF_INET, SOCK_STREAM, 0);
    sb = sa;
    inet_pton(AF_INET, "127.0.0.5", &((struct sockaddr_in *)&sb)->sin_addr);
    assert_int_equal(bind(fd2, (struct sockaddr *)&sb, sizeof(struct sockaddr_in)), 0);
    assert_int_equal(listen(fd2, 8), 0);
    assert_int_equal(rm_gate_guard_listener(g, g, (struct sockaddr *)&sa), 0);
    assert_false(reaches(&sa, "127.0.0.1", 300));
    assert_true(reaches(&sb, "127.0.0.1", 500));
    rm_gate_forget(g, g);
    close(fd);
    close(fd2);
    rm_gate_destroy(g);
}

/* Which bootstrap sockets join two processes of one host. */
static void test_same_host(void **state)
{
    struct sockaddr_storage p, o;
    (void)state;

    sockaddr_of(AF_INET, "127.0.0.2", &p);
    sockaddr_of(AF_INET, "10.0.0.5", &o);
    assert_true(rm_gate_same_host((struct sockaddr *)&p, (struct sockaddr *)&o));
    sockaddr_of(AF_INET, "10.0.0.5", &p);
    assert_true(rm_gate_same_host((struct sockaddr *)&p, (struct sockaddr *)&o));
    sockaddr_of(AF_INET6, "::ffff:10.0.0.5", &p); /* v4-mapped, on a dual-stack socket */
    assert_true(rm_gate_same_host((struct sockaddr *)&p, (struct sockaddr *)&o));
    sockaddr_of(AF_INET, "10.0.0.6", &p);
    assert_false(rm_gate_same_host((struct sockaddr *)&p, (struct sockaddr *)&o));
    sockaddr_of(AF_INET6, "::1", &p);
    assert_true(rm_gate_same_host((struct sockaddr *)&p, (struct sockaddr *)&o));
    sockaddr_of(AF_INET6, "fd00::1", &p);
    assert_false(rm_gate_same_host((struct sockaddr *)&p, (struct sockaddr *)&o));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_closed_listener),
        cmocka_unit_test(test_same_port_other_address),
        cmocka_unit_test(test_same_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
