/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal helpers of the KIRO compatibility layer (not installed).
 *
 * Design notes
 * - Each KiroServer, KiroClient and KiroSb owns its own remora context (one
 *   UCX worker and one progress thread). Objects never share state, so two
 *   servers or clients in one process are independent, and a server and a
 *   client in one process can talk to each other (remora refuses a client
 *   of the server's own context). Cost: one progress thread per object,
 *   asleep on its worker's event fd when idle.
 * - No GMainLoop, no GMainContext: remora's progress threads do the work,
 *   so an application's own main loop is never touched.
 * - Every object has its own mutex; there is no process-global lock.
 * - The served block is remora region KC_REGION; a serving KiroSb also
 *   exposes the ring KC_SB_RING (8-byte elements: the TRB's offset after
 *   each push) that clones subscribe to.
 */
#ifndef KIRO_PRIVATE_H
#define KIRO_PRIVATE_H

#include <remora/remora.h>
#include <glib.h>
#include "kiro-client.h"
#include "kiro-server.h"

#define KC_REGION        "kiro"
#define KC_SB_RING       "kiro.sb"
#define KC_SB_ELEM       8u /* KC_SB_RING's elements: a TRB offset (u64) */
#define KC_TRB_HEADER    24u
#define KC_PING_LIMIT_MS 2000

/* KIRO_TIMEOUT_MS from the environment (default 10000 ms, at least 1). */
int kc_timeout_ms (void);

/* "HOST:PORT" from KIRO's separate strings; NULL host gives "0.0.0.0"
 * (servers) or fails (clients). g_free the result. */
char *kc_address (const char *host, const char *port, const char *default_host,
                  const char *default_port);

/* A fresh remora context for one KIRO object, NULL on failure (logged). */
remora_context_h kc_context_new (const char *name);

/* Little-endian u64 in memory (the TRB header format). */
uint64_t kc_load_u64 (const void *p);
void     kc_store_u64 (void *p, uint64_t v);

/* For KiroSb: the remora client under a connected KiroClient (NULL if not
 * connected). Valid while the KiroClient stays connected. */
remora_client_h kc_client_remora (KiroClient *client);

/* For KiroSb: start a KiroServer serving size bytes of memory remora
 * allocates (shareable, so same-host clients map it: a read is a memcpy);
 * *mem_p is its address, valid until the server stops. 0 or -1. */
int kc_server_start_alloc (KiroServer *server, const char *bind_addr, const char *bind_port,
                           size_t size, void **mem_p);

/* For KiroSb: expose a ring on a started KiroServer (created on its context). */
remora_status_t kc_server_add_ring (KiroServer *server, const char *name, size_t elem_size,
                                    size_t capacity, remora_ring_h *ring_p);

#endif /* KIRO_PRIVATE_H */
