/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Ring (the producer side and local readers), Subscription (a remote ring
 * followed through remora_sub_next) and Element (one element: its bytes, its
 * sequence number and the drops so far; buffer protocol, read-only).
 *
 * reserve() hands out the slot itself: a writable memoryview (host ring) or a
 * DeviceView (GPU ring). commit() releases the memoryview first and refuses
 * (Busy) while something still holds a view of it (a NumPy array made from
 * it), so no Python object can write into a published slot.
 */
#include "rp.h"

typedef struct rp_ring {
    rp_obj_t      base;
    remora_ring_h handle;
    size_t        elem_size, capacity;
    int           cuda;
    int           device;
    void         *reserved; /* the library's reserved slot, until commit */
    PyObject     *slot;     /* memoryview or DeviceView of it, while handed out */
    PyObject     *exporter; /* host: the SlotBuffer behind slot and every view made from it */
} rp_ring_t;

/* Exports a reserved host slot. Every export (the memoryview handed out, and
 * views NumPy & co. derive from it, which share its managed buffer) counts:
 * while any is alive the slot is not committed and the ring not freed. */
typedef struct rp_slot_buffer {
    PyObject_HEAD
    struct rp_ring *ring;
    void           *ptr;
    size_t          len;
    int             exports;
    int             valid;
} rp_slot_buffer_t;

PyTypeObject rp_SlotBufferType;

typedef struct rp_sub {
    rp_obj_t     base;
    remora_sub_h handle;
    PyObject    *client;
    size_t       elem_size;
    int          timeout_ms;
    int          latest;
    uint64_t     seq, drops;
    char         name[REMORA_NAME_MAX + 1];
} rp_sub_t;

typedef struct rp_element {
    PyObject_VAR_HEAD
    uint64_t seq, drops;
    char     data[1];
} rp_element_t;

/* Copies smaller than this keep the GIL: releasing it costs more. */
#define RP_GIL_COPY_MIN (64 * 1024)

/* ---------------------------------------------------------------- Element */

PyObject *rp_element_new(size_t size)
{
    rp_element_t *e = PyObject_NewVar(rp_element_t, &rp_ElementType, (Py_ssize_t)size);

    if (e != NULL)
        e->seq = e->drops = 0;
    return (PyObject *)e;
}

void *rp_element_data(PyObject *elem) { return ((rp_element_t *)elem)->data; }

void rp_element_set(PyObject *elem, uint64_t seq, uint64_t drops)
{
    ((rp_element_t *)elem)->seq = seq;
    ((rp_element_t *)elem)->drops = drops;
}

static void rp_element_dealloc(rp_element_t *e) { PyObject_Free(e); }

static int rp_element_getbuffer(rp_element_t *e, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)e, e->data, Py_SIZE(e), 1, flags);
}

static PyBufferProcs rp_element_as_buffer = {.bf_getbuffer = (getbufferproc)rp_element_getbuffer};

static Py_ssize_t rp_element_len(rp_element_t *e) { return Py_SIZE(e); }

static PyObject *rp_element_repr(rp_element_t *e)
{
    return PyUnicode_FromFormat("<remora.Element seq=%llu drops=%llu, %zd bytes>",
                                (unsigned long long)e->seq, (unsigned long long)e->drops,
                                Py_SIZE(e));
}

static PyObject *rp_element_tobytes(rp_element_t *e, PyObject *unused)
{
    return PyBytes_FromStringAndSize(e->data, Py_SIZE(e));
}

