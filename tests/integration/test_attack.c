/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Attacks on a server, each by a raw program in this test against a real
 * `remora serve` child (or a library server, for the connection caps):
 *   a. pre-auth: HELLO only, no AUTH, against a token server: no worker
 *      address, no endpoint; CONNECT without AUTH closes the socket.
 *   b. own-rkey RMA: an authenticated raw UCX peer packs an rkey of its own
 *      memory and uses it with ucp_get_nbx/ucp_put_nbx at the server's
 *      addresses (the server's default: RMA off): no server bytes come back,
 *      a read-only region stays unchanged.
 *   c. map write: a same-host raw program opens a read-only region's memory
 *      file /proc/PID/fd/FD: no writable mapping, no write(); read-only
 *      mapping shows the bytes. A writable region's file maps writable.
 *   d. REMORA_RMA=unsafe: an rkey for a read-only region; a put is recorded
 *      (the transport may not enforce it; docs/security.md must say so).
 *   e. connection caps of a library server (8 total, 4 per host): BUSY.
 *   f. out of fds: a server under RLIMIT_NOFILE 256 and 600 connections
 *      held open: it does not spin, and serves once they close.
 *   g. socket backlog: a raw peer sends far past the window of sockets a
 *      library server has not accepted: each holds one message (the small
 *      window its SOCK_CONNECT_REPLY gave), the rest is dropped.
 *   h. a silent worker address: CONNECT naming UCX ports that drop SYNs (a
 *      context whose gate is closed to this host): the one worker goes on
 *      serving meanwhile; where UCX's connects block, the CONNECT is refused
 *      within the server's reach limit.
 * Each ends with the server alive and serving a real client byte-exact.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "engine/engine.h" /* RM_AM_ID_TO_SERVER, RM_AM_ID_TO_CLIENT */
#include "harness.h"
#include "raw_boot.h"
#include "wire/wire.h"

#define A_SIZE (64u * 1024u)
#define TOKEN  "attack-test-token-0123456789"
#define WAIT_MS 5000

/* ---------------------------------------------------------------- raw UCX peer */

typedef struct raw {
    ucp_context_h ctx;
    ucp_worker_h  worker;
    ucp_ep_h      ep;
    rb_sock_t     bs;
    int           got_reply;
    rm_hdr_t      hdr;
    uint8_t      *body;
    size_t        body_len;
} raw_t;

static ucs_status_t raw_am_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    raw_t *r = arg;
    (void)param;
    if (rm_hdr_decode(header, header_length, &r->hdr) != 0)
        return UCS_OK;
    free(r->body);
    r->body     = length ? malloc(length) : NULL;
    r->body_len = length;
    if (r->body)
        memcpy(r->body, data, length);
    r->got_reply = 1;
    return UCS_OK;
}

static void raw_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) { (void)arg; (void)ep; (void)status; }

static unsigned raw_pump(raw_t *r)
{
    rb_tick(&r->bs);
    return ucp_worker_progress(r->worker);
}

/* An authenticated raw peer with AM (and RMA when rma) over its own UCX. */
static int raw_open(raw_t *r, const char *addr, const char *token, int rma)
{
    ucp_config_t *config;
    ucp_address_t *mine;
    size_t mine_len, theirs_len;
    void *theirs;

    memset(r, 0, sizeof(*r));
    r->bs.fd = -1;
    if (ucp_config_read(NULL, NULL, &config) != UCS_OK)
        return -1;
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                      .features = UCP_FEATURE_AM | (rma ? UCP_FEATURE_RMA : 0),
                      .name = "attacker"};
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
    if (rb_dial(&r->bs, addr) != 0 ||
        rb_hello_auth(&r->bs, token, token ? strlen(token) : 0) != REMORA_OK)
        return -1;
    if (ucp_worker_get_address(r->worker, &mine, &mine_len) != UCS_OK)
        return -1;
    remora_status_t rst = rb_connect(&r->bs, mine, mine_len, &theirs, &theirs_len);
    ucp_worker_release_address(r->worker, mine);
    if (rst != REMORA_OK)
        return -1;
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = theirs, .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = raw_err_cb, .arg = r}};
    st = ucp_ep_create(r->worker, &ep, &r->ep);
    free(theirs);
    return st == UCS_OK ? 0 : -1;
}

static void raw_close(raw_t *r)
{
    if (r->ep) {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
        void *req = ucp_ep_close_nbx(r->ep, &p);
        if (UCS_PTR_IS_PTR(req)) {
            double deadline = it_now_ms() + 2000;
            while (ucp_request_check_status(req) == UCS_INPROGRESS && it_now_ms() < deadline)
                ucp_worker_progress(r->worker);
            ucp_request_free(req);
        }
    }
    rb_close(&r->bs);
    if (r->worker)
        ucp_worker_destroy(r->worker);
    if (r->ctx)
        ucp_cleanup(r->ctx);
    free(r->body);
    memset(r, 0, sizeof(*r));
    r->bs.fd = -1;
}

/* True while any of the n requests is in flight. */
static int raw_any_pending(void **reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i] != NULL && !UCS_PTR_IS_ERR(reqs[i]) &&
            ucp_request_check_status(reqs[i]) == UCS_INPROGRESS)
            return 1;
    return 0;
}

/* Pump until none of the n requests is in flight, or until deadline. */
static void raw_pump_until(raw_t *r, void **reqs, size_t n, double deadline)
{
    while (raw_any_pending(reqs, n) && it_now_ms() < deadline)
        if (raw_pump(r) == 0)
            it_sleep_ms(1);
}

