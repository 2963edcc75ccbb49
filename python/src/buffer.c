/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Getting at the memory behind a Python object, without copying:
 * 1. the buffer protocol (bytes, bytearray, memoryview, NumPy, Memory), C-contiguous;
 * 2. __cuda_array_interface__ v2/v3 (CuPy, PyTorch CUDA tensors, Numba): device memory;
 * 3. DLPack (__dlpack__ / __dlpack_device__): CUDA, CUDA-host or CPU tensors
 *    (PyTorch CPU tensors have no buffer protocol).
 * Producers' streams: the interface's "stream" (CAI v3) is synchronized before
 * the pointer is used, and a DLPack producer is asked to order its work
 * before the legacy default stream, which is then synchronized, through the
 * CUDA driver the producer has already loaded (dlopen RTLD_NOLOAD: this module
 * never loads CUDA itself).
 *
 * DeviceView: a minimal object exposing device memory through
 * __cuda_array_interface__ (a GPU Memory, a GPU ring's reserved slot).
 */
#include "rp.h"

#include <dlfcn.h>
#include <string.h>

/* ---------------------------------------------------------------- CUDA streams */

typedef int (*rp_cu_stream_sync_t)(void *stream);

static int rp_stream_sync(uintptr_t stream)
{
    static rp_cu_stream_sync_t fn;
    static int                 tried;
    int                        rc;

    if (!tried) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        tried = 1;
        if (lib != NULL)
            fn = (rp_cu_stream_sync_t)(uintptr_t)dlsym(lib, "cuStreamSynchronize");
    }
    if (fn == NULL) /* no driver loaded: nobody can have queued work */
        return 0;
    Py_BEGIN_ALLOW_THREADS
    rc = fn((void *)stream);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuStreamSynchronize(%#lx) failed: CUDA error %d",
                     (unsigned long)stream, rc);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- buffer protocol */

static int rp_buf_host(PyObject *obj, int writable, rp_buf_t *b)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);

    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
        /* Tell "read-only" apart from other refusals (not contiguous...). */
        if (writable && PyErr_ExceptionMatches(PyExc_BufferError) == 0 &&
            PyErr_ExceptionMatches(PyExc_ValueError) == 0)
            return -1;
        if (writable) {
            Py_buffer probe;
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            if (PyObject_GetBuffer(obj, &probe, PyBUF_C_CONTIGUOUS) == 0) {
                int ro = probe.readonly;
                PyBuffer_Release(&probe);
                if (ro) {
                    Py_XDECREF(t);
                    Py_XDECREF(v);
                    Py_XDECREF(tb);
                    PyErr_Format(PyExc_TypeError,
                                 "a writable buffer is required, not read-only %.100s",
                                 Py_TYPE(obj)->tp_name);
                    return -1;
                }
            } else {
                PyErr_Clear();
            }
            PyErr_Restore(t, v, tb);
        }
        return -1;
    }
    b->has_view = 1;
    b->ptr = b->view.buf;
    b->len = (size_t)b->view.len;
    b->readonly = b->view.readonly;
    b->cuda = 0;
    b->device = -1;
    return 0;
}

/* ---------------------------------------------------------------- __cuda_array_interface__ */

static int rp_itemsize(PyObject *typestr, Py_ssize_t *size)
{
    const char *s = PyUnicode_Check(typestr) ? PyUnicode_AsUTF8(typestr) : NULL;
    char       *end;
    long        n;

    if (s == NULL || strlen(s) < 3) {
        PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__: bad typestr");
        return -1;
    }
    n = strtol(s + 2, &end, 10);
    if (*end != '\0' || n <= 0) {
        PyErr_Format(PyExc_TypeError, "__cuda_array_interface__: bad typestr %s", s);
        return -1;
    }
    *size = n;
    return 0;
}

