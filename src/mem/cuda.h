/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver, found at run time.
 *
 * Design notes
 * - libcuda.so.1 is opened with dlopen once (pthread_once) on the first call
 *   of any function here; nothing links against CUDA, so one build runs on
 *   machines with and without GPUs. Without the driver (or without a device)
 *   every call returns REMORA_ERR_UNSUPPORTED and one log line says why.
 * - Every call that needs a context makes the device's primary context
 *   current for the duration of the call and restores the caller's context
 *   afterwards (push/pop), so it mixes with code that manages its own
 *   contexts. Primary contexts are retained on first use and kept for the
 *   life of the process: releasing one would free memory others still use.
 * - Thread-safe: the driver is, and the only state here (the symbol table
 *   and the retained contexts) is written under pthread_once / a mutex.
 * - Outputs are written only on REMORA_OK. Driver errors are logged once,
 *   here, with the driver's own words.
 */
#ifndef RM_MEM_CUDA_H
#define RM_MEM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <remora/remora.h>

/** Size of a CUDA IPC memory handle (CU_IPC_HANDLE_SIZE). */
#define RM_CUDA_IPC_HANDLE_SIZE 64

/** What a pointer points at, as far as CUDA knows. */
typedef enum rm_ptr_kind {
    RM_PTR_HOST        = 0, /**< pageable, or unknown to CUDA (always, without CUDA) */
    RM_PTR_PINNED_HOST = 1, /**< page-locked host memory (cuMemHostAlloc / registered) */
    RM_PTR_DEVICE      = 2, /**< device memory (cuMemAlloc / cudaMalloc) */
    RM_PTR_MANAGED     = 3  /**< unified/managed memory (cuMemAllocManaged) */
} rm_ptr_kind_t;

typedef struct rm_cuda_device_info {
    char   name[256];
    char   pci_bus_id[32];      /**< "0000:3b:00.0" */
    size_t total_mem;           /**< bytes */
    int    cc_major, cc_minor;  /**< compute capability */
    int    gpudirect_rdma;      /**< CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED */
    int    dma_buf;             /**< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
    int    stream_mem_ops_64;   /**< CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS */
    int    unified_addressing;  /**< CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING */
} rm_cuda_device_info_t;

typedef struct rm_cuda_ipc_handle {
    unsigned char bytes[RM_CUDA_IPC_HANDLE_SIZE];
} rm_cuda_ipc_handle_t;

/* A stream of one device; made and ended by the calls below. */
typedef struct rm_cuda_stream *rm_cuda_stream_h;

/* ---------------------------------------------------------------- driver */

/** Load the driver and cuInit it (once). REMORA_OK or REMORA_ERR_UNSUPPORTED. */
remora_status_t rm_cuda_init(void);
/** Whether libcuda.so.1 is mapped into the process already (by anyone).
 *  If not, no pointer can be CUDA memory: a cheap test that loads nothing. */
int rm_cuda_in_process(void);
/** Why CUDA is unavailable, in words; "" once rm_cuda_init() succeeded. */
const char *rm_cuda_unavailable_reason(void);
/** Number of devices; 0 without CUDA. */
int rm_cuda_device_count(void);
/** The driver's CUDA version, e.g. 13000 for 13.0; known also when cuInit
 *  failed (no device), REMORA_ERR_UNSUPPORTED without a driver. */
remora_status_t rm_cuda_driver_version(int *version);
remora_status_t rm_cuda_device_info(int device, rm_cuda_device_info_t *info);
/** *can = 1 when device a can map memory of device b (cuDeviceCanAccessPeer). */
remora_status_t rm_cuda_can_access_peer(int a, int b, int *can);
/** Let devices a and b access each other's memory (every caller needs both
 *  ways: a copy runs in either's context); already enabled is success. */
remora_status_t rm_cuda_enable_peer_access(int a, int b);

/* ---------------------------------------------------------------- contexts */

