/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver loader (see cuda.h for the contract).
 *
 * Design notes
 * - cuda.h is not included: the types, enum values and constants used here
 *   are declared below with the values of CUDA 13.0's cuda.h
 *   (CUDA_VERSION 13000); the driver ABI keeps them stable.
 * - Versioned entry points are resolved by their exported names (e.g.
 *   cuMemAlloc_v2), as cuda.h's #defines would pick them; the per-thread
 *   default-stream variants (_ptds/_ptsz) are not used.
 * - A missing symbol makes the whole driver unusable: an old driver is
 *   reported once rather than failing later in the middle of a transfer.
 */
#include "mem/cuda.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

/* ---------------------------------------------------------------- driver ABI (cuda.h 13.0) */

typedef int                   CUresult;
typedef int                   CUdevice;
typedef unsigned long long    CUdeviceptr;
typedef struct CUctx_st      *CUcontext;
typedef struct CUstream_st   *CUstream;
typedef struct { char reserved[RM_CUDA_IPC_HANDLE_SIZE]; } CUipcMemHandle;

enum {
    CUDA_SUCCESS                           = 0,
    CUDA_ERROR_INVALID_VALUE               = 1,
    CUDA_ERROR_OUT_OF_MEMORY               = 2,
    CUDA_ERROR_DEINITIALIZED               = 4,
    CUDA_ERROR_INVALID_CONTEXT             = 201,
    CUDA_ERROR_NOT_READY                   = 600,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
};

enum { /* CUdevice_attribute */
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING            = 41,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR      = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR      = 76,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED     = 116,
    CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122,
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED             = 124,
};

enum { /* CUpointer_attribute */
    CU_POINTER_ATTRIBUTE_CONTEXT        = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE    = 2,
    CU_POINTER_ATTRIBUTE_BUFFER_ID      = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED     = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START    = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE     = 12,
};

enum { /* CUmemorytype */
    CU_MEMORYTYPE_HOST    = 1,
    CU_MEMORYTYPE_DEVICE  = 2,
    CU_MEMORYTYPE_UNIFIED = 4,
};

#define CU_MEMHOSTALLOC_PORTABLE           0x01u
#define CU_MEMHOSTALLOC_DEVICEMAP          0x02u
#define CU_MEMHOSTREGISTER_PORTABLE        0x01u
#define CU_MEM_ATTACH_GLOBAL               0x01u
#define CU_STREAM_NON_BLOCKING             0x01u
#define CU_EVENT_DISABLE_TIMING            0x02u
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x01u
#define CU_MEMHOSTREGISTER_DEVICEMAP       0x02u
#define CU_STREAM_WAIT_VALUE_GEQ           0x0u
#define CU_STREAM_WAIT_VALUE_EQ            0x1u
#define CUDA_ERROR_INVALID_HANDLE          400
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1 };

/* ---------------------------------------------------------------- symbol table */

