/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora read and write: move a byte range of a region to or from a file,
 * stdout/stdin or the test pattern.
 *
 * Large ranges stream through two buffers of at most CLI_CHUNK_MAX bytes:
 * while one chunk is on the network the other is written out (read) or filled
 * (write), so a 4 GiB region needs 64 MiB of memory and file I/O overlaps the
 * transfer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum {
    CLI_OPT_OFFSET = CLI_OPT_CMD,
    CLI_OPT_LENGTH,
    CLI_OPT_VERIFY,
    CLI_OPT_PATTERN,
    CLI_OPT_GPU,
    CLI_OPT_JSON,
};

/** One of the two streaming buffers and the request using it. */
typedef struct cli_slot {
    void            *buf;
    cli_buffer_t     mem;  /* what buf is (host or GPU) */
    remora_request_h req; /* NULL when idle */
    uint64_t         offset;
    size_t           len;
} cli_slot_t;

/** What happens to each chunk read: returns 0 or an exit code. */
typedef int (*cli_sink_fn)(void *arg, const void *buf, uint64_t offset, size_t len);

/** Fills buf with up to cap bytes of data for offset; *got < cap only at the end. */
typedef int (*cli_source_fn)(void *arg, void *buf, uint64_t offset, size_t cap, size_t *got);

/* ---------------------------------------------------------------- streaming */

/* Two buffers of up to CLI_CHUNK_MAX bytes, on the host or on GPU gpu (>= 0). */
static int cli_slots_alloc(const cli_session_t *s, cli_slot_t slots[2], uint64_t total, int gpu)
{
    size_t chunk = total < CLI_CHUNK_MAX ? (size_t)total : CLI_CHUNK_MAX;
    int rc = 0;

    memset(slots, 0, 2 * sizeof(slots[0]));
    for (int i = 0; i < 2 && rc == 0 && chunk && (i == 0 || total > chunk); i++) {
        rc = cli_buffer_alloc(s, gpu, chunk, &slots[i].mem);
        slots[i].buf = slots[i].mem.ptr;
    }
    if (rc != 0) {
        cli_buffer_free(&slots[0].mem);
        cli_buffer_free(&slots[1].mem);
    }
    return rc;
}

/* Release what is still in flight (after an error) and free the buffers. */
static void cli_slots_free(cli_slot_t slots[2])
{
    for (int i = 0; i < 2; i++) {
        if (slots[i].req != NULL) {
            remora_request_release(slots[i].req);
        }
        cli_buffer_free(&slots[i].mem);
    }
}

/* Post a read of the next chunk of [*next, end) into slot, if any is left. */
static int cli_read_post(const cli_session_t *s, cli_slot_t *slot, uint64_t *next, uint64_t end)
{
    remora_status_t status;

    if (*next >= end) {
        return 0;
    }
    slot->offset = *next;
    slot->len = end - *next < CLI_CHUNK_MAX ? (size_t)(end - *next) : CLI_CHUNK_MAX;
    status = remora_client_read_nb(s->client, s->target.name, slot->offset, slot->buf,
                                   slot->len, &slot->req);
    if (status != REMORA_OK) {
        return cli_io_error(s, status, false, slot->offset, slot->len);
    }
    *next += slot->len;
    return 0;
}

/* Read [offset, offset+length) and hand it to sink in order, chunk by chunk. */
static int cli_read_stream(const cli_session_t *s, uint64_t offset, uint64_t length, int gpu,
                           cli_sink_fn sink, void *arg)
{
    cli_slot_t slots[2];
    uint64_t next = offset;
    unsigned cur = 0;
    int rc = cli_slots_alloc(s, slots, length, gpu);

    if (rc == 0) {
        rc = cli_read_post(s, &slots[0], &next, offset + length);
    }
    while (rc == 0 && slots[cur].req != NULL) {
        cli_slot_t *slot = &slots[cur];
        rc = cli_read_post(s, &slots[cur ^ 1], &next, offset + length);
        if (rc == 0) {
            rc = cli_request_finish(s, &slot->req, false, slot->offset, slot->len);
        }
        if (rc == 0) {
            rc = sink(arg, slot->buf, slot->offset, slot->len);
        }
        cur ^= 1;
    }
    cli_slots_free(slots);
    return rc;
}

/*
 * Write data from source to the region from offset on, at most limit bytes;
 * *written gets the count. A slot is refilled only after its previous write
 * completed. A source that fills less than asked has reached its end.
 */
