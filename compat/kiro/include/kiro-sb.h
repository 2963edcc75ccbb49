/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kiro-sb.h — KiroSb: a 'synchronising buffer'.
 *
 * A serving KiroSb serves a KiroTrb of 3 elements; a cloning KiroSb follows
 * a served TRB (a KiroSb's or any KiroServer's) and runs the registered
 * callbacks on a library thread each time it has taken in a newer element.
 * KIRO 1.3 API, implemented over remora (docs/kiro.md).
 */
#ifndef __KIRO_SB_H
#define __KIRO_SB_H

#include <stdint.h>
#include <glib-object.h>

G_BEGIN_DECLS

#define KIRO_TYPE_SB             (kiro_sb_get_type())
#define KIRO_SB(obj)             (G_TYPE_CHECK_INSTANCE_CAST((obj), KIRO_TYPE_SB, KiroSb))
#define KIRO_IS_SB(obj)          (G_TYPE_CHECK_INSTANCE_TYPE((obj), KIRO_TYPE_SB))
#define KIRO_SB_CLASS(klass)     (G_TYPE_CHECK_CLASS_CAST((klass), KIRO_TYPE_SB, KiroSbClass))
#define KIRO_IS_SB_CLASS(klass)  (G_TYPE_CHECK_CLASS_TYPE((klass), KIRO_TYPE_SB))
#define KIRO_SB_GET_CLASS(obj)   (G_TYPE_INSTANCE_GET_CLASS((obj), KIRO_TYPE_SB, KiroSbClass))

typedef struct _KiroSb        KiroSb;
typedef struct _KiroSbClass   KiroSbClass;
typedef struct _KiroSbPrivate KiroSbPrivate;

struct _KiroSb {
    GObject parent;
};

struct _KiroSbClass {
    GObjectClass parent_class;
};

typedef gboolean KiroContinueFlag;
#define KIRO_CALLBACK_CONTINUE TRUE
#define KIRO_CALLBACK_REMOVE   FALSE

/* Runs on a library thread after the clone took in a newer element;
 * return KIRO_CALLBACK_REMOVE to be removed. */
typedef KiroContinueFlag (*KiroSbSyncCallbackFunc) (void *user_data);

GType    kiro_sb_get_type (void);
KiroSb  *kiro_sb_new (void);
/* Drops the caller's reference; the last one stops the KiroSb (finalize). */
void     kiro_sb_free (KiroSb *sb);
/* Stop serving or cloning, drop the callbacks and the data; the KiroSb can
 * serve or clone again. */
void     kiro_sb_stop (KiroSb *sb);

/* Append a callback; returns its id (> 0). */
gulong   kiro_sb_add_sync_callback (KiroSb *sb, KiroSbSyncCallbackFunc callback, void *user_data);
/* TRUE if a callback of that id was registered and is now removed. */
gboolean kiro_sb_remove_sync_callback (KiroSb *sb, gulong id);
void     kiro_sb_clear_sync_callbacks (KiroSb *sb);

/* Serve elements of size bytes on addr:port (NULL addr: all addresses;
 * NULL port: "60010"). TRUE, or FALSE (already serving or cloning, size 0,
 * cannot bind). */
gboolean kiro_sb_serve (KiroSb *sb, gulong size, const gchar *addr, const gchar *port);
/* Follow the TRB served at address:port. TRUE, or FALSE (already serving or
 * cloning, no server, not a TRB). */
gboolean kiro_sb_clone (KiroSb *sb, const gchar *address, const gchar *port);
/* Element size; 0 if neither serving nor cloning. */
gulong   kiro_sb_get_size (KiroSb *sb);
/* While frozen a clone takes nothing in and calls no callback. */
void     kiro_sb_freeze (KiroSb *sb);
void     kiro_sb_thaw (KiroSb *sb);
/* The newest element (the initial, zeroed one before any); valid until
 * the next element is taken in (clone) or pushed (serving). NULL if neither. */
void    *kiro_sb_get_data (KiroSb *sb);
/* Wait for the next element (clone: taken in; serving: pushed), then as
 * get_data. NULL after KIRO_TIMEOUT_MS (default 10000) or when the clone's
 * server went away. */
void    *kiro_sb_get_data_blocking (KiroSb *sb);
/* Serving only: copy get_size bytes from data in as the newest element.
 * TRUE on success, FALSE on a non-serving KiroSb. */
gboolean kiro_sb_push (KiroSb *sb, void *data);
/* Serving only: the slot of a new element, counted as pushed at once. */
void    *kiro_sb_push_dma (KiroSb *sb);
/* Serving only: where the next push will write. */
void    *kiro_sb_get_dma_pointer (KiroSb *sb);

G_END_DECLS

#endif /* __KIRO_SB_H */
