/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * REMORA_CM=1: after a client's handshake the server opens a UCX listener
 * for it and tells it the port in CONNECT_REPLY. Anyone can reach that port
 * (scanning finds it), so the connection made there must prove it is that
 * client: its first message is AUTH with the ticket that came with the port
 * (docs/protocol.md). A peer that never did the handshake, or sends a wrong
 * ticket, or anything else first, gets nothing and the slot closes; the
 * client with the right ticket is served. Real UCX over loopback; the
 * client side is raw (raw_boot.h and a UCX endpoint of the test's own).
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ucp/api/ucp.h>

#include <remora/remora.h>

#include "engine/engine.h"
#include "harness.h"
#include "raw_boot.h"
#include "wire/wire.h"

#define TOKEN    "cm-ticket-test-token"
#define REPLY_MS 1500

static struct {
    remora_context_h ctx;
    remora_server_h  server;
    remora_mem_h     mem;
    char             addr[IT_ADDR_MAX];
    ucp_context_h    uctx;
    ucp_worker_h     worker;
    int              got;   /* a message came back to us */
    rm_hdr_t         reply;
} g;

static ucs_status_t on_am(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
    if (rm_hdr_decode(hdr, hlen, &g.reply) == 0)
        g.got = 1;
    return UCS_OK;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {}

static int setup(void **state)
{
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                               REMORA_SERVER_FIELD_TOKEN |
                                               REMORA_SERVER_FIELD_LANES,
                                 .listen_addr = "127.0.0.1:0", .token = TOKEN,
                                 .token_len = strlen(TOKEN), .lanes = 1};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = 4096};
    ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = RM_AM_ID_TO_CLIENT, .cb = on_am,
                                 .flags = UCP_AM_FLAG_WHOLE_MSG};
    ucp_config_t *cfg;
    (void)state;

    setenv("REMORA_CM", "1", 1);
    it_assert_ok(remora_context_create(NULL, &g.ctx));
    it_assert_ok(remora_server_create(g.ctx, &sp, &g.server));
    it_assert_ok(remora_server_address(g.server, g.addr, sizeof(g.addr)));
    it_assert_ok(remora_mem_create(g.ctx, &mp, &g.mem));
    it_assert_ok(remora_server_expose(g.server, "secret", g.mem, NULL));
    assert_int_equal(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
    assert_int_equal(ucp_init(&up, cfg, &g.uctx), UCS_OK);
    ucp_config_release(cfg);
    assert_int_equal(ucp_worker_create(g.uctx, &wp, &g.worker), UCS_OK);
    assert_int_equal(ucp_worker_set_am_recv_handler(g.worker, &hp), UCS_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ucp_worker_destroy(g.worker);
    ucp_cleanup(g.uctx);
    remora_server_destroy(g.server);
    remora_mem_destroy(g.mem);
    remora_context_destroy(g.ctx);
    unsetenv("REMORA_CM");
    return 0;
}

/* A handshake up to CONNECT_REPLY with CM: the port and the ticket. */
static void handshake(rb_sock_t *s, uint16_t *port, uint8_t ticket[RM_CM_TICKET_LEN])
{
    uint8_t addr[16] = {0}; /* with CM the worker address is not used */
    rb_frame_t f;

    assert_int_equal(rb_dial(s, g.addr), 0);
    it_assert_ok(rb_hello_auth(s, TOKEN, strlen(TOKEN)));
    assert_int_equal(rb_send_frame(s, RM_BOOT_CONNECT, RM_BOOT_CM, addr, sizeof(addr)), 0);
    assert_int_equal(rb_recv(s, 2000, true, &f), 0);
    assert_int_equal(f.type, RM_BOOT_CONNECT_REPLY);
    assert_int_equal(f.flags, RM_BOOT_CM);
    assert_int_equal(f.len, 4 + RM_CM_REPLY_LEN); /* i32 status, then the reply */
    *port = (uint16_t)(f.payload[4] | f.payload[5] << 8);
    memcpy(ticket, f.payload + 6, RM_CM_TICKET_LEN);
    rb_frame_free(&f);
}

static ucp_ep_h cm_connect(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    ucp_ep_params_t p = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLER |
                                       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                         .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                         .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                         .err_handler = {.cb = on_ep_error},
                         .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa)}};
    ucp_ep_h ep;

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(ucp_ep_create(g.worker, &p, &ep), UCS_OK);
    return ep;
}

