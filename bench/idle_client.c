/* SPDX-License-Identifier: BSD-3-Clause */
/* Connect to a server, stay idle for SECONDS, and print the CPU this process
 * used meanwhile as a percentage of one core (the idle-CPU target). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <remora/remora.h>

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    remora_context_h ctx;
    remora_client_h client;
    remora_status_t st;
    double secs = argc > 2 ? atof(argv[2]) : 5.0, rtt, c0, w0;

    if (argc < 2) {
        fprintf(stderr, "usage: idle_client HOST:PORT [SECONDS]\n");
        return 2;
    }
    if ((st = remora_context_create(NULL, &ctx)) != REMORA_OK ||
        (st = remora_client_connect(ctx, argv[1], NULL, &client)) != REMORA_OK) {
        fprintf(stderr, "idle_client: %s\n", remora_status_string(st));
        return 1;
    }
    remora_client_ping(client, &rtt); /* the connection is fully up */
    usleep(200000);
    c0 = cpu_s();
    w0 = wall_s();
    usleep((useconds_t)(secs * 1e6));
    printf("{\"op\":\"idle_client\",\"seconds\":%.2f,\"cpu_pct\":%.3f}\n", wall_s() - w0,
           100.0 * (cpu_s() - c0) / (wall_s() - w0));
    remora_client_disconnect(client);
    remora_context_destroy(ctx);
    return 0;
}
