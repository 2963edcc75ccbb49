/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora stream: a ring producer (serve), a consumer that measures and
 * verifies (read), and a ring snapshot to a file (clone).
 *
 * Design notes
 * - serve: one producer thread per ring fills slots in place (reserve/commit,
 *   zero-copy) with stamped frames (cli_util.h), paced by --rate with an
 *   absolute clock so the average rate holds whatever the sleep granularity.
 *   Signals are taken synchronously by the main thread, as in `remora serve`.
 * - read: end-to-end latency is now (CLOCK_REALTIME) minus the frame's
 *   timestamp, so it includes the producer-to-consumer path and nothing else;
 *   it is only meaningful when both ends share a clock (same host, or PTP).
 *   Latencies go into a log-linear histogram (1% buckets): constant memory at
 *   any rate.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_stats.h"

#define CLI_STREAM_DEFAULT_LISTEN "127.0.0.1:60010"
#define CLI_STREAM_MAX_RINGS      8
#define CLI_STREAM_DEFAULT_RING   "stream=1Mx64"
/* The largest element the library carries inside a notification by default
 * (REMORA_RING_INLINE). */
#define CLI_STREAM_SMALL_ELEM     32768u
#define CLI_HIST_BUCKETS          2800 /* 1.01^2800 ns > 1e12 ns */
#define CLI_PROGRESS_S            0.5

enum {
    CLI_OPT_LISTEN = CLI_OPT_CMD,
    CLI_OPT_RING,
    CLI_OPT_RATE,
    CLI_OPT_SOURCE,
    CLI_OPT_MODE,
    CLI_OPT_COUNT,
    CLI_OPT_SECONDS,
    CLI_OPT_WARMUP,
    CLI_OPT_VERIFY,
    CLI_OPT_JSON,
    CLI_OPT_PROGRESS,
    CLI_OPT_GPU,
    CLI_OPT_NO_RECONNECT,
    CLI_OPT_RECONNECT_FOR,
    CLI_OPT_WORKERS,
};

static uint64_t cli_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ================================================================ serve */

/* What a commit costs the producer (remora_ring_commit/push, the part that
 * answers subscribers), in 50 ns buckets up to 200 us: printed at shutdown. */
#define CLI_PUSH_BUCKET_NS 50
#define CLI_PUSH_BUCKETS   4000

typedef struct cli_ring_spec {
    char          name[REMORA_NAME_MAX + 1];
    uint64_t      elem_size, count;
    remora_ring_h ring;
    pthread_t     thread;
    bool          running;
    uint64_t      push_n, push_max_ns;
    uint32_t      push_hist[CLI_PUSH_BUCKETS + 1];
} cli_ring_spec_t;

static double cli_push_quantile(const cli_ring_spec_t *r, double q)
{
    uint64_t want = (uint64_t)ceil(q * (double)r->push_n), seen = 0;

    for (int b = 0; b <= CLI_PUSH_BUCKETS; b++) {
        seen += r->push_hist[b];
        if (seen >= want && seen > 0)
            return (b + 1) * CLI_PUSH_BUCKET_NS / 1e3;
    }
    return 0;
}

typedef struct cli_stream_serve_opts {
    const char      *listen;
    cli_token_t      token;
    bool             encrypt;
    double           rate;      /* elements per second per ring; 0: max */
    const char      *source;    /* NULL: pattern; else a ring image file */
    bool             fixed;     /* --source fixed: payloads written once per slot */
    int              gpu;       /* rings' elements in memory of this GPU; -1: host */
    size_t           nrings;
    cli_ring_spec_t  rings[CLI_STREAM_MAX_RINGS];
    /* From the source file: its elements' payloads, back to back. */
    uint8_t         *src;
    size_t           src_count, src_elem;
    atomic_int       stop;
    atomic_int       failed;    /* a producer gave up: serve exits non-zero */
    bool             json;      /* --json: the ready line as a JSON object */
    unsigned         workers;   /* --workers; 0: cli_stream_workers */
} cli_stream_serve_opts_t;

/* NAME=ELEMSIZExCOUNT, e.g. "frames=1Mx64". */
static int cli_parse_ring(const char *s, cli_ring_spec_t *r)
{
    const char *eq = strchr(s, '='), *x;
    char num[32];

    if (eq == NULL || eq == s || (size_t)(eq - s) > REMORA_NAME_MAX)
        return -1;
    memcpy(r->name, s, (size_t)(eq - s));
    r->name[eq - s] = '\0';
    x = strchr(eq + 1, 'x');
    if (x == NULL || (size_t)(x - eq - 1) >= sizeof(num))
        return -1;
    memcpy(num, eq + 1, (size_t)(x - eq - 1));
    num[x - eq - 1] = '\0';
    if (remora_parse_size(num, &r->elem_size) != 0 || remora_parse_size(x + 1, &r->count) != 0)
        return -1;
    return r->elem_size >= REMORA_FRAME_MIN && r->count >= 1 ? 0 : -1;
}

static int cli_stream_serve_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_stream_serve_opts_t *o = opts;

    switch (opt) {
    case CLI_OPT_LISTEN:
        o->listen = arg;
        return CLI_CONTINUE;
    case CLI_OPT_RING:
        if (o->nrings == CLI_STREAM_MAX_RINGS)
            return cli_usage_error(cmd, "at most %d rings", CLI_STREAM_MAX_RINGS);
        if (cli_parse_ring(arg, &o->rings[o->nrings]) != 0)
            return cli_usage_error(cmd, "bad --ring '%s' (want NAME=ELEMSIZExCOUNT, "
                                        "ELEMSIZE >= %u)", arg, REMORA_FRAME_MIN);
        o->nrings++;
        return CLI_CONTINUE;
    case CLI_OPT_RATE: {
        char *end;
        if (strcmp(arg, "max") == 0) {
            o->rate = 0;
            return CLI_CONTINUE;
        }
        errno = 0;
        o->rate = strtod(arg, &end);
        if (errno || *end || !(o->rate >= 1e-3) || o->rate > 1e9)
            return cli_usage_error(cmd, "bad --rate '%s' (want HZ from 0.001 to 1e9, or max)",
                                   arg);
        return CLI_CONTINUE;
    }
    case CLI_OPT_SOURCE:
        o->fixed  = strcmp(arg, "fixed") == 0;
        o->source = strcmp(arg, "pattern") == 0 || o->fixed ? NULL : arg;
        return CLI_CONTINUE;
    case CLI_OPT_TOKEN_FILE:
        return cli_load_token(cmd, arg, &o->token);
    case CLI_OPT_ENCRYPT:
        o->encrypt = true;
        return CLI_CONTINUE;
    case CLI_OPT_GPU:
        return cli_opt_gpu(cmd, arg, &o->gpu);
    case CLI_OPT_JSON:
        o->json = true;
        return CLI_CONTINUE;
    case CLI_OPT_WORKERS:
        return cli_opt_lanes(cmd, "--workers", arg, &o->workers);
    default:
        return CLI_EXIT_USAGE;
    }
}

