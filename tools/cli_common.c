/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Option parsing, error reporting and client sessions shared by every command.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- reporting */

/* Format the whole line first: stderr is unbuffered, and the library may log
 * from its progress thread, so one write keeps the line in one piece. */
__attribute__((format(printf, 5, 0)))
static void cli_vreport(const char *cmd, const char *target, remora_status_t status,
                        const char *suffix, const char *fmt, va_list ap)
{
    char line[1536];
    size_t n = (size_t)snprintf(line, sizeof(line), "remora: %s%s%s: ", cmd,
                                target != NULL ? " " : "", target != NULL ? target : "");

    if (fmt != NULL && n < sizeof(line)) {
        n += (size_t)vsnprintf(line + n, sizeof(line) - n, fmt, ap);
        if (status != REMORA_OK && n < sizeof(line)) {
            n += (size_t)snprintf(line + n, sizeof(line) - n, ": ");
        }
    }
    if (status != REMORA_OK && n < sizeof(line)) {
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s", remora_status_string(status));
    }
    if (suffix != NULL && n < sizeof(line)) {
        snprintf(line + n, sizeof(line) - n, "%s", suffix);
    }
    fprintf(stderr, "%s\n", line);
}

int cli_error(const char *cmd, const char *target, remora_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cli_vreport(cmd, target, status, NULL, fmt, ap);
    va_end(ap);
    return CLI_EXIT_RUNTIME;
}

int cli_usage_error(const cli_command_t *cmd, const char *fmt, ...)
{
    char suffix[64];
    va_list ap;

    snprintf(suffix, sizeof(suffix), " (see 'remora %s --help')", cmd->name);
    va_start(ap, fmt);
    cli_vreport(cmd->name, NULL, REMORA_OK, suffix, fmt, ap);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

double cli_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- options */

int cli_opt_number(const cli_command_t *cmd, const char *name, const char *arg, uint64_t min,
                   uint64_t max, uint64_t *out)
{
    uint64_t v;

    if (remora_parse_size(arg, &v) != 0) {
        return cli_usage_error(cmd, "bad %s '%s': expected a non-negative integer, optionally "
                               "with a K, M, G or T suffix", name, arg);
    }
    if (v < min || v > max) {
        return cli_usage_error(cmd, "%s %s is out of range (%llu to %llu)", name, arg,
                               (unsigned long long)min, (unsigned long long)max);
    }
    *out = v;
    return CLI_CONTINUE;
}

int cli_opt_seconds(const cli_command_t *cmd, const char *name, const char *arg, bool allow_zero,
                    double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno || !isfinite(v) || v < 0 || (v == 0 && !allow_zero) ||
        v > 1e7)
        return cli_usage_error(cmd, "bad %s '%s': expected a duration in seconds, e.g. 0.5",
                               name, arg);
    *out = v;
    return CLI_CONTINUE;
}

int cli_load_token(const cli_command_t *cmd, const char *path, cli_token_t *token)
{
    /* Room for a maximal token plus "\r\n" and one byte to detect "too long". */
    char buf[REMORA_TOKEN_MAX + 3];
    size_t len;
    FILE *f = fopen(path, "rb");

    if (f == NULL) {
        return cli_usage_error(cmd, "cannot open token file '%s': %s", path, strerror(errno));
    }
    len = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        fclose(f);
        return cli_usage_error(cmd, "cannot read token file '%s': %s", path, strerror(errno));
    }
    fclose(f);
    if (len > 0 && buf[len - 1] == '\n') {
        len--;
        if (len > 0 && buf[len - 1] == '\r') {
            len--;
        }
    }
    if (len == 0) {
        return cli_usage_error(cmd, "token file '%s' is empty", path);
    }
    if (len < CLI_TOKEN_MIN) {
        return cli_usage_error(cmd, "token in '%s' is %zu byte%s; at least %d are required",
                               path, len, len == 1 ? "" : "s", CLI_TOKEN_MIN);
    }
    if (len > REMORA_TOKEN_MAX) {
        return cli_usage_error(cmd, "token in '%s' is longer than %d bytes", path,
                               REMORA_TOKEN_MAX);
    }
    memcpy(token->bytes, buf, len);
    token->len = len;
    return CLI_CONTINUE;
}

