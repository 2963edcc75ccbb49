/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory and Server.
 *
 * Memory owns one remora_mem_h: either memory the library allocated (host:
 * shareable, so same-host clients map it; or GPU), or memory Python gave it
 * (a bytearray, a NumPy array, a CuPy array, a torch tensor...), registered
 * in place. A registered Memory holds the exporter's Py_buffer (or a
 * reference to it) until it is deallocated, which cannot happen while a
 * Server still holds it.
 *
 * A Server keeps every Memory it exposes (regions) and every one it stopped
 * exposing (retired: after replace/unexpose, connected clients may still use
 * the old memory until they have followed the change) until sync_clients()
 * says no client uses them any more, or the server is closed.
 *
 * Host Memory exports the buffer protocol; each export counts as a running
 * call (busy), so the memory cannot be freed under a memoryview.
 */
#include "rp.h"

typedef struct rp_memory {
    rp_obj_t     base;
    remora_mem_h handle;
    rp_buf_t     buf; /* registered memory; buf.ptr == NULL when allocated */
    void        *ptr;
    size_t       len;
    int          cuda;
    int          device;
    int          readonly;
} rp_memory_t;

typedef struct rp_server {
    rp_obj_t        base;
    remora_server_h handle;
    PyObject       *regions; /* name -> Memory, Ring or Signals */
    PyObject       *retired; /* [Memory, Ring or Signals] */
    char            addr[128];
} rp_server_t;

/* ---------------------------------------------------------------- Memory */

remora_mem_h rp_memory_handle(PyObject *mem) { return ((rp_memory_t *)mem)->handle; }
int          rp_memory_readonly(PyObject *mem) { return ((rp_memory_t *)mem)->readonly; }

int rp_memory_buf(PyObject *mem, int writable, rp_buf_t *b)
{
    rp_memory_t *m = (rp_memory_t *)mem;

    if (rp_check_open(&m->base, "Memory") < 0)
        return -1;
    if (writable && m->readonly) {
        PyErr_SetString(PyExc_TypeError, "a writable buffer is required, not read-only Memory");
        return -1;
    }
    b->ptr = m->ptr;
    b->len = m->len;
    b->cuda = m->cuda;
    b->device = m->device;
    b->readonly = m->readonly;
    b->owner = Py_NewRef(mem);
    return 0;
}

static void rp_memory_destroy(rp_obj_t *o)
{
    rp_memory_t *self = (rp_memory_t *)o;
    remora_mem_h h = self->handle;

    self->handle = NULL;
    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS
        remora_mem_destroy(h);
        Py_END_ALLOW_THREADS
    }
}

static rp_memory_t *rp_memory_alloc(rp_context_t *ctx)
{
    rp_memory_t *self = PyObject_New(rp_memory_t, &rp_MemoryType);

    if (self == NULL)
        return NULL;
    memset((char *)self + sizeof(PyObject), 0, sizeof(*self) - sizeof(PyObject));
    self->base.destroy = rp_memory_destroy;
    self->device = -1;
    rp_obj_link(&self->base, ctx);
    return self;
}

static int rp_memory_create(rp_memory_t *self, remora_mem_params_t *p)
{
    remora_status_t st;
    remora_mem_h    h = NULL;

    Py_BEGIN_ALLOW_THREADS
    st = remora_mem_create(self->base.ctx->handle, p, &h);
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK) {
        rp_raise(st, "remora_mem_create(%zu bytes)", p->length);
        return -1;
    }
    self->handle = h;
    self->ptr = remora_mem_address(h);
    self->len = remora_mem_length(h);
    self->cuda = remora_mem_type(h) == REMORA_MEM_CUDA;
    self->device = remora_mem_device(h);
    return 0;
}

