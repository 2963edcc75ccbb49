/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Client and Request.
 *
 * Events: the library calls rp_event_cb on its progress thread, which only
 * copies the event into an rp_queue_t (queue.c). Python takes events with
 * Client.next_event(timeout) or polls Client.event_fd (readable exactly
 * while events are queued). The queue keeps the newest RP_EVQ_MAX events and
 * counts those it dropped.
 *
 * Request: a read or write in flight. It holds the buffer (Py_buffer or a
 * reference to the GPU array) until the request completed and was released.
 */
#include "rp.h"

#include <time.h>

#define RP_EVQ_MAX 4096

typedef struct rp_evq_item {
    remora_event_type_t type;
    uint64_t            size, generation;
    remora_status_t     status;
    int                 has_name;
    char                name[REMORA_NAME_MAX + 1];
} rp_evq_item_t;

typedef struct rp_client {
    rp_obj_t        base;
    remora_client_h handle;
    rp_queue_t     *evq;
    int             timeout_ms;
    char            addr[128];
} rp_client_t;

typedef struct rp_request {
    rp_obj_t         base;
    remora_request_h handle;
    PyObject        *client;
    rp_buf_t         buf;
    PyObject        *result; /* what wait() returns: the destination of a read */
    remora_status_t  status; /* INPROGRESS until done */
    int              write;
    char             name[64];
} rp_request_t;

void rp_request_destroy(rp_obj_t *o);

/* ---------------------------------------------------------------- events */

/* On the progress thread: no GIL, no Python. */
static void rp_event_cb(const remora_event_t *ev, void *arg)
{
    rp_evq_item_t it = {.type = ev->type, .size = ev->size, .generation = ev->generation,
                        .status = ev->status};

    if (ev->name != NULL) {
        it.has_name = 1;
        snprintf(it.name, sizeof(it.name), "%s", ev->name);
    }
    rp_queue_push(arg, &it);
}

static PyObject *rp_event_object(const rp_evq_item_t *it)
{
    PyObject   *ev = PyStructSequence_New(rp_EventType);
    const char *type = it->type == REMORA_EVENT_REGION_CHANGED   ? "region_changed"
                       : it->type == REMORA_EVENT_REGION_REMOVED ? "region_removed"
                                                                 : "disconnected";

    if (ev == NULL)
        return NULL;
    PyStructSequence_SET_ITEM(ev, 0, PyUnicode_FromString(type));
    PyStructSequence_SET_ITEM(ev, 1, it->has_name ? PyUnicode_FromString(it->name)
                                                  : Py_NewRef(Py_None));
    PyStructSequence_SET_ITEM(ev, 2, PyLong_FromUnsignedLongLong(it->size));
    PyStructSequence_SET_ITEM(ev, 3, PyLong_FromUnsignedLongLong(it->generation));
    PyStructSequence_SET_ITEM(ev, 4, PyLong_FromLong((long)it->status));
    if (PyErr_Occurred()) {
        Py_DECREF(ev);
        return NULL;
    }
    return ev;
}

/* ---------------------------------------------------------------- Client */

static void rp_client_destroy(rp_obj_t *o)
{
    rp_client_t    *self = (rp_client_t *)o;
    remora_client_h h = self->handle;

    self->handle = NULL;
    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS
        remora_client_disconnect(h); /* no event callback after this */
        Py_END_ALLOW_THREADS
    }
    /* The queue stays until dealloc: another thread may wait on it. */
    if (self->evq != NULL)
        rp_queue_wake(self->evq);
}

