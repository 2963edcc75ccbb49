/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora bench: throughput and latency of reads or writes of one region.
 *
 * Design notes
 * - For each block size, DEPTH non-blocking requests stay in flight. They are
 *   posted round-robin into DEPTH slots and waited for oldest first, so the
 *   oldest request is always at the head; its latency runs from just before
 *   its post to the return of its wait (with DEPTH 1, the round trip).
 * - Request i goes to block (i mod (region size / block size)), so successive
 *   requests touch distinct offsets and wrap around the region.
 * - Throughput counts every completed request over the time from the first
 *   post to the last completion (after the deadline, in-flight requests drain).
 * - A warm-up (10% of --iters, or 10% of --seconds up to 0.2 s) runs first and
 *   is not counted.
 * - --op write sends the pattern of offset 0 from every slot: it overwrites
 *   the region's contents.
 * - --work-us stands for an application that processes each block before it
 *   asks for another: a busy loop after each completion. The requests still
 *   in flight must move meanwhile (with D >= 2 the throughput approaches
 *   size / max(work, transfer time)).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CLI_BENCH_MAX_SIZES     32
#define CLI_BENCH_MAX_DEPTH     1024
#define CLI_BENCH_DEFAULT_SIZES "64,4K,64K,1M"

enum {
    CLI_OPT_OP = CLI_OPT_CMD,
    CLI_OPT_SIZE,
    CLI_OPT_DEPTH,
    CLI_OPT_ITERS,
    CLI_OPT_SECONDS,
    CLI_OPT_WORK,
    CLI_OPT_JSON,
    CLI_OPT_GPU,
};

typedef struct cli_bench_opts {
    bool              write;
    size_t            nsizes;
    uint64_t          sizes[CLI_BENCH_MAX_SIZES];
    uint64_t          depth;
    uint64_t          iters;   /* 0: run for seconds */
    double            seconds;
    double            work_us; /* busy time per completed request */
    bool              json;
    int               gpu;     /* buffers in GPU memory on this device; -1: host */
    cli_client_opts_t client;
} cli_bench_opts_t;

/** Latency samples in µs; grows as needed. */
typedef struct cli_samples {
    double *v;
    size_t  n, cap;
} cli_samples_t;

/** One request slot. */
typedef struct cli_bench_slot {
    void            *buf;
    remora_request_h req;
    uint64_t         offset;
    double           posted;
} cli_bench_slot_t;

/** The run of one block size. */
typedef struct cli_bench_run {
    const cli_session_t    *s;
    const cli_bench_opts_t *o;
    size_t                  size;
    uint64_t                nblocks;    /* blocks of size in the region */
    uint64_t                next_block;
    cli_bench_slot_t       *slots;      /* o->depth of them */
    cli_buffer_t            bufs;
} cli_bench_run_t;

/** What one measured phase produced. */
typedef struct cli_bench_result {
    uint64_t       iters;
    double         seconds;
    double         gbps;
    remora_stats_t lat;
} cli_bench_result_t;

/* ---------------------------------------------------------------- options */

static int cli_parse_sizes(const cli_command_t *cmd, const char *arg, cli_bench_opts_t *o)
{
    const char *p = arg;

    o->nsizes = 0;
    for (;;) {
        size_t n = strcspn(p, ",");
        char item[32];
        uint64_t v;

        if (n >= sizeof(item) || o->nsizes == CLI_BENCH_MAX_SIZES) {
            return cli_usage_error(cmd, "bad --size '%s': at most %d sizes", arg,
                                   CLI_BENCH_MAX_SIZES);
        }
        memcpy(item, p, n);
        item[n] = '\0';
        if (remora_parse_size(item, &v) != 0 || v == 0 || v > SIZE_MAX) {
            return cli_usage_error(cmd, "bad --size '%s': '%s' is not a block size "
                                   "(e.g. 64,4K,1M)", arg, item);
        }
        o->sizes[o->nsizes++] = v;
        if (p[n] == '\0') {
            return CLI_CONTINUE;
        }
        p += n + 1;
    }
}

