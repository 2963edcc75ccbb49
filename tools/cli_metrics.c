/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `remora serve --metrics`: the server's counters for Prometheus.
 *
 * Design notes
 * - One thread, one poll() loop over the listener and up to
 *   CLI_METRICS_CONNS connections, none of which can hold up another: a
 *   connection has CLI_METRICS_FIRST_MS for its first byte and
 *   CLI_METRICS_REQ_MS after that for the rest of its request (at most
 *   CLI_METRICS_REQ_MAX bytes), and CLI_METRICS_IO_MS to take the reply,
 *   and all I/O is non-blocking. A new connection when all are taken closes
 *   the oldest: idle sockets cannot lock scrapers out, and a scraper, which
 *   sends at once, is answered before a flood can push it out.
 * - A tiny HTTP/1.0 responder: the request line is checked and headers are
 *   skipped. GET /metrics (a query string is ignored) gets 200 and the text
 *   exposition format; another path 404; another method 405; anything that
 *   is not a request line, or a request over the size limit, 400. Every
 *   response closes the connection (after draining the client's input for
 *   at most CLI_METRICS_LINGER_MS, so that it reads the response).
 * - Counters are read with remora_server_stats(): no lock of the server's.
 * - A server with a token lets only scrapers that hold it read them:
 *   "Authorization: Bearer TOKEN" (Prometheus' bearer_token_file), compared
 *   in constant time; without it, 401. The token travels in clear here, as
 *   HTTP does: keep the endpoint on loopback or a trusted network.
 * - The thread inherits the serve command's blocked SIGINT/SIGTERM; it stops
 *   when cli_metrics_stop() writes to its pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_stats.h"

#define CLI_METRICS_CONNS     16
/* Connections the kernel completes before we accept them. A full queue drops
 * SYNs, and a scraper behind a burst then waits for TCP's resend, a second
 * (cli_obs_metricsslow's 40 idle sockets on a loaded 2-core CI host). */
#define CLI_METRICS_BACKLOG   128
#define CLI_METRICS_FIRST_MS  500
#define CLI_METRICS_REQ_MS    2000
#define CLI_METRICS_IO_MS     2000
#define CLI_METRICS_REQ_MAX   8192
#define CLI_METRICS_LINGER_MS 500

/* One connection: it reads its request, writes the reply, then lingers. */
typedef struct {
    int             fd; /* -1: a free slot */
    enum { CLI_METRICS_READING, CLI_METRICS_WRITING, CLI_METRICS_LINGERING } state;
    uint64_t        seq; /* accept order: the lowest is the oldest */
    struct timespec deadline;
    char            req[CLI_METRICS_REQ_MAX + 1];
    size_t          req_len;
    char           *out; /* the reply, sent up to out_off */
    size_t          out_len;
    size_t          out_off;
} cli_metrics_conn_t;

struct cli_metrics {
    int                fd;
    int                stop[2]; /* a byte on stop[1] ends the thread */
    pthread_t          thread;
    remora_server_h    server;
    cli_token_t        token; /* len 0: no token asked for */
    uint64_t           seq;
    struct timespec    accept_after; /* out of descriptors: wait till then */
    cli_metrics_conn_t conns[CLI_METRICS_CONNS];
};

static int64_t cli_ms_left(const struct timespec *deadline)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(deadline->tv_sec - now.tv_sec) * 1000 +
           (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

static void cli_deadline(struct timespec *d, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, d);
    d->tv_sec += ms / 1000;
    d->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (d->tv_nsec >= 1000000000L) {
        d->tv_sec++;
        d->tv_nsec -= 1000000000L;
    }
}

static void cli_metrics_close(cli_metrics_conn_t *c)
{
    close(c->fd);
    free(c->out);
    c->fd  = -1;
    c->out = NULL;
}

/* The reply goes out in one buffer, from the poll loop. */
static void cli_metrics_respond(cli_metrics_conn_t *c, int code, const char *reason,
                                const char *type, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     code, reason, type, len, code == 405 ? "Allow: GET\r\n" : "");
    if ((c->out = malloc((size_t)n + len)) == NULL) {
        cli_metrics_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)n);
    memcpy(c->out + n, body, len);
    c->out_len = (size_t)n + len;
    c->out_off = 0;
    c->state = CLI_METRICS_WRITING;
    cli_deadline(&c->deadline, CLI_METRICS_IO_MS);
}