static PyObject *rp_element_richcompare(rp_element_t *e, PyObject *other, int op)
{
    Py_buffer o;
    int       eq;

    if ((op != Py_EQ && op != Py_NE) || !PyObject_CheckBuffer(other))
        Py_RETURN_NOTIMPLEMENTED;
    if (PyObject_GetBuffer(other, &o, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    eq = o.len == Py_SIZE(e) && memcmp(o.buf, e->data, (size_t)o.len) == 0;
    PyBuffer_Release(&o);
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyMethodDef rp_element_methods[] = {
    {"tobytes", (PyCFunction)rp_element_tobytes, METH_NOARGS,
     "tobytes()\n--\n\nThe element's bytes."},
    {NULL},
};

static PyMemberDef rp_element_members[] = {
    {"seq", T_ULONGLONG, offsetof(rp_element_t, seq), READONLY, "Sequence number."},
    {"drops", T_ULONGLONG, offsetof(rp_element_t, drops), READONLY,
     "Elements skipped so far on the subscription (0 for local reads)."},
    {NULL},
};

static PySequenceMethods rp_element_seq = {.sq_length = (lenfunc)rp_element_len};

PyTypeObject rp_ElementType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Element",
    .tp_basicsize = offsetof(rp_element_t, data),
    .tp_itemsize = 1,
    .tp_dealloc = (destructor)rp_element_dealloc,
    .tp_repr = (reprfunc)rp_element_repr,
    .tp_as_sequence = &rp_element_seq,
    .tp_as_buffer = &rp_element_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One ring element: .seq, .drops and its bytes through the buffer protocol "
              "(bytes(e), memoryview(e), numpy.frombuffer(e, dtype)). Compares equal to "
              "bytes-like objects of the same content.",
    .tp_richcompare = (richcmpfunc)rp_element_richcompare,
    .tp_methods = rp_element_methods,
    .tp_members = rp_element_members,
};

/* ---------------------------------------------------------------- Ring */

remora_ring_h rp_ring_handle(PyObject *ring) { return ((rp_ring_t *)ring)->handle; }

static int rp_ring_take_view(rp_ring_t *self, int force);

/* The ring's own view of a reserved slot counts as a call in flight (its
 * buffer export): give it up before a close when no view made from it lives
 * on, so that close() after reserve() closes at once (it stayed pending, and
 * the context could not close at all). */
static void rp_ring_quiesce(rp_obj_t *o)
{
    rp_ring_t *self = (rp_ring_t *)o;

    if (self->slot != NULL && rp_ring_take_view(self, 0) < 0)
        PyErr_Clear(); /* views live on: the close waits for them, as before */
}

static void rp_ring_destroy(rp_obj_t *o)
{
    rp_ring_t    *self = (rp_ring_t *)o;
    remora_ring_h h = self->handle;

    rp_ring_take_view(self, 1);
    self->reserved = NULL;
    self->handle = NULL;
    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS
        remora_ring_destroy(h); /* unexposes it first */
        Py_END_ALLOW_THREADS
    }
}

PyObject *rp_ring_wrap(rp_context_t *ctx, remora_ring_h handle)
{
    rp_ring_t *self = PyObject_New(rp_ring_t, &rp_RingType);

    if (self == NULL) {
        remora_ring_destroy(handle);
        return NULL;
    }
    memset((char *)self + sizeof(PyObject), 0, sizeof(*self) - sizeof(PyObject));
    self->base.destroy = rp_ring_destroy;
    self->base.quiesce = rp_ring_quiesce;
    rp_obj_link(&self->base, ctx);
    self->handle = handle;
    self->elem_size = remora_ring_elem_size(handle);
    self->capacity = remora_ring_capacity(handle);
    self->cuda = 0;
    self->device = -1;
    return (PyObject *)self;
}

static PyObject *rp_ring_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char         *kwlist[] = {"context", "elem_size", "capacity", "device", NULL};
    PyObject            *ctx, *es, *cap;
    int                  device = -1;
    remora_ring_params_t p = {.field_mask = REMORA_RING_FIELD_ELEM_SIZE |
                                            REMORA_RING_FIELD_CAPACITY};
    remora_ring_h        h = NULL;
    remora_status_t      st;
    rp_ring_t           *self;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO|$i", kwlist, &rp_ContextType, &ctx, &es,
                                     &cap, &device))
        return NULL;
    if (rp_check_open((rp_obj_t *)ctx, "Context") < 0 || rp_size(es, 0, &p.elem_size) < 0 ||
        rp_size(cap, 0, &p.capacity) < 0)
        return NULL;
    if (device >= 0) {
        p.field_mask |= REMORA_RING_FIELD_MEM_TYPE | REMORA_RING_FIELD_DEVICE;
        p.mem_type = REMORA_MEM_CUDA;
        p.device = device;
    }
    Py_BEGIN_ALLOW_THREADS
    st = remora_ring_create(((rp_context_t *)ctx)->handle, &p, &h);
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK)
        return rp_raise(st, "Ring(elem_size=%zu, capacity=%zu)", p.elem_size, p.capacity);
    self = (rp_ring_t *)rp_ring_wrap((rp_context_t *)ctx, h);
    if (self != NULL && device >= 0) {
        self->cuda = 1;
        self->device = device;
    }
    return (PyObject *)self;
}

