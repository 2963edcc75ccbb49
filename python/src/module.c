/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora._remora: module init, the object lifecycle shared by every type
 * (see rp.h), argument helpers, and Context.
 */
#include "rp.h"

#include <limits.h>
#include <math.h>

/* ---------------------------------------------------------------- lifecycle */

void rp_obj_link(rp_obj_t *o, rp_context_t *ctx)
{
    o->ctx = (rp_context_t *)Py_NewRef((PyObject *)ctx);
    o->prev = ctx->last;
    o->next = NULL;
    if (ctx->last != NULL)
        ctx->last->next = o;
    else
        ctx->first = o;
    ctx->last = o;
}

static void rp_obj_unlink(rp_obj_t *o)
{
    rp_context_t *ctx = o->ctx;

    if (ctx == NULL || (o->prev == NULL && o->next == NULL && ctx->first != o))
        return;
    if (o->prev != NULL)
        o->prev->next = o->next;
    else
        ctx->first = o->next;
    if (o->next != NULL)
        o->next->prev = o->prev;
    else
        ctx->last = o->prev;
    o->prev = o->next = NULL;
}

/* in_dealloc: o's reference count is already 0 (no resurrection dance). */
static void rp_obj_close_now(rp_obj_t *o, int in_dealloc)
{
    o->closing = 0;
    if (o->closed)
        return;
    o->closed = 1;
    /* Keep o alive through destroy: it may drop the last references to others. */
    if (!in_dealloc)
        Py_INCREF(o);
    if (o->destroy != NULL)
        o->destroy(o);
    rp_obj_unlink(o);
    if (!in_dealloc)
        Py_DECREF(o);
}

int rp_obj_close(rp_obj_t *o, int must)
{
    if (o->closed)
        return 0;
    if (o->quiesce != NULL)
        o->quiesce(o);
    if (o->busy > 0) {
        if (must) {
            rp_raise(REMORA_ERR_BUSY, "%s has a call running in another thread",
                     Py_TYPE(o)->tp_name);
            return -1;
        }
        o->closing = 1;
        return 0;
    }
    rp_obj_close_now(o, 0);
    return 0;
}

void rp_leave(rp_obj_t *o)
{
    if (--o->busy == 0 && o->closing)
        rp_obj_close_now(o, 0);
}

void rp_obj_dealloc_common(rp_obj_t *o)
{
    /* A running call holds a reference, so nothing is busy here. */
    rp_obj_close_now(o, 1);
    Py_CLEAR(o->ctx);
}

/* ---------------------------------------------------------------- arguments */

int rp_uint_conv(PyObject *obj, void *out)
{
    unsigned long v = PyLong_AsUnsignedLong(obj);

    if (v == (unsigned long)-1 && PyErr_Occurred())
        return 0;
    if (v > UINT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%lu does not fit in 32 bits", v);
        return 0;
    }
    *(unsigned *)out = (unsigned)v;
    return 1;
}

int rp_timeout_ms(PyObject *obj, int *ms)
{
    double s;

    if (obj == NULL || obj == Py_None) {
        *ms = -1;
        return 0;
    }
    s = PyFloat_AsDouble(obj);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(s) || s < 0) {
        PyErr_SetString(PyExc_ValueError, "timeout must be >= 0 seconds (or None)");
        return -1;
    }
    *ms = s * 1000.0 >= (double)INT_MAX ? INT_MAX : (int)ceil(s * 1000.0);
    return 0;
}

int rp_offset(PyObject *obj, uint64_t *off)
{
    PyObject *idx = PyNumber_Index(obj);
    int       overflow = 0;

    if (idx == NULL)
        return -1;
    if (_PyLong_Sign(idx) < 0) {
        Py_DECREF(idx);
        rp_raise(REMORA_ERR_OUT_OF_RANGE, "negative offset");
        return -1;
    }
    *off = PyLong_AsUnsignedLongLong(idx);
    if (*off == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        overflow = 1;
    }
    Py_DECREF(idx);
    if (overflow) {
        rp_raise(REMORA_ERR_OUT_OF_RANGE, "offset past 2**64");
        return -1;
    }
    return 0;
}

