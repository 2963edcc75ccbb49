/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KiroSb over remora.
 *
 * Design notes
 * - Serving: a KiroTrb of KC_SB_SLOTS elements, in memory remora allocates (so a
 *   clone on the same host maps it and a read is a memcpy), served by a
 *   KiroServer (region
 *   "kiro", KIRO's byte layout, so plain KiroClients and KIRO-style clones
 *   read it), plus a remora ring "kiro.sb" of 8-byte elements: after every
 *   push the TRB's new offset is pushed to it (little-endian u64).
 * - Cloning: a KiroClient; the whole block is read once and cloned into a
 *   KiroTrb of the clone's own. If the server has the ring, the clone
 *   subscribes to it in every mode (event-driven, one callback per push);
 *   each notification names the newest offset, and the clone reads just
 *   the newest slot into its TRB, sets the TRB's offset and runs the
 *   callbacks on the subscription's thread. A plain served KiroTrb has no
 *   ring: then a library thread polls the 24-byte header every
 *   KC_POLL_US (paced, not busy).
 * - get_data is element 1 (the newest) once anything was pushed, else 0.
 * - Locks: priv->lock guards mode, TRB state and the update counter (with
 *   priv->cond for get_data_blocking); priv->cb_lock guards the callback
 *   list. Callbacks run with neither held. stop() first ends the library
 *   thread (destroying the subscription joins it; it may be waiting for the
 *   lock, so that happens with the lock released), then tears the state
 *   down: a callback never sees a half-stopped KiroSb. So a callback must
 *   not call kiro_sb_stop / kiro_sb_free on its own KiroSb.
 */
#include <string.h>

#include "kiro-private.h"
#include "kiro-sb.h"
#include "kiro-server.h"
#include "kiro-client.h"
#include "kiro-trb.h"

/* A clone reads the slot a notification names; the producer must not have
 * reused it by then. 16 slots give a clone 16 pushes of slack (16 ms at
 * 1 kHz); with 3, a 1 MiB clone on a 16-core host missed 3 of 15,000. */
#define KC_SB_SLOTS     16
#define KC_SB_RING_CAP  1024 /* pushes a clone may fall behind by before one is missed */
#define KC_POLL_US      1000

typedef enum { SB_IDLE, SB_SERVING, SB_CLONING } sb_mode_t;

typedef struct {
    gulong                 id;
    KiroSbSyncCallbackFunc func;
    void                  *data;
} sb_hook_t;

struct _KiroSbPrivate {
    GMutex        lock;
    GCond         cond;
    sb_mode_t     mode;
    KiroTrb      *trb;
    gulong        size;
    guint64       updates;   /* pushes (serving) or elements taken in (cloning) */
    gboolean      broken;    /* cloning: the server went away */
    uint64_t      last;      /* cloning: offset taken in last */

    KiroServer   *server;    /* serving */
    remora_ring_h ring;

    KiroClient   *client;    /* cloning */
    remora_sub_h  sub;
    GThread      *poller;
    gboolean      stop_poll; /* under lock; cond wakes the poller */

    gint          frozen;    /* atomic */

    GMutex        cb_lock;
    GArray       *hooks;     /* sb_hook_t */
    gulong        next_id;
};

G_DEFINE_TYPE_WITH_PRIVATE (KiroSb, kiro_sb, G_TYPE_OBJECT)

#define PRIV(s) ((KiroSbPrivate *) kiro_sb_get_instance_private (s))

static void kiro_sb_init (KiroSb *self)
{
    KiroSbPrivate *p = PRIV (self);

    memset (p, 0, sizeof (*p));
    g_mutex_init (&p->lock);
    g_cond_init (&p->cond);
    g_mutex_init (&p->cb_lock);
    p->hooks   = g_array_new (FALSE, FALSE, sizeof (sb_hook_t));
    p->next_id = 1;
}

static void kiro_sb_finalize (GObject *object)
{
    KiroSbPrivate *p = PRIV (KIRO_SB (object));

    kiro_sb_stop (KIRO_SB (object));
    g_array_free (p->hooks, TRUE);
    g_mutex_clear (&p->cb_lock);
    g_cond_clear (&p->cond);
    g_mutex_clear (&p->lock);
    G_OBJECT_CLASS (kiro_sb_parent_class)->finalize (object);
}

static void kiro_sb_class_init (KiroSbClass *klass)
{
    G_OBJECT_CLASS (klass)->finalize = kiro_sb_finalize;
}

KiroSb *kiro_sb_new (void)
{
    return g_object_new (KIRO_TYPE_SB, NULL);
}

