/* untraced.c: `_portal._toplevel.Untraced(func)`, a callable that calls `func`
 * unseen by the program's tracer and profiler.
 *
 * The instrumented code calls Portal's builtins (__portal_rescue__ in every loop
 * handler, __portal_iteration__ at the start of a training loop's iteration).
 * Under python those calls do not exist, so a sys.settrace() or sys.setprofile()
 * function must not see them: neither the Python frames of the rescue ('call',
 * 'line', 'return' events), nor the call itself.  So:
 *  - while `func` runs, tracing and profiling are paused for the thread
 *    (portal_trace_pause_begin(), as CPython does inside a trace function);
 *  - an Untraced object is not a builtin function or method descriptor, the only
 *    callables whose calls CPython 3.11 reports as 'c_call'/'c_return' events.
 * Python frames are not added either: `func` still finds the calling frame as
 * sys._getframe(1).  Nor recursion depth: a RecursionError unwinding through
 * the loops of a recursive function calls the rescue at the very limit, where its
 * own frames would raise a second RecursionError over the program's; `func` runs
 * with UNTRACED_RECURSION_LEVELS levels lent above the program's limit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

#include "untraced.h"
#include "portal/frame_access.h"

/* Recursion levels lent to `func` above whatever the program has left: the rescue
 * decides in a few frames, and a real rescue (capture, checkpoint) stays well
 * within this. */
#define UNTRACED_RECURSION_LEVELS 200

typedef struct {
    PyObject_HEAD
    PyObject *func;          /* strong: the callable run unseen */
    vectorcallfunc vectorcall; /* untraced_vectorcall: no argument tuple per call */
} untraced_object;

static PyObject *untraced_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames);

static PyObject *untraced_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *func; /* borrowed */
    static char *keywords[] = {"func", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Untraced", keywords, &func)) {
        return NULL;
    }
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "Untraced: func must be callable");
        return NULL;
    }
    untraced_object *self = (untraced_object *)type->tp_alloc(type, 0); /* new */
    if (self == NULL) {
        return NULL;
    }
    self->func = Py_NewRef(func);
    self->vectorcall = untraced_vectorcall;
    return (PyObject *)self;
}

static int untraced_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((untraced_object *)self)->func);
    return 0;
}

static int untraced_clear(PyObject *self)
{
    Py_CLEAR(((untraced_object *)self)->func);
    return 0;
}

static void untraced_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    untraced_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* func(*args, **kwargs) with tracing and profiling paused and recursion levels
 * lent; returns its result
 * (new reference) or NULL with its exception.  The arguments are the caller's
 * (borrowed), passed on as they came. */
static PyObject *untraced_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames)
{
    PyObject *func = ((untraced_object *)self)->func; /* borrowed */
    if (func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Untraced: cleared");
        return NULL;
    }
    Py_INCREF(func); /* kept alive even if the call clears self */
    portal_trace_pause pause = portal_trace_pause_begin();
    portal_recursion_shift(UNTRACED_RECURSION_LEVELS);
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames); /* new */
    portal_recursion_shift(-UNTRACED_RECURSION_LEVELS);
    portal_trace_resume(pause);
    Py_DECREF(func);
    return result;
}

static PyMemberDef untraced_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(untraced_object, func), READONLY,
     "the callable called unseen"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject untraced_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_portal._toplevel.Untraced",
    .tp_doc = "Untraced(func): calls func unseen by sys.settrace and sys.setprofile.",
    .tp_basicsize = sizeof(untraced_object),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(untraced_object, vectorcall),
    .tp_members = untraced_members,
    .tp_new = untraced_new,
    .tp_call = PyVectorcall_Call,
    .tp_traverse = untraced_traverse,
    .tp_clear = untraced_clear,
    .tp_dealloc = untraced_dealloc,
};

int portal_untraced_add_type(PyObject *module)
{
    if (PyType_Ready(&untraced_type) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "Untraced", (PyObject *)&untraced_type);
}