int rp_size(PyObject *obj, size_t dflt, size_t *out)
{
    uint64_t v;

    if (obj == NULL || obj == Py_None) {
        *out = dflt;
        return 0;
    }
    if (rp_offset(obj, &v) < 0)
        return -1;
    if (v > (uint64_t)PY_SSIZE_T_MAX) {
        rp_raise(REMORA_ERR_OUT_OF_RANGE, "length %llu too large", (unsigned long long)v);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

/* ---------------------------------------------------------------- Context */

remora_context_h rp_context_handle(rp_context_t *ctx) { return ctx->handle; }

/* Log lines: the library calls rp_log_cb from any of its threads, holding
 * its logger's lock and maybe others, so it only queues the line; the Python
 * side of Context(log=...) takes lines with next_log() on a thread of its own. */
#define RP_LOGQ_MAX 1024

typedef struct rp_log_item {
    int  level; /* as Python's logging module numbers them */
    char where[96];
    char msg[512];
} rp_log_item_t;

static void rp_log_cb(remora_log_level_t level, const char *where, const char *msg, void *arg)
{
    static const int py_level[] = {40, 30, 20, 10}; /* ERROR, WARNING, INFO, DEBUG */
    rp_log_item_t    it = {.level = level <= REMORA_LOG_DEBUG ? py_level[level] : 10};

    snprintf(it.where, sizeof(it.where), "%s", where);
    snprintf(it.msg, sizeof(it.msg), "%s", msg);
    rp_queue_push(arg, &it);
}

static void rp_context_destroy(rp_obj_t *o)
{
    rp_context_t *self = (rp_context_t *)o;

    if (self->handle != NULL) {
        remora_context_h h = self->handle;
        self->handle = NULL;
        Py_BEGIN_ALLOW_THREADS
        remora_context_destroy(h);
        Py_END_ALLOW_THREADS
    }
}

static PyObject *rp_context_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    rp_context_t *self = (rp_context_t *)type->tp_alloc(type, 0);

    if (self != NULL) {
        self->base.destroy = rp_context_destroy;
        self->base.closed = 1; /* until __init__ succeeds */
    }
    return (PyObject *)self;
}

static int rp_context_init(rp_context_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "spin_us", "heartbeat_ms", "peer_timeout_ms",
                             "bind_host", "rma", "log", NULL};
    const char             *name = NULL, *bind_host = NULL, *rma = NULL;
    PyObject               *spin = Py_None, *hb = Py_None, *pt = Py_None;
    remora_context_params_t p = {0};
    remora_status_t         st;
    int                     log = 0;

    if (self->handle != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Context is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z$OOOzzp", kwlist, &name, &spin, &hb, &pt,
                                     &bind_host, &rma, &log))
        return -1;
    if (name != NULL) {
        p.field_mask |= REMORA_CONTEXT_FIELD_NAME;
        p.name = name;
    }
    if (spin != Py_None) {
        p.field_mask |= REMORA_CONTEXT_FIELD_SPIN_US;
        if (!rp_uint_conv(spin, &p.spin_us))
            return -1;
    }
    if (hb != Py_None || pt != Py_None) {
        p.field_mask |= REMORA_CONTEXT_FIELD_HEARTBEAT;
        p.heartbeat_ms    = 500;
        p.peer_timeout_ms = 2000;
        if ((hb != Py_None && !rp_uint_conv(hb, &p.heartbeat_ms)) ||
            (pt != Py_None && !rp_uint_conv(pt, &p.peer_timeout_ms)))
            return -1;
    }
    if (bind_host != NULL) {
        p.field_mask |= REMORA_CONTEXT_FIELD_BIND_HOST;
        p.bind_host = bind_host;
    }
    if (rma != NULL) {
        p.field_mask |= REMORA_CONTEXT_FIELD_RMA;
        if (strcmp(rma, "off") == 0)
            p.rma = REMORA_RMA_OFF;
        else if (strcmp(rma, "verbs") == 0)
            p.rma = REMORA_RMA_VERBS;
        else if (strcmp(rma, "unsafe") == 0)
            p.rma = REMORA_RMA_UNSAFE;
        else {
            PyErr_SetString(PyExc_ValueError, "rma must be 'off', 'verbs' or 'unsafe'");
            return -1;
        }
    }
    if (log) {
        if (self->logq == NULL)
            self->logq = rp_queue_new(sizeof(rp_log_item_t), RP_LOGQ_MAX);
        if (self->logq == NULL) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        p.field_mask |= REMORA_CONTEXT_FIELD_LOG_CB;
        p.log_cb = rp_log_cb;
        p.log_arg = self->logq;
    }
    Py_BEGIN_ALLOW_THREADS
    st = remora_context_create(&p, &self->handle);
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK) {
        self->handle = NULL;
        rp_raise(st, "remora_context_create");
        return -1;
    }
    self->base.closed = 0;
    return 0;
}