static int cli_parse_path(const cli_command_t *cmd, const char *arg, remora_path_t *path)
{
    char names[64] = "";

    if (remora_path_parse(arg, path) == REMORA_OK)
        return CLI_CONTINUE;
    for (int p = REMORA_PATH_AUTO; p <= REMORA_PATH_STAGING; p++)
        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                 p == REMORA_PATH_AUTO ? "" : ", ", remora_path_string((remora_path_t)p));
    return cli_usage_error(cmd, "bad --path '%s': expected one of %s", arg, names);
}

/* Handle an option every client command takes; 0 when opt is not one of them. */
static int cli_client_option(const cli_command_t *cmd, int opt, const char *arg,
                             cli_client_opts_t *client)
{
    uint64_t v = 0;
    int rc;

    switch (opt) {
    case CLI_OPT_TOKEN_FILE:
        return cli_load_token(cmd, arg, &client->token);
    case CLI_OPT_TIMEOUT:
        rc = cli_opt_number(cmd, "--timeout", arg, 1, INT32_MAX, &v);
        if (rc == CLI_CONTINUE) {
            client->timeout_ms = (int)v;
        }
        return rc;
    case CLI_OPT_PATH:
        client->path_set = true;
        return cli_parse_path(cmd, arg, &client->path);
    case CLI_OPT_LANES_CLIENT:
        return cli_opt_lanes(cmd, "--lanes", arg, &client->lanes);
    case CLI_OPT_ENCRYPT:
        client->encrypt = true;
        return CLI_CONTINUE;
    default:
        return 0;
    }
}

/* The option at argv[optind - 1] as typed, for messages about it. */
static const char *cli_bad_option(char **argv)
{
    return argv[optind - 1];
}

/* Dispatch one getopt_long result; returns CLI_CONTINUE or an exit code. */
static int cli_dispatch_option(const cli_command_t *cmd, int opt, char **argv,
                               const cli_parser_t *parser)
{
    int rc;

    switch (opt) {
    case 'h':
        fputs(cmd->usage, stdout);
        return CLI_EXIT_OK;
    case '?':
        /* optopt is the letter of a bad short option, 0 or a code for a long one. */
        if (optopt > ' ' && optopt < 0x7f) {
            return cli_usage_error(cmd, "unknown option '-%c'", optopt);
        }
        return cli_usage_error(cmd, "unrecognized option '%s'", cli_bad_option(argv));
    case ':':
        return cli_usage_error(cmd, "option '%s' needs a value", cli_bad_option(argv));
    default:
        break;
    }
    if (parser->client != NULL) {
        rc = cli_client_option(cmd, opt, optarg, parser->client);
        if (rc != 0) {
            return rc;
        }
    }
    if (parser->on_option == NULL) {
        return cli_usage_error(cmd, "unexpected option '%s'", cli_bad_option(argv));
    }
    return parser->on_option(cmd, opt, optarg, parser->opts);
}

int cli_parse_args(const cli_command_t *cmd, int argc, char **argv, const cli_parser_t *parser,
                   const char **operand)
{
    char shortopts[64];
    int opt;

    /* ':' first: report a missing value as ':' rather than '?'. */
    snprintf(shortopts, sizeof(shortopts), ":%sh", parser->shortopts);
    opterr = 0;
    optind = 0; /* GNU getopt: start over, in case argv was parsed before */
    while ((opt = getopt_long(argc, argv, shortopts, parser->longopts, NULL)) != -1) {
        int rc = cli_dispatch_option(cmd, opt, argv, parser);
        if (rc != CLI_CONTINUE) {
            return rc;
        }
    }
    if (operand == NULL) {
        if (optind < argc) {
            return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
        }
        return CLI_CONTINUE;
    }
    if (optind >= argc) {
        return cli_usage_error(cmd, "missing address");
    }
    if (optind + 1 < argc) {
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
    }
    *operand = argv[optind];
    return CLI_CONTINUE;
}

/* ---------------------------------------------------------------- sessions */

