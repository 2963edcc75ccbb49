/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ring's memory format (docs/ring.md), shared by the producer, local
 * readers, the server and remote subscribers.
 *
 *   header (RM_RING_HDR_LEN bytes, little-endian):
 *     0  u32 magic "RRNG"     4  u16 version     6  u16 header length
 *     8  u64 elem_size       16  u64 capacity   24  u64 stride
 *    32  u64 head            40  u64 claimed    48  u64 first   56  u64 data_stride
 *   slot i at RM_RING_HDR_LEN + i * stride: u64 stamp, elem_size bytes, padding
 *   With data_stride != 0 (a GPU ring) the slots hold only their stamps
 *   (stride 8) and element i lives at i * data_stride in a separate data
 *   block (GPU memory; exposed as region "NAME#data").
 *
 * head: elements [0, head) are committed. claimed: the producer started
 * writing element claimed-1 (claimed == head or head + 1). first: the oldest
 * sequence the ring ever held (0, or where a clone started).
 * A slot's stamp is 0 (never written), 2s+1 (element s being written) or
 * 2s+2 (element s complete).
 *
 * Why both stamps and `claimed`: a local reader is a classic seqlock (stamp,
 * copy, stamp again). A remote reader's one-sided copy reads bytes in no
 * defined order, so re-reading a stamp after the copy proves nothing about
 * bytes read before it; instead it reads `claimed` after the copy completed:
 * the producer bumps `claimed` before it touches a slot, so element s was
 * intact throughout the copy iff claimed <= s + capacity.
 */
#ifndef RM_RING_RING_FORMAT_H
#define RM_RING_RING_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define RM_RING_MAGIC      0x474e5252u /* "RRNG" */
#define RM_RING_VERSION    1u
#define RM_RING_HDR_LEN    64u
#define RM_RING_STAMP_LEN  8u
#define RM_RING_ELEM_MAX   (1ull << 40)
#define RM_RING_CAP_MAX    (1ull << 32)

enum {
    RM_RING_OFF_MAGIC   = 0,
    RM_RING_OFF_VERSION = 4,
    RM_RING_OFF_HDRLEN  = 6,
    RM_RING_OFF_ELEM    = 8,
    RM_RING_OFF_CAP     = 16,
    RM_RING_OFF_STRIDE  = 24,
    RM_RING_OFF_HEAD    = 32,
    RM_RING_OFF_CLAIMED = 40,
    RM_RING_OFF_FIRST   = 48,
    RM_RING_OFF_DATA    = 56
};

/* A GPU ring's data block is exposed beside its control block under NAME + this. */
#define RM_RING_DATA_SUFFIX "#data"

/* What a header says, once checked. */
typedef struct rm_ring_shape {
    uint64_t elem_size, capacity, stride;
    uint64_t head, claimed, first;
    uint64_t data_stride; /* 0: elements in the slots; else in a separate data block */
} rm_ring_shape_t;

static inline uint64_t rm_ring_stride(uint64_t elem_size)
{
    return RM_RING_STAMP_LEN + ((elem_size + 7) & ~7ull);
}

static inline uint64_t rm_ring_slot_offset(const rm_ring_shape_t *s, uint64_t seq)
{
    return RM_RING_HDR_LEN + (seq % s->capacity) * s->stride;
}

static inline uint64_t rm_ring_stamp_done(uint64_t seq) { return 2 * seq + 2; }

/* Oldest sequence the ring holds (== head when empty). */
static inline uint64_t rm_ring_oldest_seq(const rm_ring_shape_t *s)
{
    uint64_t lo = s->head > s->capacity ? s->head - s->capacity : 0;
    return lo > s->first ? lo : s->first;
}

/* Where element seq's bytes are: in its slot, or in the separate data block. */
static inline uint64_t rm_ring_data_offset(const rm_ring_shape_t *s, uint64_t seq)
{
    return s->data_stride ? (seq % s->capacity) * s->data_stride
                          : rm_ring_slot_offset(s, seq) + RM_RING_STAMP_LEN;
}

/* Bytes a ring of this shape occupies; 0 when the shape is out of bounds. */
uint64_t rm_ring_bytes(uint64_t elem_size, uint64_t capacity);
/* The control block (header and stamps) of a ring with a separate data block. */
static inline uint64_t rm_ring_ctrl_bytes(uint64_t capacity)
{
    return RM_RING_HDR_LEN + capacity * RM_RING_STAMP_LEN;
}
/* Write a fresh header (head = claimed = first); separate: a GPU ring's. */
void rm_ring_hdr_init(void *hdr, uint64_t elem_size, uint64_t capacity, uint64_t first,
                      int separate);
/*
 * Check a header copied from somewhere untrusted (a peer, a file): magic,
 * version, bounds, stride, counters in order, and that the ring fits in
 * `avail` bytes. 0 and *shape filled, or -1.
 */
int rm_ring_hdr_parse(const void *hdr, size_t len, uint64_t avail, rm_ring_shape_t *shape);
/*
 * The same for a header copied while the producer runs (a remote read): its
 * counters may come from different moments, so only their ranges are
 * checked, and claimed is raised to at least head (erring towards "maybe
 * overwritten", never the other way).
 */
int rm_ring_hdr_parse_live(const void *hdr, size_t len, uint64_t avail, rm_ring_shape_t *shape);

/* Little-endian u64 at p (any alignment). */
uint64_t rm_ring_get64(const void *p);

#endif
