/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Integration test harness: real `remora` processes and real UCX, no mocks.
 *
 * Design notes
 * - Children (servers, CLI clients) are started with fork+exec from the main
 *   thread. Each child gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the test
 *   process whatever happens to it (crash, CTest timeout). Every child is also
 *   kept in a registry; it_reap_all() (called from every teardown and at exit)
 *   kills and reaps whatever is still running: no zombies, no leftover servers.
 * - A child's stdout and stderr go to files in a per-process temporary
 *   directory (a server's stdout goes to a pipe until its "listening" line has
 *   been read). The directory is removed at exit when every test passed, and
 *   kept, with its path printed, when one failed (or IT_KEEP_LOGS is set in
 *   the environment): the logs are the evidence.
 * - Children inherit the environment (UCX_TLS, REMORA_PATH, ... set by CTest),
 *   plus optional extra "K=V" entries given per spawn.
 * - Library clients in the test process use it_client_t: one context and one
 *   client, opened and closed together.
 */
#ifndef REMORA_IT_HARNESS_H
#define REMORA_IT_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include <remora/remora.h>

#include "cli_util.h"

/** Longest "HOST:PORT" the harness handles. */
#define IT_ADDR_MAX 128
/** How long a server may take to print its "listening" line (sanitized builds are slow). */
#define IT_START_TIMEOUT_MS 30000
/** How long a server may take to exit after SIGTERM. */
#define IT_STOP_TIMEOUT_MS 15000
/** Default bound on one CLI command. */
#define IT_CLI_TIMEOUT_MS 60000

/* ---------------------------------------------------------------- process */

/**
 * Set up the test process: temporary directory, SIGPIPE ignored, exit-time
 * cleanup. Call first thing in main().
 */
void it_init(const char *test_name);

/** Tear down after cmocka: returns the process exit code for `failed` failures. */
int it_finish(int failed);

/** Run the group's tests, or with argv[1] only the one of that name (2 when
 *  there is none); returns what cmocka does. */
int it_run_tests(const char *group, const struct CMUnitTest *all, size_t n, int argc,
                 char **argv);

/** Skip the whole test program (CTest shows "Not Run (skipped)" via SKIP_RETURN_CODE 77). */
__attribute__((noreturn)) void it_skip_all(const char *why);

/** The per-process temporary directory. */
const char *it_tmpdir(void);

/** Write "<tmpdir>/<name>" into buf. */
void it_tmp_path(char *buf, size_t len, const char *name);

/** Kill (SIGKILL) and reap every child still running. For teardowns. */
void it_reap_all(void);

/** A cmocka teardown that calls it_reap_all(). */
int it_teardown_reap(void **state);

/* ---------------------------------------------------------------- servers */

typedef struct it_server {
    pid_t pid;               /**< 0 once stopped */
    char  addr[IT_ADDR_MAX]; /**< "HOST:PORT" from its "listening" line */
    char  log_path[512];     /**< its stderr */
    int   stdout_fd;         /**< read end of its stdout, kept open while it runs */
} it_server_t;

/**
 * Start `remora serve ARGS...` (NULL-terminated), or `remora stream serve ...`
 * when ARGS start with "stream", "serve". "--listen 127.0.0.1:0" is
 * added unless ARGS has a --listen. Waits for the "listening HOST:PORT" line.
 * Returns 0, or -1 (message printed, nothing left running).
 */
int it_server_start(it_server_t *s, ...) __attribute__((sentinel));
/** The same with extra environment entries ("K=V", NULL-terminated, may be NULL). */
int it_server_start_env(it_server_t *s, const char *const *env, ...) __attribute__((sentinel));

/**
 * SIGTERM and wait. Returns the exit code, 128+N when killed by signal N,
 * -1 when it did not exit within IT_STOP_TIMEOUT_MS (it is SIGKILLed then),
 * or -3 when it exited 0 but its log admits leaking something ("...; leaking
 * them"): a clean shutdown frees everything. Anything but 0 prints the log.
 */
int it_server_stop(it_server_t *s);

/** SIGKILL and reap. */
void it_server_kill(it_server_t *s);

/** Still running (not exited, not a zombie)? */
bool it_server_alive(const it_server_t *s);

/** The server's stderr so far (malloc'd, NUL-terminated; free it). */
char *it_server_log(const it_server_t *s);

/** Print the server's stderr to our stderr, for diagnostics. */
void it_server_dump_log(const it_server_t *s);

/* ---------------------------------------------------------------- CLI clients */

typedef struct it_run {
    int    status;    /**< exit code; 128+N if killed by signal N; -1 if timed out */
    char  *out;       /**< stdout, NUL-terminated */
    size_t out_len;
    char  *err;       /**< stderr, NUL-terminated */
    size_t err_len;
    double elapsed_ms;
} it_run_t;

/** Run `remora ARGS...` (NULL-terminated) to completion, at most timeout_ms. */
int it_cli_run(it_run_t *r, int timeout_ms, ...) __attribute__((sentinel));
/** The same with extra environment entries and stdin from a file (NULL: /dev/null). */
int it_cli_run_env(it_run_t *r, int timeout_ms, const char *const *env, const char *stdin_path,
                   ...) __attribute__((sentinel));
