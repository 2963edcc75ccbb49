/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The gate on UCX's listening sockets (gate.h): a classic BPF program over
 * the source address of every packet that reaches them.
 *
 *   ldb  [net + 0]; rsh #4            IP version
 *   jeq  #4 ? v4 : ja v6
 *   v4:  ld [net + 12]                source address
 *        jeq #host ? ret keep : next  ... one pair per IPv4 host
 *        ret drop
 *   v6:  jeq #6 ? : ret drop
 *        ld [net + 8] .. [net + 20]   four words, one host at a time
 *        ret drop
 *
 * Socket filters see a TCP segment from its TCP header on; SKF_NET_OFF
 * reaches back to the IP header. Jumps are relative and 8 bits wide, so
 * every host's test ends in its own "ret keep" instead of a far jump.
 */
#include "engine/gate.h"

#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ucx_addr.h"
#include "util/env.h"
#include "util/log.h"

#define KEEP 0xffffffffu
#define DROP 0u
#define NET(off) ((uint32_t)(SKF_NET_OFF + (off)))

typedef struct {
    rm_gate_host_t host;
    unsigned       refs;
} allowed_t;

typedef struct {
    int                     fd;
    const void             *owner;
    struct sockaddr_storage sa; /* what it is bound to */
} guarded_t;

struct rm_gate {
    pthread_mutex_t mx;
    allowed_t      *hosts;
    unsigned        nhosts, cap_hosts;
    guarded_t      *socks;
    unsigned        nsocks, cap_socks;
    size_t          budget; /* bytes a program may take (fits) */
    struct sock_filter prog[BPF_MAXINSNS];
    unsigned short  prog_len;
};

/* Room for one more element in a growing array; 0 or -1. */
static int room(void **arr, unsigned n, unsigned *cap, size_t size)
{
    void *p;

    if (n < *cap)
        return 0;
    if ((p = realloc(*arr, (size_t)(*cap ? 2 * *cap : 16) * size)) == NULL)
        return -1;
    *arr = p;
    *cap = *cap ? 2 * *cap : 16;
    return 0;
}

/* ------------------------------------------------------------ hosts */

static int host_of(const struct sockaddr *sa, rm_gate_host_t *h)
{
    memset(h, 0, sizeof(*h));
    if (sa->sa_family == AF_INET) {
        h->family = AF_INET;
        memcpy(h->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            h->family = AF_INET;
            memcpy(h->addr, a->s6_addr + 12, 4);
        } else {
            h->family = AF_INET6;
            memcpy(h->addr, a->s6_addr, 16);
        }
        return 0;
    }
    return -1;
}

static int host_eq(const rm_gate_host_t *a, const rm_gate_host_t *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, 16) == 0;
}

static allowed_t *find_host(rm_gate_t *g, const rm_gate_host_t *h)
{
    for (unsigned i = 0; i < g->nhosts; i++)
        if (host_eq(&g->hosts[i].host, h))
            return &g->hosts[i];
    return NULL;
}

/* ------------------------------------------------------------ the program */

