/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Output files that are never half-written (read -o, stream clone).
 *
 * Design notes
 * - The target is checked before anything is created: it must be a regular
 *   file or not exist yet. A device node, a FIFO, a directory or a socket is
 *   refused, so it is never truncated, unlinked or blocked on. A symbolic link
 *   is followed: the file it names is replaced and the link stays.
 * - The bytes go to a new file in the target's directory (the same file
 *   system, so that rename() is atomic): an unnamed O_TMPFILE where the file
 *   system has them, so that nothing is left behind even by SIGKILL or a
 *   crash; else ".NAME.XXXXXX" created with O_EXCL.
 * - cli_output_commit() runs only after the whole transfer: flush, fsync, the
 *   old file's mode and owner, a name (linkat() for an O_TMPFILE), rename()
 *   over the target, fsync of the directory. Until the rename the target is
 *   untouched; after it, it holds the complete new content.
 * - cli_output_abort() closes and unlinks the temporary file; every error path
 *   of a command calls it.
 * - While a file output is open (or a command asked: cli_catch_interrupts,
 *   e.g. `stream read`, which ends on Ctrl-C), SIGINT and SIGTERM are caught: the handler
 *   unlinks a named temporary file (unlink() is async-signal-safe) and sets a
 *   flag that copy loops check (cli_interrupted()). The handler is one-shot
 *   (SA_RESETHAND): a second signal ends a process stuck in a transfer at
 *   once, and nothing is left behind then either. It may run on any thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The named temporary file the signal handler removes, while g_tmp_armed.
 * Lock-free atomics: safe in a handler, and ordered across threads (the
 * handler may run on a library thread). */
static char             g_tmp[PATH_MAX];
static atomic_int       g_tmp_armed;
static atomic_int       g_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler needs lock-free atomics");
static struct sigaction      g_old_int, g_old_term;
static bool                  g_handlers;

static void cli_output_on_signal(int sig)
{
    int saved = errno;

    if (atomic_exchange(&g_tmp_armed, 0) != 0) {
        unlink(g_tmp);
    }
    atomic_store(&g_signal, sig);
    errno = saved;
}

int cli_interrupted(void)
{
    return atomic_load(&g_signal);
}

void cli_catch_interrupts(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cli_output_on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    g_handlers = true;
}

void cli_release_interrupts(void)
{
    if (g_handlers) {
        sigaction(SIGINT, &g_old_int, NULL);
        sigaction(SIGTERM, &g_old_term, NULL);
        g_handlers = false;
    }
}

void cli_block_stop_signals(sigset_t *signals)
{
    sigemptyset(signals);
    sigaddset(signals, SIGINT);
    sigaddset(signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, signals, NULL);
}

/* Name the temporary file (for the handler), or forget it (name NULL). */
static void cli_output_arm(const char *name)
{
    atomic_store(&g_tmp_armed, 0);
    if (name != NULL) {
        snprintf(g_tmp, sizeof(g_tmp), "%s", name);
        atomic_store(&g_tmp_armed, 1);
    }
}

static const char *cli_file_kind(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFDIR:  return "a directory";
    case S_IFCHR:  return "a character device";
    case S_IFBLK:  return "a block device";
    case S_IFIFO:  return "a FIFO";
    case S_IFSOCK: return "a socket";
    default:       return "not a regular file";
    }
}

/* "DIR/.BASE.XXXXXX" with six random letters. */
static int cli_tmp_name(char *buf, size_t len, const char *path)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    int dir_len = slash != NULL ? (int)(slash - path + 1) : 0;
    struct timespec ts;
    uint64_t x;
    char rnd[7];

    clock_gettime(CLOCK_REALTIME, &ts);
    x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
        (uint64_t)(uintptr_t)buf;
    for (int i = 0; i < 6; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        rnd[i] = letters[(x >> 33) % (sizeof(letters) - 1)];
    }
    rnd[6] = '\0';
    return (size_t)snprintf(buf, len, "%.*s.%s.%s", dir_len, path, base, rnd) < len ? 0 : -1;
}

/* The directory of path, for O_TMPFILE and the final fsync. */
static void cli_dir_of(char *buf, size_t len, const char *path)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL) {
        snprintf(buf, len, ".");
    } else if (slash == path) {
        snprintf(buf, len, "/");
    } else {
        snprintf(buf, len, "%.*s", (int)(slash - path), path);
    }
}

/* Check the target; fill o->path (symlinks resolved) and what to keep of an old file. */
static int cli_output_check(cli_output_t *o, const char *cmd, const char *target)
{
    struct stat st;

    if (lstat(o->name, &st) != 0) {
        if (errno != ENOENT) {
            return cli_error(cmd, target, REMORA_OK, "cannot use '%s': %s", o->name,
                             strerror(errno));
        }
        if ((size_t)snprintf(o->path, sizeof(o->path), "%s", o->name) >= sizeof(o->path)) {
            return cli_error(cmd, target, REMORA_OK, "path '%s' is too long", o->name);
        }
        return 0;
    }
    if (S_ISLNK(st.st_mode)) {
        if (realpath(o->name, o->path) == NULL || stat(o->path, &st) != 0) {
            return cli_error(cmd, target, REMORA_OK,
                             "cannot follow the symbolic link '%s': %s", o->name,
                             strerror(errno));
        }
    } else if ((size_t)snprintf(o->path, sizeof(o->path), "%s", o->name) >= sizeof(o->path)) {
        return cli_error(cmd, target, REMORA_OK, "path '%s' is too long", o->name);
    }
    if (!S_ISREG(st.st_mode)) {
        return cli_error(cmd, target, REMORA_OK,
                         "'%s' is %s; the output must be a regular file",
                         o->name, cli_file_kind(st.st_mode));
    }
    if (access(o->path, W_OK) != 0) {
        return cli_error(cmd, target, REMORA_OK, "cannot write '%s': %s", o->name,
                         strerror(errno));
    }
    o->exists = true;
    o->mode = st.st_mode & 07777;
    o->uid = st.st_uid;
    o->gid = st.st_gid;
    return 0;
}

