/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internals shared by the commands of the `remora` tool: the command table
 * entry, the exit codes, option parsing, client sessions and error reporting.
 *
 * Conventions
 * - Every command is a cli_command_t whose run() returns the process exit code.
 * - Option parsers return CLI_CONTINUE to go on, or an exit code to stop with
 *   (0 after --help, CLI_EXIT_USAGE after a bad option).
 * - Errors are reported once, where found, as one stderr line
 *   "remora: CMD TARGET: what happened: <remora_status_string>".
 * - stdout carries only a command's results; logs and summaries go to stderr.
 */
#ifndef REMORA_CLI_H
#define REMORA_CLI_H

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <remora/remora.h>

#include "cli_util.h"

enum cli_exit {
    CLI_EXIT_OK       = 0,
    CLI_EXIT_RUNTIME  = 1, /**< the operation failed */
    CLI_EXIT_USAGE    = 2, /**< bad command line */
    CLI_EXIT_MISMATCH = 3, /**< read --verify found data off the pattern */
    CLI_EXIT_SIGNAL   = 128 /**< + N: SIGINT/SIGTERM (N) interrupted writing a file */
};

/** Returned by parsers when the command should go on. */
#define CLI_CONTINUE (-1)

/** Largest buffer a streaming read or write allocates (two of them are in flight). */
#define CLI_CHUNK_MAX (32u << 20)

typedef struct cli_command cli_command_t;

struct cli_command {
    const char *name;
    const char *summary; /**< one line for `remora --help` */
    const char *usage;   /**< full text for `remora NAME --help` */
    int       (*run)(const cli_command_t *cmd, int argc, char **argv);
};

extern const cli_command_t cli_cmd_serve;
extern const cli_command_t cli_cmd_ls;
extern const cli_command_t cli_cmd_read;
extern const cli_command_t cli_cmd_write;
extern const cli_command_t cli_cmd_ping;
extern const cli_command_t cli_cmd_bench;
extern const cli_command_t cli_cmd_info;
extern const cli_command_t cli_cmd_stream;
extern const cli_command_t cli_cmd_doctor;
extern const cli_command_t cli_cmd_stat;
extern const cli_command_t cli_cmd_config;

/** The one of names[] a mistyped name is closest to (an edit or two away, or
 *  a prefix), or NULL (remora.c). */
const char *cli_did_you_mean(const char *name, const char *const *names, size_t n);

/** The REMORA_* variables (cmd_config.c); json: one JSON array. */
int cli_config_print(bool json);

/** What `remora info` says about GPUs: CUDA devices and GPU data paths (cmd_doctor.c). */
void cli_info_print_cuda(const remora_context_attr_t *attr);
/* The context's UCX transports that carry GPU memory (cuda_copy, ...). */
void cli_ucx_gpu_transports(const remora_context_attr_t *attr, char *out, size_t cap);

/* ---------------------------------------------------------------- options */

/** Shortest token accepted: the library refuses shorter ones with
 *  REMORA_ERR_INVALID_PARAM; the help texts say "at least 16 bytes". */
#define CLI_TOKEN_MIN 16
#ifdef REMORA_TOKEN_MIN
_Static_assert(CLI_TOKEN_MIN == REMORA_TOKEN_MIN, "the help texts name the library's minimum");
#endif

/** A shared secret read from a --token-file. */
typedef struct cli_token {
    char   bytes[REMORA_TOKEN_MAX];
    size_t len; /**< 0: no token */
} cli_token_t;

/** Options every client command takes. */
typedef struct cli_client_opts {
    int           timeout_ms; /**< 0: the library default */
    bool          path_set;
    remora_path_t path;
    cli_token_t   token;
    unsigned      lanes;      /**< 0: the library default */
    /** Reconnect (remora.h): true sets it on; false leaves the library's
     *  default (off, or $REMORA_RECONNECT). Long-running commands set it
     *  before parsing; their --no-reconnect clears it. */
    bool          reconnect;
    int           reconnect_for_ms; /**< give up reconnecting after this (0: library default) */
    remora_event_cb_t event_cb; /**< NULL: none */
    void         *event_arg;
    bool          encrypt;    /**< --encrypt */
} cli_client_opts_t;

/** getopt_long codes of long-only options; commands number theirs from CLI_OPT_CMD. */
enum cli_opt_code {
    CLI_OPT_TOKEN_FILE = 0x100,
    CLI_OPT_TIMEOUT,
    CLI_OPT_PATH,
    CLI_OPT_LANES_CLIENT,
    CLI_OPT_ENCRYPT,
    CLI_OPT_CMD = 0x200
};