static uint32_t word(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void emit(rm_gate_t *g, uint16_t code, uint32_t k, uint8_t jt, uint8_t jf)
{
    g->prog[g->prog_len++] = (struct sock_filter){code, jt, jf, k};
}

static void count(const rm_gate_t *g, unsigned *n4, unsigned *n6)
{
    *n4 = *n6 = 0;
    for (unsigned i = 0; i < g->nhosts; i++)
        ++*(g->hosts[i].host.family == AF_INET ? n4 : n6);
}

static void compile(rm_gate_t *g)
{
    unsigned n4, n6;

    count(g, &n4, &n6);
    g->prog_len = 0;
    emit(g, BPF_LD | BPF_B | BPF_ABS, NET(0), 0, 0);
    emit(g, BPF_ALU | BPF_RSH | BPF_K, 4, 0, 0);
    emit(g, BPF_JMP | BPF_JEQ | BPF_K, 4, 1, 0);
    emit(g, BPF_JMP | BPF_JA, 2 + 2 * n4, 0, 0); /* over the v4 block: ld, pairs, ret */

    emit(g, BPF_LD | BPF_W | BPF_ABS, NET(12), 0, 0);
    for (unsigned i = 0; i < g->nhosts; i++) {
        const rm_gate_host_t *h = &g->hosts[i].host;
        if (h->family != AF_INET)
            continue;
        emit(g, BPF_JMP | BPF_JEQ | BPF_K, word(h->addr), 0, 1);
        emit(g, BPF_RET | BPF_K, KEEP, 0, 0);
    }
    emit(g, BPF_RET | BPF_K, DROP, 0, 0);

    /* A still holds the version here. */
    emit(g, BPF_JMP | BPF_JEQ | BPF_K, 6, 1, 0);
    emit(g, BPF_RET | BPF_K, DROP, 0, 0);
    for (unsigned i = 0; i < g->nhosts; i++) {
        const rm_gate_host_t *h = &g->hosts[i].host;
        if (h->family != AF_INET6)
            continue;
        for (unsigned w = 0; w < 4; w++) {
            emit(g, BPF_LD | BPF_W | BPF_ABS, NET(8 + 4 * w), 0, 0);
            /* on a mismatch, past this host's remaining pairs and its ret */
            emit(g, BPF_JMP | BPF_JEQ | BPF_K, word(h->addr + 4 * w), 0, (uint8_t)(7 - 2 * w));
        }
        emit(g, BPF_RET | BPF_K, KEEP, 0, 0);
    }
    emit(g, BPF_RET | BPF_K, DROP, 0, 0);
}

/* Instructions: 4 + 2 per IPv4 host + 3 + 9 per IPv6 host, at most
 * BPF_MAXINSNS. Bytes: the kernel charges a socket's filter to its option
 * memory (net.core.optmem_max), and swapping one for the next holds both
 * for a moment: half of it is ours. Charged per IPv4 host 24-32 bytes, per
 * IPv6 host 336, about 360 for the rest (kernel 6.18); rounded up here. */
#define COST_BASE 512u
#define COST_V4   40u
#define COST_V6   384u

static size_t cost(unsigned n4, unsigned n6)
{
    return COST_BASE + (size_t)n4 * COST_V4 + (size_t)n6 * COST_V6;
}

/* Whether a program for n4 IPv4 and n6 IPv6 hosts can be attached. */
static int within(const rm_gate_t *g, unsigned n4, unsigned n6)
{
    return n4 + n6 <= RM_GATE_HOSTS_MAX && 7 + 2 * n4 + 9 * n6 <= BPF_MAXINSNS &&
           cost(n4, n6) <= g->budget;
}

static int fits(const rm_gate_t *g, int family)
{
    unsigned n4, n6;

    count(g, &n4, &n6);
    return within(g, n4 + (family == AF_INET), n6 + (family != AF_INET));
}

/* ------------------------------------------------------------ sockets */

static uint16_t port_of(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
                                    : ((const struct sockaddr_in6 *)ss)->sin6_port;
}

/* The same address, or either side the wildcard (a listener bound to all). */
static int addr_matches(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family == AF_INET) {
        in_addr_t x = ((const struct sockaddr_in *)a)->sin_addr.s_addr;
        in_addr_t y = ((const struct sockaddr_in *)b)->sin_addr.s_addr;
        return x == y || x == htonl(INADDR_ANY) || y == htonl(INADDR_ANY);
    }
    const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;
    const struct in6_addr *y = &((const struct sockaddr_in6 *)b)->sin6_addr;
    return IN6_ARE_ADDR_EQUAL(x, y) || IN6_IS_ADDR_UNSPECIFIED(x) || IN6_IS_ADDR_UNSPECIFIED(y);
}

/* Whether fd is a listening TCP socket bound to want (family, port, address). */
static int is_listener(int fd, const struct sockaddr_storage *want)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int v = 0;
    socklen_t vl = sizeof(v);

    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl) != 0 || !v)
        return 0;
    vl = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &vl) != 0 || v != SOCK_STREAM ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0 || ss.ss_family != want->ss_family)
        return 0;
    return port_of(&ss) == port_of(want) && addr_matches(&ss, want);
}

/* 0 attached, 1 the socket is gone (closed since it was checked: another
 * thread destroyed its worker), -1 it refused the program (kept the old). */
static int attach(rm_gate_t *g, const guarded_t *s)
{
    struct sock_fprog fp = {.len = g->prog_len, .filter = g->prog};

    if (setsockopt(s->fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof(fp)) == 0)
        return 0;
    if (errno == EBADF || errno == ENOTSOCK)
        return 1;
    rm_warn("could not update the filter on UCX's listening port %u: %s", ntohs(port_of(&s->sa)),
            strerror(errno));
    return -1;
}

/* Attach the current program everywhere: 0, or -1 when some socket refused
 * it (it keeps the program it had). A socket that is no longer what it was
 * (UCX closed it, the number was reused) is dropped from the list. */
static int apply(rm_gate_t *g)
{
    unsigned j = 0;
    int rc = 0, r;

    compile(g);
    for (unsigned i = 0; i < g->nsocks; i++) {
        guarded_t *s = &g->socks[i];
        if (!is_listener(s->fd, &s->sa) || (r = attach(g, s)) > 0)
            continue;
        rc |= r;
        g->socks[j++] = *s;
    }
    g->nsocks = j;
    return rc;
}

/* Guard fd; an entry for the same number that was another socket (UCX closed
 * its listener, the number came back) is replaced. 0 or -1. */
