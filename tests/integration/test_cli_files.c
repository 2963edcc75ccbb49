/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Files the `remora` command writes are never half-written, and a dead stream
 * is an error:
 * - read -o F with the server SIGKILLed mid-transfer, or the CLI sent SIGINT
 *   or SIGTERM: a non-zero exit, F holds exactly its old content, and the
 *   directory holds nothing new (no temporary file);
 * - a completed read -o replaces F (keeping its mode; a new file gets 0644
 *   less the umask) and a symbolic link to F stays a link;
 * - a device node, a FIFO or a directory as the output of read -o or stream
 *   clone is refused and left as it was (the FIFO is never opened, so nothing
 *   blocks on it);
 * - stream read exits non-zero within seconds of its server being SIGKILLed,
 *   even with --seconds far ahead, and exits 0 on an idle but live ring.
 *
 * The full-disk case of stream clone needs a small file system of its own:
 * test_clone_full_disk.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1024u * 1024u)

static const char OLD[] = "old content: must survive a failed transfer\n";

/* ---------------------------------------------------------------- helpers */

/* A fresh empty directory under the test's temporary directory. */
static void fresh_dir(char *buf, size_t len, const char *name)
{
    it_tmp_path(buf, len, name);
    if (mkdir(buf, 0755) != 0)
        fail_msg("mkdir %s: %s", buf, strerror(errno));
}

/* Assert dir holds exactly the entries named (NULL-terminated), nothing else. */
static void assert_dir_holds(const char *dir, const char *const *names)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t want = 0, seen = 0;

    while (names[want] != NULL)
        want++;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        bool expected = false;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        for (size_t i = 0; i < want; i++)
            expected = expected || strcmp(e->d_name, names[i]) == 0;
        if (!expected) {
            closedir(d);
            fail_msg("unexpected '%s' left in %s", e->d_name, dir);
        }
        seen++;
    }
    closedir(d);
    if (seen != want)
        fail_msg("%s holds %zu of the %zu expected entries", dir, seen, want);
}

static void assert_file_is(const char *path, const void *data, size_t len)
{
    size_t got = 0;
    char *back = it_read_file(path, &got);

    if (back == NULL)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    if (got != len || memcmp(back, data, len) != 0) {
        free(back);
        fail_msg("%s: %zu bytes, not the expected %zu bytes of content", path, got, len);
    }
    free(back);
}

/*
 * Bytes pid has in files it holds open under dir (its output, named or not:
 * an O_TMPFILE shows as "DIR/#N (deleted)"). -1 once the process is gone.
 */
static long long bytes_written_under(pid_t pid, const char *dir)
{
    char fddir[64], link[600], target[1024];
    struct dirent *e;
    long long most = 0;
    DIR *d;

    snprintf(fddir, sizeof(fddir), "/proc/%d/fd", (int)pid);
    if ((d = opendir(fddir)) == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        ssize_t n;
        if (e->d_name[0] == '.')
            continue;
        snprintf(link, sizeof(link), "%s/%s", fddir, e->d_name);
        n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strncmp(target, dir, strlen(dir)) == 0 && target[strlen(dir)] == '/' &&
            stat(link, &st) == 0 && (long long)st.st_size > most)
            most = (long long)st.st_size;
    }
    closedir(d);
    return most;
}

/* Wait until the CLI has written at least `bytes` into a file under dir. */
static void wait_for_output(const it_proc_t *p, const char *dir, long long bytes)
{
    double deadline = it_now_ms() + 60000;
    long long got = 0;

    while (it_now_ms() < deadline) {
        got = bytes_written_under(p->pid, dir);
        if (got < 0) {
            char *err = it_proc_stderr(p);
            fail_msg("the read ended before writing %lld bytes; stderr:\n%s", bytes, err);
        }
        if (got >= bytes)
            return;
        it_sleep_ms(1);
    }
    fail_msg("the read wrote only %lld of %lld bytes in 60 s", got, bytes);
}

/* ---------------------------------------------------------------- read -o */

/*
 * Start `read ADDR/big -o DIR/out` over the active-message path (a mapped
 * region would not notice its server die), where DIR/out holds OLD; return
 * once 64 MiB of the 1 GiB have been written.
 */
static void start_big_read(it_proc_t *p, const it_server_t *s, const char *dir, char *out,
                           size_t out_len)
{
    char target[IT_ADDR_MAX + 8];

    snprintf(out, out_len, "%s/out", dir);
    assert_int_equal(it_write_file(out, OLD, sizeof(OLD) - 1), 0);
    snprintf(target, sizeof(target), "%s/big", s->addr);
    assert_int_equal(it_cli_spawn(p, NULL, "read", target, "--path", "am", "-o", out, NULL), 0);
    wait_for_output(p, dir, 64ll * MiB);
}

