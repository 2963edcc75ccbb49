/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Tiny helpers for the libkiro tests: checks that abort with the line, a
 * free-port picker, a monotonic clock. The tests use only the public KIRO
 * API (and GLib; kiro_sb also remora's, to serve what a KiroServer would
 * not); a test that cannot run here exits 77 (skipped).
 */
#ifndef KIRO_TEST_H
#define KIRO_TEST_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf (stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            abort ();                                                                \
        }                                                                            \
    } while (0)

#define SKIP(why)                                   \
    do {                                            \
        fprintf (stderr, "SKIPPED: %s\n", why);     \
        exit (77);                                  \
    } while (0)

/* A TCP port free right now on 127.0.0.1, as a string in buf. */
/* A loopback port free now, below Linux's ephemeral range (32768 up): the
 * port-0 listeners of tests running beside this one are never given it
 * before our server binds it. Random, so that two of these rarely meet. */
static inline const char *kt_free_port (char *buf, size_t len)
{
    static unsigned seed;
    struct sockaddr_in a;

    if (seed == 0)
        seed = (unsigned) getpid () * 2654435761u ^ (unsigned) time (NULL);
    for (int i = 0; i < 200; i++) {
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            SKIP ("no sockets");
        memset (&a, 0, sizeof (a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        a.sin_port = htons ((uint16_t) (20000 + rand_r (&seed) % 12000));
        int ok = bind (fd, (struct sockaddr *) &a, sizeof (a)) == 0;
        close (fd);
        if (ok) {
            snprintf (buf, len, "%u", (unsigned) ntohs (a.sin_port));
            return buf;
        }
    }
    SKIP ("cannot bind a loopback port");
}

static inline double kt_now_s (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* CPU seconds this process used so far (all threads). */
static inline double kt_cpu_s (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

#endif /* KIRO_TEST_H */
