/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Server counters in the CLI (cli_stats.c) and the Prometheus endpoint of
 * `serve --metrics` (cli_metrics.c).
 */
#ifndef REMORA_CLI_STATS_H
#define REMORA_CLI_STATS_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

#include "cli.h"

/** Every REMORA_SERVER_STATS_FIELD_* the CLI shows. */
uint64_t cli_stats_all_fields(void);

/** The server's counters in Prometheus text exposition format (version
 *  0.0.4); *text_p is malloc'd. 0, or -1 when out of memory. */
int cli_stats_prometheus(remora_server_h server, char **text_p, size_t *len_p);

/** A remora_conn_cb_t that logs connections to stderr; arg: the command name. */
void cli_stats_conn_log(const remora_conn_event_t *ev, void *arg);

typedef struct cli_metrics cli_metrics_t;

/**
 * Serve GET /metrics on addr ("HOST:PORT", or "PORT" for 127.0.0.1:PORT)
 * from a thread of its own, until cli_metrics_stop(). Returns 0, or an exit
 * code after printing why (a usage error for a bad address, "port in use").
 * *bound gets the address bound (cap bytes). With a token (len > 0) only
 * requests that carry it as "Authorization: Bearer" are answered.
 */
int  cli_metrics_start(const char *cmd, const char *addr, remora_server_h server,
                       const cli_token_t *token, cli_metrics_t **m_p, char *bound, size_t cap);
void cli_metrics_stop(cli_metrics_t *m);

#endif
