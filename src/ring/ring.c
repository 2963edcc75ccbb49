/* SPDX-License-Identifier: BSD-3-Clause */
/* Local rings: format helpers, the producer, and local readers. */
#include "ring/ring.h"

#include <stdlib.h>
#include <string.h>

#include "mem/cuda.h"
#include "mem/mem.h"
#include "util/log.h"

/* ------------------------------------------------------------ format */

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t rm_ring_get64(const void *p)
{
    const uint8_t *b = p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

uint64_t rm_ring_bytes(uint64_t elem_size, uint64_t capacity)
{
    if (elem_size == 0 || elem_size > RM_RING_ELEM_MAX || capacity == 0 ||
        capacity > RM_RING_CAP_MAX)
        return 0;
    uint64_t stride = rm_ring_stride(elem_size);
    if (capacity > (UINT64_MAX - RM_RING_HDR_LEN) / stride)
        return 0;
    return RM_RING_HDR_LEN + capacity * stride;
}

void rm_ring_hdr_init(void *hdr, uint64_t elem_size, uint64_t capacity, uint64_t first,
                      int separate)
{
    uint8_t *h = hdr;

    memset(h, 0, RM_RING_HDR_LEN);
    h[0] = 'R'; h[1] = 'R'; h[2] = 'N'; h[3] = 'G';
    h[RM_RING_OFF_VERSION]     = RM_RING_VERSION;
    h[RM_RING_OFF_HDRLEN]      = RM_RING_HDR_LEN;
    put64(h + RM_RING_OFF_ELEM, elem_size);
    put64(h + RM_RING_OFF_CAP, capacity);
    put64(h + RM_RING_OFF_STRIDE, separate ? RM_RING_STAMP_LEN : rm_ring_stride(elem_size));
    put64(h + RM_RING_OFF_HEAD, first);
    put64(h + RM_RING_OFF_CLAIMED, first);
    put64(h + RM_RING_OFF_FIRST, first);
    put64(h + RM_RING_OFF_DATA, separate ? rm_ring_stride(elem_size) - RM_RING_STAMP_LEN : 0);
}

static int hdr_parse(const void *hdr, size_t len, uint64_t avail, int live, rm_ring_shape_t *s)
{
    const uint8_t *h = hdr;

    if (len < RM_RING_HDR_LEN || (uint32_t)rm_ring_get64(h) != RM_RING_MAGIC ||
        h[RM_RING_OFF_VERSION] != RM_RING_VERSION || h[RM_RING_OFF_VERSION + 1] != 0 ||
        h[RM_RING_OFF_HDRLEN] != RM_RING_HDR_LEN || h[RM_RING_OFF_HDRLEN + 1] != 0)
        return -1;
    s->elem_size = rm_ring_get64(h + RM_RING_OFF_ELEM);
    s->capacity  = rm_ring_get64(h + RM_RING_OFF_CAP);
    s->stride    = rm_ring_get64(h + RM_RING_OFF_STRIDE);
    s->head      = rm_ring_get64(h + RM_RING_OFF_HEAD);
    s->claimed   = rm_ring_get64(h + RM_RING_OFF_CLAIMED);
    s->first     = rm_ring_get64(h + RM_RING_OFF_FIRST);
    s->data_stride = rm_ring_get64(h + RM_RING_OFF_DATA);
    uint64_t bytes = rm_ring_bytes(s->elem_size, s->capacity);
    if (bytes == 0)
        return -1;
    if (s->data_stride == 0 && (bytes > avail || s->stride != rm_ring_stride(s->elem_size)))
        return -1;
    /* A separate data block: slots are bare stamps, elements 8-aligned apart. */
    if (s->data_stride != 0 &&
        (s->data_stride != rm_ring_stride(s->elem_size) - RM_RING_STAMP_LEN ||
         s->stride != RM_RING_STAMP_LEN || rm_ring_ctrl_bytes(s->capacity) > avail))
        return -1;
    /* Sequences stay far from wrapping (2^62 elements), so 2s+2 stamps never
     * overflow. */
    if (s->first > s->head || s->head >= (1ull << 62) || s->claimed >= (1ull << 62))
        return -1;
    if (live) {
        if (s->claimed < s->head)
            s->claimed = s->head;
        return 0;
    }
    /* One producer: at most one element in the works. */
    return s->claimed < s->head || s->claimed - s->head > 1 ? -1 : 0;
}

int rm_ring_hdr_parse(const void *hdr, size_t len, uint64_t avail, rm_ring_shape_t *s)
{
    return hdr_parse(hdr, len, avail, 0, s);
}

int rm_ring_hdr_parse_live(const void *hdr, size_t len, uint64_t avail, rm_ring_shape_t *s)
{
    return hdr_parse(hdr, len, avail, 1, s);
}

/* ------------------------------------------------------------ lifetime */

/* gpu >= 0: the elements live in memory of that GPU, the control block stays
 * in host memory (the seqlock needs CPU atomics on the stamps). */
static remora_status_t ring_alloc(remora_context_h ctx, uint64_t elem_size, uint64_t capacity,
                                  uint64_t first, int gpu, remora_ring_h *ring_p)
{
    uint64_t bytes = rm_ring_bytes(elem_size, capacity);
    uint64_t ctrl  = gpu >= 0 ? rm_ring_ctrl_bytes(capacity) : bytes;
    remora_mem_params_t mp = {.field_mask = REMORA_MEM_FIELD_LENGTH, .length = ctrl};
    remora_mem_params_t dp = {.field_mask = REMORA_MEM_FIELD_LENGTH | REMORA_MEM_FIELD_TYPE |
                                            REMORA_MEM_FIELD_DEVICE,
                              .length = bytes - ctrl, .type = REMORA_MEM_CUDA, .device = gpu};
    remora_ring_h r;
    remora_status_t st;

    if (ctx == NULL || ring_p == NULL || bytes == 0 || bytes > SIZE_MAX)
        return REMORA_ERR_INVALID_PARAM;
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return REMORA_ERR_NO_MEMORY;
    if ((st = remora_mem_create(ctx, &mp, &r->mem)) != REMORA_OK ||
        (gpu >= 0 && (st = remora_mem_create(ctx, &dp, &r->data_mem)) != REMORA_OK)) {
        remora_mem_destroy(r->mem);
        free(r);
        return st;
    }
    r->ctx         = ctx;
    r->base        = remora_mem_address(r->mem);
    r->data        = r->data_mem ? remora_mem_address(r->data_mem) : NULL;
    r->hdr_head    = (_Atomic uint64_t *)(void *)(r->base + RM_RING_OFF_HEAD);
    r->hdr_claimed = (_Atomic uint64_t *)(void *)(r->base + RM_RING_OFF_CLAIMED);
    rm_ring_hdr_init(r->base, elem_size, capacity, first, gpu >= 0);
    rm_ring_hdr_parse(r->base, RM_RING_HDR_LEN, ctrl, &r->shape);
    r->head = first;
    for (uint64_t i = 0; i < capacity; i++) /* the memory's content is undefined */
        atomic_init(rm_ring_stamp(r, i), 0);
    atomic_init(&r->armed, 0);
    pthread_mutex_init(&r->rate_lock, NULL);
    *ring_p = r;
    return REMORA_OK;
}

remora_status_t remora_ring_create(remora_context_h ctx, const remora_ring_params_t *p,
                                   remora_ring_h *ring_p)
{
    uint64_t need = REMORA_RING_FIELD_ELEM_SIZE | REMORA_RING_FIELD_CAPACITY;
    int gpu = -1;

    if (p == NULL || (p->field_mask & need) != need)
        return REMORA_ERR_INVALID_PARAM;
    if ((p->field_mask & REMORA_RING_FIELD_MEM_TYPE) && p->mem_type == REMORA_MEM_CUDA)
        gpu = (p->field_mask & REMORA_RING_FIELD_DEVICE) ? p->device : 0;
    else if ((p->field_mask & REMORA_RING_FIELD_MEM_TYPE) && p->mem_type != REMORA_MEM_HOST)
        return REMORA_ERR_INVALID_PARAM;
    if (gpu < -1)
        return REMORA_ERR_INVALID_PARAM;
    return ring_alloc(ctx, p->elem_size, p->capacity, 0, gpu, ring_p);
}

void remora_ring_destroy(remora_ring_h r)
{
    if (r == NULL)
        return;
    if (r->on_destroy) /* the observer: a server unexposes it, if it exposes it */
        r->on_destroy(r);
    remora_mem_destroy(r->data_mem);
    remora_mem_destroy(r->mem);
    pthread_mutex_destroy(&r->rate_lock);
    free(r);
}

double rm_ring_rate(remora_ring_h r, uint64_t head, uint64_t now_ns)
{
    pthread_mutex_lock(&r->rate_lock);
    /* Callers sample head and clock before the lock: a sample older than
     * the last taken (another worker got here first) says nothing new. */
    if (r->rate_ns == 0) {
        r->rate_ns   = now_ns;
        r->rate_head = head;
    } else if (now_ns > r->rate_ns && head >= r->rate_head &&
               now_ns - r->rate_ns >= 2000000u) {
        double inst = (double)(head - r->rate_head) * 1e9 / (double)(now_ns - r->rate_ns);
        r->rate_eps  = r->rate_eps > 0 ? 0.7 * r->rate_eps + 0.3 * inst : inst;
        r->rate_ns   = now_ns;
        r->rate_head = head;
    }
    double rate = r->rate_eps;
    pthread_mutex_unlock(&r->rate_lock);
    return rate;
}

/* ------------------------------------------------------------ producer */

static uint8_t *slot_data(remora_ring_h r, uint64_t seq)
{
    return (r->data ? r->data : r->base) + rm_ring_data_offset(&r->shape, seq);
}

/* Element bytes in or out. A host ring's buffers are host memory (the
 * producer's hot path asks nothing of CUDA); a GPU ring's go through CUDA. */
static int elem_copy(remora_ring_h r, void *dst, const void *src, size_t len)
{
    if (r->data == NULL) {
        memcpy(dst, src, len);
        return 0;
    }
    return remora_copy(dst, src, len) == REMORA_OK ? 0 : -1;
}

/* Announce that slot seq is about to change: claimed first, so that a remote
 * reader's later look at it covers every byte written from here on. */
static uint8_t *claim(remora_ring_h r)
{
    uint64_t seq = r->head;

    atomic_store_explicit(r->hdr_claimed, seq + 1, memory_order_relaxed);
    atomic_store_explicit(rm_ring_stamp(r, seq), 2 * seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    return slot_data(r, seq);
}

/*
 * Someone waits for this element. With one or two waiters and the context
 * lock free, answer from here (a send on a non-blocking endpoint: a few
 * microseconds, and no thread hop on the latency path); otherwise leave it
 * to the progress thread, so that a commit costs the producer the same
 * whatever the number of subscribers (docs/ring.md, "Fan-out"). Never waits
 * for the lock.
 */
#define RM_RING_DIRECT_MAX 2

void rm_ring_notify(remora_context_h ctx, rm_signal_t *sig, int armed)
{
    if (armed <= RM_RING_DIRECT_MAX)
        rm_engine_signal_now(ctx, sig);
    else
        rm_engine_signal(ctx, sig);
}

static uint64_t publish(remora_ring_h r)
{
    uint64_t seq = r->head++;

    atomic_store_explicit(rm_ring_stamp(r, seq), rm_ring_stamp_done(seq), memory_order_release);
    atomic_store_explicit(r->hdr_head, seq + 1, memory_order_seq_cst);
    /* Pairs with the server's arm-then-recheck: one of us sees the other. */
    int armed = atomic_load_explicit(&r->armed, memory_order_seq_cst);
    if (armed > 0)
        rm_ring_notify(r->ctx, &r->sig, armed);
    return seq;
}

remora_status_t remora_ring_push(remora_ring_h r, const void *elem, size_t len, uint64_t *seq_p)
{
    if (r == NULL || (elem == NULL && len) || len > r->shape.elem_size)
        return REMORA_ERR_INVALID_PARAM;
    if (r->reserved)
        return REMORA_ERR_BUSY;
    if (r->data && len != r->shape.elem_size)
        return REMORA_ERR_INVALID_PARAM; /* GPU rings take whole elements */
    uint8_t *dst = claim(r);
    if (len && elem_copy(r, dst, elem, len) != 0)
        return REMORA_ERR_TRANSPORT; /* the slot stays "being written": never read */
    if (r->data == NULL)
        memset(dst + len, 0, r->shape.elem_size - len);
    uint64_t seq = publish(r);
    if (seq_p)
        *seq_p = seq;
    return REMORA_OK;
}

remora_status_t remora_ring_reserve(remora_ring_h r, void **slot_p)
{
    if (r == NULL || slot_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (r->reserved)
        return REMORA_ERR_BUSY;
    r->reserved = 1;
    *slot_p     = claim(r);
    return REMORA_OK;
}

remora_status_t remora_ring_commit(remora_ring_h r, uint64_t *seq_p)
{
    if (r == NULL || !r->reserved)
        return REMORA_ERR_INVALID_PARAM;
    r->reserved = 0;
    uint64_t seq = publish(r);
    if (seq_p)
        *seq_p = seq;
    return REMORA_OK;
}

/* ------------------------------------------------------------ readers */

void rm_ring_snapshot(remora_ring_h r, rm_ring_shape_t *s)
{
    *s         = r->shape;
    s->head    = atomic_load_explicit(r->hdr_head, memory_order_acquire);
    s->claimed = atomic_load_explicit(r->hdr_claimed, memory_order_acquire);
    s->first   = rm_ring_get64(r->base + RM_RING_OFF_FIRST);
}

/* Seqlock read of one element: 0, or -1 when it is not (or no longer) there. */
static int read_elem(remora_ring_h r, uint64_t seq, void *buf)
{
    _Atomic uint64_t *stamp = rm_ring_stamp(r, seq);
    uint64_t want = rm_ring_stamp_done(seq);

    if (atomic_load_explicit(stamp, memory_order_acquire) != want)
        return -1;
    if (elem_copy(r, buf, slot_data(r, seq), r->shape.elem_size) != 0)
        return -1;
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(stamp, memory_order_relaxed) == want ? 0 : -1;
}

uint64_t rm_ring_copy_range(remora_ring_h r, uint64_t from, uint64_t to, uint8_t *out)
{
    uint64_t first = from;
    size_t   n     = 0;

    /* The producer overwrites oldest first, so a failure restarts the batch
     * just past the lost element. */
    for (uint64_t s = from; s < to; s++) {
        if (read_elem(r, s, out + n * r->shape.elem_size) != 0) {
            first = s + 1;
            n     = 0;
            continue;
        }
        n++;
    }
    return first;
}

remora_status_t remora_ring_get(remora_ring_h r, uint64_t seq, void *buf, size_t len)
{
    rm_ring_shape_t s;

    if (r == NULL || buf == NULL || len < r->shape.elem_size)
        return REMORA_ERR_INVALID_PARAM;
    rm_ring_snapshot(r, &s);
    if (seq >= s.head || seq < rm_ring_oldest_seq(&s))
        return REMORA_ERR_OUT_OF_RANGE;
    return read_elem(r, seq, buf) == 0 ? REMORA_OK : REMORA_ERR_OUT_OF_RANGE;
}

remora_status_t remora_ring_newest(remora_ring_h r, void *buf, size_t len, uint64_t *seq_p)
{
    rm_ring_shape_t s;

    if (r == NULL || buf == NULL || len < r->shape.elem_size)
        return REMORA_ERR_INVALID_PARAM;
    for (int tries = 0; tries < 64; tries++) {
        rm_ring_snapshot(r, &s);
        uint64_t seq = s.head, oldest = rm_ring_oldest_seq(&s);
        if (seq == oldest)
            return REMORA_ERR_OUT_OF_RANGE;
        if (read_elem(r, seq - 1, buf) == 0)
            goto found;
        if (atomic_load_explicit(r->hdr_head, memory_order_acquire) != s.head)
            continue; /* overwritten under us: try the new newest */
        /* Not there and the producer did not move (a 1-slot ring mid-write,
         * a hole in a clone): the newest one held instead. */
        while (--seq > oldest) {
            if (read_elem(r, seq - 1, buf) == 0)
                goto found;
        }
        return REMORA_ERR_OUT_OF_RANGE;
found:
        if (seq_p)
            *seq_p = seq - 1;
        return REMORA_OK;
    }
    return REMORA_ERR_BUSY;
}

remora_status_t remora_ring_oldest(remora_ring_h r, void *buf, size_t len, uint64_t *seq_p)
{
    rm_ring_shape_t s;

    if (r == NULL || buf == NULL || len < r->shape.elem_size)
        return REMORA_ERR_INVALID_PARAM;
    /* Walk forward past elements overwritten under us (or missing in a clone). */
    rm_ring_snapshot(r, &s);
    for (uint64_t seq = rm_ring_oldest_seq(&s); seq < s.head; seq++) {
        if (read_elem(r, seq, buf) == 0) {
            if (seq_p)
                *seq_p = seq;
            return REMORA_OK;
        }
    }
    return REMORA_ERR_OUT_OF_RANGE;
}

size_t remora_ring_elem_size(remora_ring_h r) { return r ? r->shape.elem_size : 0; }
size_t remora_ring_capacity(remora_ring_h r) { return r ? r->shape.capacity : 0; }
remora_mem_h remora_ring_mem(remora_ring_h r) { return r ? r->mem : NULL; }

uint64_t remora_ring_head(remora_ring_h r)
{
    return r ? atomic_load_explicit(r->hdr_head, memory_order_acquire) : 0;
}

/* ------------------------------------------------------------ images */

remora_status_t rm_ring_from_image(remora_context_h ctx, const void *image, size_t len,
                                   uint64_t min_valid, uint64_t max_valid, int live,
                                   remora_ring_h *ring_p)
{
    const uint8_t *img = image;
    rm_ring_shape_t s;
    remora_ring_h r;
    remora_status_t st;

    if (ctx == NULL || image == NULL || ring_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (hdr_parse(img, len, len, live, &s) != 0) {
        rm_info("not a ring image, or a malformed ring header");
        return REMORA_ERR_PROTOCOL;
    }
    if (s.data_stride != 0) {
        rm_info("the image is a GPU ring's control block alone (no elements)");
        return REMORA_ERR_UNSUPPORTED;
    }
    /* Elements the producer may have been overwriting when the image was
     * taken (claimed > s + capacity) are not trusted either. */
    if (s.claimed > s.capacity && s.claimed - s.capacity > min_valid)
        min_valid = s.claimed - s.capacity;
    uint64_t lo = rm_ring_oldest_seq(&s);
    if (lo < min_valid)
        lo = min_valid < s.head ? min_valid : s.head;
    if ((st = ring_alloc(ctx, s.elem_size, s.capacity, lo, -1, &r)) != REMORA_OK)
        return st;
    uint64_t hi = s.head < max_valid ? s.head : max_valid;
    for (uint64_t seq = lo; seq < hi; seq++) {
        uint64_t off = rm_ring_slot_offset(&s, seq);
        if (rm_ring_get64(img + off) != rm_ring_stamp_done(seq))
            continue; /* torn or missing in the image: not held */
        memcpy(slot_data(r, seq), img + off + RM_RING_STAMP_LEN, s.elem_size);
        atomic_store(rm_ring_stamp(r, seq), rm_ring_stamp_done(seq));
    }
    r->head = s.head;
    atomic_store(r->hdr_head, s.head);
    atomic_store(r->hdr_claimed, s.head);
    *ring_p = r;
    return REMORA_OK;
}

remora_status_t remora_ring_create_from_image(remora_context_h ctx, const void *image,
                                              size_t len, remora_ring_h *ring_p)
{
    return rm_ring_from_image(ctx, image, len, 0, UINT64_MAX, 0, ring_p);
}
