/* SPDX-License-Identifier: BSD-3-Clause */
/* The integration test harness; see harness.h for the design notes. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef REMORA_BIN
#error "REMORA_BIN (path of the built remora command) must be defined by the build"
#endif

extern char **environ;

#define IT_MAX_ARGS     64
#define IT_MAX_CHILDREN 64

static char   g_tmpdir[256];
static char   g_name[64] = "it";
static pid_t  g_children[IT_MAX_CHILDREN];
static char   g_child_log[IT_MAX_CHILDREN][512]; /* each child's stderr */
static pid_t  g_main_pid;
static bool   g_keep_tmp;
static unsigned g_seq;

/* ---------------------------------------------------------------- time */

uint64_t it_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double it_now_ms(void) { return (double)it_now_ns() / 1e6; }

void it_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------------- registry */

static void child_add(pid_t pid, const char *log_path)
{
    for (int i = 0; i < IT_MAX_CHILDREN; i++) {
        if (g_children[i] == 0) {
            g_children[i] = pid;
            snprintf(g_child_log[i], sizeof(g_child_log[i]), "%s", log_path);
            return;
        }
    }
    fprintf(stderr, "harness: too many children; pid %d not tracked\n", (int)pid);
}

static void child_del(pid_t pid)
{
    for (int i = 0; i < IT_MAX_CHILDREN; i++)
        if (g_children[i] == pid)
            g_children[i] = 0;
}

/* Decode a waitpid status: exit code, or 128+signal. */
static int decode_status(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return -1;
}

/* Wait for pid up to timeout_ms; returns decoded status, or -1 on timeout (still running). */
static int wait_child(pid_t pid, int timeout_ms)
{
    uint64_t deadline = it_now_ns() + (uint64_t)timeout_ms * 1000000u;
    unsigned nap = 1;

    for (;;) {
        int wstatus;
        pid_t r = waitpid(pid, &wstatus, WNOHANG);
        if (r == pid) {
            child_del(pid);
            return decode_status(wstatus);
        }
        if (r < 0 && errno != EINTR) {
            child_del(pid);
            return -2; /* not our child any more */
        }
        if (it_now_ns() >= deadline)
            return -1;
        it_sleep_ms(nap);
        if (nap < 20)
            nap *= 2;
    }
}

static void kill_and_reap(pid_t pid)
{
    int wstatus;

    kill(pid, SIGKILL);
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    child_del(pid);
}

/* The last lines of a leftover child's stderr, to stdout: CI keeps a failed
 * test's output, not its temporary directory. */
static void print_log_tail(const char *path)
{
    size_t len = 0;
    char *log = it_read_file(path, &len);
    size_t from = len, lines = 0;

    if (log == NULL)
        return;
    while (from > 0 && lines <= 30)
        if (log[--from] == '\n')
            lines++;
    printf("harness: ---- the end of %s ----\n%s\nharness: ---- end ----\n", path,
           log + from + (from > 0));
    free(log);
}

void it_reap_all(void)
{
    if (getpid() != g_main_pid)
        return;
    for (int i = 0; i < IT_MAX_CHILDREN; i++) {
        pid_t pid = g_children[i];
        int wstatus;
        if (pid == 0)
            continue;
        /* One that ended by itself (a server that crashed, say) is the
         * likely cause of the failure that left it here. */
        if (waitpid(pid, &wstatus, WNOHANG) == pid) {
            printf("harness: leftover child %d had ended (status %d)\n", (int)pid,
                   decode_status(wstatus));
            print_log_tail(g_child_log[i]);
            child_del(pid);
            continue;
        }
        fprintf(stderr, "harness: killing leftover child %d\n", (int)pid);
        kill_and_reap(pid);
    }
}

int it_teardown_reap(void **state)
{
    (void)state;
    it_reap_all();
    return 0;
}

