/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the whole bootstrap (docs/protocol.md §1, §6) against
 * a live in-process server, with the real library and real UCX in the loop.
 *
 * Design notes
 * - At the first call (LLVMFuzzerInitialize) ONE server is created: its own
 *   remora context, listening on 127.0.0.1:0, exposing one 4 KiB region
 *   ("fuzz") of known content. Each health check has a client context of
 *   its own, made for it (client_context says why). Every context has
 *   bind_host 127.0.0.1, so UCX opens listeners on loopback only.
 * - Each input: a fresh TCP connection to the server, the input's bytes
 *   written to it (as much as the socket takes without blocking), whatever
 *   comes back read for at most READ_MS milliseconds (poll, non-blocking),
 *   then the socket is closed with a reset (SO_LINGER 0: no TIME_WAIT, so a
 *   long run cannot run out of ephemeral ports).
 * - Every HEALTH_EVERY inputs, and once more at exit, a health check: a real
 *   remora client (the second context, the right token) connects and reads
 *   the region, which must come back byte-exact; otherwise abort(), which
 *   libFuzzer reports as a crash. A server thread that died or wedged fails
 *   it too (connecting is bounded by the client's timeout).
 * - Two modes, chosen by the environment at start:
 *     token mode (default): the server has a 32-byte token.
 *       The input is a sequence of raw bootstrap frames. The fuzzer cannot
 *       compute the HMAC proof, so it exercises HELLO, AUTH (wrong proofs),
 *       frames out of turn and garbage; CONNECT never gets past AUTH, and no
 *       byte of the input reaches UCX. That is the property under test.
 *     FUZZ_BOOT_NOTOKEN=1: the server has NO token, so anyone who connects
 *       is authenticated after HELLO. Every input is prefixed with a valid
 *       HELLO frame; then the first input byte picks how the rest is sent:
 *       even: the rest is a UCX worker address, sent as one CONNECT frame
 *             (so nearly every mutation reaches rm_boot_addr_plausible and,
 *             when it passes, ucp_ep_create and UCX's address unpacking);
 *       odd:  the rest is raw frames, sent as they are.
 *       This mode feeds mutated worker addresses to the server's address
 *       check (src/engine/ucx_addr.c) and whatever passes it to UCX, which
 *       trusts worker addresses (docs/security.md §3.5). CI runs both modes.
 * - FUZZ_BOOT_WRITE_SEEDS=DIR: at start, write the seed corpus for the
 *   current mode into DIR (tests/fuzz/run.sh does this when
 *   tests/fuzz/corpus_boot/ is empty, and always for no-token mode). The
 *   worker address in the seeds is a live decoy context's, so in no-token
 *   mode a seed CONNECT reaches a worker that exists. Not the health-check
 *   client's: a server handed a live client's worker address by someone else
 *   creates an endpoint to it, and UCX's endpoint matching (by worker uuid
 *   and connection number) may then pair that client's own later endpoint
 *   with the stray one; docs/security.md §3.5.
 * - Leaks: run with -detect_leaks=0 (libFuzzer's per-input leak check), and
 *   LeakSanitizer's exit check is off by default (__asan_default_options
 *   below). The server, its context, the decoy and UCX's global state live for the
 *   whole run and are never torn down (libFuzzer exits from inside its
 *   loop), so LeakSanitizer would report them all at exit (UCX's own
 *   ucs_malloc'd state included), and libFuzzer takes a leak report for a
 *   crash. Leaks in the bootstrap are the integration tests' business
 *   (REMORA_SANITIZE builds run them with detect_leaks=1).
 * - The server logs at "error" (REMORA_LOG, unless set), so the expected
 *   warnings ("client failed authentication", one per input) stay quiet.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <remora/remora.h>

#include "engine/engine.h"
#include "wire/wire.h"

#define REGION_NAME  "fuzz"
#define REGION_LEN   4096u
#define HEALTH_EVERY 2000u
#define READ_MS      3

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* LeakSanitizer off at exit as well as in libFuzzer's loop (-detect_leaks=0
 * covers only the loop): see the design notes. ASAN_OPTIONS still overrides. */
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static const char g_token[] = "fuzz-boot-token-0123456789abcdef"; /* 32 bytes */

static struct {
    int                notoken;
    remora_context_h   sctx, dctx; /* the server's, the decoy's */
    remora_server_h    server;
    remora_mem_h       mem;
    char               addr[64];
    struct sockaddr_in sin;
    uint8_t            expect[REGION_LEN];
    uint8_t           *hello; /* a valid HELLO frame (no-token mode prefix) */
    size_t             hello_len;
    unsigned long      inputs, checks;
} g;

static void die(const char *what, remora_status_t st)
{
    fprintf(stderr, "fuzz_boot: %s: %s\n", what, remora_status_string(st));
    abort();
}

/* ------------------------------------------------------------- health */

/* The health check's client context, new for every check. In no-token
 * mode the fuzzer's inputs reach UCX's address unpacking, and libFuzzer
 * learns the bytes UCX compares (its memcmp hook sees every caller): a
 * worker address the server saw in an earlier check can come back in an
 * input, and a server handed a live client's address by someone else pairs
 * that client's next endpoint with the stray one (docs/security.md §3.5):
 * the check's read then times out. A new worker is a new uuid. */
static remora_context_h client_context(void)
{
    remora_context_params_t xp = {.field_mask = 0, .bind_host = "127.0.0.1",
                                  .name = "fuzz-client"};
    remora_context_h ctx;
    remora_status_t st;

    if ((st = remora_context_create(&xp, &ctx)) != REMORA_OK)
        die("client context", st);
    return ctx;
}

static void health_check(const char *when)
{
    remora_client_params_t cp = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT, .timeout_ms = 5000};
    remora_client_h client;
    uint8_t buf[REGION_LEN];
    remora_status_t st;

    if (!g.notoken) {
        cp.field_mask |= REMORA_CLIENT_FIELD_TOKEN;
        cp.token     = g_token;
        cp.token_len = sizeof(g_token) - 1;
    }
    memset(buf, 0, sizeof(buf));
    /* A context of its own each time: see client_context. */
    remora_context_h cctx = client_context();
    if ((st = remora_client_connect(cctx, g.addr, &cp, &client)) != REMORA_OK) {
        fprintf(stderr, "fuzz_boot: health check (%s, after %lu inputs): connect: %s\n", when,
                g.inputs, remora_status_string(st));
        abort();
    }
    st = remora_client_read(client, REGION_NAME, 0, buf, sizeof(buf));
    remora_client_disconnect(client);
    remora_context_destroy(cctx);
    if (st != REMORA_OK || memcmp(buf, g.expect, sizeof(buf)) != 0) {
        fprintf(stderr, "fuzz_boot: health check (%s, after %lu inputs): read: %s%s\n", when,
                g.inputs, remora_status_string(st), st == REMORA_OK ? " (content differs)" : "");
        abort();
    }
    g.checks++;
}

