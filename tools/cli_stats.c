/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Server counters in the CLI: `remora stat`, the connection log of `serve`
 * and `stream serve`, and the Prometheus text of `serve --metrics`.
 *
 * Design notes
 * - cli_stats_fields[] is the one table of the server's counters here: the
 *   JSON key (the field's name in remora_server_stats_t), the Prometheus
 *   metric and label, its type and help. `remora stat` and /metrics both
 *   print from it, so they cannot drift apart.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_stats.h"

typedef struct cli_stats_field {
    const char *key;    /* remora_server_stats_t field, JSON key */
    uint64_t    bit;    /* REMORA_SERVER_STATS_FIELD_* */
    size_t      off;
    const char *metric; /* Prometheus name, without the remora_ prefix */
    const char *label;  /* "" or `path="am"` */
    const char *type;   /* counter or gauge */
    const char *help;
} cli_stats_field_t;

#define F(key, BIT) #key, REMORA_SERVER_STATS_FIELD_##BIT, offsetof(remora_server_stats_t, key)

static const cli_stats_field_t cli_stats_fields[] = {
    {F(conns, CONNS), "connections", "", "gauge", "Connections that finished their handshake."},
    {F(conns_accepted, CONNS_ACCEPTED), "connections_accepted_total", "", "counter",
     "TCP connections accepted."},
    {F(conns_refused, CONNS_REFUSED), "connections_refused_total", "", "counter",
     "Connections refused by a connection cap."},
    {F(auth_failures, AUTH_FAILURES), "auth_failures_total", "", "counter",
     "Clients that failed the token proof."},
    {F(am_read_ops, AM_READ_OPS), "read_ops_total", "path=\"am\"", "counter",
     "Reads the server answered, by data path."},
    {F(staging_read_ops, STAGING_READ_OPS), "read_ops_total", "path=\"staging\"", "counter", ""},
    {F(am_read_bytes, AM_READ_BYTES), "read_bytes_total", "path=\"am\"", "counter",
     "Bytes the server sent for reads, by data path."},
    {F(staging_read_bytes, STAGING_READ_BYTES), "read_bytes_total", "path=\"staging\"", "counter",
     ""},
    {F(am_write_ops, AM_WRITE_OPS), "write_ops_total", "path=\"am\"", "counter",
     "Writes the server stored, by data path."},
    {F(staging_write_ops, STAGING_WRITE_OPS), "write_ops_total", "path=\"staging\"", "counter",
     ""},
    {F(am_write_bytes, AM_WRITE_BYTES), "write_bytes_total", "path=\"am\"", "counter",
     "Bytes the server stored for writes, by data path."},
    {F(staging_write_bytes, STAGING_WRITE_BYTES), "write_bytes_total", "path=\"staging\"",
     "counter", ""},
    {F(lookups, LOOKUPS), "lookups_total", "", "counter", "Region lookups answered."},
    {F(map_grants, MAP_GRANTS), "grants_total", "path=\"map\"", "counter",
     "Region descriptors handed out for a path that bypasses the server (map, rma, ipc)."},
    {F(rma_grants, RMA_GRANTS), "grants_total", "path=\"rma\"", "counter", ""},
    {F(ipc_grants, IPC_GRANTS), "grants_total", "path=\"ipc\"", "counter", ""},
    {F(signals, SIGNALS), "signals_total", "", "counter", "Signal updates received."},
    {F(errors, ERRORS), "errors_total", "", "counter",
     "Requests answered with an error, malformed messages included."},
    {F(ring_waits, RING_WAITS), "ring_waits_total", "", "counter",
     "Ring waits from subscribers (one per notification)."},
    {F(ring_subscribers, RING_SUBSCRIBERS), "ring_subscribers", "", "gauge",
     "Connections with a ring wait armed."},
    {F(ring_drops, RING_DROPS), "ring_drops_total", "", "counter",
     "Ring elements overwritten before an every-mode subscriber asked for them."},
    {F(uptime_ms, UPTIME_MS), "uptime_seconds", "", "gauge", "Seconds since the server started."},
};

#undef F

#define CLI_NSTATS (sizeof(cli_stats_fields) / sizeof(cli_stats_fields[0]))

uint64_t cli_stats_all_fields(void)
{
    uint64_t mask = 0;

    for (size_t i = 0; i < CLI_NSTATS; i++) {
        mask |= cli_stats_fields[i].bit;
    }
    return mask;
}

static uint64_t cli_stats_value(const remora_server_stats_t *st, const cli_stats_field_t *f)
{
    uint64_t v;

    memcpy(&v, (const char *)st + f->off, sizeof(v));
    return v;
}

#define CLI_CONN_ALL                                                                        \
    (REMORA_CONN_STATS_FIELD_ID | REMORA_CONN_STATS_FIELD_PEER | REMORA_CONN_STATS_FIELD_LANE | \
     REMORA_CONN_STATS_FIELD_AGE_MS | REMORA_CONN_STATS_FIELD_READ_OPS |                    \
     REMORA_CONN_STATS_FIELD_READ_BYTES | REMORA_CONN_STATS_FIELD_WRITE_OPS |               \
     REMORA_CONN_STATS_FIELD_WRITE_BYTES | REMORA_CONN_STATS_FIELD_ERRORS |                 \
     REMORA_CONN_STATS_FIELD_RING_WAITS)

/* ---------------------------------------------------------------- Prometheus */

int cli_stats_prometheus(remora_server_h server, char **text_p, size_t *len_p)
{
    remora_server_stats_t st = {.field_mask = cli_stats_all_fields()};
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    if (remora_server_stats(server, &st) != REMORA_OK || (f = open_memstream(&buf, &len)) == NULL) {
        return -1;
    }
    for (size_t i = 0; i < CLI_NSTATS; i++) {
        const cli_stats_field_t *fd = &cli_stats_fields[i];
        uint64_t v = cli_stats_value(&st, fd);
        if (!(st.field_mask & fd->bit)) {
            continue;
        }
        if (fd->help[0] != '\0') {
            fprintf(f, "# HELP remora_%s %s\n# TYPE remora_%s %s\n", fd->metric, fd->help,
                    fd->metric, fd->type);
        }
        if (fd->bit == REMORA_SERVER_STATS_FIELD_UPTIME_MS) {
            fprintf(f, "remora_%s %.3f\n", fd->metric, (double)v / 1e3);
        } else if (fd->label[0] != '\0') {
            fprintf(f, "remora_%s{%s} %llu\n", fd->metric, fd->label, (unsigned long long)v);
        } else {
            fprintf(f, "remora_%s %llu\n", fd->metric, (unsigned long long)v);
        }
    }
    if (fclose(f) != 0) {
        free(buf);
        return -1;
    }
    *text_p = buf;
    *len_p  = len;
    return 0;
}

/* ---------------------------------------------------------------- connection log */

void cli_stats_conn_log(const remora_conn_event_t *ev, void *arg)
{
    const remora_conn_stats_t *c = ev->stats;
    const char *who = arg;

    if (ev->connected) {
        cli_note(who, "client %s connected (connection %llu%s)", c->peer,
                 (unsigned long long)c->id, c->lane ? ", a lane" : "");
        return;
    }
    cli_note(who,
             "client %s disconnected (connection %llu, %.1f s: %llu reads, %llu bytes; "
             "%llu writes, %llu bytes; %llu errors)",
             c->peer, (unsigned long long)c->id, (double)c->age_ms / 1e3,
             (unsigned long long)c->read_ops, (unsigned long long)c->read_bytes,
             (unsigned long long)c->write_ops, (unsigned long long)c->write_bytes,
             (unsigned long long)c->errors);
}

/* ---------------------------------------------------------------- remora stat */

enum { CLI_OPT_STAT_JSON = CLI_OPT_CMD };

typedef struct cli_stat_opts {
    bool              json;
    cli_client_opts_t client;
} cli_stat_opts_t;

static int cli_stat_option(const cli_command_t *cmd, int opt, const char *arg, void *opts)
{
    cli_stat_opts_t *o = opts;

    (void)arg;
    if (opt != CLI_OPT_STAT_JSON) {
        return cli_usage_error(cmd, "unexpected option");
    }
    o->json = true;
    return CLI_CONTINUE;
}

static void cli_stat_print_json(const char *addr, const remora_server_stats_t *st,
                                const remora_conn_stats_t *conns, size_t n, size_t total)
{
    char esc[6 * 64 + 8];

    remora_json_string(addr, esc, sizeof(esc));
    printf("{\"server\":%s,\"stats\":{", esc);
    const char *sep = "";
    for (size_t i = 0; i < CLI_NSTATS; i++) {
        if (st->field_mask & cli_stats_fields[i].bit) {
            printf("%s\"%s\":%llu", sep, cli_stats_fields[i].key,
                   (unsigned long long)cli_stats_value(st, &cli_stats_fields[i]));
            sep = ",";
        }
    }
    printf("},\"connections_total\":%zu,\"connections\":[", total);
    for (size_t i = 0; i < n; i++) {
        const remora_conn_stats_t *c = &conns[i];
        remora_json_string(c->peer, esc, sizeof(esc));
        printf("%s{\"id\":%llu,\"peer\":%s,\"lane\":%llu,\"age_ms\":%llu,\"read_ops\":%llu,"
               "\"read_bytes\":%llu,\"write_ops\":%llu,\"write_bytes\":%llu,\"errors\":%llu,"
               "\"ring_waits\":%llu}",
               i ? "," : "", (unsigned long long)c->id, esc, (unsigned long long)c->lane,
               (unsigned long long)c->age_ms, (unsigned long long)c->read_ops,
               (unsigned long long)c->read_bytes, (unsigned long long)c->write_ops,
               (unsigned long long)c->write_bytes, (unsigned long long)c->errors,
               (unsigned long long)c->ring_waits);
    }
    printf("]}\n");
}

static void cli_stat_print_text(const char *addr, const remora_server_stats_t *st,
                                const remora_conn_stats_t *conns, size_t n, size_t total)
{
    printf("server %s\n", addr);
    for (size_t i = 0; i < CLI_NSTATS; i++) {
        if (st->field_mask & cli_stats_fields[i].bit) {
            printf("  %-20s %llu\n", cli_stats_fields[i].key,
                   (unsigned long long)cli_stats_value(st, &cli_stats_fields[i]));
        }
    }
    printf("connections: %zu\n", total);
    if (n > 0) {
        printf("  %-6s %-22s %-4s %10s %10s %14s %10s %14s %7s\n", "ID", "PEER", "LANE", "AGE_S",
               "READS", "READ_BYTES", "WRITES", "WRITE_BYTES", "ERRORS");
    }
    for (size_t i = 0; i < n; i++) {
        const remora_conn_stats_t *c = &conns[i];
        printf("  %-6llu %-22s %-4llu %10.1f %10llu %14llu %10llu %14llu %7llu\n",
               (unsigned long long)c->id, c->peer, (unsigned long long)c->lane,
               (double)c->age_ms / 1e3, (unsigned long long)c->read_ops,
               (unsigned long long)c->read_bytes, (unsigned long long)c->write_ops,
               (unsigned long long)c->write_bytes, (unsigned long long)c->errors);
    }
}

#define CLI_STAT_MAX_CONNS 1024

static int cli_stat_run(const cli_command_t *cmd, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, CLI_OPT_STAT_JSON},
        CLI_CLIENT_LONGOPTS, CLI_HELP_LONGOPT, {NULL, 0, NULL, 0},
    };
    cli_stat_opts_t o = {0};
    cli_parser_t parser = {"", longopts, cli_stat_option, &o, &o.client};
    remora_server_stats_t st = {.field_mask = cli_stats_all_fields()};
    remora_conn_stats_t *conns;
    remora_status_t status;
    size_t total = 0;
    cli_session_t s;
    const char *addr;
    int rc;

    rc = cli_parse_args(cmd, argc, argv, &parser, &addr);
    if (rc != CLI_CONTINUE) {
        return rc;
    }
    conns = calloc(CLI_STAT_MAX_CONNS, sizeof(*conns));
    if (conns == NULL) {
        return cli_error(cmd->name, addr, REMORA_ERR_NO_MEMORY, NULL);
    }
    for (size_t i = 0; i < CLI_STAT_MAX_CONNS; i++) {
        conns[i].field_mask = CLI_CONN_ALL;
    }
    rc = cli_session_open(&s, cmd, addr, false, &o.client);
    if (rc == 0) {
        status = remora_client_server_stats(s.client, &st, conns, CLI_STAT_MAX_CONNS, &total);
        if (status == REMORA_ERR_UNSUPPORTED) {
            rc = cli_session_error(&s, status, "the server does not report counters (an older "
                                               "remora)");
        } else if (status != REMORA_OK) {
            rc = cli_session_error(&s, status, "cannot read the server's counters");
        } else {
            size_t n = total < CLI_STAT_MAX_CONNS ? total : CLI_STAT_MAX_CONNS;
            if (o.json) {
                cli_stat_print_json(addr, &st, conns, n, total);
            } else {
                cli_stat_print_text(addr, &st, conns, n, total);
            }
        }
        cli_session_close(&s);
    }
    free(conns);
    return rc;
}

const cli_command_t cli_cmd_stat = {
    .name    = "stat",
    .summary = "show a server's counters and connections",
    .usage   =
        "usage: remora stat HOST:PORT [--json] [CLIENT OPTIONS]\n"
        "\n"
        "Print the counters of the server at HOST:PORT (its lanes included):\n"
        "connections (now, accepted, refused by a cap, failed authentication),\n"
        "reads and writes in operations and bytes on the paths the server moves\n"
        "(am, staging), descriptors handed out for the paths that bypass it (map,\n"
        "rma, ipc), lookups, signals, errors, ring waits, subscribers and drops;\n"
        "then one line per connection (the stat connection included). Needs the\n"
        "token like any other request.\n"
        "\n"
        "  --json            one JSON object: server, stats {counter: value},\n"
        "                    connections_total, connections [{id, peer, lane,\n"
        "                    age_ms, read_ops, read_bytes, write_ops, write_bytes,\n"
        "                    errors, ring_waits}]\n"
        CLI_CLIENT_HELP,
    .run     = cli_stat_run,
};
