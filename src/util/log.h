/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging: one line per event, level from REMORA_LOG (error, warn, info,
 * debug; default warn). An error is logged once, where it is found.
 *
 * Lines go to the sink on top of a process-wide stack (a context's
 * remora_context_params_t.log_cb, pushed by remora_context_create and removed
 * by remora_context_destroy), or to stderr while the stack is empty. One mutex
 * guards the stack and serialises the sinks' calls, so a sink is never called
 * after its removal returned; a sink that logs (it must not) goes to stderr
 * instead of deadlocking. */
#ifndef RM_UTIL_LOG_H
#define RM_UTIL_LOG_H

#include <stdatomic.h>

#include <remora/remora.h>

typedef enum {
    RM_LOG_ERROR = REMORA_LOG_ERROR,
    RM_LOG_WARN  = REMORA_LOG_WARN,
    RM_LOG_INFO  = REMORA_LOG_INFO,
    RM_LOG_DEBUG = REMORA_LOG_DEBUG
} rm_log_level_t;

extern int rm_log_level_current;

typedef struct rm_log_sink rm_log_sink_t;

void rm_log_init(void);
void rm_log_emit(rm_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Put cb on top of the stack: it gets every line from now on, until removed
 * or until a later sink is pushed. NULL when out of memory (lines then keep
 * going where they went). */
rm_log_sink_t *rm_log_sink_push(remora_log_cb_t cb, void *arg);
/* Take a sink off the stack, wherever it is in it, and free it; once this
 * returns its callback is never called again. NULL is ignored. */
void rm_log_sink_remove(rm_log_sink_t *sink);

#define rm_log(level, ...)                                              \
    do {                                                                \
        if ((int)(level) <= rm_log_level_current)                       \
            rm_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);      \
    } while (0)

/* Lines a peer can cause at will (a refused connection, a malformed
 * message): at most RM_LOG_PEER_BURST a second from each call site, so that
 * a flood of them (180,000 lines in 0.8 s, found by review) cannot fill a
 * disk. The first line let through after some were left out counts them. */
#define RM_LOG_PEER_BURST 10u
typedef struct rm_log_limit {
    _Atomic unsigned long long second; /* the second the count is for */
    _Atomic unsigned           n, left_out;
} rm_log_limit_t;
/* Whether a line may go now; *left_out: how many were dropped before it. */
int rm_log_limit_pass(rm_log_limit_t *lim, unsigned *left_out);

#define rm_log_peer(level, ...)                                         \
    do {                                                                \
        static rm_log_limit_t rm_lim_;                                  \
        unsigned rm_left_;                                              \
        if ((int)(level) <= rm_log_level_current &&                     \
            rm_log_limit_pass(&rm_lim_, &rm_left_)) {                   \
            if (rm_left_)                                               \
                rm_log_emit((level), __FILE__, __LINE__,                \
                            "(%u lines like the next left out)", rm_left_); \
            rm_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);      \
        }                                                               \
    } while (0)

#define rm_warn_peer(...) rm_log_peer(RM_LOG_WARN, __VA_ARGS__)
#define rm_info_peer(...) rm_log_peer(RM_LOG_INFO, __VA_ARGS__)

#define rm_error(...) rm_log(RM_LOG_ERROR, __VA_ARGS__)
#define rm_warn(...)  rm_log(RM_LOG_WARN, __VA_ARGS__)
#define rm_info(...)  rm_log(RM_LOG_INFO, __VA_ARGS__)
#define rm_debug(...) rm_log(RM_LOG_DEBUG, __VA_ARGS__)

#endif