/* ---------------------------------------------------------------- temp dir */

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024];

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR)
            rm_tree(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void at_exit_cleanup(void)
{
    if (getpid() != g_main_pid)
        return;
    it_reap_all();
    if (g_tmpdir[0] == '\0')
        return;
    if (g_keep_tmp)
        fprintf(stderr, "harness: logs kept in %s\n", g_tmpdir);
    else
        rm_tree(g_tmpdir);
}

void it_init(const char *test_name)
{
    const char *base = getenv("TMPDIR");

    g_main_pid = getpid();
    snprintf(g_name, sizeof(g_name), "%s", test_name);
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/remora-%s-XXXXXX", base ? base : "/tmp", g_name);
    if (mkdtemp(g_tmpdir) == NULL) {
        fprintf(stderr, "harness: mkdtemp(%s): %s\n", g_tmpdir, strerror(errno));
        exit(1);
    }
    atexit(at_exit_cleanup);
    /* Unbuffered, so that our lines and cmocka's interleave in order. */
    setvbuf(stdout, NULL, _IONBF, 0);
}

int it_finish(int failed)
{
    it_reap_all();
    if (failed || getenv("IT_KEEP_LOGS") != NULL)
        g_keep_tmp = true;
    return failed ? 1 : 0;
}

void it_skip_all(const char *why)
{
    printf("SKIPPED: %s\n", why);
    fflush(stdout);
    exit(77);
}

const char *it_tmpdir(void) { return g_tmpdir; }

void it_tmp_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", g_tmpdir, name);
}

/* ---------------------------------------------------------------- files */

int it_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int rc = 0;

    if (f == NULL)
        return -1;
    if (len && fwrite(data, 1, len, f) != len)
        rc = -1;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

void *it_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;

    if (f == NULL)
        return NULL;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap + 1);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

