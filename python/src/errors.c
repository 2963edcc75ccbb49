/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * remora.Error and its subclasses, one per remora_status_t. Each also derives
 * from the closest built-in exception (TimedOut is a TimeoutError, NotFound a
 * LookupError, ...), so ordinary Python handlers work. Every instance has
 * .status (the int status) and .status_name.
 */
#include "rp.h"

#include <stdarg.h>

typedef struct rp_error_def {
    remora_status_t status;
    const char     *name;
    PyObject      **builtin; /* second base; NULL: remora.Error only */
    const char     *doc;
} rp_error_def_t;

static const rp_error_def_t rp_error_defs[] = {
    {REMORA_ERR_INVALID_PARAM, "InvalidParam", &PyExc_ValueError, "A bad argument."},
    {REMORA_ERR_NO_MEMORY, "NoMemory", &PyExc_MemoryError, "Out of memory."},
    {REMORA_ERR_TIMED_OUT, "TimedOut", &PyExc_TimeoutError, "The timeout passed."},
    {REMORA_ERR_DISCONNECTED, "Disconnected", &PyExc_ConnectionError,
     "The peer went away or the connection failed."},
    {REMORA_ERR_NOT_FOUND, "NotFound", &PyExc_LookupError, "No region of that name."},
    {REMORA_ERR_OUT_OF_RANGE, "OutOfRange", &PyExc_IndexError,
     "Offset or length outside the region (or negative, or past 2**64)."},
    {REMORA_ERR_READ_ONLY, "ReadOnly", &PyExc_PermissionError,
     "A write to a region exposed read-only."},
    {REMORA_ERR_AUTH, "AuthError", &PyExc_PermissionError, "Token missing or wrong."},
    {REMORA_ERR_PROTOCOL, "ProtocolError", NULL, "Malformed or unexpected message."},
    {REMORA_ERR_UNSUPPORTED, "Unsupported", NULL,
     "Not available here (e.g. no CUDA, no shared memory)."},
    {REMORA_ERR_CONNECTION_REFUSED, "ConnectionRefused", &PyExc_ConnectionRefusedError,
     "Nothing listens at that address."},
    {REMORA_ERR_ADDRESS, "AddressError", &PyExc_ValueError,
     "Address malformed or not resolvable."},
    {REMORA_ERR_EXISTS, "Exists", NULL, "A region of that name is already exposed."},
    {REMORA_ERR_IO, "IOError", &PyExc_OSError, "A local I/O or system call failed."},
    {REMORA_ERR_TRANSPORT, "TransportError", NULL, "UCX reported an error."},
    {REMORA_ERR_CANCELED, "Canceled", NULL, "The operation was canceled (e.g. by shutdown)."},
    {REMORA_ERR_BUSY, "Busy", NULL, "The object is still in use."},
    {REMORA_ERR_VERSION, "VersionError", NULL,
     "The peer speaks an incompatible protocol version."},
};

#define RP_NERRORS (sizeof(rp_error_defs) / sizeof(rp_error_defs[0]))

static PyObject *rp_error_base;
static PyObject *rp_error_classes[RP_NERRORS];
static PyObject *rp_closed_class;

static PyObject *rp_error_class(remora_status_t status)
{
    for (size_t i = 0; i < RP_NERRORS; i++) {
        if (rp_error_defs[i].status == status)
            return rp_error_classes[i];
    }
    return rp_error_base;
}

static PyObject *rp_raise_class(PyObject *cls, remora_status_t status, const char *msg)
{
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    PyObject *code;

    if (exc == NULL)
        return NULL;
    code = PyLong_FromLong((long)status);
    if (code == NULL || PyObject_SetAttrString(exc, "status", code) < 0) {
        Py_XDECREF(code);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *rp_raise(remora_status_t status, const char *fmt, ...)
{
    char    what[512];
    char    msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof(msg), "%s: %s", what, remora_status_string(status));
    return rp_raise_class(rp_error_class(status), status, msg);
}

PyObject *rp_raise_closed(const char *what)
{
    char msg[256];

    snprintf(msg, sizeof(msg), "%s is closed", what);
    return rp_raise_class(rp_closed_class, REMORA_ERR_INVALID_PARAM, msg);
}

/* Error.status_name: the enum's name, from the class table. */
static PyObject *rp_error_status_name(PyObject *self, PyObject *args)
{
    PyObject *exc = NULL, *code;
    long      status;

    if (!PyArg_ParseTuple(args, "O", &exc))
        return NULL;
    code = PyObject_GetAttrString(exc, "status");
    if (code == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    status = PyLong_AsLong(code);
    Py_DECREF(code);
    if (status == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(remora_status_string((remora_status_t)status));
}

static PyMethodDef rp_error_status_name_def = {
    "status_string", rp_error_status_name, METH_VARARGS,
    "The library's description of this error's status."};

int rp_errors_init(PyObject *module)
{
    PyObject *dict = PyDict_New(), *fn, *meth;

    if (dict == NULL)
        return -1;
    /* Error.status: the remora_status_t value (0 until set). */
    if (PyDict_SetItemString(dict, "status", Py_None) < 0)
        goto fail;
    fn = PyCFunction_New(&rp_error_status_name_def, NULL);
    if (fn == NULL)
        goto fail;
    meth = PyInstanceMethod_New(fn);
    Py_DECREF(fn);
    if (meth == NULL || PyDict_SetItemString(dict, "status_string", meth) < 0) {
        Py_XDECREF(meth);
        goto fail;
    }
    Py_DECREF(meth);
    rp_error_base = PyErr_NewExceptionWithDoc(
        "remora.Error",
        "Base of every remora error. .status is the library's status code (an int, "
        "negative), .status_string() its description.",
        PyExc_Exception, dict);
    Py_DECREF(dict);
    dict = NULL;
    if (rp_error_base == NULL || PyModule_AddObjectRef(module, "Error", rp_error_base) < 0)
        return -1;

    for (size_t i = 0; i < RP_NERRORS; i++) {
        const rp_error_def_t *d = &rp_error_defs[i];
        char      qual[64];
        PyObject *bases;

        snprintf(qual, sizeof(qual), "remora.%s", d->name);
        bases = d->builtin != NULL ? PyTuple_Pack(2, rp_error_base, *d->builtin)
                                   : PyTuple_Pack(1, rp_error_base);
        if (bases == NULL)
            return -1;
        rp_error_classes[i] = PyErr_NewExceptionWithDoc(qual, d->doc, bases, NULL);
        Py_DECREF(bases);
        if (rp_error_classes[i] == NULL ||
            PyModule_AddObjectRef(module, d->name, rp_error_classes[i]) < 0)
            return -1;
    }
    rp_closed_class = PyErr_NewExceptionWithDoc(
        "remora.Closed", "The object was closed (status INVALID_PARAM).",
        rp_error_class(REMORA_ERR_INVALID_PARAM), NULL);
    if (rp_closed_class == NULL || PyModule_AddObjectRef(module, "Closed", rp_closed_class) < 0)
        return -1;
    return 0;

fail:
    Py_XDECREF(dict);
    return -1;
}