PyObject *rp_memory_from_object(rp_context_t *ctx, PyObject *obj, int writable)
{
    rp_memory_t        *self;
    remora_mem_params_t p = {.field_mask = REMORA_MEM_FIELD_ADDRESS | REMORA_MEM_FIELD_LENGTH};

    if (Py_IS_TYPE(obj, &rp_MemoryType)) {
        rp_memory_t *m = (rp_memory_t *)obj;
        if (rp_check_open(&m->base, "Memory") < 0)
            return NULL;
        if (writable && m->readonly) {
            PyErr_SetString(PyExc_TypeError, "a writable region needs writable memory");
            return NULL;
        }
        return Py_NewRef(obj);
    }
    self = rp_memory_alloc(ctx);
    if (self == NULL)
        return NULL;
    if (rp_buf_get(obj, writable, &self->buf) < 0)
        goto fail;
    if (self->buf.len == 0) {
        PyErr_SetString(PyExc_ValueError, "cannot register an empty buffer");
        goto fail;
    }
    p.address = self->buf.ptr;
    p.length = self->buf.len;
    if (rp_memory_create(self, &p) < 0)
        goto fail;
    self->readonly = self->buf.readonly;
    return (PyObject *)self;

fail:
    Py_DECREF(self);
    return NULL;
}