/* Wait for n requests together; those still in flight after ms are
 * cancelled (and given 2 s to say so). Each final status goes to st[i]
 * (UCS_ERR_TIMED_OUT if even the cancel did not complete it); one that
 * completed with UCS_OK did so, cancelled or not, and its data counts. */
static void raw_wait_all(raw_t *r, void **reqs, size_t n, int ms, ucs_status_t *st)
{
    raw_pump_until(r, reqs, n, it_now_ms() + ms);
    for (size_t i = 0; i < n; i++)
        if (raw_any_pending(&reqs[i], 1))
            ucp_request_cancel(r->worker, reqs[i]);
    raw_pump_until(r, reqs, n, it_now_ms() + 2000);
    for (size_t i = 0; i < n; i++) {
        if (reqs[i] == NULL) {
            st[i] = UCS_OK;
        } else if (UCS_PTR_IS_ERR(reqs[i])) {
            st[i] = UCS_PTR_STATUS(reqs[i]);
        } else {
            ucs_status_t s = ucp_request_check_status(reqs[i]);
            st[i] = s == UCS_INPROGRESS ? UCS_ERR_TIMED_OUT : s;
            ucp_request_free(reqs[i]);
        }
    }
}

/* Wait for a request; cancel it after ms. Returns its final status. */
static ucs_status_t raw_wait(raw_t *r, void *req, int ms)
{
    ucs_status_t st;

    raw_wait_all(r, &req, 1, ms, &st);
    return st;
}

/* One eager active message to the server, sent when this returns. */
static void raw_send(raw_t *r, const rm_hdr_t *hdr, const void *body, size_t len)
{
    uint8_t h[RM_HDR_MAX];
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    void *req = ucp_am_send_nbx(r->ep, RM_AM_ID_TO_SERVER, h, rm_hdr_encode(hdr, h), body,
                                len, &p);
    assert_int_equal(raw_wait(r, req, WAIT_MS), UCS_OK);
}

/* A request and its reply (in r->hdr, r->body), which must be of reply_type. */
static void raw_request(raw_t *r, const rm_hdr_t *hdr, const void *body, size_t len,
                        unsigned reply_type)
{
    r->got_reply = 0;
    raw_send(r, hdr, body, len);
    double deadline = it_now_ms() + WAIT_MS;
    while (!r->got_reply && it_now_ms() < deadline)
        if (raw_pump(r) == 0)
            it_sleep_ms(1);
    assert_true(r->got_reply);
    assert_int_equal(r->hdr.type, reply_type);
}

/* A request whose body is a name, answered OK with reply_type; *rb reads
 * the reply's body. */
static void raw_named_request(raw_t *r, const rm_hdr_t *hdr, const char *name, unsigned reply_type,
                              rm_rbuf_t *rb)
{
    rm_wbuf_t w;

    rm_wbuf_init(&w);
    rm_wbuf_name(&w, name);
    raw_request(r, hdr, w.data, w.len, reply_type);
    rm_wbuf_free(&w);
    it_assert_ok((remora_status_t)r->hdr.status);
    rm_rbuf_init(rb, r->body, r->body_len);
}

/* LOOKUP name over AM; the descriptor (rkey copied into rkey_buf). */
static void raw_lookup(raw_t *r, const char *name, rm_region_desc_t *d, uint8_t *rkey_buf)
{
    rm_hdr_t hdr = {.type = RM_MSG_LOOKUP, .req_id = 77};
    rm_rbuf_t rb;

    raw_named_request(r, &hdr, name, RM_MSG_LOOKUP_REPLY, &rb);
    rm_region_desc_decode(&rb, d);
    assert_false(rb.failed);
    if (d->rkey_len) {
        memcpy(rkey_buf, d->rkey, d->rkey_len);
        d->rkey = rkey_buf;
    }
}

/* ---------------------------------------------------------------- helpers */

static char g_token_file[512];

static void token_file(void)
{
    it_tmp_path(g_token_file, sizeof(g_token_file), "token");
    assert_int_equal(it_write_file(g_token_file, TOKEN "\n", strlen(TOKEN) + 1), 0);
}

/* A real client reads region "a" (pattern) whole and byte-exact. */
static void assert_serves(const char *addr, const char *token)
{
    remora_client_params_t p = {0};
    it_client_t c;
    uint8_t *buf = malloc(A_SIZE);

    assert_non_null(buf);
    if (token) {
        p.field_mask = REMORA_CLIENT_FIELD_TOKEN;
        p.token      = token;
        p.token_len  = strlen(token);
    }
    it_assert_ok(it_client_open(&c, addr, &p));
    it_assert_ok(remora_client_read(c.client, "a", 0, buf, A_SIZE));
    it_assert_pattern(buf, 0, A_SIZE);
    it_client_close(&c);
    free(buf);
}

/* ---------------------------------------------------------------- a */

/* HELLO without AUTH: the reply carries no worker address (a HELLO_REPLY
 * is status + hello, 74 bytes), nothing else comes, and the server creates
 * no endpoint; CONNECT without AUTH closes the socket. */