void kiro_sb_free (KiroSb *sb)
{
    g_return_if_fail (sb != NULL);
    if (!KIRO_IS_SB (sb)) {
        g_warning ("kiro_sb_free: not a KiroSb");
        return;
    }
    g_object_unref (sb);
}

/* ------------------------------------------------------------ callbacks */

gulong kiro_sb_add_sync_callback (KiroSb *sb, KiroSbSyncCallbackFunc callback, void *user_data)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), 0);
    g_return_val_if_fail (callback != NULL, 0);
    KiroSbPrivate *p = PRIV (sb);

    g_mutex_lock (&p->cb_lock);
    sb_hook_t h = {.id = p->next_id++, .func = callback, .data = user_data};
    g_array_append_val (p->hooks, h);
    g_mutex_unlock (&p->cb_lock);
    return h.id;
}

gboolean kiro_sb_remove_sync_callback (KiroSb *sb, gulong id)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), FALSE);
    KiroSbPrivate *p = PRIV (sb);
    gboolean found = FALSE;

    g_mutex_lock (&p->cb_lock);
    for (guint i = 0; i < p->hooks->len; i++) {
        if (g_array_index (p->hooks, sb_hook_t, i).id == id) {
            g_array_remove_index (p->hooks, i);
            found = TRUE;
            break;
        }
    }
    g_mutex_unlock (&p->cb_lock);
    return found;
}

void kiro_sb_clear_sync_callbacks (KiroSb *sb)
{
    g_return_if_fail (KIRO_IS_SB (sb));
    KiroSbPrivate *p = PRIV (sb);

    g_mutex_lock (&p->cb_lock);
    g_array_set_size (p->hooks, 0);
    g_mutex_unlock (&p->cb_lock);
}

/* Library thread: run every callback registered now, in order, none locked. */
static void run_callbacks (KiroSb *sb)
{
    KiroSbPrivate *p = PRIV (sb);

    g_mutex_lock (&p->cb_lock);
    GArray *snap = g_array_copy (p->hooks);
    g_mutex_unlock (&p->cb_lock);
    for (guint i = 0; i < snap->len; i++) {
        sb_hook_t *h = &g_array_index (snap, sb_hook_t, i);
        if (!h->func (h->data))
            kiro_sb_remove_sync_callback (sb, h->id);
    }
    g_array_free (snap, TRUE);
}

/* ------------------------------------------------------------ serving */

gboolean kiro_sb_serve (KiroSb *sb, gulong size, const gchar *addr, const gchar *port)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), FALSE);
    KiroSbPrivate *p = PRIV (sb);
    KiroTrb *trb = NULL;
    KiroServer *server = NULL;
    remora_ring_h ring = NULL;
    remora_status_t st;

    if (size == 0) {
        g_warning ("kiro_sb_serve: element size 0");
        return FALSE;
    }
    g_mutex_lock (&p->lock);
    if (p->mode != SB_IDLE) {
        g_mutex_unlock (&p->lock);
        g_critical ("kiro_sb_serve: this KiroSb is already serving or cloning");
        return FALSE;
    }
    /* the TRB lives in memory the server allocates (mappable by same-host
     * clones); the TRB only borrows it (purged with FALSE at stop) */
    if (size > (G_MAXSIZE - KC_TRB_HEADER) / KC_SB_SLOTS)
        goto err;
    size_t raw_size = KC_TRB_HEADER + KC_SB_SLOTS * (size_t) size;
    void *raw = NULL;
    server = kiro_server_new ();
    if (kc_server_start_alloc (server, addr, port ? port : "60010", raw_size, &raw) != 0)
        goto err;
    memset (raw, 0, raw_size);
    kc_store_u64 (raw, raw_size);
    kc_store_u64 ((guint8 *) raw + 8, size);
    trb = kiro_trb_new ();
    kiro_trb_adopt (trb, raw);
    st = kc_server_add_ring (server, KC_SB_RING, KC_SB_ELEM, KC_SB_RING_CAP, &ring);
    if (st != REMORA_OK) {
        g_warning ("kiro_sb_serve: cannot expose the notification ring: %s",
                   remora_status_string (st));
        goto err;
    }
    p->trb     = trb;
    p->server  = server;
    p->ring    = ring;
    p->size    = size;
    p->updates = 0;
    p->mode    = SB_SERVING;
    g_mutex_unlock (&p->lock);
    return TRUE;

