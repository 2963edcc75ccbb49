/* SPDX-License-Identifier: BSD-3-Clause */
/* Spin slots (spin.h). */
#include "engine/spin.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/env.h"
#include "util/time.h"

#define RM_SPIN_REAP_NS 100000000ull /* how often a process looks for dead holders */

typedef struct {
    _Atomic int32_t pid; /* 0: free */
    char            pad[60]; /* a slot a cache line: spinners take and give often */
} rm_spin_slot_t;

struct rm_spin_table {
    rm_spin_slot_t  *slots; /* RM_SPIN_SLOTS_MAX of them, shared */
    unsigned         nslots;
    _Atomic uint64_t next_reap;
};

rm_spin_table_t *rm_spin_table_open(const char *name, unsigned nslots)
{
    const size_t len = RM_SPIN_SLOTS_MAX * sizeof(rm_spin_slot_t);
    rm_spin_table_t *t;
    int fd;

    if (nslots == 0 || nslots > RM_SPIN_SLOTS_MAX || (t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    /* Whoever creates it sizes it; a file of zeros is an empty table. */
    if ((fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        free(t);
        return NULL;
    }
    /* Only a table of our own that nobody else may write: another local
     * user could have made one under our name first, to fill its slots or
     * to truncate it under our mapping (SIGBUS). */
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
        ((size_t)st.st_size < len && ftruncate(fd, (off_t)len) != 0)) {
        close(fd);
        free(t);
        return NULL;
    }
    t->slots = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (t->slots == MAP_FAILED) {
        free(t);
        return NULL;
    }
    t->nslots = nslots;
    return t;
}

void rm_spin_table_close(rm_spin_table_t *t)
{
    if (t == NULL)
        return;
    munmap(t->slots, RM_SPIN_SLOTS_MAX * sizeof(rm_spin_slot_t));
    free(t);
}

/* Slots held by processes that are gone, freed. */
static void reap(rm_spin_table_t *t)
{
    uint64_t now = rm_now_ns();

    if (now < atomic_load_explicit(&t->next_reap, memory_order_relaxed))
        return;
    atomic_store_explicit(&t->next_reap, now + RM_SPIN_REAP_NS, memory_order_relaxed);
    for (unsigned i = 0; i < t->nslots; i++) {
        int32_t pid = atomic_load(&t->slots[i].pid);
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
            atomic_compare_exchange_strong(&t->slots[i].pid, &pid, 0);
    }
}

int rm_spin_table_take(rm_spin_table_t *t)
{
    int32_t self = (int32_t)getpid();

    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < t->nslots; i++) {
            int32_t free_pid = 0;
            if (atomic_load_explicit(&t->slots[i].pid, memory_order_relaxed) == 0 &&
                atomic_compare_exchange_strong(&t->slots[i].pid, &free_pid, self))
                return (int)i;
        }
        if (pass == 0)
            reap(t);
    }
    return -1;
}

void rm_spin_table_give(rm_spin_table_t *t, int slot)
{
    if (slot >= 0 && (unsigned)slot < t->nslots)
        atomic_store(&t->slots[slot].pid, 0);
}

/* ------------------------------------------------------ the process's table */

static rm_spin_table_t *proc_table;
static pthread_once_t   proc_once = PTHREAD_ONCE_INIT;
static _Thread_local int held = -1;

/* A child of fork() does not hold its parent's slot. */
static void forget_in_child(void) { held = -1; }

/*
 * By default a small machine (under 8 cores) has 2 slots; a larger one has
 * no table and keeps the runnable-count rule alone (engine.c). Measured
 * (docs/performance.md, session 33): on 2 cores the slots took a ring
 * subscriber's p50 from 54-250 to 19-24 us and one connection's reads from
 * 0.7-2.4 to 3.6-4.0 GB/s; on 16 cores, 4 slots without the runnable count
 * took the 64-subscriber p99 from 0.4 to 2.8 ms.
 */
static void proc_open(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t dflt = cores > 0 && cores < 8 ? 2 : 0;
    unsigned n = (unsigned)rm_env_u64("REMORA_SPIN_SLOTS", dflt, 0, RM_SPIN_SLOTS_MAX);
    char name[64];

    if (n == 0)
        return;
    pthread_atfork(NULL, NULL, forget_in_child);
    snprintf(name, sizeof(name), "/remora-spin-%u", (unsigned)getuid());
    proc_table = rm_spin_table_open(name, n);
}

int rm_spin_take(void)
{
    if (held >= 0)
        return 1;
    pthread_once(&proc_once, proc_open);
    if (proc_table == NULL)
        return 1;
    held = rm_spin_table_take(proc_table);
    return held >= 0;
}

void rm_spin_give(void)
{
    if (held < 0)
        return;
    rm_spin_table_give(proc_table, held);
    held = -1;
}

unsigned rm_spin_slots(void)
{
    pthread_once(&proc_once, proc_open);
    return proc_table ? proc_table->nslots : 0;
}
