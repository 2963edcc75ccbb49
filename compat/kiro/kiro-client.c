/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KiroClient over remora: a remora client of the object's own context and a
 * local copy (GLib-allocated, i.e. malloc) of exactly the server's size.
 *
 * Design notes
 * - priv->lock serialises the public calls of this object and guards the
 *   connection and the local copy. It is held across blocking remora calls,
 *   so the event callback (remora's progress thread) never takes it: it
 *   records what happened under priv->evlock, which is never held across a
 *   remora call, and the next public call acts on it.
 * - A server realloc arrives as REGION_CHANGED; the local copy takes the new
 *   size at the start of the next sync (KIRO's documented behaviour, not its
 *   asynchronous swap), so get_memory never changes under a running program.
 * - A failed transfer or a DISCONNECTED event ends the connection: the
 *   client is unconnected afterwards (get_memory NULL), as in KIRO.
 */
#include <math.h>
#include <string.h>

#include "kiro-private.h"
#include "kiro-client.h"

struct _KiroClientPrivate {
    GMutex           lock;
    remora_context_h ctx;
    remora_client_h  cli;
    guint8          *mem;   /* local copy, size bytes */
    size_t           size;  /* = remote size as last taken in */

    GMutex           evlock;         /* guards the three below */
    gboolean         pending;        /* a realloc not yet taken in */
    uint64_t         pending_size;
    gboolean         dead;           /* the connection is gone */
};

G_DEFINE_TYPE_WITH_PRIVATE (KiroClient, kiro_client, G_TYPE_OBJECT)

static void kiro_client_init (KiroClient *self)
{
    self->priv = kiro_client_get_instance_private (self);
    memset (self->priv, 0, sizeof (*self->priv));
    g_mutex_init (&self->priv->lock);
    g_mutex_init (&self->priv->evlock);
}

/* Lock held. */
static void client_teardown (KiroClientPrivate *p)
{
    if (p->cli != NULL)
        remora_client_disconnect (p->cli);
    if (p->ctx != NULL)
        remora_context_destroy (p->ctx);
    g_free (p->mem);
    p->cli  = NULL;
    p->ctx  = NULL;
    p->mem  = NULL;
    p->size = 0;
    g_mutex_lock (&p->evlock);
    p->pending = FALSE;
    p->dead    = FALSE;
    g_mutex_unlock (&p->evlock);
}

static void kiro_client_finalize (GObject *object)
{
    KiroClientPrivate *p = KIRO_CLIENT (object)->priv;

    g_mutex_lock (&p->lock);
    client_teardown (p);
    g_mutex_unlock (&p->lock);
    g_mutex_clear (&p->lock);
    g_mutex_clear (&p->evlock);
    G_OBJECT_CLASS (kiro_client_parent_class)->finalize (object);
}

static void kiro_client_class_init (KiroClientClass *klass)
{
    G_OBJECT_CLASS (klass)->finalize = kiro_client_finalize;
}

KiroClient *kiro_client_new (void)
{
    return g_object_new (KIRO_TYPE_CLIENT, NULL);
}

void kiro_client_free (KiroClient *client)
{
    g_return_if_fail (client != NULL);
    if (!KIRO_IS_CLIENT (client)) {
        g_warning ("kiro_client_free: not a KiroClient");
        return;
    }
    g_object_unref (client);
}

/* remora's progress thread: record, never block. */
static void on_event (const remora_event_t *ev, void *arg)
{
    KiroClientPrivate *p = arg;

    g_mutex_lock (&p->evlock);
    if (ev->type == REMORA_EVENT_REGION_CHANGED && strcmp (ev->name, KC_REGION) == 0) {
        p->pending      = TRUE;
        p->pending_size = ev->size;
    } else if (ev->type == REMORA_EVENT_DISCONNECTED ||
               (ev->type == REMORA_EVENT_REGION_REMOVED && strcmp (ev->name, KC_REGION) == 0)) {
        p->dead = TRUE;
    }
    g_mutex_unlock (&p->evlock);
}

int kiro_client_connect (KiroClient *client, const char *dest_addr, const char *dest_port)
{
    g_return_val_if_fail (KIRO_IS_CLIENT (client), -1);
    KiroClientPrivate *p = client->priv;
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE};
    remora_status_t st;
    int ret = -1;

    char *addr = kc_address (dest_addr, dest_port, NULL, NULL);
    if (addr == NULL) {
        g_warning ("KiroClient: no address or port given");
        return -1;
    }
    g_mutex_lock (&p->lock);
    if (p->cli != NULL) {
        g_warning ("KiroClient: already connected");
        goto out;
    }
    if ((p->ctx = kc_context_new ("kiro-client")) == NULL)
        goto out;
    remora_client_params_t cp = {
        .field_mask = REMORA_CLIENT_FIELD_TIMEOUT | REMORA_CLIENT_FIELD_EVENT_CB,
        .timeout_ms = kc_timeout_ms (), .event_cb = on_event, .event_arg = p};
    if ((st = remora_client_connect (p->ctx, addr, &cp, &p->cli)) != REMORA_OK) {
        g_warning ("KiroClient: cannot connect to %s: %s", addr, remora_status_string (st));
        p->cli = NULL;
        goto err_teardown;
    }
    if ((st = remora_client_lookup (p->cli, KC_REGION, &info)) != REMORA_OK) {
        g_warning ("KiroClient: %s serves no KIRO block: %s", addr, remora_status_string (st));
        goto err_teardown;
    }
    if (info.size == 0 || info.size > G_MAXSIZE || (p->mem = g_try_malloc (info.size)) == NULL) {
        g_warning ("KiroClient: cannot allocate the local copy (%" G_GUINT64_FORMAT " bytes)",
                   info.size);
        goto err_teardown;
    }
    p->size = info.size;
    ret = 0;
    goto out;

err_teardown:
    client_teardown (p);
out:
    g_mutex_unlock (&p->lock);
    g_free (addr);
    return ret;
}