static int cli_bench_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_bench_opts_t *o = opts;

    switch (opt) {
    case CLI_OPT_OP:
        if (strcmp(arg, "read") != 0 && strcmp(arg, "write") != 0) {
            return cli_usage_error(cmd, "bad --op '%s': expected read or write", arg);
        }
        o->write = strcmp(arg, "write") == 0;
        return CLI_CONTINUE;
    case CLI_OPT_SIZE:
        return cli_parse_sizes(cmd, arg, o);
    case CLI_OPT_DEPTH:
        return cli_opt_number(cmd, "--depth", arg, 1, CLI_BENCH_MAX_DEPTH, &o->depth);
    case CLI_OPT_ITERS:
        return cli_opt_number(cmd, "--iters", arg, 1, UINT32_MAX, &o->iters);
    case CLI_OPT_SECONDS:
        return cli_opt_seconds(cmd, "--seconds", arg, false, &o->seconds);
    case CLI_OPT_WORK: {
        uint64_t us;
        int rc = cli_opt_number(cmd, "--work-us", arg, 0, 10000000, &us);
        o->work_us = (double)us;
        return rc;
    }
    case CLI_OPT_JSON:
        o->json = true;
        return CLI_CONTINUE;
    case CLI_OPT_GPU:
        return cli_opt_gpu(cmd, arg, &o->gpu);
    default:
        return cli_usage_error(cmd, "unexpected option");
    }
}

/* ---------------------------------------------------------------- measuring */

static int cli_samples_push(cli_samples_t *samples, double v)
{
    if (samples->n == samples->cap) {
        size_t cap = samples->cap != 0 ? 2 * samples->cap : 4096;
        double *grown = realloc(samples->v, cap * sizeof(*grown));
        if (grown == NULL) {
            return -1;
        }
        samples->v = grown;
        samples->cap = cap;
    }
    samples->v[samples->n++] = v;
    return 0;
}

static int cli_bench_post(cli_bench_run_t *run, cli_bench_slot_t *slot)
{
    const cli_session_t *s = run->s;
    remora_status_t status;

    slot->offset = (run->next_block++ % run->nblocks) * run->size;
    slot->posted = cli_now();
    status = run->o->write
        ? remora_client_write_nb(s->client, s->target.name, slot->offset, slot->buf, run->size,
                                 &slot->req)
        : remora_client_read_nb(s->client, s->target.name, slot->offset, slot->buf, run->size,
                                &slot->req);
    if (status != REMORA_OK) {
        return cli_io_error(s, status, run->o->write, slot->offset, run->size);
    }
    return 0;
}

/* Wait for the slot's request; its latency in µs goes to samples (when non-NULL). */
static int cli_bench_complete(cli_bench_run_t *run, cli_bench_slot_t *slot,
                              cli_samples_t *samples)
{
    int rc = cli_request_finish(run->s, &slot->req, run->o->write, slot->offset, run->size);

    if (rc == 0 && samples != NULL && cli_samples_push(samples, (cli_now() - slot->posted) * 1e6)) {
        rc = cli_session_error(run->s, REMORA_ERR_NO_MEMORY, "cannot store latencies");
    }
    return rc;
}

/* Run until iters requests completed (iters > 0) or seconds passed; see the notes on top. */
static int cli_bench_phase(cli_bench_run_t *run, uint64_t iters, double seconds,
                           cli_samples_t *samples, cli_bench_result_t *res)
{
    size_t depth = (size_t)run->o->depth, head = 0;
    uint64_t posted = 0, completed = 0;
    double start = cli_now();
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < depth && (iters == 0 || posted < iters); i++, posted++) {
        rc = cli_bench_post(run, &run->slots[i]);
    }
    while (rc == 0 && completed < posted) {
        cli_bench_slot_t *slot = &run->slots[head];
        bool more;

        rc = cli_bench_complete(run, slot, samples);
        completed++;
        for (double until = cli_now() + run->o->work_us * 1e-6; cli_now() < until;) {
            /* the application's own work on the block */
        }
        more = iters != 0 ? posted < iters : cli_now() - start < seconds;
        if (rc == 0 && more) {
            rc = cli_bench_post(run, slot);
            posted++;
        }
        head = (head + 1) % depth;
    }
    res->iters = completed;
    res->seconds = cli_now() - start;
    return rc;
}

