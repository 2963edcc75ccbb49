/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora serve: expose library-allocated regions until SIGINT or SIGTERM.
 *
 * Design notes
 * - The regions are allocated by the library (no address given), so clients
 *   on the same host can map them.
 * - SIGINT and SIGTERM are blocked before the context (and with it the
 *   library's progress thread) exists, so every thread inherits the mask and
 *   the main thread alone takes them, synchronously, with sigtimedwait().
 *   Nothing runs in a signal handler.
 * - The main thread's wait doubles as the timer of --resize: it sleeps until
 *   the next resize is due or a signal arrives.
 * - stdout carries exactly one line, "listening HOST:PORT"; logs go to stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_stats.h"

#define CLI_SERVE_DEFAULT_LISTEN "127.0.0.1:60010"
#define CLI_SERVE_MAX_REGIONS    64
#define CLI_SERVE_MAX_RESIZES    64

enum {
    CLI_OPT_LISTEN = CLI_OPT_CMD,
    CLI_OPT_REGION,
    CLI_OPT_WRITABLE,
    CLI_OPT_RESIZE,
    CLI_OPT_GPU,
    CLI_OPT_LANES,
    CLI_OPT_METRICS,
    CLI_OPT_JSON,
};

typedef enum cli_fill {
    CLI_FILL_PATTERN,
    CLI_FILL_ZERO,
    CLI_FILL_FILE
} cli_fill_t;

/** A --region, and the memory we hold for it once created. */
typedef struct cli_region {
    char         name[REMORA_NAME_MAX + 1];
    uint64_t     size;
    cli_fill_t   fill;
    const char  *file; /* CLI_FILL_FILE: the path */
    bool         host; /* :host: in host memory even with --gpu */
    remora_mem_h mem;  /* our reference to the memory exposed now */
} cli_region_t;

/** A --resize NAME=SIZE@MS. */
typedef struct cli_resize {
    char     name[REMORA_NAME_MAX + 1];
    uint64_t size;
    uint64_t at_ms;  /* after "listening" was printed */
    size_t   region; /* index in regions[], resolved after parsing */
    bool     done;
} cli_resize_t;

typedef struct cli_serve_opts {
    const char  *listen;
    bool         writable;
    int          gpu;      /* regions in memory of this GPU; -1: host */
    unsigned     lanes;    /* --workers (--lanes): UCX workers serving, 1..8; 0: the library's choice */
    cli_token_t  token;
    bool         encrypt;
    const char  *metrics;  /* --metrics HOST:PORT or PORT; NULL: off */
    bool         json;     /* --json: the ready line as a JSON object */
    size_t       nregions;
    cli_region_t regions[CLI_SERVE_MAX_REGIONS];
    size_t       nresizes;
    cli_resize_t resizes[CLI_SERVE_MAX_RESIZES];
} cli_serve_opts_t;

/** The running server. */
typedef struct cli_server {
    cli_session_t     s; /* context; target_text is the listen address */
    cli_serve_opts_t *o;
    remora_server_h   server;
    char              addr[REMORA_HOST_MAX + 8];
    cli_metrics_t    *metrics;
} cli_server_t;

static const char *cli_fill_string(const cli_region_t *r)
{
    switch (r->fill) {
    case CLI_FILL_ZERO: return "zero";
    case CLI_FILL_FILE: return r->file;
    default:            return "pattern";
    }
}

/* ---------------------------------------------------------------- options */

/* Parse the size in s[0, n) (not NUL-terminated). */
static int cli_parse_size_n(const char *s, size_t n, uint64_t *out)
{
    char buf[32];

    if (n >= sizeof(buf)) {
        return -1;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return remora_parse_size(buf, out);
}

/* Copy the region name s[0, n) into name; -1 if empty or too long. */
static int cli_copy_name(const char *s, size_t n, char name[REMORA_NAME_MAX + 1])
{
    if (n == 0 || n > REMORA_NAME_MAX) {
        return -1;
    }
    memcpy(name, s, n);
    name[n] = '\0';
    return 0;
}

static cli_region_t *cli_find_region(cli_serve_opts_t *o, const char *name)
{
    for (size_t i = 0; i < o->nregions; i++) {
        if (strcmp(o->regions[i].name, name) == 0) {
            return &o->regions[i];
        }
    }
    return NULL;
}

/* The part after SIZE in NAME=SIZE[:pattern|:zero|:file=PATH][:host]; 0 or
 * -1. ":host" places a pattern- or zero-filled region in host memory even
 * with --gpu (a file's path is taken whole, so a file-filled one cannot). */
static int cli_parse_fill(const char *s, cli_region_t *r)
{
    size_t n = strcspn(s, "=");

    if (n >= 5 && s[n] == '\0' && strcmp(s + n - 5, ":host") == 0) {
        r->host = true;
        n -= 5;
    }
    if (n == 0 || (n == 8 && strncmp(s, ":pattern", n) == 0)) {
        r->fill = CLI_FILL_PATTERN;
    } else if (n == 5 && strncmp(s, ":zero", n) == 0) {
        r->fill = CLI_FILL_ZERO;
    } else if (!r->host && strncmp(s, ":file=", 6) == 0 && s[6] != '\0') {
        r->fill = CLI_FILL_FILE;
        r->file = s + 6;
    } else {
        return -1;
    }
    return 0;
}

static int cli_add_region(const cli_command_t *cmd, cli_serve_opts_t *o, const char *arg)
{
    const char *eq = strchr(arg, '='), *size;
    cli_region_t r = {0};
    size_t size_len;

    if (o->nregions == CLI_SERVE_MAX_REGIONS) {
        return cli_usage_error(cmd, "at most %d --region options", CLI_SERVE_MAX_REGIONS);
    }
    size = eq != NULL ? eq + 1 : "";
    size_len = strcspn(size, ":");
    if (eq == NULL || cli_copy_name(arg, (size_t)(eq - arg), r.name) != 0 ||
        cli_parse_size_n(size, size_len, &r.size) != 0 || cli_parse_fill(size + size_len, &r) != 0) {
        return cli_usage_error(cmd, "bad --region '%s': expected NAME=SIZE[:pattern|:zero|"
                               ":file=PATH][:host], NAME 1 to %d bytes", arg, REMORA_NAME_MAX);
    }
    if (r.size == 0 || r.size > SIZE_MAX) {
        return cli_usage_error(cmd, "bad --region '%s': size must be 1 to %zu bytes", arg,
                               (size_t)SIZE_MAX);
    }
    if (cli_find_region(o, r.name) != NULL) {
        return cli_usage_error(cmd, "region '%s' given twice", r.name);
    }
    o->regions[o->nregions++] = r;
    return CLI_CONTINUE;
}

static int cli_add_resize(const cli_command_t *cmd, cli_serve_opts_t *o, const char *arg)
{
    const char *eq = strchr(arg, '='), *at = eq != NULL ? strchr(eq, '@') : NULL;
    cli_resize_t z = {0};

    if (o->nresizes == CLI_SERVE_MAX_RESIZES) {
        return cli_usage_error(cmd, "at most %d --resize options", CLI_SERVE_MAX_RESIZES);
    }
    if (at == NULL || cli_copy_name(arg, (size_t)(eq - arg), z.name) != 0 ||
        cli_parse_size_n(eq + 1, (size_t)(at - eq - 1), &z.size) != 0 ||
        remora_parse_size(at + 1, &z.at_ms) != 0) {
        return cli_usage_error(cmd, "bad --resize '%s': expected NAME=SIZE@MS", arg);
    }
    if (z.size == 0 || z.size > SIZE_MAX) {
        return cli_usage_error(cmd, "bad --resize '%s': size must be 1 to %zu bytes", arg,
                               (size_t)SIZE_MAX);
    }
    o->resizes[o->nresizes++] = z;
    return CLI_CONTINUE;
}

static int cli_serve_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_serve_opts_t *o = opts;
    remora_target_t t;
    const char *why;

    switch (opt) {
    case CLI_OPT_LISTEN:
        if (remora_parse_target(arg, &t, &why) != 0) {
            return cli_usage_error(cmd, "bad --listen '%s': %s; expected HOST:PORT", arg, why);
        }
        if (t.name[0] != '\0') {
            return cli_usage_error(cmd, "bad --listen '%s': expected HOST:PORT, no '/NAME'", arg);
        }
        o->listen = arg;
        return CLI_CONTINUE;
    case CLI_OPT_REGION:
        return cli_add_region(cmd, o, arg);
    case CLI_OPT_WRITABLE:
        o->writable = true;
        return CLI_CONTINUE;
    case CLI_OPT_RESIZE:
        return cli_add_resize(cmd, o, arg);
    case CLI_OPT_TOKEN_FILE:
        return cli_load_token(cmd, arg, &o->token);
    case CLI_OPT_ENCRYPT:
        o->encrypt = true;
        return CLI_CONTINUE;
    case CLI_OPT_GPU:
        return cli_opt_gpu(cmd, arg, &o->gpu);
    case CLI_OPT_LANES:
        return cli_opt_lanes(cmd, "--workers", arg, &o->lanes);
    case CLI_OPT_METRICS:
        o->metrics = arg;
        return CLI_CONTINUE;
    case CLI_OPT_JSON:
        o->json = true;
        return CLI_CONTINUE;
    default:
        return cli_usage_error(cmd, "unexpected option");
    }
}

/* Every --resize must name a --region (they may come in any order). */
static int cli_resolve_resizes(const cli_command_t *cmd, cli_serve_opts_t *o)
{
    for (size_t i = 0; i < o->nresizes; i++) {
        cli_region_t *r = cli_find_region(o, o->resizes[i].name);
        if (r == NULL) {
            return cli_usage_error(cmd, "--resize of '%s', which no --region defines",
                                   o->resizes[i].name);
        }
        o->resizes[i].region = (size_t)(r - o->regions);
    }
    return CLI_CONTINUE;
}

/* ---------------------------------------------------------------- memory */

/* Copy the file into buf[0, size) and zero the rest; the file must fit. */
static int cli_fill_from_file(cli_server_t *sv, const char *path, void *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t got;
    int extra;

    if (f == NULL) {
        return cli_session_error(&sv->s, REMORA_OK, "cannot open '%s': %s", path,
                                 strerror(errno));
    }
    got = fread(buf, 1, size, f);
    extra = got == size ? fgetc(f) : EOF;
    if (ferror(f)) {
        fclose(f);
        return cli_session_error(&sv->s, REMORA_OK, "cannot read '%s': %s", path,
                                 strerror(errno));
    }
    fclose(f);
    if (extra != EOF) {
        return cli_session_error(&sv->s, REMORA_OK, "file '%s' is larger than its region "
                                 "(%zu bytes)", path, size);
    }
    memset((char *)buf + got, 0, size - got);
    return 0;
}

/* Allocate size bytes of shareable memory and fill them; *mem_p is set on success only. */
/* The GPU a region lives on, -1 for host memory. */
static int cli_region_gpu(const cli_server_t *sv, const cli_region_t *r)
{
    return r->host ? -1 : sv->o->gpu;
}

static int cli_mem_create(cli_server_t *sv, const cli_region_t *r, uint64_t size,
                          cli_fill_t fill, remora_mem_h *mem_p)
{
    remora_mem_params_t params = {
        .field_mask = REMORA_MEM_FIELD_LENGTH,
        .length     = (size_t)size,
    };
    int gpu = cli_region_gpu(sv, r);

    if (gpu >= 0) {
        params.field_mask |= REMORA_MEM_FIELD_TYPE | REMORA_MEM_FIELD_DEVICE;
        params.type   = REMORA_MEM_CUDA;
        params.device = gpu;
    }
    remora_mem_h mem;
    remora_status_t status = remora_mem_create(sv->s.context, &params, &mem);
    void *buf, *gpu_buf = NULL;
    int rc = 0;

    if (status != REMORA_OK) {
        return cli_session_error(&sv->s, status, "cannot allocate %llu bytes for region '%s'",
                                 (unsigned long long)size, r->name);
    }
    buf = remora_mem_address(mem);
    if (gpu >= 0) { /* fill on the host, then copy to the GPU */
        gpu_buf = buf;
        if ((buf = malloc((size_t)size)) == NULL) {
            remora_mem_destroy(mem);
            return cli_session_error(&sv->s, REMORA_ERR_NO_MEMORY, NULL);
        }
    }
    if (fill == CLI_FILL_PATTERN) {
        remora_pattern_fill(buf, 0, (size_t)size);
    } else if (fill == CLI_FILL_ZERO) {
        memset(buf, 0, (size_t)size);
    } else {
        rc = cli_fill_from_file(sv, r->file, buf, (size_t)size);
    }
    if (gpu_buf != NULL) {
        if (rc == 0 && (status = remora_copy(gpu_buf, buf, (size_t)size)) != REMORA_OK) {
            rc = cli_session_error(&sv->s, status, "cannot fill region '%s' on the GPU", r->name);
        }
        free(buf);
    }
    if (rc != 0) {
        remora_mem_destroy(mem);
        return rc;
    }
    *mem_p = mem;
    return 0;
}

static int cli_expose_all(cli_server_t *sv)
{
    remora_region_params_t params = {
        .field_mask = REMORA_REGION_FIELD_FLAGS,
        .flags      = sv->o->writable ? REMORA_REGION_WRITABLE : 0,
    };
    char human[32];

    for (size_t i = 0; i < sv->o->nregions; i++) {
        cli_region_t *r = &sv->o->regions[i];
        int rc = cli_mem_create(sv, r, r->size, r->fill, &r->mem);
        remora_status_t status;

        if (rc != 0) {
            return rc;
        }
        status = remora_server_expose(sv->server, r->name, r->mem, &params);
        if (status != REMORA_OK) {
            return cli_session_error(&sv->s, status, "cannot expose region '%s'", r->name);
        }
        cli_note("serve", "region %s: %s, %s, %s%s", r->name,
                remora_format_size(r->size, human, sizeof(human)), cli_fill_string(r),
                sv->o->writable ? "rw" : "ro", cli_region_gpu(sv, r) >= 0 ? ", on the GPU" : "");
    }
    return 0;
}

/* Replace the region with fresh pattern-filled memory of the new size. */
static void cli_resize(cli_server_t *sv, const cli_resize_t *z)
{
    cli_region_t *r = &sv->o->regions[z->region];
    remora_region_params_t params = {0}; /* keep the access flags */
    remora_mem_h mem;
    remora_status_t status;
    char human[32];

    if (cli_mem_create(sv, r, z->size, CLI_FILL_PATTERN, &mem) != 0) {
        return;
    }
    status = remora_server_replace(sv->server, r->name, mem, &params);
    if (status != REMORA_OK) {
        cli_session_error(&sv->s, status, "cannot resize region '%s'", r->name);
        remora_mem_destroy(mem);
        return;
    }
    remora_mem_destroy(r->mem);
    r->mem = mem;
    r->size = z->size;
    cli_note("serve", "region %s: resized to %s", r->name, remora_format_size(z->size, human, sizeof(human)));
}

/* ---------------------------------------------------------------- serving */

/* Run the resizes due at elapsed_ms; returns the ms of the next one, or -1 if none. */
static int64_t cli_run_due_resizes(cli_server_t *sv, uint64_t elapsed_ms)
{
    int64_t next = -1;

    for (size_t i = 0; i < sv->o->nresizes; i++) {
        cli_resize_t *z = &sv->o->resizes[i];
        if (!z->done && z->at_ms <= elapsed_ms) {
            cli_resize(sv, z);
            z->done = true;
        } else if (!z->done && (next < 0 || z->at_ms < (uint64_t)next)) {
            next = (int64_t)z->at_ms;
        }
    }
    return next;
}

static uint64_t cli_ms_since(double start)
{
    return (uint64_t)((cli_now() - start) * 1e3);
}

/* Serve until SIGINT or SIGTERM; *info says which, and who sent it. */
static void cli_wait_for_signal(cli_server_t *sv, const sigset_t *signals, siginfo_t *info)
{
    double start = cli_now();

    for (;;) {
        int64_t next_ms = cli_run_due_resizes(sv, cli_ms_since(start));
        uint64_t now_ms = cli_ms_since(start); /* a resize may have taken a while */
        int sig;

        if (next_ms < 0) {
            sig = sigwaitinfo(signals, info);
        } else {
            uint64_t wait_ms = (uint64_t)next_ms > now_ms ? (uint64_t)next_ms - now_ms : 0;
            struct timespec ts = {
                .tv_sec  = (time_t)(wait_ms / 1000),
                .tv_nsec = (long)(wait_ms % 1000) * 1000000L,
            };
            sig = sigtimedwait(signals, info, &ts);
        }
        if (sig > 0) {
            return;
        }
    }
}

/* Bind, expose and announce; returns 0 or an exit code. */
static int cli_server_start(cli_server_t *sv)
{
    remora_server_params_t params = {
        .field_mask  = REMORA_SERVER_FIELD_LISTEN_ADDR | REMORA_SERVER_FIELD_CONN_CB |
                       (sv->o->lanes ? REMORA_SERVER_FIELD_LANES : 0),
        .listen_addr = sv->o->listen,
        .lanes       = sv->o->lanes,
        .conn_cb     = cli_stats_conn_log,
        .conn_arg    = (void *)"serve",
    };
    remora_status_t status;
    int rc;

    if (sv->o->token.len > 0) {
        params.field_mask |= REMORA_SERVER_FIELD_TOKEN;
        params.token = sv->o->token.bytes;
        params.token_len = sv->o->token.len;
    }
    if (sv->o->encrypt) {
        params.field_mask |= REMORA_SERVER_FIELD_ENCRYPT;
        params.encrypt = 1;
    }
    status = remora_server_create(sv->s.context, &params, &sv->server);
    if (status != REMORA_OK) {
        return cli_session_error(&sv->s, status, status == REMORA_ERR_BUSY
                                                     ? "cannot listen: port in use"
                                                     : "cannot listen");
    }
    status = remora_server_address(sv->server, sv->addr, sizeof(sv->addr));
    if (status != REMORA_OK) {
        return cli_session_error(&sv->s, status, "cannot get the bound address");
    }
    sv->s.target_text = sv->addr;
    cli_warn_untokened(sv->s.cmd, sv->addr, sv->o->token.len > 0);
    rc = cli_expose_all(sv);
    if (rc != 0) {
        return rc;
    }
    char bound[REMORA_HOST_MAX + 8] = "";
    if (sv->o->metrics != NULL) {
        rc = cli_metrics_start(sv->s.cmd->name, sv->o->metrics, sv->server, &sv->o->token,
                               &sv->metrics, bound, sizeof(bound));
        if (rc != 0) {
            return rc;
        }
        cli_note("serve", "metrics on http://%s/metrics", bound);
    }
    if (sv->o->json && bound[0] != '\0') {
        printf("{\"listening\":\"%s\",\"metrics\":\"http://%s/metrics\"}\n", sv->addr, bound);
    } else if (sv->o->json) {
        printf("{\"listening\":\"%s\"}\n", sv->addr);
    } else {
        printf("listening %s\n", sv->addr);
    }
    fflush(stdout);
    return 0;
}

/* Destroy in reverse order of creation; the server lets go of the regions first. */
static void cli_server_stop(cli_server_t *sv)
{
    cli_metrics_stop(sv->metrics);
    if (sv->server != NULL) {
        remora_server_destroy(sv->server);
    }
    for (size_t i = 0; i < sv->o->nregions; i++) {
        if (sv->o->regions[i].mem != NULL) {
            remora_mem_destroy(sv->o->regions[i].mem);
        }
    }
    cli_session_close(&sv->s);
}

static int cli_serve_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, CLI_OPT_LISTEN},
        {"region", required_argument, NULL, CLI_OPT_REGION},
        {"writable", no_argument, NULL, CLI_OPT_WRITABLE},
        {"resize", required_argument, NULL, CLI_OPT_RESIZE},
        {"token-file", required_argument, NULL, CLI_OPT_TOKEN_FILE},
        {"encrypt", no_argument, NULL, CLI_OPT_ENCRYPT},
        {"gpu", required_argument, NULL, CLI_OPT_GPU},
        {"workers", required_argument, NULL, CLI_OPT_LANES},
        {"lanes", required_argument, NULL, CLI_OPT_LANES}, /* the older name */
        {"metrics", required_argument, NULL, CLI_OPT_METRICS},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_serve_opts_t o = {.listen = CLI_SERVE_DEFAULT_LISTEN, .gpu = -1, .lanes = 0};
    cli_parser_t parser = {"", longopts, cli_serve_option, &o, NULL};
    cli_server_t sv = {.o = &o};
    sigset_t signals;
    int rc;

    rc = cli_parse_args(cmd, argc, argv, &parser, NULL);
    if (rc == CLI_CONTINUE) {
        rc = cli_resolve_resizes(cmd, &o);
    }
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    cli_block_stop_signals(&signals); /* before any thread exists */
    rc = cli_session_context_at(&sv.s, cmd, o.listen);
    if (rc != 0) {
        return rc;
    }
    sv.s.target_text = o.listen;
    rc = cli_server_start(&sv);
    if (rc == 0) {
        siginfo_t info;
        cli_wait_for_signal(&sv, &signals, &info);
        cli_note("serve", "got %s from pid %ld, shutting down",
                info.si_signo == SIGINT ? "SIGINT" : "SIGTERM", (long)info.si_pid);
    }
    cli_server_stop(&sv);
    return rc;
}

