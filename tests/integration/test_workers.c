/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One region registry served by several workers (src/remote/registry.c),
 * in one process over TCP loopback (two contexts, real UCX):
 * - signal arrays made and destroyed while clients signal them through
 *   every worker: OK or NOT_FOUND, never a crash;
 * - the registry under concurrent change: threads expose, replace and
 *   unexpose regions while clients with an endpoint on every worker read
 *   them and look them up through each worker; generations seen never go
 *   backwards, whichever worker is asked; after an unexpose returns, no
 *   worker serves the region; every part of a split read is one region
 *   state's bytes, never garbage;
 * - chunk spreading: a lane (an endpoint to another worker) killed while
 *   requests spread over it are in flight fails those requests, promptly,
 *   and never hangs them; later requests go on without it;
 * - accepted connections spread over the workers; ring subscribers,
 *   signals and sockets served by each worker; connection limits that
 *   count every worker.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "harness.h"
#include "remote/client.h"
#include "remote/server.h"

#define WORKERS   4
#define REGION    (4u << 20)
#define READ_LEN  (2u << 20)      /* split into 4 parts of 512 KiB */
#define PART      (512u << 10)
#define MUTATORS  3
#define READERS   2
#define CYCLES    30

typedef struct {
    remora_context_h sctx;
    remora_server_h  server;
    char             addr[80];
    atomic_int       stop;
    atomic_uint      next_fill;  /* fill values handed out, each once (1..) */
    atomic_int       failures;
    atomic_uint      reads, busy; /* reads of s*, and those BUSY (see reader) */
} world_t;

static void failf(world_t *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    atomic_fetch_add(&w->failures, 1);
}

/* Fresh memory, every byte one value never used before (mod 255, never 0). */
static remora_mem_h fresh_mem(world_t *w)
{
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = REGION};
    remora_mem_h mem = NULL;

    if (remora_mem_create(w->sctx, &mp, &mem) != REMORA_OK)
        return NULL;
    memset(remora_mem_address(mem), (int)(atomic_fetch_add(&w->next_fill, 1) % 255 + 1), REGION);
    return mem;
}

static void start_world(world_t *w)
{
    remora_server_params_t sp = {.field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                                REMORA_SERVER_FIELD_LANES,
                                 .listen_addr = "127.0.0.1:0",
                                 .lanes       = WORKERS};

    memset(w, 0, sizeof(*w));
    atomic_init(&w->next_fill, 1);
    it_assert_ok(remora_context_create(NULL, &w->sctx));
    it_assert_ok(remora_server_create(w->sctx, &sp, &w->server));
    it_assert_ok(remora_server_address(w->server, w->addr, sizeof(w->addr)));
}

static remora_client_h connect_all_workers(world_t *w, remora_context_h *ctx)
{
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_LANES, .lanes = WORKERS};
    remora_client_h c = NULL;

    it_assert_ok(remora_context_create(NULL, ctx));
    it_assert_ok(remora_client_connect(*ctx, w->addr, &p, &c));
    assert_int_equal(remora_client_lanes(c), WORKERS);
    return c;
}

/* Every 512 KiB part of a read holds one value, not 0 (never memory that
 * was not a region's). */
static int parts_sane(const uint8_t *buf, size_t len)
{
    for (size_t p = 0; p < len; p += PART)
        for (size_t i = p; i < p + PART && i < len; i++)
            if (buf[i] == 0 || buf[i] != buf[p])
                return 0;
    return 1;
}

/* ------------------------------------------------------------ the registry under change */

typedef struct {
    world_t         *w;
    unsigned         no;
    remora_context_h ctx;
    remora_client_h  c;
} actor_t;

/* Mutator no: replaces "s<no>" (never removed) and cycles "e<no>" through
 * expose, replaces and unexpose; after each unexpose, a read of it must
 * fail through this client's endpoints on every worker. */
