/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The public contract of issue 15: field_mask on the output structs the
 * caller allocates (a field not asked for is untouched, the mask comes back
 * as the fields written, 0 asks for all, an unknown bit is refused with
 * nothing written), the one parser of path names, and log routing (a
 * context's log callback gets the lines, REMORA_LOG still filters, nothing
 * after destroy).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "util/log.h"

#define UNKNOWN_BIT (1ull << 40)
#define JUNK        0xab

/* ------------------------------------------------------------ field masks */

static void test_context_attr_mask(void **state)
{
    remora_context_h ctx;
    remora_context_attr_t a, before;
    (void)state;

    assert_int_equal(remora_context_create(NULL, &ctx), REMORA_OK);

    /* One field asked for: only it is written, the mask says so. */
    memset(&a, JUNK, sizeof(a));
    a.field_mask = REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS;
    assert_int_equal(remora_context_query(ctx, &a), REMORA_OK);
    assert_int_equal(a.field_mask, REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS);
    assert_true(strlen(a.transports) < sizeof(a.transports)); /* a string now */
    assert_int_equal(a.ucx_major, 0xababababu);
    assert_int_equal(a.ucx_mem_types, 0xababababababababull);

    /* 0: every field. */
    memset(&a, JUNK, sizeof(a));
    a.field_mask = 0;
    assert_int_equal(remora_context_query(ctx, &a), REMORA_OK);
    assert_int_equal(a.field_mask, REMORA_CONTEXT_ATTR_FIELD_UCX_VERSION |
                                       REMORA_CONTEXT_ATTR_FIELD_UCX_MEM_TYPES |
                                       REMORA_CONTEXT_ATTR_FIELD_TRANSPORTS);
    assert_int_equal(a.ucx_major, 1);
    assert_true(a.ucx_mem_types & (1u << REMORA_MEM_HOST));

    /* A bit this library does not know: refused, nothing written. */
    memset(&a, JUNK, sizeof(a));
    a.field_mask = REMORA_CONTEXT_ATTR_FIELD_UCX_VERSION | UNKNOWN_BIT;
    before = a;
    assert_int_equal(remora_context_query(ctx, &a), REMORA_ERR_INVALID_PARAM);
    assert_memory_equal(&a, &before, sizeof(a));

    remora_context_destroy(ctx);
}

static void test_cuda_attr_mask(void **state)
{
    remora_cuda_attr_t a, before;
    remora_cuda_device_attr_t d, dbefore;
    (void)state;

    memset(&a, JUNK, sizeof(a));
    a.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE;
    assert_int_equal(remora_cuda_query(&a), REMORA_OK);
    assert_int_equal(a.field_mask, REMORA_CUDA_ATTR_FIELD_AVAILABLE);
    assert_true(a.available == 0 || a.available == 1);
    assert_int_equal((unsigned char)a.reason[0], JUNK);

    a.field_mask = 0;
    assert_int_equal(remora_cuda_query(&a), REMORA_OK);
    assert_int_equal(a.field_mask, REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                       REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION |
                                       REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT |
                                       REMORA_CUDA_ATTR_FIELD_REASON);
    assert_true(strlen(a.reason) < sizeof(a.reason));

    memset(&a, JUNK, sizeof(a));
    a.field_mask = UNKNOWN_BIT;
    before = a;
    assert_int_equal(remora_cuda_query(&a), REMORA_ERR_INVALID_PARAM);
    assert_memory_equal(&a, &before, sizeof(a));

    /* Refused before the device is even looked at (no GPU needed). */
    memset(&d, JUNK, sizeof(d));
    d.field_mask = REMORA_CUDA_DEVICE_FIELD_NAME | UNKNOWN_BIT;
    dbefore = d;
    assert_int_equal(remora_cuda_device_query(0, &d), REMORA_ERR_INVALID_PARAM);
    assert_memory_equal(&d, &dbefore, sizeof(d));
}

/* A server in this process (its own context) with a plain region and a ring. */
typedef struct {
    remora_context_h sctx, cctx;
    remora_server_h  server;
    remora_mem_h     mem;
    remora_ring_h    ring;
    remora_client_h  client;
} fixture_t;

static void fixture_open(fixture_t *f)
{
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 65536};
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY,
                               .elem_size = 64, .capacity = 16};
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0"};
    remora_region_params_t wp = {.field_mask = REMORA_REGION_FIELD_FLAGS,
                                 .flags = REMORA_REGION_WRITABLE};
    char addr[80];

    memset(f, 0, sizeof(*f));
    assert_int_equal(remora_context_create(NULL, &f->sctx), REMORA_OK);
    assert_int_equal(remora_context_create(NULL, &f->cctx), REMORA_OK);
    assert_int_equal(remora_mem_create(f->sctx, &mp, &f->mem), REMORA_OK);
    assert_int_equal(remora_ring_create(f->sctx, &rp, &f->ring), REMORA_OK);
    assert_int_equal(remora_server_create(f->sctx, &sp, &f->server), REMORA_OK);
    assert_int_equal(remora_server_expose(f->server, "plain", f->mem, &wp), REMORA_OK);
    assert_int_equal(remora_server_expose_ring(f->server, "ring", f->ring), REMORA_OK);
    assert_int_equal(remora_server_address(f->server, addr, sizeof(addr)), REMORA_OK);
    assert_int_equal(remora_client_connect(f->cctx, addr, NULL, &f->client), REMORA_OK);
}