/*
 * Workers when neither --workers nor REMORA_WORKERS says (0: the library's
 * choice, one per 2 cores up to 8). Rings of small elements only (carried
 * inside notifications) get one per 4 cores: each commit wakes every worker
 * holding a subscriber's wait, and with many subscribers those wake-ups are
 * what the subscribers' latency waits for. On 16 cores, 64 subscribers of
 * 64 B at 10 kHz: p99 326-375 us with 4 workers in four rounds of five
 * (1,383 in the fifth), 776-1,122 us with 8 in four of four; 16 subscribers
 * lose by it (423-516 us against 219-235). Large elements are bytes to move,
 * which more workers share (16 subscribers of 1 MiB: 29 GB/s with 8, 19
 * with 4; docs/performance.md, session 29).
 */
static unsigned cli_stream_workers(const cli_stream_serve_opts_t *o)
{
    long quarter = sysconf(_SC_NPROCESSORS_ONLN) / 4;

    if (o->workers || getenv("REMORA_WORKERS"))
        return o->workers;
    for (size_t i = 0; i < o->nrings; i++)
        if (o->rings[i].elem_size > CLI_STREAM_SMALL_ELEM)
            return 0;
    return quarter < 1 ? 1u : quarter > 8 ? 8u : (unsigned)quarter;
}

/* Load a ring image file: every element it holds becomes a payload to replay. */
static int cli_load_source(cli_session_t *s, cli_stream_serve_opts_t *o)
{
    FILE *f = fopen(o->source, "rb");
    uint8_t *img = NULL, *elem = NULL;
    long len;
    remora_ring_h ring = NULL;
    remora_status_t st;
    int rc = CLI_EXIT_RUNTIME;

    if (f == NULL)
        return cli_error("stream serve", o->source, REMORA_ERR_IO, "cannot open: %s",
                         strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        (img = malloc(len ? (size_t)len : 1)) == NULL ||
        fread(img, 1, (size_t)len, f) != (size_t)len) {
        rc = cli_error("stream serve", o->source, REMORA_ERR_IO, "cannot read");
        goto out;
    }
    st = remora_ring_create_from_image(s->context, img, (size_t)len, &ring);
    if (st != REMORA_OK) {
        rc = cli_error("stream serve", o->source, st, "not a ring image (docs/ring.md)");
        goto out;
    }
    size_t es = remora_ring_elem_size(ring), cap = remora_ring_capacity(ring);
    if ((o->src = malloc(es * cap)) == NULL || (elem = malloc(es)) == NULL) {
        rc = cli_error("stream serve", o->source, REMORA_ERR_NO_MEMORY, NULL);
        goto out;
    }
    uint64_t seq = 0;
    for (st = remora_ring_oldest(ring, elem, es, &seq); st == REMORA_OK && seq < remora_ring_head(ring);
         seq++) {
        if (remora_ring_get(ring, seq, elem, es) == REMORA_OK)
            memcpy(o->src + (o->src_count++) * es, elem, es);
    }
    if (o->src_count == 0) {
        rc = cli_error("stream serve", o->source, REMORA_ERR_INVALID_PARAM,
                       "the ring image holds no elements");
        goto out;
    }
    o->src_elem = es;
    if (o->nrings == 0) { /* the file's shape */
        snprintf(o->rings[0].name, sizeof(o->rings[0].name), "stream");
        o->rings[0].elem_size = es;
        o->rings[0].count     = cap;
        o->nrings             = 1;
    }
    for (size_t i = 0; i < o->nrings; i++) {
        if (o->rings[i].elem_size != es) {
            rc = cli_error("stream serve", o->source, REMORA_ERR_INVALID_PARAM,
                           "its elements are %zu bytes, ring '%s' wants %llu", es,
                           o->rings[i].name, (unsigned long long)o->rings[i].elem_size);
            goto out;
        }
    }
    rc = 0;
out:
    if (f)
        fclose(f);
    free(img);
    free(elem);
    remora_ring_destroy(ring);
    return rc;
}

typedef struct cli_producer {
    cli_stream_serve_opts_t *o;
    cli_ring_spec_t         *r;
} cli_producer_t;

/* Sleep until t (cli_now's clock), or until *stop: a slow --rate must not
 * keep Ctrl-C waiting for its next frame. */
static void cli_sleep_until(double t, const atomic_int *stop)
{
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {
        double now = cli_now(), until = t - now > 0.1 ? now + 0.1 : t;
        struct timespec ts = {.tv_sec = (time_t)until,
                              .tv_nsec = (long)((until - floor(until)) * 1e9)};
        int err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        if ((err != 0 && err != EINTR) || until >= t)
            return;
    }
}

/* Fill the payload of element seq (in slot) and return its partial checksum.
 * With --source fixed a slot's payload is written on the first lap only and
 * its checksum remembered; later frames in the slot restamp the header alone. */
static uint64_t cli_produce_payload(cli_stream_serve_opts_t *o, void *slot, size_t es,
                                    uint64_t seq, uint64_t n, uint64_t *sums, size_t cap)
{
    size_t payload = es > REMORA_FRAME_HDR ? es - REMORA_FRAME_HDR : 0;

    if (sums && seq >= cap)
        return sums[seq % cap];
    const uint8_t *src = NULL;
    if (o->src && payload)
        src = o->src + (n % o->src_count) * o->src_elem + REMORA_FRAME_HDR;
    /* A host ring's slot is sent long after; a GPU ring's frame is copied at once. */
    uint64_t partial = o->gpu < 0 ? remora_frame_payload_streamed(slot, es, seq, src)
                                  : remora_frame_payload(slot, es, seq, src);
    if (sums)
        sums[seq % cap] = partial;
    return partial;
}