static int cli_write_stream(const cli_session_t *s, uint64_t offset, uint64_t limit,
                            cli_source_fn source, void *arg, uint64_t *written)
{
    cli_slot_t slots[2];
    uint64_t done = 0;
    unsigned cur = 0;
    bool end = false;
    int rc = cli_slots_alloc(s, slots, limit, -1);

    while (rc == 0 && done < limit && !end) {
        cli_slot_t *slot = &slots[cur];
        size_t cap = limit - done < CLI_CHUNK_MAX ? (size_t)(limit - done) : CLI_CHUNK_MAX;
        remora_status_t status;

        if (slot->req != NULL) {
            rc = cli_request_finish(s, &slot->req, true, slot->offset, slot->len);
        }
        if (rc == 0) {
            slot->offset = offset + done;
            rc = source(arg, slot->buf, slot->offset, cap, &slot->len);
        }
        if (rc != 0 || slot->len == 0) {
            break;
        }
        status = remora_client_write_nb(s->client, s->target.name, slot->offset, slot->buf,
                                        slot->len, &slot->req);
        if (status != REMORA_OK) {
            rc = cli_io_error(s, status, true, slot->offset, slot->len);
        }
        done += slot->len;
        end = slot->len < cap;
        cur ^= 1;
    }
    for (int i = 0; i < 2 && rc == 0; i++) {
        if (slots[i].req != NULL) {
            rc = cli_request_finish(s, &slots[i].req, true, slots[i].offset, slots[i].len);
        }
    }
    cli_slots_free(slots);
    *written = done;
    return rc;
}

/* ---------------------------------------------------------------- shared */

typedef struct cli_range_opts {
    uint64_t offset;
    uint64_t length;
    bool     length_set;
} cli_range_opts_t;

static int cli_range_option(const cli_command_t *cmd, int opt, const char *arg,
                            cli_range_opts_t *range)
{
    if (opt == CLI_OPT_OFFSET) {
        return cli_opt_number(cmd, "--offset", arg, 0, UINT64_MAX, &range->offset);
    }
    range->length_set = true;
    return cli_opt_number(cmd, "--length", arg, 0, UINT64_MAX, &range->length);
}

/* Once all options are in: the range must not run past 2^64. */
static int cli_range_check(const cli_command_t *cmd, const cli_range_opts_t *range)
{
    if (range->length_set && range->length > UINT64_MAX - range->offset) {
        return cli_usage_error(cmd, "--offset plus --length overflows 64 bits");
    }
    return CLI_CONTINUE;
}

/* Without --length, the range runs to the end of the region: ask its size. */
static int cli_range_resolve(const cli_session_t *s, cli_range_opts_t *range)
{
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE};
    int rc;

    if (range->length_set) {
        return 0;
    }
    rc = cli_session_lookup(s, &info);
    if (rc != 0) {
        return rc;
    }
    if (range->offset > info.size) {
        return cli_session_error(s, REMORA_ERR_OUT_OF_RANGE,
                                 "offset %llu is past the end of the region (%llu bytes)",
                                 (unsigned long long)range->offset,
                                 (unsigned long long)info.size);
    }
    range->length = info.size - range->offset;
    return 0;
}

/* "N bytes (H) in S s, X GB/s" on stderr. */
static void cli_print_rate(const char *verb, uint64_t bytes, double seconds)
{
    char human[32];
    double gbps = seconds > 0 ? (double)bytes / seconds / 1e9 : 0;

    fprintf(stderr, "%s %llu bytes (%s) in %.6f s, %.3f GB/s\n", verb,
            (unsigned long long)bytes, remora_format_size(bytes, human, sizeof(human)), seconds,
            gbps);
}

/* --json: one object on stdout, {op, target, offset, bytes, seconds, gbps, verified}. */
static void cli_print_json(const char *op, const char *target, uint64_t offset, uint64_t bytes,
                           double seconds, bool verified)
{
    char t[6 * (REMORA_HOST_MAX + REMORA_NAME_MAX + 8) + 3];

    remora_json_string(target, t, sizeof(t));
    printf("{\"op\":\"%s\",\"target\":%s,\"offset\":%llu,\"bytes\":%llu,\"seconds\":%.6f,"
           "\"gbps\":%.3f,\"verified\":%s}\n",
           op, t, (unsigned long long)offset, (unsigned long long)bytes, seconds,
           seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0, verified ? "true" : "false");
    fflush(stdout);
}

