/* frames.c: the `_portal._frames` extension module: capture and restore of frames.
 *
 * Python-facing operations over include/portal/frame_access.h:
 *   frame_info(frame)                  -> (nlocalsplus, stacktop, is_entry, function)
 *   frame_slots(frame, start, stop, empty) -> list of localsplus[start:stop]
 *   gen_info(gen)                      -> (frame_state, lasti, nlocalsplus, stacktop, function)
 *   gen_slots(gen, start, stop, empty) -> list
 *   gen_inject(gen, locals, stack, offset, empty, suspended): fill a created
 *       generator's frame; `suspended` marks it suspended (resumed by send(value)
 *       at `offset`), else it stays created (its first send must be None)
 *   Reenter(func, args, kwargs, result): a C callable placed on a caller's value
 *       stack at its call instruction; calling it calls func(*args, **kwargs) (the
 *       callee, whose frame the hook then fills) and returns `result` if given
 *       (Cls(...) returns the instance __init__ was building), else the call's value;
 *       its .func and .result let a later capture see through it
 *   resume(chain, empty, handled=None): install the frame-evaluation hook for
 *       `chain`, a list of (code, locals, stack, offset): each time a frame of
 *       chain[i].code is about to run, its state is injected, in order; once the
 *       last one is entered, `handled` (if not None) becomes the exception being
 *       handled there and the hook is removed (full speed again)
 *   resume_pending() -> number of chain entries not yet entered
 *   resume_cancel(): remove the hook and drop the chain
 *   eval_hook_installed() -> bool: is any PEP 523 function installed now
 *   fake_oom_configure / fake_oom_tick: PORTAL_FAKE_OOM's trigger (fake_oom.c)
 * `empty` is the caller's marker for an empty slot (C NULL) in both directions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#include <limits.h>

#include "portal/frame_access.h"
#include "fake_oom.h"

/* ---- reading ---------------------------------------------------------------- */

/* New list of slots [start, stop) of `f`, `empty` (borrowed) for NULL. */
static PyObject *slots_list(portal_iframe *f, int start, int stop, PyObject *empty)
{
    if (start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "bad slot range");
        return NULL;
    }
    PyObject *list = PyList_New(stop - start); /* new */
    if (list == NULL) {
        return NULL;
    }
    for (int i = start; i < stop; i++) {
        if (!portal_iframe_slot_is_object(f, i)) {
            Py_DECREF(list);
            PyErr_Format(PyExc_ValueError,
                         "slot %d holds a tagged integer (an exception handler's saved instruction "
                         "offset), not an object: it cannot be saved", i);
            return NULL;
        }
        PyObject *v = portal_iframe_slot(f, i); /* borrowed */
        if (v == NULL) {
            v = empty;
        }
        Py_INCREF(v);
        PyList_SET_ITEM(list, i - start, v); /* steals */
    }
    return list;
}

static PyObject *frames_frame_info(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyFrame_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "frame_info: a frame is required");
        return NULL;
    }
    portal_iframe *f = portal_iframe_of_frame((PyFrameObject *)arg);
    PyObject *func = portal_iframe_function(f); /* borrowed */
    return Py_BuildValue("(iiNO)", portal_iframe_nlocalsplus(f), portal_iframe_stacktop(f),
                         PyBool_FromLong(portal_iframe_is_entry(f)), func ? func : Py_None);
}

/* The slot range must stay within the frame: locals plus the deepest stack. */
static int check_range(portal_iframe *f, int stop)
{
    PyCodeObject *co = portal_iframe_code(f); /* borrowed */
    if (stop > co->co_nlocalsplus + co->co_stacksize) {
        PyErr_Format(PyExc_ValueError, "slot %d is beyond the frame of %U", stop, co->co_qualname);
        return -1;
    }
    return 0;
}

static PyObject *frames_frame_slots(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *frame, *empty; /* borrowed */
    int start, stop;
    if (!PyArg_ParseTuple(args, "O!iiO:frame_slots", &PyFrame_Type, &frame, &start, &stop, &empty)) {
        return NULL;
    }
    portal_iframe *f = portal_iframe_of_frame((PyFrameObject *)frame);
    if (check_range(f, stop) < 0) {
        return NULL;
    }
    return slots_list(f, start, stop, empty);
}

static PyObject *frames_gen_info(PyObject *self, PyObject *gen)
{
    (void)self;
    portal_iframe *f = portal_iframe_of_gen(gen);
    if (f == NULL) {
        return NULL;
    }
    PyObject *func = portal_iframe_function(f); /* borrowed */
    return Py_BuildValue("(iiiiO)", portal_gen_frame_state(gen), portal_iframe_lasti(f),
                         portal_iframe_nlocalsplus(f), portal_iframe_stacktop(f), func ? func : Py_None);
}