static void health_at_exit(void)
{
    health_check("at exit");
    fprintf(stderr, "fuzz_boot: %s mode: %lu inputs, %lu health checks passed\n",
            g.notoken ? "no-token" : "token", g.inputs, g.checks);
}

/* ------------------------------------------------------------- frames */

static void frame(rm_wbuf_t *w, unsigned type, unsigned flags, const void *p, size_t len)
{
    rm_wbuf_t f;

    rm_wbuf_init(&f);
    rm_boot_encode(&f, type, flags, p, (uint32_t)len);
    if (f.failed)
        abort();
    rm_wbuf_bytes(w, f.data, f.len);
    rm_wbuf_free(&f);
}

static void hello_frame(rm_wbuf_t *w)
{
    rm_hello_t h = {.proto_min = RM_PROTO_VERSION, .proto_max = RM_PROTO_VERSION};
    rm_wbuf_t b;

    memset(h.nonce, 0x6e, sizeof(h.nonce));
    memset(h.host_id, 0x68, sizeof(h.host_id));
    rm_wbuf_init(&b);
    rm_hello_encode(&b, &h);
    if (b.failed)
        abort();
    frame(w, RM_BOOT_HELLO, 0, b.data, b.len);
    rm_wbuf_free(&b);
}

static void seed_put(const char *dir, const char *name, const void *p, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((f = fopen(path, "wb")) == NULL || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void seed_wbuf(const char *dir, const char *name, rm_wbuf_t *w)
{
    if (w->failed)
        abort();
    seed_put(dir, name, w->data, w->len);
    rm_wbuf_free(w);
    rm_wbuf_init(w);
}

/* The seed corpus of the current mode, into dir. */
static void write_seeds(const char *dir)
{
    const uint8_t *waddr = g.dctx->worker_addr;
    size_t wlen          = g.dctx->worker_addr_len;
    uint8_t proof[RM_MAC_LEN], junk[64];
    rm_wbuf_t w;

    memset(proof, 0xab, sizeof(proof));
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    rm_wbuf_init(&w);
    if (!g.notoken) {
        hello_frame(&w);
        seed_wbuf(dir, "hello", &w);
        hello_frame(&w);
        frame(&w, RM_BOOT_AUTH, 0, proof, sizeof(proof));
        frame(&w, RM_BOOT_CONNECT, 0, waddr, wlen);
        seed_wbuf(dir, "hello-auth-wrong-connect", &w);
        hello_frame(&w);
        frame(&w, RM_BOOT_AUTH, 0, proof, 16);
        seed_wbuf(dir, "hello-auth-short", &w);
        hello_frame(&w);
        frame(&w, RM_BOOT_CONNECT, RM_BOOT_CM, waddr, wlen);
        seed_wbuf(dir, "hello-connect-cm-no-auth", &w);
        frame(&w, RM_BOOT_HEARTBEAT, 0, NULL, 0);
        seed_wbuf(dir, "heartbeat", &w);
        hello_frame(&w);
        frame(&w, RM_BOOT_HEARTBEAT, 0, NULL, 0);
        seed_wbuf(dir, "hello-heartbeat", &w);
        seed_put(dir, "garbage", junk, sizeof(junk));
        seed_put(dir, "http", "GET / HTTP/1.0\r\n\r\n", 18);
        return;
    }
    /* No-token mode: byte 0 picks the form (see the design notes). */
    rm_wbuf_u8(&w, 0);
    rm_wbuf_bytes(&w, waddr, wlen);
    seed_wbuf(dir, "addr-live", &w);
    rm_wbuf_u8(&w, 0);
    rm_wbuf_bytes(&w, g.sctx->worker_addr, g.sctx->worker_addr_len);
    seed_wbuf(dir, "addr-server-own", &w);
    rm_wbuf_u8(&w, 0);
    rm_wbuf_bytes(&w, waddr, wlen < 24 ? wlen : 24);
    seed_wbuf(dir, "addr-truncated", &w);
    rm_wbuf_u8(&w, 1);
    frame(&w, RM_BOOT_CONNECT, 0, waddr, wlen);
    frame(&w, RM_BOOT_HEARTBEAT, 0, NULL, 0);
    seed_wbuf(dir, "frames-connect-heartbeat", &w);
    rm_wbuf_u8(&w, 1);
    frame(&w, RM_BOOT_CONNECT, RM_BOOT_CM, waddr, wlen);
    seed_wbuf(dir, "frames-connect-cm", &w);
    rm_wbuf_u8(&w, 1);
    rm_wbuf_bytes(&w, junk, sizeof(junk));
    seed_wbuf(dir, "frames-garbage", &w);
    rm_wbuf_free(&w);
}

/* ------------------------------------------------------------- setup */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    remora_context_params_t xp = {.field_mask = 0, .bind_host = "127.0.0.1"};
    remora_server_params_t sp  = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR,
                                  .listen_addr = "127.0.0.1:0"};
    remora_mem_params_t mp     = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = REGION_LEN};
    const char *nt = getenv("FUZZ_BOOT_NOTOKEN"), *seeds = getenv("FUZZ_BOOT_WRITE_SEEDS");
    remora_status_t st;
    char *colon;
    rm_wbuf_t w;

    g.notoken = nt != NULL && strcmp(nt, "") != 0 && strcmp(nt, "0") != 0;
    setenv("REMORA_LOG", "error", 0);
    /* Every input is a new connection: the server must not refuse the
     * health check for being busy with sockets not yet reaped. */
    if (!g.notoken) {
        sp.field_mask |= REMORA_SERVER_FIELD_TOKEN;
        sp.token     = g_token;
        sp.token_len = sizeof(g_token) - 1;
    }
    xp.name = "fuzz-server";
    if ((st = remora_context_create(&xp, &g.sctx)) != REMORA_OK)
        die("server context", st);
    xp.name = "fuzz-decoy";
    if ((st = remora_context_create(&xp, &g.dctx)) != REMORA_OK)
        die("decoy context", st);
    /* A live worker answers: the decoy's gate (src/engine/gate.h) lets this
     * host in, as a client's does for its server. Closed, it drops the
     * server's SYNs, and UCX's blocking connect() freezes the server's
     * worker for minutes (docs/security.md 3.5, not fixed). */
    static rm_gate_pass_t decoy_pass;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (rm_gate_open(rm_engine_gate(g.dctx), &decoy_pass, (struct sockaddr *)&lo, NULL, NULL, 0) !=
        REMORA_OK)
        die("decoy gate", REMORA_ERR_BUSY);
    if ((st = remora_mem_create(g.sctx, &mp, &g.mem)) != REMORA_OK)
        die("remora_mem_create", st);
    for (size_t i = 0; i < REGION_LEN; i++)
        g.expect[i] = (uint8_t)(i * 131 + (i >> 8) + 7);
    memcpy(remora_mem_address(g.mem), g.expect, REGION_LEN);
    if ((st = remora_server_create(g.sctx, &sp, &g.server)) != REMORA_OK)
        die("remora_server_create", st);
    if ((st = remora_server_expose(g.server, REGION_NAME, g.mem, NULL)) != REMORA_OK)
        die("remora_server_expose", st);
    if ((st = remora_server_address(g.server, g.addr, sizeof(g.addr))) != REMORA_OK)
        die("remora_server_address", st);
    colon = strrchr(g.addr, ':');
    g.sin.sin_family = AF_INET;
    g.sin.sin_port   = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &g.sin.sin_addr);

    rm_wbuf_init(&w);
    hello_frame(&w);
    g.hello     = w.data;
    g.hello_len = w.len;

    if (seeds != NULL && *seeds != '\0') {
        write_seeds(seeds);
        fprintf(stderr, "fuzz_boot: wrote %s-mode seeds to %s\n",
                g.notoken ? "no-token" : "token", seeds);
    }
    health_check("at start");
    atexit(health_at_exit);
    fprintf(stderr, "fuzz_boot: %s mode, server %s\n", g.notoken ? "no-token" : "token", g.addr);
    return 0;
}