static void test_pre_auth_no_endpoint(void **state)
{
    it_server_t s;
    static const char *const env[] = {"REMORA_LOG=info", NULL};
    rb_sock_t b;
    rb_frame_t f;
    rm_wbuf_t w;
    rm_hello_t h = {.proto_min = 2, .proto_max = 2};
    uint8_t fake[128];
    (void)state;

    token_file();
    if (it_server_start_env(&s, env, "--region", "a=64K", "--token-file", g_token_file, NULL))
        fail_msg("could not start remora serve");
    assert_int_equal(rb_dial(&b, s.addr), 0);
    rm_wbuf_init(&w);
    rm_hello_encode(&w, &h);
    assert_int_equal(rb_send_frame(&b, RM_BOOT_HELLO, 0, w.data, (uint32_t)w.len), 0);
    rm_wbuf_free(&w);
    assert_int_equal(rb_recv(&b, WAIT_MS, false, &f), 0);
    assert_int_equal(f.type, RM_BOOT_HELLO_REPLY);
    assert_int_equal(f.len, 4 + 78); /* status and hello: no worker address */
    rm_hello_t theirs;
    assert_int_equal(rm_hello_decode(f.payload + 4, f.len - 4, &theirs), 0);
    assert_true(theirs.flags & RM_HELLO_AUTH_REQUIRED);
    rb_frame_free(&f);
    /* Nothing more comes while we wait (no heartbeats before the end of
     * the handshake, and certainly no worker address). */
    assert_int_equal(rb_recv(&b, 1000, false, &f), -2);

    /* CONNECT without AUTH: closed, no reply. */
    memset(fake, 0, sizeof(fake));
    fake[0] = 0x02;
    assert_int_equal(rb_send_frame(&b, RM_BOOT_CONNECT, 0, fake, sizeof(fake)), 0);
    int r = rb_recv(&b, 2000, false, &f);
    if (r == 0)
        fail_msg("CONNECT without AUTH got a frame of type %u", f.type);
    assert_int_equal(r, -1); /* closed */
    rb_close(&b);

    char *log = it_server_log(&s);
    if (strstr(log, " connected") != NULL)
        fail_msg("the server set up a connection for an unauthenticated peer:\n%s", log);
    free(log);
    assert_true(it_server_alive(&s));
    assert_serves(s.addr, TOKEN);
    log = it_server_log(&s); /* the check above can fail: a real client shows */
    it_assert_contains(log, " connected");
    free(log);
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- b */

/* Authenticated raw peer, server RMA off: an rkey of our own memory used at
 * the server's addresses delivers none of the server's bytes and changes
 * nothing. */
static void test_own_rkey_rma(void **state)
{
    it_server_t s;
    raw_t *r = calloc(1, sizeof(*r));
    static uint8_t rkey_buf[RM_RKEY_MAX];
    rm_region_desc_t d;
    uint8_t *mine = aligned_alloc(4096, 4096);
    (void)state;

    assert_non_null(r);
    assert_non_null(mine);
    token_file();
    it_must_start(&s, "--region", "a=64K", "--token-file", g_token_file, NULL);
    if (raw_open(r, s.addr, TOKEN, 1) != 0)
        fail_msg("raw peer could not connect");
    raw_lookup(r, "a", &d, rkey_buf);
    assert_int_equal(d.access, REMORA_ACCESS_READ);
    assert_int_equal(d.rkey_len, 0); /* RMA off: no rkey handed out */
    assert_true(d.remote_addr != 0);
    printf("# region a at 0x%llx in the server\n", (unsigned long long)d.remote_addr);

    /* Our own registration and key. */
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = mine, .length = 4096};
    ucp_mem_h memh;
    void *packed;
    size_t packed_len;
    ucp_rkey_h rkey;
    assert_int_equal(ucp_mem_map(r->ctx, &mp, &memh), UCS_OK);
    assert_int_equal(ucp_rkey_pack(r->ctx, memh, &packed, &packed_len), UCS_OK);
    ucs_status_t ust = ucp_ep_rkey_unpack(r->ep, packed, &rkey);
    ucp_rkey_buffer_release(packed);
    printf("# unpacking our own rkey on the endpoint: %s\n", ucs_status_string(ust));
    if (ust == UCS_OK) {
        /* Every op is posted at once and each gets 3 s from then: an op the
         * server were to answer would complete in milliseconds over loopback. */
        enum { NGET = 3 };
        const uint64_t targets[NGET] = {d.remote_addr, 0x10, d.remote_addr + 4096};
        static uint8_t got[NGET][64];
        uint8_t junk[64];
        void *reqs[NGET + 1];
        ucp_request_param_t p = {0};

        memset(got, 0xEE, sizeof(got));
        memset(junk, 0x66, sizeof(junk));
        for (size_t i = 0; i < NGET; i++)
            reqs[i] = ucp_get_nbx(r->ep, got[i], sizeof(got[i]), targets[i], rkey, &p);
        reqs[NGET] = ucp_put_nbx(r->ep, junk, sizeof(junk), d.remote_addr + 128, rkey, &p);
        ucs_status_t sts[NGET + 1];
        raw_wait_all(r, reqs, NGET + 1, 3000, sts);
        for (size_t i = 0; i < NGET; i++) {
            int64_t off = (int64_t)(targets[i] - d.remote_addr);
            int leaked = sts[i] == UCS_OK && off >= 0 && off + 64 <= A_SIZE &&
                         remora_pattern_check(got[i], (uint64_t)off, 64) < 0;
            printf("# get of 64 bytes at 0x%llx: %s%s\n", (unsigned long long)targets[i],
                   ucs_status_string(sts[i]), leaked ? " WITH THE SERVER'S BYTES" : "");
            if (leaked)
                fail_msg("ucp_get_nbx with our own rkey read the server's region");
        }
        /* The put into the read-only region (assert_serves checks it below). */
        printf("# put of 64 bytes into read-only a: %s\n", ucs_status_string(sts[NGET]));
        ucp_rkey_destroy(rkey);
    }
    ucp_mem_unmap(r->ctx, memh);
    raw_close(r);
    free(r);
    free(mine);
    it_sleep_ms(100);
    assert_true(it_server_alive(&s));
    assert_serves(s.addr, TOKEN); /* whole region still the pattern: unchanged */
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- c */

/* The descriptor of name on s, through an authenticated raw peer. */
static int lookup_mappable(const char *addr, const char *name, rm_region_desc_t *d)
{
    raw_t *r = calloc(1, sizeof(*r));
    static uint8_t rkey_buf[RM_RKEY_MAX];

    assert_non_null(r);
    if (raw_open(r, addr, TOKEN, 0) != 0)
        fail_msg("raw peer could not connect");
    raw_lookup(r, name, d, rkey_buf);
    raw_close(r);
    free(r);
    return (d->flags & RM_REGION_WIRE_MAPPABLE) != 0;
}

static void test_map_write_read_only(void **state)
{
    it_server_t ro, rw;
    rm_region_desc_t d;
    char path[64];
    (void)state;

    token_file();
    it_must_start(&ro, "--region", "a=64K", "--token-file", g_token_file, NULL);
    it_must_start(&rw, "--region", "a=64K", "--writable", "--token-file", g_token_file, NULL);
    if (!lookup_mappable(ro.addr, "a", &d)) {
        const char *tls = getenv("UCX_TLS");
        /* No shared-memory transport: the map path is off (network only). */
        if (tls && strstr(tls, "tcp") && !strstr(tls, "sm") && !strstr(tls, "posix"))
            goto done;
        fail_msg("a same-host read-only region is not MAPPABLE with UCX_TLS=%s",
                 tls ? tls : "(default)");
    }
    assert_int_equal((pid_t)d.map_pid, ro.pid);
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", d.map_pid, d.map_fd);
    printf("# read-only region a: %s offset %llu\n", path, (unsigned long long)d.map_offset);

    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        void *p = mmap(NULL, A_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)d.map_offset);
        if (p != MAP_FAILED)
            fail_msg("a writable shared mapping of a read-only region succeeded");
        printf("# mmap(PROT_WRITE, MAP_SHARED) on the O_RDWR fd: %s\n", strerror(errno));
        assert_true(errno == EPERM || errno == EACCES);
        errno = 0;
        ssize_t n = pwrite(fd, "XXXX", 4, (off_t)d.map_offset);
        printf("# pwrite: %zd (%s)\n", n, strerror(errno));
        assert_true(n < 0);
        n = write(fd, "XXXX", 4);
        assert_true(n < 0);
        /* An mprotect upgrade of a read-only shared mapping is refused too. */
        void *q = mmap(NULL, A_SIZE, PROT_READ, MAP_SHARED, fd, (off_t)d.map_offset);
        assert_true(q != MAP_FAILED);
        assert_int_not_equal(mprotect(q, A_SIZE, PROT_READ | PROT_WRITE), 0);
        munmap(q, A_SIZE);
        close(fd);
    } else {
        printf("# open O_RDWR: %s\n", strerror(errno));
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    void *p = mmap(NULL, A_SIZE, PROT_READ, MAP_SHARED, fd, (off_t)d.map_offset);
    assert_true(p != MAP_FAILED);
    it_assert_pattern((const uint8_t *)p, 0, A_SIZE);
    munmap(p, A_SIZE);
    close(fd);
    assert_serves(ro.addr, TOKEN);

    /* Positive control: a writable region's file maps writable. */
    assert_true(lookup_mappable(rw.addr, "a", &d));
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", d.map_pid, d.map_fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    p = mmap(NULL, A_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)d.map_offset);
    if (p == MAP_FAILED)
        fail_msg("a writable region's file cannot be mapped writable: %s", strerror(errno));
    it_assert_pattern((const uint8_t *)p, 0, A_SIZE);
    munmap(p, A_SIZE);
    close(fd);
done:
    assert_int_equal(it_server_stop(&ro), 0);
    assert_int_equal(it_server_stop(&rw), 0);
}