static PyObject *frames_gen_slots(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *gen, *empty; /* borrowed */
    int start, stop;
    if (!PyArg_ParseTuple(args, "OiiO:gen_slots", &gen, &start, &stop, &empty)) {
        return NULL;
    }
    portal_iframe *f = portal_iframe_of_gen(gen);
    if (f == NULL || check_range(f, stop) < 0) {
        return NULL;
    }
    return slots_list(f, start, stop, empty);
}

/* ---- writing ---------------------------------------------------------------- */

/* A new C array of the items of `seq` (a list or tuple) with `empty` as NULL;
 * the pointers are borrowed from `seq`. */
static PyObject **borrowed_items(PyObject *seq, PyObject *empty, Py_ssize_t *n)
{
    *n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PyMem_Calloc(*n ? *n : 1, sizeof(PyObject *));
    if (items == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i); /* borrowed */
        items[i] = v == empty ? NULL : v;
    }
    return items;
}

static int inject_from_sequences(portal_iframe *f, PyObject *locals, PyObject *stack, int offset,
                                 PyObject *empty)
{
    PyObject *lf = PySequence_Fast(locals, "locals must be a sequence"); /* new */
    PyObject *sf = lf ? PySequence_Fast(stack, "stack must be a sequence") : NULL; /* new */
    int rc = -1;
    Py_ssize_t nl = 0, ns = 0;
    PyObject **l = NULL, **s = NULL;
    if (sf == NULL) {
        goto done;
    }
    l = borrowed_items(lf, empty, &nl);
    s = l ? borrowed_items(sf, empty, &ns) : NULL;
    if (s == NULL) {
        goto done;
    }
    rc = portal_iframe_inject(f, l, nl, s, ns, offset);
done:
    PyMem_Free(l);
    PyMem_Free(s);
    Py_XDECREF(lf);
    Py_XDECREF(sf);
    return rc;
}

static PyObject *frames_gen_inject(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *gen, *locals, *stack, *empty; /* borrowed */
    int offset, suspended;
    if (!PyArg_ParseTuple(args, "OOOiOp:gen_inject", &gen, &locals, &stack, &offset, &empty, &suspended)) {
        return NULL;
    }
    portal_iframe *f = portal_iframe_of_gen(gen);
    if (f == NULL) {
        return NULL;
    }
    if (portal_gen_frame_state(gen) != portal_frame_state.created) {
        PyErr_SetString(PyExc_ValueError, "gen_inject: the generator has already started");
        return NULL;
    }
    if (inject_from_sequences(f, locals, stack, offset, empty) < 0) {
        return NULL;
    }
    if (suspended) {
        portal_gen_mark_suspended(gen);
    }
    Py_RETURN_NONE;
}

/* ---- Reenter -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *func;   /* strong */
    PyObject *args;   /* strong, tuple */
    PyObject *kwargs; /* strong, dict or NULL */
    PyObject *result; /* strong or NULL: returned instead of the call's value */
} ReenterObject;

static void reenter_dealloc(ReenterObject *self)
{
    Py_XDECREF(self->func);
    Py_XDECREF(self->args);
    Py_XDECREF(self->kwargs);
    Py_XDECREF(self->result);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *reenter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"func", "args", "kwargs", "result", NULL};
    PyObject *func, *cargs, *ckwargs = Py_None, *result = NULL; /* borrowed */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!|OO:Reenter", kwlist, &func, &PyTuple_Type,
                                     &cargs, &ckwargs, &result)) {
        return NULL;
    }
    ReenterObject *self = (ReenterObject *)type->tp_alloc(type, 0); /* new */
    if (self == NULL) {
        return NULL;
    }
    self->func = Py_NewRef(func);
    self->args = Py_NewRef(cargs);
    self->kwargs = ckwargs == Py_None ? NULL : Py_NewRef(ckwargs);
    self->result = Py_XNewRef(result);
    return (PyObject *)self;
}

/* The caller's own operands (placeholders) are ignored. */
static PyObject *reenter_call(ReenterObject *self, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    /* Calling this object (a C type's tp_call) counted the levels of recursion
     * depth portal_tp_call_levels() says (3.11: one; 3.13: none) that the call it
     * replays, of a Python function, does not: the program's depth would be that
     * much deeper per re-entered caller.  Given back while the callee runs.
     * Cls(...) (a result is given) counts as much for type.__call__: no credit. */
    int credit = self->result == NULL ? portal_tp_call_levels() : 0;
    portal_recursion_shift(credit);
    PyObject *value = PyObject_Call(self->func, self->args, self->kwargs); /* new */
    portal_recursion_shift(-credit);
    if (value == NULL || self->result == NULL) {
        return value;
    }
    Py_DECREF(value);
    return Py_NewRef(self->result);
}