static PyObject *rp_ring_from_image(PyObject *cls, PyObject *args)
{
    PyObject       *ctx;
    Py_buffer       img;
    remora_ring_h   h = NULL;
    remora_status_t st;

    if (!PyArg_ParseTuple(args, "O!y*", &rp_ContextType, &ctx, &img))
        return NULL;
    if (rp_check_open((rp_obj_t *)ctx, "Context") < 0) {
        PyBuffer_Release(&img);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    st = remora_ring_create_from_image(((rp_context_t *)ctx)->handle, img.buf, (size_t)img.len,
                                       &h);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&img);
    if (st != REMORA_OK)
        return rp_raise(st, "Ring.from_image");
    return rp_ring_wrap((rp_context_t *)ctx, h);
}

static void rp_ring_dealloc(rp_ring_t *self)
{
    rp_obj_dealloc_common(&self->base);
    Py_CLEAR(self->slot);
    Py_CLEAR(self->exporter);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int rp_ring_open(rp_ring_t *self) { return rp_check_open(&self->base, "Ring"); }

/* A buffer for this ring's elements: host rings take host memory only. */
static int rp_ring_buf(rp_ring_t *self, PyObject *obj, int writable, rp_buf_t *b)
{
    if (rp_buf_get(obj, writable, b) < 0)
        return -1;
    if (b->cuda && !self->cuda) {
        rp_buf_release(b);
        PyErr_SetString(PyExc_TypeError, "a host ring takes host memory, not GPU memory");
        return -1;
    }
    return 0;
}

static PyObject *rp_ring_push(rp_ring_t *self, PyObject *data)
{
    rp_buf_t        b;
    uint64_t        seq = 0;
    remora_status_t st;

    if (rp_ring_open(self) < 0 || rp_ring_buf(self, data, 0, &b) < 0)
        return NULL;
    if (b.len > self->elem_size) {
        rp_buf_release(&b);
        return rp_raise(REMORA_ERR_INVALID_PARAM, "push: %zu bytes into %zu-byte elements",
                        b.len, self->elem_size);
    }
    if (b.len >= RP_GIL_COPY_MIN || b.cuda || self->cuda) {
        rp_enter(&self->base);
        Py_BEGIN_ALLOW_THREADS
        st = remora_ring_push(self->handle, b.ptr, b.len, &seq);
        Py_END_ALLOW_THREADS
        rp_leave(&self->base);
    } else {
        st = remora_ring_push(self->handle, b.ptr, b.len, &seq);
    }
    rp_buf_release(&b);
    if (st != REMORA_OK)
        return rp_raise(st, "push");
    return PyLong_FromUnsignedLongLong(seq);
}

static PyObject *rp_ring_reserve(rp_ring_t *self, PyObject *unused)
{
    void           *slot = NULL;
    remora_status_t st;

    if (rp_ring_open(self) < 0)
        return NULL;
    if (self->slot != NULL)
        return rp_raise(REMORA_ERR_BUSY, "reserve: a slot is already reserved");
    if (self->reserved == NULL) {
        st = remora_ring_reserve(self->handle, &slot);
        if (st != REMORA_OK)
            return rp_raise(st, "reserve");
        self->reserved = slot;
    }
    /* else: a reservation given up without commit (slot() after an exception) is reused */
    if (self->cuda)
        self->slot = rp_device_view_new((PyObject *)self, self->reserved, self->elem_size,
                                        self->device, 0);
    else {
        if (self->exporter == NULL) {
            rp_slot_buffer_t *x = PyObject_New(rp_slot_buffer_t, &rp_SlotBufferType);
            if (x == NULL)
                return NULL;
            x->ring = (rp_ring_t *)Py_NewRef((PyObject *)self);
            x->ptr = self->reserved;
            x->len = self->elem_size;
            x->exports = 0;
            x->valid = 1;
            self->exporter = (PyObject *)x;
        }
        self->slot = PyMemoryView_FromObject(self->exporter);
    }
    if (self->slot == NULL)
        return NULL;
    return Py_NewRef(self->slot);
}

/* Take the slot's view back. -1 with Busy raised when views made from it live on
 * (force: drop it anyway). */
static int rp_ring_take_view(rp_ring_t *self, int force)
{
    if (self->slot != NULL && PyMemoryView_Check(self->slot)) {
        PyObject *r = PyObject_CallMethod(self->slot, "release", NULL);
        if (r == NULL) {
            if (!force && !PyErr_ExceptionMatches(PyExc_BufferError))
                return -1;
            PyErr_Clear();
            if (!force) {
                rp_raise(REMORA_ERR_BUSY,
                         "commit: views of the reserved slot are still alive (del them)");
                return -1;
            }
        }
        Py_XDECREF(r);
    } else if (self->slot != NULL) {
        rp_device_view_invalidate(self->slot);
    }
    Py_CLEAR(self->slot);
    if (self->exporter != NULL) {
        rp_slot_buffer_t *x = (rp_slot_buffer_t *)self->exporter;
        if (x->exports > 0 && !force) {
            rp_raise(REMORA_ERR_BUSY, "commit: %d view(s) of the reserved slot are still "
                                      "alive (del them, then commit again)", x->exports);
            return -1;
        }
        x->valid = 0;
        Py_CLEAR(self->exporter);
    }
    return 0;
}

static void rp_slot_buffer_dealloc(rp_slot_buffer_t *x)
{
    Py_XDECREF(x->ring);
    PyObject_Free(x);
}

static int rp_slot_buffer_getbuffer(rp_slot_buffer_t *x, Py_buffer *view, int flags)
{
    if (!x->valid) {
        PyErr_SetString(PyExc_BufferError, "the slot was committed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)x, x->ptr, (Py_ssize_t)x->len, 0, flags) < 0)
        return -1;
    x->exports++;
    rp_enter(&x->ring->base); /* the ring is not freed under a view */
    return 0;
}

static void rp_slot_buffer_releasebuffer(rp_slot_buffer_t *x, Py_buffer *view)
{
    x->exports--;
    rp_leave(&x->ring->base);
}

static PyBufferProcs rp_slot_buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)rp_slot_buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)rp_slot_buffer_releasebuffer,
};

