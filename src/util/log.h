/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging: one line per event on stderr, level from REMORA_LOG (error, warn,
 * info, debug; default warn). An error is logged once, where it is found. */
#ifndef RM_UTIL_LOG_H
#define RM_UTIL_LOG_H

typedef enum { RM_LOG_ERROR, RM_LOG_WARN, RM_LOG_INFO, RM_LOG_DEBUG } rm_log_level_t;

extern int rm_log_level_current;

void rm_log_init(void);
void rm_log_emit(rm_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define rm_log(level, ...)                                              \
    do {                                                                \
        if ((int)(level) <= rm_log_level_current)                       \
            rm_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);      \
    } while (0)

#define rm_error(...) rm_log(RM_LOG_ERROR, __VA_ARGS__)
#define rm_warn(...)  rm_log(RM_LOG_WARN, __VA_ARGS__)
#define rm_info(...)  rm_log(RM_LOG_INFO, __VA_ARGS__)
#define rm_debug(...) rm_log(RM_LOG_DEBUG, __VA_ARGS__)

#endif
