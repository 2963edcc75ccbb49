/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A server message that cannot be sent (memory ran out: src/util/fault.h
 * makes it happen on demand) on a live connection. The client must hear of
 * it at once, not wait for an answer that never comes: a ring subscriber
 * would wait forever (its waits have no timeout), a read for its whole
 * timeout. The server answers with the error instead; where even that
 * cannot be sent, the connection goes (DISCONNECTED). Other clients of the
 * server go on. In process, real UCX over loopback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "harness.h"
#include "util/fault.h"
#include "wire/wire.h"

#define CLIENT_TIMEOUT_MS 10000
#define PROMPT_MS         2000.0 /* well inside the client's timeout */

typedef struct {
    remora_context_h ctx;
    remora_server_h  server;
    remora_ring_h    ring;
    remora_mem_h     mem;
    char             addr[IT_ADDR_MAX];
} world_t;

static void world_open(world_t *w)
{
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                             REMORA_RING_FIELD_CAPACITY,
                               .elem_size = 256, .capacity = 64};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 4096};

    memset(w, 0, sizeof(*w));
    it_assert_ok(remora_context_create(NULL, &w->ctx));
    it_assert_ok(remora_server_create(w->ctx, &sp, &w->server));
    it_assert_ok(remora_server_address(w->server, w->addr, sizeof(w->addr)));
    it_assert_ok(remora_ring_create(w->ctx, &rp, &w->ring));
    it_assert_ok(remora_server_expose_ring(w->server, "r", w->ring));
    it_assert_ok(remora_mem_create(w->ctx, &mp, &w->mem));
    memset(remora_mem_address(w->mem), 0x5a, 4096);
    it_assert_ok(remora_server_expose(w->server, "m", w->mem, NULL));
}

static void world_close(world_t *w)
{
    rm_fault_send_arm(0, 0);
    remora_ring_destroy(w->ring);
    remora_server_destroy(w->server);
    remora_mem_destroy(w->mem);
    remora_context_destroy(w->ctx);
}

/* Over active messages: the same-host `map` path would read without asking. */
static void client_open(it_client_t *c, const world_t *w)
{
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT |
                                              REMORA_CLIENT_FIELD_PATH,
                                .timeout_ms = CLIENT_TIMEOUT_MS, .path = REMORA_PATH_AM};
    it_assert_ok(it_client_open(c, w->addr, &p));
}

static void commit_one(remora_ring_h ring)
{
    void *slot;
    it_assert_ok(remora_ring_reserve(ring, &slot));
    memset(slot, 0x11, remora_ring_elem_size(ring));
    remora_ring_commit(ring, NULL);
}

/* Another client, connected all along, still reads byte-exact. */
static void bystander_reads(it_client_t *b)
{
    uint8_t buf[4096];
    it_assert_ok(remora_client_read(b->client, "m", 0, buf, sizeof(buf)));
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0x5a);
}

/* Waits for the subscription's next status other than TIMED_OUT (an OK
 * first: the element may have come with the answer to a wait armed ahead). */
static remora_status_t sub_next_status(remora_sub_h sub, double t0, int skip_ok)
{
    uint8_t elem[256];
    remora_status_t st;

    do {
        st = remora_sub_next(sub, elem, sizeof(elem), NULL, 200);
    } while ((st == REMORA_ERR_TIMED_OUT || (skip_ok && st == REMORA_OK)) &&
             it_now_ms() - t0 < 3 * PROMPT_MS);
    return st;
}

/*
 * The answer to a subscriber's wait cannot be sent: the server answers the
 * wait with the error instead, at once, and the subscription goes on. If
 * even that cannot be sent, the connection goes: DISCONNECTED, at once.
 */