static void *mutator(void *arg)
{
    actor_t *a = arg;
    world_t *w = a->w;
    char stable[16], cyc[16];
    uint8_t *buf = malloc(READ_LEN);

    snprintf(stable, sizeof(stable), "s%u", a->no);
    snprintf(cyc, sizeof(cyc), "e%u", a->no);
    for (int i = 0; i < CYCLES && buf; i++) {
        remora_mem_h m = fresh_mem(w);
        remora_status_t st;

        if (m == NULL || remora_server_replace(w->server, stable, m, NULL) != REMORA_OK)
            failf(w, "replace %s failed", stable);
        remora_mem_destroy(m); /* the server holds its own reference */
        if ((m = fresh_mem(w)) == NULL ||
            remora_server_expose(w->server, cyc, m, NULL) != REMORA_OK)
            failf(w, "expose %s failed", cyc);
        remora_mem_destroy(m);
        /* Cache it here, so that the read after unexpose has a stale entry. */
        if ((st = remora_client_read(a->c, cyc, 0, buf, READ_LEN)) != REMORA_OK)
            failf(w, "read of %s just exposed: %s", cyc, remora_status_string(st));
        for (int r = 0; r < 2; r++) {
            if ((m = fresh_mem(w)) == NULL ||
                remora_server_replace(w->server, cyc, m, NULL) != REMORA_OK)
                failf(w, "replace %s failed", cyc);
            remora_mem_destroy(m);
        }
        if (remora_server_unexpose(w->server, cyc) != REMORA_OK)
            failf(w, "unexpose %s failed", cyc);
        /* Nothing is served after unexpose: not by a cached id, on no worker. */
        for (int k = 0; k < WORKERS; k++) {
            st = remora_client_read(a->c, cyc, 0, buf, READ_LEN);
            if (st == REMORA_OK)
                failf(w, "%s served after its unexpose", cyc);
            if (k > 0 && remora_client_read(a->c->lane[k - 1], cyc, 0, buf, 4096) == REMORA_OK)
                failf(w, "%s served by worker %d after its unexpose", cyc, k);
        }
    }
    free(buf);
    return NULL;
}

/* Reader: split reads of every region (parts on every worker), and lookups
 * through each worker; a stable region's generation never goes backwards. */
static void *reader(void *arg)
{
    actor_t *a = arg;
    world_t *w = a->w;
    uint64_t last_gen[MUTATORS] = {0};
    uint8_t *buf = malloc(READ_LEN);
    unsigned round = 0;

    while (buf && !atomic_load(&w->stop)) {
        for (unsigned m = 0; m < MUTATORS; m++) {
            char name[16];
            remora_status_t st;
            remora_region_info_t info = {0};
            /* through each worker in turn: the main connection, then each lane */
            unsigned k = round++ % WORKERS;
            remora_client_h via = k ? a->c->lane[k - 1] : a->c;

            snprintf(name, sizeof(name), "s%u", m);
            if ((st = remora_client_lookup(via, name, &info)) != REMORA_OK)
                failf(w, "lookup %s via worker %u: %s", name, k, remora_status_string(st));
            else if (info.generation < last_gen[m])
                failf(w, "%s went from generation %llu back to %llu (worker %u)", name,
                      (unsigned long long)last_gen[m], (unsigned long long)info.generation, k);
            else
                last_gen[m] = info.generation;
            atomic_fetch_add(&w->reads, 1);
            st = remora_client_read(a->c, name, 0, buf, READ_LEN);
            /* BUSY: the region changed under eight lookups in a row
             * (client_regions.c), as the contract allows; counted below. */
            if (st == REMORA_ERR_BUSY)
                atomic_fetch_add(&w->busy, 1);
            else if (st != REMORA_OK)
                failf(w, "read %s: %s", name, remora_status_string(st));
            else if (!parts_sane(buf, READ_LEN))
                failf(w, "read %s: a part mixes bytes or holds none of a region's", name);
            snprintf(name, sizeof(name), "e%u", m);
            st = remora_client_read(a->c, name, 0, buf, READ_LEN);
            if (st == REMORA_OK && !parts_sane(buf, READ_LEN))
                failf(w, "read %s: a part mixes bytes or holds none of a region's", name);
            else if (st != REMORA_OK && st != REMORA_ERR_NOT_FOUND && st != REMORA_ERR_BUSY)
                failf(w, "read %s: %s", name, remora_status_string(st));
        }
    }
    free(buf);
    return NULL;
}