void it_fill_random(void *buf, size_t len, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;

    for (size_t i = 0; i < len; i++) {
        /* xorshift64* */
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
}

size_t it_count_lines(const char *s)
{
    size_t n = 0;

    if (s == NULL || *s == '\0')
        return 0;
    for (const char *p = s; *p; p++)
        if (*p == '\n')
            n++;
    if (s[strlen(s) - 1] != '\n')
        n++;
    return n;
}

/* ---------------------------------------------------------------- spawning */

typedef struct spawn_spec {
    const char *const *argv;       /* full argv, argv[0] is the program */
    const char *const *env;        /* extra K=V, may be NULL */
    const char        *stdin_path; /* NULL: /dev/null */
    const char        *out_path;   /* NULL: use stdout_pipe */
    int                stdout_pipe;/* write end, when out_path is NULL */
    const char        *err_path;
} spawn_spec_t;

/* Build environ + extras (extras override same-named entries). Caller frees the array only. */
static char **build_env(const char *const *extra)
{
    size_t n = 0, k = 0, m = 0;
    char **env;

    while (environ[n])
        n++;
    while (extra && extra[k])
        k++;
    env = calloc(n + k + 1, sizeof(*env));
    if (env == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        bool overridden = false;
        for (size_t j = 0; j < k; j++) {
            const char *eq = strchr(extra[j], '=');
            size_t klen = eq ? (size_t)(eq - extra[j]) : strlen(extra[j]);
            if (strncmp(environ[i], extra[j], klen) == 0 && environ[i][klen] == '=')
                overridden = true;
        }
        if (!overridden)
            env[m++] = environ[i];
    }
    for (size_t j = 0; j < k; j++)
        env[m++] = (char *)(uintptr_t)extra[j];
    env[m] = NULL;
    return env;
}

/* fork+exec; only async-signal-safe calls in the child (the parent has threads). */
static pid_t spawn(const spawn_spec_t *sp)
{
    char **env = build_env(sp->env);
    pid_t parent = getpid(), pid;

    if (env == NULL)
        return -1;
    pid = fork();
    if (pid < 0) {
        free(env);
        return -1;
    }
    if (pid == 0) {
        int in, out, err;
        /* Die with the test process, whatever happens to it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        in = open(sp->stdin_path ? sp->stdin_path : "/dev/null", O_RDONLY);
        out = sp->out_path ? open(sp->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)
                           : sp->stdout_pipe;
        err = open(sp->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || err < 0)
            _exit(126);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        execve(sp->argv[0], (char *const *)(uintptr_t)sp->argv, env);
        _exit(127);
    }
    free(env);
    child_add(pid, sp->err_path);
    return pid;
}

/* argv = { REMORA_BIN, varargs..., NULL } (plus room for what the caller appends). */
static int collect_args(const char **argv, size_t cap, va_list ap)
{
    size_t n = 0;
    const char *a;

    argv[n++] = REMORA_BIN;
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (n + 4 >= cap) /* room for "serve", "--listen ADDR" and the NULL */
            return -1;
        argv[n++] = a;
    }
    argv[n] = NULL;
    return (int)n;
}

/* ---------------------------------------------------------------- servers */

static char *read_whole(const char *path)
{
    char *s = it_read_file(path, NULL);
    return s ? s : strdup("");
}

char *it_server_log(const it_server_t *s) { return read_whole(s->log_path); }

void it_server_dump_log(const it_server_t *s)
{
    char *log = it_server_log(s);
    fprintf(stderr, "---- remora serve (%s) stderr ----\n%s---- end ----\n", s->log_path, log);
    free(log);
}

/* Read the "listening HOST:PORT" line from fd; 0 on success. */
static int read_listening(it_server_t *s, int fd, pid_t pid)
{
    char line[256];
    size_t n = 0;
    uint64_t deadline = it_now_ns() + (uint64_t)IT_START_TIMEOUT_MS * 1000000u;

    while (n < sizeof(line) - 1) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = (int64_t)(deadline - it_now_ns()) / 1000000;
        if ((int64_t)(deadline - it_now_ns()) <= 0) {
            fprintf(stderr, "harness: server %d printed no 'listening' line in %d ms\n",
                    (int)pid, IT_START_TIMEOUT_MS);
            return -1;
        }
        int pr = poll(&pfd, 1, (int)(left > 0 ? left : 1));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        ssize_t got = read(fd, line + n, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            fprintf(stderr, "harness: server %d closed stdout before 'listening'\n", (int)pid);
            return -1;
        }
        if (line[n] == '\n') {
            line[n] = '\0';
            if (strncmp(line, "listening ", 10) != 0 || strlen(line + 10) >= IT_ADDR_MAX) {
                fprintf(stderr, "harness: unexpected first line from server: '%s'\n", line);
                return -1;
            }
            snprintf(s->addr, sizeof(s->addr), "%s", line + 10);
            return 0;
        }
        n++;
    }
    fprintf(stderr, "harness: server's first line is too long\n");
    return -1;
}

static int server_startv(it_server_t *s, const char *const *env, va_list ap)
{
    const char *argv[IT_MAX_ARGS];
    int n = collect_args(argv, IT_MAX_ARGS, ap), pipefd[2];
    bool has_listen = false;

    memset(s, 0, sizeof(*s));
    s->stdout_fd = -1;
    if (n < 0)
        return -1;
    for (int i = 1; i < n; i++)
        if (strcmp(argv[i], "--listen") == 0 || strncmp(argv[i], "--listen=", 9) == 0)
            has_listen = true;
    /* argv[1] must be "serve" (shift and insert), unless the caller starts
     * another serving command itself ("stream", "serve", ...). */
    if (n < 2 || strcmp(argv[1], "stream") != 0) {
        memmove(&argv[2], &argv[1], (size_t)n * sizeof(argv[0]));
        argv[1] = "serve";
        n++;
    }
    if (!has_listen) {
        argv[n++] = "--listen";
        argv[n++] = "127.0.0.1:0";
        argv[n]   = NULL;
    }
    /* A test run with lanes serves them (clients take REMORA_LANES). */
    const char *lanes = getenv("REMORA_IT_SERVE_LANES");
    if (lanes != NULL && strcmp(argv[1], "serve") == 0 && n + 2 < IT_MAX_ARGS) {
        argv[n++] = "--lanes";
        argv[n++] = lanes;
        argv[n]   = NULL;
    }
    snprintf(s->log_path, sizeof(s->log_path), "%s/server-%u.log", g_tmpdir, ++g_seq);
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        return -1;
    /* The child needs the write end as its stdout: dup2 clears CLOEXEC on the copy. */
    spawn_spec_t sp = {.argv = argv, .env = env, .stdout_pipe = pipefd[1],
                       .err_path = s->log_path};
    s->pid = spawn(&sp);
    close(pipefd[1]);
    if (s->pid < 0) {
        close(pipefd[0]);
        s->pid = 0;
        return -1;
    }
    if (read_listening(s, pipefd[0], s->pid) != 0) {
        close(pipefd[0]);
        kill_and_reap(s->pid);
        s->pid = 0;
        it_server_dump_log(s);
        return -1;
    }
    s->stdout_fd = pipefd[0];
    return 0;
}

int it_server_start(it_server_t *s, ...)
{
    va_list ap;
    va_start(ap, s);
    int rc = server_startv(s, NULL, ap);
    va_end(ap);
    return rc;
}

int it_server_start_env(it_server_t *s, const char *const *env, ...)
{
    va_list ap;
    va_start(ap, env);
    int rc = server_startv(s, env, ap);
    va_end(ap);
    return rc;
}

static void server_forget(it_server_t *s)
{
    if (s->stdout_fd >= 0)
        close(s->stdout_fd);
    s->stdout_fd = -1;
    s->pid = 0;
}

int it_server_stop(it_server_t *s)
{
    int rc;

    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    rc = wait_child(s->pid, IT_STOP_TIMEOUT_MS);
    if (rc == -1) {
        fprintf(stderr, "harness: server %d did not exit within %d ms of SIGTERM\n",
                (int)s->pid, IT_STOP_TIMEOUT_MS);
        kill_and_reap(s->pid);
    }
    if (rc == 0) {
        /* A clean exit that admits leaking connections is not clean. */
        char *log = it_server_log(s);
        if (strstr(log, "leaking") != NULL) {
            fprintf(stderr, "harness: server %d exited 0 but logged a leak\n", (int)s->pid);
            rc = -3;
        }
        free(log);
    }
    if (rc != 0) {
        fprintf(stderr, "harness: server %d ended with status %d after SIGTERM\n",
                (int)s->pid, rc);
        it_server_dump_log(s);
    }
    server_forget(s);
    return rc;
}

void it_server_kill(it_server_t *s)
{
    if (s->pid <= 0)
        return;
    kill_and_reap(s->pid);
    server_forget(s);
}

bool it_server_alive(const it_server_t *s)
{
    char path[64], *stat;
    bool alive;

    if (s->pid <= 0 || kill(s->pid, 0) != 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)s->pid);
    stat = it_read_file(path, NULL);
    if (stat == NULL)
        return false;
    /* "pid (comm) S ...": a zombie (Z) or dead (X) process is not serving. */
    const char *rp = strrchr(stat, ')');
    alive = rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
    free(stat);
    return alive;
}

