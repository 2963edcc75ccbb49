/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KiroServer over remora: the caller's block, registered in place, exposed
 * read-only as region "kiro" on a remora server of the object's own context.
 *
 * Design notes
 * - start: context, registration of the caller's block, server, expose. Any
 *   failure unwinds what was made and returns -1.
 * - realloc: remora_server_replace, then remora_server_sync_clients: every
 *   client follows within 2 s or is dropped, as KIRO did; remora tells every client at once
 *   (REGION_CHANGED) and keeps the old registration until each client has
 *   acknowledged it (or its grace ran out).
 * - stop/finalize: destroy in reverse order; after stop the block is the
 *   caller's again.
 * - priv->lock serialises the public calls of this one object.
 */
#include <string.h>

#include "kiro-private.h"
#include "kiro-server.h"

struct _KiroServerPrivate {
    GMutex           lock;
    remora_context_h ctx;
    remora_server_h  srv;
    remora_mem_h     mem;
    GPtrArray       *rings; /* remora_ring_h exposed beside the block (KiroSb) */
};

G_DEFINE_TYPE_WITH_PRIVATE (KiroServer, kiro_server, G_TYPE_OBJECT)

static void kiro_server_init (KiroServer *self)
{
    self->priv = kiro_server_get_instance_private (self);
    memset (self->priv, 0, sizeof (*self->priv));
    g_mutex_init (&self->priv->lock);
}

/* Lock held. */
static void server_teardown (KiroServerPrivate *p)
{
    if (p->rings != NULL) {
        for (guint i = 0; i < p->rings->len; i++)
            remora_ring_destroy (g_ptr_array_index (p->rings, i));
        g_ptr_array_free (p->rings, TRUE);
        p->rings = NULL;
    }
    if (p->srv != NULL)
        remora_server_destroy (p->srv);
    if (p->mem != NULL)
        remora_mem_destroy (p->mem);
    if (p->ctx != NULL)
        remora_context_destroy (p->ctx);
    p->srv = NULL;
    p->mem = NULL;
    p->ctx = NULL;
}

static void kiro_server_finalize (GObject *object)
{
    KiroServerPrivate *p = KIRO_SERVER (object)->priv;

    g_mutex_lock (&p->lock);
    server_teardown (p);
    g_mutex_unlock (&p->lock);
    g_mutex_clear (&p->lock);
    G_OBJECT_CLASS (kiro_server_parent_class)->finalize (object);
}

static void kiro_server_class_init (KiroServerClass *klass)
{
    G_OBJECT_CLASS (klass)->finalize = kiro_server_finalize;
}

KiroServer *kiro_server_new (void)
{
    return g_object_new (KIRO_TYPE_SERVER, NULL);
}

void kiro_server_free (KiroServer *server)
{
    g_return_if_fail (server != NULL);
    if (!KIRO_IS_SERVER (server)) {
        g_warning ("kiro_server_free: not a KiroServer");
        return;
    }
    g_object_unref (server);
}

static remora_mem_h register_block (remora_context_h ctx, void *mem, size_t size)
{
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_ADDRESS | REMORA_MEM_FIELD_LENGTH,
                              .address = mem, .length = size};
    remora_mem_h h;
    remora_status_t st = remora_mem_create (ctx, &mp, &h);

    if (st != REMORA_OK) {
        g_warning ("KiroServer: cannot register the block (%zu bytes): %s", size,
                   remora_status_string (st));
        return NULL;
    }
    return h;
}

/* mem NULL with alloc_p: serve mem_size bytes of library-allocated
 * (shareable: same-host clients map it) memory, returned in *alloc_p. */