static void test_registry_under_change(void **state)
{
    world_t w;
    actor_t mut[MUTATORS], rd[READERS];
    pthread_t mt[MUTATORS], rt[READERS];
    (void)state;

    start_world(&w);
    for (unsigned i = 0; i < MUTATORS; i++) {
        char name[16];
        remora_mem_h m = fresh_mem(&w);
        snprintf(name, sizeof(name), "s%u", i);
        assert_non_null(m);
        it_assert_ok(remora_server_expose(w.server, name, m, NULL));
        remora_mem_destroy(m);
    }
    for (unsigned i = 0; i < READERS; i++) {
        rd[i] = (actor_t){.w = &w, .no = i};
        rd[i].c = connect_all_workers(&w, &rd[i].ctx);
    }
    for (unsigned i = 0; i < MUTATORS; i++) {
        mut[i] = (actor_t){.w = &w, .no = i};
        mut[i].c = connect_all_workers(&w, &mut[i].ctx);
    }
    for (unsigned i = 0; i < READERS; i++)
        assert_int_equal(pthread_create(&rt[i], NULL, reader, &rd[i]), 0);
    for (unsigned i = 0; i < MUTATORS; i++)
        assert_int_equal(pthread_create(&mt[i], NULL, mutator, &mut[i]), 0);
    for (unsigned i = 0; i < MUTATORS; i++)
        pthread_join(mt[i], NULL);
    atomic_store(&w.stop, 1);
    for (unsigned i = 0; i < READERS; i++)
        pthread_join(rt[i], NULL);

    /* Settled: every worker says the same generation for each region. */
    for (unsigned m = 0; m < MUTATORS; m++) {
        char name[16];
        remora_region_info_t info = {0};
        snprintf(name, sizeof(name), "s%u", m);
        for (unsigned k = 0; k < WORKERS; k++) {
            remora_client_h via = k ? rd[0].c->lane[k - 1] : rd[0].c;
            it_assert_ok(remora_client_lookup(via, name, &info));
            assert_int_equal(info.generation, 1 + CYCLES);
        }
    }
    for (unsigned i = 0; i < MUTATORS; i++) {
        remora_client_disconnect(mut[i].c);
        remora_context_destroy(mut[i].ctx);
    }
    for (unsigned i = 0; i < READERS; i++) {
        remora_client_disconnect(rd[i].c);
        remora_context_destroy(rd[i].ctx);
    }
    remora_server_destroy(w.server);
    remora_context_destroy(w.sctx);
    printf("# %u reads of regions being replaced, %u BUSY\n", atomic_load(&w.reads),
           atomic_load(&w.busy));
    assert_int_equal(atomic_load(&w.failures), 0);
    assert_true(atomic_load(&w.busy) * 20 <= atomic_load(&w.reads)); /* at most 5 % */
}

/* ------------------------------------------------------------ signal arrays under change */

#define SIG_CYCLES 150

/* Signaler: ADD 1 to word 0 of "g" through each worker in turn, while the
 * test thread makes and destroys that array: OK or NOT_FOUND, nothing else
 * (a worker once read the array of a region leaving the table). */
static void *signaler(void *arg)
{
    actor_t *a = arg;
    unsigned round = 0;

    while (!atomic_load(&a->w->stop)) {
        unsigned k = round++ % WORKERS;
        remora_client_h via = k ? a->c->lane[k - 1] : a->c;
        remora_status_t st = remora_client_signal(via, "g", 0, REMORA_SIGNAL_ADD, 1);
        if (st != REMORA_OK && st != REMORA_ERR_NOT_FOUND)
            failf(a->w, "signal via worker %u: %s", k, remora_status_string(st));
    }
    return NULL;
}