static PyObject *rp_context_close(rp_context_t *self, PyObject *unused)
{
    rp_obj_t *c;

    if (self->base.closed)
        Py_RETURN_NONE;
    for (c = self->first; c != NULL; c = c->next) {
        if (c->quiesce != NULL && !c->closed)
            c->quiesce(c);
        if (c->busy > 0)
            return rp_raise(REMORA_ERR_BUSY, "Context.close: a %s has a call running",
                            Py_TYPE(c)->tp_name);
    }
    while (self->last != NULL) { /* newest first */
        c = self->last;
        /* Closed but still linked: another thread's close is inside its
         * destroy (which lets go of the GIL); busy: a call began meanwhile.
         * Either way this close cannot finish it: say so, never spin. */
        if (c->closed || c->busy > 0)
            return rp_raise(REMORA_ERR_BUSY, "Context.close: a %s is in use in another thread",
                            Py_TYPE(c)->tp_name);
        rp_obj_close(c, 0);
    }
    if (rp_obj_close(&self->base, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static void rp_context_dealloc(rp_context_t *self)
{
    /* Children hold references to their context: none is left here. */
    rp_obj_dealloc_common(&self->base);
    rp_queue_free(self->logq); /* the context is gone: no more lines */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *rp_enter_self(PyObject *self, PyObject *unused) { return Py_NewRef(self); }

static PyObject *rp_context_exit(rp_context_t *self, PyObject *args)
{
    return rp_context_close(self, NULL);
}

static PyObject *rp_context_info(rp_context_t *self, PyObject *unused)
{
    remora_context_attr_t a = {.field_mask = 0}; /* every field */
    remora_status_t       st;

    if (rp_check_open(&self->base, "Context") < 0)
        return NULL;
    st = remora_context_query(self->handle, &a);
    if (st != REMORA_OK)
        return rp_raise(st, "remora_context_query");
    return Py_BuildValue("{s:(III),s:O,s:O,s:s}", "ucx_version", a.ucx_major, a.ucx_minor,
                         a.ucx_release, "ucx_host", (a.ucx_mem_types & 1) ? Py_True : Py_False,
                         "ucx_cuda",
                         (a.ucx_mem_types & (1u << REMORA_MEM_CUDA)) ? Py_True : Py_False,
                         "transports", a.transports);
}

/* next_log(timeout=0): works before init succeeded and after close, so the
 * lines of a failed create and of the destroy can be read. */
static PyObject *rp_context_next_log(rp_context_t *self, PyObject *args, PyObject *kw)
{
    static char  *kwlist[] = {"timeout", NULL};
    PyObject     *tobj = NULL;
    rp_log_item_t it;
    int           got;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &tobj))
        return NULL;
    if (self->logq == NULL)
        Py_RETURN_NONE;
    /* No owner: a waiting log thread must not make close() Busy. */
    got = rp_queue_take(self->logq, NULL, tobj, &it);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(iss)", it.level, it.where, it.msg);
}

static PyObject *rp_context_logs_dropped(rp_context_t *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->logq != NULL ? rp_queue_dropped(self->logq) : 0);
}

static PyObject *rp_context_closed(rp_context_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static PyMethodDef rp_context_methods[] = {
    {"close", (PyCFunction)rp_context_close, METH_NOARGS,
     "close()\n--\n\nClose every object made from this context (newest first), then the "
     "context. Idempotent. Busy if a call is running on one of them in another thread."},
    {"info", (PyCFunction)rp_context_info, METH_NOARGS,
     "info()\n--\n\nThe loaded UCX: {'ucx_version': (major, minor, release), 'ucx_host': "
     "bool, 'ucx_cuda': bool, 'transports': 'tcp,posix,...'}."},
    {"next_log", RP_FN(rp_context_next_log), RP_KW,
     "next_log(timeout=0)\n--\n\nThe next library log line as (level, where, message), "
     "level numbered as the logging module does, waiting up to timeout seconds (None: until "
     "one comes); None if none came. Only with log=True: the remora package's Context "
     "takes them for you and hands them to its log handler."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_context_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_context_getset[] = {
    {"closed", (getter)rp_context_closed, NULL, "True once closed.", NULL},
    {"logs_dropped", (getter)rp_context_logs_dropped, NULL,
     "Log lines dropped because the queue (1024 lines) was full.", NULL},
    {NULL},
};

PyTypeObject rp_ContextType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Context",
    .tp_basicsize = sizeof(rp_context_t),
    .tp_dealloc = (destructor)rp_context_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Context(name=None, *, spin_us=None, heartbeat_ms=None, peer_timeout_ms=None, "
              "bind_host=None, rma=None, log=False)\n--\n\n"
              "A UCX context, worker and progress thread. Servers, clients, memory and "
              "rings are made from one and closed with it. A client cannot connect to a "
              "server of its own context: use two contexts in one process.\n"
              "rma: 'off' (default), 'verbs' or 'unsafe' (see docs/security.md).\n"
              "log: queue the library's log lines for next_log() instead of stderr.",
    .tp_methods = rp_context_methods,
    .tp_getset = rp_context_getset,
    .tp_init = (initproc)rp_context_init,
    .tp_new = rp_context_new,
};

/* ---------------------------------------------------------------- module functions */

static PyObject *rp_status_string(PyObject *m, PyObject *arg)
{
    long s = PyLong_AsLong(arg);

    if (s == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(remora_status_string((remora_status_t)s));
}

static PyObject *rp_version(PyObject *m, PyObject *unused)
{
    return PyUnicode_FromString(remora_version_string());
}

static PyObject *rp_cuda_info(PyObject *m, PyObject *unused)
{
    remora_cuda_attr_t a = {.field_mask = REMORA_CUDA_ATTR_FIELD_AVAILABLE |
                                          REMORA_CUDA_ATTR_FIELD_DRIVER_VERSION |
                                          REMORA_CUDA_ATTR_FIELD_DEVICE_COUNT |
                                          REMORA_CUDA_ATTR_FIELD_REASON};
    remora_status_t    st;

    Py_BEGIN_ALLOW_THREADS
    st = remora_cuda_query(&a);
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK)
        return rp_raise(st, "remora_cuda_query");
    return Py_BuildValue("{s:O,s:i,s:i,s:s}", "available", a.available ? Py_True : Py_False,
                         "driver_version", a.driver_version, "device_count", a.device_count,
                         "reason", a.reason);
}

static PyMethodDef rp_module_methods[] = {
    {"status_string", rp_status_string, METH_O,
     "status_string(status)\n--\n\nThe library's description of a status code."},
    {"library_version", rp_version, METH_NOARGS,
     "library_version()\n--\n\n\"MAJOR.MINOR.PATCH\" of the loaded libremora."},
    {"cuda_info", rp_cuda_info, METH_NOARGS,
     "cuda_info()\n--\n\n{'available', 'driver_version', 'device_count', 'reason'} of the "
     "CUDA driver as the library sees it."},
    {NULL},
};

static struct PyModuleDef rp_module = {
    PyModuleDef_HEAD_INIT, RP_MODULE,
    "The C extension behind the `remora` package; import `remora` instead.", -1,
    rp_module_methods,
};

PyTypeObject *rp_RegionInfoType, *rp_EventType;

static PyStructSequence_Field rp_region_info_fields[] = {
    {"name", "region name"},
    {"size", "bytes"},
    {"mem_type", "'host' or 'cuda'"},
    {"readable", "clients may read"},
    {"writable", "clients may write"},
    {"generation", "starts at 1, increases on every replace"},
    {"kind", "'plain', 'ring' or 'signals'"},
    {NULL},
};
static PyStructSequence_Desc rp_region_info_desc = {
    "remora.RegionInfo", "A region as a client sees it.", rp_region_info_fields, 7};

static PyStructSequence_Field rp_event_fields[] = {
    {"type", "'region_changed', 'region_removed' or 'disconnected'"},
    {"name", "region name; None for 'disconnected'"},
    {"size", "region_changed: the new size"},
    {"generation", "region_changed: the new generation"},
    {"status", "disconnected: why (a status code)"},
    {NULL},
};
static PyStructSequence_Desc rp_event_desc = {"remora.Event", "A client event.",
                                              rp_event_fields, 5};

PyMODINIT_FUNC PyInit__remora(void);

PyMODINIT_FUNC PyInit__remora(void)
{
    PyTypeObject *types[] = {&rp_ContextType, &rp_MemoryType, &rp_ServerType,
                             &rp_ClientType,  &rp_RequestType, &rp_RingType,
                             &rp_SubscriptionType, &rp_ElementType, &rp_DeviceViewType,
                             &rp_SlotContextType, &rp_SlotBufferType, &rp_SignalsType};
    PyObject     *m = PyModule_Create(&rp_module);

    if (m == NULL)
        return NULL;
    if (rp_errors_init(m) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        const char *dot;
        if (PyType_Ready(types[i]) < 0)
            goto fail;
        dot = strrchr(types[i]->tp_name, '.');
        if (PyModule_AddObjectRef(m, dot + 1, (PyObject *)types[i]) < 0)
            goto fail;
    }
    rp_RegionInfoType = PyStructSequence_NewType(&rp_region_info_desc);
    rp_EventType = PyStructSequence_NewType(&rp_event_desc);
    if (rp_RegionInfoType == NULL || rp_EventType == NULL ||
        PyModule_AddObjectRef(m, "RegionInfo", (PyObject *)rp_RegionInfoType) < 0 ||
        PyModule_AddObjectRef(m, "Event", (PyObject *)rp_EventType) < 0)
        goto fail;
    if (PyModule_AddIntConstant(m, "DEFAULT_TIMEOUT_MS", REMORA_DEFAULT_TIMEOUT_MS) < 0 ||
        PyModule_AddIntConstant(m, "NAME_MAX", REMORA_NAME_MAX) < 0 ||
        PyModule_AddIntConstant(m, "TOKEN_MIN", REMORA_TOKEN_MIN) < 0 ||
        PyModule_AddIntConstant(m, "TOKEN_MAX", REMORA_TOKEN_MAX) < 0)
        goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