err:
    g_mutex_unlock (&p->lock);
    if (trb != NULL) {
        kiro_trb_purge (trb, FALSE);
        g_object_unref (trb);
    }
    if (server != NULL)
        g_object_unref (server);
    return FALSE;
}

/* Lock held: tell clones about the push that made the TRB's offset what it is. */
static void publish (KiroSbPrivate *p)
{
    guint8 *raw = kiro_trb_get_raw_buffer (p->trb);
    guint8 le[8];

    memcpy (le, raw + 16, 8);
    remora_status_t st = remora_ring_push (p->ring, le, sizeof (le), NULL);
    if (st != REMORA_OK)
        g_warning ("KiroSb: cannot notify clones: %s", remora_status_string (st));
    p->updates++;
    g_cond_broadcast (&p->cond);
}

gboolean kiro_sb_push (KiroSb *sb, void *data)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), FALSE);
    g_return_val_if_fail (data != NULL, FALSE);
    KiroSbPrivate *p = PRIV (sb);
    gboolean ok = FALSE;

    g_mutex_lock (&p->lock);
    if (p->mode == SB_SERVING && kiro_trb_push (p->trb, data) == 0) {
        publish (p);
        ok = TRUE;
    }
    g_mutex_unlock (&p->lock);
    if (!ok)
        g_critical ("kiro_sb_push: this KiroSb is not serving");
    return ok;
}

void *kiro_sb_push_dma (KiroSb *sb)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), NULL);
    KiroSbPrivate *p = PRIV (sb);
    void *slot = NULL;

    g_mutex_lock (&p->lock);
    if (p->mode == SB_SERVING && (slot = kiro_trb_dma_push (p->trb)) != NULL)
        publish (p);
    g_mutex_unlock (&p->lock);
    if (slot == NULL)
        g_critical ("kiro_sb_push_dma: this KiroSb is not serving");
    return slot;
}

void *kiro_sb_get_dma_pointer (KiroSb *sb)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), NULL);
    KiroSbPrivate *p = PRIV (sb);
    void *slot = NULL;

    g_mutex_lock (&p->lock);
    if (p->mode == SB_SERVING)
        slot = kiro_trb_get_element (p->trb, 0); /* the slot the next push writes */
    g_mutex_unlock (&p->lock);
    if (slot == NULL)
        g_critical ("kiro_sb_get_dma_pointer: this KiroSb is not serving");
    return slot;
}

/* ------------------------------------------------------------ cloning */

/* Library thread: take in the element that made the remote offset `offset`.
 * FALSE when the connection failed. */
static gboolean take_in (KiroSb *sb, uint64_t offset)
{
    KiroSbPrivate *p = PRIV (sb);
    remora_client_h cli;
    guint8 *raw;
    uint64_t es, max;

    if (g_atomic_int_get (&p->frozen) || offset == 0 || offset == p->last)
        return TRUE;
    g_mutex_lock (&p->lock);
    if (p->mode != SB_CLONING) {
        g_mutex_unlock (&p->lock);
        return TRUE;
    }
    cli = kc_client_remora (p->client);
    raw = kiro_trb_get_raw_buffer (p->trb);
    es  = kiro_trb_get_element_size (p->trb);
    max = kiro_trb_get_max_elements (p->trb);
    g_mutex_unlock (&p->lock);

    /* the newest slot straight into our TRB; the slot get_data shows now is
     * another one unless the producer lapped the ring meanwhile */
    uint64_t at = KC_TRB_HEADER + ((offset - 1) % max) * es;
    remora_status_t st = remora_client_read (cli, KC_REGION, at, raw + at, es);
    if (st != REMORA_OK) {
        g_warning ("KiroSb: reading the newest element failed: %s", remora_status_string (st));
        return FALSE;
    }
    g_mutex_lock (&p->lock);
    if (p->mode != SB_CLONING) { /* stopped meanwhile (not by stop(): it joins us first) */
        g_mutex_unlock (&p->lock);
        return TRUE;
    }
    kc_store_u64 (raw + 16, offset);
    kiro_trb_refresh (p->trb);
    p->last = offset;
    p->updates++;
    g_cond_broadcast (&p->cond);
    g_mutex_unlock (&p->lock);
    run_callbacks (sb);
    return TRUE;
}

static void mark_broken (KiroSbPrivate *p)
{
    g_mutex_lock (&p->lock);
    p->broken = TRUE;
    g_cond_broadcast (&p->cond);
    g_mutex_unlock (&p->lock);
}