static PyObject *rp_client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char           *kwlist[] = {"context", "address", "token", "timeout", "path",
                                       "lanes", NULL};
    PyObject              *ctx, *tobj = Py_None;
    const char            *addr, *path = NULL;
    Py_buffer              token = {0};
    unsigned               lanes = 0;
    remora_client_params_t p = {.field_mask = REMORA_CLIENT_FIELD_EVENT_CB};
    rp_client_t           *self = NULL;
    remora_status_t        st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!s|$z*OzO&", kwlist, &rp_ContextType, &ctx,
                                     &addr, &token, &tobj, &path, rp_uint_conv, &lanes))
        return NULL;
    if (rp_check_open((rp_obj_t *)ctx, "Context") < 0)
        goto fail;
    if (token.buf != NULL) {
        p.field_mask |= REMORA_CLIENT_FIELD_TOKEN;
        p.token = token.buf;
        p.token_len = (size_t)token.len;
    }
    if (tobj != Py_None) {
        if (rp_timeout_ms(tobj, &p.timeout_ms) < 0)
            goto fail;
        p.field_mask |= REMORA_CLIENT_FIELD_TIMEOUT;
    }
    if (path != NULL) {
        if (remora_path_parse(path, &p.path) != REMORA_OK) {
            PyErr_Format(PyExc_ValueError, "path must be one of auto, am, rma, map, ipc, "
                                           "staging; not %s", path);
            goto fail;
        }
        p.field_mask |= REMORA_CLIENT_FIELD_PATH;
    }
    if (lanes != 0) {
        p.field_mask |= REMORA_CLIENT_FIELD_LANES;
        p.lanes = lanes;
    }
    self = (rp_client_t *)type->tp_alloc(type, 0);
    if (self == NULL)
        goto fail;
    self->base.destroy = rp_client_destroy;
    rp_obj_link(&self->base, (rp_context_t *)ctx);
    self->evq = rp_queue_new(sizeof(rp_evq_item_t), RP_EVQ_MAX);
    if (self->evq == NULL) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    p.event_cb = rp_event_cb;
    p.event_arg = self->evq;
    self->timeout_ms = (p.field_mask & REMORA_CLIENT_FIELD_TIMEOUT) ? p.timeout_ms
                                                                    : REMORA_DEFAULT_TIMEOUT_MS;
    snprintf(self->addr, sizeof(self->addr), "%s", addr);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_connect(((rp_context_t *)ctx)->handle, addr, &p, &self->handle);
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK) {
        self->handle = NULL;
        rp_raise(st, "connect(%s)", addr);
        goto fail;
    }
    if (token.buf != NULL)
        PyBuffer_Release(&token);
    return (PyObject *)self;

fail:
    Py_XDECREF(self);
    if (token.buf != NULL)
        PyBuffer_Release(&token);
    return NULL;
}

static void rp_client_dealloc(rp_client_t *self)
{
    rp_obj_dealloc_common(&self->base);
    rp_queue_free(self->evq);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int rp_client_open(rp_client_t *self)
{
    return rp_check_open(&self->base, "Client");
}

static PyObject *rp_region_info_object(const remora_region_info_t *ri)
{
    PyObject *o = PyStructSequence_New(rp_RegionInfoType);

    if (o == NULL)
        return NULL;
    PyStructSequence_SET_ITEM(o, 0, PyUnicode_FromString(ri->name));
    PyStructSequence_SET_ITEM(o, 1, PyLong_FromUnsignedLongLong(ri->size));
    PyStructSequence_SET_ITEM(o, 2,
                              PyUnicode_FromString(ri->mem_type == REMORA_MEM_CUDA ? "cuda"
                                                                                  : "host"));
    PyStructSequence_SET_ITEM(o, 3, PyBool_FromLong(!!(ri->access & REMORA_ACCESS_READ)));
    PyStructSequence_SET_ITEM(o, 4, PyBool_FromLong(!!(ri->access & REMORA_ACCESS_WRITE)));
    PyStructSequence_SET_ITEM(o, 5, PyLong_FromUnsignedLongLong(ri->generation));
    PyStructSequence_SET_ITEM(o, 6, PyUnicode_FromString(ri->kind == REMORA_REGION_RING ? "ring"
                                                         : ri->kind == REMORA_REGION_SIGNALS
                                                             ? "signals"
                                                             : "plain"));
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

static PyObject *rp_client_list(rp_client_t *self, PyObject *unused)
{
    remora_region_info_t *infos = NULL;
    size_t                n = 0;
    remora_status_t       st;
    PyObject             *list;

    if (rp_client_open(self) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_list(self->handle, &infos, &n);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "list");
    list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *o = rp_region_info_object(&infos[i]);
        if (o == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, o);
    }
    remora_region_info_free(infos);
    return list;
}

static int rp_lookup(rp_client_t *self, const char *name, remora_region_info_t *ri)
{
    remora_status_t st;

    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_lookup(self->handle, name, ri);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK) {
        rp_raise(st, "lookup(%s)", name);
        return -1;
    }
    return 0;
}