/* ---------------------------------------------------------------- d */

static bool docs_say_unsafe_unprotected(void)
{
    size_t len;
    char *doc = it_read_file(REMORA_SOURCE_DIR "/docs/security.md", &len);
    bool ok = doc && strstr(doc, "REMORA_RMA=unsafe does not protect read-only regions");
    free(doc);
    return ok;
}

static void test_rma_unsafe_read_only(void **state)
{
    it_server_t s;
    static const char *const env[] = {"REMORA_RMA=unsafe", NULL};
    raw_t *r = calloc(1, sizeof(*r));
    static uint8_t rkey_buf[RM_RKEY_MAX];
    rm_region_desc_t d;
    uint8_t *src = aligned_alloc(4096, 4096);
    (void)state;

    assert_non_null(r);
    assert_non_null(src);
    token_file();
    if (it_server_start_env(&s, env, "--region", "a=64K", "--token-file", g_token_file, NULL))
        fail_msg("could not start remora serve");
    if (raw_open(r, s.addr, TOKEN, 1) != 0)
        fail_msg("raw peer could not connect");
    raw_lookup(r, "a", &d, rkey_buf);
    assert_int_equal(d.access, REMORA_ACCESS_READ);
    if (d.rkey_len == 0)
        fail_msg("REMORA_RMA=unsafe on the server, yet no rkey for region a");
    ucp_rkey_h rkey;
    assert_int_equal(ucp_ep_rkey_unpack(r->ep, d.rkey, &rkey), UCS_OK);
    memset(src, 0x66, 64);
    ucp_request_param_t p = {0};
    void *req = ucp_put_nbx(r->ep, src, 64, d.remote_addr + 256, rkey, &p);
    ucs_status_t put = raw_wait(r, req, 3000);
    req = ucp_ep_flush_nbx(r->ep, &p);
    ucs_status_t flush = raw_wait(r, req, 3000);
    ucp_rkey_destroy(rkey);
    raw_close(r);
    free(r);
    free(src);

    /* What the region holds now, through a normal client. */
    it_client_t c;
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_TOKEN, .token = TOKEN,
                                 .token_len = strlen(TOKEN)};
    uint8_t got[64];
    it_assert_ok(it_client_open(&c, s.addr, &cp));
    it_assert_ok(remora_client_read(c.client, "a", 256, got, sizeof(got)));
    it_client_close(&c);
    bool landed = remora_pattern_check(got, 256, 64) >= 0;
    printf("# REMORA_RMA=unsafe, UCX_TLS=%s: put into read-only a: %s (flush %s); the write %s\n",
           getenv("UCX_TLS") ? getenv("UCX_TLS") : "(default)", ucs_status_string(put),
           ucs_status_string(flush), landed ? "LANDED" : "did not land");
    if (landed && !docs_say_unsafe_unprotected())
        fail_msg("a put through an rkey wrote a read-only region under REMORA_RMA=unsafe, and "
                 "docs/security.md does not say \"REMORA_RMA=unsafe does not protect read-only "
                 "regions\"");
    assert_true(it_server_alive(&s));
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- e */

