/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdatomic.h>

#include "util/fault.h"

static atomic_uint g_send_type, g_send_count;

void rm_fault_send_arm(unsigned type, unsigned count)
{
    atomic_store(&g_send_type, type);
    atomic_store(&g_send_count, count);
}

int rm_fault_send_take(unsigned type)
{
    unsigned n = atomic_load_explicit(&g_send_count, memory_order_relaxed);

    while (n > 0 && atomic_load(&g_send_type) == type)
        if (atomic_compare_exchange_weak(&g_send_count, &n, n - 1))
            return 1;
    return 0;
}
