/* SPDX-License-Identifier: BSD-3-Clause */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rm_log_level_current = RM_LOG_WARN;

static void log_read_env(void)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    const char *v = getenv("REMORA_LOG");
    if (v == NULL)
        return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0)
            rm_log_level_current = i;
}

void rm_log_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, log_read_env);
}

void rm_log_emit(rm_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    static const char tag[] = "EWID";
    char msg[512];
    va_list ap;
    const char *base = strrchr(file, '/');

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One write per line so lines from several threads do not interleave. */
    fprintf(stderr, "remora[%d] %c %s:%d %s\n", (int)getpid(), tag[level],
            base ? base + 1 : file, line, msg);
}