/* Open an input; "-" or NULL is stdin. */
static FILE *cli_open_input(const cli_session_t *s, const char *path)
{
    FILE *f;

    if (path == NULL || strcmp(path, "-") == 0) {
        return stdin;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        cli_session_error(s, REMORA_OK, "cannot open '%s': %s", path, strerror(errno));
    }
    return f;
}

/* ---------------------------------------------------------------- read */

typedef struct cli_read_opts {
    cli_range_opts_t  range;
    const char       *output;
    bool              verify;
    bool              json;
    int               gpu;    /* read into GPU memory on this device; -1: host */
    cli_client_opts_t client;
} cli_read_opts_t;

/** Where read chunks go. */
typedef struct cli_read_sink {
    const cli_session_t *s;
    FILE                *out;      /* NULL: not written anywhere */
    const char          *out_name;
    bool                 verify;
    int64_t              mismatch; /* absolute offset of the first bad byte, or -1 */
    uint8_t              got;
    void                *bounce;   /* --gpu: the chunk copied back from the GPU */
} cli_read_sink_t;

static int cli_read_sink(void *arg, const void *buf, uint64_t offset, size_t len)
{
    cli_read_sink_t *k = arg;
    int sig = cli_interrupted();

    if (sig != 0) { /* only while a file output is open: it is dropped */
        return cli_interrupted_error(k->s->cmd->name, k->s->target_text, k->out_name, sig);
    }
    if (k->bounce != NULL && (k->out != NULL || k->verify)) {
        /* The bytes landed in GPU memory: check what is there. */
        remora_status_t st = remora_copy(k->bounce, buf, len);
        if (st != REMORA_OK) {
            return cli_session_error(k->s, st, "cannot copy from the GPU");
        }
        buf = k->bounce;
    }
    if (k->out != NULL && fwrite(buf, 1, len, k->out) != len) {
        return cli_session_error(k->s, REMORA_OK, "cannot write '%s': %s", k->out_name,
                                 strerror(errno));
    }
    if (k->verify) {
        int64_t bad = remora_pattern_check(buf, offset, len);
        if (bad >= 0) {
            k->mismatch = (int64_t)offset + bad;
            k->got = ((const uint8_t *)buf)[bad];
            return CLI_EXIT_MISMATCH;
        }
    }
    return 0;
}

static int cli_read_report(const cli_read_sink_t *k, const cli_read_opts_t *o, double seconds)
{
    if (k->mismatch >= 0) {
        cli_session_error(k->s, REMORA_OK,
                          "verify failed: first mismatch at offset %lld "
                          "(expected 0x%02x, got 0x%02x)",
                          (long long)k->mismatch, remora_pattern_byte((uint64_t)k->mismatch),
                          k->got);
        return CLI_EXIT_MISMATCH;
    }
    if (o->json) {
        cli_print_json("read", k->s->target_text, o->range.offset, o->range.length, seconds,
                       o->verify);
    } else if (o->verify) {
        fprintf(stderr, "verified %llu bytes at offset %llu: ok\n",
                (unsigned long long)o->range.length, (unsigned long long)o->range.offset);
    } else if (o->output == NULL) {
        cli_print_rate("read", o->range.length, seconds);
    }
    return 0;
}

/* Read the range into the sink (and out, when not NULL), time it, and report. */
static int cli_read_transfer(const cli_session_t *s, const cli_read_opts_t *o, FILE *out)
{
    cli_read_sink_t k = {.s = s, .out = out, .out_name = o->output, .verify = o->verify,
                         .mismatch = -1};
    double start;
    int rc;

    if (o->gpu >= 0 && (k.bounce = malloc(CLI_CHUNK_MAX)) == NULL) {
        return cli_session_error(s, REMORA_ERR_NO_MEMORY, NULL);
    }
    start = cli_now();
    rc = cli_read_stream(s, o->range.offset, o->range.length, o->gpu, cli_read_sink, &k);
    free(k.bounce);
    if (rc != 0 && rc != CLI_EXIT_MISMATCH) {
        return rc;
    }
    return cli_read_report(&k, o, cli_now() - start);
}

/* Parse a read or write command line and check its --offset/--length. */
static int cli_parse_ranged(const cli_command_t *cmd, int argc, char **argv, cli_parser_t *parser,
                            cli_range_opts_t *range, const char **target)
{
    int rc = cli_parse_args(cmd, argc, argv, parser, target);

    return rc == CLI_CONTINUE ? cli_range_check(cmd, range) : rc;
}