static void test_signals_under_change(void **state)
{
    world_t w;
    actor_t sg[READERS];
    pthread_t st[READERS];
    (void)state;

    start_world(&w);
    for (unsigned i = 0; i < READERS; i++) {
        sg[i] = (actor_t){.w = &w, .no = i};
        sg[i].c = connect_all_workers(&w, &sg[i].ctx);
        assert_int_equal(pthread_create(&st[i], NULL, signaler, &sg[i]), 0);
    }
    for (int i = 0; i < SIG_CYCLES; i++) {
        remora_signals_h sig = NULL;
        it_assert_ok(remora_signals_create(w.sctx, 8, NULL, &sig));
        it_assert_ok(remora_server_expose_signals(w.server, "g", sig));
        usleep(500 + (unsigned)(i % 7) * 300);
        remora_signals_destroy(sig); /* unexposes it first */
    }
    atomic_store(&w.stop, 1);
    for (unsigned i = 0; i < READERS; i++) {
        pthread_join(st[i], NULL);
        remora_client_disconnect(sg[i].c);
        remora_context_destroy(sg[i].ctx);
    }
    remora_server_destroy(w.server);
    remora_context_destroy(w.sctx);
    assert_int_equal(atomic_load(&w.failures), 0);
}

/* ------------------------------------------------------------ a lane killed mid-request */

#define INFLIGHT 16
#define BIG      (8u << 20)

/*
 * UCX 1.13.1's TCP transport sometimes crashes in its progress while the
 * killed lane's endpoints close with requests in flight: an event on an
 * endpoint being torn down reaches an asserting stub (stubs.c:96, SIGABRT)
 * or an endpoint already gone (SIGSEGV under uct_tcp_iface_progress: in
 * libuct, in a libucs helper it calls, or a call through a NULL handler).
 * It was the server's forced close under replies in flight: 1 run in 3 to
 * 8 of this case alone on the 2-core VM, never on UCX 1.16. Since the
 * server's close lingers (rm_peer_close_linger) it was not seen in 140
 * runs; the waiver stays for the client's own forced close. That
 * crash, in this case, on that UCX only, is reported as WAIVED (as
 * it_liveness does for UCX 1.13's wire-up abort): an abort, or a SIGSEGV
 * faulting in UCX (fault_in_ucx). Any other failure fails, a sanitizer's
 * report included. This case runs last, since the waiver ends the process.
 */
static volatile sig_atomic_t g_waive_abort;

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
/* A sanitizer's report ends in abort() too: never waived. */
static void sanitizer_died(void) { g_waive_abort = 0; }
#endif

static void waived_exit(const char *what)
{
    static const char head[] = "# WAIVED: UCX 1.13 crashed in its TCP progress while the "
                               "killed lane's endpoints closed (a UCX 1.13 fault): ";
    ssize_t n = write(STDOUT_FILENO, head, sizeof(head) - 1);
    n = write(STDOUT_FILENO, what, strlen(what));
    (void)n;
    _exit(0);
}