/* Product of shape; checks strides describe a C-contiguous array (or are None). */
static int rp_compact(PyObject *shape, PyObject *strides, Py_ssize_t itemsize, size_t *len)
{
    Py_ssize_t n, i;
    size_t     total = (size_t)itemsize, expect;

    if (!PyTuple_Check(shape)) {
        PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__: shape is not a tuple");
        return -1;
    }
    n = PyTuple_GET_SIZE(shape);
    for (i = 0; i < n; i++) {
        Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (d < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__: negative shape");
            return -1;
        }
        total *= (size_t)d;
    }
    if (strides != NULL && strides != Py_None && total != 0) {
        if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != n) {
            PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__: bad strides");
            return -1;
        }
        expect = (size_t)itemsize;
        for (i = n - 1; i >= 0; i--) {
            Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
            Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
            if (s == -1 && PyErr_Occurred())
                return -1;
            if (d > 1 && (size_t)s != expect) {
                PyErr_SetString(PyExc_ValueError, "GPU array is not C-contiguous");
                return -1;
            }
            expect *= (size_t)d;
        }
    }
    *len = total;
    return 0;
}

static int rp_buf_cai(PyObject *obj, PyObject *cai, int writable, rp_buf_t *b)
{
    PyObject  *data, *shape, *typestr, *strides, *stream, *mask;
    Py_ssize_t itemsize;
    void      *ptr;
    int        ro;

    if (!PyDict_Check(cai)) {
        PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__ is not a dict");
        return -1;
    }
    data = PyDict_GetItemString(cai, "data");
    shape = PyDict_GetItemString(cai, "shape");
    typestr = PyDict_GetItemString(cai, "typestr");
    strides = PyDict_GetItemString(cai, "strides");
    stream = PyDict_GetItemString(cai, "stream");
    mask = PyDict_GetItemString(cai, "mask");
    if (data == NULL || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || shape == NULL ||
        typestr == NULL) {
        PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__: missing data/shape/typestr");
        return -1;
    }
    if (mask != NULL && mask != Py_None) {
        PyErr_SetString(PyExc_TypeError, "masked GPU arrays are not supported");
        return -1;
    }
    ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
    if (ptr == NULL && PyErr_Occurred())
        return -1;
    ro = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
    if (ro < 0)
        return -1;
    if (ro && writable) {
        PyErr_Format(PyExc_TypeError, "a writable buffer is required, not read-only %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (rp_itemsize(typestr, &itemsize) < 0 || rp_compact(shape, strides, itemsize, &b->len) < 0)
        return -1;
    if (stream != NULL && stream != Py_None) {
        uintptr_t s = (uintptr_t)PyLong_AsVoidPtr(stream);
        if (s == 0 && PyErr_Occurred())
            return -1;
        if (rp_stream_sync(s) < 0)
            return -1;
    }
    b->ptr = ptr;
    b->readonly = ro;
    b->cuda = 1;
    b->device = -1; /* the library finds the device from the pointer */
    b->owner = Py_NewRef(obj);
    return 0;
}

/* ---------------------------------------------------------------- DLPack */

typedef struct {
    int32_t device_type;
    int32_t device_id;
} rp_dl_device_t;
typedef struct {
    uint8_t  code;
    uint8_t  bits;
    uint16_t lanes;
} rp_dl_dtype_t;
typedef struct {
    void          *data;
    rp_dl_device_t device;
    int32_t        ndim;
    rp_dl_dtype_t  dtype;
    int64_t       *shape;
    int64_t       *strides;
    uint64_t       byte_offset;
} rp_dl_tensor_t;
typedef struct rp_dl_managed {
    rp_dl_tensor_t dl_tensor;
    void          *manager_ctx;
    void         (*deleter)(struct rp_dl_managed *self);
} rp_dl_managed_t;

enum { RP_DL_CPU = 1, RP_DL_CUDA = 2, RP_DL_CUDA_HOST = 3, RP_DL_CUDA_MANAGED = 13 };

static int rp_buf_dlpack(PyObject *obj, rp_buf_t *b)
{
    PyObject        *dev, *capsule;
    long             type, id;
    rp_dl_managed_t *m;
    rp_dl_tensor_t  *t;
    size_t           len, expect;
    int              cuda;

    dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (dev == NULL)
        return -1;
    if (!PyArg_ParseTuple(dev, "ll", &type, &id)) {
        Py_DECREF(dev);
        return -1;
    }
    Py_DECREF(dev);
    if (type != RP_DL_CPU && type != RP_DL_CUDA && type != RP_DL_CUDA_HOST) {
        PyErr_Format(PyExc_TypeError, "DLPack device type %ld is not supported", type);
        return -1;
    }
    cuda = type == RP_DL_CUDA;
    if (cuda) {
        /* Producer orders its work before the legacy default stream (1). */
        PyObject *kw = Py_BuildValue("{s:i}", "stream", 1), *args = PyTuple_New(0), *fn;
        fn = PyObject_GetAttrString(obj, "__dlpack__");
        capsule = (kw && args && fn) ? PyObject_Call(fn, args, kw) : NULL;
        Py_XDECREF(fn);
        Py_XDECREF(args);
        Py_XDECREF(kw);
    } else {
        capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
    }
    if (capsule == NULL)
        return -1;
    m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m == NULL) {
        Py_DECREF(capsule);
        return -1;
    }
    t = &m->dl_tensor;
    len = (size_t)(t->dtype.bits / 8) * t->dtype.lanes;
    if (t->dtype.bits % 8 != 0 || len == 0) {
        PyErr_SetString(PyExc_TypeError, "DLPack tensor of sub-byte elements");
        goto fail;
    }
    expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "DLPack tensor with a negative shape");
            goto fail;
        }
        if (t->strides != NULL && t->shape[i] > 1 && (size_t)t->strides[i] != expect) {
            PyErr_SetString(PyExc_ValueError, "DLPack tensor is not C-contiguous");
            goto fail;
        }
        expect *= (size_t)t->shape[i];
    }
    b->len = len * expect;
    b->ptr = (char *)t->data + t->byte_offset;
    b->cuda = cuda;
    b->device = cuda ? (int)id : -1;
    b->readonly = 0;
    /* The exporter keeps the memory alive; the capsule is consumed and freed now. */
    if (PyCapsule_SetName(capsule, "used_dltensor") < 0)
        goto fail;
    if (m->deleter != NULL)
        m->deleter(m);
    Py_DECREF(capsule);
    b->owner = Py_NewRef(obj);
    if (cuda && rp_stream_sync(1) < 0) {
        Py_CLEAR(b->owner);
        return -1;
    }
    return 0;