/* What a later capture needs to see through a Reenter on a caller's stack (the
 * job suspends again inside the frame it re-entered): the function it calls, and
 * the value it returns instead of the call's (None when it returns the call's). */
static PyMemberDef reenter_members[] = {
    {"func", T_OBJECT_EX, offsetof(ReenterObject, func), READONLY, "the function re-entered"},
    {"result", T_OBJECT, offsetof(ReenterObject, result), READONLY,
     "what the call returns instead of the function's value, or None"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ReenterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_portal._frames.Reenter",
    .tp_basicsize = sizeof(ReenterObject),
    .tp_dealloc = (destructor)reenter_dealloc,
    .tp_call = (ternaryfunc)reenter_call,
    .tp_members = reenter_members,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Re-enter a callee from a caller's call instruction during a restore.",
    .tp_new = reenter_new,
};

/* ---- the resume hook -------------------------------------------------------------- */

/* The hook chains to the frame-evaluation function in place when the restore
 * began (CPython's own, or e.g. torch Dynamo's) for every frame it does not fill,
 * and puts it back when the chain is done or cancelled (eval_hook.c).  A frame it
 * fills resumes mid-code: only CPython's own loop can run it from there. */

static PyObject *chain = NULL;        /* strong: list of (code, locals, stack, offset) */
static PyObject *chain_empty = NULL;  /* strong: the empty-slot marker */
static PyObject *chain_handled = NULL; /* strong or NULL: handled exception of the innermost frame */
static Py_ssize_t chain_next = 0;

static void chain_clear(void)
{
    portal_eval_hook_remove();
    Py_CLEAR(chain);
    Py_CLEAR(chain_empty);
    Py_CLEAR(chain_handled);
    chain_next = 0;
}

static PyObject *resume_hook(PyThreadState *tstate, portal_iframe *f, int throwflag)
{
    if (chain != NULL && chain_next < PyList_GET_SIZE(chain)) {
        PyObject *entry = PyList_GET_ITEM(chain, chain_next); /* borrowed */
        if ((PyObject *)portal_iframe_code(f) == PyTuple_GET_ITEM(entry, 0)) {
            int offset = (int)PyLong_AsLong(PyTuple_GET_ITEM(entry, 3));
            if (inject_from_sequences(f, PyTuple_GET_ITEM(entry, 1), PyTuple_GET_ITEM(entry, 2), offset,
                                      chain_empty) < 0) {
                chain_clear();
                /* The frame never ran: it unwinds as pushed, with the error. */
                return portal_eval_unrun(tstate, f);
            }
            chain_next++;
            if (chain_next == PyList_GET_SIZE(chain)) {
                /* The innermost frame resumes inside the `except` block it was in:
                 * its exception is the handled one again (sys.exception(), a bare
                 * raise, the __context__ of what is raised there).  The frames'
                 * stacks hold what each handler restores when it ends. */
                if (chain_handled != NULL) {
                    PyErr_SetHandledException(chain_handled);
                }
                chain_clear(); /* the innermost frame: full speed from here on */
            }
            return portal_eval_default(tstate, f, throwflag);
        }
    }
    return portal_eval_previous(tstate, f, throwflag);
}

static PyObject *frames_resume(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *list, *empty, *handled = Py_None; /* borrowed */
    if (!PyArg_ParseTuple(args, "O!O|O:resume", &PyList_Type, &list, &empty, &handled)) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *e = PyList_GET_ITEM(list, i); /* borrowed */
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 4 || !PyCode_Check(PyTuple_GET_ITEM(e, 0)) ||
            !PyLong_Check(PyTuple_GET_ITEM(e, 3))) {
            PyErr_Format(PyExc_TypeError, "resume: entry %zd must be (code, locals, stack, offset)", i);
            return NULL;
        }
    }
    chain_clear();
    if (PyList_GET_SIZE(list) == 0) {
        Py_RETURN_NONE;
    }
    chain = PyList_GetSlice(list, 0, PyList_GET_SIZE(list)); /* new: our own copy */
    if (chain == NULL) {
        return NULL;
    }
    chain_empty = Py_NewRef(empty);
    chain_handled = handled == Py_None ? NULL : Py_NewRef(handled);
    chain_next = 0;
    portal_eval_hook_install(resume_hook);
    Py_RETURN_NONE;
}