void kiro_client_disconnect (KiroClient *client)
{
    g_return_if_fail (KIRO_IS_CLIENT (client));
    g_mutex_lock (&client->priv->lock);
    client_teardown (client->priv);
    g_mutex_unlock (&client->priv->lock);
}

/* Lock held: a new local copy of size bytes (contents undefined). */
static gboolean take_in_size (KiroClientPrivate *p, uint64_t size)
{
    guint8 *mem;

    if (size == p->size)
        return TRUE;
    if (size == 0 || size > G_MAXSIZE || (mem = g_try_malloc (size)) == NULL) {
        g_warning ("KiroClient: cannot follow the server's realloc to %" G_GUINT64_FORMAT
                   " bytes; disconnecting", size);
        return FALSE;
    }
    g_free (p->mem);
    p->mem  = mem;
    p->size = size;
    return TRUE;
}

/* Lock held: act on what the event callback recorded. FALSE: disconnected. */
static gboolean take_in_events (KiroClientPrivate *p)
{
    gboolean pending, dead;
    uint64_t size;

    g_mutex_lock (&p->evlock);
    pending    = p->pending;
    size       = p->pending_size;
    dead       = p->dead;
    p->pending = FALSE;
    g_mutex_unlock (&p->evlock);
    if (dead || (pending && !take_in_size (p, size))) {
        client_teardown (p);
        return FALSE;
    }
    return TRUE;
}

int kiro_client_sync (KiroClient *client)
{
    return kiro_client_sync_partial (client, 0, 0, 0);
}

int kiro_client_sync_partial (KiroClient *client, gulong remote_offset, gulong size,
                              gulong local_offset)
{
    g_return_val_if_fail (KIRO_IS_CLIENT (client), -1);
    KiroClientPrivate *p = client->priv;
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE};
    remora_status_t st;
    int ret = -1;

    g_mutex_lock (&p->lock);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (p->cli == NULL || !take_in_events (p))
            goto out;
        if (remote_offset > p->size)
            goto out;
        size_t n = size > 0 ? size : p->size - remote_offset;
        if (n > p->size - remote_offset || local_offset > p->size || n > p->size - local_offset)
            goto out;
        if (n == 0) {
            ret = 0;
            goto out;
        }
        st = remora_client_read (p->cli, KC_REGION, remote_offset, p->mem + local_offset, n);
        if (st == REMORA_OK) {
            ret = 0;
            goto out;
        }
        if (st == REMORA_ERR_OUT_OF_RANGE && attempt == 0 &&
            remora_client_lookup (p->cli, KC_REGION, &info) == REMORA_OK && info.size != p->size) {
            /* the server realloc'd and its event is still on the way: follow now */
            g_mutex_lock (&p->evlock);
            p->pending      = TRUE;
            p->pending_size = info.size;
            g_mutex_unlock (&p->evlock);
            continue;
        }
        if (st != REMORA_ERR_OUT_OF_RANGE) {
            g_warning ("KiroClient: sync failed: %s; disconnected", remora_status_string (st));
            client_teardown (p);
        }
        goto out;
    }
out:
    g_mutex_unlock (&p->lock);
    return ret;
}

gint kiro_client_ping_server (KiroClient *client)
{
    g_return_val_if_fail (KIRO_IS_CLIENT (client), -1);
    KiroClientPrivate *p = client->priv;
    double rtt = 0;
    gint ret = -1;

    g_mutex_lock (&p->lock);
    if (p->cli == NULL || !take_in_events (p))
        goto out;
    remora_status_t st = remora_client_ping (p->cli, &rtt);
    if (st == REMORA_OK && rtt <= KC_PING_LIMIT_MS * 1000.0)
        ret = (gint) lround (rtt);
    else if (st == REMORA_ERR_DISCONNECTED)
        client_teardown (p);
out:
    g_mutex_unlock (&p->lock);
    return ret;
}

void *kiro_client_get_memory (KiroClient *client)
{
    g_return_val_if_fail (KIRO_IS_CLIENT (client), NULL);
    g_mutex_lock (&client->priv->lock);
    void *m = client->priv->mem;
    g_mutex_unlock (&client->priv->lock);
    return m;
}

size_t kiro_client_get_memory_size (KiroClient *client)
{
    g_return_val_if_fail (KIRO_IS_CLIENT (client), 0);
    g_mutex_lock (&client->priv->lock);
    size_t s = client->priv->size;
    g_mutex_unlock (&client->priv->lock);
    return s;
}

remora_client_h kc_client_remora (KiroClient *client)
{
    return client->priv->cli;
}