static struct cu_api {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxEnablePeerAccess)(CUcontext, unsigned);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*MemHostRegister)(void *, size_t, unsigned);
    CUresult (*MemHostUnregister)(void *);
    CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*PointerGetAttributes)(unsigned, int *, void **, CUdeviceptr);
    CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr);
    /* stream memory operations (src/gpu/stream.c) */
    CUresult (*StreamWriteValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
    CUresult (*StreamWaitValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
    CUresult (*StreamGetCtx)(CUstream, CUcontext *);
    CUresult (*ThreadExchangeStreamCaptureMode)(int *);
    CUresult (*StreamIsCapturing)(CUstream, int *);
    CUresult (*StreamQuery)(CUstream);
} cu;

#define CU_SYM(field, name) {name, offsetof(struct cu_api, field)}

static const struct cu_sym {
    const char *name;
    size_t      offset;
} cu_syms[] = {
    CU_SYM(Init, "cuInit"),
    CU_SYM(DriverGetVersion, "cuDriverGetVersion"),
    CU_SYM(GetErrorString, "cuGetErrorString"),
    CU_SYM(DeviceGetCount, "cuDeviceGetCount"),
    CU_SYM(DeviceGet, "cuDeviceGet"),
    CU_SYM(DeviceGetName, "cuDeviceGetName"),
    CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
    CU_SYM(DeviceGetPCIBusId, "cuDeviceGetPCIBusId"),
    CU_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2"),
    CU_SYM(DeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
    CU_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    CU_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
    CU_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
    CU_SYM(CtxGetCurrent, "cuCtxGetCurrent"),
    CU_SYM(CtxSetCurrent, "cuCtxSetCurrent"),
    CU_SYM(CtxEnablePeerAccess, "cuCtxEnablePeerAccess"),
    CU_SYM(CtxGetDevice, "cuCtxGetDevice"),
    CU_SYM(MemAlloc, "cuMemAlloc_v2"),
    CU_SYM(MemAllocManaged, "cuMemAllocManaged"),
    CU_SYM(MemFree, "cuMemFree_v2"),
    CU_SYM(MemHostAlloc, "cuMemHostAlloc"),
    CU_SYM(MemFreeHost, "cuMemFreeHost"),
    CU_SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
    CU_SYM(MemHostRegister, "cuMemHostRegister_v2"),
    CU_SYM(MemHostUnregister, "cuMemHostUnregister"),
    CU_SYM(MemGetAddressRange, "cuMemGetAddressRange_v2"),
    CU_SYM(PointerGetAttributes, "cuPointerGetAttributes"),
    CU_SYM(Memcpy, "cuMemcpy"),
    CU_SYM(MemcpyAsync, "cuMemcpyAsync"),
    CU_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
    CU_SYM(StreamCreate, "cuStreamCreate"),
    CU_SYM(StreamDestroy, "cuStreamDestroy_v2"),
    CU_SYM(StreamSynchronize, "cuStreamSynchronize"),
    CU_SYM(IpcGetMemHandle, "cuIpcGetMemHandle"),
    CU_SYM(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
    CU_SYM(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
    CU_SYM(StreamWriteValue64, "cuStreamWriteValue64_v2"),
    CU_SYM(StreamWaitValue64, "cuStreamWaitValue64_v2"),
    CU_SYM(StreamGetCtx, "cuStreamGetCtx"),
    CU_SYM(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode"),
    CU_SYM(StreamIsCapturing, "cuStreamIsCapturing"),
    CU_SYM(StreamQuery, "cuStreamQuery"),
};

/* ---------------------------------------------------------------- state */

/* More than any machine has; devices past it are not used. */
#define RM_CUDA_MAX_DEVICES 64

static pthread_once_t  cuda_once = PTHREAD_ONCE_INIT;
static remora_status_t cuda_state = REMORA_ERR_UNSUPPORTED; /* written once, in cuda_load */
static atomic_int      cuda_loaded; /* the same news for threads that skip pthread_once */
static int             cuda_ndevices;
static int             cuda_version;      /* cuDriverGetVersion, 0 if unknown */
static char            cuda_reason[256] = "not probed yet";
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext       ctx_primary[RM_CUDA_MAX_DEVICES]; /* retained on first use */

struct rm_cuda_stream {
    CUstream cu;
    int      device;
};

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }
static void *vptr(CUdeviceptr d) { return (void *)(uintptr_t)d; }

static const char *cu_string(CUresult r)
{
    const char *s = NULL;

    if (cu.GetErrorString == NULL || cu.GetErrorString(r, &s) != CUDA_SUCCESS || s == NULL)
        return "unknown CUDA error";
    return s;
}

/* Log a failed driver call once, where it happened, and map it. */
static remora_status_t cu_check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return REMORA_OK;
    /* The process is exiting and the driver has let go of everything: a
     * detached thread still closing what a stopped proxy left (gpunet's
     * reaper) has nothing left to close. Not worth an error line. */
    if (r == CUDA_ERROR_DEINITIALIZED) {
        rm_debug("CUDA %s: the driver is shutting down", what);
        return REMORA_ERR_IO;
    }
    rm_error("CUDA %s failed: %s (%d)", what, cu_string(r), r);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? REMORA_ERR_NO_MEMORY : REMORA_ERR_IO;
}

/* Say once why CUDA cannot be used: info level, as most hosts have no GPU;
 * whoever then asks for GPU memory gets an error that points at doctor. */
__attribute__((format(printf, 1, 2)))
static void cuda_unavailable(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cuda_reason, sizeof(cuda_reason), fmt, ap);
    va_end(ap);
    rm_info("CUDA unavailable: %s", cuda_reason);
}

static int cu_resolve(void *lib)
{
    for (size_t i = 0; i < sizeof(cu_syms) / sizeof(cu_syms[0]); i++) {
        void *sym = dlsym(lib, cu_syms[i].name);

        if (sym == NULL) {
            cuda_unavailable("the CUDA driver lacks %s (too old?)", cu_syms[i].name);
            return -1;
        }
        /* POSIX guarantees object and function pointers convert both ways. */
        memcpy((char *)&cu + cu_syms[i].offset, &sym, sizeof(sym));
    }
    return 0;
}

static void cuda_load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUresult r;
    int n = 0;

    if (lib == NULL) {
        cuda_unavailable("no CUDA driver: %s", dlerror());
        return;
    }
    if (cu_resolve(lib) != 0)
        goto err_close;
    if (cu.DriverGetVersion(&cuda_version) != CUDA_SUCCESS)
        cuda_version = 0;
    if ((r = cu.Init(0)) != CUDA_SUCCESS || (r = cu.DeviceGetCount(&n)) != CUDA_SUCCESS) {
        cuda_unavailable("the CUDA driver is loaded but cuInit failed: %s (%d)", cu_string(r), r);
        goto err_close;
    }
    cuda_ndevices = n < RM_CUDA_MAX_DEVICES ? n : RM_CUDA_MAX_DEVICES;
    cuda_reason[0] = '\0';
    cuda_state = REMORA_OK;
    atomic_store(&cuda_loaded, 1);
    return; /* the library stays loaded for the life of the process */

err_close:
    memset(&cu, 0, sizeof(cu));
    dlclose(lib);
}

remora_status_t rm_cuda_init(void)
{
    pthread_once(&cuda_once, cuda_load);
    return cuda_state;
}

/*
 * Is libcuda in the process (loaded by us or by the application)? Asked for
 * every transfer, so it must be cheap: dlopen(RTLD_NOLOAD) of a library that
 * is not there costs ~18 µs (it searches), which doubled a 64 B round trip.
 * Instead the loaded objects are scanned, and only when an object was added
 * since the last scan (dl_iterate_phdr's dlpi_adds counter): ~20 ns. Once
 * seen, the driver stays (it is never unloaded).
 */
typedef struct cuda_scan {
    int                first, found;
    unsigned long long adds;
} cuda_scan_t;

static _Atomic unsigned long long cuda_scanned_adds;

static int cuda_scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    cuda_scan_t *s = arg;

    if (s->first) {
        s->first = 0;
        if (info->dlpi_adds == atomic_load(&cuda_scanned_adds))
            return 1; /* nothing loaded since the last look */
        s->adds = info->dlpi_adds;
    }
    if (info->dlpi_name && strstr(info->dlpi_name, "libcuda.so")) {
        s->found = 1;
        return 1;
    }
    return 0;
}