static void cli_metrics_error(cli_metrics_conn_t *c, int code, const char *reason)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "%d %s\n", code, reason);
    cli_metrics_respond(c, code, reason, "text/plain; charset=utf-8", body, (size_t)n);
}

/* The end of the headers, or NULL. */
static const char *cli_headers_end(const char *buf)
{
    const char *e = strstr(buf, "\r\n\r\n");
    return e != NULL ? e : strstr(buf, "\n\n");
}

static bool cli_token_ok(const char *s, size_t n)
{
    if (n == 0) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f) {
            return false;
        }
    }
    return true;
}

/* Whether the headers carry "Authorization: Bearer <m->token>". */
static bool cli_metrics_authorized(const cli_metrics_t *m, const char *headers)
{
    static const char name[] = "authorization:", scheme[] = "bearer ";
    const char *line = headers;

    if (m->token.len == 0)
        return true;
    while ((line = strchr(line, '\n')) != NULL) {
        line++;
        if (strncasecmp(line, name, sizeof(name) - 1) != 0)
            continue;
        const char *v = line + sizeof(name) - 1;
        v += strspn(v, " \t");
        if (strncasecmp(v, scheme, sizeof(scheme) - 1) != 0)
            return false;
        v += sizeof(scheme) - 1;
        size_t n = strcspn(v, "\r\n");
        unsigned char diff = n != m->token.len;
        for (size_t i = 0; i < m->token.len; i++) /* constant time in the token */
            diff |= (unsigned char)(m->token.bytes[i] ^ (i < n ? (unsigned char)v[i] : 0));
        return diff == 0;
    }
    return false;
}

/* Answer the request in c->req. */
static void cli_metrics_answer(cli_metrics_t *m, cli_metrics_conn_t *c)
{
    /* Request line: METHOD SP TARGET SP HTTP/x.y */
    size_t line = strcspn(c->req, "\r\n");
    const char *sp1 = memchr(c->req, ' ', line);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', line - (size_t)(sp1 + 1 - c->req)) : NULL;
    if (sp1 == NULL || sp2 == NULL || !cli_token_ok(c->req, (size_t)(sp1 - c->req)) ||
        !cli_token_ok(sp1 + 1, (size_t)(sp2 - sp1 - 1)) ||
        (size_t)(c->req + line - (sp2 + 1)) != 8 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        cli_metrics_error(c, 400, "Bad Request");
        return;
    }
    if ((size_t)(sp1 - c->req) != 3 || strncmp(c->req, "GET", 3) != 0) {
        cli_metrics_error(c, 405, "Method Not Allowed");
        return;
    }
    size_t tlen = (size_t)(sp2 - sp1 - 1);
    const char *q = memchr(sp1 + 1, '?', tlen);
    if (q != NULL) {
        tlen = (size_t)(q - sp1 - 1);
    }
    if (tlen != 8 || strncmp(sp1 + 1, "/metrics", 8) != 0) {
        cli_metrics_error(c, 404, "Not Found");
        return;
    }
    if (!cli_metrics_authorized(m, c->req)) {
        cli_metrics_error(c, 401, "Unauthorized");
        return;
    }
    char *text;
    size_t text_len;
    if (cli_stats_prometheus(m->server, &text, &text_len) != 0) {
        cli_metrics_error(c, 500, "Internal Server Error");
        return;
    }
    cli_metrics_respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", text,
                        text_len);
    free(text);
}