/* ------------------------------------------------------------- one input */

static int elapsed_ms(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int)((t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000);
}

/* Write what the socket takes and read what comes back, for READ_MS at most
 * in all; stops early when the server closes the connection. */
static void exchange(int fd, const uint8_t *out, size_t len)
{
    struct timespec t0;
    uint8_t buf[4096];
    size_t sent = 0;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN | (sent < len ? POLLOUT : 0)};
        int left = READ_MS - elapsed_ms(&t0);

        if (left <= 0 || poll(&p, 1, left) <= 0)
            return;
        if (p.revents & POLLIN) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return; /* closed by the server (or reset) */
        } else if (p.revents & (POLLERR | POLLHUP)) {
            return;
        }
        if (sent < len && (p.revents & POLLOUT)) {
            ssize_t n = send(fd, out + sent, len - sent, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return;
            if (n > 0)
                sent += (size_t)n;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    int one = 1, fd;
    uint8_t *msg = NULL;
    const uint8_t *out = data;
    size_t len = size;

    if (g.notoken) {
        rm_wbuf_t w;
        rm_wbuf_init(&w);
        rm_wbuf_bytes(&w, g.hello, g.hello_len);
        if (size > 0 && (data[0] & 1) == 0)
            frame(&w, RM_BOOT_CONNECT, 0, data + 1, size - 1);
        else if (size > 0)
            rm_wbuf_bytes(&w, data + 1, size - 1);
        if (w.failed)
            abort();
        msg = w.data;
        out = msg;
        len = w.len;
    }
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
        perror("fuzz_boot: socket");
        abort();
    }
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&g.sin, sizeof(g.sin)) != 0 && errno != EINPROGRESS) {
        perror("fuzz_boot: connect");
        abort(); /* the listener is gone */
    }
    exchange(fd, out, len);
    close(fd);
    free(msg);
    if (++g.inputs % HEALTH_EVERY == 0)
        health_check("periodic");
    return 0;
}
