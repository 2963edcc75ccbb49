/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kiro-server.h — KiroServer: serve one block of memory to KIRO clients.
 *
 * KIRO 1.3 API, implemented over remora (docs/kiro.md). The block is served
 * in place: it is not copied, and a plain write by the server application is
 * visible at a client's next sync. The caller owns the block and keeps it
 * valid until kiro_server_stop() returns or, after kiro_server_realloc(),
 * until the clients have let go of it (docs/kiro.md).
 */
#ifndef __KIRO_SERVER_H
#define __KIRO_SERVER_H

#include <stdint.h>
#include <glib-object.h>

G_BEGIN_DECLS

#define KIRO_TYPE_SERVER             (kiro_server_get_type())
#define KIRO_SERVER(obj)             (G_TYPE_CHECK_INSTANCE_CAST((obj), KIRO_TYPE_SERVER, KiroServer))
#define KIRO_IS_SERVER(obj)          (G_TYPE_CHECK_INSTANCE_TYPE((obj), KIRO_TYPE_SERVER))
#define KIRO_SERVER_CLASS(klass)     (G_TYPE_CHECK_CLASS_CAST((klass), KIRO_TYPE_SERVER, KiroServerClass))
#define KIRO_IS_SERVER_CLASS(klass)  (G_TYPE_CHECK_CLASS_TYPE((klass), KIRO_TYPE_SERVER))
#define KIRO_SERVER_GET_CLASS(obj)   (G_TYPE_INSTANCE_GET_CLASS((obj), KIRO_TYPE_SERVER, KiroServerClass))

typedef struct _KiroServer        KiroServer;
typedef struct _KiroServerClass   KiroServerClass;
typedef struct _KiroServerPrivate KiroServerPrivate;

struct _KiroServer {
    GObject parent;
    /*< private >*/
    KiroServerPrivate *priv;
};

struct _KiroServerClass {
    GObjectClass parent_class;
};

GType       kiro_server_get_type (void);

/* A new, unbound server. */
KiroServer *kiro_server_new (void);

/* Drops the caller's reference; the last one stops the server (finalize).
 * The served memory is never freed. */
void        kiro_server_free (KiroServer *server);

/*
 * Serve mem (mem_size bytes) on bind_addr:bind_port. bind_addr NULL: all
 * addresses ("0.0.0.0"). bind_port NULL: a free port, named in a g_message
 * ("listening on HOST:PORT"). Returns 0 once listening, -1 if already
 * started, mem is NULL, mem_size is 0, or the address cannot be bound.
 */
int         kiro_server_start (KiroServer *server, const char *bind_addr, const char *bind_port,
                               void *mem, size_t mem_size);

/*
 * Serve another block (any size) from now on. Every connected client is told
 * at once; its local copy takes the new size at its next sync. Returns at
 * once. remora may still reference the old block until every client has
 * acknowledged the change (a round trip; at most 10 s): free it only after
 * that (docs/kiro.md, "realloc").
 */
void        kiro_server_realloc (KiroServer *server, void *mem, size_t mem_size);

/* Disconnect every client and stop listening; no-op if not started. The
 * server can be started again. */
void        kiro_server_stop (KiroServer *server);

G_END_DECLS

#endif /* __KIRO_SERVER_H */
