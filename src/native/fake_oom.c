/* fake_oom.c: the PORTAL_FAKE_OOM test fixture's trigger, in C.
 *
 * The instrumenter inserts `__portal_fake_oom__(I)` before each statement that
 * starts on a spec's line.  This C function counts the hits of spec I and, on the
 * configured hit, raises the spec's exception.  Being C, it adds no frame: the
 * traceback shows the user's line raising, as a real allocation failure would.
 * It only exists when PORTAL_FAKE_OOM is set.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "fake_oom.h"

static PyObject *counts = NULL;  /* strong: list of int, hits so far per spec (saved with the job) */
static PyObject *targets = NULL; /* strong: list of int, the hit that fires per spec */
static PyObject *factory = NULL; /* strong: factory(i) -> exception instance */

PyObject *portal_fake_oom_configure(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *c, *t, *f; /* borrowed */
    if (!PyArg_ParseTuple(args, "O!O!O:fake_oom_configure", &PyList_Type, &c, &PyList_Type, &t, &f)) {
        return NULL;
    }
    if (PyList_GET_SIZE(c) != PyList_GET_SIZE(t)) {
        PyErr_SetString(PyExc_ValueError, "fake_oom_configure: counts and targets differ in length");
        return NULL;
    }
    Py_XSETREF(counts, Py_NewRef(c));
    Py_XSETREF(targets, Py_NewRef(t));
    Py_XSETREF(factory, Py_NewRef(f));
    Py_RETURN_NONE;
}

PyObject *portal_fake_oom_tick(PyObject *self, PyObject *arg)
{
    (void)self;
    if (counts == NULL) {
        Py_RETURN_NONE;
    }
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (i < 0 || i >= PyList_GET_SIZE(counts)) {
        Py_RETURN_NONE;
    }
    long hits = PyLong_AsLong(PyList_GET_ITEM(counts, i)) + 1;
    PyObject *n = PyLong_FromLong(hits); /* new */
    if (n == NULL) {
        return NULL;
    }
    PyList_SetItem(counts, i, n); /* steals n */
    if (hits != PyLong_AsLong(PyList_GET_ITEM(targets, i))) {
        Py_RETURN_NONE;
    }
    PyObject *exc = PyObject_CallOneArg(factory, arg); /* new */
    if (exc == NULL) {
        return NULL;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}