int rm_cuda_in_process(void)
{
    static atomic_int seen;
    cuda_scan_t s = {.first = 1};

    if (atomic_load_explicit(&seen, memory_order_relaxed))
        return 1;
    if (atomic_load(&cuda_loaded)) { /* loaded (and kept) by rm_cuda_init */
        atomic_store(&seen, 1);
        return 1;
    }
    dl_iterate_phdr(cuda_scan_cb, &s);
    if (s.found) {
        atomic_store(&seen, 1);
        return 1;
    }
    if (s.adds)
        atomic_store(&cuda_scanned_adds, s.adds);
    return 0;
}

const char *rm_cuda_unavailable_reason(void)
{
    rm_cuda_init();
    return cuda_reason;
}

int rm_cuda_device_count(void) { return rm_cuda_init() == REMORA_OK ? cuda_ndevices : 0; }

static remora_status_t cu_device(int device, CUdevice *dev)
{
    if (rm_cuda_init() != REMORA_OK)
        return REMORA_ERR_UNSUPPORTED;
    if (device < 0 || device >= cuda_ndevices)
        return REMORA_ERR_INVALID_PARAM;
    return cu_check(cu.DeviceGet(dev, device), "cuDeviceGet");
}

/* ---------------------------------------------------------------- contexts */

static remora_status_t ctx_get(int device, CUcontext *ctx)
{
    remora_status_t status = REMORA_OK;
    CUdevice dev;

    if ((status = cu_device(device, &dev)) != REMORA_OK)
        return status;
    pthread_mutex_lock(&ctx_lock);
    if (ctx_primary[device] == NULL)
        status = cu_check(cu.DevicePrimaryCtxRetain(&ctx_primary[device], dev),
                          "cuDevicePrimaryCtxRetain");
    *ctx = ctx_primary[device];
    pthread_mutex_unlock(&ctx_lock);
    return status;
}

/* Make device's primary context current; ctx_pop() restores the caller's. */
static remora_status_t ctx_push(int device)
{
    CUcontext ctx;
    remora_status_t status = ctx_get(device, &ctx);

    if (status != REMORA_OK)
        return status;
    return cu_check(cu.CtxPushCurrent(ctx), "cuCtxPushCurrent");
}

static void ctx_pop(void)
{
    CUcontext ignored;
    cu_check(cu.CtxPopCurrent(&ignored), "cuCtxPopCurrent");
}

/* Make ctx current unless it is already (a proxy thread's, made so once):
 * two driver calls fewer per operation. *pushed: ctx_leave pops it. */