static void fixture_close(fixture_t *f)
{
    remora_client_disconnect(f->client);
    remora_ring_destroy(f->ring);
    remora_server_destroy(f->server);
    remora_mem_destroy(f->mem);
    remora_context_destroy(f->cctx);
    remora_context_destroy(f->sctx);
}

static void test_region_info_mask(void **state)
{
    fixture_t f;
    remora_region_info_t ri, before, *infos = NULL;
    size_t n = 0;
    const uint64_t all = REMORA_REGION_INFO_FIELD_NAME | REMORA_REGION_INFO_FIELD_SIZE |
                         REMORA_REGION_INFO_FIELD_MEM_TYPE | REMORA_REGION_INFO_FIELD_ACCESS |
                         REMORA_REGION_INFO_FIELD_GENERATION | REMORA_REGION_INFO_FIELD_KIND;
    (void)state;

    fixture_open(&f);
    memset(&ri, JUNK, sizeof(ri));
    ri.field_mask = REMORA_REGION_INFO_FIELD_SIZE | REMORA_REGION_INFO_FIELD_ACCESS;
    assert_int_equal(remora_client_lookup(f.client, "plain", &ri), REMORA_OK);
    assert_int_equal(ri.field_mask, REMORA_REGION_INFO_FIELD_SIZE | REMORA_REGION_INFO_FIELD_ACCESS);
    assert_int_equal(ri.size, 65536);
    assert_int_equal(ri.access, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);
    assert_int_equal((unsigned char)ri.name[0], JUNK);
    assert_int_equal(ri.generation, 0xababababababababull);

    memset(&ri, JUNK, sizeof(ri));
    ri.field_mask = 0;
    assert_int_equal(remora_client_lookup(f.client, "ring", &ri), REMORA_OK);
    assert_int_equal(ri.field_mask, all);
    assert_string_equal(ri.name, "ring");
    assert_int_equal(ri.kind, REMORA_REGION_RING);
    assert_int_equal(ri.generation, 1);
    assert_int_equal(ri.mem_type, REMORA_MEM_HOST);

    memset(&ri, JUNK, sizeof(ri));
    ri.field_mask = REMORA_REGION_INFO_FIELD_NAME | UNKNOWN_BIT;
    before = ri;
    assert_int_equal(remora_client_lookup(f.client, "plain", &ri), REMORA_ERR_INVALID_PARAM);
    assert_memory_equal(&ri, &before, sizeof(ri));

    /* The library's own array: every field, and the mask says so. */
    assert_int_equal(remora_client_list(f.client, &infos, &n), REMORA_OK);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(infos[i].field_mask, all);
    remora_region_info_free(infos);
    fixture_close(&f);
}

static void test_elem_info_mask(void **state)
{
    fixture_t f;
    remora_sub_h sub;
    remora_elem_info_t info, before;
    uint8_t elem[64], buf[64];
    const void *ref;
    (void)state;

    fixture_open(&f);
    for (unsigned i = 0; i < 4; i++) {
        memset(elem, (int)i, sizeof(elem));
        assert_int_equal(remora_ring_push(f.ring, elem, sizeof(elem), NULL), REMORA_OK);
    }
    assert_int_equal(remora_client_subscribe(f.client, "ring", NULL, &sub), REMORA_OK);

    /* Refused before anything is consumed. */
    memset(&info, JUNK, sizeof(info));
    info.field_mask = REMORA_ELEM_INFO_FIELD_SEQ | UNKNOWN_BIT;
    before = info;
    assert_int_equal(remora_sub_next(sub, buf, sizeof(buf), &info, 5000), REMORA_ERR_INVALID_PARAM);
    assert_memory_equal(&info, &before, sizeof(info));
    assert_int_equal(remora_sub_next_ref(sub, &ref, &info, 5000), REMORA_ERR_INVALID_PARAM);
    assert_memory_equal(&info, &before, sizeof(info));

    /* The subscription starts at the ring's head: push while it waits. */
    memset(&info, JUNK, sizeof(info));
    info.field_mask = REMORA_ELEM_INFO_FIELD_SEQ;
    memset(elem, 4, sizeof(elem));
    assert_int_equal(remora_ring_push(f.ring, elem, sizeof(elem), NULL), REMORA_OK);
    assert_int_equal(remora_sub_next(sub, buf, sizeof(buf), &info, 5000), REMORA_OK);
    assert_int_equal(info.field_mask, REMORA_ELEM_INFO_FIELD_SEQ);
    assert_int_equal(buf[0], 4);
    assert_int_equal(info.seq, 4);
    assert_int_equal(info.drops, 0xababababababababull);
    assert_int_equal(info.size, (size_t)0xababababababababull);

    memset(&info, JUNK, sizeof(info));
    info.field_mask = 0;
    memset(elem, 5, sizeof(elem));
    assert_int_equal(remora_ring_push(f.ring, elem, sizeof(elem), NULL), REMORA_OK);
    assert_int_equal(remora_sub_next_ref(sub, &ref, &info, 5000), REMORA_OK);
    assert_int_equal(info.field_mask, REMORA_ELEM_INFO_FIELD_SEQ | REMORA_ELEM_INFO_FIELD_DROPS |
                                          REMORA_ELEM_INFO_FIELD_SIZE);
    assert_int_equal(info.seq, 5);
    assert_int_equal(info.drops, 0);
    assert_int_equal(info.size, 64);
    assert_int_equal(((const uint8_t *)ref)[0], 5);

    remora_sub_destroy(sub);
    fixture_close(&f);
}

