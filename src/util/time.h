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

/* How much later than its period a periodic check runs: time in which this
 * thread did not run (the process stopped, a VM paused, a loaded host) and so
 * heard nothing from anyone. A liveness check credits it to its peers'
 * silence, so that a stall of our own never reads as the peer's death.
 * Returns what the gap since the last call exceeds twice the period by (a
 * check's normal jitter is not a stall); 0 on the first call. */
static inline uint64_t rm_stall_ns(uint64_t *last_ns, uint64_t now, uint64_t period_ns)
{
    uint64_t gap = *last_ns != 0 && now > *last_ns ? now - *last_ns : 0;

    *last_ns = now;
    return gap > 2 * period_ns ? gap - 2 * period_ns : 0;
}

/* Move a peer's last-heard time forward by a stall of ours (rm_stall_ns),
 * never past now. */
static inline void rm_stall_credit(uint64_t *last_rx_ns, uint64_t stall_ns, uint64_t now)
{
    if (*last_rx_ns >= now)
        return;
    *last_rx_ns = stall_ns >= now - *last_rx_ns ? now : *last_rx_ns + stall_ns;
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
