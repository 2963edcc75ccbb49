/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The remora CPython extension (remora._remora): shared declarations.
 *
 * Design notes
 * - Every Python object that holds a library handle starts with rp_obj_t. It
 *   is linked into its context's list of children, so Context.close() can
 *   close them all, newest first (dependents are always made after what they
 *   depend on, so newest-first is a safe destruction order).
 * - The GIL is released around every library call that may block (RP_BLOCK).
 *   While a call runs without the GIL, the object's `busy` count is raised;
 *   close() on a busy object only marks it, and the last call to return does
 *   the closing. So a handle is never destroyed under a running call.
 *   `busy` is only touched with the GIL held.
 * - Library callbacks (events) never take the GIL: they queue and signal an
 *   eventfd; Python reads the queue (see client.c).
 * - Memory given to the library by Python (a buffer, a CuPy array, a torch
 *   tensor) is held (Py_buffer or a reference to the exporter) by a Memory
 *   object for as long as the library may touch it (see server.c).
 */
#ifndef REMORA_PY_RP_H
#define REMORA_PY_RP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>

#include <remora/remora.h>

typedef struct rp_obj rp_obj_t;
typedef struct rp_context rp_context_t;
typedef struct rp_queue rp_queue_t; /* queue.c */

/* Common head of every handle-holding object. */
struct rp_obj {
    PyObject_HEAD
    rp_obj_t     *prev, *next;  /* siblings in the context's list */
    rp_context_t *ctx;          /* strong reference; NULL for a context itself */
    int           busy;         /* calls running with the GIL released */
    int           closing;      /* close() was asked while busy */
    int           closed;
    /* Frees the library handle (called once, GIL held; may release it). */
    void        (*destroy)(rp_obj_t *self);
    /* Before a close: let go of what the object holds of itself that counts
     * as busy (a ring's own view of its reserved slot), if nothing else uses
     * it (rp_obj_close, and Context.close before it looks for busy
     * children). NULL for most. */
    void        (*quiesce)(rp_obj_t *self);
};

struct rp_context {
    rp_obj_t         base;
    remora_context_h handle;
    rp_obj_t        *first, *last; /* children, oldest first */
    rp_queue_t      *logq;         /* log lines (Context(log=...)), else NULL */
};

/* A method table entry taking keywords. */
#define RP_KW    (METH_VARARGS | METH_KEYWORDS)
#define RP_FN(f) (PyCFunction)(void (*)(void))(f)

/* Types. */
extern PyTypeObject rp_ContextType, rp_MemoryType, rp_ServerType, rp_ClientType,
    rp_RequestType, rp_RingType, rp_SubscriptionType, rp_ElementType, rp_DeviceViewType,
    rp_SlotContextType, rp_SlotBufferType, rp_SignalsType;
extern PyTypeObject *rp_RegionInfoType, *rp_EventType;

/* ---------------------------------------------------------------- errors (errors.c) */

int       rp_errors_init(PyObject *module);
/* Raise the exception class of status with message "what: <status string>". Returns NULL. */
PyObject *rp_raise(remora_status_t status, const char *fmt, ...);
/* Raise remora.Closed for a closed object. Returns NULL. */
PyObject *rp_raise_closed(const char *what);

/* ---------------------------------------------------------------- objects (module.c) */

void rp_obj_link(rp_obj_t *o, rp_context_t *ctx);
/* Close now, or when the last running call returns. Returns -1 (exception set)
 * when the object is busy and `must` is set. */
int  rp_obj_close(rp_obj_t *o, int must);
void rp_obj_dealloc_common(rp_obj_t *o);
/* 0 if open, else -1 with remora.Closed raised. */
static inline int rp_check_open(rp_obj_t *o, const char *what)
{
    if (o->closed || o->closing) {
        rp_raise_closed(what);
        return -1;
    }
    return 0;
}
static inline void rp_enter(rp_obj_t *o) { o->busy++; }
void rp_leave(rp_obj_t *o);

/* Seconds (None: the default) to library milliseconds (-1: default). */
int rp_timeout_ms(PyObject *obj, int *ms);
/* An "O&" converter: a Python int from 0 to UINT_MAX into an unsigned
 * (OverflowError otherwise: nothing is silently cut to 32 bits). */
