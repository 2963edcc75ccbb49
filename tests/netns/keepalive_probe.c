/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A plain TCP connection tuned by rm_tcp_keepalive (src/engine/boot.c, what
 * GPU sockets over plain TCP use), for test_netns_keepalive.sh:
 *   keepalive_probe listen IP PORT       accept one connection, then hold it
 *                                        without a byte either way
 *   keepalive_probe connect IP PORT MS   connect, rm_tcp_keepalive(fd, MS)
 *                                        (0: leave the socket as it is), wait
 *                                        in recv() until it fails
 * connect prints "connected", then "recv failed: ERRNO after N ms" (exit 0)
 * or "peer closed after N ms" (exit 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"

static double now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    char b;

    if (argc < 4 || fd < 0 || inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
        fprintf(stderr, "usage: %s listen|connect IP PORT [MS]\n", argv[0]);
        return 2;
    }
    sa.sin_port = htons((uint16_t)atoi(argv[3]));
    if (strcmp(argv[1], "listen") == 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1) != 0) {
            perror("listen");
            return 2;
        }
        printf("listening\n");
        fflush(stdout);
        int c = accept(fd, NULL, NULL);
        printf("accepted %d\n", c >= 0);
        fflush(stdout);
        pause();
        return 0;
    }
    if (argc < 5 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        perror("connect");
        return 2;
    }
    if (rm_tcp_keepalive(fd, (unsigned)atoi(argv[4])) != 0) {
        perror("rm_tcp_keepalive");
        return 2;
    }
    printf("connected\n");
    fflush(stdout);
    double t0 = now_ms();
    ssize_t r = recv(fd, &b, 1, 0);
    if (r < 0) {
        printf("recv failed: %s after %.0f ms\n", strerror(errno), now_ms() - t0);
        return 0;
    }
    printf("peer closed after %.0f ms\n", now_ms() - t0);
    return 1;
}