static void waive_abort(int sig)
{
    if (g_waive_abort)
        waived_exit("SIGABRT\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The library holding addr, or NULL. */
static const char *lib_of(void *addr)
{
    Dl_info info;
    return dladdr(addr, &info) != 0 ? info.dli_fname : NULL;
}

/* The faulting instruction is in a UCX library (libucs, libuct, libucp),
 * or UCX called through a dead function pointer: the instruction is in no
 * library, and the return address on top of the stack is in UCX. */
static int fault_in_ucx(void *uctx)
{
#if defined(__x86_64__)
    const ucontext_t *uc = uctx;
    const char *lib = lib_of((void *)uc->uc_mcontext.gregs[REG_RIP]);
    if (lib == NULL)
        lib = lib_of(*(void **)uc->uc_mcontext.gregs[REG_RSP]);
    return lib != NULL && strstr(lib, "/libuc") != NULL;
#else
    (void)uctx;
    return 0;
#endif
}

static void waive_segv(int sig, siginfo_t *si, void *uctx)
{
    (void)si;
    if (g_waive_abort && fault_in_ucx(uctx))
        waived_exit("SIGSEGV in UCX\n");
    /* Not ours to waive: returning re-runs the fault under the default action. */
    signal(sig, SIG_DFL);
}

static void test_killed_lane_fails_requests(void **state)
{
    unsigned major, minor, release;

    struct sigaction segv = {.sa_sigaction = waive_segv, .sa_flags = SA_SIGINFO}, old_segv;

    ucp_get_version(&major, &minor, &release);
    if (major == 1 && minor == 13) {
        g_waive_abort = 1;
        signal(SIGABRT, waive_abort);
        sigaction(SIGSEGV, &segv, &old_segv); /* cmocka's would exit(-1) unexplained */
#if defined(__SANITIZE_ADDRESS__)
        __sanitizer_set_death_callback(sanitizer_died);
#endif
    }
    world_t w;
    remora_context_h cctx;
    remora_client_h c;
    remora_request_h req[INFLIGHT];
    uint8_t *bufs = malloc((size_t)INFLIGHT * BIG);
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = BIG};
    remora_mem_h mem;
    unsigned failed = 0;
    (void)state;

    assert_non_null(bufs);
    start_world(&w);
    it_assert_ok(remora_mem_create(w.sctx, &mp, &mem));
    memset(remora_mem_address(mem), 7, BIG);
    it_assert_ok(remora_server_expose(w.server, "big", mem, NULL));
    c = connect_all_workers(&w, &cctx);
    it_assert_ok(remora_client_read(c, "big", 0, bufs, BIG)); /* cached */

    for (int i = 0; i < INFLIGHT; i++)
        it_assert_ok(remora_client_read_nb(c, "big", 0, bufs + (size_t)i * BIG, BIG, &req[i]));
    /* The endpoint to worker 2 dies under them: its bootstrap socket (the
     * connection's life line) is cut, so both sides tear it down. */
    shutdown(c->lane[0]->peer.sock.fd, SHUT_RDWR);
    double t0 = it_now_ms();
    for (int i = 0; i < INFLIGHT; i++) {
        remora_status_t st = remora_request_wait(req[i], 10000);
        assert_int_not_equal(st, REMORA_ERR_TIMED_OUT); /* never hangs */
        if (st != REMORA_OK)
            failed++;
        else
            for (size_t j = 0; j < BIG; j += 4096)
                assert_int_equal(bufs[(size_t)i * BIG + j], 7);
        remora_request_release(req[i]);
    }
    printf("# %u of %d requests failed with the lane, all done in %.0f ms\n", failed, INFLIGHT,
           it_now_ms() - t0);
    /* Later requests go on over the other endpoints. */
    for (int i = 0; i < 8; i++) {
        memset(bufs, 0, BIG);
        it_assert_ok(remora_client_read(c, "big", 0, bufs, BIG));
        assert_true(parts_sane(bufs, BIG));
    }
    remora_client_disconnect(c);
    remora_context_destroy(cctx);
    remora_server_destroy(w.server);
    remora_mem_destroy(mem);
    remora_context_destroy(w.sctx);
    free(bufs);
    if (g_waive_abort) {
        g_waive_abort = 0;
        signal(SIGABRT, SIG_DFL);
        sigaction(SIGSEGV, &old_segv, NULL);
    }
}

/* ------------------------------------------------------------ connections spread */

#define SPREAD_CLIENTS 8
#define SPREAD_ELEMS   3000

typedef struct {
    remora_ring_h ring;
    atomic_int    stop;
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    uint64_t v = 0;

    while (!atomic_load(&p->stop)) {
        remora_ring_push(p->ring, &v, sizeof(v), NULL);
        v++;
        if (v % 64 == 0)
            usleep(100); /* paced: "every" subscribers keep up */
    }
    return NULL;
}

/*
 * Clients that ask for nothing land on every worker (fewest connections
 * first), as the conn stats' lanes show; a subscriber on each worker gets
 * every element of a ring in order, its waits answered by its own worker;
 * the ring's removal reaches each of them; the connection limits count
 * every worker's connections.
 */
static void test_connections_spread(void **state)
{
    world_t w;
    remora_context_h ctx[SPREAD_CLIENTS];
    remora_client_h c[SPREAD_CLIENTS];
    remora_sub_h sub[SPREAD_CLIENTS];
    remora_conn_stats_t cs[SPREAD_CLIENTS + 4];
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY,
                               .elem_size  = sizeof(uint64_t),
                               .capacity   = 4096};
    producer_t prod = {0};
    pthread_t th;
    unsigned per_worker[WORKERS + 1] = {0};
    size_t n = 0;
    (void)state;

    start_world(&w);
    it_assert_ok(remora_ring_create(w.sctx, &rp, &prod.ring));
    it_assert_ok(remora_server_expose_ring(w.server, "r", prod.ring));
    for (int i = 0; i < SPREAD_CLIENTS; i++) {
        it_assert_ok(remora_context_create(NULL, &ctx[i]));
        it_assert_ok(remora_client_connect(ctx[i], w.addr, NULL, &c[i]));
        it_assert_ok(remora_client_subscribe(c[i], "r", NULL, &sub[i]));
    }
    for (size_t i = 0; i < SPREAD_CLIENTS + 4; i++)
        cs[i].field_mask = REMORA_CONN_STATS_FIELD_LANE;
    it_assert_ok(remora_server_conn_stats(w.server, cs, SPREAD_CLIENTS + 4, &n));
    assert_int_equal(n, SPREAD_CLIENTS);
    for (size_t i = 0; i < n; i++) {
        assert_true(cs[i].lane < WORKERS);
        per_worker[cs[i].lane]++;
    }
    for (int k = 0; k < WORKERS; k++) {
        printf("# worker %d: %u connections\n", k + 1, per_worker[k]);
        assert_int_equal(per_worker[k], SPREAD_CLIENTS / WORKERS);
    }

    assert_int_equal(pthread_create(&th, NULL, produce, &prod), 0);
    for (int i = 0; i < SPREAD_CLIENTS; i++) {
        uint64_t prev_seq = 0, prev_drops = 0;
        for (int e = 0; e < SPREAD_ELEMS; e++) {
            uint64_t v;
            remora_elem_info_t info = {.field_mask = REMORA_ELEM_INFO_FIELD_SEQ |
                                                     REMORA_ELEM_INFO_FIELD_DROPS};
            it_assert_ok(remora_sub_next(sub[i], &v, sizeof(v), &info, 5000));
            assert_int_equal(v, info.seq);
            if (e > 0) /* in order; what was skipped is counted, exactly */
                assert_int_equal(info.seq, prev_seq + 1 + (info.drops - prev_drops));
            prev_seq   = info.seq;
            prev_drops = info.drops;
        }
    }
    atomic_store(&prod.stop, 1);
    pthread_join(th, NULL);

    /* Signals and sockets through every worker. */
    remora_signals_h sig;
    remora_sock_listener_h l;
    remora_sock_h cli[SPREAD_CLIENTS], srv[SPREAD_CLIENTS];
    uint64_t total = 0;

    it_assert_ok(remora_signals_create(w.sctx, 1, NULL, &sig));
    it_assert_ok(remora_server_expose_signals(w.server, "sig", sig));
    it_assert_ok(remora_sock_listen(w.server, "echo", &l));
    for (int i = 0; i < SPREAD_CLIENTS; i++) {
        it_assert_ok(remora_client_signal(c[i], "sig", 0, REMORA_SIGNAL_ADD, 1));
        it_assert_ok(remora_sock_connect(c[i], "echo", 5000, &cli[i]));
        assert_int_equal(remora_sock_send(cli[i], &i, sizeof(i), 5000), sizeof(i));
    }
    it_assert_ok(remora_signals_wait(sig, 0, REMORA_CMP_GEQ, SPREAD_CLIENTS, 5000, &total));
    assert_int_equal(total, SPREAD_CLIENTS);
    for (int i = 0; i < SPREAD_CLIENTS; i++) { /* each socket answers its own client */
        int v = -1;
        it_assert_ok(remora_sock_accept(l, 5000, &srv[i]));
        assert_int_equal(remora_sock_recv(srv[i], &v, sizeof(v), 5000), sizeof(v));
        assert_int_equal(remora_sock_send(srv[i], &v, sizeof(v), 5000), sizeof(v));
    }
    for (int i = 0; i < SPREAD_CLIENTS; i++) {
        int v = -1;
        assert_int_equal(remora_sock_recv(cli[i], &v, sizeof(v), 5000), sizeof(v));
        assert_int_equal(v, i);
        remora_sock_close(cli[i]);
        remora_sock_close(srv[i]);
    }
    remora_sock_listener_destroy(l);

    /* The ring goes: every subscriber hears it, whichever worker serves it. */
    it_assert_ok(remora_server_unexpose(w.server, "r"));
    for (int i = 0; i < SPREAD_CLIENTS; i++) {
        uint64_t v;
        remora_status_t st;
        double t0 = it_now_ms();
        while ((st = remora_sub_next(sub[i], &v, sizeof(v), NULL, 3000)) == REMORA_OK)
            ;
        assert_int_equal(st, REMORA_ERR_NOT_FOUND);
        assert_true(it_now_ms() - t0 < 3000);
        remora_sub_destroy(sub[i]);
        remora_client_disconnect(c[i]);
        remora_context_destroy(ctx[i]);
    }
    remora_server_destroy(w.server);
    remora_signals_destroy(sig);
    remora_ring_destroy(prod.ring);
    remora_context_destroy(w.sctx);
}