static void *cli_producer_main(void *arg)
{
    /* Wake on time: the default 50 us timer slack is half a 10 kHz period. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    cli_producer_t *p = arg;
    cli_stream_serve_opts_t *o = p->o;
    remora_ring_h ring = p->r->ring;
    size_t es = remora_ring_elem_size(ring), cap = remora_ring_capacity(ring);
    double next = cli_now(), period = o->rate > 0 ? 1.0 / o->rate : 0;
    uint64_t *sums = o->fixed && o->gpu < 0 ? calloc(cap, sizeof(*sums)) : NULL;
    uint8_t *frame = o->gpu >= 0 ? malloc(es) : NULL; /* GPU ring: built here, then pushed */
    remora_status_t st = REMORA_OK;

    if (o->gpu >= 0 && frame == NULL)
        st = REMORA_ERR_NO_MEMORY;

    for (uint64_t n = 0; st == REMORA_OK && !atomic_load_explicit(&o->stop, memory_order_relaxed);
         n++) {
        void *slot = frame;
        uint64_t seq = remora_ring_head(ring);

        if (period > 0) {
            /* Sleep whenever ahead by more than half a period (at most
             * 100 us): a detector's frames come evenly. Sleeping only when
             * a whole 100 us ahead made a 10 kHz producer commit in pairs
             * every 200 us. Faster rates than sleeps allow come in short
             * bursts; the absolute clock keeps the average. */
            next += period;
            if (next - cli_now() > (period < 2e-4 ? period / 2 : 1e-4))
                cli_sleep_until(next, &o->stop);
        }
        if (frame == NULL && (st = remora_ring_reserve(ring, &slot)) != REMORA_OK)
            break;
        uint64_t partial = cli_produce_payload(o, slot, es, seq, n, sums, cap);
        remora_frame_seal(slot, es, seq, cli_realtime_ns(), partial);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        st = frame == NULL ? remora_ring_commit(ring, NULL) : remora_ring_push(ring, frame, es, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        uint64_t ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
                      (uint64_t)t0.tv_nsec;
        uint64_t b = ns / CLI_PUSH_BUCKET_NS;
        p->r->push_hist[b < CLI_PUSH_BUCKETS ? b : CLI_PUSH_BUCKETS]++;
        p->r->push_n++;
        if (ns > p->r->push_max_ns)
            p->r->push_max_ns = ns;
    }
    if (st != REMORA_OK) { /* no silent dead producer behind a live server */
        cli_note("stream serve", "ring %s: producer stopped: %s", p->r->name,
                       remora_status_string(st));
        atomic_store(&o->failed, 1);
        kill(getpid(), SIGTERM);
    }
    free(frame);
    free(sums);
    free(p);
    return NULL;
}

/* The rings, before the server listens: a reconnecting subscriber must not
 * find a restarted server without them (creating one takes a while under
 * load; exposing it does not). */
static int cli_create_rings(cli_session_t *s, cli_stream_serve_opts_t *o)
{
    for (size_t i = 0; i < o->nrings; i++) {
        cli_ring_spec_t *r = &o->rings[i];
        remora_ring_params_t rp = {
            .field_mask = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY,
            .elem_size = r->elem_size, .capacity = r->count};
        if (o->gpu >= 0) {
            rp.field_mask |= REMORA_RING_FIELD_MEM_TYPE | REMORA_RING_FIELD_DEVICE;
            rp.mem_type = REMORA_MEM_CUDA;
            rp.device   = o->gpu;
        }
        remora_status_t st = remora_ring_create(s->context, &rp, &r->ring);
        if (st != REMORA_OK)
            return cli_session_error(s, st, "cannot create ring '%s'", r->name);
    }
    return 0;
}

static int cli_start_rings(cli_session_t *s, remora_server_h server, cli_stream_serve_opts_t *o)
{
    char human[32];
    remora_status_t st;

    for (size_t i = 0; i < o->nrings; i++)
        if ((st = remora_server_expose_ring(server, o->rings[i].name, o->rings[i].ring)) !=
            REMORA_OK)
            return cli_session_error(s, st, "cannot expose ring '%s'", o->rings[i].name);
    for (size_t i = 0; i < o->nrings; i++) {
        cli_ring_spec_t *r = &o->rings[i];
        cli_producer_t *p;

        if ((p = malloc(sizeof(*p))) == NULL)
            return cli_session_error(s, REMORA_ERR_NO_MEMORY, NULL);
        *p = (cli_producer_t){o, r};
        if (pthread_create(&r->thread, NULL, cli_producer_main, p) != 0) {
            free(p);
            return cli_session_error(s, REMORA_ERR_NO_MEMORY, "cannot start a producer");
        }
        r->running = true;
        cli_note("stream serve", "ring %s: %s x %llu, rate %s, source %s%s", r->name,
                       remora_format_size(r->elem_size, human, sizeof(human)),
                       (unsigned long long)r->count, o->rate > 0 ? "paced" : "max",
                       o->source ? o->source : o->fixed ? "fixed" : "pattern",
                       o->gpu >= 0 ? ", elements on the GPU" : "");
    }
    return 0;
}

static void cli_stop_rings(cli_stream_serve_opts_t *o)
{
    atomic_store(&o->stop, 1);
    for (size_t i = 0; i < o->nrings; i++) {
        cli_ring_spec_t *r = &o->rings[i];
        if (!r->running)
            continue;
        pthread_join(r->thread, NULL);
        if (r->push_n)
            cli_note("stream serve", "ring %s: %llu elements; commit cost p50 %.2f us, "
                     "p99 %.2f us, max %.1f us", r->name, (unsigned long long)r->push_n,
                     cli_push_quantile(r, 0.5), cli_push_quantile(r, 0.99),
                     (double)r->push_max_ns / 1e3);
    }
}

static int cli_stream_serve(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, CLI_OPT_LISTEN},
        {"ring", required_argument, NULL, CLI_OPT_RING},
        {"rate", required_argument, NULL, CLI_OPT_RATE},
        {"source", required_argument, NULL, CLI_OPT_SOURCE},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        {"token-file", required_argument, NULL, CLI_OPT_TOKEN_FILE},
        {"encrypt", no_argument, NULL, CLI_OPT_ENCRYPT},
        {"gpu", required_argument, NULL, CLI_OPT_GPU},
        {"workers", required_argument, NULL, CLI_OPT_WORKERS},
        CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    static cli_stream_serve_opts_t o; /* large; one per process */
    cli_parser_t parser = {"", longopts, cli_stream_serve_option, &o, NULL};
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR};
    remora_server_h server = NULL;
    cli_session_t s;
    char addr[REMORA_HOST_MAX + 8];
    sigset_t signals;
    siginfo_t info;
    remora_status_t st;
    int rc;

    o.listen = CLI_STREAM_DEFAULT_LISTEN;
    o.gpu    = -1;
    if ((rc = cli_parse_args(cmd, argc, argv, &parser, NULL)) != CLI_CONTINUE)
        return rc;
    cli_block_stop_signals(&signals); /* before any thread exists */
    if ((rc = cli_session_context_at(&s, cmd, o.listen)) != 0)
        return rc;
    s.target_text = o.listen;
    if (o.source && (rc = cli_load_source(&s, &o)) != 0)
        goto out;
    if (o.nrings == 0)
        cli_parse_ring(CLI_STREAM_DEFAULT_RING, &o.rings[o.nrings++]);
    sp.listen_addr = o.listen;
    if (o.token.len) {
        sp.field_mask |= REMORA_SERVER_FIELD_TOKEN;
        sp.token     = o.token.bytes;
        sp.token_len = o.token.len;
    }
    if (o.encrypt) {
        sp.field_mask |= REMORA_SERVER_FIELD_ENCRYPT;
        sp.encrypt = 1;
    }
    sp.field_mask |= REMORA_SERVER_FIELD_CONN_CB;
    sp.conn_cb  = cli_stats_conn_log;
    sp.conn_arg = (void *)"stream serve";
    if ((sp.lanes = cli_stream_workers(&o)) != 0)
        sp.field_mask |= REMORA_SERVER_FIELD_LANES;
    if ((rc = cli_create_rings(&s, &o)) != 0)
        goto out;
    if ((st = remora_server_create(s.context, &sp, &server)) != REMORA_OK) {
        rc = cli_session_error(&s, st, st == REMORA_ERR_BUSY ? "cannot listen: port in use"
                                                             : "cannot listen");
        goto out;
    }
    remora_server_address(server, addr, sizeof(addr));
    s.target_text = addr;
    cli_warn_untokened(cmd, addr, o.token.len > 0);
    if ((rc = cli_start_rings(&s, server, &o)) != 0)
        goto out;
    if (o.json)
        printf("{\"listening\":\"%s\"}\n", addr);
    else
        printf("listening %s\n", addr);
    fflush(stdout);
    while (sigwaitinfo(&signals, &info) < 0) {
    }
    cli_note("stream serve", "got %s, shutting down", info.si_signo == SIGINT ? "SIGINT" : "SIGTERM");
    if (atomic_load(&o.failed))
        rc = CLI_EXIT_RUNTIME;
