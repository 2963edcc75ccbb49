/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora — command-line tool: serve memory regions, and list, read, write,
 * ping and benchmark them from a client.
 *
 * This file only dispatches to the commands (cmd_*.c); each command parses its
 * own options and returns the exit code (see enum cli_exit in cli.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_command_t *const cli_commands[] = {
    &cli_cmd_serve, &cli_cmd_ls, &cli_cmd_read, &cli_cmd_write,
    &cli_cmd_ping,  &cli_cmd_bench, &cli_cmd_info, &cli_cmd_stream,
    &cli_cmd_doctor, &cli_cmd_stat, &cli_cmd_config,
};

#define CLI_NCOMMANDS (sizeof(cli_commands) / sizeof(cli_commands[0]))

static void cli_print_usage(FILE *f)
{
    fputs("usage: remora [--help] [--version] COMMAND [OPTIONS] [ADDRESS]\n"
          "\n"
          "Commands:\n", f);
    for (size_t i = 0; i < CLI_NCOMMANDS; i++) {
        fprintf(f, "  %-7s %s\n", cli_commands[i]->name, cli_commands[i]->summary);
    }
    fputs("\n"
          "Sizes and offsets take K, M, G and T suffixes (binary: 4K = 4096).\n"
          "Run 'remora COMMAND --help' for the options of a command.\n"
          "\n"
          "Rates in GB/s are 10^9 bytes per second.\n"
          "Exit status: 0 success, 1 runtime error, 2 usage error, 3 verify mismatch.\n", f);
}

/* Edit distance (insertions, deletions, substitutions, adjacent swaps). */
static size_t cli_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t d[32][32];

    if (la >= 32 || lb >= 32) {
        return 99;
    }
    for (size_t i = 0; i <= la; i++) {
        for (size_t j = 0; j <= lb; j++) {
            if (i == 0 || j == 0) {
                d[i][j] = i + j;
                continue;
            }
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) {
                best = d[i - 1][j] + 1;
            }
            if (d[i][j - 1] + 1 < best) {
                best = d[i][j - 1] + 1;
            }
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best) {
                best = d[i - 2][j - 2] + 1;
            }
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

const char *cli_did_you_mean(const char *name, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3;

    for (size_t i = 0; i < n; i++) {
        size_t d = cli_distance(name, names[i]);
        if (d < best_d || (strncmp(name, names[i], strlen(name)) == 0 && strlen(name) >= 2 &&
                           best == NULL)) {
            best   = names[i];
            best_d = d < best_d ? d : best_d;
        }
    }
    return best;
}

/* The command closest to a mistyped name, or NULL when none is close. */
static const char *cli_suggest(const char *name)
{
    const char *names[CLI_NCOMMANDS];

    for (size_t i = 0; i < CLI_NCOMMANDS; i++) {
        names[i] = cli_commands[i]->name;
    }
    return cli_did_you_mean(name, names, CLI_NCOMMANDS);
}

static const cli_command_t *cli_find_command(const char *name)
{
    for (size_t i = 0; i < CLI_NCOMMANDS; i++) {
        if (strcmp(cli_commands[i]->name, name) == 0) {
            return cli_commands[i];
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const cli_command_t *cmd;

    if (argc < 2) {
        fputs("remora: missing command (see 'remora --help')\n", stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        cli_print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("remora %s\n", remora_version_string());
        return CLI_EXIT_OK;
    }
    cmd = cli_find_command(argv[1]);
    if (cmd == NULL) {
        const char *near = cli_suggest(argv[1]);
        if (near != NULL) {
            fprintf(stderr, "remora: unknown command '%s'; did you mean '%s'? (see 'remora --help')\n",
                    argv[1], near);
        } else {
            fprintf(stderr, "remora: unknown command '%s' (see 'remora --help')\n", argv[1]);
        }
        return CLI_EXIT_USAGE;
    }
    return cmd->run(cmd, argc - 1, argv + 1);
}