/* max_conns_per_host counts the connections of every worker. */
static void test_limits_span_workers(void **state)
{
    remora_context_h sctx, ctx[WORKERS];
    remora_server_h server;
    remora_client_h c[WORKERS];
    char addr[80];
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                               REMORA_SERVER_FIELD_LANES |
                                               REMORA_SERVER_FIELD_MAX_CONNS,
                                 .listen_addr        = "127.0.0.1:0",
                                 .lanes              = WORKERS,
                                 .max_conns          = 64,
                                 .max_conns_per_host = WORKERS - 1};
    (void)state;

    it_assert_ok(remora_context_create(NULL, &sctx));
    it_assert_ok(remora_server_create(sctx, &sp, &server));
    it_assert_ok(remora_server_address(server, addr, sizeof(addr)));
    for (int i = 0; i < WORKERS; i++) {
        it_assert_ok(remora_context_create(NULL, &ctx[i]));
        remora_status_t st = remora_client_connect(ctx[i], addr, NULL, &c[i]);
        assert_int_equal(st, i < WORKERS - 1 ? REMORA_OK : REMORA_ERR_BUSY);
    }
    for (int i = 0; i < WORKERS; i++) {
        if (i < WORKERS - 1)
            remora_client_disconnect(c[i]);
        remora_context_destroy(ctx[i]);
    }
    remora_server_destroy(server);
    remora_context_destroy(sctx);
}