/* ---------------------------------------------------------------- CLI */

static int proc_spawnv(it_proc_t *p, const char *const *env, const char *stdin_path, va_list ap)
{
    const char *argv[IT_MAX_ARGS];

    memset(p, 0, sizeof(*p));
    if (collect_args(argv, IT_MAX_ARGS, ap) < 0)
        return -1;
    g_seq++;
    snprintf(p->out_path, sizeof(p->out_path), "%s/cli-%u.out", g_tmpdir, g_seq);
    snprintf(p->err_path, sizeof(p->err_path), "%s/cli-%u.err", g_tmpdir, g_seq);
    spawn_spec_t sp = {.argv = argv, .env = env, .stdin_path = stdin_path,
                       .out_path = p->out_path, .err_path = p->err_path};
    p->start_ms = it_now_ms();
    p->pid = spawn(&sp);
    if (p->pid < 0) {
        p->pid = 0;
        return -1;
    }
    return 0;
}

int it_cli_spawn(it_proc_t *p, const char *const *env, ...)
{
    va_list ap;
    va_start(ap, env);
    int rc = proc_spawnv(p, env, NULL, ap);
    va_end(ap);
    return rc;
}

int it_proc_wait(it_proc_t *p, int timeout_ms, it_run_t *r)
{
    memset(r, 0, sizeof(*r));
    r->status = wait_child(p->pid, timeout_ms);
    if (r->status == -1) {
        fprintf(stderr, "harness: command %d still running after %d ms; killed\n", (int)p->pid,
                timeout_ms);
        kill_and_reap(p->pid);
    }
    r->elapsed_ms = it_now_ms() - p->start_ms;
    p->pid = 0;
    r->out = it_read_file(p->out_path, &r->out_len);
    r->err = it_read_file(p->err_path, &r->err_len);
    if (r->out == NULL)
        r->out = strdup("");
    if (r->err == NULL)
        r->err = strdup("");
    return r->status;
}

void it_proc_kill(it_proc_t *p)
{
    if (p->pid > 0)
        kill_and_reap(p->pid);
    p->pid = 0;
}

char *it_proc_stderr(const it_proc_t *p) { return read_whole(p->err_path); }

static int cli_runv(it_run_t *r, int timeout_ms, const char *const *env, const char *stdin_path,
                    va_list ap)
{
    it_proc_t p;

    memset(r, 0, sizeof(*r));
    if (proc_spawnv(&p, env, stdin_path, ap) != 0) {
        r->status = -1;
        r->out = strdup("");
        r->err = strdup("harness: spawn failed");
        return -1;
    }
    return it_proc_wait(&p, timeout_ms, r);
}

int it_cli_run(it_run_t *r, int timeout_ms, ...)
{
    va_list ap;
    va_start(ap, timeout_ms);
    int rc = cli_runv(r, timeout_ms, NULL, NULL, ap);
    va_end(ap);
    return rc;
}