static int cli_parse_operand(const cli_command_t *cmd, const char *text, bool need_name,
                             remora_target_t *target)
{
    const char *form = need_name ? "HOST:PORT/NAME" : "HOST:PORT";
    const char *why;

    if (remora_parse_target(text, target, &why) != 0) {
        return cli_usage_error(cmd, "bad address '%s': %s; expected %s", text, why, form);
    }
    if (need_name && target->name[0] == '\0') {
        return cli_usage_error(cmd, "missing region name in '%s'; expected %s", text, form);
    }
    if (!need_name && target->name[0] != '\0') {
        return cli_usage_error(cmd, "unexpected region name in '%s'; expected %s", text, form);
    }
    if (target->port == 0) {
        return cli_usage_error(cmd, "bad address '%s': port 0 is only valid for --listen", text);
    }
    return 0;
}

int cli_session_context_at(cli_session_t *s, const cli_command_t *cmd, const char *listen)
{
    remora_context_params_t params = {
        .field_mask = REMORA_CONTEXT_FIELD_NAME,
        .name       = "remora-cli",
    };
    char host[256];
    remora_status_t status;

    /* A server's UCX listeners go where its own does (docs/security.md). */
    if (listen != NULL) {
        const char *start = listen[0] == '[' ? listen + 1 : listen;
        const char *end   = listen[0] == '[' ? strchr(start, ']') : strrchr(start, ':');
        if (end != NULL && (size_t)(end - start) < sizeof(host)) {
            memcpy(host, start, (size_t)(end - start));
            host[end - start] = '\0';
            params.field_mask |= REMORA_CONTEXT_FIELD_BIND_HOST;
            params.bind_host   = host;
        }
    }
    memset(s, 0, sizeof(*s));
    s->cmd = cmd;
    status = remora_context_create(&params, &s->context);
    if (status != REMORA_OK) {
        return cli_error(cmd->name, NULL, status, "cannot create a context");
    }
    return 0;
}

void cli_warn_untokened(const cli_command_t *cmd, const char *addr, int has_token)
{
    if (has_token || strncmp(addr, "127.", 4) == 0 || strncmp(addr, "[::1]", 5) == 0 ||
        strncmp(addr, "localhost:", 10) == 0)
        return;
    fprintf(stderr,
            "remora %s: warning: listening on %s without --token-file: anyone who can reach "
            "this address may read every region and reach UCX (see docs/security.md)\n",
            cmd->name, addr);
}

int cli_session_context(cli_session_t *s, const cli_command_t *cmd)
{
    return cli_session_context_at(s, cmd, NULL);
}

static remora_client_params_t cli_client_params(const cli_client_opts_t *opts)
{
    remora_client_params_t params = {0};

    if (opts->timeout_ms > 0) {
        params.field_mask |= REMORA_CLIENT_FIELD_TIMEOUT;
        params.timeout_ms  = opts->timeout_ms;
    }
    if (opts->token.len > 0) {
        params.field_mask |= REMORA_CLIENT_FIELD_TOKEN;
        params.token       = opts->token.bytes;
        params.token_len   = opts->token.len;
    }
    if (opts->path_set) {
        params.field_mask |= REMORA_CLIENT_FIELD_PATH;
        params.path        = opts->path;
    }
    if (opts->lanes > 0) {
        params.field_mask |= REMORA_CLIENT_FIELD_LANES;
        params.lanes       = opts->lanes;
    }
    if (opts->reconnect) {
        params.field_mask      |= REMORA_CLIENT_FIELD_RECONNECT;
        params.reconnect.enable = 1;
        params.reconnect.give_up_ms = opts->reconnect_for_ms;
    }
    if (opts->event_cb) {
        params.field_mask |= REMORA_CLIENT_FIELD_EVENT_CB;
        params.event_cb    = opts->event_cb;
        params.event_arg   = opts->event_arg;
    }
    if (opts->encrypt) {
        params.field_mask |= REMORA_CLIENT_FIELD_ENCRYPT;
        params.encrypt     = 1;
    }
    return params;
}