static int cli_bench_alloc(cli_bench_run_t *run)
{
    size_t depth = (size_t)run->o->depth;
    char *bufs;

    if (run->size > SIZE_MAX / depth) {
        return cli_session_error(run->s, REMORA_ERR_NO_MEMORY, "%zu buffers of %zu bytes",
                                 depth, run->size);
    }
    run->slots = calloc(depth, sizeof(*run->slots));
    if (run->slots == NULL) {
        return cli_session_error(run->s, REMORA_ERR_NO_MEMORY, "%zu buffers of %zu bytes",
                                 depth, run->size);
    }
    int rc = cli_buffer_alloc(run->s, run->o->gpu, depth * run->size, &run->bufs);
    if (rc != 0) {
        return rc;
    }
    bufs = run->bufs.ptr;
    for (size_t i = 0; i < depth; i++) {
        run->slots[i].buf = bufs + i * run->size;
        if (run->o->gpu < 0) {
            remora_pattern_fill(run->slots[i].buf, 0, run->size);
        }
    }
    return 0;
}

/* Release what an error left in flight, then the memory. */
static void cli_bench_free(cli_bench_run_t *run)
{
    for (size_t i = 0; run->slots != NULL && i < (size_t)run->o->depth; i++) {
        if (run->slots[i].req != NULL) {
            remora_request_release(run->slots[i].req);
        }
    }
    free(run->slots);
    cli_buffer_free(&run->bufs);
}

/* Warm up, then measure one block size. */
static int cli_bench_size(const cli_session_t *s, const cli_bench_opts_t *o, uint64_t region_size,
                          size_t size, cli_bench_result_t *res)
{
    cli_bench_run_t run = {.s = s, .o = o, .size = size, .nblocks = region_size / size};
    cli_samples_t samples = {0};
    cli_bench_result_t warm;
    uint64_t warm_iters = o->iters != 0 ? (o->iters + 9) / 10 : 0;
    double warm_seconds = fmin(0.2, o->seconds / 10);
    int rc = cli_bench_alloc(&run);

    if (rc == 0) {
        rc = cli_bench_phase(&run, warm_iters, warm_seconds, NULL, &warm);
    }
    if (rc == 0) {
        rc = cli_bench_phase(&run, o->iters, o->seconds, &samples, res);
    }
    if (rc == 0) {
        res->gbps = (double)res->iters * (double)size / res->seconds / 1e9;
        remora_stats_compute(samples.v, samples.n, &res->lat);
    }
    free(samples.v);
    cli_bench_free(&run);
    return rc;
}

/* ---------------------------------------------------------------- output */

static void cli_bench_print_header(const cli_session_t *s, const cli_bench_opts_t *o,
                                   const char *path)
{
    printf("bench %s %s, path %s\n", o->write ? "write" : "read", s->target_text, path);
    printf("%10s %6s %10s %9s %9s %9s %9s\n", "size", "depth", "iters", "GB/s", "avg us",
           "p50 us", "p99 us");
}

static void cli_bench_print(const cli_bench_opts_t *o, size_t size, const char *path,
                            const cli_bench_result_t *r)
{
    if (o->json) {
        char path_json[64];
        remora_json_string(path, path_json, sizeof(path_json));
        printf("{\"op\":\"%s\",\"size\":%zu,\"depth\":%llu,\"iters\":%llu,\"gbps\":%.4f,"
               "\"lat_us_avg\":%.3f,\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f,\"path\":%s,"
               "\"work_us\":%.0f}\n",
               o->write ? "write" : "read", size, (unsigned long long)o->depth,
               (unsigned long long)r->iters, r->gbps, r->lat.avg, r->lat.p50, r->lat.p99,
               path_json, o->work_us);
    } else {
        char human[32];
        printf("%10s %6llu %10llu %9.3f %9.2f %9.2f %9.2f\n",
               remora_format_size(size, human, sizeof(human)), (unsigned long long)o->depth,
               (unsigned long long)r->iters, r->gbps, r->lat.avg, r->lat.p50, r->lat.p99);
    }
    fflush(stdout);
}

/* The data path in use, for the output; "unknown" if the library cannot say. */
static const char *cli_bench_path(const cli_session_t *s)
{
    remora_path_t path;

    if (remora_client_region_path(s->client, s->target.name, &path) != REMORA_OK) {
        return "unknown";
    }
    return remora_path_string(path);
}

