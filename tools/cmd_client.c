/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora ls, ping and info: the small client commands.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---------------------------------------------------------------- ls */

enum { CLI_OPT_JSON = CLI_OPT_CMD };

typedef struct cli_ls_opts {
    bool              json;
    cli_client_opts_t client;
} cli_ls_opts_t;

static const char *cli_mem_type_string(remora_mem_type_t type)
{
    switch (type) {
    case REMORA_MEM_HOST: return "host";
    case REMORA_MEM_CUDA: return "cuda";
    default:              return "unknown";
    }
}

static const char *cli_access_string(unsigned access)
{
    static const char *const names[] = {"--", "ro", "wo", "rw"};
    return names[access & (REMORA_ACCESS_READ | REMORA_ACCESS_WRITE)];
}

static void cli_ls_print_table(const remora_region_info_t *infos, size_t count)
{
    int width = 4;
    char human[32];

    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(infos[i].name);
        if (len > (size_t)width) {
            width = (int)len;
        }
    }
    printf("%-*s %20s %10s  %-4s  %-5s  %-6s  %s\n", width, "NAME", "SIZE", "", "TYPE", "KIND",
           "ACCESS", "GENERATION");
    for (size_t i = 0; i < count; i++) {
        const remora_region_info_t *r = &infos[i];
        printf("%-*s %20llu %10s  %-4s  %-5s  %-6s  %llu\n", width, r->name,
               (unsigned long long)r->size, remora_format_size(r->size, human, sizeof(human)),
               cli_mem_type_string(r->mem_type),
               r->kind == REMORA_REGION_RING ? "ring" : r->kind == REMORA_REGION_SIGNALS ? "signals" : "plain", cli_access_string(r->access),
               (unsigned long long)r->generation);
    }
}

static void cli_ls_print_json(const remora_region_info_t *infos, size_t count)
{
    char name[6 * REMORA_NAME_MAX + 3];
    char human[32];

    for (size_t i = 0; i < count; i++) {
        const remora_region_info_t *r = &infos[i];
        remora_json_string(r->name, name, sizeof(name));
        printf("{\"name\":%s,\"size\":%llu,\"size_human\":\"%s\",\"mem_type\":\"%s\","
               "\"kind\":\"%s\",\"access\":\"%s\",\"generation\":%llu}\n",
               name, (unsigned long long)r->size,
               remora_format_size(r->size, human, sizeof(human)),
               cli_mem_type_string(r->mem_type),
               r->kind == REMORA_REGION_RING ? "ring" : r->kind == REMORA_REGION_SIGNALS ? "signals" : "plain", cli_access_string(r->access),
               (unsigned long long)r->generation);
    }
}

static int cli_ls_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_ls_opts_t *o = opts;

    (void)arg;
    if (opt != CLI_OPT_JSON) {
        return cli_usage_error(cmd, "unexpected option");
    }
    o->json = true;
    return CLI_CONTINUE;
}

static int cli_ls_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, CLI_OPT_JSON},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_ls_opts_t o = {0};
    cli_parser_t parser = {"", longopts, cli_ls_option, &o, &o.client};
    remora_region_info_t *infos;
    remora_status_t status;
    cli_session_t s;
    const char *addr;
    size_t count;
    int rc;

    rc = cli_parse_args(cmd, argc, argv, &parser, &addr);
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    rc = cli_session_open(&s, cmd, addr, false, &o.client);
    if (rc != 0) {
        return rc;
    }
    status = remora_client_list(s.client, &infos, &count);
    if (status != REMORA_OK) {
        rc = cli_session_error(&s, status, "cannot list regions");
    } else {
        if (o.json) {
            cli_ls_print_json(infos, count);
        } else {
            cli_ls_print_table(infos, count);
        }
        remora_region_info_free(infos);
    }
    cli_session_close(&s);
    return rc;
}