PyTypeObject rp_SlotBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.SlotBuffer",
    .tp_basicsize = sizeof(rp_slot_buffer_t),
    .tp_dealloc = (destructor)rp_slot_buffer_dealloc,
    .tp_as_buffer = &rp_slot_buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The reserved slot of a host ring (behind the memoryview reserve() returns).",
};

static PyObject *rp_ring_commit(rp_ring_t *self, PyObject *unused)
{
    uint64_t        seq = 0;
    remora_status_t st;

    if (rp_ring_open(self) < 0)
        return NULL;
    if (self->reserved == NULL)
        return rp_raise(REMORA_ERR_INVALID_PARAM, "commit: nothing reserved");
    if (rp_ring_take_view(self, 0) < 0)
        return NULL;
    st = remora_ring_commit(self->handle, &seq);
    self->reserved = NULL;
    if (st != REMORA_OK)
        return rp_raise(st, "commit");
    return PyLong_FromUnsignedLongLong(seq);
}

/* ring.slot(): `with ring.slot() as mv:` reserve, fill, commit on a clean exit.
 * After an exception the slot stays reserved and unpublished; the next
 * reserve() or slot() hands out the same slot again. */
typedef struct rp_slot_ctx {
    PyObject_HEAD
    rp_ring_t *ring;
    uint64_t   seq;
    int        committed;
} rp_slot_ctx_t;

PyTypeObject rp_SlotContextType;

static PyObject *rp_ring_slot(rp_ring_t *self, PyObject *unused)
{
    rp_slot_ctx_t *c;

    if (rp_ring_open(self) < 0)
        return NULL;
    c = PyObject_New(rp_slot_ctx_t, &rp_SlotContextType);
    if (c == NULL)
        return NULL;
    c->ring = (rp_ring_t *)Py_NewRef((PyObject *)self);
    c->seq = 0;
    c->committed = 0;
    return (PyObject *)c;
}

static void rp_slot_ctx_dealloc(rp_slot_ctx_t *c)
{
    Py_XDECREF(c->ring);
    PyObject_Free(c);
}