/* The server SIGKILLed mid-read: exit 1, the old file exactly, nothing else. */
static void test_read_server_killed(void **state)
{
    static const char *const only_out[] = {"out", NULL};
    char dir[512], out[600];
    it_server_t s;
    it_proc_t p;
    it_run_t r;
    (void)state;

    fresh_dir(dir, sizeof(dir), "killed");
    it_must_start(&s, "--region", "big=1G", NULL);
    start_big_read(&p, &s, dir, out, sizeof(out));
    it_server_kill(&s);
    it_proc_wait(&p, 30000, &r);
    if (r.status != 1)
        fail_msg("read with its server killed exited %d, expected 1; stderr:\n%s", r.status,
                 r.err);
    it_run_free(&r);
    assert_file_is(out, OLD, sizeof(OLD) - 1);
    assert_dir_holds(dir, only_out);
}

/* SIGINT and SIGTERM to the CLI mid-read: 128 + the signal, the old file, nothing else. */
static void test_read_interrupted(void **state)
{
    static const char *const only_out[] = {"out", NULL};
    static const int sigs[] = {SIGINT, SIGTERM};
    it_server_t s;
    (void)state;

    it_must_start(&s, "--region", "big=1G", NULL);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        char dir[512], out[600], name[32];
        it_proc_t p;
        it_run_t r;

        snprintf(name, sizeof(name), "interrupted-%d", sigs[i]);
        fresh_dir(dir, sizeof(dir), name);
        start_big_read(&p, &s, dir, out, sizeof(out));
        kill(p.pid, sigs[i]);
        it_proc_wait(&p, 30000, &r);
        if (r.status != 128 + sigs[i])
            fail_msg("read sent signal %d exited %d, expected %d; stderr:\n%s", sigs[i],
                     r.status, 128 + sigs[i], r.err);
        it_assert_contains(r.err, "left as it was");
        it_run_free(&r);
        assert_file_is(out, OLD, sizeof(OLD) - 1);
        assert_dir_holds(dir, only_out);
    }
    assert_true(it_server_alive(&s));
    assert_int_equal(it_server_stop(&s), 0);
}