/* Create the temporary file next to o->path: unnamed if the file system can. */
static int cli_output_create(cli_output_t *o, const char *cmd, const char *target)
{
    char dir[PATH_MAX];

    cli_dir_of(dir, sizeof(dir), o->path);
#ifdef O_TMPFILE
    o->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (o->fd >= 0) {
        return 0;
    }
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
        return cli_error(cmd, target, REMORA_OK, "cannot create a file in '%s': %s", dir,
                         strerror(errno));
    }
#endif
    for (int tries = 0; tries < 100; tries++) {
        if (cli_tmp_name(o->tmp, sizeof(o->tmp), o->path) != 0) {
            return cli_error(cmd, target, REMORA_OK, "path '%s' is too long",
                             o->name);
        }
        cli_output_arm(o->tmp);
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (o->fd >= 0) {
            return 0;
        }
        cli_output_arm(NULL);
        if (errno != EEXIST) {
            break;
        }
    }
    o->tmp[0] = '\0';
    return cli_error(cmd, target, REMORA_OK, "cannot create a file in '%s': %s", dir,
                     strerror(errno));
}

int cli_output_open(cli_output_t *o, const char *cmd, const char *target, const char *name)
{
    int rc;

    memset(o, 0, sizeof(*o));
    o->name = name;
    o->fd = -1;
    if (strcmp(name, "-") == 0) {
        o->f = stdout;
        return 0;
    }
    cli_catch_interrupts(); /* before a named temporary file can exist */
    rc = cli_output_check(o, cmd, target);
    if (rc == 0) {
        rc = cli_output_create(o, cmd, target);
    }
    if (rc == 0 && (o->f = fdopen(o->fd, "wb")) == NULL) {
        rc = cli_error(cmd, target, REMORA_ERR_NO_MEMORY, NULL);
    }
    if (rc != 0) {
        cli_output_abort(o);
    }
    return rc;
}

void cli_output_abort(cli_output_t *o)
{
    if (o->f == stdout) {
        fflush(stdout);
        o->f = NULL;
        return;
    }
    if (o->f != NULL) {
        fclose(o->f); /* closes fd */
    } else if (o->fd >= 0) {
        close(o->fd);
    }
    o->f = NULL;
    o->fd = -1;
    cli_output_arm(NULL);
    if (o->tmp[0] != '\0') {
        unlink(o->tmp);
        o->tmp[0] = '\0';
    }
    cli_release_interrupts();
}

/* Give an unnamed temporary file a name next to the target. */
static int cli_output_link(cli_output_t *o)
{
    char proc[64];

    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", o->fd);
    for (int tries = 0; tries < 100; tries++) {
        if (cli_tmp_name(o->tmp, sizeof(o->tmp), o->path) != 0) {
            errno = ENAMETOOLONG;
            break;
        }
        cli_output_arm(o->tmp);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, o->tmp, AT_SYMLINK_FOLLOW) == 0 ||
            linkat(o->fd, "", AT_FDCWD, o->tmp, AT_EMPTY_PATH) == 0) {
            return 0;
        }
        cli_output_arm(NULL);
        if (errno != EEXIST) {
            break;
        }
    }
    o->tmp[0] = '\0';
    return -1;
}

int cli_output_commit(cli_output_t *o, const char *cmd, const char *target)
{
    char dir[PATH_MAX];
    const char *what;
    int dfd, sig;

    if (o->f == stdout) {
        o->f = NULL;
        if (fflush(stdout) != 0) {
            return cli_error(cmd, target, REMORA_OK, "cannot write to stdout: %s",
                             strerror(errno));
        }
        return 0;
    }
    what = "cannot write";
    if (fflush(o->f) != 0 || fsync(o->fd) != 0) {
        goto err;
    }
    if (o->exists) {
        if (fchown(o->fd, o->uid, o->gid) != 0) {
            /* Not ours to give away: the new file stays ours. */
        }
        what = "cannot set the mode of";
        if (fchmod(o->fd, o->mode) != 0) {
            goto err;
        }
    }
    what = "cannot name the new";
    if (o->tmp[0] == '\0' && cli_output_link(o) != 0) {
        goto err;
    }
    if ((sig = cli_interrupted()) != 0) {
        cli_output_abort(o);
        return cli_interrupted_error(cmd, target, o->name, sig);
    }
    what = "cannot replace";
    if (rename(o->tmp, o->path) != 0) {
        goto err;
    }
    cli_output_arm(NULL);
    o->tmp[0] = '\0';
    cli_dir_of(dir, sizeof(dir), o->path);
    if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        fsync(dfd); /* the rename itself on disk; best effort */
        close(dfd);
    }
    fclose(o->f); /* flushed and fsync'd above: nothing left to fail */
    o->f = NULL;
    o->fd = -1;
    cli_release_interrupts();
    return 0;
err:;
    int saved = errno;
    cli_output_abort(o);
    if ((sig = cli_interrupted()) != 0) {
        return cli_interrupted_error(cmd, target, o->name, sig);
    }
    return cli_error(cmd, target, REMORA_OK, "%s '%s': %s; it is left as it was", what,
                     o->name, strerror(saved));
}

int cli_interrupted_error(const char *cmd, const char *target, const char *file, int sig)
{
    cli_error(cmd, target, REMORA_OK, "interrupted by %s; '%s' is left as it was",
              sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal", file);
    return CLI_EXIT_SIGNAL + sig;
}