static void test_lost_ring_answer(void **state)
{
    world_t w;
    it_client_t c, b;
    remora_sub_h sub;
    uint8_t elem[256];
    (void)state;

    world_open(&w);
    client_open(&c, &w);
    client_open(&b, &w);
    it_assert_ok(remora_client_subscribe(c.client, "r", NULL, &sub));
    commit_one(w.ring);
    it_assert_ok(remora_sub_next(sub, elem, sizeof(elem), NULL, 5000));

    rm_fault_send_arm(RM_MSG_RING_NOTIFY, 1); /* the answer; its error reply goes */
    commit_one(w.ring);
    double t0 = it_now_ms();
    remora_status_t st = sub_next_status(sub, t0, 1);
    print_message("ring answer lost: %s after %.0f ms\n", remora_status_string(st),
                  it_now_ms() - t0);
    it_assert_status(st, REMORA_ERR_NO_MEMORY);
    assert_true(it_now_ms() - t0 < PROMPT_MS);
    commit_one(w.ring); /* and it goes on */
    it_assert_ok(remora_sub_next(sub, elem, sizeof(elem), NULL, 5000));

    rm_fault_send_arm(RM_MSG_RING_NOTIFY, 2); /* the answer and its error reply */
    commit_one(w.ring);
    t0 = it_now_ms();
    st = sub_next_status(sub, t0, 1);
    print_message("ring answer and error reply lost: %s after %.0f ms\n",
                  remora_status_string(st), it_now_ms() - t0);
    it_assert_status(st, REMORA_ERR_DISCONNECTED);
    assert_true(it_now_ms() - t0 < PROMPT_MS);
    bystander_reads(&b);
    remora_sub_destroy(sub);
    it_client_close(&c);
    it_client_close(&b);
    world_close(&w);
}

/* A read's reply cannot be sent: the error comes back instead, at once; if
 * that cannot be sent either, DISCONNECTED, not a wait for the whole timeout. */
static void test_lost_read_reply(void **state)
{
    world_t w;
    it_client_t c, b;
    uint8_t buf[64];
    (void)state;

    world_open(&w);
    client_open(&c, &w);
    client_open(&b, &w);
    it_assert_ok(remora_client_read(c.client, "m", 0, buf, sizeof(buf)));
    rm_fault_send_arm(RM_MSG_READ_REPLY, 1);
    double t0 = it_now_ms();
    remora_status_t st = remora_client_read(c.client, "m", 0, buf, sizeof(buf));
    print_message("read reply lost: %s after %.0f ms\n", remora_status_string(st),
                  it_now_ms() - t0);
    it_assert_status(st, REMORA_ERR_NO_MEMORY);
    it_assert_ok(remora_client_read(c.client, "m", 0, buf, sizeof(buf))); /* still connected */

    rm_fault_send_arm(RM_MSG_READ_REPLY, 2);
    t0 = it_now_ms();
    st = remora_client_read(c.client, "m", 0, buf, sizeof(buf));
    double took = it_now_ms() - t0;
    print_message("read reply and error reply lost: %s after %.0f ms\n",
                  remora_status_string(st), took);
    it_assert_status(st, REMORA_ERR_DISCONNECTED);
    assert_true(took < PROMPT_MS);
    bystander_reads(&b);
    /* A new connection to the same server works. */
    it_client_close(&c);
    client_open(&c, &w);
    it_assert_ok(remora_client_read(c.client, "m", 0, buf, sizeof(buf)));
    it_client_close(&c);
    it_client_close(&b);
    world_close(&w);
}

/*
 * A socket's CREDITs cannot be sent by the reader (here the server's side):
 * each one lost shrinks the writer's window for good, and four lose all of
 * it (a credit hands back a quarter); the writer would stall until its
 * timeout. The connection goes at the first instead: the writer's send
 * fails at once.
 */
static void test_lost_sock_credit(void **state)
{
    enum { CHUNK = 256 << 10 };
    world_t w;
    it_client_t c;
    remora_sock_listener_h l;
    remora_sock_h cs, ss;
    static uint8_t buf[CHUNK];
    int64_t n = 0;
    uint64_t got = 0;
    (void)state;

    world_open(&w);
    client_open(&c, &w);
    it_assert_ok(remora_sock_listen(w.server, "f", &l));
    it_assert_ok(remora_sock_connect(c.client, "f", 5000, &cs));
    it_assert_ok(remora_sock_accept(l, 5000, &ss));
    rm_fault_send_arm(RM_MSG_SOCK_CREDIT, 4);
    /* More than the window: the writer needs the reader's credit to finish.
     * One thread plays both, so the writer waits 20 ms at a time (a full
     * window is not a failure) and the reader reads in between. */
    double t0 = it_now_ms();
    for (uint64_t sent = 0; sent < 3ull * REMORA_SOCK_WINDOW && it_now_ms() - t0 < 3 * PROMPT_MS;) {
        n = remora_sock_send(cs, buf, CHUNK, 20);
        if (n < 0 && n != REMORA_ERR_TIMED_OUT)
            break;
        sent += n > 0 ? (uint64_t)n : 0;
        int64_t r;
        while ((r = remora_sock_recv(ss, buf, CHUNK, 20)) > 0)
            got += (uint64_t)r;
    }
    double took = it_now_ms() - t0;
    print_message("credit lost: send %s after %.0f ms, %llu bytes read\n",
                  n >= 0 ? "ok" : remora_status_string((remora_status_t)n), took,
                  (unsigned long long)got);
    it_assert_status((remora_status_t)n, REMORA_ERR_DISCONNECTED);
    assert_true(took < PROMPT_MS);
    remora_sock_close(ss);
    remora_sock_close(cs);
    remora_sock_listener_destroy(l);
    it_client_close(&c);
    world_close(&w);
}

