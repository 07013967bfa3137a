/* evalframe_probe.c: `evalframe_probe`, a test-only PEP 523 frame-evaluation
 * function standing for another tool's (torch Dynamo installs one): it records the
 * qualified name of each frame it is given and chains to the function that was in
 * place when it was installed.  tests/unit/python/test_frame_access.py installs it
 * under Portal's resume hook to check that the hook chains to it and puts it back.
 *
 *   install()   -> None: put the probe in place (over whatever is there)
 *   remove()    -> None: put back what it was installed over
 *   installed() -> bool: is the probe the function in place now
 *   seen()      -> list of the qualnames evaluated through the probe since the last call
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "portal/frame_access.h"

static _PyFrameEvalFunction probe_previous = NULL;
static PyObject *probe_seen = NULL; /* strong: list of str */

static PyObject *probe_eval(PyThreadState *tstate, struct _PyInterpreterFrame *f, int throwflag)
{
    PyCodeObject *code = portal_iframe_code(f); /* borrowed */
    if (probe_seen != NULL && PyList_Append(probe_seen, code->co_qualname) < 0) {
        PyErr_Clear();
    }
    return probe_previous(tstate, f, throwflag);
}

static PyObject *probe_install(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyInterpreterState *interp = PyInterpreterState_Get(); /* borrowed */
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == probe_eval) {
        Py_RETURN_NONE;
    }
    probe_previous = _PyInterpreterState_GetEvalFrameFunc(interp);
    _PyInterpreterState_SetEvalFrameFunc(interp, probe_eval);
    Py_RETURN_NONE;
}

static PyObject *probe_remove(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyInterpreterState *interp = PyInterpreterState_Get(); /* borrowed */
    if (_PyInterpreterState_GetEvalFrameFunc(interp) != probe_eval) {
        PyErr_SetString(PyExc_RuntimeError, "evalframe_probe: not the function in place");
        return NULL;
    }
    _PyInterpreterState_SetEvalFrameFunc(interp, probe_previous);
    Py_RETURN_NONE;
}

static PyObject *probe_installed(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(_PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == probe_eval);
}

static PyObject *probe_seen_names(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *fresh = PyList_New(0); /* new */
    if (fresh == NULL) {
        return NULL;
    }
    PyObject *names = probe_seen; /* strong, handed to the caller */
    probe_seen = fresh;
    return names;
}

static PyMethodDef probe_methods[] = {
    {"install", probe_install, METH_NOARGS, "install(): put the probe in place"},
    {"remove", probe_remove, METH_NOARGS, "remove(): put back what the probe replaced"},
    {"installed", probe_installed, METH_NOARGS, "installed() -> bool"},
    {"seen", probe_seen_names, METH_NOARGS, "seen() -> qualnames evaluated through the probe"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef probe_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "evalframe_probe",
    .m_doc = "A test-only frame-evaluation function that records frames and chains on.",
    .m_size = -1,
    .m_methods = probe_methods,
};

PyMODINIT_FUNC PyInit_evalframe_probe(void)
{
    probe_seen = PyList_New(0); /* strong, module lifetime */
    if (probe_seen == NULL) {
        return NULL;
    }
    return PyModule_Create(&probe_module);
}
