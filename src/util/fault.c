/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdatomic.h>

#include "util/fault.h"

static atomic_uint g_send_type, g_send_skip, g_send_count;

void rm_fault_send_arm_after(unsigned type, unsigned skip, unsigned count)
{
    atomic_store(&g_send_count, 0); /* disarmed while the others change */
    atomic_store(&g_send_type, type);
    atomic_store(&g_send_skip, skip);
    atomic_store(&g_send_count, count);
}

void rm_fault_send_arm(unsigned type, unsigned count) { rm_fault_send_arm_after(type, 0, count); }

int rm_fault_send_take(unsigned type)
{
    unsigned n = atomic_load_explicit(&g_send_count, memory_order_relaxed);

    if (n == 0 || atomic_load(&g_send_type) != type)
        return 0;
    for (unsigned s = atomic_load(&g_send_skip); s > 0;)
        if (atomic_compare_exchange_weak(&g_send_skip, &s, s - 1))
            return 0; /* one of the sends let through first */
    while (n > 0)
        if (atomic_compare_exchange_weak(&g_send_count, &n, n - 1))
            return 1;
    return 0;
}