static PyObject *rp_client_lookup(rp_client_t *self, PyObject *args)
{
    const char          *name;
    remora_region_info_t ri = {.field_mask = 0}; /* every field */

    if (!PyArg_ParseTuple(args, "s", &name) || rp_client_open(self) < 0)
        return NULL;
    if (rp_lookup(self, name, &ri) < 0)
        return NULL;
    return rp_region_info_object(&ri);
}

/* The bytes from offset to the region's end, for reads without a length. */
static int rp_rest_of_region(rp_client_t *self, const char *name, uint64_t off, size_t *len)
{
    remora_region_info_t ri = {.field_mask = REMORA_REGION_INFO_FIELD_SIZE};

    if (rp_lookup(self, name, &ri) < 0)
        return -1;
    if (off > ri.size) {
        rp_raise(REMORA_ERR_OUT_OF_RANGE, "read(%s): offset %llu past the region's %llu bytes",
                 name, (unsigned long long)off, (unsigned long long)ri.size);
        return -1;
    }
    *len = (size_t)(ri.size - off);
    return 0;
}

static PyObject *rp_numpy_empty(PyObject *shape, PyObject *dtype, size_t len)
{
    static PyObject *empty;
    PyObject        *np, *arr, *kw, *args;

    if (empty == NULL) {
        np = PyImport_ImportModule("numpy");
        if (np == NULL)
            return NULL;
        empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
        if (empty == NULL)
            return NULL;
    }
    if (dtype == Py_None) {
        dtype = NULL;
    }
    if (shape == Py_None) {
        /* 1-D: as many items as fit in len bytes. */
        PyObject *np_dtype, *d, *isz;
        Py_ssize_t itemsize;
        np = PyImport_ImportModule("numpy");
        if (np == NULL)
            return NULL;
        np_dtype = PyObject_GetAttrString(np, "dtype");
        Py_DECREF(np);
        if (np_dtype == NULL)
            return NULL;
        d = PyObject_CallOneArg(np_dtype, dtype != NULL ? dtype : Py_None);
        Py_DECREF(np_dtype);
        if (d == NULL)
            return NULL;
        isz = PyObject_GetAttrString(d, "itemsize");
        Py_DECREF(d);
        if (isz == NULL)
            return NULL;
        itemsize = PyLong_AsSsize_t(isz);
        Py_DECREF(isz);
        if (itemsize <= 0 || len % (size_t)itemsize != 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "length %zu is not a multiple of the dtype's "
                                               "itemsize %zd", len, itemsize);
            return NULL;
        }
        shape = PyLong_FromSize_t(len / (size_t)itemsize);
    } else {
        Py_INCREF(shape);
    }
    if (shape == NULL)
        return NULL;
    args = PyTuple_Pack(1, shape);
    Py_DECREF(shape);
    kw = dtype != NULL ? Py_BuildValue("{s:O}", "dtype", dtype) : NULL;
    arr = args != NULL && (dtype == NULL || kw != NULL) ? PyObject_Call(empty, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return arr;
}