out:
    cli_stop_rings(&o);
    remora_server_destroy(server);
    for (size_t i = 0; i < o.nrings; i++)
        remora_ring_destroy(o.rings[i].ring);
    free(o.src);
    cli_session_close(&s);
    return rc;
}

/* ================================================================ read */

typedef struct cli_stream_read_opts {
    cli_client_opts_t client;
    remora_sub_mode_t mode;
    uint64_t          count;   /* 0: no limit */
    double            seconds; /* 0: no limit */
    double            warmup;  /* latency statistics leave out the first seconds */
    bool              verify, json, progress;
    int               gpu;     /* land elements in memory of this GPU; -1: zero-copy host */
} cli_stream_read_opts_t;

typedef struct cli_hist {
    uint64_t n;
    uint64_t buckets[CLI_HIST_BUCKETS];
} cli_hist_t;

static void cli_hist_add(cli_hist_t *h, double ns)
{
    int b = ns <= 1 ? 0 : (int)(log(ns) / log(1.01));
    h->buckets[b < CLI_HIST_BUCKETS ? b : CLI_HIST_BUCKETS - 1]++;
    h->n++;
}

/* The q-quantile in microseconds (the bucket's upper edge; 1% precision). */
static double cli_hist_quantile(const cli_hist_t *h, double q)
{
    uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;

    if (h->n == 0)
        return 0;
    for (int b = 0; b < CLI_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= want && seen > 0)
            return pow(1.01, b + 1) / 1e3;
    }
    return pow(1.01, CLI_HIST_BUCKETS) / 1e3;
}

typedef struct cli_stream_stats {
    uint64_t   elements, bytes, drops, torn, corrupt;
    uint64_t   discarded; /* copies that arrived overwritten (remora_sub_discarded) */
    uint64_t   seq_first, seq_last; /* sequence numbers of the first and last delivered */
    uint64_t   drops_first;         /* drops counted when the first was delivered */
    atomic_ulong reconnects; /* RECONNECTED events (progress thread) */
    double     start, seconds;
    cli_hist_t lat; /* whole run */
    cli_hist_t win; /* since the last progress line */
} cli_stream_stats_t;

static int cli_stream_read_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_stream_read_opts_t *o = opts;

    switch (opt) {
    case CLI_OPT_MODE:
        if (strcmp(arg, "every") == 0)
            o->mode = REMORA_SUB_EVERY;
        else if (strcmp(arg, "latest") == 0)
            o->mode = REMORA_SUB_LATEST;
        else
            return cli_usage_error(cmd, "bad --mode '%s' (want every or latest)", arg);
        return CLI_CONTINUE;
    case CLI_OPT_COUNT:
        return cli_opt_number(cmd, "--count", arg, 1, UINT64_MAX, &o->count);
    case CLI_OPT_SECONDS:
        return cli_opt_seconds(cmd, "--seconds", arg, false, &o->seconds);
    case CLI_OPT_WARMUP:
        return cli_opt_seconds(cmd, "--warmup", arg, true, &o->warmup);
    case CLI_OPT_VERIFY:
        o->verify = true;
        return CLI_CONTINUE;
    case CLI_OPT_JSON:
        o->json = true;
        return CLI_CONTINUE;
    case CLI_OPT_PROGRESS:
        o->progress = true;
        return CLI_CONTINUE;
    case CLI_OPT_GPU:
        return cli_opt_gpu(cmd, arg, &o->gpu);
    case CLI_OPT_NO_RECONNECT:
        o->client.reconnect = false;
        return CLI_CONTINUE;
    case CLI_OPT_RECONNECT_FOR: {
        char *rest;
        errno = 0;
        long ms = strtol(arg, &rest, 10);
        if (errno || *rest || ms < 1 || ms > 86400000)
            return cli_usage_error(cmd, "bad --reconnect-for '%s': milliseconds, 1..86400000", arg);
        o->client.reconnect_for_ms = (int)ms;
        return CLI_CONTINUE;
    }
    default:
        return CLI_EXIT_USAGE;
    }
}