static int guard_fd(rm_gate_t *g, const void *owner, int fd, const struct sockaddr_storage *sa)
{
    guarded_t *s = NULL;

    for (unsigned i = 0; i < g->nsocks && s == NULL; i++)
        if (g->socks[i].fd == fd)
            s = &g->socks[i];
    if (s == NULL) {
        if (room((void **)&g->socks, g->nsocks, &g->cap_socks, sizeof(*s)) != 0)
            return -1;
        s = &g->socks[g->nsocks++];
    }
    *s = (guarded_t){.fd = fd, .owner = owner, .sa = *sa}; /* g->prog is current */
    if (attach(g, s) == 0)
        return 0;
    *s = g->socks[--g->nsocks]; /* gone, or refused: not guarded */
    return -1;
}

typedef struct {
    struct sockaddr_storage sa[32];
    unsigned n;
} wanted_t;

/* One socket address to guard; rm_ucx_addr_tcp's callback (each once). */
static void want_cb(void *arg, const struct sockaddr_storage *ss)
{
    wanted_t *w = arg;

    if (w->n < sizeof(w->sa) / sizeof(w->sa[0]))
        w->sa[w->n++] = *ss;
}

static void want(wanted_t *w, const struct sockaddr *sa)
{
    struct sockaddr_storage ss = {0};

    memcpy(&ss, sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                             : sizeof(struct sockaddr_in6));
    want_cb(w, &ss);
}

/* Guard every open listening socket that matches one of w; how many. */
static int guard_wanted(rm_gate_t *g, const void *owner, const wanted_t *w)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = 0;

    if (d == NULL) {
        rm_warn("cannot list this process's sockets (%s): UCX's listening ports stay unguarded",
                strerror(errno));
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end != '\0' || end == e->d_name || fd == dirfd(d))
            continue;
        for (unsigned i = 0; i < w->n; i++)
            if (is_listener((int)fd, &w->sa[i])) {
                found += guard_fd(g, owner, (int)fd, &w->sa[i]) == 0;
                break;
            }
    }
    closedir(d);
    return found;
}

/* ------------------------------------------------------------ API */

/* Half the option memory a socket may hold (fits). */
static size_t read_budget(void)
{
    FILE *f = fopen("/proc/sys/net/core/optmem_max", "r");
    unsigned long v = 20480; /* the kernel's default before 6.8 */

    if (f != NULL) {
        if (fscanf(f, "%lu", &v) != 1)
            v = 20480;
        fclose(f);
    }
    return v / 2;
}

rm_gate_t *rm_gate_create(void)
{
    rm_gate_t *g;

    if (rm_env_u64("REMORA_UCX_GATE", 1, 0, 1) == 0)
        return NULL;
    if ((g = calloc(1, sizeof(*g))) == NULL)
        return NULL;
    pthread_mutex_init(&g->mx, NULL);
    g->budget = read_budget();
    compile(g);
    return g;
}

void rm_gate_destroy(rm_gate_t *g)
{
    if (g == NULL)
        return;
    pthread_mutex_destroy(&g->mx);
    free(g->hosts);
    free(g->socks);
    free(g);
}

static int guard(rm_gate_t *g, const void *owner, const wanted_t *w)
{
    int found;

    pthread_mutex_lock(&g->mx);
    found = guard_wanted(g, owner, w);
    pthread_mutex_unlock(&g->mx);
    if (found < (int)w->n)
        rm_warn("guarded %d of UCX's %u TCP listening sockets; the rest answer every host "
                "(docs/security.md 2.1)", found, w->n);
    return found;
}

int rm_gate_guard_worker(rm_gate_t *g, const void *owner, const void *own, size_t len)
{
    wanted_t w = {.n = 0};

    if (g == NULL)
        return 0;
    if (rm_ucx_addr_tcp(own, len, want_cb, &w) != 0) {
        rm_warn("this UCX's worker address does not parse: its TCP ports stay unguarded");
        return -1;
    }
    return w.n == 0 ? 0 : guard(g, owner, &w);
}

int rm_gate_guard_listener(rm_gate_t *g, const void *owner, const struct sockaddr *sa)
{
    wanted_t w = {.n = 0};

    if (g == NULL)
        return 0;
    want(&w, sa);
    return guard(g, owner, &w) == 1 ? 0 : -1;
}

void rm_gate_forget(rm_gate_t *g, const void *owner)
{
    unsigned j = 0;

    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mx);
    for (unsigned i = 0; i < g->nsocks; i++)
        if (g->socks[i].owner != owner)
            g->socks[j++] = g->socks[i];
    g->nsocks = j;
    pthread_mutex_unlock(&g->mx);
}

