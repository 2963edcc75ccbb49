/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Spin slots: how many threads of one user may spin for events at once,
 * across every remora process on the host.
 *
 * Design notes
 * - Spinning saves a wake-up only while the spinner has a core to itself.
 *   A look at the runnable count (engine.c) cannot tell a spinner's own
 *   peers (the server thread it waits for, a producer) from competitors: on
 *   2 cores it forbade the one spinner that helps (docs/performance.md,
 *   session 33). A slot is asked for when a thread starts to spin and given
 *   back when it sleeps, so the host never has more spinners than slots,
 *   whoever they are. The runnable count still applies, beyond the
 *   slots' own spinners: slots alone let 4 of 64 subscribers on 16 cores
 *   spin, and their tail grew 7x.
 * - The table is a POSIX shared-memory object per user
 *   (/dev/shm/remora-spin2-EUID) of process-shared robust mutexes, one a
 *   slot: a thread holds a slot by holding its lock. The kernel hands the
 *   lock of a thread or process that died holding it to the next taker
 *   (EOWNERDEAD), whatever pid namespace either lives in. Whoever makes the
 *   table sets its slot count; every process uses that one.
 * - Where the table cannot be opened, or is not the user's own with no
 *   access for others (made by someone else first), every thread may spin
 *   (the runnable count still applies).
 * - Only the engine's progress threads and the threads driving it (a caller
 *   waiting for its operation) take slots. The other busy loops keep their
 *   own bounds: stream proxies, signal waits, GPU socket proxies, copy
 *   queues.
 * - Threading: any thread. A thread holds at most one slot (thread-local),
 *   whichever context it spins for; it gives it back before it sleeps and
 *   when it leaves a wait, so a wait on one context inside another's is not
 *   supported (nothing does that).
 */
#ifndef RM_ENGINE_SPIN_H
#define RM_ENGINE_SPIN_H

#include <stdint.h>

typedef struct rm_spin_table rm_spin_table_t;

/* The table named name (a shared-memory object): made with nslots slots (1
 * to RM_SPIN_SLOTS_MAX) if new, with its own count if not; NULL if it cannot
 * be opened, is not ours alone, or is not set up within 100 ms. */
#define RM_SPIN_SLOTS_MAX 64
rm_spin_table_t *rm_spin_table_open(const char *name, unsigned nslots);
void             rm_spin_table_close(rm_spin_table_t *t);
/* A free slot, now held by the calling thread: its index, or -1 if every
 * slot is held. Given back by the same thread. */
int              rm_spin_table_take(rm_spin_table_t *t);
void             rm_spin_table_give(rm_spin_table_t *t, int slot);

/* The process's table (REMORA_SPIN_SLOTS slots; by default 2 under 8
 * cores, none from 8 on; 0: no table, no limit), for the calling thread: 1
 * if it holds a slot (now or from before) or there is no table, 0 if all
 * are taken. */
int  rm_spin_take(void);
/* The calling thread's slot back, if it holds one. */
void rm_spin_give(void);
/* How many slots the process's table has; 0: no table, no limit. */
unsigned rm_spin_slots(void);
/* How many slots this process's threads hold now; *taken_p (if not NULL):
 * how many times they took one since the process started. For tests: a
 * thread that sleeps holding a slot keeps every other process on the host
 * from spinning. */
unsigned rm_spin_held(unsigned long *taken_p);

#endif