/* How the connection ended, from the client's final DISCONNECTED event
 * (progress thread): a remora_status_t; 0 while connected or reconnecting. */
static atomic_int g_stream_lost;


/* Reconnects, for the live line and the summary, and a note on stderr; and
 * the connection's end, when no reconnect follows. */
static void cli_stream_event(const remora_event_t *ev, void *arg)
{
    cli_stream_stats_t *st = arg;

    if (ev->type == REMORA_EVENT_RECONNECTED) {
        atomic_fetch_add(&st->reconnects, 1);
        cli_note("stream read", "reconnected (%s server instance)",
                 ev->new_instance ? "a new" : "the same");
    } else if (ev->type == REMORA_EVENT_DISCONNECTED && ev->reconnecting) {
        cli_note("stream read", "disconnected: %s; reconnecting", remora_status_string(ev->status));
    } else if (ev->type == REMORA_EVENT_DISCONNECTED) {
        atomic_store(&g_stream_lost, ev->status != REMORA_OK ? (int)ev->status
                                                             : (int)REMORA_ERR_DISCONNECTED);
    }
}

static void cli_stream_progress(cli_stream_stats_t *st, uint64_t *last_n, uint64_t *last_b,
                                double *last_t, bool tty, const char *path)
{
    double now = cli_now(), dt = now - *last_t;

    fprintf(stderr, "%s%10.0f elem/s  %7.3f GB/s  drops %llu  reconnects %lu  torn %llu  "
            "corrupt %llu  lat p50 %.1f us p99 %.1f us  path %s   %s", tty ? "\r" : "",
            (double)(st->elements - *last_n) / dt, (double)(st->bytes - *last_b) / dt / 1e9,
            (unsigned long long)st->drops, atomic_load(&st->reconnects),
            (unsigned long long)st->torn,
            (unsigned long long)st->corrupt, cli_hist_quantile(&st->win, 0.5),
            cli_hist_quantile(&st->win, 0.99), path, tty ? "" : "\n");
    memset(&st->win, 0, sizeof(st->win));
    *last_n = st->elements;
    *last_b = st->bytes;
    *last_t = now;
}

static void cli_stream_account(cli_stream_stats_t *st, const cli_stream_read_opts_t *o,
                               const void *elem, const remora_elem_info_t *info)
{
    uint64_t ts = remora_frame_timestamp(elem, info->size);

    if (st->elements++ == 0) {
        st->seq_first   = info->seq;
        st->drops_first = info->drops;
    }
    st->seq_last = info->seq;
    st->bytes += info->size;
    st->drops = info->drops;
    /* --warmup: what many readers starting at once cost is not the stream's. */
    if (ts && (o->warmup == 0 || cli_now() - st->start >= o->warmup)) {
        double lat = (double)cli_realtime_ns() - (double)ts;
        cli_hist_add(&st->lat, lat);
        cli_hist_add(&st->win, lat);
    }
    if (o->verify) {
        remora_frame_verdict_t v = remora_frame_check(elem, info->size, info->seq);
        st->torn    += v == REMORA_FRAME_TORN;
        st->corrupt += v == REMORA_FRAME_CORRUPT;
    }
}

static void cli_stream_summary(const cli_stream_stats_t *st, const cli_stream_read_opts_t *o)
{
    double gbps = st->seconds > 0 ? (double)st->bytes / st->seconds / 1e9 : 0;

    if (o->json) {
        printf("{\"elements\":%llu,\"bytes\":%llu,\"seconds\":%.3f,\"gbps\":%.3f,"
               "\"drops\":%llu,\"discarded\":%llu,\"reconnects\":%lu,\"torn\":%llu,"
               "\"corrupt\":%llu,\"lat_us_p50\":%.2f,\"lat_us_p99\":%.2f,"
               "\"seq_first\":%llu,\"seq_last\":%llu,\"drops_first\":%llu}\n",
               (unsigned long long)st->elements, (unsigned long long)st->bytes, st->seconds,
               gbps, (unsigned long long)st->drops, (unsigned long long)st->discarded,
               atomic_load(&st->reconnects),
               (unsigned long long)st->torn,
               (unsigned long long)st->corrupt, cli_hist_quantile(&st->lat, 0.5),
               cli_hist_quantile(&st->lat, 0.99), (unsigned long long)st->seq_first,
               (unsigned long long)st->seq_last, (unsigned long long)st->drops_first);
    } else {
        printf("%llu elements, %llu bytes in %.2f s: %.0f elem/s, %.3f GB/s; drops %llu, "
               "reconnects %lu, torn %llu, corrupt %llu%s; latency p50 %.1f us, p99 %.1f us\n",
               (unsigned long long)st->elements, (unsigned long long)st->bytes, st->seconds,
               st->seconds > 0 ? (double)st->elements / st->seconds : 0, gbps,
               (unsigned long long)st->drops, atomic_load(&st->reconnects),
               (unsigned long long)st->torn,
               (unsigned long long)st->corrupt, o->verify ? "" : " (not verified)",
               cli_hist_quantile(&st->lat, 0.5), cli_hist_quantile(&st->lat, 0.99));
    }
}

/*
 * A producer that outruns every copy: elements keep arriving overwritten and
 * few or none are delivered. Say so (with the rate of discarded copies)
 * rather than deliver nothing silently; at most every few seconds.
 */
typedef struct cli_outrun {
    double   t, warned;
    uint64_t elements, discarded;
} cli_outrun_t;

#define CLI_OUTRUN_WINDOW_S 1.0
#define CLI_OUTRUN_REPEAT_S 5.0

static void cli_stream_outrun_check(const cli_stream_stats_t *st, cli_outrun_t *w)
{
    double now = cli_now(), dt = now - w->t;

    if (dt < CLI_OUTRUN_WINDOW_S)
        return;
    uint64_t lost = st->discarded - w->discarded, got = st->elements - w->elements;
    /* Half the copies or more lost (all of them: a producer that outruns
     * every copy, nothing delivered). A fan-out with a producer faster than
     * the link loses some by design (docs/ring.md, "Fan-out"). */
    if (lost > 0 && lost >= got && (w->warned == 0 || now - w->warned >= CLI_OUTRUN_REPEAT_S)) {
        cli_note("stream read", "warning: the producer overwrites elements before they arrive: "
                 "%.0f copies/s discarded (%.0f%% of those that crossed the network), %.0f "
                 "elements/s delivered; the ring wraps faster than an element crosses the "
                 "network: slow the producer or give the ring more slots",
                 (double)lost / dt, 100.0 * (double)lost / (double)(lost + got), (double)got / dt);
        w->warned = now;
    }
    w->t         = now;
    w->elements  = st->elements;
    w->discarded = st->discarded;
}