/* Take what the peer sent; answer once the headers are in. */
static void cli_metrics_read(cli_metrics_t *m, cli_metrics_conn_t *c)
{
    ssize_t n = recv(c->fd, c->req + c->req_len, CLI_METRICS_REQ_MAX - c->req_len, 0);

    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (n <= 0) {
        if (c->req_len > 0) {
            cli_metrics_answer(m, c); /* an HTTP/0.9-style request line without headers */
        } else {
            cli_metrics_close(c);
        }
        return;
    }
    if (memchr(c->req + c->req_len, '\0', (size_t)n) != NULL) {
        cli_metrics_error(c, 400, "Bad Request");
        return;
    }
    if (c->req_len == 0) {
        cli_deadline(&c->deadline, CLI_METRICS_REQ_MS);
    }
    c->req_len += (size_t)n;
    c->req[c->req_len] = '\0';
    if (cli_headers_end(c->req) != NULL) {
        cli_metrics_answer(m, c);
    } else if (c->req_len == CLI_METRICS_REQ_MAX) {
        cli_metrics_error(c, 400, "Bad Request");
    }
}

static void cli_metrics_write(cli_metrics_conn_t *c)
{
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (n <= 0) {
        cli_metrics_close(c);
        return;
    }
    c->out_off += (size_t)n;
    if (c->out_off < c->out_len) {
        return;
    }
    /* Close gracefully: a close with unread input resets the connection,
     * and the client may lose the response. Drain what it still sends,
     * briefly. */
    free(c->out);
    c->out = NULL;
    shutdown(c->fd, SHUT_WR);
    c->state = CLI_METRICS_LINGERING;
    cli_deadline(&c->deadline, CLI_METRICS_LINGER_MS);
}

static void cli_metrics_drain(cli_metrics_conn_t *c)
{
    char sink[4096];
    ssize_t n = recv(c->fd, sink, sizeof(sink), 0);

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        cli_metrics_close(c);
    }
}

static void cli_metrics_step(cli_metrics_t *m, cli_metrics_conn_t *c)
{
    switch (c->state) {
    case CLI_METRICS_READING:
        cli_metrics_read(m, c);
        break;
    case CLI_METRICS_WRITING:
        cli_metrics_write(c);
        break;
    case CLI_METRICS_LINGERING:
        cli_metrics_drain(c);
        break;
    }
}

/* Accept into a free slot, else into the oldest connection's. */
static void cli_metrics_accept(cli_metrics_t *m)
{
    cli_metrics_conn_t *slot = &m->conns[0];
    int fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
            cli_deadline(&m->accept_after, 100); /* out of descriptors: do not spin */
        }
        return;
    }
    for (size_t i = 1; i < CLI_METRICS_CONNS && slot->fd >= 0; i++) {
        if (m->conns[i].fd < 0 || m->conns[i].seq < slot->seq) {
            slot = &m->conns[i];
        }
    }
    if (slot->fd >= 0) {
        cli_metrics_close(slot);
    }
    slot->fd      = fd;
    slot->state   = CLI_METRICS_READING;
    slot->seq     = ++m->seq;
    slot->req_len = 0;
    cli_deadline(&slot->deadline, CLI_METRICS_FIRST_MS);
}

/* Poll the stop pipe (p[0]), the listener (p[1]) and every connection
 * (p[2 + i]; a free slot's fd is -1, which poll skips) until the nearest
 * deadline. */
static int cli_metrics_poll(cli_metrics_t *m, struct pollfd *p)
{
    int64_t wait = cli_ms_left(&m->accept_after);

    p[0] = (struct pollfd){.fd = m->stop[0], .events = POLLIN};
    p[1] = (struct pollfd){.fd = wait > 0 ? -1 : m->fd, .events = POLLIN};
    wait = wait > 0 ? wait : -1;
    for (size_t i = 0; i < CLI_METRICS_CONNS; i++) {
        const cli_metrics_conn_t *c = &m->conns[i];
        p[2 + i] = (struct pollfd){.fd     = c->fd,
                                   .events = c->state == CLI_METRICS_WRITING ? POLLOUT : POLLIN};
        if (c->fd >= 0) {
            int64_t left = cli_ms_left(&c->deadline);
            left = left > 0 ? left : 0;
            wait = wait < 0 || left < wait ? left : wait;
        }
    }
    return poll(p, 2 + CLI_METRICS_CONNS, (int)wait);
}