/** Long options of every client command, for a command's struct option table. */
#define CLI_CLIENT_LONGOPTS                                          \
    {"token-file", required_argument, NULL, CLI_OPT_TOKEN_FILE},     \
    {"timeout",    required_argument, NULL, CLI_OPT_TIMEOUT},        \
    {"path",       required_argument, NULL, CLI_OPT_PATH},           \
    {"lanes",      required_argument, NULL, CLI_OPT_LANES_CLIENT},      \
    {"encrypt",    no_argument,       NULL, CLI_OPT_ENCRYPT}

#define CLI_HELP_LONGOPT {"help", no_argument, NULL, 'h'}

/** Help text of the options every client command takes. */
#define CLI_CLIENT_HELP                                                                     \
    "  --token-file F    shared token: the file's bytes less one trailing newline\n"        \
    "                    (at least 16 bytes)\n"                                          \
    "  --encrypt         encrypt the connection, keyed from the token (needs\n"          \
    "                    --token-file; the server must use --encrypt too)\n"            \
    "  --timeout MS      bound on connecting and on every request (default 10000)\n"        \
    "  --path P          data path: auto, am, rma, map, ipc or staging ($REMORA_PATH)\n"\
    "  --lanes N         spread large transfers over N connections to a server\n"       \
    "                    serving lanes (1..8; $REMORA_LANES, else 1)\n"                 \
    "  -h, --help        show this help\n"

/** Handles one command-specific option; returns CLI_CONTINUE or an exit code. */
typedef int (*cli_opt_fn)(const cli_command_t *cmd, int opt, const char *arg, void *opts);

typedef struct cli_parser {
    const char          *shortopts; /**< the command's getopt letters ("o:"), "" if none */
    const struct option *longopts;  /**< ends with a zero entry; includes CLI_HELP_LONGOPT */
    cli_opt_fn           on_option; /**< may be NULL when the command has no options of its own */
    void                *opts;      /**< passed to on_option */
    cli_client_opts_t   *client;    /**< NULL: the command takes no client options */
} cli_parser_t;

/**
 * Parse argv (argv[0] is the command name). With operand non-NULL exactly one
 * operand is required and returned there; otherwise none is accepted.
 */
int cli_parse_args(const cli_command_t *cmd, int argc, char **argv, const cli_parser_t *parser,
                   const char **operand);

/** Parse a number with optional K/M/G/T suffix in [min, max] for option `name`. */
int cli_opt_number(const cli_command_t *cmd, const char *name, const char *arg, uint64_t min,
                   uint64_t max, uint64_t *out);

/** Parse a duration in seconds for option `name`: finite, above 0 (or 0
 *  itself with allow_zero), at most 1e7. */
int cli_opt_seconds(const cli_command_t *cmd, const char *name, const char *arg, bool allow_zero,
                    double *out);

/** Parse --gpu N (a CUDA device ordinal, 0..1023) into *gpu. */
int cli_opt_gpu(const cli_command_t *cmd, const char *arg, int *gpu);
/** Parse a worker or lane count N (1..8) given as option NAME. */
int cli_opt_lanes(const cli_command_t *cmd, const char *name, const char *arg, unsigned *lanes);

/** Read a token file: its bytes, one trailing newline ("\n" or "\r\n") stripped;
 *  CLI_TOKEN_MIN to REMORA_TOKEN_MAX bytes, else a usage error. */
int cli_load_token(const cli_command_t *cmd, const char *path, cli_token_t *token);

/* ---------------------------------------------------------------- reporting */

/**
 * Print "remora: CMD[ TARGET]: [MESSAGE: ]STATUS" to stderr as one line; the
 * status part is left out for REMORA_OK, the message part when fmt is NULL.
 * Returns CLI_EXIT_RUNTIME.
 */