/**
 * Make the context that owns GPU memory p current (the application's own,
 * else its device's primary one) for calls into a library that works on the
 * current context: UCX's CUDA memory domains look allocations up in it, and
 * memory of another GPU or context is "not found" there. *pushed tells
 * rm_cuda_ctx_leave whether to restore the caller's context; on failure
 * nothing was pushed.
 */
remora_status_t rm_cuda_ptr_ctx_enter(const void *p, int *pushed);
void rm_cuda_ctx_leave(int pushed);

/** A thread with no current CUDA context gets device's primary context made
 *  current (as the CUDA runtime does on a thread's first call); one with a
 *  context keeps it. UCX's cuda_copy/cuda_ipc transports (1.13) refuse to
 *  copy on a thread without a current context. */
remora_status_t rm_cuda_thread_ctx(int device);

/* ---------------------------------------------------------------- memory */

/** Classify p. Without CUDA every pointer is RM_PTR_HOST and *device is -1.
 *  *device is the owning device for DEVICE/MANAGED/PINNED_HOST, else -1. */
remora_status_t rm_cuda_ptr_kind(const void *p, rm_ptr_kind_t *kind, int *device);

/** Device memory on `device`, freed with rm_cuda_mem_free(). */
remora_status_t rm_cuda_mem_alloc(int device, size_t length, void **p);
/** Managed memory; remora refuses it as a region, this exists for tests. */
remora_status_t rm_cuda_mem_alloc_managed(int device, size_t length, void **p);
remora_status_t rm_cuda_mem_free(int device, void *p);

/** Pinned host memory usable from every device, freed with rm_cuda_host_free(). */
remora_status_t rm_cuda_host_alloc(size_t length, void **p);
remora_status_t rm_cuda_host_free(void *p);
/** Pinned host memory mapped for the device (GPU sockets' queues): *p for the
 *  CPU, *dev for kernels on `device`; freed with rm_cuda_host_free(). */
remora_status_t rm_cuda_host_alloc_mapped(int device, size_t length, void **p, void **dev);
/** Page-lock caller memory for every device, until rm_cuda_host_unregister(). */
remora_status_t rm_cuda_host_register(void *p, size_t length);
remora_status_t rm_cuda_host_unregister(void *p);

/** The device a copy between dst and src runs on (rm_cuda_copy_pick). */
int rm_cuda_copy_device(const void *dst, const void *src);
/**
 * The choice itself: the device whose memory the copy touches, dst's before
 * src's, then the context of pinned host memory, else 0. Device memory comes
 * first because a copy queued in another device's context waits on the
 * memory's own device (GPU 1 -> pinned memory of GPU 0's context, queued
 * on GPU 0, never ended while a stream of GPU 1 waited for it).
 */
static inline int rm_cuda_copy_pick(rm_ptr_kind_t dk, int dd, rm_ptr_kind_t sk, int sd)
{
    if ((dk == RM_PTR_DEVICE || dk == RM_PTR_MANAGED) && dd >= 0)
        return dd;
    if ((sk == RM_PTR_DEVICE || sk == RM_PTR_MANAGED) && sd >= 0)
        return sd;
    if (dk == RM_PTR_PINNED_HOST && dd >= 0)
        return dd;
    if (sk == RM_PTR_PINNED_HOST && sd >= 0)
        return sd;
    return 0;
}
/** Blocking copy in any direction (unified addressing infers it). */
remora_status_t rm_cuda_copy(void *dst, const void *src, size_t length);
/** Enqueue a copy on a stream; host memory must be pinned for it to overlap. */
remora_status_t rm_cuda_copy_async(rm_cuda_stream_h stream, void *dst, const void *src,
                                   size_t length);
/* The same where both sides are device-addressable (device memory, a peer's
 * opened by IPC, pinned host memory mapped for the device): no pointer-type
 * lookup, 1.2 µs less CPU a call under MPS on an H100 (docs/gpunet.md);
 * other memory falls back to rm_cuda_copy_async's call. */