/* A library server on 127.0.0.1:0 in a context of its own, its address in
 * addr; capped at max_conns (per_host from one address) unless 0. */
static void lib_server_open(remora_context_h *ctx, remora_server_h *srv, char *addr,
                            unsigned max_conns, unsigned per_host)
{
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                 .listen_addr = "127.0.0.1:0", .max_conns = max_conns,
                                 .max_conns_per_host = per_host};

    if (max_conns)
        sp.field_mask |= REMORA_SERVER_FIELD_MAX_CONNS;
    it_assert_ok(remora_context_create(NULL, ctx));
    it_assert_ok(remora_server_create(*ctx, &sp, srv));
    it_assert_ok(remora_server_address(*srv, addr, IT_ADDR_MAX));
}

static void test_connection_caps(void **state)
{
    remora_context_h ctx;
    remora_server_h srv;
    remora_mem_h mem;
    char addr[IT_ADDR_MAX];
    it_client_t c[6];
    (void)state;

    lib_server_open(&ctx, &srv, addr, 8, 4);
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = A_SIZE};
    it_assert_ok(remora_mem_create(ctx, &mp, &mem));
    remora_pattern_fill(remora_mem_address(mem), 0, A_SIZE);
    it_assert_ok(remora_server_expose(srv, "a", mem, NULL));

    for (int i = 0; i < 4; i++)
        it_assert_ok(it_client_open(&c[i], addr, NULL));
    it_assert_status(it_client_open(&c[4], addr, NULL), REMORA_ERR_BUSY);
    it_assert_status(it_client_open(&c[4], addr, NULL), REMORA_ERR_BUSY);
    /* Raw sockets count too while they are open: a 4th slot taken by one. */
    it_client_close(&c[3]);
    it_client_close(&c[2]);
    it_sleep_ms(200);
    it_assert_ok(it_client_open(&c[2], addr, NULL));
    uint8_t buf[256];
    it_assert_ok(remora_client_read(c[2].client, "a", 1000, buf, sizeof(buf)));
    it_assert_pattern(buf, 1000, sizeof(buf));
    it_assert_ok(it_client_open(&c[3], addr, NULL));
    it_assert_status(it_client_open(&c[4], addr, NULL), REMORA_ERR_BUSY);
    for (int i = 0; i < 4; i++)
        it_client_close(&c[i]);
    it_sleep_ms(200);
    remora_server_destroy(srv);
    remora_mem_destroy(mem);
    remora_context_destroy(ctx);
}

/* Sockets from host src that stay open HOLD_MS after connecting, sending
 * nothing: those the server refuses at accept it answers BUSY and closes. */
static unsigned raw_kept(rb_sock_t *socks, int n, const char *addr, const char *src)
{
    unsigned kept = 0;

    for (int i = 0; i < n; i++)
        assert_int_equal(rb_dial_from(&socks[i], addr, src), 0);
    for (int i = 0; i < n; i++) {
        rb_frame_t f;
        int r = rb_recv(&socks[i], 300, true, &f);
        if (r == 0) { /* refused: HELLO_REPLY carrying BUSY, then the close */
            assert_int_equal(f.type, RM_BOOT_HELLO_REPLY);
            rb_frame_free(&f);
            assert_true(rb_closed_within(&socks[i], 1000, NULL));
            rb_close(&socks[i]);
        } else {
            assert_int_equal(r, -2); /* nothing said: still open */
            kept++;
        }
    }
    return kept;
}

/* A connection over a cap is refused at its accept and never counted:
 * one host sending nothing held every slot for 5 s, and a host refused
 * while the server was full stayed refused until restart (its count
 * wrapped; both found by review). */