/*
 * The next element: zero-copy on the host, or copied into GPU memory by the
 * library (camera-to-GPU); then the bytes the checks need come back from the
 * GPU: the whole frame with --verify, else its timestamp.
 */
static remora_status_t cli_stream_next(remora_sub_h sub, const cli_stream_read_opts_t *o,
                                       const cli_buffer_t *gpu, uint8_t *host,
                                       const void **elem, remora_elem_info_t *info, int wait_ms)
{
    if (o->gpu < 0)
        return remora_sub_next_ref(sub, elem, info, wait_ms);
    remora_status_t rs = remora_sub_next(sub, gpu->ptr, gpu->len, info, wait_ms);
    if (rs != REMORA_OK)
        return rs;
    size_t back = o->verify ? gpu->len : (gpu->len < 16 ? gpu->len : 16);
    memset(host, 0, gpu->len);
    *elem = host;
    return remora_copy(host, gpu->ptr, back);
}

/*
 * Follow the ring until --count or --seconds (exit 0) or until the stream
 * dies (exit 1): any error from the subscription but TIMED_OUT, or TIMED_OUT
 * once the connection is known to be gone. TIMED_OUT on a live connection is
 * an idle ring, not a dead one: it ends the run only without --seconds, after
 * --timeout with no element at all.
 */
static int cli_stream_follow(cli_session_t *s, const cli_stream_read_opts_t *o,
                             cli_stream_stats_t *st)
{
    remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_MODE, .mode = o->mode};
    remora_sub_h sub;
    remora_elem_info_t info = {.field_mask = 0}; /* every field */
    remora_status_t rs;
    uint64_t last_n = 0, last_b = 0;
    bool tty = isatty(STDERR_FILENO), show = tty || o->progress;
    int rc = 0;

    /* Asked while the connection is down (a server restarting under a
     * reconnecting client), the subscription waits for the reconnect, for
     * as long as the client keeps reconnecting. */
    double give_up = cli_now() + (o->client.reconnect_for_ms > 0 ? o->client.reconnect_for_ms
                                                                 : 60000) / 1e3;
    while ((rs = remora_client_subscribe(s->client, s->target.name, &sp, &sub)) ==
               REMORA_ERR_DISCONNECTED &&
           o->client.reconnect && atomic_load(&g_stream_lost) == 0 && cli_now() < give_up)
        usleep(20000);
    if (rs != REMORA_OK) {
        remora_region_info_t ri = {.field_mask = REMORA_REGION_INFO_FIELD_KIND};
        if (rs == REMORA_ERR_INVALID_PARAM &&
            remora_client_lookup(s->client, s->target.name, &ri) == REMORA_OK &&
            ri.kind != REMORA_REGION_RING)
            return cli_session_error(s, rs, "cannot subscribe: '%s' is not a ring (a %s region; "
                                     "see 'remora ls')", s->target.name,
                                     ri.kind == REMORA_REGION_SIGNALS ? "signals" : "plain");
        return cli_session_error(s, rs, "cannot subscribe");
    }
    const void *elem;
    cli_buffer_t gpu = {0};
    uint8_t *host = NULL;
    if (o->gpu >= 0) {
        size_t es = remora_sub_elem_size(sub);
        if ((rc = cli_buffer_alloc(s, o->gpu, es, &gpu)) != 0 ||
            ((host = malloc(es)) == NULL && (rc = cli_session_error(s, REMORA_ERR_NO_MEMORY, NULL)))) {
            cli_buffer_free(&gpu);
            remora_sub_destroy(sub);
            return rc;
        }
    }
    /* The data path, for the live line (a ring is fetched or pushed over it). */
    remora_path_t path = REMORA_PATH_AUTO;
    const char *path_text = remora_client_region_path(s->client, s->target.name, &path) == REMORA_OK
                                ? remora_path_string(path) : "?";
    st->start = cli_now();
    cli_outrun_t outrun = {.t = st->start};
    double last_t = st->start, last_ok = st->start;
    double deadline = o->seconds > 0 ? st->start + o->seconds : INFINITY;
    double idle_max = (o->client.timeout_ms > 0 ? o->client.timeout_ms : REMORA_DEFAULT_TIMEOUT_MS) / 1e3;
    while ((o->count == 0 || st->elements < o->count) && cli_now() < deadline &&
           !cli_interrupted()) {
        double left = deadline - cli_now();
        if (left < 0)
            left = 0;
        /* Zero-copy: the frame is only looked at, in the subscription's buffer. */
        rs = cli_stream_next(sub, o, &gpu, host, &elem, &info,
                             left < 0.2 ? (int)(left * 1e3) + 1 : 200);
        st->discarded = remora_sub_discarded(sub);
        cli_stream_outrun_check(st, &outrun);
        if (rs == REMORA_OK) {
            cli_stream_account(st, o, elem, &info);
            last_ok = cli_now();
        } else if (rs != REMORA_ERR_TIMED_OUT) {
            rc = cli_session_error(s, rs, "stream ended after %llu elements",
                                   (unsigned long long)st->elements);
            break;
        } else if (atomic_load(&g_stream_lost) != 0) {
            rc = cli_session_error(s, (remora_status_t)atomic_load(&g_stream_lost),
                                   "stream ended after %llu elements: connection lost",
                                   (unsigned long long)st->elements);
            break;
        } else if (o->seconds == 0 && cli_now() - last_ok > idle_max) {
            rc = cli_session_error(s, rs, "no element for %.0f s", idle_max);
            break;
        }
        if (show && cli_now() - last_t >= (tty ? CLI_PROGRESS_S : 1.0))
            cli_stream_progress(st, &last_n, &last_b, &last_t, tty, path_text);
    }
    st->seconds = cli_now() - st->start;
    if (tty)
        fputc('\n', stderr);
    remora_sub_destroy(sub);
    cli_buffer_free(&gpu);
    free(host);
    return rc;
}