static int cli_bench_check_sizes(const cli_session_t *s, const cli_bench_opts_t *o,
                                 uint64_t region_size)
{
    char a[32], b[32];

    for (size_t i = 0; i < o->nsizes; i++) {
        if (o->sizes[i] > region_size) {
            return cli_session_error(s, REMORA_OK, "block size %s is larger than the region (%s)",
                                     remora_format_size(o->sizes[i], a, sizeof(a)),
                                     remora_format_size(region_size, b, sizeof(b)));
        }
    }
    return 0;
}

static int cli_bench_all(const cli_session_t *s, const cli_bench_opts_t *o)
{
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE};
    cli_bench_result_t res;
    const char *path = NULL;
    int rc = cli_session_lookup(s, &info);

    if (rc == 0) {
        rc = cli_bench_check_sizes(s, o, info.size);
    }
    for (size_t i = 0; rc == 0 && i < o->nsizes; i++) {
        rc = cli_bench_size(s, o, info.size, (size_t)o->sizes[i], &res);
        if (rc == 0 && path == NULL) {
            path = cli_bench_path(s); /* known once data has moved */
            if (!o->json) {
                cli_bench_print_header(s, o, path);
            }
        }
        if (rc == 0) {
            cli_bench_print(o, (size_t)o->sizes[i], path, &res);
        }
    }
    return rc;
}

static int cli_bench_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"op", required_argument, NULL, CLI_OPT_OP},
        {"size", required_argument, NULL, CLI_OPT_SIZE},
        {"depth", required_argument, NULL, CLI_OPT_DEPTH},
        {"iters", required_argument, NULL, CLI_OPT_ITERS},
        {"seconds", required_argument, NULL, CLI_OPT_SECONDS},
        {"work-us", required_argument, NULL, CLI_OPT_WORK},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        {"gpu", required_argument, NULL, CLI_OPT_GPU},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_bench_opts_t o = {.depth = 1, .gpu = -1};
    cli_parser_t parser = {"", longopts, cli_bench_option, &o, &o.client};
    cli_session_t s;
    const char *target;
    int rc;

    rc = cli_parse_sizes(cmd, CLI_BENCH_DEFAULT_SIZES, &o);
    if (rc == CLI_CONTINUE) {
        rc = cli_parse_args(cmd, argc, argv, &parser, &target);
    }
    if (rc == CLI_CONTINUE && o.iters != 0 && o.seconds != 0) {
        rc = cli_usage_error(cmd, "--iters and --seconds exclude each other");
    }
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    if (o.iters == 0 && o.seconds == 0) {
        o.seconds = 2;
    }
    rc = cli_session_open(&s, cmd, target, true, &o.client);
    if (rc != 0) {
        return rc;
    }
    rc = cli_bench_all(&s, &o);
    cli_session_close(&s);
    return rc;
}

const cli_command_t cli_cmd_bench = {
    .name    = "bench",
    .summary = "measure read or write throughput and latency of a region",
    .usage   =
        "usage: remora bench HOST:PORT/NAME [--op read|write] [--size S[,S...]]\n"
        "                    [--depth D] [--iters N | --seconds T] [--work-us U]\n"
        "                    [--json] [--gpu N] [CLIENT OPTIONS]\n"
        "\n"
        "For each block size keep D requests in flight on successive blocks of the\n"
        "region (wrapping around), after a short warm-up. Report throughput in GB/s\n"
        "(1e9 bytes/s) and request latency (post to completion) in microseconds.\n"
        "--op write overwrites the region's contents.\n"
        "\n"
        "  --op OP           read (default) or write\n"
        "  --size LIST       block sizes, comma-separated (default " CLI_BENCH_DEFAULT_SIZES ");\n"
        "                    each must fit in the region\n"
        "  --depth D         requests in flight (default 1: latency is the round trip)\n"
        "  --iters N         requests per size\n"
        "  --seconds T       time per size (default 2)\n"
        "  --work-us U       after each completion, U microseconds of busy work (an\n"
        "                    application processing the block) before the next post\n"
        "  --json            one JSON object per size per line, keys op, size, depth,\n"
        "                    iters, gbps, lat_us_avg, lat_us_p50, lat_us_p99, path,\n"
        "                    work_us\n"
        "  --gpu N           the local buffers live in memory on GPU N\n"
        CLI_CLIENT_HELP,
    .run     = cli_bench_run,
};
