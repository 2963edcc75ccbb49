/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Malformed messages from a real UCX peer. A raw UCP client (its own UCX
 * context and worker) connects the way docs/protocol.md says (bootstrap
 * frames on a TCP socket: HELLO, AUTH when asked, CONNECT with its worker
 * address; then an endpoint to the server's worker address with
 * UCP_ERR_HANDLING_MODE_PEER, heartbeats on the socket) and sends active
 * messages with id 0x52 and UCP_AM_SEND_FLAG_REPLY whose headers and bodies
 * break the rules one at a time. It checks the server's answer on AM id 0x53:
 * the reply type, the exact status, the echoed req_id. Afterwards a real
 * remora client must still work against the same server, and the server must
 * still shut down cleanly.
 *
 * Servers:
 *   W: a (64 KiB, pattern), z (2 MiB, zeros), --writable
 *   R: a (64 KiB, pattern), read-only
 *   T: a (64 KiB, pattern), --token-file
 *
 * The bootstrap itself (frames out of turn, wrong proofs, versions, the
 * handshake deadline) is tested on the socket alone: no UCX endpoint may
 * exist for a peer that did not finish it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "engine/engine.h" /* RM_AM_ID_TO_SERVER, RM_AM_ID_TO_CLIENT */
#include "harness.h"
#include "raw_boot.h"
#include "wire/wire.h"

#define A_SIZE (64u * 1024u)
#define Z_SIZE (2u * 1024u * 1024u)
#define REPLY_WAIT_MS 5000
#define MAX_REPLIES 4096
#define TOKEN "raw-ucp-token-0123456789" /* at least REMORA_TOKEN_MIN bytes */

/* ---------------------------------------------------------------- raw peer */

typedef struct reply {
    int      hdr_ok; /* the reply's header decoded */
    rm_hdr_t hdr;
    uint8_t *body;
    size_t   body_len;
    int      rndv;
} reply_t;

typedef struct raw {
    ucp_context_h ctx;
    ucp_worker_h  worker;
    ucp_ep_h      ep;
    rb_sock_t     bs;       /* the bootstrap socket, open while connected */
    int           ep_failed;
    ucs_status_t  ep_status;
    reply_t       replies[MAX_REPLIES];
    size_t        nreplies, taken;
    uint64_t      next_req;
} raw_t;

static ucs_status_t raw_am_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    raw_t *r = arg;
    reply_t *rp;

    if (r->nreplies == MAX_REPLIES)
        return UCS_OK;
    rp = &r->replies[r->nreplies++];
    memset(rp, 0, sizeof(*rp));
    rp->hdr_ok = rm_hdr_decode(header, header_length, &rp->hdr) == 0;
    rp->rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (!rp->rndv && length) {
        rp->body = malloc(length);
        if (rp->body)
            memcpy(rp->body, data, length);
    }
    rp->body_len = length;
    return UCS_OK; /* a rendezvous body is dropped unread */
}

static void raw_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    raw_t *r = arg;
    (void)ep;
    r->ep_failed = 1;
    r->ep_status = status;
}

/* One round of UCX progress, and the heartbeats the server expects of a
 * connected peer (it takes one silent for 2 s for dead). */
static unsigned raw_pump(raw_t *r)
{
    rb_tick(&r->bs);
    return ucp_worker_progress(r->worker);
}

static void raw_progress_for(raw_t *r, int ms)
{
    double deadline = it_now_ms() + ms;
    while (it_now_ms() < deadline)
        if (raw_pump(r) == 0)
            it_sleep_ms(1);
}

/* Connect a raw peer to addr: HELLO, AUTH with token (when not NULL),
 * CONNECT with our worker address, then an endpoint to the server's worker.
 * Returns 0 or -1. */
static int raw_open_token(raw_t *r, const char *addr, const char *token)
{
    ucp_config_t *config;
    ucp_address_t *my_addr;
    size_t my_len, server_len;
    void *server_addr;
    remora_status_t rst;

    memset(r, 0, sizeof(*r));
    r->bs.fd = -1;
    r->next_req = 1000;
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK)
        return -1;
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                      .features = UCP_FEATURE_AM, .name = "raw-peer"};
    ucs_status_t st = ucp_init(&p, config, &r->ctx);
    ucp_config_release(config);
    if (st != UCS_OK)
        return -1;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_worker_create(r->ctx, &wp, &r->worker) != UCS_OK)
        return -1;
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = RM_AM_ID_TO_CLIENT, .cb = raw_am_cb, .arg = r, .flags = UCP_AM_FLAG_WHOLE_MSG};
    if (ucp_worker_set_am_recv_handler(r->worker, &hp) != UCS_OK)
        return -1;

    /* Bootstrap frames: HELLO[, AUTH], CONNECT. */
    if (rb_dial(&r->bs, addr) != 0)
        return -1;
    rst = rb_hello_auth(&r->bs, token, token ? strlen(token) : 0);
    if (rst != REMORA_OK) {
        print_message("# raw peer: handshake: %s\n", remora_status_string(rst));
        return -1;
    }
    if (ucp_worker_get_address(r->worker, &my_addr, &my_len) != UCS_OK)
        return -1;
    rst = rb_connect(&r->bs, my_addr, my_len, &server_addr, &server_len);
    ucp_worker_release_address(r->worker, my_addr);
    if (rst != REMORA_OK) {
        print_message("# raw peer: CONNECT: %s\n", remora_status_string(rst));
        return -1;
    }

    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = server_addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = raw_err_cb, .arg = r},
    };
    st = ucp_ep_create(r->worker, &ep, &r->ep);
    free(server_addr);
    return st == UCS_OK ? 0 : -1;
}

static int raw_open(raw_t *r, const char *addr) { return raw_open_token(r, addr, NULL); }

/* Has the server closed our bootstrap socket (EOF or reset)? Its
 * heartbeats are read and discarded on the way. */
static bool raw_sock_closed(raw_t *r) { return rb_closed_within(&r->bs, 0, NULL); }

static void raw_close(raw_t *r)
{
    if (r->ep) {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
        void *req = ucp_ep_close_nbx(r->ep, &p);
        if (UCS_PTR_IS_PTR(req)) {
            double deadline = it_now_ms() + 2000;
            while (ucp_request_check_status(req) == UCS_INPROGRESS && it_now_ms() < deadline)
                raw_pump(r);
            ucp_request_free(req);
        }
    }
    rb_close(&r->bs);
    if (r->worker)
        ucp_worker_destroy(r->worker);
    if (r->ctx)
        ucp_cleanup(r->ctx);
    for (size_t i = 0; i < r->nreplies; i++)
        free(r->replies[i].body);
    memset(r, 0, sizeof(*r));
    r->bs.fd = -1;
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
    (void)request;
    (void)status;
    (void)user_data;
}