static int cli_stream_read(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"mode", required_argument, NULL, CLI_OPT_MODE},
        {"count", required_argument, NULL, CLI_OPT_COUNT},
        {"seconds", required_argument, NULL, CLI_OPT_SECONDS},
        {"warmup", required_argument, NULL, CLI_OPT_WARMUP},
        {"verify", no_argument, NULL, CLI_OPT_VERIFY},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        {"progress", no_argument, NULL, CLI_OPT_PROGRESS},
        {"gpu", required_argument, NULL, CLI_OPT_GPU},
        {"no-reconnect", no_argument, NULL, CLI_OPT_NO_RECONNECT},
        {"reconnect-for", required_argument, NULL, CLI_OPT_RECONNECT_FOR},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    static cli_stream_stats_t st; /* histograms: keep them off the stack */
    cli_stream_read_opts_t o = {.mode = REMORA_SUB_EVERY, .gpu = -1,
                                .client = {.reconnect = true, .event_cb = cli_stream_event,
                                           .event_arg = &st}};
    cli_parser_t parser = {"", longopts, cli_stream_read_option, &o, &o.client};
    const char *target;
    cli_session_t s;
    int rc;

    if ((rc = cli_parse_args(cmd, argc, argv, &parser, &target)) != CLI_CONTINUE)
        return rc;
    if (o.warmup > 0 && o.seconds > 0 && o.warmup >= o.seconds)
        return cli_usage_error(cmd, "--warmup %g leaves nothing of --seconds %g to measure",
                               o.warmup, o.seconds);
    memset(&st, 0, sizeof(st));
    if ((rc = cli_session_open(&s, cmd, target, true, &o.client)) != 0)
        return rc;
    /* SIGINT or SIGTERM is how a read without --count or --seconds ends:
     * the loop stops and the summary is printed. */
    cli_catch_interrupts();
    rc = cli_stream_follow(&s, &o, &st);
    cli_release_interrupts();
    if (st.elements || rc == 0)
        cli_stream_summary(&st, &o);
    cli_session_close(&s);
    if (st.torn || st.corrupt) { /* a bad frame outranks how the stream ended */
        cli_error("stream read", target, REMORA_OK, "%llu torn, %llu corrupt elements",
                  (unsigned long long)st.torn, (unsigned long long)st.corrupt);
        rc = CLI_EXIT_MISMATCH;
    }
    return rc;
}

/* ================================================================ clone */

static int cli_stream_clone_option(const cli_command_t *cmd, int opt, const char *arg,
                                   void *opts)
{
    (void)arg;
    if (opt != CLI_OPT_JSON)
        return cli_usage_error(cmd, "unexpected option");
    *(bool *)opts = true;
    return CLI_CONTINUE;
}

static int cli_stream_clone(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, CLI_OPT_JSON},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_client_opts_t client = {0};
    bool json = false;
    cli_parser_t parser = {"", longopts, cli_stream_clone_option, &json, &client};
    cli_output_t out;
    const char *target, *file;
    remora_ring_h ring;
    remora_status_t st;
    cli_session_t s;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(cmd->usage, stdout);
            return CLI_EXIT_OK;
        }
    }
    if (argc < 3 || argv[argc - 1][0] == '-')
        return cli_usage_error(cmd, "want HOST:PORT/NAME FILE");
    file = argv[argc - 1];
    if ((rc = cli_parse_args(cmd, argc - 1, argv, &parser, &target)) != CLI_CONTINUE)
        return rc;
    /* The output first: a target that cannot be one is refused before connecting. */
    if ((rc = cli_output_open(&out, cmd->name, target, file)) != 0)
        return rc;
    if ((rc = cli_session_open(&s, cmd, target, true, &client)) != 0) {
        cli_output_abort(&out);
        return rc;
    }
    if ((st = remora_client_clone_ring(s.client, s.target.name, &ring)) != REMORA_OK) {
        rc = cli_session_error(&s, st, "cannot clone");
        cli_session_close(&s);
        cli_output_abort(&out);
        return rc;
    }
    remora_mem_h mem = remora_ring_mem(ring);
    size_t len = remora_mem_length(mem);
    int sig = cli_interrupted();
    if (sig != 0) {
        rc = cli_interrupted_error(cmd->name, target, file, sig);
    } else if (fwrite(remora_mem_address(mem), 1, len, out.f) != len) {
        rc = cli_error(cmd->name, target, REMORA_OK, "cannot write '%s': %s; it is left as "
                       "it was", file, strerror(errno));
    }
    if (rc == 0)
        rc = cli_output_commit(&out, cmd->name, target);
    else
        cli_output_abort(&out);
    if (rc == 0 && json) {
        char t[6 * (REMORA_HOST_MAX + REMORA_NAME_MAX + 8) + 3], f[6 * PATH_MAX + 3];
        remora_json_string(target, t, sizeof(t));
        remora_json_string(file, f, sizeof(f));
        printf("{\"target\":%s,\"capacity\":%zu,\"elem_size\":%zu,\"head\":%llu,\"file\":%s}\n",
               t, remora_ring_capacity(ring), remora_ring_elem_size(ring),
               (unsigned long long)remora_ring_head(ring), f);
    } else if (rc == 0)
        printf("cloned %s: %zu x %zu bytes, head %llu, into %s\n", target,
               remora_ring_capacity(ring), remora_ring_elem_size(ring),
               (unsigned long long)remora_ring_head(ring), file);
    remora_ring_destroy(ring);
    cli_session_close(&s);
    return rc;
}

/* ================================================================ dispatch */