/* A completed read -o replaces the file whole, keeps an old file's mode and a link. */
static void test_read_replaces(void **state)
{
    static const char *const names[] = {"old", "new", "link", NULL};
    char dir[512], old[600], new_[600], link[600], target[IT_ADDR_MAX + 8];
    uint8_t *want = malloc(MiB);
    struct stat st;
    it_server_t s;
    it_run_t r;
    mode_t mask = umask(022);
    (void)state;

    umask(mask);
    assert_non_null(want);
    remora_pattern_fill(want, 0, MiB);
    fresh_dir(dir, sizeof(dir), "replace");
    snprintf(old, sizeof(old), "%s/old", dir);
    snprintf(new_, sizeof(new_), "%s/new", dir);
    snprintf(link, sizeof(link), "%s/link", dir);
    assert_int_equal(it_write_file(old, OLD, sizeof(OLD) - 1), 0);
    assert_int_equal(chmod(old, 0640), 0);
    assert_int_equal(symlink("old", link), 0);
    it_must_start(&s, "--region", "a=1M", NULL);
    snprintf(target, sizeof(target), "%s/a", s.addr);

    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", target, "-o", new_, NULL);
    if (r.status != 0)
        fail_msg("read -o new exited %d: %s", r.status, r.err);
    it_run_free(&r);
    assert_file_is(new_, want, MiB);
    assert_int_equal(stat(new_, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644 & ~mask);

    /* Through the link: old is replaced, keeps 0640, the link stays a link. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", target, "-o", link, NULL);
    if (r.status != 0)
        fail_msg("read -o link exited %d: %s", r.status, r.err);
    it_run_free(&r);
    assert_file_is(old, want, MiB);
    assert_int_equal(stat(old, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_dir_holds(dir, names);
    assert_int_equal(it_server_stop(&s), 0);
    free(want);
}

/* ---------------------------------------------------------------- refused targets */

/* A character device of our own (mknod needs root), else /dev/null itself. */
static void char_device(char *buf, size_t len)
{
    it_tmp_path(buf, len, "null-device");
    if (geteuid() != 0 || mknod(buf, S_IFCHR | 0666, makedev(1, 3)) != 0)
        snprintf(buf, len, "/dev/null");
}

static void assert_refused(it_run_t *r, const char *what)
{
    if (r->status != 1)
        fail_msg("exit %d, expected 1 (refused); stderr:\n%s", r->status, r->err);
    if (it_count_lines(r->err) != 1)
        fail_msg("expected one stderr line:\n%s", r->err);
    it_assert_contains(r->err, what);
    it_assert_contains(r->err, "must be a regular file");
}

/* Devices, FIFOs and directories are refused as outputs, and left as they were. */
static void test_refused_targets(void **state)
{
    char dev[512], fifo[512], dir[512], target[IT_ADDR_MAX + 8], ring[IT_ADDR_MAX + 8];
    static const char *const empty[] = {NULL};
    struct stat before, after;
    it_server_t s, rs;
    it_run_t r;
    (void)state;

    char_device(dev, sizeof(dev));
    it_tmp_path(fifo, sizeof(fifo), "fifo");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    fresh_dir(dir, sizeof(dir), "a-directory");
    assert_int_equal(stat(dev, &before), 0);
    it_must_start(&s, "--region", "a=1M", NULL);
    it_must_start(&rs, "stream", "serve", "--ring", "r=4Kx16", "--rate", "1000", NULL);
    snprintf(target, sizeof(target), "%s/a", s.addr);
    snprintf(ring, sizeof(ring), "%s/r", rs.addr);

    for (int clone = 0; clone < 2; clone++) {
        const char *outs[] = {dev, fifo, dir};
        const char *what[] = {"is a character device", "is a FIFO", "is a directory"};
        for (size_t i = 0; i < 3; i++) {
            /* Short bound: opening a FIFO for writing would block forever. */
            if (clone)
                it_cli_run(&r, 20000, "stream", "clone", ring, outs[i], NULL);
            else
                it_cli_run(&r, 20000, "read", target, "-o", outs[i], NULL);
            assert_refused(&r, what[i]);
            it_run_free(&r);
        }
    }
    assert_int_equal(stat(dev, &after), 0);
    assert_true(S_ISCHR(after.st_mode));
    assert_int_equal(after.st_rdev, before.st_rdev);
    assert_int_equal(after.st_ino, before.st_ino);
    assert_int_equal(stat(fifo, &after), 0);
    assert_true(S_ISFIFO(after.st_mode));
    assert_dir_holds(dir, empty);

    /* stdout stays an output. */
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "read", target, "--length", "4096", "-o", "-", NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.out_len, 4096);
    it_assert_pattern(r.out, 0, 4096);
    it_run_free(&r);
    assert_int_equal(it_server_stop(&rs), 0);
    assert_int_equal(it_server_stop(&s), 0);
}

/* ---------------------------------------------------------------- stream read */

/* A stream whose server is SIGKILLed ends stream read with exit 1 within seconds,
 * though --seconds is a minute away. */
static void test_stream_read_server_killed(void **state)
{
    char target[IT_ADDR_MAX + 8];
    it_server_t s;
    it_proc_t p;
    it_run_t r;
    double killed;
    (void)state;

    it_must_start(&s, "stream", "serve", "--ring", "r=4Kx64", "--rate", "1000", NULL);
    snprintf(target, sizeof(target), "%s/r", s.addr);
    assert_int_equal(it_cli_spawn(&p, NULL, "stream", "read", target, "--no-reconnect", "--seconds", "60", "--json",
                                  NULL), 0);
    it_sleep_ms(1000);
    it_server_kill(&s);
    killed = it_now_ms();
    it_proc_wait(&p, 30000, &r);
    if (r.status != 1)
        fail_msg("stream read exited %d after its server was killed, expected 1; stderr:\n%s",
                 r.status, r.err);
    if (it_now_ms() - killed > 5000)
        fail_msg("stream read took %.0f ms to notice its server died", it_now_ms() - killed);
    it_assert_contains(r.err, "stream ended");
    it_assert_contains(r.out, "\"elements\":"); /* what was read is still summed up */
    it_run_free(&r);
}

/* An idle ring on a live server is waited for: --seconds ends it with exit 0. */
static void test_stream_read_idle_ring(void **state)
{
    char target[IT_ADDR_MAX + 8];
    it_server_t s;
    it_run_t r;
    (void)state;

    /* One element every 20 s: none comes during the read. */
    it_must_start(&s, "stream", "serve", "--ring", "r=4Kx64", "--rate", "0.05", NULL);
    snprintf(target, sizeof(target), "%s/r", s.addr);
    it_cli_run(&r, IT_CLI_TIMEOUT_MS, "stream", "read", target, "--seconds", "3", "--timeout",
               "1000", "--json", NULL);
    if (r.status != 0)
        fail_msg("stream read of an idle ring exited %d, expected 0; stderr:\n%s", r.status,
                 r.err);
    it_assert_contains(r.out, "\"elements\":0");
    it_run_free(&r);
    /* Its producer sleeps until the next element is due: no graceful stop. */
    it_server_kill(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_read_server_killed, it_teardown_reap),
        cmocka_unit_test_teardown(test_read_interrupted, it_teardown_reap),
        cmocka_unit_test_teardown(test_read_replaces, it_teardown_reap),
        cmocka_unit_test_teardown(test_refused_targets, it_teardown_reap),
        cmocka_unit_test_teardown(test_stream_read_server_killed, it_teardown_reap),
        cmocka_unit_test_teardown(test_stream_read_idle_ring, it_teardown_reap),
    };

    it_init("cli-files");
    return it_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