int it_cli_run_env(it_run_t *r, int timeout_ms, const char *const *env, const char *stdin_path,
                   ...)
{
    va_list ap;
    va_start(ap, stdin_path);
    int rc = cli_runv(r, timeout_ms, env, stdin_path, ap);
    va_end(ap);
    return rc;
}

void it_run_free(it_run_t *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

/* ---------------------------------------------------------------- library clients */

remora_status_t it_client_open(it_client_t *c, const char *addr, const remora_client_params_t *p)
{
    remora_context_params_t cp = {.field_mask = REMORA_CONTEXT_FIELD_NAME, .name = "remora-it"};
    remora_status_t st;

    memset(c, 0, sizeof(*c));
    if ((st = remora_context_create(&cp, &c->ctx)) != REMORA_OK)
        return st;
    if ((st = remora_client_connect(c->ctx, addr, p, &c->client)) != REMORA_OK) {
        remora_context_destroy(c->ctx);
        c->ctx = NULL;
        return st;
    }
    return REMORA_OK;
}

void it_client_close(it_client_t *c)
{
    if (c->client)
        remora_client_disconnect(c->client);
    if (c->ctx)
        remora_context_destroy(c->ctx);
    c->client = NULL;
    c->ctx = NULL;
}

/* ---------------------------------------------------------------- /proc and sockets */

long it_proc_cpu_ticks(pid_t pid)
{
    char path[64], *stat, *rp;
    unsigned long utime = 0, stime = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((stat = it_read_file(path, NULL)) == NULL)
        return -1;
    /* Fields after "(comm)": state(3) ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime(14) stime(15). */
    rp = strrchr(stat, ')');
    if (rp == NULL || sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                             &utime, &stime) != 2) {
        free(stat);
        return -1;
    }
    free(stat);
    return (long)(utime + stime);
}

long it_proc_rss_kib(pid_t pid)
{
    char path[64], *status, *line;
    long kib = -1;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((status = it_read_file(path, NULL)) == NULL)
        return -1;
    if ((line = strstr(status, "\nVmRSS:")) == NULL || sscanf(line, "\nVmRSS: %ld", &kib) != 1)
        kib = -1;
    free(status);
    return kib;
}

/* The state letter of /proc/PID/task/TID/stat; '?' if unreadable. */
static char task_state(pid_t pid, const char *tid)
{
    char path[320], *stat, *rp, st = '?';

    snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid, tid);
    if ((stat = it_read_file(path, NULL)) == NULL)
        return '?';
    rp = strrchr(stat, ')');
    if (rp && rp[1] == ' ')
        st = rp[2];
    free(stat);
    return st;
}

bool it_stop_process(pid_t pid, int timeout_ms)
{
    char dir[64];
    double deadline = it_now_ms() + timeout_ms;

    if (kill(pid, SIGSTOP) != 0)
        return false;
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    while (it_now_ms() < deadline) {
        DIR *d = opendir(dir);
        struct dirent *e;
        bool all = d != NULL;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            if (task_state(pid, e->d_name) != 'T')
                all = false;
        }
        if (d)
            closedir(d);
        if (all)
            return true;
        it_sleep_ms(1);
    }
    return false;
}

int it_refusing_port(char addr[IT_ADDR_MAX])
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        close(fd);
        return -1;
    }
    snprintf(addr, IT_ADDR_MAX, "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    return fd;
}

int it_restart_addr(char addr[IT_ADDR_MAX])
{
    static unsigned seed;

    if (seed == 0)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int i = 0; i < 200; i++) {
        struct sockaddr_in sin = {.sin_family      = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                  .sin_port = htons((uint16_t)(20000 + rand_r(&seed) % 12000))};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;

        if (fd >= 0)
            close(fd);
        if (ok) {
            snprintf(addr, IT_ADDR_MAX, "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
            return 0;
        }
    }
    return -1;
}

unsigned it_addr_port(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    return colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}

int it_run_tests(const char *group, const struct CMUnitTest *all, size_t n, int argc,
                 char **argv)
{
    if (argc > 1) { /* one test by name */
        for (size_t i = 0; i < n; i++)
            if (strcmp(all[i].name, argv[1]) == 0)
                return _cmocka_run_group_tests(group, &all[i], 1, NULL, NULL);
        fprintf(stderr, "no test %s\n", argv[1]);
        return 2;
    }
    return _cmocka_run_group_tests(group, all, n, NULL, NULL);
}