const cli_command_t cli_cmd_ls = {
    .name    = "ls",
    .summary = "list the regions a server exposes",
    .usage   =
        "usage: remora ls HOST:PORT [--json] [CLIENT OPTIONS]\n"
        "\n"
        "List the regions of the server at HOST:PORT: name, size, memory type,\n"
        "access (ro/rw) and generation.\n"
        "\n"
        "  --json            one JSON object per region per line, keys name, size,\n"
        "                    size_human, mem_type, access, generation\n"
        CLI_CLIENT_HELP,
    .run     = cli_ls_run,
};

/* ---------------------------------------------------------------- ping */

typedef struct cli_ping_opts {
    uint64_t          count;
    bool              json;
    cli_client_opts_t client;
} cli_ping_opts_t;

static int cli_ping_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_ping_opts_t *o = opts;

    if (opt == CLI_OPT_JSON) {
        o->json = true;
        return CLI_CONTINUE;
    }
    if (opt != 'n') {
        return cli_usage_error(cmd, "unexpected option");
    }
    return cli_opt_number(cmd, "-n", arg, 1, 10000000, &o->count);
}

/* Ping count times, printing each round trip; samples[] gets them. */
static int cli_ping_loop(const cli_session_t *s, double *samples, size_t count, bool quiet)
{
    for (size_t i = 0; i < count; i++) {
        remora_status_t status = remora_client_ping(s->client, &samples[i]);
        if (status != REMORA_OK) {
            return cli_session_error(s, status, "ping %zu", i + 1);
        }
        if (!quiet) {
            printf("ping %zu: %.1f us\n", i + 1, samples[i]);
        }
    }
    return 0;
}

static int cli_ping_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"count", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, CLI_OPT_JSON},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_ping_opts_t o = {.count = 5};
    cli_parser_t parser = {"n:", longopts, cli_ping_option, &o, &o.client};
    remora_stats_t st;
    cli_session_t s;
    double *samples;
    const char *addr;
    int rc;

    rc = cli_parse_args(cmd, argc, argv, &parser, &addr);
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    samples = calloc(o.count, sizeof(*samples));
    if (samples == NULL) {
        return cli_error(cmd->name, addr, REMORA_ERR_NO_MEMORY, NULL);
    }
    rc = cli_session_open(&s, cmd, addr, false, &o.client);
    if (rc == 0) {
        rc = cli_ping_loop(&s, samples, o.count, o.json);
        cli_session_close(&s);
    }
    if (rc == 0 && o.json) {
        char t[6 * (REMORA_HOST_MAX + 8) + 3];
        remora_stats_compute(samples, o.count, &st);
        remora_json_string(addr, t, sizeof(t));
        printf("{\"target\":%s,\"count\":%zu,\"min_us\":%.1f,\"avg_us\":%.1f,\"p50_us\":%.1f,"
               "\"p99_us\":%.1f,\"max_us\":%.1f,\"rtt_us\":[",
               t, st.count, st.min, st.avg, st.p50, st.p99, st.max);
        for (size_t i = 0; i < o.count; i++) {
            printf("%s%.1f", i ? "," : "", samples[i]);
        }
        printf("]}\n");
    } else if (rc == 0) {
        remora_stats_compute(samples, o.count, &st);
        printf("%zu pings to %s: min/avg/p50/p99/max = %.1f/%.1f/%.1f/%.1f/%.1f us\n",
               st.count, addr, st.min, st.avg, st.p50, st.p99, st.max);
    }
    free(samples);
    return rc;
}

const cli_command_t cli_cmd_ping = {
    .name    = "ping",
    .summary = "measure round trips to a server",
    .usage   =
        "usage: remora ping HOST:PORT [-n COUNT] [--json] [CLIENT OPTIONS]\n"
        "\n"
        "Send COUNT pings one after another and print each round trip, then\n"
        "min/avg/p50/p99/max in microseconds.\n"
        "\n"
        "  -n, --count N     number of pings (default 5)\n"
        "  --json            one JSON object instead: target, count, min_us, avg_us,\n"
        "                    p50_us, p99_us, max_us, rtt_us [each round trip]\n"
        CLI_CLIENT_HELP,
    .run     = cli_ping_run,
};

/* ---------------------------------------------------------------- info */