/* Subscription thread (ring of a serving KiroSb). */
static void on_ring (const void *elem, const remora_elem_info_t *info, remora_status_t status,
                     void *arg)
{
    KiroSb *sb = arg;

    if (elem == NULL) {
        if (status != REMORA_ERR_CANCELED)
            g_warning ("KiroSb: the served KiroSb went away: %s", remora_status_string (status));
        mark_broken (PRIV (sb));
        return;
    }
    if (info->size != KC_SB_ELEM)
        return; /* not a KiroSb's ring: kiro_sb_clone refuses it (this call may come first) */
    if (!take_in (sb, kc_load_u64 (elem)))
        mark_broken (PRIV (sb));
}

/* Poll thread (a plain served KiroTrb): read the header every KC_POLL_US. */
static gpointer poll_thread (gpointer arg)
{
    KiroSb *sb = arg;
    KiroSbPrivate *p = PRIV (sb);
    remora_client_h cli = kc_client_remora (p->client);
    guint8 hdr[KC_TRB_HEADER];

    for (;;) {
        g_mutex_lock (&p->lock);
        gint64 until = g_get_monotonic_time () + KC_POLL_US;
        while (!p->stop_poll && g_cond_wait_until (&p->cond, &p->lock, until))
            ;
        gboolean stop = p->stop_poll;
        g_mutex_unlock (&p->lock);
        if (stop)
            break;
        if (g_atomic_int_get (&p->frozen))
            continue;
        remora_status_t st = remora_client_read (cli, KC_REGION, 0, hdr, sizeof (hdr));
        if (st != REMORA_OK || !take_in (sb, kc_load_u64 (hdr + 16))) {
            if (st != REMORA_OK)
                g_warning ("KiroSb: the served TRB went away: %s", remora_status_string (st));
            mark_broken (p);
            break;
        }
    }
    return NULL;
}

gboolean kiro_sb_clone (KiroSb *sb, const gchar *address, const gchar *port)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), FALSE);
    KiroSbPrivate *p = PRIV (sb);
    KiroClient *client = NULL;
    KiroTrb *trb = NULL;
    remora_sub_h bad_sub = NULL;
    remora_region_info_t info = {.field_mask = REMORA_REGION_INFO_FIELD_KIND};

    g_mutex_lock (&p->lock);
    if (p->mode != SB_IDLE) {
        g_mutex_unlock (&p->lock);
        g_critical ("kiro_sb_clone: this KiroSb is already serving or cloning");
        return FALSE;
    }
    client = kiro_client_new ();
    if (kiro_client_connect (client, address, port) != 0 || kiro_client_sync (client) != 0)
        goto err;
    trb = kiro_trb_new ();
    /* kiro_trb_clone copies as many bytes as the header says (KIRO's
     * contract): a header claiming more than the block holds is refused
     * before it reads past the copy. */
    if (kiro_client_get_memory_size (client) < KC_TRB_HEADER ||
        kc_load_u64 (kiro_client_get_memory (client)) > kiro_client_get_memory_size (client) ||
        kiro_trb_clone (trb, kiro_client_get_memory (client)) != 0 ||
        kiro_trb_get_raw_size (trb) > kiro_client_get_memory_size (client)) {
        g_warning ("kiro_sb_clone: %s:%s does not serve a KiroTrb", address, port);
        goto err;
    }
    p->client  = client;
    p->trb     = trb;
    p->size    = kiro_trb_get_element_size (trb);
    p->last    = kc_load_u64 ((guint8 *) kiro_trb_get_raw_buffer (trb) + 16);
    p->updates = 0;
    p->broken  = FALSE;
    p->mode    = SB_CLONING;
    remora_client_h cli = kc_client_remora (client);
    if (remora_client_lookup (cli, KC_SB_RING, &info) == REMORA_OK &&
        info.kind == REMORA_REGION_RING) {
        remora_sub_params_t sp = {.field_mask = REMORA_SUB_FIELD_MODE | REMORA_SUB_FIELD_CB,
                                  .mode = REMORA_SUB_EVERY, .cb = on_ring, .cb_arg = sb};
        remora_status_t st = remora_client_subscribe (cli, KC_SB_RING, &sp, &p->sub);
        if (st == REMORA_OK && remora_sub_elem_size (p->sub) != KC_SB_ELEM) {
            /* each element is read as a TRB offset: a smaller one was read past */
            g_warning ("kiro_sb_clone: %s:%s serves '%s' with %zu-byte elements, not %u: "
                       "not a KiroSb", address, port, KC_SB_RING, remora_sub_elem_size (p->sub),
                       KC_SB_ELEM);
            bad_sub = p->sub;
            p->sub  = NULL;
            st      = REMORA_ERR_PROTOCOL;
        } else if (st != REMORA_OK) {
            g_warning ("kiro_sb_clone: cannot subscribe: %s", remora_status_string (st));
        }
        if (st != REMORA_OK) {
            p->mode   = SB_IDLE;
            p->client = NULL;
            p->trb    = NULL;
            goto err;
        }
    } else {
        p->stop_poll = FALSE;
        p->poller    = g_thread_new ("kiro-sb-poll", poll_thread, sb);
    }
    g_mutex_unlock (&p->lock);
    return TRUE;

