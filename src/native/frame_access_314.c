/* frame_access_314.c: frame access for CPython 3.14 (see include/portal/frame_access.h).
 *
 * Compiled only through frame_access.c, which picks the file of the running
 * version.  Checked against CPython 3.14.8 as Debian testing ships it
 * (Include/internal/pycore_interpframe_structs.h, pycore_interpframe.h,
 * pycore_stackref.h, pycore_frame.h, pycore_tstate.h, cpython/pystate.h).  What
 * differs from 3.13 (frame_access_313.c, whose other facts hold here too):
 *  - localsplus (fast locals and the value stack), f_executable and f_funcobj are
 *    _PyStackRef, tagged references (GIL build: bit 0 set, Py_TAG_REFCNT, for a
 *    reference that owns no count, such as an immortal object or what
 *    LOAD_FAST_BORROW pushes; both low bits, Py_INT_TAG, for a tagged integer: the
 *    instruction offset an exception handler entry with `lasti` pushes).  Every
 *    read goes through PyStackRef_AsPyObjectBorrow, every write through
 *    PyStackRef_FromPyObjectNew / PyStackRef_XCLOSE; an empty slot is
 *    PyStackRef_NULL, not a zero word;
 *  - stacktop is gone: stackpointer points one past the top of the value stack.  A
 *    release build never clears it (only a debug build does while the frame's own
 *    loop holds it in a register): it is exact for a frame suspended in a call or a
 *    suspended generator, stale for a running one;
 *  - the generator's gi_iframe is a plain member, gi_frame_state an int8_t; the
 *    states keep 3.13's values;
 *  - C recursion is no longer counted: the limit is the thread's own C stack
 *    (_PyThreadStateImpl.c_stack_soft_limit, from the thread's stack size), so a
 *    thread started with a large stack already has the levels it can hold;
 *  - the frame owners gain FRAME_OWNED_BY_INTERPRETER (3) below FRAME_OWNED_BY_CSTACK
 *    (4); _PyFrame_IsIncomplete counts both as incomplete.
 */
#ifndef PORTAL_FRAME_ACCESS_DISPATCH
#error "portal: compile src/native/frame_access.c, which includes this file for CPython 3.14"
#endif

#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_interpframe.h>
#include <internal/pycore_stackref.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION != 14
#error "portal: frame_access_314.c is CPython 3.14's frame layout"
#endif
#ifdef Py_GIL_DISABLED
#error "portal: frame_access_314.c is checked for the GIL build of CPython 3.14 only (not free-threaded)"
#endif

const portal_frame_states portal_frame_state = {
    .created = FRAME_CREATED,
    .suspended = FRAME_SUSPENDED,
    .suspended_yield_from = FRAME_SUSPENDED_YIELD_FROM,
    .executing = FRAME_EXECUTING,
    .completed = FRAME_COMPLETED,
    .cleared = FRAME_CLEARED,
};

/* Python recursion levels a call through tp_call counts: it counts C levels only. */
#define TP_CALL_RECURSION_LEVELS 0
/* portal_c_recursion_set's answer where no C level count exists to set. */
#define C_RECURSION_NOT_COUNTED (-1)

/* ---- the top level ------------------------------------------------------ */

portal_frame_link portal_frame_detach_caller(void)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    portal_frame_link link = {
        tstate->current_frame,
        tstate->py_recursion_limit - tstate->py_recursion_remaining,
    };
    tstate->current_frame = NULL;
    tstate->py_recursion_remaining = tstate->py_recursion_limit;
    return link;
}

void portal_frame_reattach(portal_frame_link link)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->current_frame = link.frame;
    tstate->py_recursion_remaining = tstate->py_recursion_limit - link.depth;
}

void portal_recursion_shift(int levels)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->py_recursion_remaining += levels;
}

int portal_recursion_remaining(void)
{
    return PyThreadState_Get()->py_recursion_remaining;
}

int portal_tp_call_levels(void)
{
    return TP_CALL_RECURSION_LEVELS;
}

/* 3.14: no C recursion counter to raise; the thread's C stack is the limit. */
int portal_c_recursion_set(int levels)
{
    (void)levels;
    return C_RECURSION_NOT_COUNTED;
}

/* ---- calls no tracer sees ---------------------------------------------------- */

/* 3.13 and 3.14: the sys.monitoring callbacks behind sys.settrace/sys.setprofile (and any
 * other tool's) are not called while tstate->tracing is set. */
portal_trace_pause portal_trace_pause_begin(void)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    portal_trace_pause pause = { 0 };
    tstate->tracing++;
    return pause;
}

void portal_trace_resume(portal_trace_pause pause)
{
    (void)pause;
    PyThreadState_Get()->tracing--;
}

/* ---- reading ---------------------------------------------------------------- */

portal_iframe *portal_iframe_of_frame(PyFrameObject *frame)
{
    return frame->f_frame;
}

static int is_generator_like(PyObject *obj)
{
    return PyGen_Check(obj) || PyCoro_CheckExact(obj) || PyAsyncGen_CheckExact(obj);
}

portal_iframe *portal_iframe_of_gen(PyObject *gen)
{
    if (!is_generator_like(gen)) {
        PyErr_Format(PyExc_TypeError, "a generator is required, not %.100s", Py_TYPE(gen)->tp_name);
        return NULL;
    }
    /* 3.14: the frame is a member of the generator (3.13: a one-element array). */
    return &((PyGenObject *)gen)->gi_iframe;
}

PyCodeObject *portal_iframe_code(portal_iframe *f)
{
    return _PyFrame_GetCode(f);
}