static PyObject *rp_client_read(rp_client_t *self, PyObject *args, PyObject *kw)
{
    static char    *kwlist[] = {"name", "offset", "length", "out", "dtype", "shape", NULL};
    const char     *name;
    PyObject       *oobj = NULL, *lobj = Py_None, *out = Py_None, *dtype = Py_None,
             *shape = Py_None, *result;
    uint64_t        off = 0;
    size_t          len;
    rp_buf_t        b;
    remora_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|OO$OOO", kwlist, &name, &oobj, &lobj, &out,
                                     &dtype, &shape))
        return NULL;
    if (rp_client_open(self) < 0 || (oobj != NULL && rp_offset(oobj, &off) < 0) ||
        rp_size(lobj, 0, &len) < 0)
        return NULL;
    if (out != Py_None) {
        if (dtype != Py_None || shape != Py_None) {
            PyErr_SetString(PyExc_TypeError, "give out or dtype/shape, not both");
            return NULL;
        }
        if (rp_buf_get(out, 1, &b) < 0)
            return NULL;
        if (lobj == Py_None)
            len = b.len;
        else if (len > b.len) {
            rp_buf_release(&b);
            return rp_raise(REMORA_ERR_OUT_OF_RANGE,
                            "read(%s): length %zu larger than the buffer (%zu bytes)", name,
                            len, b.len);
        }
        result = Py_NewRef(out);
    } else {
        if (lobj == Py_None && shape == Py_None && rp_rest_of_region(self, name, off, &len) < 0)
            return NULL;
        if (dtype != Py_None || shape != Py_None) {
            result = rp_numpy_empty(shape, dtype, len);
            if (result == NULL)
                return NULL;
            if (rp_buf_get(result, 1, &b) < 0) {
                Py_DECREF(result);
                return NULL;
            }
            if (lobj != Py_None && len != b.len) {
                rp_buf_release(&b);
                Py_DECREF(result);
                PyErr_Format(PyExc_ValueError,
                             "length %zu does not match the array's %zu bytes", len, b.len);
                return NULL;
            }
            len = b.len;
        } else {
            result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
            if (result == NULL)
                return NULL;
            memset(&b, 0, sizeof(b));
            b.ptr = PyBytes_AS_STRING(result);
        }
    }
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_read(self->handle, name, off, b.ptr, len);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    rp_buf_release(&b);
    if (st != REMORA_OK) {
        Py_DECREF(result);
        return rp_raise(st, "read(%s, offset %llu, %zu bytes)", name, (unsigned long long)off,
                        len);
    }
    return result;
}

/*
 * _read_loop(name, out, count, span): count blocking reads of len(out) bytes
 * at consecutive offsets (wrapping before span), in C with the GIL released;
 * returns the seconds they took. The loop `remora bench` runs, without the
 * binding: python/bench.py times it against the same reads from Python in
 * one process, which no process-to-process noise can reach.
 */