void it_run_free(it_run_t *r);

/** A CLI child running in the background. */
typedef struct it_proc {
    pid_t pid;
    char  out_path[512];
    char  err_path[512];
    double start_ms;
} it_proc_t;

/** Start `remora ARGS...` in the background. Returns 0 or -1. */
int it_cli_spawn(it_proc_t *p, const char *const *env, ...) __attribute__((sentinel));
/** Wait for it (at most timeout_ms, then SIGKILL) and collect its output into r. */
int it_proc_wait(it_proc_t *p, int timeout_ms, it_run_t *r);
/** SIGKILL and reap. */
void it_proc_kill(it_proc_t *p);
/** Its stderr so far (malloc'd). */
char *it_proc_stderr(const it_proc_t *p);

/** Number of '\n'-terminated lines in s (a last unterminated line counts too). */
size_t it_count_lines(const char *s);

/* ---------------------------------------------------------------- library clients */

typedef struct it_client {
    remora_context_h ctx;
    remora_client_h  client;
} it_client_t;

/** Create a context and connect; on failure nothing is left open. */
remora_status_t it_client_open(it_client_t *c, const char *addr, const remora_client_params_t *p);
void it_client_close(it_client_t *c);

/* ---------------------------------------------------------------- helpers */

uint64_t it_now_ns(void);
double   it_now_ms(void);
void     it_sleep_ms(unsigned ms);

/** Deterministic pseudo-random bytes. */
void it_fill_random(void *buf, size_t len, uint64_t seed);

int   it_write_file(const char *path, const void *data, size_t len);
/** Whole file, malloc'd (plus a NUL); NULL on error. */
void *it_read_file(const char *path, size_t *len);

/** utime+stime of a process in clock ticks, from /proc/PID/stat; -1 on error. */
long it_proc_cpu_ticks(pid_t pid);

/** VmRSS of a process in KiB, from /proc/PID/status; -1 on error. */
long it_proc_rss_kib(pid_t pid);

/**
 * SIGSTOP a process and wait until every one of its threads is stopped (a
 * thread running on another CPU may go on for a moment after kill()).
 */
bool it_stop_process(pid_t pid, int timeout_ms);

/**
 * A TCP socket bound to 127.0.0.1 and an ephemeral port, not listening: a
 * port where connections are refused for as long as the fd stays open.
 * Returns the fd (close it when done) and the "127.0.0.1:PORT" in addr.
 */
int it_refusing_port(char addr[IT_ADDR_MAX]);

/**
 * A "127.0.0.1:PORT" free now, for a server started on it again and again:
 * a random port below Linux's ephemeral range (32768 up), which no client
 * socket or port-0 listener is given while the server is down. 0, or -1
 * when no such port could be bound.
 */
int it_restart_addr(char addr[IT_ADDR_MAX]);

/** Port of a "HOST:PORT". */
unsigned it_addr_port(const char *addr);

/* ---------------------------------------------------------------- assertions */

/** Assert a remora status, naming both on failure. */
#define it_assert_status(actual, expected)                                                   \
    do {                                                                                     \
        remora_status_t it_a_ = (actual), it_e_ = (expected);                                \
        if (it_a_ != it_e_)                                                                  \
            fail_msg("%s = %d (%s), expected %d (%s)", #actual, (int)it_a_,                  \
                     remora_status_string(it_a_), (int)it_e_, remora_status_string(it_e_)); \
    } while (0)

#define it_assert_ok(actual) it_assert_status((actual), REMORA_OK)

/** Assert buf holds the pattern for region offsets [off, off+len). */
#define it_assert_pattern(buf, off, len)                                                     \
    do {                                                                                     \
        int64_t it_bad_ = remora_pattern_check((buf), (off), (len));                         \
        if (it_bad_ >= 0)                                                                    \
            fail_msg("pattern mismatch at region offset %llu (buffer index %lld) of "        \
                     "[%llu, +%llu)", (unsigned long long)(off) + (unsigned long long)it_bad_, \
                     (long long)it_bad_, (unsigned long long)(off), (unsigned long long)(len)); \
    } while (0)

/** Assert a string contains a substring, showing the string on failure. */
#define it_assert_contains(haystack, needle)                                                 \
    do {                                                                                     \
        const char *it_h_ = (haystack), *it_n_ = (needle);                                  \
        if (it_h_ == NULL || strstr(it_h_, it_n_) == NULL)                                   \
            fail_msg("expected \"%s\" in:\n%s", it_n_, it_h_ ? it_h_ : "(null)");           \
    } while (0)

/** Start a server or fail the test. */
#define it_must_start(s, ...)                                                                \
    do {                                                                                     \
        if (it_server_start((s), __VA_ARGS__) != 0)                                          \
            fail_msg("could not start remora serve");                                        \
    } while (0)

#endif /* REMORA_IT_HARNESS_H */