static PyObject *frames_resume_pending(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromSsize_t(chain ? PyList_GET_SIZE(chain) - chain_next : 0);
}

static PyObject *frames_resume_cancel(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    chain_clear();
    Py_RETURN_NONE;
}

static PyObject *frames_eval_hook_installed(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(portal_eval_hook_active());
}

static PyObject *frames_c_recursion_set(PyObject *self, PyObject *arg)
{
    (void)self;
    long levels = PyLong_AsLong(arg);
    if (levels == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (levels < 0 || levels > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "c_recursion_set: levels must be in 0..INT_MAX");
        return NULL;
    }
    return PyLong_FromLong(portal_c_recursion_set((int)levels));
}

static PyMethodDef frames_methods[] = {
    {"eval_hook_installed", frames_eval_hook_installed, METH_NOARGS,
     "True while a frame-evaluation function is installed (none after a restore is done)"},
    {"frame_info", frames_frame_info, METH_O, "frame_info(frame) -> (nlocalsplus, stacktop, is_entry, function)"},
    {"frame_slots", frames_frame_slots, METH_VARARGS, "frame_slots(frame, start, stop, empty) -> list"},
    {"gen_info", frames_gen_info, METH_O, "gen_info(gen) -> (frame_state, lasti, nlocalsplus, stacktop, function)"},
    {"gen_slots", frames_gen_slots, METH_VARARGS, "gen_slots(gen, start, stop, empty) -> list"},
    {"gen_inject", frames_gen_inject, METH_VARARGS, "gen_inject(gen, locals, stack, offset, empty, suspended)"},
    {"resume", frames_resume, METH_VARARGS, "resume(chain, empty, handled=None): re-enter frames in order"},
    {"resume_pending", frames_resume_pending, METH_NOARGS, "number of chain entries not yet entered"},
    {"resume_cancel", frames_resume_cancel, METH_NOARGS, "remove the hook and drop the chain"},
    {"fake_oom_configure", portal_fake_oom_configure, METH_VARARGS,
     "fake_oom_configure(counts, targets, factory): arm PORTAL_FAKE_OOM"},
    {"fake_oom_tick", portal_fake_oom_tick, METH_O, "fake_oom_tick(i): a hit of spec i"},
    {"c_recursion_set", frames_c_recursion_set, METH_O,
     "c_recursion_set(levels) -> levels this thread had (-1 where C levels share the recursion limit)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef frames_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_portal._frames",
    .m_doc = "Capture and restore of Python frames (frame_access_3XX.c of this CPython version).",
    .m_size = -1,
    .m_methods = frames_methods,
};

/* The frame states of this CPython version (they differ between versions), as the
 * module's FRAME_CREATED, FRAME_SUSPENDED, FRAME_SUSPENDED_YIELD_FROM (= FRAME_SUSPENDED
 * on 3.11), FRAME_EXECUTING, FRAME_COMPLETED, FRAME_CLEARED and FRAME_SUSPENDED_STATES
 * (a frozenset: every state of a generator stopped at a yield): what gen_info()'s
 * state is compared with. */
static int add_frame_states(PyObject *m)
{
    const struct {
        const char *name;
        int value;
    } states[] = {
        {"FRAME_CREATED", portal_frame_state.created},
        {"FRAME_SUSPENDED", portal_frame_state.suspended},
        {"FRAME_SUSPENDED_YIELD_FROM", portal_frame_state.suspended_yield_from},
        {"FRAME_EXECUTING", portal_frame_state.executing},
        {"FRAME_COMPLETED", portal_frame_state.completed},
        {"FRAME_CLEARED", portal_frame_state.cleared},
    };
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        if (PyModule_AddIntConstant(m, states[i].name, states[i].value) < 0) {
            return -1;
        }
    }
    PyObject *suspended = Py_BuildValue("(ii)", portal_frame_state.suspended,
                                        portal_frame_state.suspended_yield_from); /* new */
    PyObject *set = suspended ? PyFrozenSet_New(suspended) : NULL;          /* new */
    Py_XDECREF(suspended);
    if (set == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(m, "FRAME_SUSPENDED_STATES", set);
    Py_DECREF(set);
    return rc;
}

PyMODINIT_FUNC PyInit__frames(void)
{
    if (PyType_Ready(&ReenterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&frames_module); /* new */
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Reenter", (PyObject *)&ReenterType) < 0 || add_frame_states(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
