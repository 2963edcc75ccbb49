/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Signals: an array of 64-bit words that remote peers set or add to
 * (Client.signal, or stream operations from C/CUDA) and that Python waits on
 * (wait, with the GIL released). Exposed with Server.expose_signals.
 *
 * No buffer protocol on purpose: the words change under any view, and a view
 * outliving close() would point at freed memory. Reads go through read() /
 * [i] / tolist(); GPU code gets the words' device address (device_ptr).
 */
#include "rp.h"

#include <strings.h>

typedef struct rp_signals {
    rp_obj_t         base;
    remora_signals_h handle;
    size_t           count;
} rp_signals_t;

remora_signals_h rp_signals_handle(PyObject *sig) { return ((rp_signals_t *)sig)->handle; }

static void rp_signals_destroy(rp_obj_t *o)
{
    rp_signals_t    *self = (rp_signals_t *)o;
    remora_signals_h h = self->handle;

    self->handle = NULL;
    if (h != NULL) {
        Py_BEGIN_ALLOW_THREADS
        remora_signals_destroy(h); /* unexposes it first */
        Py_END_ALLOW_THREADS
    }
}

/* A value for a word: an int in [-2^63, 2^64); negatives wrap (ADD -1 subtracts one). */
int rp_signal_value(PyObject *obj, uint64_t *v)
{
    PyObject *idx = PyNumber_Index(obj);

    if (idx == NULL)
        return -1;
    *v = PyLong_AsUnsignedLongLong(idx);
    if (*v == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        long long s = PyLong_AsLongLong(idx);
        if (s == -1 && PyErr_Occurred()) {
            Py_DECREF(idx);
            PyErr_SetString(PyExc_OverflowError, "a signal value must be in [-2**63, 2**64)");
            return -1;
        }
        *v = (uint64_t)s;
    }
    Py_DECREF(idx);
    return 0;
}

/* "set" or "add" (case-insensitive). */
int rp_signal_op(const char *s, remora_signal_op_t *op)
{
    if (strcasecmp(s, "set") == 0) {
        *op = REMORA_SIGNAL_SET;
    } else if (strcasecmp(s, "add") == 0) {
        *op = REMORA_SIGNAL_ADD;
    } else {
        PyErr_Format(PyExc_ValueError, "op must be 'set' or 'add', not '%s'", s);
        return -1;
    }
    return 0;
}

static int rp_signal_cmp(const char *s, remora_cmp_t *cmp)
{
    static const struct {
        const char  *name, *sym;
        remora_cmp_t cmp;
    } names[] = {{"geq", ">=", REMORA_CMP_GEQ}, {"eq", "==", REMORA_CMP_EQ},
                 {"neq", "!=", REMORA_CMP_NEQ}};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0 || strcmp(s, names[i].sym) == 0) {
            *cmp = names[i].cmp;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "cmp must be 'geq', 'eq' or 'neq', not '%s'", s);
    return -1;
}

/* index in [0, count) (negatives count from the end, as for a list). */
static int rp_signals_index(rp_signals_t *self, Py_ssize_t i, size_t *index)
{
    if (i < 0)
        i += (Py_ssize_t)self->count;
    if (i < 0 || (size_t)i >= self->count) {
        rp_raise(REMORA_ERR_OUT_OF_RANGE, "signal index %zd of %zu", i, self->count);
        return -1;
    }
    *index = (size_t)i;
    return 0;
}

static int rp_signals_open(rp_signals_t *self) { return rp_check_open(&self->base, "Signals"); }

static PyObject *rp_signals_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char            *kwlist[] = {"context", "count", "init", NULL};
    PyObject               *ctx, *cobj, *iobj = NULL;
    size_t                  count;
    remora_signals_params_t p = {0};
    remora_signals_h        h = NULL;
    remora_status_t         st;
    rp_signals_t           *self;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|$O", kwlist, &rp_ContextType, &ctx, &cobj,
                                     &iobj))
        return NULL;
    if (rp_check_open((rp_obj_t *)ctx, "Context") < 0 || rp_size(cobj, 0, &count) < 0)
        return NULL;
    if (iobj != NULL) {
        if (rp_signal_value(iobj, &p.init) < 0)
            return NULL;
        p.field_mask |= REMORA_SIGNALS_FIELD_INIT;
    }
    Py_BEGIN_ALLOW_THREADS
    st = remora_signals_create(((rp_context_t *)ctx)->handle, count, &p, &h);
    Py_END_ALLOW_THREADS
    if (st != REMORA_OK)
        return rp_raise(st, "Signals(count=%zu)", count);
    self = PyObject_New(rp_signals_t, &rp_SignalsType);
    if (self == NULL) {
        remora_signals_destroy(h);
        return NULL;
    }
    memset((char *)self + sizeof(PyObject), 0, sizeof(*self) - sizeof(PyObject));
    self->base.destroy = rp_signals_destroy;
    rp_obj_link(&self->base, (rp_context_t *)ctx);
    self->handle = h;
    self->count = count;
    return (PyObject *)self;
}