int cli_error(const char *cmd, const char *target, remora_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Print "remora: CMD: MESSAGE (see 'remora CMD --help')"; returns CLI_EXIT_USAGE. */
int cli_usage_error(const cli_command_t *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** A progress or status line of a long-running command on stderr:
 *  "remora WHO: MESSAGE". */
void cli_note(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Monotonic time in seconds. */
double cli_now(void);

/* ---------------------------------------------------------------- output files */

/**
 * A file a command writes (read -o, stream clone), never half-written: the
 * bytes go to a temporary file in the target's directory that replaces the
 * target only in cli_output_commit() (cli_output.c has the design notes).
 * "-" is stdout, written directly.
 */
typedef struct cli_output {
    const char *name;           /**< as given, for messages */
    FILE       *f;              /**< where to write */
    int         fd;
    char        path[PATH_MAX]; /**< the file to replace (a symlink's target) */
    char        tmp[PATH_MAX];  /**< the temporary file's name; "" while unnamed */
    bool        exists;         /**< replacing a file: keep its mode and owner */
    mode_t      mode;
    uid_t       uid;
    gid_t       gid;
} cli_output_t;

/**
 * Check name (a regular file, or none yet, or "-"; anything else is refused)
 * and open a temporary file next to it. Catches SIGINT and SIGTERM until
 * commit or abort (see cli_interrupted()). Returns 0, or an exit code with
 * the error reported ("remora: CMD TARGET: ...") and nothing left open.
 */
int  cli_output_open(cli_output_t *o, const char *cmd, const char *target, const char *name);
/** fsync the complete file and rename it over the target. 0 or an exit code;
 *  on failure the target is untouched and the temporary file gone. */
int  cli_output_commit(cli_output_t *o, const char *cmd, const char *target);
/** Drop the temporary file: the target stays as it was. */
void cli_output_abort(cli_output_t *o);
/** The signal (SIGINT, SIGTERM) caught while an output was open (or between
 *  cli_catch_interrupts and cli_release_interrupts), else 0. */
int  cli_interrupted(void);
/** Catch SIGINT and SIGTERM once (a second one acts as usual) so that a
 *  loop can end on cli_interrupted(); release puts the old handlers back. */
void cli_catch_interrupts(void);
void cli_release_interrupts(void);
/** Block SIGINT and SIGTERM, put in *signals, for a server that waits for
 *  them (sigwaitinfo); before any thread exists, so that all inherit it. */
void cli_block_stop_signals(sigset_t *signals);
/** Report an interrupted transfer into file; returns the exit code, 128 + sig. */
int  cli_interrupted_error(const char *cmd, const char *target, const char *file, int sig);

/* ---------------------------------------------------------------- sessions */

/** A context and, for client commands, a connection. */
typedef struct cli_session {
    const cli_command_t *cmd;
    const char          *target_text; /**< the operand as typed, for messages */
    remora_target_t      target;
    remora_context_h     context;
    remora_client_h      client;
} cli_session_t;

/** Create a context only (serve, info). Returns 0 or an exit code. */
int cli_session_context(cli_session_t *s, const cli_command_t *cmd);
/* Serving on a non-loopback address without a token: say what that means. */
void cli_warn_untokened(const cli_command_t *cmd, const char *addr, int has_token);
/* The same for a server listening on listen ("HOST:PORT"): UCX's own
 * listeners are kept to that host's interface. */
int cli_session_context_at(cli_session_t *s, const cli_command_t *cmd, const char *listen);

/**
 * Parse target_text ("HOST:PORT/NAME" when need_name, else "HOST:PORT"), create
 * a context and connect. Returns 0 or an exit code; on failure nothing is left
 * to close.
 */
int cli_session_open(cli_session_t *s, const cli_command_t *cmd, const char *target_text,
                     bool need_name, const cli_client_opts_t *opts);

/** A data buffer: host memory, or GPU memory (--gpu) allocated through remora. */
typedef struct cli_buffer {
    void        *ptr;
    size_t       len;
    remora_mem_h mem; /* GPU buffers */
} cli_buffer_t;

/** Allocate len bytes on the host (gpu < 0) or on GPU gpu; 0 or an exit code. */
int  cli_buffer_alloc(const cli_session_t *s, int gpu, size_t len, cli_buffer_t *b);
void cli_buffer_free(cli_buffer_t *b);

/** Disconnect and destroy whatever the session holds. */
void cli_session_close(cli_session_t *s);

/** cli_error() for this session's command and target. */
int cli_session_error(const cli_session_t *s, remora_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Look up the session's region, reporting a failure. Returns 0 or an exit code. */
int cli_session_lookup(const cli_session_t *s, remora_region_info_t *info);

/** Report a failed read (or write) of len bytes at offset of the session's region. */
int cli_io_error(const cli_session_t *s, remora_status_t status, bool write, uint64_t offset,
                 uint64_t len);

/**
 * Wait for *req (bounded by the client's timeout), release it and clear *req.
 * A failure is reported as a read/write of len bytes at offset. Returns 0 or
 * an exit code.
 */
int cli_request_finish(const cli_session_t *s, remora_request_h *req, bool write,
                       uint64_t offset, uint64_t len);

#endif /* REMORA_CLI_H */