int rp_uint_conv(PyObject *obj, void *out);
/* A Python int >= 0 and < 2^64 as an offset; OutOfRange otherwise. */
int rp_offset(PyObject *obj, uint64_t *off);
/* A Python int >= 0 (or None -> `dflt`) as a size; OutOfRange when negative. */
int rp_size(PyObject *obj, size_t dflt, size_t *out);

/* ---------------------------------------------------------------- queues (queue.c) */

/* Items of one fixed size, pushed by library threads (no GIL), taken by
 * Python. Owned by the object that made it; freed only at its dealloc, as
 * another Python thread may be waiting on it. */
rp_queue_t *rp_queue_new(size_t item_size, size_t max);
void        rp_queue_free(rp_queue_t *q);
/* Copy item in (any thread, no GIL, never blocks long); when full, the oldest goes. */
void        rp_queue_push(rp_queue_t *q, const void *item);
/* Take the oldest item into out, waiting up to timeout (Python seconds; NULL:
 * not at all; None: forever) with the GIL released. While waiting, owner (if
 * not NULL) is busy, and its close ends the wait. 1 taken, 0 none came, -1
 * exception (bad timeout, a signal's handler raised). */
int         rp_queue_take(rp_queue_t *q, rp_obj_t *owner, PyObject *timeout, void *out);
/* Wake every waiter (after the owner closed). */
void        rp_queue_wake(rp_queue_t *q);
/* An eventfd readable exactly while items are queued. */
int         rp_queue_fd(rp_queue_t *q);
uint64_t    rp_queue_dropped(rp_queue_t *q);

/* ---------------------------------------------------------------- buffers (buffer.c) */

/* Memory given by Python: host (buffer protocol, DLPack CPU) or CUDA
 * (__cuda_array_interface__, DLPack CUDA). */
typedef struct rp_buf {
    void     *ptr;
    size_t    len;
    int       cuda;     /* device memory */
    int       device;   /* CUDA ordinal, -1 for host */
    int       readonly;
    int       has_view;
    Py_buffer view;     /* buffer protocol */
    PyObject *owner;    /* strong reference to the exporter (GPU, DLPack) */
} rp_buf_t;

/* Acquire obj's memory; writable: refuse read-only memory (TypeError). */
int  rp_buf_get(PyObject *obj, int writable, rp_buf_t *b);
void rp_buf_release(rp_buf_t *b);
/* Create an object exposing device memory through __cuda_array_interface__. */
PyObject *rp_device_view_new(PyObject *owner, void *ptr, size_t len, int device, int readonly);
void      rp_device_view_invalidate(PyObject *view);

/* ---------------------------------------------------------------- shared helpers */

remora_context_h rp_context_handle(rp_context_t *ctx);
remora_mem_h     rp_memory_handle(PyObject *mem);
int              rp_memory_readonly(PyObject *mem);
/* rp_buf_get for a Memory object. */
int              rp_memory_buf(PyObject *mem, int writable, rp_buf_t *b);
/* Subscription for Client.subscribe (ring.c). */
PyObject        *rp_subscribe(PyObject *client, remora_client_h handle, PyObject *args,
                              PyObject *kw);
/* A new Memory registering obj's memory (buffer, CuPy, torch...). */
PyObject        *rp_memory_from_object(rp_context_t *ctx, PyObject *obj, int writable);
remora_ring_h    rp_ring_handle(PyObject *ring);
PyObject        *rp_ring_wrap(rp_context_t *ctx, remora_ring_h handle);
/* A new Element of `size` bytes (uninitialised), seq/drops set later. */
PyObject        *rp_element_new(size_t size);
void            *rp_element_data(PyObject *elem);
void             rp_element_set(PyObject *elem, uint64_t seq, uint64_t drops);
/* Signals (signals.c). */
remora_signals_h rp_signals_handle(PyObject *sig);
/* An int in [-2**63, 2**64) as a signal value (negatives wrap). */
int              rp_signal_value(PyObject *obj, uint64_t *v);
/* "set" / "add" as an op; ValueError otherwise. */
int              rp_signal_op(const char *s, remora_signal_op_t *op);

#define RP_MODULE "remora._remora"

#endif