/* One host into pass and the set; 0, 1 (nothing new) or -1 (no room). */
static int pass_add(rm_gate_t *g, rm_gate_pass_t *pass, const rm_gate_host_t *h)
{
    allowed_t *a;

    for (unsigned i = 0; i < pass->n; i++)
        if (host_eq(&pass->hosts[i], h))
            return 1;
    if (pass->n == RM_GATE_PASS_MAX)
        return -1;
    if ((a = find_host(g, h)) == NULL) {
        if (!fits(g, h->family) ||
            room((void **)&g->hosts, g->nhosts, &g->cap_hosts, sizeof(*a)) != 0)
            return -1;
        a  = &g->hosts[g->nhosts++];
        *a = (allowed_t){.host = *h, .refs = 0};
    }
    a->refs++;
    pass->hosts[pass->n++] = *h;
    return 0;
}

/* Give back pass's hosts from index `from` on. */
static void pass_drop(rm_gate_t *g, rm_gate_pass_t *pass, unsigned from)
{
    for (unsigned i = from; i < pass->n; i++) {
        allowed_t *a = find_host(g, &pass->hosts[i]);
        if (a != NULL && --a->refs == 0)
            *a = g->hosts[--g->nhosts];
    }
    pass->n = from;
}

typedef struct {
    rm_gate_t      *g;
    rm_gate_pass_t *pass;
    int             changed, full;
} open_t;

static void open_cb(void *arg, const struct sockaddr_storage *ss)
{
    open_t *o = arg;
    rm_gate_host_t h;
    int rc;

    if (o->full || host_of((const struct sockaddr *)ss, &h) != 0)
        return;
    rc = pass_add(o->g, o->pass, &h);
    o->changed |= rc == 0;
    o->full |= rc < 0;
}

remora_status_t rm_gate_open(rm_gate_t *g, rm_gate_pass_t *pass, const struct sockaddr *sa,
                             const void *const ucx[], const size_t ucx_len[], unsigned n)
{
    open_t o = {g, pass, 0, 0};
    rm_gate_host_t h;
    unsigned before = pass->n;
    int rc;

    if (g == NULL)
        return REMORA_OK;
    if (host_of(sa, &h) != 0)
        return REMORA_ERR_INVALID_PARAM;
    pthread_mutex_lock(&g->mx);
    rc        = pass_add(g, pass, &h);
    o.changed = rc == 0;
    o.full    = rc < 0;
    for (unsigned i = 0; i < n; i++)
        rm_ucx_addr_tcp(ucx[i], ucx_len[i], open_cb, &o);
    /* All of them or none: a host left out would be a connection that
     * hangs, where one refused is told why. */
    if (!o.full && o.changed && apply(g) != 0)
        o.full = 1;
    if (o.full) {
        pass_drop(g, pass, before);
        apply(g); /* smaller than what the sockets hold: it fits */
    }
    pthread_mutex_unlock(&g->mx);
    if (o.full) {
        rm_warn_peer("no room to let another host through to UCX's ports (%u hosts at most, and "
                     "net.core.optmem_max bounds the filter): refusing", RM_GATE_HOSTS_MAX);
        return REMORA_ERR_BUSY;
    }
    return REMORA_OK;
}

int rm_gate_same_host(const struct sockaddr *peer, const struct sockaddr *own)
{
    static const uint8_t v6_loopback[16] = {[15] = 1};
    rm_gate_host_t p, o;

    if (host_of(peer, &p) != 0)
        return 0;
    if ((p.family == AF_INET && p.addr[0] == 127) ||
        (p.family == AF_INET6 && memcmp(p.addr, v6_loopback, 16) == 0))
        return 1;
    return host_of(own, &o) == 0 && host_eq(&p, &o);
}

void rm_gate_close(rm_gate_t *g, rm_gate_pass_t *pass)
{
    if (g == NULL || pass->n == 0) {
        pass->n = 0;
        return;
    }
    pthread_mutex_lock(&g->mx);
    pass_drop(g, pass, 0);
    apply(g);
    pthread_mutex_unlock(&g->mx);
}

int rm_gate_allows(rm_gate_t *g, const struct sockaddr *sa)
{
    rm_gate_host_t h;
    int yes;

    if (g == NULL)
        return 1;
    if (host_of(sa, &h) != 0)
        return 0;
    pthread_mutex_lock(&g->mx);
    yes = find_host(g, &h) != NULL;
    pthread_mutex_unlock(&g->mx);
    return yes;
}

unsigned rm_gate_room(rm_gate_t *g, int family)
{
    unsigned n4, n6, more = 0;

    if (g == NULL)
        return 0;
    pthread_mutex_lock(&g->mx);
    count(g, &n4, &n6);
    for (;;) {
        if (!within(g, n4 + (family == AF_INET ? more + 1 : 0),
                    n6 + (family == AF_INET ? 0 : more + 1)))
            break;
        more++;
    }
    pthread_mutex_unlock(&g->mx);
    return more;
}