static int cli_read_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_read_opts_t *o = opts;

    switch (opt) {
    case 'o':
        o->output = arg;
        return CLI_CONTINUE;
    case CLI_OPT_VERIFY:
        o->verify = true;
        return CLI_CONTINUE;
    case CLI_OPT_JSON:
        o->json = true;
        return CLI_CONTINUE;
    case CLI_OPT_GPU:
        return cli_opt_gpu(cmd, arg, &o->gpu);
    default:
        return cli_range_option(cmd, opt, arg, &o->range);
    }
}

static int cli_read_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"offset", required_argument, NULL, CLI_OPT_OFFSET},
        {"length", required_argument, NULL, CLI_OPT_LENGTH},
        {"output", required_argument, NULL, 'o'},
        {"verify", no_argument, NULL, CLI_OPT_VERIFY},
        {"gpu", required_argument, NULL, CLI_OPT_GPU},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_read_opts_t o = {.gpu = -1};
    cli_parser_t parser = {"o:", longopts, cli_read_option, &o, &o.client};
    cli_output_t out;
    cli_session_t s;
    const char *target;
    int rc;

    rc = cli_parse_ranged(cmd, argc, argv, &parser, &o.range, &target);
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    if (o.json && o.output != NULL && strcmp(o.output, "-") == 0) {
        return cli_usage_error(cmd, "--json prints to stdout: not with -o -");
    }
    /* The output first: a target that cannot be one is refused before connecting. */
    if (o.output != NULL && (rc = cli_output_open(&out, cmd->name, target, o.output)) != 0) {
        return rc;
    }
    rc = cli_session_open(&s, cmd, target, true, &o.client);
    if (rc == 0) {
        rc = cli_range_resolve(&s, &o.range);
        if (rc == 0) {
            rc = cli_read_transfer(&s, &o, o.output != NULL ? out.f : NULL);
        }
        cli_session_close(&s);
    }
    if (o.output != NULL) {
        if (rc == 0) {
            rc = cli_output_commit(&out, cmd->name, target);
        } else {
            cli_output_abort(&out);
        }
    }
    return rc;
}

const cli_command_t cli_cmd_read = {
    .name    = "read",
    .summary = "read a byte range of a region to a file, stdout, or verify it",
    .usage   =
        "usage: remora read HOST:PORT/NAME [--offset N] [--length N] [-o FILE|-]\n"
        "                   [--verify] [--gpu N] [--json] [CLIENT OPTIONS]\n"
        "\n"
        "Read LENGTH bytes at OFFSET of region NAME. Without -o or --verify, print\n"
        "the bytes, time and GB/s (10^9 bytes/s) to stderr.\n"
        "\n"
        "  --offset N        first byte (default 0)\n"
        "  --length N        bytes to read (default: to the end of the region)\n"
        "  -o, --output F    write the bytes to file F, or to stdout for '-'. F is\n"
        "                    replaced only once every byte has arrived and is on\n"
        "                    disk (a temporary file in F's directory is renamed\n"
        "                    over it); after any failure, SIGINT or SIGTERM F is\n"
        "                    left as it was and no temporary file remains. F must\n"
        "                    be a regular file or not exist (a device, FIFO or\n"
        "                    directory is refused); a replaced F keeps its mode\n"
        "  --verify          check the bytes against the test pattern at their\n"
        "                    offsets; exit 3 and name the first bad offset if not\n"
        "  --gpu N           read into memory on GPU N (checked there by copying it\n"
        "                    back for --verify and -o)\n"
        "  --json            print one JSON object to stdout when done: op, target,\n"
        "                    offset, bytes, seconds, gbps, verified (not with -o -)\n"
        CLI_CLIENT_HELP
        "\n"
        "Exit status: 0 done, 1 failed, 2 bad command line, 3 --verify found a bad\n"
        "byte, 130/143 interrupted by SIGINT/SIGTERM while writing -o F.\n",
    .run     = cli_read_run,
};

/* ---------------------------------------------------------------- write */

typedef struct cli_write_opts {
    cli_range_opts_t  range;
    const char       *input;
    bool              pattern;
    bool              json;
    cli_client_opts_t client;
} cli_write_opts_t;

static int cli_pattern_source(void *arg, void *buf, uint64_t offset, size_t cap, size_t *got)
{
    (void)arg;
    remora_pattern_fill(buf, offset, cap);
    *got = cap;
    return 0;
}

typedef struct cli_file_source {
    const cli_session_t *s;
    FILE                *in;
    const char          *name;
} cli_file_source_t;