static PyObject *rp_memory_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char        *kwlist[] = {"context", "size", "device", "buffer", "writable", NULL};
    PyObject           *ctx, *size = Py_None, *buffer = Py_None;
    int                 device = -1, writable = 1;
    rp_memory_t        *self;
    remora_mem_params_t p = {.field_mask = REMORA_MEM_FIELD_LENGTH};

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|O$iOp", kwlist, &rp_ContextType, &ctx, &size,
                                     &device, &buffer, &writable))
        return NULL;
    if (rp_check_open((rp_obj_t *)ctx, "Context") < 0)
        return NULL;
    if (buffer != Py_None) {
        if (size != Py_None || device != -1) {
            PyErr_SetString(PyExc_TypeError, "give either buffer or size (and device)");
            return NULL;
        }
        return rp_memory_from_object((rp_context_t *)ctx, buffer, writable);
    }
    if (size == Py_None) {
        PyErr_SetString(PyExc_TypeError, "Memory needs a size or a buffer");
        return NULL;
    }
    if (rp_size(size, 0, &p.length) < 0)
        return NULL;
    if (device >= 0) {
        p.field_mask |= REMORA_MEM_FIELD_TYPE | REMORA_MEM_FIELD_DEVICE;
        p.type = REMORA_MEM_CUDA;
        p.device = device;
    }
    self = rp_memory_alloc((rp_context_t *)ctx);
    if (self == NULL)
        return NULL;
    if (rp_memory_create(self, &p) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void rp_memory_dealloc(rp_memory_t *self)
{
    rp_obj_dealloc_common(&self->base);
    rp_buf_release(&self->buf); /* no region uses it any more: see the notes on top */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int rp_memory_getbuffer(rp_memory_t *self, Py_buffer *view, int flags)
{
    if (self->base.closed || self->base.closing) {
        PyErr_SetString(PyExc_BufferError, "Memory is closed");
        return -1;
    }
    if (self->cuda) {
        PyErr_SetString(PyExc_BufferError,
                        "GPU memory has no buffer protocol: use __cuda_array_interface__");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, (Py_ssize_t)self->len,
                          self->readonly, flags) < 0)
        return -1;
    rp_enter(&self->base); /* an export keeps the memory from being freed */
    return 0;
}

static void rp_memory_releasebuffer(rp_memory_t *self, Py_buffer *view)
{
    rp_leave(&self->base);
}

static PyBufferProcs rp_memory_as_buffer = {
    .bf_getbuffer = (getbufferproc)rp_memory_getbuffer,
    .bf_releasebuffer = (releasebufferproc)rp_memory_releasebuffer,
};

static PyObject *rp_memory_close(rp_memory_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_memory_exit(rp_memory_t *self, PyObject *args)
{
    return rp_memory_close(self, NULL);
}

static PyObject *rp_enter_self(PyObject *self, PyObject *unused) { return Py_NewRef(self); }

static PyObject *rp_memory_cai(rp_memory_t *self, void *closure)
{
    if (!self->cuda) {
        PyErr_SetString(PyExc_AttributeError, "host Memory has no __cuda_array_interface__");
        return NULL;
    }
    if (rp_check_open(&self->base, "Memory") < 0)
        return NULL;
    return Py_BuildValue("{s:(n),s:s,s:(NO),s:O,s:i,s:O}", "shape", (Py_ssize_t)self->len,
                         "typestr", "|u1", "data", PyLong_FromVoidPtr(self->ptr),
                         self->readonly ? Py_True : Py_False, "strides", Py_None, "version",
                         3, "stream", Py_None);
}

static PyObject *rp_memory_ptr(rp_memory_t *self, void *closure)
{
    return PyLong_FromVoidPtr(self->ptr);
}

static PyObject *rp_memory_mem_type(rp_memory_t *self, void *closure)
{
    return PyUnicode_FromString(self->cuda ? "cuda" : "host");
}

static PyObject *rp_memory_closed(rp_memory_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static Py_ssize_t rp_memory_len(rp_memory_t *self) { return (Py_ssize_t)self->len; }

static PyObject *rp_memory_repr(rp_memory_t *self)
{
    return PyUnicode_FromFormat("<remora.Memory %zu bytes, %s%s%s>", self->len,
                                self->cuda ? "cuda" : "host",
                                self->buf.ptr != NULL ? ", registered" : "",
                                self->base.closed ? ", closed" : "");
}

static PyMethodDef rp_memory_methods[] = {
    {"close", (PyCFunction)rp_memory_close, METH_NOARGS,
     "close()\n--\n\nDrop this handle. Regions exposing the memory keep it alive. Busy while "
     "a memoryview of it exists."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_memory_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_memory_getset[] = {
    {"__cuda_array_interface__", (getter)rp_memory_cai, NULL,
     "GPU memory only: CUDA Array Interface v3, a 1-D uint8 array.", NULL},
    {"ptr", (getter)rp_memory_ptr, NULL, "Address (a device pointer for GPU memory).", NULL},
    {"mem_type", (getter)rp_memory_mem_type, NULL, "'host' or 'cuda'.", NULL},
    {"closed", (getter)rp_memory_closed, NULL, "True once closed.", NULL},
    {NULL},
};

static PyMemberDef rp_memory_members[] = {
    {"device", T_INT, offsetof(rp_memory_t, device), READONLY, "CUDA ordinal; -1 for host."},
    {"readonly", T_BOOL, offsetof(rp_memory_t, readonly), READONLY, NULL},
    {NULL},
};

static PySequenceMethods rp_memory_seq = {.sq_length = (lenfunc)rp_memory_len};

PyTypeObject rp_MemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Memory",
    .tp_basicsize = sizeof(rp_memory_t),
    .tp_dealloc = (destructor)rp_memory_dealloc,
    .tp_repr = (reprfunc)rp_memory_repr,
    .tp_as_sequence = &rp_memory_seq,
    .tp_as_buffer = &rp_memory_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Memory(context, size=None, *, device=-1, buffer=None, writable=True)\n--\n\n"
        "Memory for regions. Memory(ctx, size) allocates shareable host memory (same-host "
        "clients map it: the fastest path); device=N allocates on GPU N. "
        "Memory(ctx, buffer=obj) registers obj's memory in place (any C-contiguous "
        "bytes-like object, __cuda_array_interface__ or DLPack tensor). Host memory "
        "supports the buffer protocol (numpy.frombuffer(mem, ...)); GPU memory "
        "__cuda_array_interface__ (cupy.asarray(mem)).",
    .tp_methods = rp_memory_methods,
    .tp_getset = rp_memory_getset,
    .tp_members = rp_memory_members,
    .tp_new = rp_memory_new,
};

/* ---------------------------------------------------------------- Server */

static void rp_server_destroy(rp_obj_t *o)
{
    rp_server_t    *self = (rp_server_t *)o;
    remora_server_h h = self->handle;

    self->handle = NULL;
    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS
        remora_server_destroy(h);
        Py_END_ALLOW_THREADS
    }
    /* No connection left: the memories may go. */
    Py_CLEAR(self->regions);
    Py_CLEAR(self->retired);
}

static PyObject *rp_server_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char           *kwlist[] = {"context", "listen", "token", "lanes", "max_conns",
                                       "max_conns_per_host", NULL};
    PyObject              *ctx;
    const char            *listen = "127.0.0.1:0";
    Py_buffer              token = {0};
    unsigned               lanes = 0, max_conns = 0, max_per_host = 0;
    remora_server_params_t p = {.field_mask = REMORA_SERVER_FIELD_LISTEN_ADDR};
    rp_server_t           *self;
    remora_status_t        st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|s$z*O&O&O&", kwlist, &rp_ContextType,
                                     &ctx, &listen, &token, rp_uint_conv, &lanes, rp_uint_conv,
                                     &max_conns, rp_uint_conv, &max_per_host))
        return NULL;
    if (rp_check_open((rp_obj_t *)ctx, "Context") < 0)
        goto fail_token;
    p.listen_addr = listen;
    if (token.buf != NULL) {
        p.field_mask |= REMORA_SERVER_FIELD_TOKEN;
        p.token = token.buf;
        p.token_len = (size_t)token.len;
    }
    if (lanes != 0) {
        p.field_mask |= REMORA_SERVER_FIELD_LANES;
        p.lanes = lanes;
    }
    if (max_conns != 0 || max_per_host != 0) {
        p.field_mask |= REMORA_SERVER_FIELD_MAX_CONNS;
        p.max_conns = max_conns != 0 ? max_conns : 4096;
        p.max_conns_per_host = max_per_host != 0 ? max_per_host : 1024;
    }
    self = PyObject_New(rp_server_t, &rp_ServerType);
    if (self == NULL)
        goto fail_token;
    memset((char *)self + sizeof(PyObject), 0, sizeof(*self) - sizeof(PyObject));
    self->base.destroy = rp_server_destroy;
    rp_obj_link(&self->base, (rp_context_t *)ctx);
    self->regions = PyDict_New();
    self->retired = PyList_New(0);
    if (self->regions == NULL || self->retired == NULL)
        goto fail;
    Py_BEGIN_ALLOW_THREADS
    st = remora_server_create(((rp_context_t *)ctx)->handle, &p, &self->handle);
    if (st == REMORA_OK)
        st = remora_server_address(self->handle, self->addr, sizeof(self->addr));
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK) {
        rp_raise(st, "remora_server_create(%s)", listen);
        goto fail;
    }
    PyBuffer_Release(&token);
    return (PyObject *)self;