/* ------------------------------------------------------------ path names */

static void test_path_parse(void **state)
{
    remora_path_t p;
    (void)state;

    for (int i = REMORA_PATH_AUTO; i <= REMORA_PATH_STAGING; i++) {
        p = (remora_path_t)-1;
        assert_int_equal(remora_path_parse(remora_path_string((remora_path_t)i), &p), REMORA_OK);
        assert_int_equal(p, i);
    }
    p = REMORA_PATH_MAP;
    assert_int_equal(remora_path_parse("AM", &p), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_path_parse("", &p), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_path_parse("stagingx", &p), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_path_parse(NULL, &p), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(remora_path_parse("am", NULL), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(p, REMORA_PATH_MAP);
    assert_string_equal(remora_path_string((remora_path_t)99), "?");
}

/* ------------------------------------------------------------ log routing */

typedef struct {
    pthread_mutex_t    mx;
    unsigned           n;
    remora_log_level_t level;
    char               where[64], msg[256];
} captured_t;

static void capture(remora_log_level_t level, const char *where, const char *msg, void *arg)
{
    captured_t *c = arg;

    pthread_mutex_lock(&c->mx);
    c->n++;
    c->level = level;
    snprintf(c->where, sizeof(c->where), "%s", where);
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
    pthread_mutex_unlock(&c->mx);
}

static remora_context_params_t log_params(captured_t *c)
{
    remora_context_params_t p = {.field_mask = REMORA_CONTEXT_FIELD_LOG_CB,
                                 .log_cb = capture, .log_arg = c};
    return p;
}

static void test_log_callback(void **state)
{
    captured_t a = {.mx = PTHREAD_MUTEX_INITIALIZER}, b = {.mx = PTHREAD_MUTEX_INITIALIZER};
    remora_context_params_t p = log_params(&a);
    remora_context_h ca, cb;
    unsigned n;
    (void)state;

    /* The lines of a failing create reach its callback. */
    p.field_mask |= REMORA_CONTEXT_FIELD_HEARTBEAT;
    p.heartbeat_ms    = 500;
    p.peer_timeout_ms = 100;
    assert_int_equal(remora_context_create(&p, &ca), REMORA_ERR_INVALID_PARAM);
    assert_int_equal(a.n, 1);
    assert_int_equal(a.level, REMORA_LOG_ERROR);
    assert_non_null(strstr(a.msg, "peer timeout"));
    assert_non_null(strstr(a.where, "engine.c:"));
    /* ... and it is called no more once the call returned. */
    rm_error("after the failed create");
    assert_int_equal(a.n, 1);

    p = log_params(&a);
    assert_int_equal(remora_context_create(&p, &ca), REMORA_OK);
    n = a.n;
    /* REMORA_LOG=error (set in main): a warning is filtered out before the callback. */
    rm_warn("filtered");
    assert_int_equal(a.n, n);
    rm_error("routed %d", 42);
    assert_int_equal(a.n, n + 1);
    assert_string_equal(a.msg, "routed 42");
    assert_non_null(strstr(a.where, "test_contract.c:"));

    /* The context created last gets the lines, until it is destroyed. */
    p = log_params(&b);
    assert_int_equal(remora_context_create(&p, &cb), REMORA_OK);
    rm_error("to b");
    assert_int_equal(a.n, n + 1);
    assert_string_equal(b.msg, "to b");
    remora_context_destroy(cb);
    n = b.n;
    rm_error("to a again");
    assert_int_equal(b.n, n);
    assert_string_equal(a.msg, "to a again");

    remora_context_destroy(ca);
    n = a.n;
    rm_error("to stderr (expected in this test's output)");
    assert_int_equal(a.n, n);
}

int main(void)
{
    /* Read once, at the first context: the log test relies on it. */
    setenv("REMORA_LOG", "error", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_attr_mask),
        cmocka_unit_test(test_cuda_attr_mask),
        cmocka_unit_test(test_region_info_mask),
        cmocka_unit_test(test_elem_info_mask),
        cmocka_unit_test(test_path_parse),
        cmocka_unit_test(test_log_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