/* ... and so do connections made to the workers' own ports (handed out in
 * LANES replies, reachable by anyone): spreading its connections over them
 * gets a host no more than the cap. Freed connections count no more. */
static void test_limits_span_worker_ports(void **state)
{
    enum { CAP = 2 };
    remora_context_h sctx, ctx[WORKERS];
    remora_server_h server;
    remora_client_h c[WORKERS];
    char port[WORKERS][80];
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                               REMORA_SERVER_FIELD_LANES |
                                               REMORA_SERVER_FIELD_MAX_CONNS,
                                 .listen_addr = "127.0.0.1:0", .lanes = WORKERS,
                                 .max_conns = 64, .max_conns_per_host = CAP};
    (void)state;

    it_assert_ok(remora_context_create(NULL, &sctx));
    it_assert_ok(remora_server_create(sctx, &sp, &server));
    assert_int_equal(server->nlanes, WORKERS - 1);
    for (unsigned i = 0; i < WORKERS - 1; i++)
        snprintf(port[i], sizeof(port[i]), "127.0.0.1:%u", server->lane_port[i]);
    snprintf(port[WORKERS - 1], sizeof(port[0]), "127.0.0.1:%u", server->direct_port);
    for (int i = 0; i < WORKERS; i++) {
        it_assert_ok(remora_context_create(NULL, &ctx[i]));
        remora_status_t st = remora_client_connect(ctx[i], port[i], NULL, &c[i]);
        print_message("worker port %d: %s\n", i, remora_status_string(st));
        assert_int_equal(st, i < CAP ? REMORA_OK : REMORA_ERR_BUSY);
    }
    for (int i = 0; i < WORKERS; i++) {
        if (i < CAP)
            remora_client_disconnect(c[i]);
        remora_context_destroy(ctx[i]);
    }
    /* Once the server has freed them (it lingers a little after a close),
     * the ports take CAP connections again. */
    int n = 0;
    for (double t0 = it_now_ms(); n < CAP && it_now_ms() - t0 < 10000;) {
        it_assert_ok(remora_context_create(NULL, &ctx[n]));
        if (remora_client_connect(ctx[n], port[WORKERS - 1 - n], NULL, &c[n]) == REMORA_OK) {
            n++;
            continue;
        }
        remora_context_destroy(ctx[n]);
        it_sleep_ms(50);
    }
    assert_int_equal(n, CAP);
    for (int i = 0; i < n; i++) {
        remora_client_disconnect(c[i]);
        remora_context_destroy(ctx[i]);
    }
    remora_server_destroy(server);
    remora_context_destroy(sctx);
}