const cli_command_t cli_cmd_serve = {
    .name    = "serve",
    .summary = "expose memory regions until SIGINT or SIGTERM",
    .usage   =
        "usage: remora serve [--listen HOST:PORT] [--region NAME=SIZE[:FILL]]...\n"
        "                    [--writable] [--token-file F [--encrypt]]\n"
        "                    [--resize NAME=SIZE@MS]... [--gpu N] [--workers N]\n"
        "                    [--metrics HOST:PORT] [--json]\n"
        "\n"
        "Expose library-allocated regions (same-host clients can map them). When\n"
        "ready, print one line 'listening HOST:PORT' to stdout; serve until SIGINT\n"
        "or SIGTERM, then shut down and exit 0. Logs go to stderr, among them one\n"
        "line per client connection and disconnection with its address.\n"
        "\n"
        "  --listen HOST:PORT  address to bind (default " CLI_SERVE_DEFAULT_LISTEN ";\n"
        "                      port 0 picks a free one)\n"
        "  --region NAME=SIZE[:pattern|:zero|:file=PATH][:host]\n"
        "                      a region of SIZE bytes, filled with the test pattern\n"
        "                      (default), zeros, or a file's bytes then zeros (the\n"
        "                      file must fit); :host keeps it in host memory with\n"
        "                      --gpu (not with :file=); repeatable\n"
        "  --writable          expose every region writable (default read-only)\n"
        "  --token-file F      require this shared token: the file's bytes less one\n"
        "                      trailing newline, at least 16 bytes\n"
        "  --encrypt           encrypt every connection, keyed from the token (off by\n"
        "                      default; clients must use --encrypt too)\n"
        "  --resize NAME=SIZE@MS\n"
        "                      MS milliseconds after 'listening', replace region\n"
        "                      NAME with fresh pattern-filled memory of SIZE (clients\n"
        "                      see a region-changed event and a new generation);\n"
        "                      repeatable\n"
        "  --gpu N             allocate every region in the memory of GPU N (filled\n"
        "                      on the host, then copied there)\n"
        "  --workers N         serve on N UCX workers, each with its own thread, sharing\n"
        "                      one region table; each connection goes to the one with\n"
        "                      the fewest, and clients with --lanes also spread large\n"
        "                      transfers over several (1..8; default $REMORA_WORKERS,\n"
        "                      else 1 up to 4 cores, one per 2 cores up to 8);\n"
        "                      --lanes N is the older name\n"
        "  --metrics HOST:PORT serve the counters (see 'remora stat') in Prometheus\n"
        "                      text format on GET /metrics at HOST:PORT; a bare PORT\n"
        "                      means 127.0.0.1:PORT (off by default); with\n"
        "                      --token-file, scrapes must send the token as\n"
        "                      'Authorization: Bearer TOKEN' (else 401)\n"
        "  --json              print the ready line as {\"listening\": \"HOST:PORT\"}\n"
        "                      (and \"metrics\": its URL with --metrics)\n"
        "  -h, --help          show this help\n",
    .run     = cli_serve_run,
};