static void test_caps_at_accept(void **state)
{
    remora_context_h ctx;
    remora_server_h srv;
    char addr[IT_ADDR_MAX];
    rb_sock_t a[6], b[2], v;
    it_client_t c;
    (void)state;

    lib_server_open(&ctx, &srv, addr, 4, 2);

    /* Six silent sockets from one host: two kept, four refused at once. */
    assert_int_equal(raw_kept(a, 6, addr, "127.0.0.2"), 2);
    /* The other two slots are everyone else's. */
    it_assert_ok(it_client_open(&c, addr, NULL));
    it_client_close(&c);
    /* Full (2 + 2): another host refused twice, then let in once room is made. */
    assert_int_equal(raw_kept(b, 2, addr, "127.0.0.3"), 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rb_dial_from(&v, addr, "127.0.0.4"), 0);
        it_assert_status(rb_hello(&v, RM_PROTO_VERSION, RM_PROTO_VERSION, NULL),
                         REMORA_ERR_BUSY);
        rb_close(&v);
    }
    for (int i = 0; i < 6; i++)
        rb_close(&a[i]);
    rb_close(&b[0]);
    rb_close(&b[1]);
    it_sleep_ms(300);
    assert_int_equal(rb_dial_from(&v, addr, "127.0.0.4"), 0);
    it_assert_ok(rb_hello(&v, RM_PROTO_VERSION, RM_PROTO_VERSION, NULL));
    rb_close(&v);

    /* Before AUTH a frame is small: a HELLO announcing 64 KiB is cut off
     * at 1 KiB instead of buffered whole. */
    assert_int_equal(rb_dial(&v, addr), 0);
    uint8_t *big = calloc(1, RM_BOOT_PAYLOAD_MAX);
    rm_wbuf_t w;
    assert_non_null(big);
    rm_wbuf_init(&w);
    rm_boot_encode(&w, RM_BOOT_HELLO, 0, big, RM_BOOT_PAYLOAD_MAX);
    assert_false(w.failed);
    assert_int_equal(rb_send_bytes(&v, w.data, RM_BOOT_HDR_LEN + 2048), 0);
    rm_wbuf_free(&w);
    free(big);
    assert_true(rb_closed_within(&v, 2000, NULL));
    rb_close(&v);
    remora_server_destroy(srv);
    remora_context_destroy(ctx);
}

/* A peer that sends requests and never takes their answers (it progresses
 * its worker only while its own send is stuck, heartbeats going): the
 * server queued every answer, 2 GB in 12 s (review). Now the connection
 * goes once RM_CONN_SENDS_MAX answers wait, and the server stays small. */
static void test_unread_replies(void **state)
{
    it_server_t s;
    raw_t r;
    rm_region_desc_t d;
    uint8_t rkey[512], h[RM_HDR_MAX];
    (void)state;

    it_must_start(&s, "--region", "a=64K", NULL);
    assert_int_equal(raw_open(&r, s.addr, NULL, 0), 0);
    raw_lookup(&r, "a", &d, rkey);
    long rss0 = it_proc_rss_kib(s.pid), peak = rss0;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    double t0 = it_now_ms(), last = t0;
    unsigned long sent = 0;
    bool closed = false;
    while (!closed && it_now_ms() - t0 < 8000) {
        rm_hdr_t hdr = {.type = RM_MSG_READ, .req_id = ++sent, .region_id = d.region_id,
                        .length = 65536};
        void *req = ucp_am_send_nbx(r.ep, RM_AM_ID_TO_SERVER, h, rm_hdr_encode(&hdr, h), NULL,
                                    0, &p);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS && it_now_ms() - t0 < 8000)
                raw_pump(&r);
            ucp_request_free(req);
        }
        rb_tick(&r.bs);
        if (it_now_ms() - last > 200) {
            last = it_now_ms();
            long rss = it_proc_rss_kib(s.pid);
            peak = rss > peak ? rss : peak;
            closed = rb_closed_within(&r.bs, 0, NULL);
        }
    }
    printf("# %lu requests, none answered taken: server VmRSS %ld -> at most %ld kB; "
           "connection %s after %.1f s\n", sent, rss0, peak, closed ? "closed" : "open",
           (it_now_ms() - t0) / 1000);
    assert_true(closed);
    /* Bounded, not small: UCX 1.13 on the 2-core VM held 8 MB at the limit,
     * UCX 1.16 on 16-core H200 hosts 75 MB and, on another day, 142 MB in
     * three runs out of three (its requests and send buffers are bigger);
     * without the limit, 1.1 GB in 8 s. */
    assert_true(peak - rss0 < 256 * 1024);
    raw_close(&r);
    assert_serves(s.addr, NULL);
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- f */

static void test_out_of_fds(void **state)
{
    enum { N = 600 };
    it_server_t s;
    struct rlimit old, lim;
    int *fds = calloc(N, sizeof(int));
    (void)state;

    assert_non_null(fds);
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    if (old.rlim_max < N + 256)
        it_skip_all("RLIMIT_NOFILE hard limit below 856");
    lim.rlim_cur = lim.rlim_max = 256; /* the child's: soft and hard */
    /* The child inherits our limits at fork: lower the soft limit around the
     * spawn only (the hard limit we keep, to raise it back). */
    lim.rlim_max = old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int rc = it_server_start(&s, "--region", "a=64K", NULL);
    lim.rlim_cur = old.rlim_max < 4096 ? old.rlim_max : 4096;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    if (rc != 0)
        fail_msg("could not start remora serve under RLIMIT_NOFILE 256");
    char lpath[64], line[256], *limits;
    snprintf(lpath, sizeof(lpath), "/proc/%d/limits", (int)s.pid);
    limits = it_read_file(lpath, NULL);
    assert_non_null(limits);
    char *open_files = strstr(limits, "Max open files");
    assert_non_null(open_files);
    snprintf(line, sizeof(line), "%.60s", open_files);
    printf("# server: %s\n", line);
    assert_true(strstr(line, " 256 ") != NULL);
    free(limits);

    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)it_addr_port(s.addr)),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < N; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
        if (connect(fds[i], (struct sockaddr *)&sin, sizeof(sin)) != 0)
            assert_int_equal(errno, EINPROGRESS);
    }
    it_sleep_ms(500);
    long t0 = it_proc_cpu_ticks(s.pid);
    it_sleep_ms(2000);
    long t1 = it_proc_cpu_ticks(s.pid);
    long hz = sysconf(_SC_CLK_TCK);
    double pct = 100.0 * (double)(t1 - t0) / (double)hz / 2.0;
    printf("# server CPU with %d connections at RLIMIT_NOFILE 256: %.1f%%\n", N, pct);
    assert_true(t0 >= 0 && t1 >= 0);
    if (pct >= 10.0)
        fail_msg("the server spins when out of fds: %.1f%% CPU over 2 s", pct);
    assert_true(it_server_alive(&s));
    char *log = it_server_log(&s);
    printf("# server log mentions the pause: %s\n", strstr(log, "pausing accept") ? "yes" : "no");
    free(log);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    double t_close = it_now_ms();
    remora_status_t st;
    it_client_t c;
    do { /* the server notices the closes and resumes accepting */
        st = it_client_open(&c, s.addr, NULL);
        if (st == REMORA_OK)
            break;
        it_sleep_ms(200);
    } while (it_now_ms() - t_close < 8000);
    it_assert_ok(st);
    printf("# a client got in %.0f ms after the connections closed\n", it_now_ms() - t_close);
    it_client_close(&c);
    assert_serves(s.addr, NULL);
    assert_int_equal(it_server_stop(&s), 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    free(fds);
}