static remora_status_t push_unless_current(CUcontext ctx, int *pushed)
{
    CUcontext cur = NULL;

    *pushed = 0;
    if (cu.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
        return REMORA_OK;
    remora_status_t status = cu_check(cu.CtxPushCurrent(ctx), "cuCtxPushCurrent");
    *pushed = status == REMORA_OK; /* a failed push leaves the caller's context to it */
    return status;
}

static void ctx_leave(int pushed)
{
    if (pushed)
        ctx_pop();
}

/* push_unless_current for device's primary context. */
static remora_status_t ctx_enter(int device, int *pushed)
{
    CUcontext ctx;
    remora_status_t status = ctx_get(device, &ctx);

    *pushed = 0;
    return status != REMORA_OK ? status : push_unless_current(ctx, pushed);
}

remora_status_t rm_cuda_thread_ctx(int device)
{
    CUcontext cur = NULL, ctx;
    remora_status_t status;

    if (rm_cuda_init() != REMORA_OK)
        return REMORA_ERR_UNSUPPORTED;
    if (cu.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur != NULL)
        return REMORA_OK; /* the thread's own choice stays */
    if ((status = ctx_get(device, &ctx)) != REMORA_OK)
        return status;
    return cu_check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
}

/* cuPointerGetAttributes of p. Some drivers answer only with a current
 * context: then once more in device 0's. Unknown pointers are not an error
 * (their memory type comes back 0). */
static CUresult ptr_query(const void *p, unsigned n, int *attrs, void **data)
{
    CUresult r = cu.PointerGetAttributes(n, attrs, data, dptr(p));

    if (r == CUDA_ERROR_INVALID_CONTEXT && ctx_push(0) == REMORA_OK) {
        r = cu.PointerGetAttributes(n, attrs, data, dptr(p));
        ctx_pop();
    }
    return r;
}

remora_status_t rm_cuda_ptr_ctx_enter(const void *p, int *pushed)
{
    int attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    CUcontext owner = NULL;
    int ordinal = -1;
    void *data[] = {&owner, &ordinal};

    *pushed = 0;
    if (rm_cuda_init() != REMORA_OK)
        return REMORA_ERR_UNSUPPORTED;
    CUresult r = ptr_query(p, 2, attrs, data);
    if (r != CUDA_SUCCESS)
        return cu_check(r, "cuPointerGetAttributes");
    if (owner != NULL) /* the application's own context, or a primary one */
        return push_unless_current(owner, pushed);
    /* memory of no context (virtual memory management, pools) */
    return ordinal >= 0 ? ctx_enter(ordinal, pushed) : REMORA_ERR_INVALID_PARAM;
}

void rm_cuda_ctx_leave(int pushed) { ctx_leave(pushed); }

/* ---------------------------------------------------------------- devices */

remora_status_t rm_cuda_driver_version(int *version)
{
    rm_cuda_init();
    if (version == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (cuda_version == 0)
        return REMORA_ERR_UNSUPPORTED;
    *version = cuda_version;
    return REMORA_OK;
}

static int dev_attr(CUdevice dev, int attr)
{
    int v = 0;
    return cu.DeviceGetAttribute(&v, attr, dev) == CUDA_SUCCESS ? v : 0;
}

remora_status_t rm_cuda_device_info(int device, rm_cuda_device_info_t *info)
{
    rm_cuda_device_info_t in = {0};
    remora_status_t status;
    CUdevice dev;

    if (info == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = cu_device(device, &dev)) != REMORA_OK)
        return status;
    if ((status = cu_check(cu.DeviceGetName(in.name, sizeof(in.name), dev),
                           "cuDeviceGetName")) != REMORA_OK ||
        (status = cu_check(cu.DeviceGetPCIBusId(in.pci_bus_id, sizeof(in.pci_bus_id), dev),
                           "cuDeviceGetPCIBusId")) != REMORA_OK ||
        (status = cu_check(cu.DeviceTotalMem(&in.total_mem, dev), "cuDeviceTotalMem")) !=
            REMORA_OK)
        return status;
    in.cc_major           = dev_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    in.cc_minor           = dev_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    in.gpudirect_rdma     = dev_attr(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
    in.dma_buf            = dev_attr(dev, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
    in.stream_mem_ops_64  = dev_attr(dev, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
    in.unified_addressing = dev_attr(dev, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
    *info = in;
    return REMORA_OK;
}

remora_status_t rm_cuda_can_access_peer(int a, int b, int *can)
{
    CUdevice da, db;
    remora_status_t status;
    int v = 0;

    if (can == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = cu_device(a, &da)) != REMORA_OK || (status = cu_device(b, &db)) != REMORA_OK)
        return status;
    if (a == b) {
        *can = 1;
        return REMORA_OK;
    }
    if ((status = cu_check(cu.DeviceCanAccessPeer(&v, da, db), "cuDeviceCanAccessPeer")) ==
        REMORA_OK)
        *can = v;
    return status;
}

/* Device `device` may access memory of `peer`. */
static remora_status_t peer_access_one_way(int device, int peer)
{
    CUcontext peer_ctx;
    remora_status_t status;
    CUresult r;

    if ((status = ctx_get(peer, &peer_ctx)) != REMORA_OK ||
        (status = ctx_push(device)) != REMORA_OK)
        return status;
    r = cu.CtxEnablePeerAccess(peer_ctx, 0);
    ctx_pop();
    return r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ? REMORA_OK
                                                        : cu_check(r, "cuCtxEnablePeerAccess");
}

remora_status_t rm_cuda_enable_peer_access(int a, int b)
{
    remora_status_t st;

    if (a == b)
        return cu_device(a, &(CUdevice){0});
    st = peer_access_one_way(a, b);
    remora_status_t back = peer_access_one_way(b, a); /* tried whatever the first did */
    return st != REMORA_OK ? st : back;
}

/* ---------------------------------------------------------------- pointers */

remora_status_t rm_cuda_ptr_kind(const void *p, rm_ptr_kind_t *kind, int *device)
{
    int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    unsigned type = 0, managed = 0;
    int ordinal = -1;
    void *data[] = {&type, &managed, &ordinal};

    if (kind == NULL || device == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (rm_cuda_init() != REMORA_OK || p == NULL) {
        *kind   = RM_PTR_HOST;
        *device = -1;
        return REMORA_OK;
    }
    CUresult r = ptr_query(p, 3, attrs, data);
    if (r != CUDA_SUCCESS)
        return cu_check(r, "cuPointerGetAttributes");
    if (managed || type == CU_MEMORYTYPE_UNIFIED)
        *kind = RM_PTR_MANAGED;
    else if (type == CU_MEMORYTYPE_DEVICE)
        *kind = RM_PTR_DEVICE;
    else if (type == CU_MEMORYTYPE_HOST)
        *kind = RM_PTR_PINNED_HOST;
    else
        *kind = RM_PTR_HOST;
    *device = *kind == RM_PTR_HOST ? -1 : ordinal;
    return REMORA_OK;
}

/* ---------------------------------------------------------------- memory */

/* managed: cuMemAllocManaged, else cuMemAlloc, in device's primary context. */
static remora_status_t mem_alloc(int device, size_t length, void **p, int managed)
{
    CUdeviceptr d = 0;
    remora_status_t status;

    if (p == NULL || length == 0)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = managed ? cu_check(cu.MemAllocManaged(&d, length, CU_MEM_ATTACH_GLOBAL),
                                "cuMemAllocManaged")
                     : cu_check(cu.MemAlloc(&d, length), "cuMemAlloc");
    ctx_pop();
    if (status == REMORA_OK)
        *p = vptr(d);
    return status;
}

remora_status_t rm_cuda_mem_alloc(int device, size_t length, void **p)
{
    return mem_alloc(device, length, p, 0);
}

remora_status_t rm_cuda_mem_alloc_managed(int device, size_t length, void **p)
{
    return mem_alloc(device, length, p, 1);
}

remora_status_t rm_cuda_mem_free(int device, void *p)
{
    remora_status_t status;

    if (p == NULL)
        return REMORA_OK;
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemFree(dptr(p)), "cuMemFree");
    ctx_pop();
    return status;
}

/* Pinned host memory belongs to a context; PORTABLE makes every context see
 * it as pinned, so device 0's context can own it. */
remora_status_t rm_cuda_host_alloc(size_t length, void **p)
{
    remora_status_t status;
    void *h = NULL;

    if (p == NULL || length == 0)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(0)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemHostAlloc(&h, length, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
    ctx_pop();
    if (status == REMORA_OK)
        *p = h;
    return status;
}

remora_status_t rm_cuda_host_alloc_mapped(int device, size_t length, void **p, void **dev)
{
    remora_status_t status;
    CUdeviceptr d = 0;
    void *h = NULL;

    if (p == NULL || dev == NULL || length == 0)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemHostAlloc(&h, length,
                                      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
                      "cuMemHostAlloc");
    if (status == REMORA_OK &&
        (status = cu_check(cu.MemHostGetDevicePointer(&d, h, 0), "cuMemHostGetDevicePointer")) !=
            REMORA_OK)
        cu.MemFreeHost(h);
    ctx_pop();
    if (status == REMORA_OK) {
        *p   = h;
        *dev = vptr(d);
    }
    return status;
}

remora_status_t rm_cuda_host_free(void *p)
{
    remora_status_t status;

    if (p == NULL)
        return REMORA_OK;
    if ((status = ctx_push(0)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemFreeHost(p), "cuMemFreeHost");
    ctx_pop();
    return status;
}

remora_status_t rm_cuda_host_register(void *p, size_t length)
{
    remora_status_t status;

    if (p == NULL || length == 0)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(0)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemHostRegister(p, length, CU_MEMHOSTREGISTER_PORTABLE),
                      "cuMemHostRegister");
    ctx_pop();
    return status;
}

/*
 * Host memory that someone else had page-locked when we asked (a UCX with
 * CUDA support registers exposed regions itself): it is used as it is, and
 * rm_cuda_host_unregister() leaves it to its owner.
 */
#define BORROWED_MAX 64
static void           *borrowed[BORROWED_MAX];
static pthread_mutex_t borrowed_lock = PTHREAD_MUTEX_INITIALIZER;

/* Put `to` in the slot holding `from` (NULL: a free slot); 0 if none does. */
static int borrowed_swap(void *from, void *to)
{
    int done = 0;

    pthread_mutex_lock(&borrowed_lock);
    for (unsigned i = 0; i < BORROWED_MAX && !done; i++)
        if (borrowed[i] == from)
            borrowed[i] = to, done = 1;
    pthread_mutex_unlock(&borrowed_lock);
    return done;
}

remora_status_t rm_cuda_host_unregister(void *p)
{
    remora_status_t status;

    if (p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (borrowed_swap(p, NULL))
        return REMORA_OK;
    if ((status = ctx_push(0)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemHostUnregister(p), "cuMemHostUnregister");
    ctx_pop();
    return status;
}

/* The context a copy runs in: the device of either side, else device 0. */
int rm_cuda_copy_device(const void *dst, const void *src)
{
    rm_ptr_kind_t dk = RM_PTR_HOST, sk = RM_PTR_HOST;
    int dd = -1, sd = -1;

    if (rm_cuda_ptr_kind(dst, &dk, &dd) != REMORA_OK)
        dk = RM_PTR_HOST;
    if (dk != RM_PTR_DEVICE && dk != RM_PTR_MANAGED &&
        rm_cuda_ptr_kind(src, &sk, &sd) != REMORA_OK)
        sk = RM_PTR_HOST;
    return rm_cuda_copy_pick(dk, dd, sk, sd);
}

/* The stream rm_cuda_copy runs on: one non-blocking stream per device, made
 * on first use (in the device's primary context, current here) and kept. */
static remora_status_t copy_stream(int device, CUstream *stream_p)
{
    static CUstream streams[RM_CUDA_MAX_DEVICES];
    remora_status_t status = REMORA_OK;

    pthread_mutex_lock(&ctx_lock);
    if (streams[device] == NULL)
        status = cu_check(cu.StreamCreate(&streams[device], CU_STREAM_NON_BLOCKING),
                          "cuStreamCreate");
    *stream_p = streams[device];
    pthread_mutex_unlock(&ctx_lock);
    return status;
}

remora_status_t rm_cuda_copy(void *dst, const void *src, size_t length)
{
    remora_status_t status;

    if (length == 0)
        return REMORA_OK;
    if (dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    int device = rm_cuda_copy_device(dst, src);
    CUstream stream;

    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    /* On a non-blocking stream of our own, not the legacy stream: a legacy
     * copy would wait for every blocking stream of the context, and one of
     * those may be waiting (cuStreamWaitValue64) for this very transfer to
     * finish (stream-ordered operations, src/gpu/stream.c): a deadlock.
     * The synchronize makes it blocking, as callers are promised. */
    if ((status = copy_stream(device, &stream)) == REMORA_OK)
        status = cu_check(cu.MemcpyAsync(dptr(dst), dptr(src), length, stream), "cuMemcpyAsync");
    if (status == REMORA_OK)
        status = cu_check(cu.StreamSynchronize(stream), "cuStreamSynchronize");
    ctx_pop();
    return status;
}

/* d2d: cuMemcpyDtoDAsync first, which skips the pointer-type lookup. */
static remora_status_t copy_async(rm_cuda_stream_h stream, void *dst, const void *src,
                                  size_t length, int d2d)
{
    remora_status_t status;

    if (stream == NULL || dst == NULL || src == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (length == 0)
        return REMORA_OK;
    int pushed;
    if ((status = ctx_enter(stream->device, &pushed)) != REMORA_OK)
        return status;
    CUresult r = d2d ? cu.MemcpyDtoDAsync(dptr(dst), dptr(src), length, stream->cu)
                     : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_ERROR_INVALID_VALUE) /* not device-addressable after all, or any copy */
        r = cu.MemcpyAsync(dptr(dst), dptr(src), length, stream->cu);
    status = cu_check(r, "cuMemcpyAsync");
    ctx_leave(pushed);
    return status;
}

remora_status_t rm_cuda_copy_async(rm_cuda_stream_h stream, void *dst, const void *src,
                                   size_t length)
{
    return copy_async(stream, dst, src, length, 0);
}

remora_status_t rm_cuda_copy_async_d2d(rm_cuda_stream_h stream, void *dst, const void *src,
                                       size_t length)
{
    return copy_async(stream, dst, src, length, 1);
}

/* ---------------------------------------------------------------- streams */

remora_status_t rm_cuda_stream_create(int device, rm_cuda_stream_h *stream_p)
{
    struct rm_cuda_stream *s;
    remora_status_t status;

    if (stream_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    if ((s = calloc(1, sizeof(*s))) == NULL) {
        status = REMORA_ERR_NO_MEMORY;
    } else if ((status = cu_check(cu.StreamCreate(&s->cu, CU_STREAM_NON_BLOCKING),
                                  "cuStreamCreate")) != REMORA_OK) {
        free(s);
    } else {
        s->device = device;
        *stream_p = s;
    }
    ctx_pop();
    return status;
}

void rm_cuda_stream_destroy(rm_cuda_stream_h stream)
{
    if (stream == NULL)
        return;
    if (ctx_push(stream->device) == REMORA_OK) {
        cu_check(cu.StreamDestroy(stream->cu), "cuStreamDestroy");
        ctx_pop();
    }
    free(stream);
}

remora_status_t rm_cuda_stream_sync(rm_cuda_stream_h stream)
{
    remora_status_t status;

    if (stream == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(stream->device)) != REMORA_OK)
        return status;
    status = cu_check(cu.StreamSynchronize(stream->cu), "cuStreamSynchronize");
    ctx_pop();
    return status;
}

remora_status_t rm_cuda_stream_query(rm_cuda_stream_h stream)
{
    remora_status_t status;
    CUresult r;

    if (stream == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(stream->device)) != REMORA_OK)
        return status;
    r = cu.StreamQuery(stream->cu);
    ctx_pop();
    return r == CUDA_ERROR_NOT_READY ? REMORA_INPROGRESS : cu_check(r, "cuStreamQuery");
}

void *rm_cuda_stream_raw(rm_cuda_stream_h stream) { return stream ? (void *)stream->cu : NULL; }

/* ---------------------------------------------------------------- IPC */

/*
 * Handles this process exported, and their allocations. CUDA refuses to open
 * an IPC handle in the process that made it ("invalid device context"), yet
 * a client may well read a server of its own process (tests, a Python
 * program holding both): such a handle resolves to the allocation itself.
 * A few recent ones suffice; CUDA gives one allocation the same handle
 * every time, so a slot is found again rather than filled twice.
 */
#define OWN_HANDLES 64
static struct {
    rm_cuda_ipc_handle_t handle;
    CUdeviceptr          base;
} own_handles[OWN_HANDLES];
static unsigned        own_next;
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;

static void own_handle_add(const rm_cuda_ipc_handle_t *h, CUdeviceptr base)
{
    unsigned i;

    pthread_mutex_lock(&own_lock);
    for (i = 0; i < OWN_HANDLES; i++)
        if (memcmp(&own_handles[i].handle, h, sizeof(*h)) == 0)
            break;
    if (i == OWN_HANDLES)
        i = own_next++ % OWN_HANDLES;
    own_handles[i].handle = *h;
    own_handles[i].base   = base;
    pthread_mutex_unlock(&own_lock);
}

/* 0 when h is not this process's; the allocation's base otherwise. */
static CUdeviceptr own_handle_find(const rm_cuda_ipc_handle_t *h)
{
    CUdeviceptr base = 0;

    pthread_mutex_lock(&own_lock);
    for (unsigned i = 0; i < OWN_HANDLES && base == 0; i++)
        if (own_handles[i].base != 0 && memcmp(&own_handles[i].handle, h, sizeof(*h)) == 0)
            base = own_handles[i].base;
    pthread_mutex_unlock(&own_lock);
    return base;
}

static int own_base(CUdeviceptr base)
{
    int found = 0;

    pthread_mutex_lock(&own_lock);
    for (unsigned i = 0; i < OWN_HANDLES && !found; i++)
        found = own_handles[i].base == base;
    pthread_mutex_unlock(&own_lock);
    return found;
}

remora_status_t rm_cuda_ipc_get(const void *p, rm_cuda_ipc_handle_t *handle, size_t *offset)
{
    CUipcMemHandle h;
    CUdeviceptr base = 0;
    size_t size = 0;
    rm_ptr_kind_t kind;
    remora_status_t status;
    int device;

    if (handle == NULL || offset == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = rm_cuda_init()) != REMORA_OK ||
        (status = rm_cuda_ptr_kind(p, &kind, &device)) != REMORA_OK)
        return status;
    if (kind != RM_PTR_DEVICE)
        return REMORA_ERR_INVALID_PARAM; /* only cuMemAlloc'd memory has handles */
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemGetAddressRange(&base, &size, dptr(p)), "cuMemGetAddressRange");
    if (status == REMORA_OK)
        status = cu_check(cu.IpcGetMemHandle(&h, base), "cuIpcGetMemHandle");
    ctx_pop();
    if (status != REMORA_OK)
        return status;
    memcpy(handle->bytes, h.reserved, sizeof(handle->bytes));
    own_handle_add(handle, base);
    *offset = (size_t)(dptr(p) - base);
    return REMORA_OK;
}

remora_status_t rm_cuda_ipc_open(int device, const rm_cuda_ipc_handle_t *handle, void **base)
{
    CUipcMemHandle h;
    CUdeviceptr d = 0;
    remora_status_t status;

    if (handle == NULL || base == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((d = own_handle_find(handle)) != 0) {
        *base = vptr(d);
        return REMORA_OK;
    }
    memcpy(h.reserved, handle->bytes, sizeof(h.reserved));
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = cu_check(cu.IpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                      "cuIpcOpenMemHandle");
    ctx_pop();
    if (status == REMORA_OK)
        *base = vptr(d);
    return status;
}

remora_status_t rm_cuda_ipc_close(int device, void *base)
{
    remora_status_t status;

    if (base == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (own_base(dptr(base)))
        return REMORA_OK; /* opened as our own allocation: nothing to close */
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = cu_check(cu.IpcCloseMemHandle(dptr(base)), "cuIpcCloseMemHandle");
    ctx_pop();
    return status;
}

remora_status_t rm_cuda_ptr_alloc(const void *p, uint64_t *id, void **base, size_t *size)
{
    int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                   CU_POINTER_ATTRIBUTE_RANGE_START, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned type = 0;
    unsigned long long bid = 0;
    CUdeviceptr b = 0;
    size_t n = 0;
    void *data[] = {&type, &bid, &b, &n};

    if (id == NULL || base == NULL || size == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if (rm_cuda_init() != REMORA_OK)
        return REMORA_ERR_UNSUPPORTED;
    CUresult r = ptr_query(p, 4, attrs, data);
    if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE || bid == 0)
        return REMORA_ERR_INVALID_PARAM;
    *id   = bid;
    *base = vptr(b);
    *size = n;
    return REMORA_OK;
}

remora_status_t rm_cuda_ptr_range(int device, const void *p, void **base, size_t *size)
{
    CUdeviceptr b = 0;
    size_t n = 0;
    remora_status_t status;

    if (base == NULL || size == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(device)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemGetAddressRange(&b, &n, dptr(p)), "cuMemGetAddressRange");
    ctx_pop();
    if (status == REMORA_OK) {
        *base = vptr(b);
        *size = n;
    }
    return status;
}

/* ---------------------------------------------------------------- caller streams */

/*
 * The caller's CUstream, given as an opaque pointer. Work is enqueued with
 * the stream's own context current (cuStreamGetCtx). Usually it already is
 * (the caller just launched on that stream): then nothing is pushed, and
 * ctx_leave() has nothing to undo. A push and a pop per call were a third of
 * a queued stream signal's driver calls (src/gpu/stream.c).
 */
static remora_status_t raw_push(void *stream, int *pushed)
{
    CUcontext ctx = NULL;
    CUresult r;

    *pushed = 0;

    if (rm_cuda_init() != REMORA_OK)
        return REMORA_ERR_UNSUPPORTED;
    /* The default streams (legacy NULL, 0x1; per-thread, 0x2) synchronize
     * with every blocking stream of the device, the proxy's copies included:
     * stream operations take a stream of the caller's own. A destroyed
     * handle cannot be told from a live one: like CUDA, remora cannot check
     * it. */
    if ((uintptr_t)stream <= 2) {
        rm_error("stream operations need a stream of your own (cudaStreamCreateWithFlags), "
                 "not a default stream");
        return REMORA_ERR_INVALID_PARAM;
    }
    r = cu.StreamGetCtx((CUstream)stream, &ctx);
    if (r != CUDA_SUCCESS || ctx == NULL) {
        rm_error("not a CUDA stream: %p (%s)", stream, cu_string(r));
        return REMORA_ERR_INVALID_PARAM;
    }
    return push_unless_current(ctx, pushed);
}

remora_status_t rm_cuda_raw_check(void *stream, int *capturing)
{
    remora_status_t status;
    int pushed;
    int cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r;

    if ((status = raw_push(stream, &pushed)) != REMORA_OK)
        return status;
    r = cu.StreamIsCapturing((CUstream)stream, &cap);
    ctx_leave(pushed);
    if (r != CUDA_SUCCESS) {
        rm_error("cuStreamIsCapturing(%p): %s", stream, cu_string(r));
        return r == CUDA_ERROR_INVALID_HANDLE ? REMORA_ERR_INVALID_PARAM : REMORA_ERR_IO;
    }
    if (cap != CU_STREAM_CAPTURE_STATUS_NONE && cap != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        rm_error("stream %p: its capture was invalidated", stream);
        return REMORA_ERR_INVALID_PARAM;
    }
    if (capturing)
        *capturing = cap == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return REMORA_OK;
}

remora_status_t rm_cuda_stream_write64(rm_cuda_stream_h stream, void *dev_addr, uint64_t value)
{
    remora_status_t status;
    int pushed;

    if (stream == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_enter(stream->device, &pushed)) != REMORA_OK)
        return status;
    status = cu_check(cu.StreamWriteValue64(stream->cu, dptr(dev_addr), value, 0),
                      "cuStreamWriteValue64");
    ctx_leave(pushed);
    return status;
}

remora_status_t rm_cuda_raw_write64(void *stream, void *dev_addr, uint64_t value)
{
    remora_status_t status;
    int pushed;

    if ((status = raw_push(stream, &pushed)) != REMORA_OK)
        return status;
    status = cu_check(cu.StreamWriteValue64((CUstream)stream, dptr(dev_addr), value, 0),
                      "cuStreamWriteValue64");
    ctx_leave(pushed);
    return status;
}

remora_status_t rm_cuda_raw_wait64(void *stream, void *dev_addr, uint64_t value, int eq)
{
    remora_status_t status;
    int pushed;

    if ((status = raw_push(stream, &pushed)) != REMORA_OK)
        return status;
    status = cu_check(cu.StreamWaitValue64((CUstream)stream, dptr(dev_addr), value,
                                           eq ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ),
                      "cuStreamWaitValue64");
    ctx_leave(pushed);
    return status;
}

int rm_cuda_stream_device(void *stream)
{
    CUdevice dev;
    int pushed, ordinal = -1;

    if (raw_push(stream, &pushed) != REMORA_OK)
        return -1;
    if (cu.CtxGetDevice(&dev) == CUDA_SUCCESS)
        ordinal = (int)dev;
    ctx_leave(pushed);
    return ordinal;
}

remora_status_t rm_cuda_raw_copy(void *stream, void *dst, const void *src, size_t length)
{
    remora_status_t status;
    int pushed;

    if (length == 0)
        return REMORA_OK;
    if ((status = raw_push(stream, &pushed)) != REMORA_OK)
        return status;
    status = cu_check(cu.MemcpyAsync(dptr(dst), dptr(src), length, (CUstream)stream),
                      "cuMemcpyAsync");
    ctx_leave(pushed);
    return status;
}

remora_status_t rm_cuda_raw_sync(void *stream)
{
    remora_status_t status;
    int pushed;

    if ((status = raw_push(stream, &pushed)) != REMORA_OK)
        return status;
    status = cu_check(cu.StreamSynchronize((CUstream)stream), "cuStreamSynchronize");
    ctx_leave(pushed);
    return status;
}

remora_status_t rm_cuda_host_register_mapped(void *p, size_t length, void **dev_p)
{
    remora_status_t status;
    CUdeviceptr d = 0;

    if (p == NULL || length == 0 || dev_p == NULL)
        return REMORA_ERR_INVALID_PARAM;
    if ((status = ctx_push(0)) != REMORA_OK)
        return status;
    /* A stream operation enqueued while the caller captures a graph sets up
     * its words here: registering memory is no stream work, so let it through
     * the capture (CU_STREAM_CAPTURE_MODE_RELAXED), then restore the mode. */
    int mode = 2;
    cu.ThreadExchangeStreamCaptureMode(&mode);
    CUresult r = cu.MemHostRegister(p, length, CU_MEMHOSTREGISTER_PORTABLE |
                                                   CU_MEMHOSTREGISTER_DEVICEMAP);
    cu.ThreadExchangeStreamCaptureMode(&mode);
    int mine = r == CUDA_SUCCESS;
    if (r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
        /* Pinned by someone else (UCX): usable if it is mapped for the GPU. */
        r = cu.MemHostGetDevicePointer(&d, p, 0);
        if (r == CUDA_SUCCESS && !borrowed_swap(NULL, p))
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        status = cu_check(r, "cuMemHostRegister (memory pinned elsewhere)");
    } else {
        status = cu_check(r, "cuMemHostRegister");
    }
    if (mine &&
        (status = cu_check(cu.MemHostGetDevicePointer(&d, p, 0), "cuMemHostGetDevicePointer")) !=
            REMORA_OK)
        cu.MemHostUnregister(p);
    ctx_pop();
    if (status == REMORA_OK)
        *dev_p = vptr(d);
    return status;
}
