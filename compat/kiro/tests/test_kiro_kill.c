/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A killed server: the server (a KiroServer, and a serving KiroSb) runs in
 * a child process that is killed with SIGKILL; the client's next syncs
 * return -1 within a few seconds and it is left unconnected; a KiroSb clone
 * of it stops waiting.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "kiro-client.h"
#include "kiro-sb.h"
#include "kiro-server.h"
#include "kiro_test.h"

/* Child: serve on port, say "ready" on fd, wait to be killed. */
static void child (const char *port, const char *sbport, int fd)
{
    static unsigned char block[1 << 20];
    memset (block, 0x5a, sizeof block);
    KiroServer *s = kiro_server_new ();
    KiroSb *sb = kiro_sb_new ();
    if (kiro_server_start (s, "127.0.0.1", port, block, sizeof block) != 0 ||
        !kiro_sb_serve (sb, 4096, "127.0.0.1", sbport))
        _exit (1);
    if (write (fd, "r", 1) != 1)
        _exit (1);
    for (;;)
        pause ();
}

int main (void)
{
    char port[16], sbport[16], r;
    int fds[2];

    /* A free port may be taken by a test running beside this one before the
     * child binds it: the child then exits without "ready"; try new ports. */
    pid_t pid = -1;
    for (int attempt = 0; attempt < 5 && pid < 0; attempt++) {
        kt_free_port (port, sizeof port);
        kt_free_port (sbport, sizeof sbport);
        if (strcmp (port, sbport) == 0)
            continue;
        CHECK (pipe (fds) == 0);
        pid = fork (); /* before this process made any thread */
        CHECK (pid >= 0);
        if (pid == 0) {
            close (fds[0]);
            child (port, sbport, fds[1]);
        }
        close (fds[1]);
        if (read (fds[0], &r, 1) != 1) {
            CHECK (waitpid (pid, NULL, 0) == pid);
            pid = -1;
        }
        close (fds[0]);
    }
    CHECK (pid >= 0); /* no server started in 5 tries */

    KiroClient *c = kiro_client_new ();
    CHECK (kiro_client_connect (c, "127.0.0.1", port) == 0);
    CHECK (kiro_client_sync (c) == 0);
    CHECK (((unsigned char *) kiro_client_get_memory (c))[777] == 0x5a);
    KiroSb *cl = kiro_sb_new ();
    CHECK (kiro_sb_clone (cl, "127.0.0.1", sbport));

    CHECK (kill (pid, SIGKILL) == 0);
    double t0 = kt_now_s ();
    CHECK (waitpid (pid, NULL, 0) == pid);
    int rc;
    while ((rc = kiro_client_sync (c)) == 0 && kt_now_s () - t0 < 10)
        g_usleep (1000);
    double dt = kt_now_s () - t0;
    printf ("sync returned -1 %.3f s after SIGKILL\n", dt);
    CHECK (rc == -1);
    CHECK (dt < 5);
    CHECK (kiro_client_get_memory (c) == NULL);
    CHECK (kiro_client_sync (c) == -1);
    CHECK (kiro_client_ping_server (c) == -1);

    t0 = kt_now_s ();
    CHECK (kiro_sb_get_data_blocking (cl) == NULL);
    CHECK (kt_now_s () - t0 < 5);
    kiro_sb_free (cl);
    kiro_client_free (c);
    printf ("kiro kill: ok\n");
    return 0;
}