static void rp_signals_dealloc(rp_signals_t *self)
{
    rp_obj_dealloc_common(&self->base);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *rp_signals_item(rp_signals_t *self, Py_ssize_t i)
{
    size_t          index;
    uint64_t        v;
    remora_status_t st;

    if (rp_signals_open(self) < 0 || rp_signals_index(self, i, &index) < 0)
        return NULL;
    if ((st = remora_signals_read(self->handle, index, &v)) != REMORA_OK)
        return rp_raise(st, "Signals.read(%zu)", index);
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *rp_signals_read(rp_signals_t *self, PyObject *arg)
{
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);

    if (i == -1 && PyErr_Occurred())
        return NULL;
    return rp_signals_item(self, i);
}

/* Word i op= value: the one update behind set(), add() and s[i] = v. */
static int rp_signals_apply(rp_signals_t *self, Py_ssize_t i, PyObject *vobj,
                            remora_signal_op_t op)
{
    size_t          index;
    uint64_t        v;
    remora_status_t st;

    if (rp_signals_open(self) < 0 || rp_signals_index(self, i, &index) < 0 ||
        rp_signal_value(vobj, &v) < 0)
        return -1;
    if ((st = remora_signals_update(self->handle, index, op, v)) != REMORA_OK) {
        rp_raise(st, "Signals.%s(%zu)", op == REMORA_SIGNAL_SET ? "set" : "add", index);
        return -1;
    }
    return 0;
}

static PyObject *rp_signals_update(rp_signals_t *self, PyObject *args, remora_signal_op_t op)
{
    Py_ssize_t i;
    PyObject  *vobj;

    if (!PyArg_ParseTuple(args, "nO", &i, &vobj) || rp_signals_apply(self, i, vobj, op) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_signals_set(rp_signals_t *self, PyObject *args)
{
    return rp_signals_update(self, args, REMORA_SIGNAL_SET);
}

static PyObject *rp_signals_add(rp_signals_t *self, PyObject *args)
{
    return rp_signals_update(self, args, REMORA_SIGNAL_ADD);
}

static int rp_signals_ass_item(rp_signals_t *self, Py_ssize_t i, PyObject *vobj)
{
    if (vobj == NULL) {
        PyErr_SetString(PyExc_TypeError, "signals cannot be deleted");
        return -1;
    }
    return rp_signals_apply(self, i, vobj, REMORA_SIGNAL_SET);
}

/* wait(index, value, cmp='geq', timeout=None) */
static PyObject *rp_signals_wait(rp_signals_t *self, PyObject *args, PyObject *kw)
{
    static char    *kwlist[] = {"index", "value", "cmp", "timeout", NULL};
    Py_ssize_t      i;
    PyObject       *vobj, *tobj = Py_None;
    const char     *cname = "geq";
    size_t          index;
    uint64_t        v, got = 0;
    remora_cmp_t    cmp;
    int             ms;
    remora_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "nO|sO", kwlist, &i, &vobj, &cname, &tobj))
        return NULL;
    if (rp_signals_open(self) < 0 || rp_signals_index(self, i, &index) < 0 ||
        rp_signal_value(vobj, &v) < 0 || rp_signal_cmp(cname, &cmp) < 0 ||
        rp_timeout_ms(tobj, &ms) < 0)
        return NULL;
    rp_enter(&self->base);
    Py_BEGIN_ALLOW_THREADS
    st = remora_signals_wait(self->handle, index, cmp, v, ms, &got);
    Py_END_ALLOW_THREADS
    rp_leave(&self->base);
    if (st != REMORA_OK)
        return rp_raise(st, "Signals.wait(%zu %s %llu)", index, cname, (unsigned long long)v);
    return PyLong_FromUnsignedLongLong(got);
}

static PyObject *rp_signals_tolist(rp_signals_t *self, PyObject *unused)
{
    volatile uint64_t *w;
    PyObject          *list;

    if (rp_signals_open(self) < 0)
        return NULL;
    w = remora_signals_host_ptr(self->handle);
    if ((list = PyList_New((Py_ssize_t)self->count)) == NULL)
        return NULL;
    for (size_t i = 0; i < self->count; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(__atomic_load_n(&w[i], __ATOMIC_ACQUIRE));
        if (x == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, x);
    }
    return list;
}

static PyObject *rp_signals_close(rp_signals_t *self, PyObject *unused)
{
    if (rp_obj_close(&self->base, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rp_signals_exit(rp_signals_t *self, PyObject *args)
{
    return rp_signals_close(self, NULL);
}

static PyObject *rp_signals_enter(PyObject *self, PyObject *unused) { return Py_NewRef(self); }

static Py_ssize_t rp_signals_len(rp_signals_t *self) { return (Py_ssize_t)self->count; }

static PyObject *rp_signals_device_ptr(rp_signals_t *self, void *closure)
{
    void *dev = NULL;

    if (rp_signals_open(self) < 0)
        return NULL;
    if (remora_signals_device_ptr(self->handle, &dev) != REMORA_OK)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(dev);
}

static PyObject *rp_signals_closed(rp_signals_t *self, void *closure)
{
    return PyBool_FromLong(self->base.closed || self->base.closing);
}

static PyObject *rp_signals_repr(rp_signals_t *self)
{
    return PyUnicode_FromFormat("<remora.Signals %zu words%s>", self->count,
                                self->base.closed ? ", closed" : "");
}

static PyMethodDef rp_signals_methods[] = {
    {"read", (PyCFunction)rp_signals_read, METH_O,
     "read(index)\n--\n\nWord index's value (the same as signals[index])."},
    {"set", (PyCFunction)rp_signals_set, METH_VARARGS,
     "set(index, value)\n--\n\nSet word index locally (atomic); signals[index] = value "
     "does the same."},
    {"add", (PyCFunction)rp_signals_add, METH_VARARGS,
     "add(index, value)\n--\n\nAdd to word index locally (atomic, modulo 2**64; a "
     "negative value subtracts)."},
    {"wait", RP_FN(rp_signals_wait), RP_KW,
     "wait(index, value, cmp='geq', timeout=None)\n--\n\nWait, with the GIL released, until "
     "word index compares to value: 'geq' (reached, wrap-safe), 'eq' or 'neq'. Returns the "
     "word's value then; TimedOut after timeout seconds (None: remora's default, "
     "DEFAULT_TIMEOUT_MS)."},
    {"tolist", (PyCFunction)rp_signals_tolist, METH_NOARGS,
     "tolist()\n--\n\nEvery word's value, as a list of ints."},
    {"close", (PyCFunction)rp_signals_close, METH_NOARGS,
     "close()\n--\n\nUnexpose and free the words. Idempotent."},
    {"__enter__", rp_signals_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)rp_signals_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef rp_signals_getset[] = {
    {"device_ptr", (getter)rp_signals_device_ptr, NULL,
     "The words' device address (int), for kernels polling them; None without CUDA.", NULL},
    {"closed", (getter)rp_signals_closed, NULL, "True once closed.", NULL},
    {NULL},
};

static PySequenceMethods rp_signals_seq = {
    .sq_length = (lenfunc)rp_signals_len,
    .sq_item = (ssizeargfunc)rp_signals_item,
    .sq_ass_item = (ssizeobjargproc)rp_signals_ass_item,
};

PyTypeObject rp_SignalsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remora.Signals",
    .tp_basicsize = sizeof(rp_signals_t),
    .tp_dealloc = (destructor)rp_signals_dealloc,
    .tp_repr = (reprfunc)rp_signals_repr,
    .tp_as_sequence = &rp_signals_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Signals(context, count, *, init=0)\n--\n\n"
              "count 64-bit words (1..2**24) that remote peers set or add to "
              "(Client.signal, or stream operations) and that the CPU waits on (wait) or a "
              "CUDA stream or kernel polls (device_ptr). Expose them with "
              "Server.expose_signals(). docs/stream.md says what a signal guarantees.",
    .tp_methods = rp_signals_methods,
    .tp_getset = rp_signals_getset,
    .tp_new = rp_signals_new,
};