static int server_start (KiroServer *server, const char *bind_addr, const char *bind_port,
                         void *mem, size_t mem_size, void **alloc_p)
{
    KiroServerPrivate *p = server->priv;
    remora_status_t st;
    int ret = -1;

    if ((mem == NULL && alloc_p == NULL) || mem_size == 0) {
        g_warning ("KiroServer: no memory to serve");
        return -1;
    }
    char *addr = kc_address (bind_addr, bind_port, "0.0.0.0", "0");
    if (addr == NULL) {
        g_warning ("KiroServer: empty bind address or port");
        return -1;
    }
    g_mutex_lock (&p->lock);
    if (p->srv != NULL) {
        g_warning ("KiroServer: already started");
        goto out;
    }
    if ((p->ctx = kc_context_new ("kiro-server")) == NULL)
        goto out;
    if (mem == NULL) {
        remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = mem_size};
        if ((st = remora_mem_create (p->ctx, &mp, &p->mem)) != REMORA_OK) {
            g_warning ("KiroServer: cannot allocate %zu bytes: %s", mem_size, remora_status_string (st));
            p->mem = NULL;
            goto err_teardown;
        }
        *alloc_p = remora_mem_address (p->mem);
    } else if ((p->mem = register_block (p->ctx, mem, mem_size)) == NULL) {
        goto err_teardown;
    }
    remora_server_params_t sp = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR, .listen_addr = addr};
    if ((st = remora_server_create (p->ctx, &sp, &p->srv)) != REMORA_OK) {
        g_warning ("KiroServer: cannot listen on %s: %s", addr, remora_status_string (st));
        p->srv = NULL;
        goto err_teardown;
    }
    if ((st = remora_server_expose (p->srv, KC_REGION, p->mem, NULL)) != REMORA_OK) {
        g_warning ("KiroServer: cannot expose the block: %s", remora_status_string (st));
        goto err_teardown;
    }
    if (bind_port == NULL) {
        char bound[128];
        if (remora_server_address (p->srv, bound, sizeof (bound)) == REMORA_OK)
            g_message ("KiroServer: listening on %s", bound);
    }
    ret = 0;
    goto out;

err_teardown:
    server_teardown (p);
out:
    g_mutex_unlock (&p->lock);
    g_free (addr);
    return ret;
}

int kiro_server_start (KiroServer *server, const char *bind_addr, const char *bind_port,
                       void *mem, size_t mem_size)
{
    g_return_val_if_fail (KIRO_IS_SERVER (server), -1);
    return server_start (server, bind_addr, bind_port, mem, mem_size, NULL);
}

int kc_server_start_alloc (KiroServer *server, const char *bind_addr, const char *bind_port,
                           size_t size, void **mem_p)
{
    return server_start (server, bind_addr, bind_port, NULL, size, mem_p);
}

#define KC_REALLOC_WAIT_MS 2000

void kiro_server_realloc (KiroServer *server, void *mem, size_t mem_size)
{
    if (server == NULL)
        return;
    g_return_if_fail (KIRO_IS_SERVER (server));
    KiroServerPrivate *p = server->priv;

    if (mem == NULL || mem_size == 0) {
        g_warning ("kiro_server_realloc: no memory given; the old block stays served");
        return;
    }
    g_mutex_lock (&p->lock);
    if (p->srv == NULL) {
        g_warning ("kiro_server_realloc: the server is not started");
        goto out;
    }
    remora_mem_h h = register_block (p->ctx, mem, mem_size);
    if (h == NULL)
        goto out;
    remora_status_t st = remora_server_replace (p->srv, KC_REGION, h, NULL);
    if (st != REMORA_OK) {
        g_warning ("kiro_server_realloc: %s; the old block stays served", remora_status_string (st));
        remora_mem_destroy (h);
        goto out;
    }
    remora_mem_destroy (p->mem); /* the region's retired reference keeps it for the clients */
    p->mem = h;
    /* As KIRO: every client follows within 2 s or is dropped; then the old
     * block is the caller's again. */
    unsigned dropped = 0;
    if (remora_server_sync_clients (p->srv, KC_REALLOC_WAIT_MS, &dropped) != REMORA_OK)
        g_message ("kiro_server_realloc: %u client(s) did not follow within 2 s; dropped", dropped);
out:
    g_mutex_unlock (&p->lock);
}

void kiro_server_stop (KiroServer *server)
{
    g_return_if_fail (KIRO_IS_SERVER (server));
    g_mutex_lock (&server->priv->lock);
    server_teardown (server->priv);
    g_mutex_unlock (&server->priv->lock);
}

remora_status_t kc_server_add_ring (KiroServer *server, const char *name, size_t elem_size,
                                    size_t capacity, remora_ring_h *ring_p)
{
    KiroServerPrivate *p = server->priv;
    remora_ring_params_t rp = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY,
                               .elem_size = elem_size, .capacity = capacity};
    remora_ring_h ring;
    remora_status_t st;

    g_mutex_lock (&p->lock);
    if (p->srv == NULL) {
        st = REMORA_ERR_INVALID_PARAM;
        goto out;
    }
    if ((st = remora_ring_create (p->ctx, &rp, &ring)) != REMORA_OK)
        goto out;
    if ((st = remora_server_expose_ring (p->srv, name, ring)) != REMORA_OK) {
        remora_ring_destroy (ring);
        goto out;
    }
    if (p->rings == NULL)
        p->rings = g_ptr_array_new ();
    g_ptr_array_add (p->rings, ring);
    *ring_p = ring;
out:
    g_mutex_unlock (&p->lock);
    return st;
}