fail:
    Py_DECREF(self);
fail_token:
    if (token.buf != NULL)
        PyBuffer_Release(&token);
    return NULL;
}

static void rp_server_dealloc(rp_server_t *self)
{
    rp_obj_dealloc_common(&self->base);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Region window params from keyword arguments. */
static int rp_region_params(int writable, PyObject *offset, PyObject *length,
                            remora_region_params_t *rp)
{
    memset(rp, 0, sizeof(*rp));
    if (writable >= 0) {
        rp->field_mask |= REMORA_REGION_FIELD_FLAGS;
        rp->flags = writable ? REMORA_REGION_WRITABLE : 0;
    }
    if (offset != Py_None) {
        rp->field_mask |= REMORA_REGION_FIELD_OFFSET;
        if (rp_size(offset, 0, &rp->offset) < 0)
            return -1;
    }
    if (length != Py_None) {
        rp->field_mask |= REMORA_REGION_FIELD_LENGTH;
        if (rp_size(length, 0, &rp->length) < 0)
            return -1;
    }
    return 0;
}

/* expose/replace: op 0 = expose, 1 = replace. */
static PyObject *rp_server_put(rp_server_t *self, PyObject *args, PyObject *kw, int op)
{
    static char           *kwlist[] = {"name", "memory", "writable", "offset", "length", NULL};
    const char            *name;
    PyObject              *obj, *wobj = Py_None, *offset = Py_None, *length = Py_None, *mem, *old;
    int                    writable;
    remora_region_params_t rp;
    remora_status_t        st;
    remora_mem_h           mh;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$OOO", kwlist, &name, &obj, &wobj, &offset,
                                     &length))
        return NULL;
    if (rp_check_open(&self->base, "Server") < 0)
        return NULL;
    if (op == 0 && PyObject_TypeCheck(obj, &rp_RingType)) {
        PyErr_SetString(PyExc_TypeError, "use expose_ring() for a Ring");
        return NULL;
    }
    writable = wobj == Py_None ? (op == 0 ? 0 : -1) : PyObject_IsTrue(wobj);
    if (writable == -1 && PyErr_Occurred())
        return NULL;
    if (rp_region_params(writable, offset, length, &rp) < 0)
        return NULL;
    mem = rp_memory_from_object(self->base.ctx, obj, writable == 1);
    if (mem == NULL)
        return NULL;
    mh = rp_memory_handle(mem);
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = op == 0 ? remora_server_expose(self->handle, name, mh, &rp)
                 : remora_server_replace(self->handle, name, mh, &rp);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK) {
        Py_DECREF(mem);
        return rp_raise(st, "%s(%s)", op == 0 ? "expose" : "replace", name);
    }
    if (self->regions == NULL) { /* closed while we ran: the library let go already */
        Py_DECREF(mem);
        Py_RETURN_NONE;
    }
    old = PyDict_GetItemString(self->regions, name);
    if (old != NULL && PyList_Append(self->retired, old) < 0) {
        Py_DECREF(mem);
        return NULL;
    }
    if (PyDict_SetItemString(self->regions, name, mem) < 0) {
        Py_DECREF(mem);
        return NULL;
    }
    Py_DECREF(mem);
    Py_RETURN_NONE;
}