err:
    g_mutex_unlock (&p->lock);
    remora_sub_destroy (bad_sub); /* unlocked: its callback may be waiting for the lock */
    if (trb != NULL)
        g_object_unref (trb);
    g_object_unref (client);
    return FALSE;
}

/* ------------------------------------------------------------ both */

void kiro_sb_stop (KiroSb *sb)
{
    g_return_if_fail (KIRO_IS_SB (sb));
    KiroSbPrivate *p = PRIV (sb);

    /* first end the library thread (callbacks included) with the state
     * still intact: a callback running now may still call get_data */
    g_mutex_lock (&p->lock);
    remora_sub_h sub = p->sub;
    GThread *poller  = p->poller;
    p->sub       = NULL;
    p->poller    = NULL;
    p->stop_poll = TRUE;
    g_cond_broadcast (&p->cond);
    g_mutex_unlock (&p->lock);
    if (sub != NULL)
        remora_sub_destroy (sub);
    if (poller != NULL)
        g_thread_join (poller);

    g_mutex_lock (&p->lock);
    KiroServer *server = p->server;
    KiroClient *client = p->client;
    KiroTrb *trb       = p->trb;
    p->mode      = SB_IDLE;
    p->server    = NULL;
    p->ring      = NULL; /* destroyed with the server */
    p->client    = NULL;
    p->trb       = NULL;
    p->size      = 0;
    p->last      = 0;
    p->broken    = FALSE;
    g_cond_broadcast (&p->cond);
    g_mutex_unlock (&p->lock);

    if (trb != NULL && server != NULL)
        kiro_trb_purge (trb, FALSE); /* the server's memory, not the TRB's */
    if (trb != NULL)
        g_object_unref (trb);
    if (server != NULL)
        g_object_unref (server);
    if (client != NULL)
        g_object_unref (client);
    kiro_sb_clear_sync_callbacks (sb);
}

gulong kiro_sb_get_size (KiroSb *sb)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), 0);
    g_mutex_lock (&PRIV (sb)->lock);
    gulong s = PRIV (sb)->size;
    g_mutex_unlock (&PRIV (sb)->lock);
    return s;
}

void kiro_sb_freeze (KiroSb *sb)
{
    g_return_if_fail (KIRO_IS_SB (sb));
    g_atomic_int_set (&PRIV (sb)->frozen, 1);
}

void kiro_sb_thaw (KiroSb *sb)
{
    g_return_if_fail (KIRO_IS_SB (sb));
    g_atomic_int_set (&PRIV (sb)->frozen, 0);
}

/* Lock held. */
static void *newest (KiroSbPrivate *p)
{
    if (p->mode == SB_IDLE)
        return NULL;
    guint8 *raw = kiro_trb_get_raw_buffer (p->trb);
    return kiro_trb_get_element (p->trb, kc_load_u64 (raw + 16) > 0 ? 1 : 0);
}

void *kiro_sb_get_data (KiroSb *sb)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), NULL);
    g_mutex_lock (&PRIV (sb)->lock);
    void *d = newest (PRIV (sb));
    g_mutex_unlock (&PRIV (sb)->lock);
    if (d == NULL)
        g_warning ("kiro_sb_get_data: this KiroSb neither serves nor clones");
    return d;
}

void *kiro_sb_get_data_blocking (KiroSb *sb)
{
    g_return_val_if_fail (KIRO_IS_SB (sb), NULL);
    KiroSbPrivate *p = PRIV (sb);
    void *d = NULL;

    g_mutex_lock (&p->lock);
    gint64 until = g_get_monotonic_time () + (gint64) kc_timeout_ms () * 1000;
    guint64 start = p->updates;
    sb_mode_t mode = p->mode;
    while (p->mode == mode && mode != SB_IDLE && p->updates == start && !p->broken)
        if (!g_cond_wait_until (&p->cond, &p->lock, until))
            break;
    if (p->mode == mode && p->updates != start)
        d = newest (p);
    g_mutex_unlock (&p->lock);
    return d;
}