/*
 * The connection fails inside a socket's send (UCX calls the endpoint's
 * error callback from within the send; src/util/fault.h makes it happen):
 * the socket lost its peer in the middle of the call. A data send that UCX
 * "queued" must not send its next chunk through the peer that is gone, nor
 * a FIN whose send failed report the failure through it (both crashed).
 * The calls end with what went, or DISCONNECTED; a bystander reads on.
 */
static void test_ep_fails_inside_sock_sends(void **state)
{
    static uint8_t buf[256 << 10];
    world_t w;
    it_client_t c, b;
    remora_sock_listener_h l;
    remora_sock_h cs, ss;
    (void)state;

    world_open(&w);
    client_open(&b, &w);
    it_assert_ok(remora_sock_listen(w.server, "f", &l));
    for (int fin = 0; fin < 2; fin++) {
        client_open(&c, &w);
        it_assert_ok(remora_sock_connect(c.client, "f", 5000, &cs));
        it_assert_ok(remora_sock_accept(l, 5000, &ss));
        if (!fin) {
            rm_fault_ep_fail_arm(RM_MSG_SOCK_DATA, 1, 1);
            int64_t n = remora_sock_send(cs, buf, sizeof(buf), 5000);
            print_message("256 KiB send, the connection failing in its first chunk: %lld\n",
                          (long long)n);
            assert_true(n == REMORA_ERR_DISCONNECTED || (n > 0 && (size_t)n < sizeof(buf)));
            it_assert_status((remora_status_t)remora_sock_send(cs, buf, 1, 1000),
                             REMORA_ERR_DISCONNECTED);
        } else {
            rm_fault_ep_fail_arm(RM_MSG_SOCK_FIN, 1, 0);
            print_message("close, the connection failing in its FIN\n");
        }
        remora_sock_close(cs);
        rm_fault_ep_fail_arm(0, 0, 0);
        remora_sock_close(ss);
        it_client_close(&c);
    }
    bystander_reads(&b);
    remora_sock_listener_destroy(l);
    it_client_close(&b);
    world_close(&w);
}

/*
 * A server that follows a ring push with an ERROR of the same request
 * instead of the push's verdict (rm_fault_stray_arm: a misbehaving server).
 * The element comes by rendezvous, so UCX may still be writing it into the
 * wait's buffer when the ERROR is handled: the wait fails (PROTOCOL) and the
 * buffer stays until UCX is done with it (it was freed under UCX's write: a
 * crash). The subscription goes on, byte-exact.
 */
static void test_stray_reply_after_push(void **state)
{
    enum { ELEM = 256 << 10 };
    static uint8_t got[ELEM];
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                             REMORA_RING_FIELD_CAPACITY,
                               .elem_size = ELEM, .capacity = 16};
    remora_ring_h ring;
    remora_sub_h sub;
    world_t w;
    it_client_t c;
    int failed = 0, ok = 0;
    (void)state;

    world_open(&w);
    it_assert_ok(remora_ring_create(w.ctx, &rp, &ring));
    it_assert_ok(remora_server_expose_ring(w.server, "big", ring));
    client_open(&c, &w);
    it_assert_ok(remora_client_subscribe(c.client, "big", NULL, &sub));
    for (int round = 0; round < 20; round++) {
        void *slot;
        rm_fault_stray_arm(RM_MSG_RING_NOTIFY, round < 10); /* then a well-behaved server */
        for (int i = 0; i < 3; i++) { /* a push of several: longer on the wire */
            it_assert_ok(remora_ring_reserve(ring, &slot));
            memset(slot, 0x40 + round, ELEM);
            remora_ring_commit(ring, NULL);
        }
        remora_status_t st = remora_sub_next(sub, got, sizeof(got), NULL, 5000);
        if (st == REMORA_OK) {
            ok++;
            for (size_t k = 0; k < ELEM; k += 4093)
                assert_int_equal(got[k], got[0]);
        } else {
            it_assert_status(st, REMORA_ERR_PROTOCOL);
            assert_true(round < 10);
            failed++;
        }
    }
    print_message("a push followed by an ERROR: %d waits failed, %d elements received\n",
                  failed, ok);
    assert_true(failed > 0);
    assert_true(ok >= 10);
    rm_fault_stray_arm(0, 0);
    remora_sub_destroy(sub);
    it_client_close(&c);
    it_assert_ok(remora_server_unexpose(w.server, "big"));
    remora_ring_destroy(ring);
    world_close(&w);
}