static int cli_file_source(void *arg, void *buf, uint64_t offset, size_t cap, size_t *got)
{
    cli_file_source_t *src = arg;

    (void)offset;
    *got = fread(buf, 1, cap, src->in);
    if (*got < cap && ferror(src->in)) {
        return cli_session_error(src->s, REMORA_OK, "cannot read '%s': %s", src->name,
                                 strerror(errno));
    }
    return 0;
}

/* Write the input (or pattern) to the range; an input shorter than --length is an error. */
static int cli_write_transfer(const cli_session_t *s, const cli_write_opts_t *o)
{
    cli_file_source_t file = {.s = s, .name = o->input != NULL ? o->input : "-"};
    uint64_t limit = o->range.length_set || o->pattern ? o->range.length : UINT64_MAX;
    uint64_t written = 0;
    double start;
    int rc;

    if (!o->pattern) {
        file.in = cli_open_input(s, o->input);
        if (file.in == NULL) {
            return CLI_EXIT_RUNTIME;
        }
    }
    start = cli_now();
    rc = cli_write_stream(s, o->range.offset, limit,
                          o->pattern ? cli_pattern_source : cli_file_source, &file, &written);
    if (file.in != NULL && file.in != stdin) {
        fclose(file.in);
    }
    if (rc == 0 && o->range.length_set && written < o->range.length) {
        rc = cli_session_error(s, REMORA_OK, "input '%s' ended after %llu of %llu bytes",
                               file.name, (unsigned long long)written,
                               (unsigned long long)o->range.length);
    }
    if (rc == 0 && o->json) {
        cli_print_json("write", s->target_text, o->range.offset, written, cli_now() - start,
                       false);
    } else if (rc == 0) {
        cli_print_rate("wrote", written, cli_now() - start);
    }
    return rc;
}

static int cli_write_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_write_opts_t *o = opts;

    switch (opt) {
    case 'i':
        o->input = arg;
        return CLI_CONTINUE;
    case CLI_OPT_PATTERN:
        o->pattern = true;
        return CLI_CONTINUE;
    case CLI_OPT_JSON:
        o->json = true;
        return CLI_CONTINUE;
    default:
        return cli_range_option(cmd, opt, arg, &o->range);
    }
}

static int cli_write_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"offset", required_argument, NULL, CLI_OPT_OFFSET},
        {"length", required_argument, NULL, CLI_OPT_LENGTH},
        {"input", required_argument, NULL, 'i'},
        {"pattern", no_argument, NULL, CLI_OPT_PATTERN},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_write_opts_t o = {0};
    cli_parser_t parser = {"i:", longopts, cli_write_option, &o, &o.client};
    cli_session_t s;
    const char *target;
    int rc;

    rc = cli_parse_ranged(cmd, argc, argv, &parser, &o.range, &target);
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    if (o.pattern && o.input != NULL) {
        return cli_usage_error(cmd, "--pattern and -i exclude each other");
    }
    rc = cli_session_open(&s, cmd, target, true, &o.client);
    if (rc != 0) {
        return rc;
    }
    rc = o.pattern ? cli_range_resolve(&s, &o.range) : 0;
    if (rc == 0) {
        rc = cli_write_transfer(&s, &o);
    }
    cli_session_close(&s);
    return rc;
}

const cli_command_t cli_cmd_write = {
    .name    = "write",
    .summary = "write a file, stdin or the test pattern into a region",
    .usage   =
        "usage: remora write HOST:PORT/NAME [--offset N] [-i FILE|-] [--length N]\n"
        "       remora write HOST:PORT/NAME [--offset N] --pattern [--length N]\n"
        "                    [--json] [CLIENT OPTIONS]\n"
        "\n"
        "Write bytes into region NAME (it must be exposed writable) starting at\n"
        "OFFSET, then print the bytes, time and GB/s (10^9 bytes/s) to stderr.\n"
        "\n"
        "  --offset N        first byte (default 0)\n"
        "  -i, --input F     read the bytes from file F, or stdin for '-' (default)\n"
        "  --pattern         write the test pattern of the range's offsets instead\n"
        "  --length N        bytes to write; with -i the input must have that many\n"
        "                    (default: all input; with --pattern, to the region's end)\n"
        "  --json            print one JSON object to stdout when done: op, target,\n"
        "                    offset, bytes, seconds, gbps, verified (false)\n"
        CLI_CLIENT_HELP,
    .run     = cli_write_run,
};