static const cli_command_t cli_stream_serve_cmd = {
    .name  = "stream serve",
    .usage =
        "usage: remora stream serve [--listen HOST:PORT] [--ring NAME=ELEMSIZExCOUNT]...\n"
        "                           [--rate HZ|max] [--source pattern|fixed|FILE] [--token-file F]\n"
        "                           [--encrypt] [--gpu N] [--workers N] [--json]\n"
        "\n"
        "Produce stamped frames (sequence number, timestamp, checksum) into rings and\n"
        "serve them. Prints 'listening HOST:PORT' when ready; runs until SIGINT/SIGTERM.\n"
        "Logs each client's connection and disconnection, with its address, to stderr.\n"
        "\n"
        "  --listen HOST:PORT  address to bind (default " CLI_STREAM_DEFAULT_LISTEN ";\n"
        "                      port 0 picks a free one)\n"
        "  --ring NAME=ELEMSIZExCOUNT  a ring of COUNT elements of ELEMSIZE bytes\n"
        "                      (>= 8); repeatable; default " CLI_STREAM_DEFAULT_RING "\n"
        "  --rate HZ|max       elements per second per ring (default max)\n"
        "  --source pattern|fixed|FILE  payload: a per-frame pattern (default); 'fixed':\n"
        "                      each slot's pattern written once, later frames restamp\n"
        "                      only their 24-byte header (benchmarks: the producer then\n"
        "                      costs no memory bandwidth; a torn mix of two frames in\n"
        "                      one slot is no longer detectable); or the elements of a\n"
        "                      ring image file (remora stream clone)\n"
        "  --token-file F      require this shared token: the file's bytes less one\n"
        "                      trailing newline, at least 16 bytes\n"
        "  --gpu N             the rings' elements live in memory of GPU N (each frame\n"
        "                      is built on the host and pushed there)\n"
        "  --encrypt           encrypt every connection, keyed from the token (off by\n"
        "                      default; readers must use --encrypt too)\n"
        "  --workers N         serve on N UCX workers (1..8; default $REMORA_WORKERS,\n"
        "                      else as 'remora serve', but one per 4 cores when every\n"
        "                      ring's elements are 32 KiB or less: a commit wakes each\n"
        "                      worker that holds a subscriber's wait)\n"
        "  --json              print the ready line as {\"listening\": \"HOST:PORT\"}\n"
        "  -h, --help          show this help\n",
    .run = cli_stream_serve,
};

static const cli_command_t cli_stream_read_cmd = {
    .name  = "stream read",
    .usage =
        "usage: remora stream read HOST:PORT/NAME [--mode every|latest] [--count N |\n"
        "                          --seconds T] [--verify] [--json] [--gpu N] [CLIENT OPTIONS]\n"
        "\n"
        "Subscribe to a ring and consume it: a live progress line on a terminal,\n"
        "then a summary (one JSON object with --json: elements, bytes, seconds,\n"
        "gbps, drops, torn, corrupt, lat_us_p50, lat_us_p99).\n"
        "\n"
        "Exit status:\n"
        "  0  --count or --seconds was reached (without either, it runs until\n"
        "     interrupted or the stream dies)\n"
        "  1  the stream died first: the server went away or the connection was\n"
        "     lost, the ring is not there (any more), the token was refused; or,\n"
        "     without --seconds, no element came for --timeout. An idle ring on a\n"
        "     live connection is otherwise waited for. The reason is one line on\n"
        "     stderr; the summary of what was read still goes to stdout.\n"
        "  2  bad command line\n"
        "  3  --verify found a torn or corrupt element (whatever else happened)\n"
        "\n"
        "  --mode every|latest every element in order (gaps are drops), or the newest\n"
        "  --count N           stop after N elements\n"
        "  --seconds T         stop after T seconds\n"
        "  --warmup S          latency statistics leave out the first S seconds (many\n"
        "                      readers starting at once); elements still count\n"
        "  --verify            check every frame's sequence number and checksum\n"
        "  --json              print the summary as JSON\n"
        "  --progress          a progress line every second even when stderr is not a\n"
        "                      terminal (on a terminal it is always shown, in place)\n"
        "  --gpu N             land every element in memory of GPU N; --verify checks\n"
        "                      the bytes there (copied back), latency is taken once an\n"
        "                      element is in GPU memory\n"
        "  --no-reconnect      end when the connection fails; by default the client\n"
        "                      reconnects (a restarted server is followed; the gap is\n"
        "                      counted in drops, reconnects in the summary)\n"
        "  --reconnect-for MS  give up reconnecting after MS ms (default 60000) and\n"
        "                      exit 1, as when the stream dies without reconnecting\n"
        CLI_CLIENT_HELP,
    .run = cli_stream_read,
};

static const cli_command_t cli_stream_clone_cmd = {
    .name  = "stream clone",
    .usage =
        "usage: remora stream clone [--json] [CLIENT OPTIONS] HOST:PORT/NAME FILE\n"
        "\n"
        "Copy a remote ring's current state into a ring image file (docs/ring.md),\n"
        "usable as the source file of 'remora stream serve'. FILE is replaced only once\n"
        "the whole image is written and on disk (a temporary file in FILE's\n"
        "directory is renamed over it); after any failure (a full disk, a lost\n"
        "server, SIGINT or SIGTERM) FILE is left as it was and no temporary file\n"
        "remains. FILE must be a regular file or not exist: a device, FIFO or\n"
        "directory is refused. A replaced FILE keeps its mode.\n"
        "\n"
        "  --json            print one JSON object when done: target, capacity,\n"
        "                    elem_size, head, file\n"
        CLI_CLIENT_HELP
        "\n"
        "Exit status: 0 done, 1 failed, 2 bad command line, 130/143 interrupted by\n"
        "SIGINT/SIGTERM.\n",
    .run = cli_stream_clone,
};

static int cli_stream_run(const cli_command_t *cmd, int argc, char **argv)
{
    const cli_command_t *subs[] = {&cli_stream_serve_cmd, &cli_stream_read_cmd,
                                   &cli_stream_clone_cmd};

    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(cmd->usage, stdout);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; argc >= 2 && i < sizeof(subs) / sizeof(subs[0]); i++) {
        if (strcmp(argv[1], subs[i]->name + 7) == 0)
            return subs[i]->run(subs[i], argc - 1, argv + 1);
    }
    static const char *const names[] = {"serve", "read", "clone"};
    const char *near = argc >= 2 ? cli_did_you_mean(argv[1], names, 3) : NULL;
    if (near != NULL)
        return cli_usage_error(cmd, "unknown 'stream %s'; did you mean 'stream %s'?", argv[1], near);
    return cli_usage_error(cmd, "want 'stream serve', 'stream read' or 'stream clone'");
}

const cli_command_t cli_cmd_stream = {
    .name    = "stream",
    .summary = "ring buffers: produce (serve), consume (read), snapshot (clone)",
    .usage   =
        "usage: remora stream serve|read|clone ...\n"
        "\n"
        "  serve   produce stamped frames into rings and serve them\n"
        "  read    subscribe to a ring, measure and verify\n"
        "  clone   save a remote ring's state to a file\n"
        "\n"
        "Run 'remora stream SUBCOMMAND --help' for options.\n",
    .run     = cli_stream_run,
};