fail:
    Py_DECREF(capsule); /* still named "dltensor": its destructor frees it */
    return -1;
}

/* ---------------------------------------------------------------- entry points */

/*
 * Types known to have no __cuda_array_interface__ (NumPy's ndarray...).
 * Asking an instance costs a formatted AttributeError every time, a sixth of
 * a 64 B read from Python. Only immutable types whose instances have no
 * __dict__ and look attributes up generically are remembered: for those the
 * type's answer is every instance's, for good. The GIL guards the table.
 */
#define RP_NO_CAI_MAX 8
static PyTypeObject *rp_no_cai[RP_NO_CAI_MAX];

static int rp_type_lacks_cai(PyTypeObject *tp)
{
    PyObject *attr;

    if (!PyType_HasFeature(tp, Py_TPFLAGS_IMMUTABLETYPE) || tp->tp_dictoffset != 0 ||
        tp->tp_getattro != PyObject_GenericGetAttr)
        return 0;
    for (int i = 0; i < RP_NO_CAI_MAX && rp_no_cai[i] != NULL; i++)
        if (rp_no_cai[i] == tp)
            return 1;
    attr = PyObject_GetAttrString((PyObject *)tp, "__cuda_array_interface__");
    if (attr != NULL) {
        Py_DECREF(attr);
        return 0;
    }
    PyErr_Clear();
    for (int i = 0; i < RP_NO_CAI_MAX; i++) {
        if (rp_no_cai[i] == NULL) {
            rp_no_cai[i] = (PyTypeObject *)Py_NewRef((PyObject *)tp);
            break;
        }
    }
    return 1;
}

