/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * KiroTrb: KIRO's transmittable ring buffer, byte-compatible with KIRO 1.3.
 *
 * Design notes
 * - The block is the only format: 24-byte header (buffer_size_bytes,
 *   element_size, offset: little-endian u64 each, no struct overlay), then
 *   the slots. The object caches the shape and the offset; every change of
 *   the offset is written through to the header, so a remote reader sees it.
 * - cursor = offset mod max_elements is the slot the next push writes.
 * - Memory comes from GLib's allocator and is g_free'd (KIRO programs
 *   adopt client memory and rely on that).
 */
#include <string.h>

#include "kiro-private.h"
#include "kiro-trb.h"

struct _KiroTrbPrivate {
    guint8  *mem;          /* block held (owned unless purged with FALSE) */
    gboolean setup;        /* shaped: the fields below are valid */
    uint64_t element_size;
    uint64_t max_elements;
    uint64_t raw_size;     /* 24 + max_elements * element_size */
    uint64_t offset;       /* elements pushed */
};

G_DEFINE_TYPE_WITH_PRIVATE (KiroTrb, kiro_trb, G_TYPE_OBJECT)

#define PRIV(t) ((KiroTrbPrivate *) kiro_trb_get_instance_private (t))

static void kiro_trb_init (KiroTrb *self)
{
    memset (PRIV (self), 0, sizeof (KiroTrbPrivate));
}

static void kiro_trb_finalize (GObject *object)
{
    KiroTrbPrivate *p = PRIV (KIRO_TRB (object));

    g_free (p->mem);
    p->mem = NULL;
    G_OBJECT_CLASS (kiro_trb_parent_class)->finalize (object);
}

static void kiro_trb_class_init (KiroTrbClass *klass)
{
    G_OBJECT_CLASS (klass)->finalize = kiro_trb_finalize;
}

KiroTrb *kiro_trb_new (void)
{
    return g_object_new (KIRO_TYPE_TRB, NULL);
}

void kiro_trb_free (KiroTrb *trb)
{
    g_return_if_fail (trb != NULL);
    if (!KIRO_IS_TRB (trb)) {
        g_warning ("kiro_trb_free: not a KiroTrb");
        return;
    }
    g_object_unref (trb);
}

static void write_header (KiroTrbPrivate *p)
{
    kc_store_u64 (p->mem, p->raw_size);
    kc_store_u64 (p->mem + 8, p->element_size);
    kc_store_u64 (p->mem + 16, p->offset);
}

/* Shape described by a header; FALSE when it describes no usable ring. */
static gboolean parse_header (const void *src, uint64_t *elem, uint64_t *max, uint64_t *raw,
                              uint64_t *offset)
{
    const guint8 *b = src;
    uint64_t size = kc_load_u64 (b), es = kc_load_u64 (b + 8);

    if (size <= KC_TRB_HEADER || es == 0 || (size - KC_TRB_HEADER) / es == 0)
        return FALSE;
    *elem   = es;
    *max    = (size - KC_TRB_HEADER) / es;
    *raw    = KC_TRB_HEADER + *max * es;
    *offset = kc_load_u64 (b + 16);
    return TRUE;
}

uint64_t kiro_trb_get_element_size (KiroTrb *trb)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), 0);
    return PRIV (trb)->setup ? PRIV (trb)->element_size : 0;
}

uint64_t kiro_trb_get_max_elements (KiroTrb *trb)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), 0);
    return PRIV (trb)->setup ? PRIV (trb)->max_elements : 0;
}

uint64_t kiro_trb_get_raw_size (KiroTrb *trb)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), 0);
    return PRIV (trb)->setup ? PRIV (trb)->raw_size : 0;
}

void *kiro_trb_get_raw_buffer (KiroTrb *trb)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), NULL);
    KiroTrbPrivate *p = PRIV (trb);
    if (!p->setup)
        return NULL;
    write_header (p);
    return p->mem;
}

static void *slot (KiroTrbPrivate *p, uint64_t s)
{
    return p->mem + KC_TRB_HEADER + s * p->element_size;
}

void *kiro_trb_get_element (KiroTrb *trb, glong index)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), NULL);
    KiroTrbPrivate *p = PRIV (trb);
    if (!p->setup)
        return NULL;
    uint64_t max = p->max_elements, cursor = p->offset % max, back;
    if (index >= 0)
        back = (uint64_t) index % max;
    else /* -index without overflow at G_MINLONG */
        back = (max - ((uint64_t) (-(index + 1)) + 1) % max) % max;
    return slot (p, (cursor + max - back) % max);
}