/* ---------------------------------------------------------------- g */

/* SOCK_CONNECT to service as socket my_id; the server's socket id, and its
 * window in *window. */
static uint32_t raw_sock_connect(raw_t *r, const char *service, uint32_t my_id,
                                 uint64_t *window)
{
    rm_hdr_t hdr = {.type = RM_MSG_SOCK_CONNECT, .req_id = my_id, .offset = my_id,
                    .length = REMORA_SOCK_WINDOW};
    rm_rbuf_t rb;

    raw_named_request(r, &hdr, service, RM_MSG_SOCK_CONNECT_REPLY, &rb);
    uint32_t id = rm_rbuf_u32(&rb);
    *window = rm_rbuf_u64(&rb);
    assert_false(rb.failed || rb.left);
    return id;
}

static void test_sock_backlog_flood(void **state)
{
    enum { NSOCK = 4, NMSG = 16, MSG = 64 << 10 };
    remora_context_h ctx;
    remora_server_h srv;
    remora_sock_listener_h l;
    char addr[IT_ADDR_MAX];
    uint8_t *chunk = malloc(MSG), *buf = malloc(NMSG * MSG);
    uint64_t window;
    uint32_t ids[NSOCK];
    raw_t r;
    (void)state;

    assert_non_null(chunk);
    assert_non_null(buf);
    lib_server_open(&ctx, &srv, addr, 0, 0);
    it_assert_ok(remora_sock_listen(srv, "svc", &l));
    assert_int_equal(raw_open(&r, addr, NULL, 0), 0);
    for (uint32_t i = 0; i < NSOCK; i++) {
        ids[i] = raw_sock_connect(&r, "svc", 7000 + i, &window);
        assert_true(window > 0 && window <= MSG);
    }
    for (uint32_t i = 0; i < NSOCK; i++)
        for (int k = 0; k < NMSG; k++) {
            rm_hdr_t h = {.type = RM_MSG_SOCK_DATA, .region_id = ids[i], .offset = 7000 + i,
                          .length = MSG};
            memset(chunk, 'a' + (int)i, MSG);
            raw_send(&r, &h, chunk, MSG);
        }
    rm_hdr_t ping = {.type = RM_MSG_PING, .req_id = 9};
    raw_request(&r, &ping, NULL, 0, RM_MSG_PONG); /* the data came before it */
    for (uint32_t i = 0; i < NSOCK; i++) {
        remora_sock_h a;
        size_t got = 0;
        int64_t n;
        it_assert_ok(remora_sock_accept(l, 1000, &a));
        while ((n = remora_sock_recv(a, buf + got, NMSG * MSG - got, 200)) > 0)
            got += (size_t)n;
        assert_int_equal(n, REMORA_ERR_TIMED_OUT);
        printf("# unaccepted socket %u kept %zu of %d bytes sent\n", i, got, NMSG * MSG);
        assert_int_equal(got, window);
        memset(chunk, 'a' + (int)i, MSG);
        assert_memory_equal(buf, chunk, got);
        remora_sock_close(a);
    }
    raw_close(&r);
    remora_sock_listener_destroy(l);
    remora_server_destroy(srv);
    remora_context_destroy(ctx);
    free(chunk);
    free(buf);
}

/* A socket peer that returns credit without reading (it never progresses
 * its worker; heartbeats go): the server's application kept handing data to
 * UCX, 636 MiB in 1 s and 1 GiB before the connection's send cap (review).
 * Now no more than a window is in UCX's hands at once. */
static void test_sock_credit_lie(void **state)
{
    enum { CHUNK = 1 << 20 };
    remora_context_h ctx;
    remora_server_h srv;
    remora_sock_listener_h l;
    remora_sock_h a;
    char addr[IT_ADDR_MAX];
    uint8_t *buf = calloc(1, CHUNK), h[RM_HDR_MAX];
    uint64_t window;
    raw_t r;
    (void)state;

    assert_non_null(buf);
    lib_server_open(&ctx, &srv, addr, 0, 0);
    it_assert_ok(remora_sock_listen(srv, "svc", &l));
    assert_int_equal(raw_open(&r, addr, NULL, 0), 0);
    uint32_t id = raw_sock_connect(&r, "svc", 7100, &window);
    it_assert_ok(remora_sock_accept(l, 1000, &a));
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    rm_hdr_t credit = {.type = RM_MSG_SOCK_CREDIT, .region_id = id, .offset = 7100,
                       .length = REMORA_SOCK_WINDOW};
    uint64_t handed = 0;
    double t0 = it_now_ms();
    while (it_now_ms() - t0 < 1500) {
        void *req = ucp_am_send_nbx(r.ep, RM_AM_ID_TO_SERVER, h, rm_hdr_encode(&credit, h),
                                    NULL, 0, &p);
        if (UCS_PTR_IS_PTR(req))
            ucp_request_free(req); /* left to UCX: we read nothing */
        rb_tick(&r.bs);
        int64_t n = remora_sock_send(a, buf, CHUNK, 2);
        if (n > 0)
            handed += (uint64_t)n;
    }
    printf("# credit returned unearned for 1.5 s: %.1f MiB handed to remora_sock_send\n",
           (double)handed / (1 << 20));
    assert_true(handed < 64ull << 20);
    remora_sock_close(a);
    raw_close(&r);
    remora_sock_listener_destroy(l);
    remora_server_destroy(srv);
    remora_context_destroy(ctx);
    free(buf);
}