remora_status_t rm_cuda_copy_async_d2d(rm_cuda_stream_h stream, void *dst, const void *src,
                                       size_t length);

/* ---------------------------------------------------------------- streams */

/** A non-blocking stream (does not synchronize with the legacy stream 0). */
remora_status_t rm_cuda_stream_create(int device, rm_cuda_stream_h *stream_p);
void            rm_cuda_stream_destroy(rm_cuda_stream_h stream);
remora_status_t rm_cuda_stream_sync(rm_cuda_stream_h stream);
/** REMORA_OK once everything queued on it finished, REMORA_INPROGRESS before,
 *  or the error it ended with. Never blocks. */
remora_status_t rm_cuda_stream_query(rm_cuda_stream_h stream);
/** Its CUstream, for the rm_cuda_raw_* calls. */
void *rm_cuda_stream_raw(rm_cuda_stream_h stream);

/* ---------------------------------------------------------------- IPC */

/**
 * A handle for the allocation that contains device pointer p; *offset is p's
 * offset within that allocation (handles always name the allocation's base).
 */
remora_status_t rm_cuda_ipc_get(const void *p, rm_cuda_ipc_handle_t *handle, size_t *offset);
/** Map a handle from another process into `device`'s context; *base is the
 *  allocation's base here. Same-process handles fail (a driver rule). */
remora_status_t rm_cuda_ipc_open(int device, const rm_cuda_ipc_handle_t *handle, void **base);
remora_status_t rm_cuda_ipc_close(int device, void *base);
/** The device allocation that contains p: an id never reused within the
 *  process (CU_POINTER_ATTRIBUTE_BUFFER_ID), its base and size. One driver
 *  call, no context switch; REMORA_ERR_INVALID_PARAM for other memory. */
remora_status_t rm_cuda_ptr_alloc(const void *p, uint64_t *id, void **base, size_t *size);
/** The allocation of `device` that contains p (own or IPC-opened): its base and size. */
remora_status_t rm_cuda_ptr_range(int device, const void *p, void **base, size_t *size);

/* ---------------------------------------------------------------- caller streams */

/*
 * For stream-ordered operations (src/gpu/stream.c). `stream` is the caller's
 * CUstream as an opaque pointer (NULL: the legacy stream); everything here
 * only enqueues. Device addresses come from rm_cuda_host_register_mapped()
 * or are device memory.
 */
/* REMORA_ERR_INVALID_PARAM for something that is not a usable stream;
 * *capturing (may be NULL) = 1 while the stream is being captured. */
remora_status_t rm_cuda_raw_check(void *stream, int *capturing);
/* cuStreamWriteValue64 (with its memory barrier: earlier work is visible first). */
remora_status_t rm_cuda_raw_write64(void *stream, void *dev_addr, uint64_t value);
/* The same on a stream of ours: its device is known, so no cuStreamGetCtx. */
remora_status_t rm_cuda_stream_write64(rm_cuda_stream_h stream, void *dev_addr, uint64_t value);
/* cuStreamWaitValue64: eq ? *addr == value : (int64_t)(*addr - value) >= 0. */
remora_status_t rm_cuda_raw_wait64(void *stream, void *dev_addr, uint64_t value, int eq);
remora_status_t rm_cuda_raw_copy(void *stream, void *dst, const void *src, size_t length);
/* The ordinal of the device whose context `stream` belongs to, or -1. */
int rm_cuda_stream_device(void *stream);
remora_status_t rm_cuda_raw_sync(void *stream);
/* Page-lock host memory, mapped for every device (DEVICEMAP | PORTABLE);
 * *dev_p is its device address. Undo with rm_cuda_host_unregister(). */
remora_status_t rm_cuda_host_register_mapped(void *p, size_t length, void **dev_p);

#endif