int rp_buf_get(PyObject *obj, int writable, rp_buf_t *b)
{
    PyObject *cai;

    memset(b, 0, sizeof(*b));
    b->device = -1;
    if (Py_IS_TYPE(obj, &rp_MemoryType))
        return rp_memory_buf(obj, writable, b);
    /* Device memory first: a CuPy array also offers the buffer protocol,
     * which then refuses because its data is on the GPU. Objects without the
     * attribute, or that raise instead of answering (a CPU torch tensor),
     * go on to the buffer protocol and DLPack. */
    if (!PyBytes_Check(obj) && !PyByteArray_Check(obj) && !PyMemoryView_Check(obj) &&
        !rp_type_lacks_cai(Py_TYPE(obj))) {
        cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
        if (cai != NULL) {
            int rc = rp_buf_cai(obj, cai, writable, b);
            Py_DECREF(cai);
            return rc;
        }
        PyErr_Clear();
    }
    if (PyObject_CheckBuffer(obj))
        return rp_buf_host(obj, writable, b);
    if (PyObject_HasAttrString(obj, "__dlpack__") &&
        PyObject_HasAttrString(obj, "__dlpack_device__"))
        return rp_buf_dlpack(obj, b);
    PyErr_Format(PyExc_TypeError,
                 "a bytes-like object, an object with __cuda_array_interface__ or a DLPack "
                 "tensor is required, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

void rp_buf_release(rp_buf_t *b)
{
    if (b->has_view) {
        PyBuffer_Release(&b->view);
        b->has_view = 0;
    }
    Py_CLEAR(b->owner);
    b->ptr = NULL;
}

/* ---------------------------------------------------------------- DeviceView */

typedef struct rp_device_view {
    PyObject_HEAD
    PyObject *owner;
    void     *ptr;
    size_t    len;
    int       device;
    int       readonly;
    int       valid;
} rp_device_view_t;

PyObject *rp_device_view_new(PyObject *owner, void *ptr, size_t len, int device, int readonly)
{
    rp_device_view_t *v = PyObject_New(rp_device_view_t, &rp_DeviceViewType);

    if (v == NULL)
        return NULL;
    v->owner = Py_XNewRef(owner);
    v->ptr = ptr;
    v->len = len;
    v->device = device;
    v->readonly = readonly;
    v->valid = 1;
    return (PyObject *)v;
}

void rp_device_view_invalidate(PyObject *view)
{
    if (view != NULL && Py_IS_TYPE(view, &rp_DeviceViewType))
        ((rp_device_view_t *)view)->valid = 0;
}

static void rp_device_view_dealloc(rp_device_view_t *v)
{
    Py_XDECREF(v->owner);
    PyObject_Free(v);
}

static PyObject *rp_device_view_cai(rp_device_view_t *v, void *closure)
{
    if (!v->valid) {
        PyErr_SetString(PyExc_ValueError, "this device view is no longer valid");
        return NULL;
    }
    return Py_BuildValue("{s:(n),s:s,s:(NO),s:O,s:i,s:O}", "shape", (Py_ssize_t)v->len,
                         "typestr", "|u1", "data", PyLong_FromVoidPtr(v->ptr),
                         v->readonly ? Py_True : Py_False, "strides", Py_None, "version", 3,
                         "stream", Py_None);
}

static PyObject *rp_device_view_repr(rp_device_view_t *v)
{
    return PyUnicode_FromFormat("<remora.DeviceView %zu bytes on cuda:%d%s>", v->len, v->device,
                                v->valid ? "" : " (invalid)");
}

static Py_ssize_t rp_device_view_len(rp_device_view_t *v) { return (Py_ssize_t)v->len; }

static PyObject *rp_device_view_ptr(rp_device_view_t *v, void *closure)
{
    return PyLong_FromVoidPtr(v->ptr);
}

static PyGetSetDef rp_device_view_getset[] = {
    {"ptr", (getter)rp_device_view_ptr, NULL, "Device pointer.", NULL},
    {"__cuda_array_interface__", (getter)rp_device_view_cai, NULL,
     "CUDA Array Interface v3: a 1-D uint8 array of the memory.", NULL},
    {NULL},
};

static PyMemberDef rp_device_view_members[] = {
    {"device", T_INT, offsetof(rp_device_view_t, device), READONLY, "CUDA device ordinal."},
    {NULL},
};

static PySequenceMethods rp_device_view_seq = {.sq_length = (lenfunc)rp_device_view_len};

PyTypeObject rp_DeviceViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.DeviceView",
    .tp_basicsize = sizeof(rp_device_view_t),
    .tp_dealloc = (destructor)rp_device_view_dealloc,
    .tp_repr = (reprfunc)rp_device_view_repr,
    .tp_as_sequence = &rp_device_view_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "GPU memory seen through __cuda_array_interface__ (cupy.asarray(view), "
              "torch.as_tensor(view, device='cuda')).",
    .tp_getset = rp_device_view_getset,
    .tp_members = rp_device_view_members,
};
