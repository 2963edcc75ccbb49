/* SPDX-License-Identifier: BSD-3-Clause */
/* Spin slots (spin.h). */
#include "engine/spin.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/env.h"

#define RM_SPIN_READY_WAIT_MS 100 /* how long an opener waits for another to set the table up */

/* A slot: a process-shared robust mutex, locked by the thread that spins.
 * The kernel hands a dead owner's lock to the next taker (EOWNERDEAD),
 * whatever pid namespace either lives in. A cache line each. */
typedef struct {
    _Alignas(64) pthread_mutex_t m;
} rm_spin_slot_t;

/* The shared object. A new one is zeros; whoever moves state from 0 sets it
 * up, and its slot count holds for every process. */
typedef struct {
    _Alignas(64) _Atomic uint32_t state; /* 0 new, 1 being set up, 2 ready */
    uint32_t       nslots;
    rm_spin_slot_t slot[RM_SPIN_SLOTS_MAX];
} rm_spin_shared_t;

enum { SPIN_NEW, SPIN_SETTING_UP, SPIN_READY };

struct rm_spin_table {
    rm_spin_shared_t *sh;
    unsigned          nslots; /* sh->nslots as checked when opened */
};

static int set_up(rm_spin_shared_t *sh, unsigned nslots)
{
    pthread_mutexattr_t a;

    if (pthread_mutexattr_init(&a) != 0)
        return -1;
    int rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) |
             pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (unsigned i = 0; rc == 0 && i < RM_SPIN_SLOTS_MAX; i++)
        rc = pthread_mutex_init(&sh->slot[i].m, &a);
    pthread_mutexattr_destroy(&a);
    if (rc != 0)
        return -1;
    sh->nslots = nslots;
    atomic_store(&sh->state, SPIN_READY);
    return 0;
}

/* Set the table up, or wait for whoever does. 0 once it is ready. */
static int make_ready(rm_spin_shared_t *sh, unsigned nslots)
{
    uint32_t st = SPIN_NEW;

    if (atomic_compare_exchange_strong(&sh->state, &st, SPIN_SETTING_UP))
        return set_up(sh, nslots);
    for (int ms = 0; st != SPIN_READY && ms < RM_SPIN_READY_WAIT_MS; ms++) {
        usleep(1000);
        st = atomic_load(&sh->state);
    }
    return st == SPIN_READY && sh->nslots >= 1 && sh->nslots <= RM_SPIN_SLOTS_MAX ? 0 : -1;
}

rm_spin_table_t *rm_spin_table_open(const char *name, unsigned nslots)
{
    const size_t len = sizeof(rm_spin_shared_t);
    rm_spin_shared_t *sh;
    rm_spin_table_t *t;
    struct stat st;
    int fd;

    if (nslots == 0 || nslots > RM_SPIN_SLOTS_MAX ||
        (fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
        return NULL;
    /* Only a table of our own that nobody else may write: another local
     * user could have made one under our name first, to hold its slots or
     * to truncate it under our mapping (SIGBUS). */
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
        ((size_t)st.st_size < len && ftruncate(fd, (off_t)len) != 0)) {
        close(fd);
        return NULL;
    }
    sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED)
        return NULL;
    if (make_ready(sh, nslots) != 0 || (t = calloc(1, sizeof(*t))) == NULL) {
        munmap(sh, len);
        return NULL;
    }
    t->sh     = sh;
    t->nslots = sh->nslots;
    return t;
}

void rm_spin_table_close(rm_spin_table_t *t)
{
    if (t == NULL)
        return;
    munmap(t->sh, sizeof(rm_spin_shared_t));
    free(t);
}

int rm_spin_table_take(rm_spin_table_t *t)
{
    for (unsigned i = 0; i < t->nslots; i++) {
        int rc = pthread_mutex_trylock(&t->sh->slot[i].m);
        if (rc == EOWNERDEAD) /* its holder died holding it: ours now */
            rc = pthread_mutex_consistent(&t->sh->slot[i].m);
        if (rc == 0)
            return (int)i;
    }
    return -1;
}

void rm_spin_table_give(rm_spin_table_t *t, int slot)
{
    if (slot >= 0 && (unsigned)slot < t->nslots)
        pthread_mutex_unlock(&t->sh->slot[slot].m);
}

/* ------------------------------------------------------ the process's table */

static rm_spin_table_t *proc_table;
static pthread_once_t   proc_once = PTHREAD_ONCE_INIT;
static _Thread_local int held = -1;
/* Slots this process's threads hold now, and have taken since it started
 * (rm_spin_held, tests/integration/test_in_process.c). */
static atomic_uint held_here;
static atomic_ulong taken_here;

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
    snprintf(name, sizeof(name), "/remora-spin2-%u", (unsigned)geteuid());
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
    if (held < 0)
        return 0;
    atomic_fetch_add_explicit(&held_here, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&taken_here, 1, memory_order_relaxed);
    return 1;
}

void rm_spin_give(void)
{
    if (held < 0)
        return;
    rm_spin_table_give(proc_table, held);
    held = -1;
    atomic_fetch_sub_explicit(&held_here, 1, memory_order_relaxed);
}

unsigned rm_spin_held(unsigned long *taken_p)
{
    if (taken_p)
        *taken_p = atomic_load_explicit(&taken_here, memory_order_relaxed);
    return atomic_load_explicit(&held_here, memory_order_relaxed);
}

unsigned rm_spin_slots(void)
{
    pthread_once(&proc_once, proc_open);
    return proc_table ? proc_table->nslots : 0;
}
