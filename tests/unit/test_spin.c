/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Spin slots (src/engine/spin.h): never more holders than slots, across
 * threads and processes; a slot given back is free again; a process that
 * died holding one loses it (its lock is robust); a table others may write
 * is refused; the process's table honours REMORA_SPIN_SLOTS.
 * Each test opens its own shared-memory object, removed at the end.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/spin.h"

static char g_name[64];

static rm_spin_table_t *open_fresh(unsigned nslots)
{
    snprintf(g_name, sizeof(g_name), "/remora-spin-test-%d", (int)getpid());
    shm_unlink(g_name);
    rm_spin_table_t *t = rm_spin_table_open(g_name, nslots);
    assert_non_null(t);
    return t;
}

static void close_fresh(rm_spin_table_t *t)
{
    rm_spin_table_close(t);
    shm_unlink(g_name);
}

static void test_bad_sizes(void **state)
{
    (void)state;
    assert_null(rm_spin_table_open("/remora-spin-test-none", 0));
    assert_null(rm_spin_table_open("/remora-spin-test-none", RM_SPIN_SLOTS_MAX + 1));
    assert_null(rm_spin_table_open("no-slash/in/the/middle", 2)); /* shm_open refuses it */
}

static void test_take_give(void **state)
{
    (void)state;
    rm_spin_table_t *t = open_fresh(2);
    int a = rm_spin_table_take(t), b = rm_spin_table_take(t);

    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(rm_spin_table_take(t), -1); /* both held */
    rm_spin_table_give(t, a);
    assert_int_equal(rm_spin_table_take(t), a);
    rm_spin_table_give(t, a);
    rm_spin_table_give(t, b);
    rm_spin_table_give(t, -1); /* nothing held: nothing happens */
    rm_spin_table_give(t, 99);
    close_fresh(t);
}

/* A second opening (another process would do the same) sees the same slots. */
static void test_shared(void **state)
{
    (void)state;
    rm_spin_table_t *t = open_fresh(1), *u = rm_spin_table_open(g_name, 1);

    assert_non_null(u);
    int a = rm_spin_table_take(t);
    assert_true(a >= 0);
    assert_int_equal(rm_spin_table_take(u), -1);
    rm_spin_table_give(t, a);
    assert_int_equal(rm_spin_table_take(u), a);
    rm_spin_table_give(u, a);
    rm_spin_table_close(u);
    close_fresh(t);
}

/* A table others may write (made first by another user, say) is not used. */
static void test_foreign_table_refused(void **state)
{
    (void)state;
    rm_spin_table_t *t = open_fresh(1);
    int fd = shm_open(g_name, O_RDWR, 0);

    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0666), 0);
    assert_null(rm_spin_table_open(g_name, 1));
    assert_int_equal(fchmod(fd, 0600), 0);
    close(fd);
    rm_spin_table_t *u = rm_spin_table_open(g_name, 1);
    assert_non_null(u);
    rm_spin_table_close(u);
    close_fresh(t);
}

typedef struct {
    rm_spin_table_t *t;
    atomic_int      *holders, *most;
} churn_t;

static void *churn(void *arg)
{
    churn_t *c = arg;
    for (int k = 0; k < 20000; k++) {
        int s = rm_spin_table_take(c->t);
        if (s < 0)
            continue;
        int now = atomic_fetch_add(c->holders, 1) + 1, m = atomic_load(c->most);
        while (now > m && !atomic_compare_exchange_weak(c->most, &m, now))
            ;
        atomic_fetch_sub(c->holders, 1);
        rm_spin_table_give(c->t, s);
    }
    return NULL;
}

/* 8 threads taking and giving 3 slots: never 4 holders at once. */
static void test_bound_under_churn(void **state)
{
    (void)state;
    rm_spin_table_t *t = open_fresh(3);
    atomic_int holders = 0, most = 0;
    churn_t c = {.t = t, .holders = &holders, .most = &most};
    pthread_t th[8];

    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, churn, &c);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    assert_true(atomic_load(&most) >= 1);
    assert_true(atomic_load(&most) <= 3);
    for (int i = 0; i < 3; i++) /* all given back */
        assert_true(rm_spin_table_take(t) >= 0);
    close_fresh(t);
}

/* A child takes the only slot and dies holding it: the slot comes back. */
static void test_dead_holder_reaped(void **state)
{
    (void)state;
    rm_spin_table_t *t = open_fresh(1);
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        rm_spin_table_t *mine = rm_spin_table_open(g_name, 1);
        _exit(mine != NULL && rm_spin_table_take(mine) >= 0 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int got = rm_spin_table_take(t); /* at once: the kernel freed the lock */
    assert_int_equal(got, 0);
    close_fresh(t);
}

/* The process's table: REMORA_SPIN_SLOTS=0 means no table: every thread
 * may spin, and giving back what was never held does nothing. */
static void test_process_table_unlimited(void **state)
{
    (void)state;
    setenv("REMORA_SPIN_SLOTS", "0", 1);
    assert_int_equal(rm_spin_slots(), 0);
    assert_int_equal(rm_spin_take(), 1);
    assert_int_equal(rm_spin_take(), 1);
    rm_spin_give();
    rm_spin_give();
    unsetenv("REMORA_SPIN_SLOTS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_take_give),
        cmocka_unit_test(test_shared),
        cmocka_unit_test(test_foreign_table_refused),
        cmocka_unit_test(test_bound_under_churn),
        cmocka_unit_test(test_dead_holder_reaped),
        cmocka_unit_test(test_process_table_unlimited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
