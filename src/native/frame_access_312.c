/* frame_access_312.c: frame access for CPython 3.12 (see include/portal/frame_access.h).
 *
 * Compiled only through frame_access.c, which picks the file of the running
 * version.  Checked against CPython 3.12.5 (Include/internal/pycore_frame.h,
 * cpython/pystate.h, cpython/genobject.h; Python/ceval.c and Python/bytecodes.c's
 * frame handling).  3.12 sits between 3.11 and 3.13:
 *  - as in 3.11, PyThreadState.cframe->current_frame is the interpreter frame that
 *    the next _PyEval_EvalFrameDefault() call links under the C-stack entry frame
 *    it pushes (owner FRAME_OWNED_BY_CSTACK, as in 3.13), itself the `previous` of
 *    the frame being entered; _PyCFrame has no use_tracing any more;
 *  - as in 3.13, two recursion counters: py_recursion_remaining (of
 *    py_recursion_limit, what sys.getrecursionlimit() and RecursionError for Python
 *    frames are about) and c_recursion_remaining (C calls, tp_call among them);
 *  - _PyInterpreterFrame: f_code (the code object, a strong reference, as in 3.11),
 *    f_funcobj (as in 3.13), prev_instr (as in 3.11: the code unit before the next
 *    instruction to run: a created generator's RETURN_GENERATOR, a suspended one's
 *    YIELD_VALUE, an inlined caller's last CALL cache entry; a frame not yet
 *    started has the unit before its first), stacktop (valid only while the frame
 *    is not running its own eval loop), return_offset (the callee's, where its
 *    RETURN goes in the caller past prev_instr), owner;
 *  - no is_entry: a frame entered from C has the C-stack entry frame as previous;
 *  - frame states: created -2, suspended -1 (as in 3.11; no state of its own for a
 *    `yield from`/await);
 *  - the eval loop clears and pops the frame it was given on its way out (as in
 *    3.13; 3.11's callers did);
 *  - sys.settrace and sys.setprofile run on sys.monitoring: every event (legacy or
 *    not) is dropped while tstate->tracing is set (Python/instrumentation.c);
 *  - MAKE_CELL and COPY_FREE_VARS run before RESUME, as in 3.11.
 */
#ifndef PORTAL_FRAME_ACCESS_DISPATCH
#error "portal: compile src/native/frame_access.c, which includes this file for CPython 3.12"
#endif

#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION != 12
#error "portal: frame_access_312.c is CPython 3.12's frame layout"
#endif

const portal_frame_states portal_frame_state = {
    .created = FRAME_CREATED,
    .suspended = FRAME_SUSPENDED,
    .suspended_yield_from = FRAME_SUSPENDED, /* 3.12 has no state of its own for it */
    .executing = FRAME_EXECUTING,
    .completed = FRAME_COMPLETED,
    .cleared = FRAME_CLEARED,
};

/* Python recursion levels a call through tp_call counts: it counts C levels only. */
#define TP_CALL_RECURSION_LEVELS 0

/* ---- the top level ------------------------------------------------------ */

portal_frame_link portal_frame_detach_caller(void)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    portal_frame_link link = {
        tstate->cframe->current_frame,
        tstate->py_recursion_limit - tstate->py_recursion_remaining,
    };
    tstate->cframe->current_frame = NULL;
    tstate->py_recursion_remaining = tstate->py_recursion_limit;
    return link;
}

void portal_frame_reattach(portal_frame_link link)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->cframe->current_frame = link.frame;
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

int portal_c_recursion_set(int levels)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    int had = tstate->c_recursion_remaining;
    tstate->c_recursion_remaining = levels;
    return had;
}

/* ---- calls no tracer sees ---------------------------------------------------- */

/* 3.12: the sys.monitoring callbacks behind sys.settrace/sys.setprofile (and any
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
    return (portal_iframe *)((PyGenObject *)gen)->gi_iframe;
}

PyCodeObject *portal_iframe_code(portal_iframe *f)
{
    return f->f_code;
}

int portal_iframe_nlocalsplus(portal_iframe *f)
{
    return f->f_code->co_nlocalsplus;
}

PyObject *portal_iframe_slot(portal_iframe *f, int i)
{
    return f->localsplus[i];
}

int portal_iframe_stacktop(portal_iframe *f)
{
    return f->stacktop;
}

int portal_iframe_is_entry(portal_iframe *f)
{
    _PyInterpreterFrame *caller = f->previous; /* borrowed */
    return caller == NULL || caller->owner == FRAME_OWNED_BY_CSTACK || _PyFrame_IsIncomplete(caller);
}

PyObject *portal_iframe_function(portal_iframe *f)
{
    PyObject *func = f->f_funcobj; /* borrowed */
    return func != NULL && PyFunction_Check(func) ? func : NULL;
}

int portal_gen_frame_state(PyObject *gen)
{
    return ((PyGenObject *)gen)->gi_frame_state;
}

int portal_iframe_lasti(portal_iframe *f)
{
    /* prev_instr is the unit before the next instruction of a frame not running. */
    return _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);
}

/* ---- writing ---------------------------------------------------------------- */

int portal_iframe_inject(portal_iframe *f, PyObject *const *locals, Py_ssize_t nlocals,
                         PyObject *const *stack, Py_ssize_t nstack, int resume_offset)
{
    PyCodeObject *co = f->f_code; /* borrowed */
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
    int top = f->stacktop;
    if (top < nlocalsplus) {
        top = nlocalsplus;
    }
    for (int i = nlocalsplus; i < top; i++) {
        Py_CLEAR(f->localsplus[i]);
    }
    /* Free variables come from the closure, exactly as COPY_FREE_VARS would. */
    const int nfree = co->co_nfreevars;
    PyObject *func = portal_iframe_function(f); /* borrowed */
    PyObject *closure = func ? ((PyFunctionObject *)func)->func_closure : NULL; /* borrowed */
    for (int i = 0; i < nlocalsplus; i++) {
        PyObject *value = locals[i];
        const int free_index = i - (nlocalsplus - nfree);
        if (free_index >= 0 && closure != NULL && free_index < PyTuple_GET_SIZE(closure)) {
            value = PyTuple_GET_ITEM(closure, free_index);
        }
        Py_XINCREF(value);
        Py_XSETREF(f->localsplus[i], value);
    }
    for (Py_ssize_t i = 0; i < nstack; i++) {
        Py_XINCREF(stack[i]);
        f->localsplus[nlocalsplus + i] = stack[i];
    }
    f->stacktop = nlocalsplus + (int)nstack;
    /* The eval loop starts a frame it enters, and resumes a generator, at the unit
     * after prev_instr (SET_LOCALS_FROM_FRAME). */
    f->prev_instr = _PyCode_CODE(co) + resume_offset / (int)sizeof(_Py_CODEUNIT) - 1;
    return 0;
}

void portal_gen_mark_suspended(PyObject *gen)
{
    ((PyGenObject *)gen)->gi_frame_state = FRAME_SUSPENDED;
}

/* ---- the frame-evaluation hook ------------------------------------------------ */

/* 3.12: the evaluation function clears and pops the frame it was given (the
 * default loop does it on its way out, exit_unwind): an unrun frame is thrown
 * into, so that CPython's loop unwinds it at once with the pending exception. */
PyObject *portal_eval_unrun(PyThreadState *tstate, portal_iframe *f)
{
    return _PyEval_EvalFrameDefault(tstate, f, 1);
}
