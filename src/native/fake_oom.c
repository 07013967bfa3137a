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

/* Count one hit of spec `arg`; 1 if it is the spec's target hit, 0 if not, -1 on error. */
static int count_hit(PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (i < 0 || i >= PyList_GET_SIZE(counts)) {
        return 0;
    }
    long hits = PyLong_AsLong(PyList_GET_ITEM(counts, i)) + 1;
    PyObject *n = PyLong_FromLong(hits); /* new */
    if (n == NULL) {
        return -1;
    }
    PyList_SetItem(counts, i, n); /* steals n */
    return hits == PyLong_AsLong(PyList_GET_ITEM(targets, i));
}

/* arg: a spec index, or a tuple of the indexes of all the specs of one line: each
 * counts this start of the line, then the first whose target it is raises. */
PyObject *portal_fake_oom_tick(PyObject *self, PyObject *arg)
{
    (void)self;
    if (counts == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *fire = NULL; /* borrowed: the index of the spec that raises */
    if (PyTuple_Check(arg)) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(arg); k++) {
            PyObject *index = PyTuple_GET_ITEM(arg, k); /* borrowed */
            int hit = count_hit(index);
            if (hit < 0) {
                return NULL;
            }
            if (hit && fire == NULL) {
                fire = index;
            }
        }
    } else {
        int hit = count_hit(arg);
        if (hit < 0) {
            return NULL;
        }
        fire = hit ? arg : NULL;
    }
    if (fire == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *exc = PyObject_CallOneArg(factory, fire); /* new */
    if (exc == NULL) {
        return NULL;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}