static PyObject *rp_client_read_loop(rp_client_t *self, PyObject *args)
{
    const char     *name;
    PyObject       *out;
    Py_ssize_t      count;
    unsigned long long span;
    rp_buf_t        b;
    remora_status_t st = REMORA_OK;
    struct timespec t0, t1;

    if (!PyArg_ParseTuple(args, "sOnK", &name, &out, &count, &span) || rp_client_open(self) < 0)
        return NULL;
    if (rp_buf_get(out, 1, &b) < 0)
        return NULL;
    if (b.len == 0 || span < b.len || count < 0) {
        rp_buf_release(&b);
        PyErr_SetString(PyExc_ValueError, "_read_loop: empty buffer, span below it, or count < 0");
        return NULL;
    }
    uint64_t blocks = span / b.len;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (Py_ssize_t i = 0; i < count && st == REMORA_OK; i++)
        st = remora_client_read(self->handle, name, (uint64_t)i % blocks * b.len, b.ptr, b.len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    rp_buf_release(&b);
    if (st != REMORA_OK)
        return rp_raise(st, "_read_loop(%s)", name);
    return PyFloat_FromDouble((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
}

/* write(name, offset, data, length=None) */
static PyObject *rp_client_write(rp_client_t *self, PyObject *args, PyObject *kw)
{
    static char    *kwlist[] = {"name", "offset", "data", "length", NULL};
    const char     *name;
    PyObject       *oobj, *data, *lobj = Py_None;
    uint64_t        off;
    size_t          len;
    rp_buf_t        b;
    remora_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|O", kwlist, &name, &oobj, &data, &lobj))
        return NULL;
    if (rp_client_open(self) < 0 || rp_offset(oobj, &off) < 0)
        return NULL;
    if (rp_buf_get(data, 0, &b) < 0)
        return NULL;
    if (rp_size(lobj, b.len, &len) < 0 || len > b.len) {
        rp_buf_release(&b);
        if (!PyErr_Occurred())
            rp_raise(REMORA_ERR_OUT_OF_RANGE, "write(%s): length larger than the data", name);
        return NULL;
    }
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_write(self->handle, name, off, b.ptr, len);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    rp_buf_release(&b);
    if (st != REMORA_OK)
        return rp_raise(st, "write(%s, offset %llu, %zu bytes)", name, (unsigned long long)off,
                        len);
    Py_RETURN_NONE;
}

static PyObject *rp_client_nb(rp_client_t *self, PyObject *args, PyObject *kw, int write)
{
    static char    *kwlist[] = {"name", "offset", "buffer", "length", NULL};
    const char     *name;
    PyObject       *oobj, *bobj, *lobj = Py_None;
    uint64_t        off;
    size_t          len;
    rp_request_t   *req;
    remora_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|O", kwlist, &name, &oobj, &bobj, &lobj))
        return NULL;
    if (rp_client_open(self) < 0 || rp_offset(oobj, &off) < 0)
        return NULL;
    req = PyObject_New(rp_request_t, &rp_RequestType);
    if (req == NULL)
        return NULL;
    memset((char *)req + sizeof(PyObject), 0, sizeof(*req) - sizeof(PyObject));
    req->base.destroy = NULL; /* set below, once there is something to destroy */
    rp_obj_link(&req->base, self->base.ctx);
    req->status = REMORA_INPROGRESS;
    req->write = write;
    req->client = Py_NewRef((PyObject *)self);
    snprintf(req->name, sizeof(req->name), "%s", name);
    if (rp_buf_get(bobj, !write, &req->buf) < 0)
        goto fail;
    if (rp_size(lobj, req->buf.len, &len) < 0)
        goto fail;
    if (len > req->buf.len) {
        rp_raise(REMORA_ERR_OUT_OF_RANGE, "length %zu larger than the buffer (%zu bytes)", len,
                 req->buf.len);
        goto fail;
    }
    if (!write)
        req->result = Py_NewRef(bobj);
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = write ? remora_client_write_nb(self->handle, name, off, req->buf.ptr, len, &req->handle)
               : remora_client_read_nb(self->handle, name, off, req->buf.ptr, len, &req->handle);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK) {
        req->handle = NULL;
        rp_raise(st, "%s_nb(%s, offset %llu, %zu bytes)", write ? "write" : "read", name,
                 (unsigned long long)off, len);
        goto fail;
    }
    req->base.destroy = rp_request_destroy;
    return (PyObject *)req;

fail:
    Py_DECREF(req);
    return NULL;
}

static PyObject *rp_client_read_nb(rp_client_t *self, PyObject *args, PyObject *kw)
{
    return rp_client_nb(self, args, kw, 0);
}

static PyObject *rp_client_write_nb(rp_client_t *self, PyObject *args, PyObject *kw)
{
    return rp_client_nb(self, args, kw, 1);
}

/* signal(name, index, value, op='set') */
static PyObject *rp_client_signal(rp_client_t *self, PyObject *args, PyObject *kw)
{
    static char       *kwlist[] = {"name", "index", "value", "op", NULL};
    const char        *name, *opname = "set";
    PyObject          *iobj, *vobj;
    size_t             index;
    uint64_t           v;
    remora_signal_op_t op;
    remora_status_t    st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|s", kwlist, &name, &iobj, &vobj, &opname))
        return NULL;
    if (rp_client_open(self) < 0 || rp_size(iobj, 0, &index) < 0 ||
        rp_signal_value(vobj, &v) < 0 || rp_signal_op(opname, &op) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_signal(self->handle, name, index, op, v);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "signal(%s[%zu] %s %llu)", name, index, opname,
                        (unsigned long long)v);
    Py_RETURN_NONE;
}

static PyObject *rp_client_ping(rp_client_t *self, PyObject *unused)
{
    double          us = 0;
    remora_status_t st;

    if (rp_client_open(self) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_ping(self->handle, &us);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "ping");
    return PyFloat_FromDouble(us / 1e6);
}

static PyObject *rp_client_path(rp_client_t *self, PyObject *args)
{
    const char     *name;
    remora_path_t   path;
    remora_status_t st;

    if (!PyArg_ParseTuple(args, "s", &name) || rp_client_open(self) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_region_path(self->handle, name, &path);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "path(%s)", name);
    return PyUnicode_FromString(remora_path_string(path));
}

static PyObject *rp_client_clone_ring(rp_client_t *self, PyObject *args)
{
    const char     *name;
    remora_ring_h   ring = NULL;
    remora_status_t st;

    if (!PyArg_ParseTuple(args, "s", &name) || rp_client_open(self) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_client_clone_ring(self->handle, name, &ring);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "clone_ring(%s)", name);
    return rp_ring_wrap(self->base.ctx, ring);
}

static PyObject *rp_client_subscribe(rp_client_t *self, PyObject *args, PyObject *kw)
{
    if (rp_client_open(self) < 0)
        return NULL;
    return rp_subscribe((PyObject *)self, self->handle, args, kw);
}

static PyObject *rp_client_next_event(rp_client_t *self, PyObject *args, PyObject *kw)
{
    static char  *kwlist[] = {"timeout", NULL};
    PyObject     *tobj = NULL;
    rp_evq_item_t it;
    int           got;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &tobj))
        return NULL;
    got = rp_queue_take(self->evq, &self->base, tobj, &it);
    if (got < 0)
        return NULL;
    if (got == 0)
        Py_RETURN_NONE;
    return rp_event_object(&it);
}

