/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Server counters through the library: remora_server_stats() and
 * remora_server_conn_stats() in the server's process, the same read over a
 * connection with remora_client_server_stats(), and the connection callback.
 * Server and client have contexts of their own (one process); the client
 * forces the am path so that every byte passes through the server.
 */
#include <stdlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>

#include <cmocka.h>

#include <remora/remora.h>

#define REGION (1u << 20)

typedef struct {
    remora_context_h sctx, cctx;
    remora_mem_h     mem;
    remora_server_h  server;
    char             addr[80];
    atomic_int       connected, disconnected;
    remora_conn_stats_t last; /* the last disconnect's counters */
} fixture_t;

static void conn_cb(const remora_conn_event_t *ev, void *arg)
{
    fixture_t *f = arg;

    if (ev->connected) {
        atomic_fetch_add(&f->connected, 1);
    } else {
        f->last = *ev->stats;
        atomic_fetch_add(&f->disconnected, 1);
    }
}

static int setup(void **state)
{
    static fixture_t f;
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = REGION};
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                               REMORA_SERVER_FIELD_CONN_CB,
                                 .listen_addr = "127.0.0.1:0", .conn_cb = conn_cb,
                                 .conn_arg = &f};
    remora_region_params_t rp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags = REMORA_REGION_WRITABLE};

    assert_int_equal(remora_context_create(NULL, &f.sctx), REMORA_OK);
    assert_int_equal(remora_context_create(NULL, &f.cctx), REMORA_OK);
    assert_int_equal(remora_mem_create(f.sctx, &mp, &f.mem), REMORA_OK);
    assert_int_equal(remora_server_create(f.sctx, &sp, &f.server), REMORA_OK);
    assert_int_equal(remora_server_expose(f.server, "r", f.mem, &rp), REMORA_OK);
    assert_int_equal(remora_server_address(f.server, f.addr, sizeof(f.addr)), REMORA_OK);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    remora_server_destroy(f->server);
    remora_mem_destroy(f->mem);
    remora_context_destroy(f->cctx);
    remora_context_destroy(f->sctx);
    return 0;
}

static void wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 500 && atomic_load(v) < want; i++)
        usleep(10000);
    assert_int_equal(atomic_load(v), want);
}

/* K reads of N bytes and one write: the counters say exactly that, in the
 * server's process, per connection, over the wire, and at the disconnect. */
static void test_counters_match_traffic(void **state)
{
    fixture_t *f = *state;
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_PATH, .path = REMORA_PATH_AM};
    remora_server_stats_t st = {.field_mask = ~0ull}, before = {.field_mask = ~0ull};
    remora_conn_stats_t cs[4];
    remora_client_h c;
    static uint8_t buf[8192];
    size_t n;

    assert_int_equal(remora_server_stats(f->server, &before), REMORA_OK);
    assert_int_equal(before.conns, 0);
    assert_int_equal(remora_client_connect(f->cctx, f->addr, &cp, &c), REMORA_OK);
    wait_for(&f->connected, 1);
    for (int i = 0; i < 7; i++)
        assert_int_equal(remora_client_read(c, "r", (uint64_t)i * 8192, buf, 3000), REMORA_OK);
    assert_int_equal(remora_client_write(c, "r", 0, buf, 8192), REMORA_OK);
    assert_int_equal(remora_client_read(c, "r", REGION, buf, 1), REMORA_ERR_OUT_OF_RANGE);
    assert_int_equal(remora_client_read(c, "nope", 0, buf, 1), REMORA_ERR_NOT_FOUND);

    /* Only the fields asked for are written; the mask says which exist. */
    st.field_mask = REMORA_SERVER_STATS_FIELD_AM_READ_OPS | (1ull << 62);
    st.am_read_bytes = 12345;
    assert_int_equal(remora_server_stats(f->server, &st), REMORA_OK);
    assert_int_equal(st.field_mask, REMORA_SERVER_STATS_FIELD_AM_READ_OPS);
    assert_int_equal(st.am_read_ops, 7);
    assert_int_equal(st.am_read_bytes, 12345);

    st.field_mask = ~0ull;
    assert_int_equal(remora_server_stats(f->server, &st), REMORA_OK);
    assert_int_equal(st.am_read_ops, 7);
    assert_int_equal(st.am_read_bytes, 7 * 3000);
    assert_int_equal(st.am_write_ops, 1);
    assert_int_equal(st.am_write_bytes, 8192);
    assert_int_equal(st.staging_read_ops + st.staging_write_ops, 0);
    assert_int_equal(st.errors, 1); /* the missing region; the range is checked by the client */
    assert_int_equal(st.conns, 1);
    assert_int_equal(st.conns_accepted, 1);
    assert_int_equal(st.lookups, 1);

    memset(cs, 0, sizeof(cs));
    for (int i = 0; i < 4; i++)
        cs[i].field_mask = ~0ull;
    assert_int_equal(remora_server_conn_stats(f->server, cs, 4, &n), REMORA_OK);
    assert_int_equal(n, 1);
    assert_int_equal(cs[0].read_ops, 7);
    assert_int_equal(cs[0].read_bytes, 21000);
    assert_int_equal(cs[0].write_ops, 1);
    assert_int_equal(cs[0].write_bytes, 8192);
    assert_int_equal(cs[0].errors, 1);
    assert_int_equal(cs[0].id, 1);
    assert_int_equal(cs[0].lane, 0);
    assert_int_equal(strncmp(cs[0].peer, "127.0.0.1:", 10), 0);
    assert_int_equal(remora_server_conn_stats(f->server, NULL, 0, &n), REMORA_OK);
    assert_int_equal(n, 1);

    /* Over the wire: the same numbers. */
    remora_server_stats_t rs = {.field_mask = ~0ull};
    remora_conn_stats_t rc[2] = {{.field_mask = ~0ull}, {.field_mask = ~0ull}};
    assert_int_equal(remora_client_server_stats(c, &rs, rc, 2, &n), REMORA_OK);
    assert_int_equal(rs.am_read_bytes, 21000);
    assert_int_equal(rs.am_write_ops, 1);
    assert_int_equal(n, 1);
    assert_string_equal(rc[0].peer, cs[0].peer);
    assert_int_equal(rc[0].read_ops, 7);
    assert_int_equal(remora_client_server_stats(c, &rs, NULL, 0, NULL), REMORA_OK);

    remora_client_disconnect(c);
    wait_for(&f->disconnected, 1);
    assert_int_equal(f->last.read_ops, 7);
    assert_int_equal(f->last.write_bytes, 8192);
    assert_string_equal(f->last.peer, cs[0].peer);
    st.field_mask = REMORA_SERVER_STATS_FIELD_CONNS;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(remora_server_stats(f->server, &st), REMORA_OK);
        if (st.conns == 0)
            break;
        usleep(10000);
    }
    assert_int_equal(st.conns, 0);
}

/* Bad arguments are refused. */
static void test_bad_arguments(void **state)
{
    fixture_t *f = *state;
    remora_server_stats_t st = {.field_mask = ~0ull};
    size_t n;

    assert_int_equal(remora_server_stats(NULL, &st), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_server_stats(f->server, NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_server_conn_stats(f->server, NULL, 1, &n), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_server_conn_stats(f->server, NULL, 0, NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_client_server_stats(NULL, &st, NULL, 0, NULL),
                     REMORA_ERR_INVALID_PARAM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters_match_traffic),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
