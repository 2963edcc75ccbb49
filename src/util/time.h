/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef RM_UTIL_TIME_H
#define RM_UTIL_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Absolute deadline for a timeout in ms; a negative timeout means "never". */
static inline uint64_t rm_deadline_ns(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX : rm_now_ns() + (uint64_t)timeout_ms * 1000000u;
}

static inline void rm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