int portal_iframe_nlocalsplus(portal_iframe *f)
{
    return _PyFrame_GetCode(f)->co_nlocalsplus;
}

PyObject *portal_iframe_slot(portal_iframe *f, int i)
{
    _PyStackRef ref = f->localsplus[i];
    if (PyStackRef_IsNull(ref) || PyStackRef_IsTaggedInt(ref)) {
        return NULL; /* a tagged integer is no object: portal_iframe_slot_is_object() says so */
    }
    return PyStackRef_AsPyObjectBorrow(ref);
}

int portal_iframe_slot_is_object(portal_iframe *f, int i)
{
    return !PyStackRef_IsTaggedInt(f->localsplus[i]);
}

int portal_iframe_stacktop(portal_iframe *f)
{
    return f->stackpointer != NULL ? (int)(f->stackpointer - f->localsplus) : -1;
}

int portal_iframe_is_entry(portal_iframe *f)
{
    _PyInterpreterFrame *caller = f->previous; /* borrowed */
    return caller == NULL || caller->owner == FRAME_OWNED_BY_CSTACK || _PyFrame_IsIncomplete(caller);
}

PyObject *portal_iframe_function(portal_iframe *f)
{
    if (PyStackRef_IsNull(f->f_funcobj) || PyStackRef_IsTaggedInt(f->f_funcobj)) {
        return NULL;
    }
    PyObject *func = PyStackRef_AsPyObjectBorrow(f->f_funcobj); /* borrowed */
    return func != NULL && PyFunction_Check(func) ? func : NULL;
}

int portal_gen_frame_state(PyObject *gen)
{
    return ((PyGenObject *)gen)->gi_frame_state;
}

int portal_iframe_lasti(portal_iframe *f)
{
    /* instr_ptr is the next instruction of a frame that is not running. */
    return (_PyInterpreterFrame_LASTI(f) - 1) * (int)sizeof(_Py_CODEUNIT);
}

/* ---- writing ---------------------------------------------------------------- */

int portal_iframe_inject(portal_iframe *f, PyObject *const *locals, Py_ssize_t nlocals,
                         PyObject *const *stack, Py_ssize_t nstack, int resume_offset)
{
    PyCodeObject *co = _PyFrame_GetCode(f); /* borrowed */
    const int nlocalsplus = co->co_nlocalsplus;
    if (nlocals != nlocalsplus) {
        PyErr_Format(PyExc_ValueError, "%d fast locals expected for %U, got %zd",
                     nlocalsplus, co->co_qualname, nlocals);
        return -1;
    }
    if (nstack < 0 || nstack > co->co_stacksize) {
        PyErr_Format(PyExc_ValueError, "stack of %zd items does not fit %U (stack size %d)",
                     nstack, co->co_qualname, co->co_stacksize);
        return -1;
    }
    if (resume_offset < 0 || resume_offset % (int)sizeof(_Py_CODEUNIT) != 0 ||
        resume_offset >= (int)(Py_SIZE(co) * sizeof(_Py_CODEUNIT))) {
        PyErr_Format(PyExc_ValueError, "bad resume offset %d for %U", resume_offset, co->co_qualname);
        return -1;
    }
    /* The current stack (e.g. the None a generator's first send pushed) goes. */
    _PyStackRef *base = f->localsplus + nlocalsplus;
    _PyStackRef *top = f->stackpointer != NULL && f->stackpointer > base ? f->stackpointer : base;
    for (_PyStackRef *p = base; p < top; p++) {
        _PyStackRef old = *p;
        *p = PyStackRef_NULL;
        PyStackRef_XCLOSE(old); /* a tagged integer owns nothing: XCLOSE leaves it */
    }
    /* Free variables come from the closure, exactly as COPY_FREE_VARS would. */
    const int nfree = co->co_nfreevars;
    PyObject *func = portal_iframe_function(f); /* borrowed */
    PyObject *closure = func ? ((PyFunctionObject *)func)->func_closure : NULL; /* borrowed */
    for (int i = 0; i < nlocalsplus; i++) {
        PyObject *value = locals[i]; /* borrowed */
        const int free_index = i - (nlocalsplus - nfree);
        if (free_index >= 0 && closure != NULL && free_index < PyTuple_GET_SIZE(closure)) {
            value = PyTuple_GET_ITEM(closure, free_index);
        }
        _PyStackRef old = f->localsplus[i];
        /* the slot owns a new reference (or none, for an immortal object) */
        f->localsplus[i] = value != NULL ? PyStackRef_FromPyObjectNew(value) : PyStackRef_NULL;
        PyStackRef_XCLOSE(old);
    }
    for (Py_ssize_t i = 0; i < nstack; i++) {
        base[i] = stack[i] != NULL ? PyStackRef_FromPyObjectNew(stack[i]) : PyStackRef_NULL;
    }
    f->stackpointer = base + nstack;
    /* The eval loop starts a frame it enters, and resumes a generator, at instr_ptr. */
    f->instr_ptr = _PyFrame_GetBytecode(f) + resume_offset / (int)sizeof(_Py_CODEUNIT);
    return 0;
}

void portal_gen_mark_suspended(PyObject *gen)
{
    ((PyGenObject *)gen)->gi_frame_state = FRAME_SUSPENDED;
}

/* ---- the frame-evaluation hook ------------------------------------------------ */

/* 3.13 and 3.14: the evaluation function clears and pops the frame it was given (the
 * default loop does it on its way out): an unrun frame is thrown into, so that
 * CPython's loop unwinds it at once with the pending exception. */
PyObject *portal_eval_unrun(PyThreadState *tstate, portal_iframe *f)
{
    return _PyEval_EvalFrameDefault(tstate, f, 1);
}