/* Commit one element filled with a byte of its sequence number. */
static void commit_seq(remora_ring_h ring)
{
    uint64_t seq = remora_ring_head(ring);
    void *slot;
    it_assert_ok(remora_ring_reserve(ring, &slot));
    memset(slot, (int)(seq & 0xff), remora_ring_elem_size(ring));
    remora_ring_commit(ring, NULL);
}

/*
 * A server that pushes more than the subscriber's credit, the bytes its
 * RING_WAIT asked for (rm_fault_overpush_arm: a misbehaving server; a
 * 1 GiB push for a 256 KiB credit took `remora stream read` to 1.06 GB).
 * The push is refused before anything is allocated or received: the wait
 * fails (PROTOCOL), the client's memory does not grow by the push, and the
 * subscription goes on with whole elements, in order.
 */
static void test_push_over_credit(void **state)
{
    enum { ELEM = 256 << 10, CAP = 64, OVER = 48 };
    static uint8_t got[ELEM];
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                             REMORA_RING_FIELD_CAPACITY,
                               .elem_size = ELEM, .capacity = CAP};
    remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_BATCH_BYTES,
                              .batch_bytes = ELEM}; /* a credit of one slot */
    remora_ring_h ring;
    remora_sub_h sub;
    world_t w;
    it_client_t c;
    (void)state;

    world_open(&w);
    it_assert_ok(remora_ring_create(w.ctx, &rp, &ring));
    it_assert_ok(remora_server_expose_ring(w.server, "big", ring));
    for (int i = 0; i < CAP; i++)
        commit_seq(ring); /* every slot touched: the ring is in the RSS already */
    client_open(&c, &w);
    it_assert_ok(remora_client_subscribe(c.client, "big", &sp, &sub));
    for (int i = 0; i < OVER; i++)
        commit_seq(ring); /* there when the first wait comes: one push of them all */
    long rss0 = it_proc_rss_kib(getpid());
    rm_fault_overpush_arm(1);
    remora_status_t st = remora_sub_next(sub, got, sizeof(got), NULL, 5000);
    long grown = it_proc_rss_kib(getpid()) - rss0;
    rm_fault_overpush_arm(0);
    print_message("a push of %d slots for a credit of 1: %s, client RSS +%ld KiB\n", OVER,
                  remora_status_string(st), grown);
    it_assert_status(st, REMORA_ERR_PROTOCOL);
    assert_true(grown < (long)OVER * (ELEM >> 10) / 2);
    for (uint64_t seq = CAP; seq < CAP + 4; seq++) {
        remora_elem_info_t info = {.field_mask = 0};
        it_assert_ok(remora_sub_next(sub, got, sizeof(got), &info, 5000));
        assert_int_equal(info.seq, seq);
        for (size_t k = 0; k < ELEM; k++)
            assert_int_equal(got[k], seq & 0xff);
    }
    remora_sub_destroy(sub);
    it_client_close(&c);
    it_assert_ok(remora_server_unexpose(w.server, "big"));
    remora_ring_destroy(ring);
    world_close(&w);
}

/*
 * A request's later chunk cannot be sent: the send fails inside the loop
 * that issues chunks, which the end of the chunk before it runs. The request
 * fails with that error exactly once (it was completed twice, freeing what it
 * held twice), and the client goes on byte-exact. Chunks of 4 KiB; window 1
 * is the case where the failed chunk was the only one in flight.
 */