static void cli_info_print(const remora_context_attr_t *attr)
{
    printf("remora %s\n", remora_version_string());
    printf("ucx %u.%u.%u\n", attr->ucx_major, attr->ucx_minor, attr->ucx_release);
    printf("transports: %s\n", attr->transports[0] != '\0' ? attr->transports : "(none)");
    printf("ucx memory types: host%s\n",
           (attr->ucx_mem_types & (1u << REMORA_MEM_CUDA)) != 0 ? ", cuda" : "");
    cli_info_print_cuda(attr);
}

static void cli_info_print_json(const remora_context_attr_t *attr)
{
    char t[6 * sizeof(attr->transports) + 3];
    remora_cuda_attr_t cuda = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                             REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION |
                                             REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT};

    remora_cuda_query(&cuda);
    remora_json_string(attr->transports, t, sizeof(t));
    printf("{\"version\":\"%s\",\"ucx\":\"%u.%u.%u\",\"transports\":%s,"
           "\"ucx_mem_types\":[\"host\"%s],\"cuda\":{\"available\":%s,"
           "\"driver_version\":%d,\"devices\":%d}}\n",
           remora_version_string(), attr->ucx_major, attr->ucx_minor, attr->ucx_release, t,
           (attr->ucx_mem_types & (1u << REMORA_MEM_CUDA)) != 0 ? ",\"cuda\"" : "",
           cuda.available ? "true" : "false", cuda.available ? cuda.driver_version : 0,
           cuda.available ? cuda.device_count : 0);
}

enum { CLI_OPT_INFO_CONFIG = CLI_OPT_CMD + 1 };

typedef struct cli_info_opts {
    bool json, config;
} cli_info_opts_t;

static int cli_info_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_info_opts_t *o = opts;

    (void)arg;
    if (opt == CLI_OPT_JSON) {
        o->json = true;
    } else if (opt == CLI_OPT_INFO_CONFIG) {
        o->config = true;
    } else {
        return cli_usage_error(cmd, "unexpected option");
    }
    return CLI_CONTINUE;
}

static int cli_info_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, CLI_OPT_JSON},
        {"config", no_argument, NULL, CLI_OPT_INFO_CONFIG},
        CLI_HELP_LONGOPT, {NULL, 0, NULL, 0}};
    cli_info_opts_t o = {0};
    cli_parser_t parser = {"", longopts, cli_info_option, &o, NULL};
    remora_context_attr_t attr = {.field_mask = 0}; /* every field */
    remora_status_t status;
    cli_session_t s;
    int rc;

    rc = cli_parse_args(cmd, argc, argv, &parser, NULL);
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    if (o.config) {
        return cli_config_print(o.json);
    }
    rc = cli_session_context(&s, cmd);
    if (rc != 0) {
        return rc;
    }
    status = remora_context_query(s.context, &attr);
    if (status != REMORA_OK) {
        rc = cli_error(cmd->name, NULL, status, "cannot query the context");
    } else if (o.json) {
        cli_info_print_json(&attr);
    } else {
        cli_info_print(&attr);
    }
    cli_session_close(&s);
    return rc;
}

const cli_command_t cli_cmd_info = {
    .name    = "info",
    .summary = "show remora and UCX versions, transports, memory types and GPUs",
    .usage   =
        "usage: remora info [--json] [--config]\n"
        "\n"
        "Print the remora version, the loaded UCX version, the UCX transports a\n"
        "context can use and the memory types UCX handles itself (GPU memory that\n"
        "UCX does not handle is moved by remora through CUDA IPC or staging), then\n"
        "the CUDA devices and which GPU paths are available: ucx-direct (UCX moves\n"
        "GPU memory), cuda-ipc (GPU to GPU on one host), staging (through host\n"
        "memory). See 'remora doctor' for what a missing path needs.\n"
        "\n"
        "  --json            one JSON object: version, ucx, transports, ucx_mem_types,\n"
        "                    cuda {available, driver_version, devices}\n"
        "  --config          list the REMORA_* environment variables instead (as\n"
        "                    'remora config'; with --json, as 'remora config --json')\n"
        "  -h, --help        show this help\n",
    .run     = cli_info_run,
};