/* Send one AM (id, header bytes, body bytes) and wait until it left. */
static void raw_send_id(raw_t *r, unsigned id, const void *hdr, size_t hlen, const void *body,
                        size_t blen, unsigned flags)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK,
                             .flags = flags, .cb.send = send_cb};
    void *req = ucp_am_send_nbx(r->ep, id, hdr, hlen, body, blen, &p);

    if (UCS_PTR_IS_ERR(req))
        fail_msg("ucp_am_send_nbx: %s", ucs_status_string(UCS_PTR_STATUS(req)));
    if (req == NULL)
        return;
    double deadline = it_now_ms() + REPLY_WAIT_MS;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && it_now_ms() < deadline)
        raw_pump(r);
    ucs_status_t st = ucp_request_check_status(req);
    ucp_request_free(req);
    if (st != UCS_OK)
        fail_msg("raw send did not complete: %s", ucs_status_string(st));
}

static void raw_send(raw_t *r, const void *hdr, size_t hlen, const void *body, size_t blen)
{
    raw_send_id(r, RM_AM_ID_TO_SERVER, hdr, hlen, body, blen,
                UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER);
}

/* The next reply, waiting up to REPLY_WAIT_MS; fails the test if none. */
static reply_t *raw_next_reply(raw_t *r, const char *what)
{
    double deadline = it_now_ms() + REPLY_WAIT_MS;

    while (r->taken == r->nreplies && it_now_ms() < deadline && !r->ep_failed)
        if (raw_pump(r) == 0)
            it_sleep_ms(1);
    if (r->taken == r->nreplies)
        fail_msg("%s: no reply within %d ms%s", what, REPLY_WAIT_MS,
                 r->ep_failed ? " (the connection failed)" : "");
    return &r->replies[r->taken++];
}

/* Expect exactly one reply of type/status/req_id to what was just sent. */
static reply_t *expect_reply(raw_t *r, const char *what, unsigned type, remora_status_t status,
                             uint64_t req_id)
{
    reply_t *rp = raw_next_reply(r, what);

    if (!rp->hdr_ok)
        fail_msg("%s: the reply's header is malformed", what);
    if (rp->hdr.type != type || rp->hdr.status != status || rp->hdr.req_id != req_id)
        fail_msg("%s: got %s status %d (%s) req_id %llu; expected %s status %d (%s) req_id %llu",
                 what, rm_msg_type_name(rp->hdr.type), rp->hdr.status,
                 remora_status_string((remora_status_t)rp->hdr.status), (unsigned long long)rp->hdr.req_id,
                 rm_msg_type_name(type), status, remora_status_string(status),
                 (unsigned long long)req_id);
    return rp;
}

/* Nothing arrives for ms. */
static void expect_no_reply(raw_t *r, const char *what, int ms)
{
    raw_progress_for(r, ms);
    if (r->taken != r->nreplies) {
        reply_t *rp = &r->replies[r->taken];
        fail_msg("%s: unexpected reply %s status %d", what,
                 rp->hdr_ok ? rm_msg_type_name(rp->hdr.type) : "(malformed)", rp->hdr.status);
    }
}

/* ---------------------------------------------------------------- message builders */

/* A valid header of type with req_id; returns its length. */
static size_t hdr_of(uint8_t buf[RM_HDR_MAX], unsigned type, uint64_t req_id)
{
    rm_hdr_t h = {.type = (uint8_t)type, .req_id = req_id};
    return rm_hdr_encode(&h, buf);
}

static size_t rw_hdr(uint8_t buf[RM_HDR_MAX], unsigned type, uint64_t req_id, uint32_t region,
                     uint64_t off, uint64_t len)
{
    rm_hdr_t h = {.type = (uint8_t)type, .req_id = req_id, .region_id = region, .offset = off,
                  .length = len};
    return rm_hdr_encode(&h, buf);
}

/* A HELLO payload for protocols pmin..pmax. */
static void hello_body(rm_wbuf_t *w, uint16_t pmin, uint16_t pmax)
{
    rm_hello_t h = {.proto_min = pmin, .proto_max = pmax};
    rm_wbuf_init(w);
    memset(h.nonce, 0x42, sizeof(h.nonce));
    rm_hello_encode(w, &h);
}

/* The library's info line for a connection set up ("client HOST:PORT
 * connected" at the end of a line; serve's own connection log line goes on). */
#define RM_LOG_CONNECTED " connected\n"

/* Lines of the server's log that contain needle. */
static unsigned log_count(const it_server_t *s, const char *needle)
{
    char *log = it_server_log(s), *p = log;
    unsigned n = 0;

    while (p && (p = strstr(p, needle)) != NULL) {
        n++;
        p += strlen(needle);
    }
    free(log);
    return n;
}

/* LOOKUP with a raw body; returns the reply. */
static reply_t *lookup_raw(raw_t *r, const char *what, const void *body, size_t len,
                           remora_status_t status)
{
    uint8_t h[RM_HDR_MAX];
    uint64_t id = ++r->next_req;
    raw_send(r, h, hdr_of(h, RM_MSG_LOOKUP, id), body, len);
    return expect_reply(r, what, RM_MSG_LOOKUP_REPLY, status, id);
}

/* LOOKUP a valid name; returns its region id and checks size/access. */
static uint32_t lookup(raw_t *r, const char *name, uint64_t size, unsigned access)
{
    rm_wbuf_t w;
    rm_rbuf_t rb;
    rm_region_desc_t d;

    rm_wbuf_init(&w);
    rm_wbuf_name(&w, name);
    reply_t *rp = lookup_raw(r, name, w.data, w.len, REMORA_OK);
    rm_wbuf_free(&w);
    rm_rbuf_init(&rb, rp->body, rp->body_len);
    rm_region_desc_decode(&rb, &d);
    assert_false(rb.failed);
    assert_int_equal(rb.left, 0);
    assert_string_equal(d.name, name);
    assert_int_equal(d.size, size);
    assert_int_equal(d.access, access);
    assert_int_equal(d.generation, 1);
    return d.region_id;
}

/* READ; returns the reply (body checked by the caller). */
static reply_t *read_raw(raw_t *r, const char *what, uint32_t region, uint64_t off, uint64_t len,
                         remora_status_t status)
{
    uint8_t h[RM_HDR_MAX];
    uint64_t id = ++r->next_req;
    raw_send(r, h, rw_hdr(h, RM_MSG_READ, id, region, off, len), NULL, 0);
    return expect_reply(r, what, RM_MSG_READ_REPLY, status, id);
}

