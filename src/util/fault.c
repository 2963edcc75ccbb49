/* SPDX-License-Identifier: BSD-3-Clause */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "util/fault.h"

/* One armed fault: the next `count` sends of `type`, after `skip` of them. */
typedef struct rm_fault {
    atomic_uint type, skip, count;
    atomic_int  arg;
} rm_fault_t;

static rm_fault_t g_send, g_ep_fail, g_stray, g_overpush;

static void arm(rm_fault_t *f, unsigned type, unsigned skip, unsigned count, int arg)
{
    atomic_store(&f->count, 0); /* disarmed while the others change */
    atomic_store(&f->type, type);
    atomic_store(&f->skip, skip);
    atomic_store(&f->arg, arg);
    atomic_store(&f->count, count);
}

static int take(rm_fault_t *f, unsigned type)
{
    unsigned n = atomic_load_explicit(&f->count, memory_order_relaxed);

    if (n == 0 || atomic_load(&f->type) != type)
        return 0;
    for (unsigned s = atomic_load(&f->skip); s > 0;)
        if (atomic_compare_exchange_weak(&f->skip, &s, s - 1))
            return 0; /* one of the sends let through first */
    while (n > 0)
        if (atomic_compare_exchange_weak(&f->count, &n, n - 1))
            return 1;
    return 0;
}

void rm_fault_send_arm_after(unsigned type, unsigned skip, unsigned count)
{
    arm(&g_send, type, skip, count, 0);
}

void rm_fault_send_arm(unsigned type, unsigned count) { arm(&g_send, type, 0, count, 0); }

int rm_fault_send_take(unsigned type) { return take(&g_send, type); }

void rm_fault_ep_fail_arm(unsigned type, unsigned count, int queued)
{
    arm(&g_ep_fail, type, 0, count, queued);
}

int rm_fault_ep_fail_take(unsigned type, int *queued)
{
    if (!take(&g_ep_fail, type))
        return 0;
    *queued = atomic_load(&g_ep_fail.arg);
    return 1;
}

void rm_fault_stray_arm(unsigned type, unsigned count) { arm(&g_stray, type, 0, count, 0); }

int rm_fault_stray_take(unsigned type) { return take(&g_stray, type); }

/* The lie's count and map_fd (arg) in a fault of type 0; the key beside it,
 * written while the fault is disarmed. */
static rm_fault_t g_lie;
static struct {
    uint8_t rkey[256];
    size_t  rkey_len;
} g_lie_key;

void rm_fault_lie_arm(int map_fd, const void *rkey, size_t rkey_len, unsigned count)
{
    arm(&g_lie, 0, 0, 0, 0);
    g_lie_key.rkey_len = rkey_len < sizeof(g_lie_key.rkey) ? rkey_len : sizeof(g_lie_key.rkey);
    if (g_lie_key.rkey_len)
        memcpy(g_lie_key.rkey, rkey, g_lie_key.rkey_len);
    arm(&g_lie, 0, 0, count, map_fd);
}

int rm_fault_lie_take(int *map_fd, const void **rkey, size_t *rkey_len)
{
    if (!take(&g_lie, 0))
        return 0;
    *map_fd   = atomic_load(&g_lie.arg);
    *rkey     = g_lie_key.rkey;
    *rkey_len = g_lie_key.rkey_len;
    return 1;
}

void rm_fault_overpush_arm(unsigned count) { arm(&g_overpush, 0, 0, count, 0); }

int rm_fault_overpush_take(void) { return take(&g_overpush, 0); }

static atomic_uint g_lanes_port;

void rm_fault_lanes_port_arm(unsigned port) { atomic_store(&g_lanes_port, port); }

unsigned rm_fault_lanes_port(void)
{
    return atomic_load_explicit(&g_lanes_port, memory_order_relaxed);
}