/* Progress until UCX is done with r (2 s at most), then free it. */
static void request_end(ucs_status_ptr_t r)
{
    for (double t0 = it_now_ms(); UCS_PTR_IS_PTR(r) && it_now_ms() - t0 < 2000;) {
        ucp_worker_progress(g.worker);
        if (ucp_request_check_status(r) != UCS_INPROGRESS)
            break;
    }
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
}

static void am_send(ucp_ep_h ep, unsigned type, uint64_t req_id, const void *body, size_t len)
{
    rm_hdr_t h = {.type = (uint8_t)type, .req_id = req_id};
    uint8_t hb[RM_HDR_MAX];
    size_t hl = rm_hdr_encode(&h, hb);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, RM_AM_ID_TO_SERVER, hb, hl, body, len, &p);

    request_end(r);
}

/* A LOOKUP of "secret" over ep: whether any answer came within REPLY_MS. */
static int lookup_answered(ucp_ep_h ep, rb_sock_t *s, uint64_t req_id)
{
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_wbuf_name(&w, "secret");
    g.got = 0;
    am_send(ep, RM_MSG_LOOKUP, req_id, w.data, w.len);
    rm_wbuf_free(&w);
    for (double t0 = it_now_ms(); !g.got && it_now_ms() - t0 < REPLY_MS;) {
        ucp_worker_progress(g.worker);
        rb_tick(s);
    }
    return g.got;
}

static void ep_close(ucp_ep_h ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);

    request_end(r);
}

/*
 * A handshake, then a connection to its port that sends AUTH with the first
 * auth_len bytes of the ticket (none when 0; one bit flipped when flip),
 * then a LOOKUP: whether it was answered. A connection that failed to prove
 * itself also costs the client its bootstrap socket.
 */
static int lookup_after_auth(size_t auth_len, int flip, uint64_t req_id)
{
    rb_sock_t s;
    uint16_t port;
    uint8_t ticket[RM_CM_TICKET_LEN];

    handshake(&s, &port, ticket);
    ticket[7] ^= flip ? 0x40 : 0;
    ucp_ep_h ep = cm_connect(port);
    if (auth_len)
        am_send(ep, RM_MSG_AUTH, 1, ticket, auth_len);
    int answered = lookup_answered(ep, &s, req_id);
    if (!answered)
        assert_true(rb_closed_within(&s, 3000, NULL));
    ep_close(ep);
    rb_close(&s);
    return answered;
}

/* Straight to the port, no ticket (as a peer that scanned for it). */
static void test_no_ticket(void **state)
{
    (void)state;
    assert_false(lookup_after_auth(0, 0, 77));
}

static void test_wrong_ticket(void **state)
{
    (void)state;
    assert_false(lookup_after_auth(RM_CM_TICKET_LEN, 1, 78));
}

/* A prefix of the right ticket. */
static void test_short_ticket(void **state)
{
    (void)state;
    assert_false(lookup_after_auth(RM_CM_TICKET_LEN - 1, 0, 79));
}

/* The right ticket: served, LOOKUP answered OK. */
static void test_right_ticket(void **state)
{
    (void)state;
    assert_true(lookup_after_auth(RM_CM_TICKET_LEN, 0, 80));
    assert_int_equal(g.reply.type, RM_MSG_LOOKUP_REPLY);
    assert_int_equal(g.reply.status, REMORA_OK);
    assert_int_equal(g.reply.req_id, 80);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_ticket),
        cmocka_unit_test(test_wrong_ticket),
        cmocka_unit_test(test_short_ticket),
        cmocka_unit_test(test_right_ticket),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