static PyObject *rp_client_close(rp_client_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_client_exit(rp_client_t *self, PyObject *args)
{
    return rp_client_close(self, NULL);
}

static PyObject *rp_enter_self(PyObject *self, PyObject *unused) { return Py_NewRef(self); }

static PyObject *rp_client_event_fd(rp_client_t *self, void *closure)
{
    return PyLong_FromLong(rp_queue_fd(self->evq));
}

static PyObject *rp_client_events_dropped(rp_client_t *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(rp_queue_dropped(self->evq));
}

static PyObject *rp_client_address(rp_client_t *self, void *closure)
{
    return PyUnicode_FromString(self->addr);
}

static PyObject *rp_client_timeout(rp_client_t *self, void *closure)
{
    return PyFloat_FromDouble(self->timeout_ms / 1000.0);
}

static PyObject *rp_client_lanes(rp_client_t *self, void *closure)
{
    if (rp_client_open(self) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(remora_client_lanes(self->handle));
}

static PyObject *rp_client_closed(rp_client_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static PyObject *rp_client_repr(rp_client_t *self)
{
    return PyUnicode_FromFormat("<remora.Client %s%s>", self->addr,
                                self->base.closed ? " closed" : "");
}

static PyMethodDef rp_client_methods[] = {
    {"list", (PyCFunction)rp_client_list, METH_NOARGS,
     "list()\n--\n\nEvery region, as a list of RegionInfo."},
    {"lookup", (PyCFunction)rp_client_lookup, METH_VARARGS,
     "lookup(name)\n--\n\nOne region's RegionInfo (asks the server). NotFound if none."},
    {"read", RP_FN(rp_client_read), RP_KW,
     "read(name, offset=0, length=None, *, out=None, dtype=None, shape=None)\n--\n\n"
     "Read [offset, offset+length) of a region. Returns bytes; or, with out (any writable "
     "buffer, NumPy array, CuPy array or torch tensor, host or GPU), fills out (length "
     "defaults to its size) and returns it; or, with dtype and/or shape, a new NumPy array. "
     "length None: to the region's end (one more round trip to learn its size)."},
    {"write", RP_FN(rp_client_write), RP_KW,
     "write(name, offset, data, length=None)\n--\n\nWrite data (any bytes-like object, "
     "NumPy, CuPy or torch array, host or GPU) at offset."},
    {"read_nb", RP_FN(rp_client_read_nb), RP_KW,
     "read_nb(name, offset, out, length=None)\n--\n\nStart a read into out; returns a "
     "Request. out must not be touched until the request is done."},
    {"write_nb", RP_FN(rp_client_write_nb), RP_KW,
     "write_nb(name, offset, data, length=None)\n--\n\nStart a write; returns a Request."},
    {"_read_loop", (PyCFunction)rp_client_read_loop, METH_VARARGS,
     "_read_loop(name, out, count, span)\n--\n\nBenchmark hook: count reads into out in C "
     "(consecutive blocks wrapping before span); returns the seconds taken."},
    {"signal", RP_FN(rp_client_signal), RP_KW,
     "signal(name, index, value, op='set')\n--\n\nSet ('set') or add to ('add', modulo "
     "2**64) word index of the server's signal array name; returns once the server applied "
     "it. Updates of one client are applied in order. OutOfRange for a bad index, "
     "InvalidParam when name is not a signal array."},
    {"ping", (PyCFunction)rp_client_ping, METH_NOARGS,
     "ping()\n--\n\nRound trip to the server and back, in seconds."},
    {"path", (PyCFunction)rp_client_path, METH_VARARGS,
     "path(name)\n--\n\nThe data path reads and writes of this region use: 'am', 'rma', "
     "'map', 'ipc' or 'staging'."},
    {"clone_ring", (PyCFunction)rp_client_clone_ring, METH_VARARGS,
     "clone_ring(name)\n--\n\nA local Ring holding a copy of a remote ring's current state."},
    {"subscribe", RP_FN(rp_client_subscribe), RP_KW,
     "subscribe(name, mode='every', *, timeout=None, batch_bytes=None)\n--\n\n"
     "Follow a remote ring: returns a Subscription, an iterator of Elements. mode 'every' "
     "(every element in order, drops counted) or 'latest' (always the newest). timeout: "
     "seconds each next() waits (None: the client's timeout) before TimedOut."},
    {"next_event", RP_FN(rp_client_next_event), RP_KW,
     "next_event(timeout=0)\n--\n\nThe next Event (region_changed, region_removed, "
     "disconnected), waiting up to timeout seconds (None: until one comes); None if none "
     "came. event_fd is readable while events are queued."},
    {"close", (PyCFunction)rp_client_close, METH_NOARGS,
     "close()\n--\n\nDisconnect. Idempotent. Requests in flight end Canceled."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_client_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_client_getset[] = {
    {"event_fd", (getter)rp_client_event_fd, NULL,
     "A file descriptor readable while events are queued (for select/poll/asyncio).", NULL},
    {"events_dropped", (getter)rp_client_events_dropped, NULL,
     "Events dropped because 4096 were queued and not taken.", NULL},
    {"address", (getter)rp_client_address, NULL, "'HOST:PORT' connected to.", NULL},
    {"timeout", (getter)rp_client_timeout, NULL, "Bound on every blocking call, seconds.", NULL},
    {"lanes", (getter)rp_client_lanes, NULL, "Connections large transfers are spread over.",
     NULL},
    {"closed", (getter)rp_client_closed, NULL, "True once closed.", NULL},
    {NULL},
};

PyTypeObject rp_ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Client",
    .tp_basicsize = sizeof(rp_client_t),
    .tp_dealloc = (destructor)rp_client_dealloc,
    .tp_repr = (reprfunc)rp_client_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(context, address, *, token=None, timeout=None, path=None, "
              "lanes=None)\n--\n\n"
              "Connect to a server at 'HOST:PORT'. timeout (seconds, default 10) bounds the "
              "connect and every blocking call. path forces a data path ('am', 'rma', "
              "'map', 'ipc', 'staging'). A server of the same Context cannot be connected "
              "to (Unsupported).",
    .tp_methods = rp_client_methods,
    .tp_getset = rp_client_getset,
    .tp_new = rp_client_new,
};

/* ---------------------------------------------------------------- Request */

void rp_request_destroy(rp_obj_t *o)
{
    rp_request_t    *self = (rp_request_t *)o;
    remora_request_h h = self->handle;

    self->handle = NULL;
    if (h != NULL) {
        /* Waits for one still in flight (bounded); then the buffer is ours again. */
        Py_BEGIN_ALLOW_THREADS
        remora_request_release(h);
        Py_END_ALLOW_THREADS
        if (self->status == REMORA_INPROGRESS)
            self->status = REMORA_ERR_CANCELED;
    }
    rp_buf_release(&self->buf);
}

static void rp_request_dealloc(rp_request_t *self)
{
    rp_obj_dealloc_common(&self->base);
    rp_buf_release(&self->buf);
    Py_CLEAR(self->client);
    Py_CLEAR(self->result);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The request completed with st: release it and its buffer now. */
static void rp_request_finish(rp_request_t *self, remora_status_t st)
{
    self->status = st;
    rp_obj_close(&self->base, 0);
}

static PyObject *rp_request_outcome(rp_request_t *self)
{
    if (self->status != REMORA_OK)
        return rp_raise(self->status, "%s(%s)", self->write ? "write_nb" : "read_nb",
                        self->name);
    return Py_NewRef(self->result != NULL ? self->result : Py_None);
}

static PyObject *rp_request_wait(rp_request_t *self, PyObject *args, PyObject *kw)
{
    static char    *kwlist[] = {"timeout", NULL};
    PyObject       *tobj = Py_None;
    int             ms;
    remora_status_t st;
    remora_request_h h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &tobj) ||
        rp_timeout_ms(tobj, &ms) < 0)
        return NULL;
    if (self->status != REMORA_INPROGRESS || self->handle == NULL) {
        if (self->status == REMORA_INPROGRESS)
            return rp_raise_closed("Request");
        return rp_request_outcome(self);
    }
    h = self->handle;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_request_wait(h, ms);
    Py_END_ALLOW_THREADS
    /* Before rp_leave: it may run a close another thread deferred, which
     * releases h. */
    int in_flight = st == REMORA_ERR_TIMED_OUT && remora_request_test(h) == REMORA_INPROGRESS;
    rp_leave(&self->base);
    if (in_flight)
        return rp_raise(st, "wait: still in flight");
    if (self->status == REMORA_INPROGRESS)
        rp_request_finish(self, st);
    return rp_request_outcome(self);
}

static PyObject *rp_request_done(rp_request_t *self, PyObject *unused)
{
    remora_status_t st;

    if (self->status != REMORA_INPROGRESS || self->handle == NULL)
        Py_RETURN_TRUE;
    st = remora_request_test(self->handle);
    if (st == REMORA_INPROGRESS)
        Py_RETURN_FALSE;
    rp_request_finish(self, st);
    Py_RETURN_TRUE;
}

static PyObject *rp_request_close(rp_request_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_request_exit(rp_request_t *self, PyObject *args)
{
    return rp_request_close(self, NULL);
}

static PyObject *rp_request_status(rp_request_t *self, void *closure)
{
    return PyLong_FromLong((long)self->status);
}

static PyObject *rp_request_repr(rp_request_t *self)
{
    return PyUnicode_FromFormat("<remora.Request %s %s: %s>", self->write ? "write" : "read",
                                self->name,
                                self->status == REMORA_INPROGRESS
                                    ? "in flight"
                                    : remora_status_string(self->status));
}

static PyMethodDef rp_request_methods[] = {
    {"wait", RP_FN(rp_request_wait), RP_KW,
     "wait(timeout=None)\n--\n\nWait for completion (timeout seconds; None: the client's "
     "timeout). Returns the read's destination (None for a write) or raises its error; "
     "TimedOut leaves the request in flight."},
    {"done", (PyCFunction)rp_request_done, METH_NOARGS,
     "done()\n--\n\nTrue once complete (then wait() returns at once). Never blocks."},
    {"close", (PyCFunction)rp_request_close, METH_NOARGS,
     "close()\n--\n\nRelease the request, waiting (bounded) for one in flight."},
    {"__enter__", rp_enter_self, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_request_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_request_getset[] = {
    {"status", (getter)rp_request_status, NULL,
     "1 (INPROGRESS) while in flight, then 0 or a negative error status.", NULL},
    {NULL},
};

PyTypeObject rp_RequestType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Request",
    .tp_basicsize = sizeof(rp_request_t),
    .tp_dealloc = (destructor)rp_request_dealloc,
    .tp_repr = (reprfunc)rp_request_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read or write in flight (Client.read_nb / write_nb). Holds its buffer "
              "until done.",
    .tp_methods = rp_request_methods,
    .tp_getset = rp_request_getset,
};