static PyObject *rp_slot_ctx_enter(rp_slot_ctx_t *c, PyObject *unused)
{
    return rp_ring_reserve(c->ring, NULL);
}

static PyObject *rp_slot_ctx_exit(rp_slot_ctx_t *c, PyObject *args)
{
    PyObject *t = Py_None, *v, *tb, *seq;

    if (!PyArg_ParseTuple(args, "|OOO", &t, &v, &tb))
        return NULL;
    if (t != Py_None) { /* give the view back, keep the reservation */
        rp_ring_take_view(c->ring, 1);
        Py_RETURN_FALSE;
    }
    seq = rp_ring_commit(c->ring, NULL);
    if (seq == NULL)
        return NULL;
    c->seq = PyLong_AsUnsignedLongLong(seq);
    c->committed = 1;
    Py_DECREF(seq);
    Py_RETURN_FALSE;
}

static PyObject *rp_slot_ctx_seq(rp_slot_ctx_t *c, void *closure)
{
    if (!c->committed)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(c->seq);
}

static PyMethodDef rp_slot_ctx_methods[] = {
    {"__enter__", (PyCFunction)rp_slot_ctx_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_slot_ctx_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_slot_ctx_getset[] = {
    {"seq", (getter)rp_slot_ctx_seq, NULL, "Sequence number once committed, else None.", NULL},
    {NULL},
};

PyTypeObject rp_SlotContextType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.SlotContext",
    .tp_basicsize = sizeof(rp_slot_ctx_t),
    .tp_dealloc = (destructor)rp_slot_ctx_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "with ring.slot() as mv: fill mv; committed on a clean exit (.seq).",
    .tp_methods = rp_slot_ctx_methods,
    .tp_getset = rp_slot_ctx_getset,
};

/* get/newest/oldest: which 0 = get(seq), 1 = newest, 2 = oldest. */
static PyObject *rp_ring_read(rp_ring_t *self, uint64_t want, PyObject *out, int which)
{
    PyObject       *result;
    rp_buf_t        b = {0};
    void           *dst;
    size_t          len;
    uint64_t        seq = want;
    remora_status_t st;

    if (rp_ring_open(self) < 0)
        return NULL;
    if (out != NULL && out != Py_None) {
        if (rp_ring_buf(self, out, 1, &b) < 0)
            return NULL;
        if (b.len < self->elem_size) {
            rp_buf_release(&b);
            return rp_raise(REMORA_ERR_INVALID_PARAM, "out has %zu bytes, elements %zu", b.len,
                            self->elem_size);
        }
        dst = b.ptr;
        len = b.len;
        result = Py_NewRef(out);
    } else {
        result = rp_element_new(self->elem_size);
        if (result == NULL)
            return NULL;
        dst = rp_element_data(result);
        len = self->elem_size;
    }
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = which == 0   ? remora_ring_get(self->handle, want, dst, len)
         : which == 1 ? remora_ring_newest(self->handle, dst, len, &seq)
                      : remora_ring_oldest(self->handle, dst, len, &seq);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    rp_buf_release(&b);
    if (st != REMORA_OK) {
        Py_DECREF(result);
        return rp_raise(st, which == 0 ? "get(%llu)" : which == 1 ? "newest" : "oldest",
                        (unsigned long long)want);
    }
    if (out == NULL || out == Py_None)
        rp_element_set(result, seq, 0);
    return result;
}

static PyObject *rp_ring_get(rp_ring_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"seq", "out", NULL};
    PyObject    *sobj, *out = Py_None;
    uint64_t     seq;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &sobj, &out) ||
        rp_offset(sobj, &seq) < 0)
        return NULL;
    return rp_ring_read(self, seq, out, 0);
}

static PyObject *rp_ring_newest(rp_ring_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"out", NULL};
    PyObject    *out = Py_None;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &out))
        return NULL;
    return rp_ring_read(self, 0, out, 1);
}

static PyObject *rp_ring_oldest(rp_ring_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"out", NULL};
    PyObject    *out = Py_None;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &out))
        return NULL;
    return rp_ring_read(self, 0, out, 2);
}