static void test_lost_later_chunk(void **state)
{
    enum { LEN = 64 << 10 };
    static const struct { unsigned type, window, skip; } cases[] = {
        {RM_MSG_READ, 1, 1}, {RM_MSG_READ, 1, 7}, {RM_MSG_READ, 3, 5},
        {RM_MSG_WRITE, 1, 1}, {RM_MSG_WRITE, 1, 7}, {RM_MSG_WRITE, 3, 5},
    };
    static uint8_t buf[LEN];
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = LEN};
    remora_region_params_t rp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags = REMORA_REGION_WRITABLE};
    remora_mem_h big;
    world_t w;
    (void)state;

    world_open(&w);
    it_assert_ok(remora_mem_create(w.ctx, &mp, &big));
    memset(remora_mem_address(big), 0x3c, LEN);
    it_assert_ok(remora_server_expose(w.server, "big", big, &rp));
    setenv("REMORA_CHUNK_SIZE", "4096", 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char window[8];
        it_client_t c;
        int write = cases[i].type == RM_MSG_WRITE;

        snprintf(window, sizeof(window), "%u", cases[i].window);
        setenv("REMORA_WINDOW", window, 1);
        client_open(&c, &w);
        rm_fault_send_arm_after(cases[i].type, cases[i].skip, 1);
        memset(buf, 0x3c, LEN);
        remora_status_t st = write ? remora_client_write(c.client, "big", 0, buf, LEN)
                                   : remora_client_read(c.client, "big", 0, buf, LEN);
        print_message("%s, window %u, chunk %u not sent: %s\n", write ? "write" : "read",
                      cases[i].window, cases[i].skip + 1, remora_status_string(st));
        it_assert_status(st, REMORA_ERR_NO_MEMORY);
        rm_fault_send_arm(0, 0);
        memset(buf, 0, LEN);
        it_assert_ok(remora_client_read(c.client, "big", 0, buf, LEN));
        for (size_t k = 0; k < LEN; k++)
            assert_int_equal(buf[k], 0x3c);
        it_client_close(&c);
    }
    unsetenv("REMORA_WINDOW");
    unsetenv("REMORA_CHUNK_SIZE");
    it_assert_ok(remora_server_unexpose(w.server, "big"));
    remora_mem_destroy(big);
    world_close(&w);
}

/*
 * A lying server (rm_fault_lie_arm): a region's memory file named by a path
 * to another file of the client's user (here one it holds open read-only, as
 * a process holds a key file), and a key of garbage. The client reads and
 * writes that file, or crashes in UCX's key parser, with neither check
 * (found by review). Now the file is refused (not a sealed region memfd of
 * the size given), the key is not unpacked without RMA, and the region is
 * served by active messages, byte-exact.
 */
static void test_lying_descriptors(void **state)
{
    world_t w;
    it_client_t c;
    char path[] = "/tmp/remora-secret-XXXXXX";
    static const char secret[] = "SECRET-KEY: hunter2-do-not-leak";
    uint8_t buf[64], key[64];
    (void)state;

    int wfd = mkstemp(path);
    assert_true(wfd >= 0);
    assert_int_equal(write(wfd, secret, sizeof(secret)), (ssize_t)sizeof(secret));
    close(wfd);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    world_open(&w);
    it_assert_ok(remora_server_expose(w.server, "rw", w.mem,
                 &(remora_region_params_t){.field_mask = REMORA_REGION_FIELD_FLAGS,
                                           .flags = REMORA_REGION_WRITABLE}));
    rm_fault_lie_arm(fd, NULL, 0, 1000);
    it_assert_ok(it_client_open(&c, w.addr, NULL));
    it_assert_ok(remora_client_read(c.client, "m", 0, buf, sizeof(buf)));
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0x5a); /* the region's bytes, not the file's */
    memset(buf, 0x33, sizeof(buf));
    it_assert_ok(remora_client_write(c.client, "rw", 0, buf, sizeof(buf)));
    rm_fault_lie_arm(-1, NULL, 0, 0);
    char got[sizeof(secret)] = {0};
    assert_int_equal(pread(fd, got, sizeof(got), 0), (ssize_t)sizeof(got));
    assert_memory_equal(got, secret, sizeof(secret)); /* the file is untouched */
    assert_int_equal(((uint8_t *)remora_mem_address(w.mem))[0], 0x33); /* the write landed */
    it_client_close(&c);
    memset(key, 0xff, sizeof(key));
    rm_fault_lie_arm(-1, key, sizeof(key), 1000);
    it_assert_ok(it_client_open(&c, w.addr, NULL));
    it_assert_ok(remora_client_read(c.client, "rw", 0, buf, sizeof(buf)));
    assert_int_equal(buf[0], 0x33);
    rm_fault_lie_arm(-1, NULL, 0, 0);
    it_client_close(&c);
    world_close(&w);
    close(fd);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_ring_answer),
        cmocka_unit_test(test_lost_read_reply),
        cmocka_unit_test(test_lost_sock_credit),
        cmocka_unit_test(test_lost_later_chunk),
        cmocka_unit_test(test_ep_fails_inside_sock_sends),
        cmocka_unit_test(test_stray_reply_after_push),
        cmocka_unit_test(test_lying_descriptors),
        cmocka_unit_test(test_push_over_credit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
