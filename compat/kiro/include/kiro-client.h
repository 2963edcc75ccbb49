/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kiro-client.h — KiroClient: a local copy of a KiroServer's block.
 *
 * KIRO 1.3 API, implemented over remora (docs/kiro.md).
 */
#ifndef __KIRO_CLIENT_H
#define __KIRO_CLIENT_H

#include <stdint.h>
#include <glib-object.h>

G_BEGIN_DECLS

#define KIRO_TYPE_CLIENT             (kiro_client_get_type())
#define KIRO_CLIENT(obj)             (G_TYPE_CHECK_INSTANCE_CAST((obj), KIRO_TYPE_CLIENT, KiroClient))
#define KIRO_IS_CLIENT(obj)          (G_TYPE_CHECK_INSTANCE_TYPE((obj), KIRO_TYPE_CLIENT))
#define KIRO_CLIENT_CLASS(klass)     (G_TYPE_CHECK_CLASS_CAST((klass), KIRO_TYPE_CLIENT, KiroClientClass))
#define KIRO_IS_CLIENT_CLASS(klass)  (G_TYPE_CHECK_CLASS_TYPE((klass), KIRO_TYPE_CLIENT))
#define KIRO_CLIENT_GET_CLASS(obj)   (G_TYPE_INSTANCE_GET_CLASS((obj), KIRO_TYPE_CLIENT, KiroClientClass))

typedef struct _KiroClient        KiroClient;
typedef struct _KiroClientClass   KiroClientClass;
typedef struct _KiroClientPrivate KiroClientPrivate;

struct _KiroClient {
    GObject parent;
    /*< private >*/
    KiroClientPrivate *priv;
};

struct _KiroClientClass {
    GObjectClass parent_class;
};

GType       kiro_client_get_type (void);

/* A new, unconnected client. */
KiroClient *kiro_client_new (void);

/* Drops the caller's reference; the last one disconnects (finalize). */
void        kiro_client_free (KiroClient *client);

/*
 * Connect to dest_addr:dest_port and allocate the local copy (exactly the
 * server's size; contents undefined until the first sync). Bounded by
 * KIRO_TIMEOUT_MS (default 10000). 0, or -1 (already connected — the
 * connection is kept —, address, no server, timeout).
 */
int         kiro_client_connect (KiroClient *client, const char *dest_addr, const char *dest_port);

/* Close the connection and free the local copy; no-op if not connected. */
void        kiro_client_disconnect (KiroClient *client);

/* kiro_client_sync_partial (client, 0, 0, 0): the whole block. */
int         kiro_client_sync (KiroClient *client);

/*
 * Copy size bytes (0: to the end of the remote block) from the server's
 * block at remote_offset into the local copy at local_offset. 0, or -1
 * without side effects when not connected or the range does not fit either
 * side; -1 with the client disconnected when the transfer fails (server
 * gone, timeout).
 */
int         kiro_client_sync_partial (KiroClient *client, gulong remote_offset, gulong size,
                                      gulong local_offset);

/* Round trip to the server in microseconds, or -1 (not connected, no
 * answer within 2 s). */
gint        kiro_client_ping_server (KiroClient *client);

/* The local copy (malloc'd, writable, never to be freed by the caller);
 * NULL when not connected. Stable until disconnect or until a sync takes a
 * server realloc in. */
void       *kiro_client_get_memory (KiroClient *client);

/* Size of the local copy; 0 when not connected. */
size_t      kiro_client_get_memory_size (KiroClient *client);

G_END_DECLS

#endif /* __KIRO_CLIENT_H */