static PyObject *rp_server_expose(rp_server_t *self, PyObject *args, PyObject *kw)
{
    return rp_server_put(self, args, kw, 0);
}

static PyObject *rp_server_replace(rp_server_t *self, PyObject *args, PyObject *kw)
{
    return rp_server_put(self, args, kw, 1);
}

/* expose_ring / expose_signals: the library call, then the server keeps obj. */
static PyObject *rp_server_expose_obj(rp_server_t *self, PyObject *args, PyTypeObject *type,
                                      const char *what)
{
    const char     *name;
    PyObject       *obj;
    remora_status_t st;

    if (!PyArg_ParseTuple(args, "sO!", &name, type, &obj))
        return NULL;
    if (rp_check_open(&self->base, "Server") < 0 || rp_check_open((rp_obj_t *)obj, what) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = type == &rp_RingType
             ? remora_server_expose_ring(self->handle, name, rp_ring_handle(obj))
             : remora_server_expose_signals(self->handle, name, rp_signals_handle(obj));
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "expose %s (%s)", what, name);
    if (self->regions != NULL && PyDict_SetItemString(self->regions, name, obj) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_server_expose_ring(rp_server_t *self, PyObject *args)
{
    return rp_server_expose_obj(self, args, &rp_RingType, "Ring");
}

static PyObject *rp_server_expose_signals(rp_server_t *self, PyObject *args)
{
    return rp_server_expose_obj(self, args, &rp_SignalsType, "Signals");
}

static PyObject *rp_server_unexpose(rp_server_t *self, PyObject *args)
{
    const char     *name;
    remora_status_t st;
    PyObject       *old;

    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    if (rp_check_open(&self->base, "Server") < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_server_unexpose(self->handle, name);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "unexpose(%s)", name);
    if (self->regions == NULL)
        Py_RETURN_NONE;
    old = PyDict_GetItemString(self->regions, name);
    if (old != NULL) {
        if (PyList_Append(self->retired, old) < 0 || PyDict_DelItemString(self->regions, name) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *rp_server_sync_clients(rp_server_t *self, PyObject *args, PyObject *kw)
{
    static char    *kwlist[] = {"timeout", NULL};
    PyObject       *tobj = NULL;
    int             ms;
    unsigned        dropped = 0;
    remora_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &tobj))
        return NULL;
    if (rp_check_open(&self->base, "Server") < 0)
        return NULL;
    if (tobj == NULL || tobj == Py_None)
        ms = 2000;
    else if (rp_timeout_ms(tobj, &ms) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_server_sync_clients(self->handle, ms, &dropped);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK && st != REMORA_ERR_TIMED_OUT)
        return rp_raise(st, "sync_clients");
    /* Either way no client uses the old memory any more. */
    if (self->retired != NULL && PyList_SetSlice(self->retired, 0, PY_SSIZE_T_MAX, NULL) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(dropped);
}

static PyObject *rp_server_close(rp_server_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_server_exit(rp_server_t *self, PyObject *args)
{
    return rp_server_close(self, NULL);
}

static PyObject *rp_server_address(rp_server_t *self, void *closure)
{
    return PyUnicode_FromString(self->addr);
}

static PyObject *rp_server_regions(rp_server_t *self, void *closure)
{
    if (self->regions == NULL)
        return PyDict_New();
    return PyDict_Copy(self->regions);
}

static PyObject *rp_server_retired(rp_server_t *self, void *closure)
{
    return PyLong_FromSsize_t(self->retired != NULL ? PyList_GET_SIZE(self->retired) : 0);
}

static PyObject *rp_server_closed(rp_server_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static PyObject *rp_server_repr(rp_server_t *self)
{
    return PyUnicode_FromFormat("<remora.Server %s%s>", self->addr,
                                self->base.closed ? " closed" : "");
}

static PyMethodDef rp_server_methods[] = {
    {"expose", RP_FN(rp_server_expose), RP_KW,
     "expose(name, memory, *, writable=False, offset=None, length=None)\n--\n\n"
     "Expose memory under name: a Memory, or any C-contiguous buffer (bytearray, NumPy "
     "array; read-only buffers only for read-only regions), CuPy array or torch tensor, "
     "registered in place and kept alive by the server. offset/length: a window of it. "
     "Exists if the name is taken."},
    {"replace", RP_FN(rp_server_replace), RP_KW,
     "replace(name, memory, *, writable=None, offset=None, length=None)\n--\n\n"
     "Point a region at other memory (any size). Clients get a 'region_changed' event. The "
     "old memory is kept until sync_clients() or close()."},
    {"expose_ring", (PyCFunction)rp_server_expose_ring, METH_VARARGS,
     "expose_ring(name, ring)\n--\n\nExpose a Ring (read-only to clients)."},
    {"expose_signals", (PyCFunction)rp_server_expose_signals, METH_VARARGS,
     "expose_signals(name, signals)\n--\n\nExpose Signals: clients set or add to them "
     "(Client.signal); plain writes are refused. One server at a time (Busy)."},
    {"unexpose", (PyCFunction)rp_server_unexpose, METH_VARARGS,
     "unexpose(name)\n--\n\nRemove a region; clients get a 'region_removed' event."},
    {"sync_clients", RP_FN(rp_server_sync_clients), RP_KW,
     "sync_clients(timeout=2.0)\n--\n\nWait until every client followed the replacements and "
     "removals so far; clients that did not within timeout are disconnected. Returns how "
     "many were. Afterwards the old memory is released."},
    {"close", (PyCFunction)rp_server_close, METH_NOARGS,
     "close()\n--\n\nStop listening, close every connection, release the memory. Idempotent."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_server_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_server_getset[] = {
    {"address", (getter)rp_server_address, NULL, "'HOST:PORT' actually bound.", NULL},
    {"regions", (getter)rp_server_regions, NULL, "{name: Memory or Ring} exposed now.", NULL},
    {"retired_count", (getter)rp_server_retired, NULL,
     "Memories replaced or unexposed, held until sync_clients() or close().", NULL},
    {"closed", (getter)rp_server_closed, NULL, "True once closed.", NULL},
    {NULL},
};

PyTypeObject rp_ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Server",
    .tp_basicsize = sizeof(rp_server_t),
    .tp_dealloc = (destructor)rp_server_dealloc,
    .tp_repr = (reprfunc)rp_server_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Server(context, listen='127.0.0.1:0', *, token=None, lanes=None, "
              "max_conns=None, max_conns_per_host=None)\n--\n\n"
              "Listen on 'HOST:PORT' (port 0: a free one; see .address) and serve regions "
              "and rings. token: bytes or str of 16..1024 bytes that clients must know.",
    .tp_methods = rp_server_methods,
    .tp_getset = rp_server_getset,
    .tp_new = rp_server_new,
};
