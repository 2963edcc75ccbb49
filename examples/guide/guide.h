/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What every program of the guide (docs/guide.md) shares: CHECK, which ends
 * the program with a message when a call fails, and the signal handling of
 * the servers.
 */
#ifndef GUIDE_H
#define GUIDE_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <remora/remora.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        remora_status_t st_ = (call);                                                \
        if (st_ != REMORA_OK) {                                                      \
            fprintf(stderr, "%s: %s\n", #call, remora_status_string(st_));           \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* Servers block the signals they wait for before creating a context, so that
 * remora's threads inherit the mask and sigwait() in main sees them. */
static inline sigset_t guide_block_signals(void)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    return set;
}

#endif