static void write_raw(raw_t *r, const char *what, uint32_t region, uint64_t off, uint64_t len,
                      const void *body, size_t blen, remora_status_t status)
{
    uint8_t h[RM_HDR_MAX];
    uint64_t id = ++r->next_req;
    raw_send(r, h, rw_hdr(h, RM_MSG_WRITE, id, region, off, len), body, blen);
    expect_reply(r, what, RM_MSG_WRITE_REPLY, status, id);
}

static void ping(raw_t *r, const char *what)
{
    uint8_t h[RM_HDR_MAX];
    uint64_t id = ++r->next_req;
    raw_send(r, h, hdr_of(h, RM_MSG_PING, id), NULL, 0);
    expect_reply(r, what, RM_MSG_PONG, REMORA_OK, id);
}

/* A PING gets no PONG within a second (the send itself may fail: the
 * connection is meant to be gone). */
static void ping_unanswered(raw_t *r, const char *what)
{
    uint8_t h[RM_HDR_MAX];
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
                             .cb.send = send_cb};
    void *req = ucp_am_send_nbx(r->ep, RM_AM_ID_TO_SERVER, h, hdr_of(h, RM_MSG_PING, ++r->next_req),
                                NULL, 0, &p);

    expect_no_reply(r, what, 1000);
    if (req != NULL && !UCS_PTR_IS_ERR(req)) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_request_cancel(r->worker, req);
        raw_progress_for(r, 10);
        ucp_request_free(req);
    }
}

/* ---------------------------------------------------------------- servers */

static it_server_t g_w, g_r, g_t;
/* At least 16 bytes: the library and the CLI refuse shorter tokens. */
static char g_token_file[512];

static int group_setup(void **state)
{
    (void)state;
    it_tmp_path(g_token_file, sizeof(g_token_file), "token");
    if (it_write_file(g_token_file, TOKEN "\n", strlen(TOKEN) + 1) != 0)
        return -1;
    /* Info logs: "client ... connected" tells whether an endpoint was set up. */
    static const char *const env[] = {"REMORA_LOG=info", NULL};
    if (it_server_start_env(&g_w, env, "--region", "a=64K", "--region", "z=2M:zero",
                            "--writable", NULL) != 0 ||
        it_server_start_env(&g_r, env, "--region", "a=64K", NULL) != 0 ||
        it_server_start_env(&g_t, env, "--region", "a=64K", "--token-file", g_token_file,
                            NULL) != 0)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = 0;
    if (it_server_stop(&g_w) != 0)
        rc = -1;
    if (it_server_stop(&g_r) != 0)
        rc = -1;
    if (it_server_stop(&g_t) != 0)
        rc = -1;
    it_reap_all();
    return rc;
}

/* A real client still lists and reads a correctly. */
static void assert_real_client_works(const it_server_t *s, const char *token)
{
    remora_client_params_t p = {0};
    it_client_t c;
    uint8_t buf[A_SIZE];

    if (token) {
        p.field_mask = REMORA_CLIENT_FIELD_TOKEN;
        p.token = token;
        p.token_len = strlen(token);
    }
    it_assert_ok(it_client_open(&c, s->addr, &p));
    it_assert_ok(remora_client_read(c.client, "a", 0, buf, A_SIZE));
    it_assert_pattern(buf, 0, A_SIZE);
    it_client_close(&c);
}

/* ---------------------------------------------------------------- tests */

/* Malformed AM headers from a connected peer get ERROR/PROTOCOL with req_id
 * 0 (the header could not be read, so neither can its req_id); the
 * connection stays usable. */