static void *cli_metrics_thread(void *arg)
{
    cli_metrics_t *m = arg;
    struct pollfd p[2 + CLI_METRICS_CONNS];

    for (;;) {
        int n = cli_metrics_poll(m, p);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 || p[0].revents) {
            break;
        }
        for (size_t i = 0; i < CLI_METRICS_CONNS; i++) {
            cli_metrics_conn_t *c = &m->conns[i];
            if (c->fd >= 0 && p[2 + i].revents) {
                cli_metrics_step(m, c);
            }
            if (c->fd >= 0 && cli_ms_left(&c->deadline) <= 0) {
                cli_metrics_close(c); /* too slow: just close */
            }
        }
        if (p[1].revents) {
            cli_metrics_accept(m);
        }
    }
    for (size_t i = 0; i < CLI_METRICS_CONNS; i++) {
        if (m->conns[i].fd >= 0) {
            cli_metrics_close(&m->conns[i]);
        }
    }
    return NULL;
}

/* "PORT" is loopback; else HOST:PORT, HOST possibly [v6]. */
static int cli_metrics_split(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon;

    if (addr[0] != '\0' && strspn(addr, "0123456789") == strlen(addr)) {
        if (strlen(addr) >= pcap)
            return -1;
        snprintf(host, hcap, "127.0.0.1");
        snprintf(port, pcap, "%s", addr);
        return atoi(port) > 65535 ? -1 : 0;
    }
    colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || colon[1] == '\0' ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1) || (size_t)(colon - addr) >= hcap ||
        strlen(colon + 1) >= pcap) {
        return -1;
    }
    if (addr[0] == '[' && colon[-1] == ']') {
        snprintf(host, hcap, "%.*s", (int)(colon - addr - 2), addr + 1);
    } else {
        snprintf(host, hcap, "%.*s", (int)(colon - addr), addr);
    }
    snprintf(port, pcap, "%s", colon + 1);
    return atoi(port) > 65535 ? -1 : 0;
}

int cli_metrics_start(const char *cmd, const char *addr, remora_server_h server,
                      const cli_token_t *token, cli_metrics_t **m_p, char *bound, size_t cap)
{
    char host[REMORA_HOST_MAX + 1], port[8];
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai;
    cli_metrics_t *m;
    int one = 1, err, fd;

    if (cli_metrics_split(addr, host, sizeof(host), port, sizeof(port)) != 0) {
        fprintf(stderr, "remora %s: bad --metrics '%s': expected HOST:PORT or PORT\n", cmd, addr);
        return CLI_EXIT_USAGE;
    }
    if ((err = getaddrinfo(host, port, &hints, &ai)) != 0) {
        fprintf(stderr, "remora %s: --metrics %s: %s\n", cmd, addr, gai_strerror(err));
        return CLI_EXIT_USAGE;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = errno;
    } else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
               bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
               listen(fd, CLI_METRICS_BACKLOG) != 0) {
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        fprintf(stderr, "remora %s: cannot serve metrics on %s:%s: %s\n", cmd, host, port,
                err == EADDRINUSE ? "port in use" : strerror(err));
        return CLI_EXIT_RUNTIME;
    }
    if ((m = calloc(1, sizeof(*m))) == NULL || pipe2(m->stop, O_CLOEXEC) != 0) {
        free(m);
        close(fd);
        return cli_error(cmd, addr, REMORA_ERR_NO_MEMORY, NULL);
    }
    m->fd     = fd;
    m->server = server;
    for (size_t i = 0; i < CLI_METRICS_CONNS; i++) {
        m->conns[i].fd = -1;
    }
    if (token != NULL)
        m->token = *token;
    if (pthread_create(&m->thread, NULL, cli_metrics_thread, m) != 0) {
        close(m->stop[0]);
        close(m->stop[1]);
        close(fd);
        free(m);
        return cli_error(cmd, addr, REMORA_ERR_NO_MEMORY, "cannot start the metrics thread");
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        snprintf(bound, cap, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    } else {
        snprintf(bound, cap, "%s:%s", host, port);
    }
    *m_p = m;
    return 0;
}

void cli_metrics_stop(cli_metrics_t *m)
{
    if (m == NULL) {
        return;
    }
    (void)!write(m->stop[1], "x", 1);
    pthread_join(m->thread, NULL);
    close(m->stop[0]);
    close(m->stop[1]);
    close(m->fd);
    free(m);
}