static PyObject *rp_ring_image(rp_ring_t *self, PyObject *unused)
{
    remora_mem_h mem;

    if (rp_ring_open(self) < 0)
        return NULL;
    mem = remora_ring_mem(self->handle);
    if (mem == NULL || remora_mem_type(mem) != REMORA_MEM_HOST)
        return rp_raise(REMORA_ERR_UNSUPPORTED, "image");
    return PyBytes_FromStringAndSize(remora_mem_address(mem),
                                     (Py_ssize_t)remora_mem_length(mem));
}

static PyObject *rp_ring_close(rp_ring_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_ring_exit(rp_ring_t *self, PyObject *args)
{
    return rp_ring_close(self, NULL);
}

static PyObject *rp_enter_self(PyObject *self, PyObject *unused) { return Py_NewRef(self); }

static PyObject *rp_ring_head(rp_ring_t *self, void *closure)
{
    if (rp_ring_open(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(remora_ring_head(self->handle));
}

static PyObject *rp_ring_mem_type(rp_ring_t *self, void *closure)
{
    return PyUnicode_FromString(self->cuda ? "cuda" : "host");
}

static PyObject *rp_ring_closed(rp_ring_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static PyObject *rp_ring_repr(rp_ring_t *self)
{
    return PyUnicode_FromFormat("<remora.Ring %zu x %zu bytes, %s%s>", self->capacity,
                                self->elem_size, self->cuda ? "cuda" : "host",
                                self->base.closed ? ", closed" : "");
}

static PyMethodDef rp_ring_methods[] = {
    {"push", (PyCFunction)rp_ring_push, METH_O,
     "push(data)\n--\n\nCopy one element in (any bytes-like object, or GPU memory for a GPU "
     "ring; at most elem_size bytes, the rest zeroed). Returns its sequence number."},
    {"reserve", (PyCFunction)rp_ring_reserve, METH_NOARGS,
     "reserve()\n--\n\nThe next slot, to fill in place: a writable memoryview of elem_size "
     "bytes (a DeviceView for a GPU ring). Publish it with commit()."},
    {"slot", (PyCFunction)rp_ring_slot, METH_NOARGS,
     "slot()\n--\n\n`with ring.slot() as mv: mv[:] = ...` reserves, and commits on a clean "
     "exit (the context's .seq). After an exception the slot stays reserved, unpublished, "
     "and the next reserve()/slot() reuses it."},
    {"commit", (PyCFunction)rp_ring_commit, METH_NOARGS,
     "commit()\n--\n\nPublish the reserved slot; returns its sequence number. Busy while "
     "views made from the slot's memoryview are alive."},
    {"get", RP_FN(rp_ring_get), RP_KW,
     "get(seq, out=None)\n--\n\nElement seq (an Element, or copied into out). OutOfRange "
     "when the ring does not hold it."},
    {"newest", RP_FN(rp_ring_newest), RP_KW,
     "newest(out=None)\n--\n\nThe newest element held."},
    {"oldest", RP_FN(rp_ring_oldest), RP_KW,
     "oldest(out=None)\n--\n\nThe oldest element held."},
    {"image", (PyCFunction)rp_ring_image, METH_NOARGS,
     "image()\n--\n\nThe ring's whole memory as bytes (host rings), for Ring.from_image."},
    {"from_image", (PyCFunction)rp_ring_from_image, METH_VARARGS | METH_CLASS,
     "from_image(context, image)\n--\n\nA local ring rebuilt from image() bytes."},
    {"close", (PyCFunction)rp_ring_close, METH_NOARGS,
     "close()\n--\n\nUnexpose and free the ring. Idempotent."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_ring_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_ring_getset[] = {
    {"head", (getter)rp_ring_head, NULL, "Sequence number the next push gets.", NULL},
    {"mem_type", (getter)rp_ring_mem_type, NULL, "'host' or 'cuda' (where elements live).",
     NULL},
    {"closed", (getter)rp_ring_closed, NULL, "True once closed.", NULL},
    {NULL},
};

static PyMemberDef rp_ring_members[] = {
    {"elem_size", T_PYSSIZET, offsetof(rp_ring_t, elem_size), READONLY, "Bytes per element."},
    {"capacity", T_PYSSIZET, offsetof(rp_ring_t, capacity), READONLY, "Slots."},
    {"device", T_INT, offsetof(rp_ring_t, device), READONLY, "GPU ordinal; -1 for host."},
    {NULL},
};

PyTypeObject rp_RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Ring",
    .tp_basicsize = sizeof(rp_ring_t),
    .tp_dealloc = (destructor)rp_ring_dealloc,
    .tp_repr = (reprfunc)rp_ring_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ring(context, elem_size, capacity, *, device=-1)\n--\n\n"
              "A ring of capacity fixed-size elements (docs/ring.md): one producer pushes, "
              "any number of local readers and remote subscribers follow. device=N keeps "
              "the elements in GPU N's memory. Expose it with Server.expose_ring().",
    .tp_methods = rp_ring_methods,
    .tp_getset = rp_ring_getset,
    .tp_members = rp_ring_members,
    .tp_new = rp_ring_new,
};

/* ---------------------------------------------------------------- Subscription */

static void rp_sub_destroy(rp_obj_t *o)
{
    rp_sub_t    *self = (rp_sub_t *)o;
    remora_sub_h h = self->handle;

    self->handle = NULL;
    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS
        remora_sub_destroy(h);
        Py_END_ALLOW_THREADS
    }
}

PyObject *rp_subscribe(PyObject *client, remora_client_h handle, PyObject *args, PyObject *kw)
{
    static char        *kwlist[] = {"name", "mode", "timeout", "batch_bytes", NULL};
    const char         *name, *mode = "every";
    PyObject           *tobj = Py_None, *bobj = Py_None;
    remora_sub_params_t p = {.field_mask = REMORA_SUB_FIELD_MODE};
    rp_sub_t           *self;
    remora_status_t     st;
    rp_obj_t           *cl = (rp_obj_t *)client;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|s$OO", kwlist, &name, &mode, &tobj, &bobj))
        return NULL;
    if (strcmp(mode, "every") == 0)
        p.mode = REMORA_SUB_EVERY;
    else if (strcmp(mode, "latest") == 0)
        p.mode = REMORA_SUB_LATEST;
    else {
        PyErr_Format(PyExc_ValueError, "mode must be 'every' or 'latest', not '%s'", mode);
        return NULL;
    }
    if (bobj != Py_None) {
        p.field_mask |= REMORA_SUB_FIELD_BATCH_BYTES;
        if (rp_size(bobj, 0, &p.batch_bytes) < 0)
            return NULL;
    }
    self = PyObject_New(rp_sub_t, &rp_SubscriptionType);
    if (self == NULL)
        return NULL;
    memset((char *)self + sizeof(PyObject), 0, sizeof(*self) - sizeof(PyObject));
    self->base.destroy = rp_sub_destroy;
    rp_obj_link(&self->base, cl->ctx);
    self->client = Py_NewRef(client);
    self->latest = p.mode == REMORA_SUB_LATEST;
    snprintf(self->name, sizeof(self->name), "%s", name);
    if (rp_timeout_ms(tobj, &self->timeout_ms) < 0)
        goto fail;
    rp_enter(cl);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_subscribe(handle, name, &p, &self->handle);
    Py_END_ALLOW_THREADS
    rp_leave(cl);
    if (st != REMORA_OK) {
        self->handle = NULL;
        rp_raise(st, "subscribe(%s)", name);
        goto fail;
    }
    self->elem_size = remora_sub_elem_size(self->handle);
    return (PyObject *)self;

fail:
    Py_DECREF(self);
    return NULL;
}

static void rp_sub_dealloc(rp_sub_t *self)
{
    rp_obj_dealloc_common(&self->base);
    Py_CLEAR(self->client);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One element into an Element (out NULL) or into out. */
static PyObject *rp_sub_take(rp_sub_t *self, int ms, PyObject *out)
{
    PyObject          *result;
    rp_buf_t           b = {0};
    void              *dst;
    size_t             len;
    remora_elem_info_t info = {.field_mask = 0}; /* every field */
    remora_status_t    st;
    remora_sub_h       h;

    if (rp_check_open(&self->base, "Subscription") < 0)
        return NULL;
    if (self->base.busy > 0) /* the library allows one thread in remora_sub_next at a time */
        return rp_raise(REMORA_ERR_BUSY, "subscription %s: next is running in another thread",
                        self->name);
    if (out != NULL) {
        if (rp_buf_get(out, 1, &b) < 0)
            return NULL;
        if (b.len < self->elem_size) {
            rp_buf_release(&b);
            return rp_raise(REMORA_ERR_INVALID_PARAM, "out has %zu bytes, elements %zu", b.len,
                            self->elem_size);
        }
        dst = b.ptr;
        len = b.len;
        result = Py_NewRef(out);
    } else {
        result = rp_element_new(self->elem_size);
        if (result == NULL)
            return NULL;
        dst = rp_element_data(result);
        len = self->elem_size;
    }
    h = self->handle;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_sub_next(h, dst, len, &info, ms);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    rp_buf_release(&b);
    if (st != REMORA_OK) {
        Py_DECREF(result);
        return rp_raise(st, "subscription %s: next", self->name);
    }
    self->seq = info.seq;
    self->drops = info.drops;
    if (out == NULL)
        rp_element_set(result, info.seq, info.drops);
    return result;
}

static PyObject *rp_sub_iternext(rp_sub_t *self)
{
    return rp_sub_take(self, self->timeout_ms, NULL);
}

static PyObject *rp_sub_next(rp_sub_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", "out", NULL};
    PyObject    *tobj = NULL, *out = Py_None;
    int          ms = self->timeout_ms;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO", kwlist, &tobj, &out))
        return NULL;
    if (tobj != NULL && rp_timeout_ms(tobj, &ms) < 0)
        return NULL;
    return rp_sub_take(self, ms, out == Py_None ? NULL : out);
}

static PyObject *rp_sub_close(rp_sub_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_sub_exit(rp_sub_t *self, PyObject *args) { return rp_sub_close(self, NULL); }

static PyObject *rp_sub_closed(rp_sub_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static PyObject *rp_sub_mode(rp_sub_t *self, void *closure)
{
    return PyUnicode_FromString(self->latest ? "latest" : "every");
}

static PyObject *rp_sub_timeout(rp_sub_t *self, void *closure)
{
    if (self->timeout_ms < 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(self->timeout_ms / 1000.0);
}

static int rp_sub_set_timeout(rp_sub_t *self, PyObject *v, void *closure)
{
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete timeout");
        return -1;
    }
    return rp_timeout_ms(v, &self->timeout_ms);
}

static PyObject *rp_sub_repr(rp_sub_t *self)
{
    return PyUnicode_FromFormat("<remora.Subscription %s (%s), %zu-byte elements%s>", self->name,
                                self->latest ? "latest" : "every", self->elem_size,
                                self->base.closed ? ", closed" : "");
}

static PyMethodDef rp_sub_methods[] = {
    {"next", RP_FN(rp_sub_next), RP_KW,
     "next(timeout=<the subscription's>, out=None)\n--\n\nThe next element: an Element, or "
     "copied into out (host or GPU memory; then .seq and .drops say which). TimedOut when "
     "none came in time, Disconnected when the server went away."},
    {"close", (PyCFunction)rp_sub_close, METH_NOARGS, "close()\n--\n\nEnd the subscription."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_sub_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_sub_getset[] = {
    {"closed", (getter)rp_sub_closed, NULL, "True once closed.", NULL},
    {"mode", (getter)rp_sub_mode, NULL, "'every' or 'latest'.", NULL},
    {"timeout", (getter)rp_sub_timeout, (setter)rp_sub_set_timeout,
     "Seconds each iteration step waits (None: the client's timeout).", NULL},
    {NULL},
};

static PyMemberDef rp_sub_members[] = {
    {"elem_size", T_PYSSIZET, offsetof(rp_sub_t, elem_size), READONLY, "Bytes per element."},
    {"seq", T_ULONGLONG, offsetof(rp_sub_t, seq), READONLY, "Sequence number of the last "
                                                            "element taken."},
    {"drops", T_ULONGLONG, offsetof(rp_sub_t, drops), READONLY, "Elements skipped so far."},
    {NULL},
};

PyTypeObject rp_SubscriptionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Subscription",
    .tp_basicsize = sizeof(rp_sub_t),
    .tp_dealloc = (destructor)rp_sub_dealloc,
    .tp_repr = (reprfunc)rp_sub_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A remote ring followed (Client.subscribe). Iterate it for Elements; each step "
              "waits up to .timeout and raises TimedOut, Disconnected... rather than end.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)rp_sub_iternext,
    .tp_methods = rp_sub_methods,
    .tp_getset = rp_sub_getset,
    .tp_members = rp_sub_members,
};