void *kiro_trb_dma_push (KiroTrb *trb)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), NULL);
    KiroTrbPrivate *p = PRIV (trb);
    if (!p->setup)
        return NULL;
    void *s = slot (p, p->offset % p->max_elements);
    p->offset++;
    kc_store_u64 (p->mem + 16, p->offset);
    return s;
}

void kiro_trb_flush (KiroTrb *trb)
{
    g_return_if_fail (KIRO_IS_TRB (trb));
    KiroTrbPrivate *p = PRIV (trb);
    if (!p->setup)
        return;
    p->offset = 0;
    write_header (p);
}

void kiro_trb_purge (KiroTrb *trb, gboolean free_memory)
{
    g_return_if_fail (KIRO_IS_TRB (trb));
    KiroTrbPrivate *p = PRIV (trb);
    if (free_memory)
        g_free (p->mem);
    memset (p, 0, sizeof (*p));
}

int kiro_trb_is_setup (KiroTrb *trb)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), 0);
    return PRIV (trb)->setup ? 1 : 0;
}

int kiro_trb_reshape (KiroTrb *trb, uint64_t element_size, uint64_t element_count)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), -1);
    KiroTrbPrivate *p = PRIV (trb);
    if (element_size < 1 || element_count < 1 ||
        element_count > (G_MAXSIZE - KC_TRB_HEADER) / element_size)
        return -1;
    uint64_t raw = KC_TRB_HEADER + element_size * element_count;
    guint8 *mem = g_try_malloc0 (raw);
    if (mem == NULL)
        return -1;
    g_free (p->mem);
    p->mem          = mem;
    p->setup        = TRUE;
    p->element_size = element_size;
    p->max_elements = element_count;
    p->raw_size     = raw;
    p->offset       = 0;
    write_header (p);
    return 0;
}

int kiro_trb_clone (KiroTrb *trb, void *source)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), -1);
    g_return_val_if_fail (source != NULL, -1);
    KiroTrbPrivate *p = PRIV (trb);
    uint64_t es, max, raw, off;
    if (!parse_header (source, &es, &max, &raw, &off))
        return -1;
    guint8 *mem = g_try_malloc (raw);
    if (mem == NULL)
        return -1;
    memcpy (mem, source, raw);
    g_free (p->mem);
    p->mem          = mem;
    p->setup        = TRUE;
    p->element_size = es;
    p->max_elements = max;
    p->raw_size     = raw;
    p->offset       = off;
    write_header (p);
    return 0;
}

int kiro_trb_push (KiroTrb *trb, void *source)
{
    g_return_val_if_fail (KIRO_IS_TRB (trb), -1);
    KiroTrbPrivate *p = PRIV (trb);
    if (!p->setup || source == NULL)
        return -1;
    memcpy (slot (p, p->offset % p->max_elements), source, p->element_size);
    p->offset++;
    kc_store_u64 (p->mem + 16, p->offset);
    return 0;
}

void kiro_trb_refresh (KiroTrb *trb)
{
    g_return_if_fail (KIRO_IS_TRB (trb));
    KiroTrbPrivate *p = PRIV (trb);
    uint64_t es, max, raw, off;
    if (!p->setup)
        return;
    if (!parse_header (p->mem, &es, &max, &raw, &off)) {
        g_warning ("kiro_trb_refresh: the header in memory is malformed; shape kept");
        return;
    }
    p->element_size = es;
    p->max_elements = max;
    p->raw_size     = raw;
    p->offset       = off;
}

void kiro_trb_adopt (KiroTrb *trb, void *source)
{
    g_return_if_fail (KIRO_IS_TRB (trb));
    KiroTrbPrivate *p = PRIV (trb);
    uint64_t es = 0, max = 0, raw = 0, off = 0;
    if (source == NULL)
        return;
    gboolean ok = parse_header (source, &es, &max, &raw, &off);
    if (p->mem != source)
        g_free (p->mem);
    p->mem          = source; /* ours now, even if its header is unusable */
    p->setup        = ok;
    p->element_size = es;
    p->max_elements = max;
    p->raw_size     = raw;
    p->offset       = off;
    if (!ok)
        g_warning ("kiro_trb_adopt: the block's header is malformed; the TRB stays unshaped");
}
