/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection caps of a server (remora_server_params_t max_conns,
 * max_conns_per_host), counted across all its workers: a connection counts
 * whichever worker's port it came in by (docs/security.md).
 *
 * Design notes
 * - One count per server, shared by the servers of its workers (reference
 *   counted, like the registry): a worker leaked at destroy keeps it alive.
 * - Its own mutex, a leaf: taken with a worker's context lock held, and
 *   nothing is taken under it. (A worker must not take the first worker's
 *   lock, which is what counting through the first worker would need.)
 * - A connection is counted from its accept to its free. One over a cap is
 *   refused at its accept and not counted: counting it (until its HELLO was
 *   refused) let one host hold every slot with sockets that sent nothing, and
 *   a count taken short-circuited but given back in full wrapped a host's
 *   count and locked it out until restart (both found by review).
 */
#ifndef RM_REMOTE_CONN_CAPS_H
#define RM_REMOTE_CONN_CAPS_H

typedef struct rm_conn_caps rm_conn_caps_t;

/* NULL when out of memory. */
rm_conn_caps_t *rm_conn_caps_create(unsigned max_all, unsigned max_host);
void rm_conn_caps_ref(rm_conn_caps_t *caps);
void rm_conn_caps_unref(rm_conn_caps_t *caps);

/* Count a connection from host (an address without its port): 0, or -1
 * when it is over a cap or memory ran out (then nothing is counted, and no
 * rm_conn_caps_put is due). */
int rm_conn_caps_take(rm_conn_caps_t *caps, const char *host);
/* The connection from host is freed. */
void rm_conn_caps_put(rm_conn_caps_t *caps, const char *host);

#endif