static void test_malformed_headers(void **state)
{
    raw_t *r = calloc(1, sizeof(*r));
    uint8_t h[RM_HDR_MAX];
    rm_wbuf_t w;
    (void)state;

    assert_non_null(r);
    assert_int_equal(raw_open(r, g_w.addr), 0);

    raw_send(r, h, 0, NULL, 0);
    expect_reply(r, "empty header", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    hdr_of(h, RM_MSG_PING, 5);
    raw_send(r, h, 5, NULL, 0);
    expect_reply(r, "5-byte header", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    hdr_of(h, RM_MSG_PING, 6);
    raw_send(r, h, 15, NULL, 0);
    expect_reply(r, "15-byte header", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    memset(h, 0, sizeof(h));
    hdr_of(h, RM_MSG_PING, 7);
    raw_send(r, h, 24, NULL, 0);
    expect_reply(r, "PING header 8 bytes too long", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    rw_hdr(h, RM_MSG_READ, 8, 1, 0, 1);
    raw_send(r, h, 16, NULL, 0);
    expect_reply(r, "READ header of 16 bytes", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    static const uint8_t bad_types[] = {0, RM_MSG_STATS_REPLY + 1, 0x7f, 0xff};
    for (size_t i = 0; i < sizeof(bad_types); i++) {
        hdr_of(h, RM_MSG_PING, 9);
        h[0] = bad_types[i];
        raw_send(r, h, 16, NULL, 0);
        expect_reply(r, "unknown type", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    }
    static const uint8_t bad_versions[] = {0, 2, 0xff};
    for (size_t i = 0; i < sizeof(bad_versions); i++) {
        hdr_of(h, RM_MSG_PING, 10);
        h[1] = bad_versions[i];
        hello_body(&w, 2, 2);
        raw_send(r, h, 16, w.data, w.len);
        rm_wbuf_free(&w);
        expect_reply(r, "wrong header version", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    }
    memset(h, 0, sizeof(h));
    rm_hdr_t ev = {.type = RM_MSG_EVENT, .kind = 9};
    rm_hdr_encode(&ev, h);
    h[20] = 9; /* kind outside {1, 2} */
    raw_send(r, h, 48, NULL, 0);
    expect_reply(r, "EVENT with a bad kind", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);
    ping(r, "PING after malformed headers");
    assert_false(r->ep_failed);
    raw_close(r);
    free(r);
    assert_real_client_works(&g_w, NULL);
}

/* Open a bootstrap socket and run steps on it; then the server must close it
 * within 2 s, having created no endpoint (no "connected" line in its log). */
static void expect_closed_without_endpoint(const it_server_t *s, rb_sock_t *b, const char *what,
                                           unsigned connected_before)
{
    unsigned other = 0;

    if (!rb_closed_within(b, 2000, &other))
        fail_msg("%s: the server kept the socket open", what);
    if (other)
        fail_msg("%s: the server answered with %u frame(s)", what, other);
    rb_close(b);
    it_sleep_ms(50);
    if (log_count(s, RM_LOG_CONNECTED) != connected_before)
        fail_msg("%s: the server set up a connection", what);
}

/* Bootstrap frames out of turn close the socket without a reply and without
 * any UCX endpoint: AUTH before HELLO, CONNECT before HELLO, CONNECT before
 * AUTH on a token server, AUTH on a server without a token, HEARTBEAT during
 * the handshake, a second HELLO, a server-to-client frame type, a HELLO
 * that does not decode, bytes that are no frame at all. */
static void test_frames_out_of_turn(void **state)
{
    rb_sock_t b;
    rm_wbuf_t w;
    uint8_t mac[RM_MAC_LEN] = {0};
    static const uint8_t fake_addr[64] = {0x02}; /* looks like a UCX address */
    (void)state;

    hello_body(&w, 2, 2);
    for (int server = 0; server < 2; server++) {
        const it_server_t *s = server ? &g_t : &g_w;
        unsigned before = log_count(s, RM_LOG_CONNECTED);
        char what[128];
        const struct { const char *name; int hello_first; unsigned type; const void *p;
                       uint32_t len; } steps[] = {
            {"AUTH before HELLO", 0, RM_BOOT_AUTH, mac, sizeof(mac)},
            {"CONNECT before HELLO", 0, RM_BOOT_CONNECT, fake_addr, sizeof(fake_addr)},
            {"HEARTBEAT before HELLO", 0, RM_BOOT_HEARTBEAT, NULL, 0},
            {"HELLO_REPLY from a client", 0, RM_BOOT_HELLO_REPLY, w.data, (uint32_t)w.len},
            {"CONNECT_REPLY from a client", 0, RM_BOOT_CONNECT_REPLY, fake_addr, 8},
            {"HELLO that does not decode", 0, RM_BOOT_HELLO, "junk", 4},
            {"HELLO of 69 bytes", 0, RM_BOOT_HELLO, w.data, 69}, /* 70: an older peer's */
            {"second HELLO", 1, RM_BOOT_HELLO, w.data, (uint32_t)w.len},
            {"HEARTBEAT after HELLO", 1, RM_BOOT_HEARTBEAT, NULL, 0},
            {server ? "CONNECT before AUTH" : "AUTH on a server without a token", 1,
             server ? RM_BOOT_CONNECT : RM_BOOT_AUTH, server ? (const void *)fake_addr : mac,
             server ? (uint32_t)sizeof(fake_addr) : (uint32_t)sizeof(mac)},
            {"AUTH_REPLY from a client", 1, RM_BOOT_AUTH_REPLY, mac, sizeof(mac)},
        };
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
            snprintf(what, sizeof(what), "%s (%s)", steps[i].name,
                     server ? "token server" : "no token");
            assert_int_equal(rb_dial(&b, s->addr), 0);
            if (steps[i].hello_first)
                it_assert_ok(rb_hello(&b, 2, 2, NULL));
            assert_int_equal(rb_send_frame(&b, steps[i].type, 0, steps[i].p, steps[i].len), 0);
            expect_closed_without_endpoint(s, &b, what, before);
        }
        /* Not a frame: the old preamble's flags word, an HTTP request. */
        assert_int_equal(rb_dial(&b, s->addr), 0);
        assert_int_equal(rb_send_bytes(&b, "GET / HTTP/1.0\r\n\r\n", 18), 0);
        expect_closed_without_endpoint(s, &b, "an HTTP request", before);
        assert_int_equal(rb_dial(&b, s->addr), 0);
        it_assert_ok(rb_hello(&b, 2, 2, NULL));
        assert_int_equal(rb_send_bytes(&b, "RMRB\x02\x00\x05\x02\0\0\0\0", 12), 0);
        expect_closed_without_endpoint(s, &b, "CONNECT with an unknown flag", before);
    }
    rm_wbuf_free(&w);
    /* The check above can fail: a real client's connection is logged. */
    unsigned before_w = log_count(&g_w, RM_LOG_CONNECTED), before_t = log_count(&g_t, RM_LOG_CONNECTED);
    assert_real_client_works(&g_w, NULL);
    assert_real_client_works(&g_t, TOKEN);
    it_sleep_ms(50);
    assert_int_equal(log_count(&g_w, RM_LOG_CONNECTED), before_w + 1);
    assert_int_equal(log_count(&g_t, RM_LOG_CONNECTED), before_t + 1);
}

/* After the handshake: LOOKUP bodies that are not exactly one valid name,
 * messages of the wrong direction or a second HELLO/AUTH. */
static void test_bad_control_messages(void **state)
{
    raw_t *r = calloc(1, sizeof(*r));
    uint8_t h[RM_HDR_MAX], b[600];
    (void)state;

    assert_non_null(r);
    assert_int_equal(raw_open(r, g_w.addr), 0);
    assert_int_equal(r->bs.server_flags & RM_HELLO_AUTH_REQUIRED, 0);

    lookup_raw(r, "LOOKUP without body", NULL, 0, REMORA_ERR_PROTOCOL);
    memset(b, 0, sizeof(b));
    lookup_raw(r, "LOOKUP with an empty name", b, 2, REMORA_ERR_PROTOCOL);
    b[0] = 1;
    lookup_raw(r, "LOOKUP with a 1-byte body", b, 1, REMORA_ERR_PROTOCOL);
    b[0] = 0x00; b[1] = 0x01; /* 256 */
    memset(b + 2, 'x', 256);
    lookup_raw(r, "LOOKUP with a 256-byte name", b, 258, REMORA_ERR_PROTOCOL);
    b[0] = 0xff; b[1] = 0xff;
    lookup_raw(r, "LOOKUP with a 65535-byte name length", b, 258, REMORA_ERR_PROTOCOL);
    b[0] = 10; b[1] = 0;
    memcpy(b + 2, "aaaaa", 5);
    lookup_raw(r, "LOOKUP name length 10, 5 bytes", b, 7, REMORA_ERR_PROTOCOL);
    b[0] = 1; b[1] = 0; b[2] = 'a'; b[3] = 'x';
    lookup_raw(r, "LOOKUP with a trailing byte", b, 4, REMORA_ERR_PROTOCOL);
    b[0] = 2; b[1] = 0; b[2] = 'a'; b[3] = '\n';
    lookup_raw(r, "LOOKUP of a name with a control byte", b, 4, REMORA_ERR_PROTOCOL);
    b[0] = 2; b[1] = 0; b[2] = 'a'; b[3] = 0;
    lookup_raw(r, "LOOKUP of a name with a NUL", b, 4, REMORA_ERR_PROTOCOL);
    b[0] = 4; b[1] = 0; memcpy(b + 2, "nope", 4);
    lookup_raw(r, "LOOKUP of a missing region", b, 6, REMORA_ERR_NOT_FOUND);
    b[0] = 255; b[1] = 0; memset(b + 2, 'q', 255);
    lookup_raw(r, "LOOKUP of a 255-byte name", b, 257, REMORA_ERR_NOT_FOUND);

    /* Server-to-client types, and a second HELLO or AUTH. */
    static const unsigned wrong_way[] = {RM_MSG_HELLO_REPLY, RM_MSG_AUTH_REPLY,
                                         RM_MSG_LIST_REPLY, RM_MSG_LOOKUP_REPLY, RM_MSG_PONG,
                                         RM_MSG_ERROR, RM_MSG_WRITE_REPLY, RM_MSG_READ_REPLY,
                                         RM_MSG_HELLO, RM_MSG_AUTH};
    for (size_t i = 0; i < sizeof(wrong_way) / sizeof(wrong_way[0]); i++) {
        uint64_t id = ++r->next_req;
        rm_wbuf_t w;
        hello_body(&w, 1, 1);
        raw_send(r, h, hdr_of(h, wrong_way[i], id), w.data, w.len);
        rm_wbuf_free(&w);
        expect_reply(r, rm_msg_type_name(wrong_way[i]), RM_MSG_ERROR, REMORA_ERR_PROTOCOL, id);
    }
    rm_hdr_t ev = {.type = RM_MSG_EVENT, .kind = RM_EVENT_CHANGED, .req_id = 4242, .region_id = 1};
    raw_send(r, h, rm_hdr_encode(&ev, h), "\x01\x00" "a", 3);
    expect_reply(r, "EVENT from a client", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 4242);

    /* EVENT_ACK for epochs never announced: no reply, nothing breaks. */
    rm_hdr_t ack = {.type = RM_MSG_EVENT_ACK, .epoch = UINT64_MAX};
    raw_send(r, h, rm_hdr_encode(&ack, h), NULL, 0);
    ack.epoch = 0;
    raw_send(r, h, rm_hdr_encode(&ack, h), NULL, 0);
    expect_no_reply(r, "EVENT_ACK", 200);

    /* Without UCP_AM_SEND_FLAG_REPLY the server cannot tell who sent it: dropped. */
    raw_send_id(r, RM_AM_ID_TO_SERVER, h, hdr_of(h, RM_MSG_PING, 555), NULL, 0,
                UCP_AM_SEND_FLAG_EAGER);
    expect_no_reply(r, "PING without the REPLY flag", 200);
    /* The server-to-client id sent to the server: the same dispatcher, same rules. */
    raw_send_id(r, RM_AM_ID_TO_CLIENT, h, hdr_of(h, RM_MSG_PING, 556), NULL, 0,
                UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER);
    expect_reply(r, "PING on AM id 0x53", RM_MSG_PONG, REMORA_OK, 556);
    ping(r, "PING after all that");
    uint32_t id_a = lookup(r, "a", A_SIZE, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);
    reply_t *rp = read_raw(r, "READ after all that", id_a, 100, 64, REMORA_OK);
    assert_int_equal(rp->body_len, 64);
    it_assert_pattern(rp->body, 100, 64);
    assert_false(r->ep_failed);
    raw_close(r);
    free(r);
    assert_real_client_works(&g_w, NULL);
}

/* READ and WRITE: unknown regions, every out-of-range form (overflowing
 * ones included), write bodies whose length differs from the header; none
 * of them touches memory, the connection keeps working. */
static void test_bad_reads_and_writes(void **state)
{
    raw_t *r = calloc(1, sizeof(*r));
    uint8_t body[64];
    reply_t *rp;
    (void)state;

    assert_non_null(r);
    assert_int_equal(raw_open(r, g_w.addr), 0);
    uint32_t id_a = lookup(r, "a", A_SIZE, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);
    uint32_t id_z = lookup(r, "z", Z_SIZE, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);

    read_raw(r, "READ of region 0", 0, 0, 1, REMORA_ERR_NOT_FOUND);
    read_raw(r, "READ of region 0xffffffff", 0xffffffffu, 0, 1, REMORA_ERR_NOT_FOUND);
    for (int w = 0; w < 2; w++) {
        const uint64_t S = w ? Z_SIZE : A_SIZE;
        const struct { uint64_t off, len; } oor[] = {
            {UINT64_MAX, 1}, {0, UINT64_MAX}, {S, 1}, {1, S}, {UINT64_MAX - 3, 8},
            {S + 1, 0}, {UINT64_MAX, 0}, {S - 1, UINT64_MAX}, {1ull << 63, 1ull << 63},
            {S - 1, 2},
        };
        for (size_t i = 0; i < sizeof(oor) / sizeof(oor[0]); i++) {
            char what[96];
            snprintf(what, sizeof(what), "%s [%llu, +%llu)", w ? "WRITE" : "READ",
                     (unsigned long long)oor[i].off, (unsigned long long)oor[i].len);
            if (w) /* the range is checked before the body length */
                write_raw(r, what, id_z, oor[i].off, oor[i].len, body, 1,
                          REMORA_ERR_OUT_OF_RANGE);
            else
                read_raw(r, what, id_a, oor[i].off, oor[i].len, REMORA_ERR_OUT_OF_RANGE);
        }
    }
    rp = read_raw(r, "READ of 0 bytes at the end", id_a, A_SIZE, 0, REMORA_OK);
    assert_int_equal(rp->body_len, 0);
    rp = read_raw(r, "READ of the last byte", id_a, A_SIZE - 1, 1, REMORA_OK);
    assert_int_equal(rp->body_len, 1);
    it_assert_pattern(rp->body, A_SIZE - 1, 1);

    /* WRITE body length vs header length. */
    memset(body, 0x5C, sizeof(body));
    write_raw(r, "WRITE header 10, body 5", id_z, 0, 10, body, 5, REMORA_ERR_PROTOCOL);
    write_raw(r, "WRITE header 5, body 10", id_z, 0, 5, body, 10, REMORA_ERR_PROTOCOL);
    write_raw(r, "WRITE header 0, body 10", id_z, 0, 0, body, 10, REMORA_ERR_PROTOCOL);
    write_raw(r, "WRITE header 10, no body", id_z, 0, 10, NULL, 0, REMORA_ERR_PROTOCOL);
    write_raw(r, "WRITE of region 0", 0, 0, 4, body, 4, REMORA_ERR_NOT_FOUND);
    rp = read_raw(r, "z after refused writes", id_z, 0, 64, REMORA_OK);
    for (size_t i = 0; i < 64; i++)
        if (rp->body[i] != 0)
            fail_msg("a refused WRITE changed byte %zu of z", i);

    /* A valid one lands exactly. */
    write_raw(r, "valid WRITE", id_z, 8, 4, "abcd", 4, REMORA_OK);
    rp = read_raw(r, "z after the write", id_z, 0, 16, REMORA_OK);
    assert_memory_equal(rp->body, "\0\0\0\0\0\0\0\0abcd\0\0\0\0", 16);
    write_raw(r, "zero-length WRITE at the end", id_z, Z_SIZE, 0, NULL, 0, REMORA_OK);
    assert_false(r->ep_failed);
    raw_close(r);
    free(r);

    /* A real client sees exactly that. */
    it_client_t c;
    uint8_t got[16];
    it_assert_ok(it_client_open(&c, g_w.addr, NULL));
    it_assert_ok(remora_client_read(c.client, "z", 0, got, 16));
    assert_memory_equal(got, "\0\0\0\0\0\0\0\0abcd\0\0\0\0", 16);
    it_client_close(&c);
    assert_real_client_works(&g_w, NULL);
}

/* WRITE to a read-only region is refused by the server itself (a remora
 * client would not even send it). */
static void test_write_read_only_server_side(void **state)
{
    raw_t *r = calloc(1, sizeof(*r));
    (void)state;

    assert_non_null(r);
    assert_int_equal(raw_open(r, g_r.addr), 0);
    uint32_t id_a = lookup(r, "a", A_SIZE, REMORA_ACCESS_READ);
    write_raw(r, "WRITE to a read-only region", id_a, 0, 8, "xxxxxxxx", 8, REMORA_ERR_READ_ONLY);
    write_raw(r, "WRITE to a read-only region, out of range", id_a, A_SIZE, 8, "xxxxxxxx", 8,
              REMORA_ERR_OUT_OF_RANGE);
    reply_t *rp = read_raw(r, "READ after", id_a, 0, 8, REMORA_OK);
    it_assert_pattern(rp->body, 0, 8);
    raw_close(r);
    free(r);
    assert_real_client_works(&g_r, NULL);
}

/* A token server: HELLO_REPLY says AUTH_REQUIRED; a wrong proof, a 31- or
 * 33-byte one gets AUTH_REPLY/AUTH and the socket closes, no endpoint; the
 * right one gets OK with the server's own proof, and then CONNECT works. */
static void test_token_server(void **state)
{
    rb_sock_t b;
    rb_frame_t f;
    uint8_t proof[33] = {0};
    unsigned before = log_count(&g_t, RM_LOG_CONNECTED);
    const uint32_t lens[] = {31, 32, 33, 0};
    (void)state;

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "AUTH with a wrong %u-byte proof", lens[i]);
        assert_int_equal(rb_dial(&b, g_t.addr), 0);
        it_assert_ok(rb_hello(&b, 2, 2, NULL));
        assert_true(b.server_flags & RM_HELLO_AUTH_REQUIRED);
        assert_int_equal(rb_send_frame(&b, RM_BOOT_AUTH, 0, proof, lens[i]), 0);
        assert_int_equal(rb_recv(&b, 5000, true, &f), 0);
        assert_int_equal(f.type, RM_BOOT_AUTH_REPLY);
        assert_int_equal(f.len, 4); /* the status, no proof of ours */
        assert_int_equal((int32_t)(f.payload[0] | f.payload[1] << 8 | f.payload[2] << 16 |
                                   (uint32_t)f.payload[3] << 24), REMORA_ERR_AUTH);
        rb_frame_free(&f);
        expect_closed_without_endpoint(&g_t, &b, what, before);
    }
    /* rb_auth with no token sends a wrong 32-byte proof. */
    assert_int_equal(rb_dial(&b, g_t.addr), 0);
    it_assert_ok(rb_hello(&b, 2, 2, NULL));
    it_assert_status(rb_auth(&b, NULL, 0), REMORA_ERR_AUTH);
    expect_closed_without_endpoint(&g_t, &b, "rb_auth with a wrong proof", before);

    /* The right proof: the server proves itself (rb_auth checks it). */
    raw_t *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    assert_int_equal(raw_open_token(r, g_t.addr, TOKEN), 0);
    ping(r, "PING after AUTH");
    lookup(r, "a", A_SIZE, REMORA_ACCESS_READ);
    raw_close(r);
    free(r);
    assert_real_client_works(&g_t, TOKEN);
}

/* A client speaking protocol 3 only (or 1 only, or 3..5) gets
 * HELLO_REPLY/VERSION and the socket closes; no endpoint. A range that
 * includes 2 is fine. Repeated, on fresh connections. */
static void test_version_mismatch(void **state)
{
    rb_sock_t b;
    const struct { uint16_t lo, hi; } bad[] = {{3, 3}, {1, 1}, {3, 5}, {0, 1}};
    unsigned before = log_count(&g_w, RM_LOG_CONNECTED);
    (void)state;

    for (int i = 0; i < 10; i++) {
        size_t k = (size_t)i % (sizeof(bad) / sizeof(bad[0]));
        assert_int_equal(rb_dial(&b, g_w.addr), 0);
        it_assert_status(rb_hello(&b, bad[k].lo, bad[k].hi, NULL), REMORA_ERR_VERSION);
        expect_closed_without_endpoint(&g_w, &b, "HELLO for another protocol", before);
    }
    rm_hello_t theirs;
    assert_int_equal(rb_dial(&b, g_w.addr), 0);
    it_assert_ok(rb_hello(&b, 1, 7, &theirs));
    assert_int_equal(theirs.proto_min, 2);
    assert_int_equal(theirs.proto_max, 2);
    assert_true(theirs.instance != 0);
    rb_close(&b);
    assert_real_client_works(&g_w, NULL);
}

/* Hundreds of random headers and bodies in a burst; the server answers what
 * it can and still serves: a final PING gets its PONG, real clients work. */
static void test_random_flood(void **state)
{
    raw_t *r = calloc(1, sizeof(*r));
    uint8_t h[RM_HDR_MAX], body[300], seed_buf[2];
    (void)state;

    assert_non_null(r);
    assert_int_equal(raw_open(r, g_w.addr), 0);
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1)
                for (int i = 0; i < 500; i++) {
            it_fill_random(seed_buf, 2, (uint64_t)i + 7777u * (uint64_t)phase);
            size_t hlen = seed_buf[0] % 49, blen = seed_buf[1] % sizeof(body);
            it_fill_random(h, sizeof(h), (uint64_t)i * 31u + (uint64_t)phase);
            it_fill_random(body, blen, (uint64_t)i * 17u);
            if (i % 3 == 0) {
                h[0] = (uint8_t)(1 + i % 17); /* a real type, */
                h[1] = 1;                     /* the right version, */
                hlen = (i % 2) ? 16 : 40;     /* a plausible length */
            }
            if (h[0] == RM_MSG_WRITE && hlen == 40)
                h[0] = RM_MSG_PING; /* random WRITEs to z would be fine but untidy */
            raw_send(r, h, hlen, body, blen);
        }
        /* Prove the connection works: our PING's answer arrives among (or
         * after) the answers to the junk. */
        uint64_t id = 0xF100D000u + (uint64_t)phase;
        raw_send(r, h, hdr_of(h, RM_MSG_PING, id), NULL, 0);
        reply_t *rp;
        do {
            rp = raw_next_reply(r, "PING after a flood of junk");
        } while (!rp->hdr_ok || rp->hdr.req_id != id);
        assert_int_equal(rp->hdr.type, RM_MSG_PONG);
        assert_int_equal(rp->hdr.status, REMORA_OK);
    }
    assert_false(r->ep_failed);
    raw_close(r);
    free(r);
    assert_real_client_works(&g_w, NULL);
}

/* A peer that asks for a large READ (rendezvous reply) and a large WRITE
 * (rendezvous payload) and then vanishes without taking or finishing them. */
static void test_peer_vanishes_mid_transfer(void **state)
{
    uint8_t *big = malloc(Z_SIZE);
    (void)state;

    assert_non_null(big);
    memset(big, 0x33, Z_SIZE);
    for (int i = 0; i < 3; i++) {
        raw_t *r = calloc(1, sizeof(*r));
        uint8_t h[RM_HDR_MAX];
        assert_non_null(r);
        assert_int_equal(raw_open(r, g_w.addr), 0);
            uint32_t id_z = lookup(r, "z", Z_SIZE, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);
        raw_send_id(r, RM_AM_ID_TO_SERVER, h, rw_hdr(h, RM_MSG_READ, 1, id_z, 0, Z_SIZE), NULL,
                    0, UCP_AM_SEND_FLAG_REPLY);
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_RNDV};
        void *req = ucp_am_send_nbx(r->ep, RM_AM_ID_TO_SERVER, h,
                                    rw_hdr(h, RM_MSG_WRITE, 2, id_z, 0, Z_SIZE), big, Z_SIZE, &p);
        raw_progress_for(r, i * 5);
        /* Forced close: whatever was in flight is abandoned. */
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        void *close_req = ucp_ep_close_nbx(r->ep, &cp);
        r->ep = NULL;
        double deadline = it_now_ms() + 2000;
        while (it_now_ms() < deadline &&
               ((UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS) ||
                (UCS_PTR_IS_PTR(close_req) &&
                 ucp_request_check_status(close_req) == UCS_INPROGRESS)))
            raw_pump(r);
        if (UCS_PTR_IS_PTR(req))
            ucp_request_free(req);
        if (UCS_PTR_IS_PTR(close_req))
            ucp_request_free(close_req);
        raw_close(r);
        free(r);
    }
    free(big);
    it_sleep_ms(200);
    assert_true(it_server_alive(&g_w));
    assert_real_client_works(&g_w, NULL);
}

/* After the handshake the socket carries heartbeats only: a stray byte, a
 * heartbeat with a payload or a second HELLO makes the server close that
 * connection (socket and endpoint), nobody else's. */
static void test_bytes_after_handshake(void **state)
{
    raw_t *other = calloc(1, sizeof(*other));
    (void)state;

    assert_non_null(other);
    assert_int_equal(raw_open(other, g_w.addr), 0);
    for (int k = 0; k < 3; k++) {
        raw_t *r = calloc(1, sizeof(*r));
        rm_wbuf_t w;
        assert_non_null(r);
        assert_int_equal(raw_open(r, g_w.addr), 0);
        ping(r, "PING before the stray bytes");
        if (k == 0)
            assert_int_equal(rb_send_bytes(&r->bs, "x", 1), 0);
        else if (k == 1)
            assert_int_equal(rb_send_frame(&r->bs, RM_BOOT_HEARTBEAT, 0, "x", 1), 0);
        else {
            hello_body(&w, 2, 2);
            assert_int_equal(rb_send_frame(&r->bs, RM_BOOT_HELLO, 0, w.data, (uint32_t)w.len), 0);
            rm_wbuf_free(&w);
        }
        double deadline = it_now_ms() + 3000;
        bool closed = false;
        while (!(closed = raw_sock_closed(r)) && it_now_ms() < deadline) {
            raw_progress_for(r, 10);
            raw_progress_for(other, 1);
        }
        if (!closed)
            fail_msg("case %d: the server kept a bootstrap socket open after bytes following "
                     "the handshake", k);
        /* Its endpoint goes too: ours reports an error, or a PING on it is
         * no longer answered. */
        deadline = it_now_ms() + 500;
        while (!r->ep_failed && it_now_ms() < deadline) {
            raw_progress_for(r, 10);
            raw_progress_for(other, 1); /* its heartbeats keep it alive */
        }
        if (!r->ep_failed)
            ping_unanswered(r, "PING after the connection was closed");
        ping(other, "PING on an unrelated connection");
        raw_close(r);
        free(r);
    }
    raw_close(other);
    free(other);
    assert_real_client_works(&g_w, NULL);
}

/* A connection that never finishes its handshake is closed after 5 s (one
 * silent after connecting, one that got its HELLO_REPLY from a token server
 * and never sent AUTH, one that sends half a frame); a READY one that stays
 * idle (but heartbeats) is not. */
static void test_handshake_timeout(void **state)
{
    rb_sock_t silent, hello_only, half;
    raw_t *ready = calloc(1, sizeof(*ready));
    (void)state;

    assert_non_null(ready);
    double t0 = it_now_ms();
    assert_int_equal(rb_dial(&silent, g_w.addr), 0);
    assert_int_equal(rb_dial(&hello_only, g_t.addr), 0);
    assert_int_equal(rb_dial(&half, g_w.addr), 0);
    assert_int_equal(raw_open(ready, g_w.addr), 0);
    it_assert_ok(rb_hello(&hello_only, 2, 2, NULL));
    assert_int_equal(rb_send_bytes(&half, "RMRB\x02\x00\x01\x00\x46\x00\x00\x00RMRA", 16), 0);

    rb_sock_t *socks[3] = {&silent, &hello_only, &half};
    double t_closed[3] = {0, 0, 0};
    int open = 3;
    while (it_now_ms() - t0 < 9000 && open > 0) {
        raw_progress_for(ready, 5);
        for (int i = 0; i < 3; i++)
            if (t_closed[i] == 0 && rb_closed_within(socks[i], 1, NULL)) {
                t_closed[i] = it_now_ms() - t0;
                open--;
            }
    }
    printf("# handshake timeout: silent %.0f ms, HELLO only %.0f ms, half a frame %.0f ms\n",
           t_closed[0], t_closed[1], t_closed[2]);
    for (int i = 0; i < 3; i++) {
        if (t_closed[i] == 0)
            fail_msg("connection %d without a finished handshake still open after 9 s", i);
        if (t_closed[i] < 4500)
            fail_msg("connection %d closed too early: %.0f ms", i, t_closed[i]);
    }
    assert_false(raw_sock_closed(ready));
    ping(ready, "PING on an idle READY connection after 5 s");
    rb_close(&silent);
    rb_close(&hello_only);
    rb_close(&half);
    raw_close(ready);
    free(ready);
}

/* RING_WAIT straight from a raw peer: wrong regions, a bad mode, absurd inline
 * sizes, waits far in the future, more waits than a connection may keep. */
static void wait_raw(raw_t *r, uint32_t region, uint8_t mode_byte, uint64_t want,
                     uint64_t inline_bytes, uint64_t *id_p)
{
    rm_hdr_t h = {.type = RM_MSG_RING_WAIT, .req_id = ++r->next_req, .region_id = region,
                  .kind = RM_RING_EVERY, .offset = want, .length = inline_bytes};
    uint8_t buf[RM_HDR_MAX];
    size_t len = rm_hdr_encode(&h, buf);
    buf[20] = mode_byte; /* raw: may be invalid */
    raw_send(r, buf, len, NULL, 0);
    *id_p = h.req_id;
}

static void test_ring_messages(void **state)
{
    it_server_t s;
    raw_t *r = calloc(1, sizeof(*r));
    const uint64_t ring_bytes = 64 + 16 * (8 + 64); /* r=64x16 */
    uint64_t id, first_id = 0;
    (void)state;

    assert_non_null(r);
    it_must_start(&s, "stream", "serve", "--ring", "r=64x16", "--rate", "100", NULL);
    assert_int_equal(raw_open(r, s.addr), 0);
    uint32_t ring = lookup(r, "r", ring_bytes, REMORA_ACCESS_READ);

    wait_raw(r, 0, RM_RING_EVERY, 0, 0, &id);
    expect_reply(r, "RING_WAIT of region 0", RM_MSG_RING_NOTIFY, REMORA_ERR_NOT_FOUND, id);
    wait_raw(r, ring, 7, 0, 0, &id);
    (void)id; /* an undecodable header: the answer cannot name the request */
    expect_reply(r, "RING_WAIT with mode 7", RM_MSG_ERROR, REMORA_ERR_PROTOCOL, 0);

    /* Held already: answered at once; inline capped at 32 KiB, elements intact. */
    wait_raw(r, ring, RM_RING_EVERY, 0, UINT64_MAX, &id);
    reply_t *rp = expect_reply(r, "RING_WAIT for held elements", RM_MSG_RING_NOTIFY, REMORA_OK, id);
    assert_true(rp->hdr.length >= 1 && rp->hdr.length <= 16);
    assert_int_equal(rp->body_len, rp->hdr.length * 64);
    assert_true(rp->hdr.offset + rp->hdr.length <= rp->hdr.size);
    for (uint64_t i = 0; i < rp->hdr.length; i++)
        assert_int_equal(remora_frame_check(rp->body + i * 64, 64, rp->hdr.offset + i),
                         REMORA_FRAME_OK);
    wait_raw(r, ring, RM_RING_LATEST, 0, 0, &id); /* no inline room: just the head */
    rp = expect_reply(r, "RING_WAIT without inline room", RM_MSG_RING_NOTIFY, REMORA_OK, id);
    assert_int_equal(rp->hdr.length, 0);
    assert_int_equal(rp->body_len, 0);

    /* Far in the future: armed, not answered; past the per-connection limit
     * the oldest is answered CANCELED, and the connection stays usable. */
    for (int i = 0; i < 1025; i++) {
        wait_raw(r, ring, RM_RING_EVERY, 1ull << 61, 0, &id);
        if (i == 0)
            first_id = id;
    }
    expect_reply(r, "the 1025th wait evicts the first", RM_MSG_RING_NOTIFY,
                 REMORA_ERR_CANCELED, first_id);
    expect_no_reply(r, "armed waits", 300);
    read_raw(r, "READ of the ring's header", ring, 0, 64, REMORA_OK);
    assert_false(r->ep_failed);
    raw_close(r);
    free(r);

    /* A plain region is no ring. */
    r = calloc(1, sizeof(*r));
    assert_non_null(r);
    assert_int_equal(raw_open(r, g_w.addr), 0);
    uint32_t plain = lookup(r, "a", A_SIZE, REMORA_ACCESS_READ | REMORA_ACCESS_WRITE);
    wait_raw(r, plain, RM_RING_EVERY, 0, 64, &id);
    expect_reply(r, "RING_WAIT of a plain region", RM_MSG_RING_NOTIFY, REMORA_ERR_INVALID_PARAM,
                 id);
    raw_close(r);
    free(r);

    /* Real subscribers are unaffected. */
    it_client_t c;
    remora_sub_h sub;
    uint8_t elem[64];
    remora_elem_info_t info = {0};
    it_assert_ok(it_client_open(&c, s.addr, NULL));
    it_assert_ok(remora_client_subscribe(c.client, "r", NULL, &sub));
    it_assert_ok(remora_sub_next(sub, elem, sizeof(elem), &info, 5000));
    assert_int_equal(remora_frame_check(elem, sizeof(elem), info.seq), REMORA_FRAME_OK);
    remora_sub_destroy(sub);
    it_client_close(&c);
    assert_int_equal(it_server_stop(&s), 0);
}

/* The server said something about each kind of malformed input. */
static void test_server_logged_the_junk(void **state)
{
    char *log = it_server_log(&g_w);
    (void)state;

    it_assert_contains(log, "malformed message");
    it_assert_contains(log, "malformed LOOKUP");
    it_assert_contains(log, "unexpected HELLO from a client");
    it_assert_contains(log, "during its handshake");
    it_assert_contains(log, "not a remora client");
    it_assert_contains(log, "speaks protocol 3..3");
    it_assert_contains(log, "did not finish its handshake");
    free(log);
    log = it_server_log(&g_t);
    it_assert_contains(log, "failed authentication");
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_frames_out_of_turn),
        cmocka_unit_test(test_bad_control_messages),
        cmocka_unit_test(test_bad_reads_and_writes),
        cmocka_unit_test(test_write_read_only_server_side),
        cmocka_unit_test(test_token_server),
        cmocka_unit_test(test_version_mismatch),
        cmocka_unit_test(test_random_flood),
        cmocka_unit_test(test_peer_vanishes_mid_transfer),
        cmocka_unit_test(test_bytes_after_handshake),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_ring_messages),
        cmocka_unit_test(test_server_logged_the_junk),
    };

    it_init("raw-ucp");
    return it_finish(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