/* ---------------------------------------------------------------- h */

/*
 * UCX's TCP transport connects with a blocking connect() inside
 * ucp_ep_create (UCX 1.13; remora has it connect without blocking from 1.16
 * on): a CONNECT whose worker address names ports that drop SYNs froze the
 * worker handling it for TCP's SYN retries (127 s; docs/security.md 3.5).
 * The ports here are a live context's whose gate lets no host in. With one
 * worker, a real client connecting and reading meanwhile shows the worker is
 * not held. Where connects block, the probe refuses the CONNECT within the
 * reach limit; where they do not, the server answers it at once.
 */
static void test_silent_worker_address(void **state)
{
    remora_context_h ctx, decoy;
    remora_server_h srv;
    remora_mem_h mem;
    char addr[IT_ADDR_MAX];
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                                REMORA_SERVER_FIELD_LANES,
                                 .listen_addr = "127.0.0.1:0", .lanes = 1};
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = A_SIZE};
    rb_sock_t b;
    rb_frame_t f;
    it_client_t c;
    uint8_t buf[256];
    (void)state;

    it_assert_ok(remora_context_create(NULL, &ctx));
    it_assert_ok(remora_server_create(ctx, &sp, &srv));
    it_assert_ok(remora_server_address(srv, addr, sizeof(addr)));
    it_assert_ok(remora_mem_create(ctx, &mp, &mem));
    remora_pattern_fill(remora_mem_address(mem), 0, A_SIZE);
    it_assert_ok(remora_server_expose(srv, "a", mem, NULL));
    it_assert_ok(remora_context_create(NULL, &decoy));

    assert_int_equal(rb_dial(&b, addr), 0);
    it_assert_ok(rb_hello_auth(&b, NULL, 0));
    double t0 = rb_now_ms();
    assert_int_equal(rb_send_frame(&b, RM_BOOT_CONNECT, 0, decoy->worker_addr,
                                   (uint32_t)decoy->worker_addr_len), 0);
    it_sleep_ms(100); /* the server is in that CONNECT now */

    double t1 = rb_now_ms();
    it_assert_ok(it_client_open(&c, addr, NULL));
    it_assert_ok(remora_client_read(c.client, "a", 1000, buf, sizeof(buf)));
    it_assert_pattern(buf, 1000, sizeof(buf));
    double served_ms = rb_now_ms() - t1;
    print_message("  a client connected and read in %.1f ms beside the silent CONNECT\n",
                  served_ms);
    assert_true(served_ms < 1500);

    int r = rb_recv(&b, 8000, true, &f);
    double refused_ms = rb_now_ms() - t0;
    if (r != 0)
        fail_msg("no CONNECT_REPLY for the silent address (%d) after %.0f ms", r, refused_ms);
    rm_boot_frame_t bf = {.type = (uint8_t)f.type, .payload = f.payload, .len = f.len};
    remora_status_t st;
    const uint8_t *rest;
    uint32_t rest_len;
    assert_int_equal(f.type, RM_BOOT_CONNECT_REPLY);
    assert_int_equal(rm_boot_reply_split(&bf, &st, &rest, &rest_len), 0);
    print_message("  CONNECT with the silent address answered %s after %.0f ms (connects %s)\n",
                  remora_status_string(st), refused_ms,
                  ctx->connect_blocks ? "block: probed" : "do not block");
    assert_int_equal(st, ctx->connect_blocks ? REMORA_ERR_TIMED_OUT : REMORA_OK);
    assert_true(refused_ms < 4000);
    rb_frame_free(&f);
    rb_close(&b);

    it_assert_ok(remora_client_read(c.client, "a", 2000, buf, sizeof(buf)));
    it_assert_pattern(buf, 2000, sizeof(buf));
    it_client_close(&c);
    remora_server_destroy(srv);
    remora_mem_destroy(mem);
    remora_context_destroy(decoy);
    remora_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pre_auth_no_endpoint, it_teardown_reap),
        cmocka_unit_test_teardown(test_own_rkey_rma, it_teardown_reap),
        cmocka_unit_test_teardown(test_map_write_read_only, it_teardown_reap),
        cmocka_unit_test_teardown(test_rma_unsafe_read_only, it_teardown_reap),
        cmocka_unit_test_teardown(test_connection_caps, it_teardown_reap),
        cmocka_unit_test_teardown(test_caps_at_accept, it_teardown_reap),
        cmocka_unit_test_teardown(test_unread_replies, it_teardown_reap),
        cmocka_unit_test_teardown(test_out_of_fds, it_teardown_reap),
        cmocka_unit_test_teardown(test_sock_backlog_flood, it_teardown_reap),
        cmocka_unit_test_teardown(test_sock_credit_lie, it_teardown_reap),
        cmocka_unit_test_teardown(test_silent_worker_address, it_teardown_reap),
    };

    it_init("attack");
    /* (d) needs RMA in this process's raw peer only; the library clients
     * here read over AM either way. */
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