/*
 * STATS asked on every worker's connections at once, while connections to
 * the first worker come and go: a worker answers STATS from the first
 * worker's thread, and queued that work on the first worker's list holding
 * only its own lock (the list was corrupted: a crash, or answers lost).
 */
#define STATS_CLIENTS 8
static atomic_int g_stats_stop, g_stats_fails, g_stats_oks;

static void *stats_client(void *arg)
{
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_TIMEOUT, .timeout_ms = 3000};
    it_client_t c;

    if (it_client_open(&c, arg, &p) != REMORA_OK) {
        atomic_fetch_add(&g_stats_fails, 1);
        return NULL;
    }
    while (!atomic_load(&g_stats_stop)) {
        remora_server_stats_t st = {.field_mask = ~0ull};
        size_t n;
        if (remora_client_server_stats(c.client, &st, NULL, 0, &n) != REMORA_OK) {
            atomic_fetch_add(&g_stats_fails, 1);
            break;
        }
        atomic_fetch_add(&g_stats_oks, 1);
    }
    it_client_close(&c);
    return NULL;
}

static void *stats_churn(void *arg)
{
    while (!atomic_load(&g_stats_stop)) {
        it_client_t c;
        if (it_client_open(&c, arg, NULL) == REMORA_OK)
            it_client_close(&c);
    }
    return NULL;
}

static void on_conn_event(const remora_conn_event_t *ev, void *arg) { (void)ev; (void)arg; }

static void test_stats_through_every_worker(void **state)
{
    remora_context_h sctx;
    remora_server_h server;
    char addr[80];
    pthread_t t[STATS_CLIENTS + 1];
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR |
                                               REMORA_SERVER_FIELD_LANES |
                                               REMORA_SERVER_FIELD_CONN_CB,
                                 .listen_addr = "127.0.0.1:0", .lanes = WORKERS,
                                 .conn_cb = on_conn_event};
    (void)state;

    it_assert_ok(remora_context_create(NULL, &sctx));
    it_assert_ok(remora_server_create(sctx, &sp, &server));
    it_assert_ok(remora_server_address(server, addr, sizeof(addr)));
    for (int i = 0; i < STATS_CLIENTS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, stats_client, addr), 0);
    assert_int_equal(pthread_create(&t[STATS_CLIENTS], NULL, stats_churn, addr), 0);
    it_sleep_ms(4000);
    atomic_store(&g_stats_stop, 1);
    for (int i = 0; i <= STATS_CLIENTS; i++)
        pthread_join(t[i], NULL);
    print_message("STATS answered %d, failed %d\n", atomic_load(&g_stats_oks),
                  atomic_load(&g_stats_fails));
    assert_int_equal(atomic_load(&g_stats_fails), 0);
    assert_true(atomic_load(&g_stats_oks) > 0);
    remora_server_destroy(server);
    remora_context_destroy(sctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_under_change),
        cmocka_unit_test(test_signals_under_change),
        cmocka_unit_test(test_connections_spread),
        cmocka_unit_test(test_limits_span_workers),
        cmocka_unit_test(test_limits_span_worker_ports),
        cmocka_unit_test(test_stats_through_every_worker),
        cmocka_unit_test(test_killed_lane_fails_requests), /* last: see waive_abort */
    };

    setenv("UCX_TLS", "tcp", 0); /* the path lanes split: active messages */
    it_init("workers");
    return it_finish(it_run_tests("workers", tests, sizeof(tests) / sizeof(tests[0]), argc, argv));
}
