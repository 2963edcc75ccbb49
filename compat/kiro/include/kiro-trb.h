/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * kiro-trb.h — KiroTrb: KIRO's 'transmittable ring buffer'.
 *
 * A self-describing block: a 24-byte header (three little-endian u64:
 * buffer_size_bytes including the header, element_size, offset = elements
 * pushed so far), then max_elements slots of element_size bytes. The same
 * bytes are the in-memory and the remote format (a served TRB is read
 * byte-wise by clients). Not thread-safe. KIRO 1.3 API (docs/kiro.md).
 *
 * Index rule of kiro_trb_get_element: slot (cursor - index) mod max_elements,
 * where cursor = offset mod max_elements is the slot the next push writes:
 * 1 is the newest element, 2 the one before, 0 the cursor slot (the oldest
 * once the buffer wrapped), -1 the one after the cursor, and so on.
 */
#ifndef __KIRO_TRB_H
#define __KIRO_TRB_H

#include <stdint.h>
#include <glib-object.h>

G_BEGIN_DECLS

#define KIRO_TYPE_TRB             (kiro_trb_get_type())
#define KIRO_TRB(obj)             (G_TYPE_CHECK_INSTANCE_CAST((obj), KIRO_TYPE_TRB, KiroTrb))
#define KIRO_IS_TRB(obj)          (G_TYPE_CHECK_INSTANCE_TYPE((obj), KIRO_TYPE_TRB))
#define KIRO_TRB_CLASS(klass)     (G_TYPE_CHECK_CLASS_CAST((klass), KIRO_TYPE_TRB, KiroTrbClass))
#define KIRO_IS_TRB_CLASS(klass)  (G_TYPE_CHECK_CLASS_TYPE((klass), KIRO_TYPE_TRB))
#define KIRO_TRB_GET_CLASS(obj)   (G_TYPE_INSTANCE_GET_CLASS((obj), KIRO_TYPE_TRB, KiroTrbClass))

typedef struct _KiroTrb        KiroTrb;
typedef struct _KiroTrbClass   KiroTrbClass;
typedef struct _KiroTrbPrivate KiroTrbPrivate;

struct _KiroTrb {
    GObject parent;
};

struct _KiroTrbClass {
    GObjectClass parent_class;
};

/* The header as KIRO declares it (packed, 24 bytes). The library itself
 * reads and writes the header field by field, little-endian. */
struct KiroTrbInfo {
    uint64_t buffer_size_bytes; /* size in bytes including this header */
    uint64_t element_size;      /* bytes per element */
    uint64_t offset;            /* elements pushed so far */
} __attribute__ ((packed));

GType    kiro_trb_get_type (void);
KiroTrb *kiro_trb_new (void);
/* Drops the caller's reference; finalize g_free's the memory the TRB holds,
 * adopted memory included (purge (trb, FALSE) first to keep it). */
void     kiro_trb_free (KiroTrb *trb);

/* 0 for an unshaped TRB. */
uint64_t kiro_trb_get_element_size (KiroTrb *trb);
uint64_t kiro_trb_get_max_elements (KiroTrb *trb);
uint64_t kiro_trb_get_raw_size (KiroTrb *trb);
/* The block (header first), header rewritten from the TRB's state; NULL if unshaped. */
void    *kiro_trb_get_raw_buffer (KiroTrb *trb);
/* See the index rule above; NULL if unshaped. */
void    *kiro_trb_get_element (KiroTrb *trb, glong index);
/* The cursor slot, counted as pushed at once; NULL if unshaped. */
void    *kiro_trb_dma_push (KiroTrb *trb);
/* Cursor and offset back to 0; data untouched. */
void     kiro_trb_flush (KiroTrb *trb);
/* Back to unshaped; the memory is g_free'd only if free_memory. */
void     kiro_trb_purge (KiroTrb *trb, gboolean free_memory);
/* 1 if shaped, else 0. */
int      kiro_trb_is_setup (KiroTrb *trb);
/* New zeroed block for element_count elements of element_size bytes; 0, or
 * -1 (either is 0, too large, no memory) with the old state kept. */
int      kiro_trb_reshape (KiroTrb *trb, uint64_t element_size, uint64_t element_count);
/* Copy the TRB block at source (its header gives the size) into a new block
 * owned by trb; 0, or -1 (malformed header, no memory) with the old state kept. */
int      kiro_trb_clone (KiroTrb *trb, void *source);
/* Copy element_size bytes from source into the cursor slot and advance; 0, or -1 if unshaped. */
int      kiro_trb_push (KiroTrb *trb, void *source);
/* Re-read sizes and offset from the header in memory. */
void     kiro_trb_refresh (KiroTrb *trb);
/* Take ownership of the TRB block at source in place (it will be g_free'd). */
void     kiro_trb_adopt (KiroTrb *trb, void *source);

G_END_DECLS

#endif /* __KIRO_TRB_H */
