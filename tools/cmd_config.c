/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora config (and remora info --config): every REMORA_* environment
 * variable the library and the command read, with its value here, its
 * default and what it does, like `ucx_info -c`.
 *
 * cli_config_vars[] is the one table of them: tests/integration/
 * test_config.sh checks that every getenv("REMORA_...") name in src/ and
 * tools/ appears in `remora config --json`, and the docs are checked against
 * it the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct cli_config_var {
    const char *name;
    const char *dflt;
    const char *meaning;
} cli_config_var_t;

static const cli_config_var_t cli_config_vars[] = {
    {"REMORA_LOG", "warn",
     "log level: error, warn, info or debug (to stderr, or a context's log_cb)"},
    {"REMORA_PATH", "auto",
     "force the client's data path: auto, am, rma, map, ipc or staging"},
    {"REMORA_RMA", "0",
     "one-sided RMA: 0 off, 1 on verbs fabrics only, unsafe everywhere (docs/security.md)"},
    {"REMORA_CM", "auto",
     "1: a server's clients connect through UCX's connection manager, 0: by worker "
     "addresses (auto: 1 from UCX 1.16 on; docs/protocol.md)"},
    {"REMORA_UCX_GATE", "1",
     "0: UCX's own TCP ports answer every host, not only connected ones (docs/security.md)"},
    {"REMORA_CHUNK_SIZE", "4194304", "client chunk size in bytes (4096 .. 2^30)"},
    {"REMORA_WINDOW", "4", "client chunks in flight per request (1 .. 64)"},
    {"REMORA_RNDV_MIN", "auto",
     "host data this long or longer is sent by UCX's rendezvous over TCP (0: UCX's choice; "
     "auto: 65536 with UCX 1.16's connection manager, else 0)"},
    {"REMORA_LANES", "1", "connections a client spreads large transfers over (1 .. 8)"},
    {"REMORA_WORKERS", "auto", "UCX workers a server serves on (1 .. 8; auto: by the cores)"},
    {"REMORA_RECONNECT", "0", "1: clients reconnect by themselves after a lost connection"},
    {"REMORA_HEARTBEAT_MS", "500", "heartbeat interval on the bootstrap socket (0: none)"},
    {"REMORA_PEER_TIMEOUT_MS", "2000", "a peer silent this long is taken for dead"},
    {"REMORA_SPIN_US", "50", "progress thread: busy-poll this long before sleeping"},
    {"REMORA_SPIN_LOAD", "1",
     "no busy-polling while more threads are runnable than cores (plus spin slots)"},
    {"REMORA_SPIN_SLOTS", "auto",
     "threads of this user that may busy-poll at once, host-wide (auto: 2 under 8 cores, "
     "else 0; 0: no limit)"},
    {"REMORA_RING_INLINE", "32768",
     "ring subscribers: largest element carried inline in notifications (0: never)"},
    {"REMORA_RING_PUSH", "2",
     "ring subscribers: large elements pushed on the am path, this many in flight (0: fetch)"},
    {"REMORA_STREAM_COPY", "stream",
     "proxy: small GPU sources of stream operations are copied by the proxy thread"},
    {"REMORA_GPUNET_SPIN_US", "2000", "GPU socket proxy: busy-poll this long before sleeping"},
    {"REMORA_GPUNET_THREADS", "ncpu, 1..16", "GPU socket proxy worker threads"},
    {"REMORA_GPUNET_SUBMIT_THREAD", "1",
     "GPU socket proxy: a thread per worker makes the copies' driver calls (0: the worker)"},
    {"REMORA_GPUNET_COPY_LANES", "2", "GPU socket proxy: streams per worker for its copies (1-4)"},
    {"REMORA_GPUNET_DIRECT_MIN", "65536",
     "GPU sockets between GPUs of one host: sends and receives this large go device to device "
     "(0: never)"},
    {"REMORA_GPUNET_BOUNCE_MIN", "4194304",
     "GPU sockets to CPU and TCP peers: sends this large from GPU memory are copied out by the "
     "proxy's copy engine (0: never)"},
};

#define CLI_NCONFIG (sizeof(cli_config_vars) / sizeof(cli_config_vars[0]))

int cli_config_print(bool json)
{
    char v[6 * 256 + 3], d[6 * 64 + 3], m[6 * 128 + 3];

    if (json) {
        printf("[");
    } else {
        printf("%-24s %-14s %-14s %s\n", "VARIABLE", "VALUE", "DEFAULT", "MEANING");
    }
    for (size_t i = 0; i < CLI_NCONFIG; i++) {
        const cli_config_var_t *c = &cli_config_vars[i];
        const char *value = getenv(c->name);
        if (json) {
            remora_json_string(c->dflt, d, sizeof(d));
            remora_json_string(c->meaning, m, sizeof(m));
            if (value != NULL) {
                remora_json_string(value, v, sizeof(v));
            }
            printf("%s{\"name\":\"%s\",\"value\":%s,\"set\":%s,\"default\":%s,\"meaning\":%s}",
                   i ? "," : "", c->name, value ? v : d, value ? "true" : "false", d, m);
        } else {
            printf("%-24s %-14s %-14s %s\n", c->name, value ? value : "(default)", c->dflt,
                   c->meaning);
        }
    }
    printf(json ? "]\n" : "");
    return 0;
}

enum { CLI_OPT_CONFIG_JSON = CLI_OPT_CMD };

static int cli_config_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    (void)arg;
    if (opt != CLI_OPT_CONFIG_JSON) {
        return cli_usage_error(cmd, "unexpected option");
    }
    *(bool *)opts = true;
    return CLI_CONTINUE;
}

static int cli_config_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, CLI_OPT_CONFIG_JSON}, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0}};
    bool json = false;
    cli_parser_t parser = {"", longopts, cli_config_option, &json, NULL};
    int rc = cli_parse_args(cmd, argc, argv, &parser, NULL);

    if (rc != CLI_CONTINUE) {
        return rc;
    }
    return cli_config_print(json);
}

const cli_command_t cli_cmd_config = {
    .name    = "config",
    .summary = "list the REMORA_* environment variables: value, default, meaning",
    .usage   =
        "usage: remora config [--json]\n"
        "\n"
        "List every REMORA_* environment variable remora reads, with its value in\n"
        "this environment ('(default)' when unset), its default and its meaning.\n"
        "Same as 'remora info --config'.\n"
        "\n"
        "  --json            one JSON array of {name, value, set, default, meaning}\n"
        "  -h, --help        show this help\n",
    .run     = cli_config_run,
};