int cli_session_open(cli_session_t *s, const cli_command_t *cmd, const char *target_text,
                     bool need_name, const cli_client_opts_t *opts)
{
    remora_client_params_t params = cli_client_params(opts);
    remora_target_t target;
    remora_status_t status;
    int rc;

    rc = cli_parse_operand(cmd, target_text, need_name, &target);
    if (rc != 0) {
        return rc;
    }
    rc = cli_session_context(s, cmd);
    if (rc != 0) {
        return rc;
    }
    s->target_text = target_text;
    s->target = target;
    status = remora_client_connect(s->context, target.addr, &params, &s->client);
    if (status != REMORA_OK) {
        rc = cli_session_error(s, status, "cannot connect");
        cli_session_close(s);
        return rc;
    }
    return 0;
}

void cli_session_close(cli_session_t *s)
{
    if (s->client != NULL) {
        remora_client_disconnect(s->client);
        s->client = NULL;
    }
    if (s->context != NULL) {
        remora_context_destroy(s->context);
        s->context = NULL;
    }
}

int cli_session_error(const cli_session_t *s, remora_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cli_vreport(s->cmd->name, s->target_text, status, NULL, fmt, ap);
    va_end(ap);
    return CLI_EXIT_RUNTIME;
}

int cli_session_lookup(const cli_session_t *s, remora_region_info_t *info)
{
    remora_status_t status = remora_client_lookup(s->client, s->target.name, info);

    if (status != REMORA_OK) {
        return cli_session_error(s, status, NULL);
    }
    return 0;
}

int cli_io_error(const cli_session_t *s, remora_status_t status, bool write, uint64_t offset,
                 uint64_t len)
{
    return cli_session_error(s, status, "%s %llu byte%s at offset %llu",
                             write ? "writing" : "reading", (unsigned long long)len,
                             len == 1 ? "" : "s", (unsigned long long)offset);
}

int cli_request_finish(const cli_session_t *s, remora_request_h *req, bool write,
                       uint64_t offset, uint64_t len)
{
    remora_status_t status = remora_request_wait(*req, -1);

    remora_request_release(*req);
    *req = NULL;
    if (status != REMORA_OK) {
        return cli_io_error(s, status, write, offset, len);
    }
    return 0;
}

/* ---------------------------------------------------------------- buffers */

int cli_opt_lanes(const cli_command_t *cmd, const char *name, const char *arg, unsigned *lanes)
{
    uint64_t v = 0;
    int rc = cli_opt_number(cmd, name, arg, 1, 8, &v);

    if (rc == CLI_CONTINUE) {
        *lanes = (unsigned)v;
    }
    return rc;
}

int cli_opt_gpu(const cli_command_t *cmd, const char *arg, int *gpu)
{
    uint64_t v = 0;
    int rc = cli_opt_number(cmd, "--gpu", arg, 0, 1023, &v);

    if (rc == CLI_CONTINUE) {
        *gpu = (int)v;
    }
    return rc;
}

int cli_buffer_alloc(const cli_session_t *s, int gpu, size_t len, cli_buffer_t *b)
{
    memset(b, 0, sizeof(*b));
    b->len = len;
    if (gpu < 0) {
        b->ptr = malloc(len ? len : 1);
        return b->ptr ? 0 : cli_session_error(s, REMORA_ERR_NO_MEMORY, "cannot allocate %zu bytes", len);
    }
    remora_mem_params_t p = {
        .field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE | REMORA_MEM_FIELD_DEVICE,
        .length = len ? len : 1, .type = REMORA_MEM_CUDA, .device = gpu};
    remora_status_t st = remora_mem_create(s->context, &p, &b->mem);
    if (st != REMORA_OK) {
        return cli_session_error(s, st, "cannot allocate %zu bytes on GPU %d", len, gpu);
    }
    b->ptr = remora_mem_address(b->mem);
    return 0;
}

void cli_buffer_free(cli_buffer_t *b)
{
    if (b->mem != NULL) {
        remora_mem_destroy(b->mem);
    } else {
        free(b->ptr);
    }
    memset(b, 0, sizeof(*b));
}

void cli_note(const char *who, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "remora %s: %s\n", who, line);
}
