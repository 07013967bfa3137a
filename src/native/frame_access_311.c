/* frame_access_311.c: frame access for CPython 3.11 (see include/portal/frame_access.h).
 *
 * Compiled only through frame_access.c, which picks the file of the running
 * version.  Checked against CPython 3.11 (Include/internal/pycore_frame.h of 3.11.2):
 *  - PyThreadState.cframe->current_frame is the interpreter frame that the next
 *    _PyEval_EvalFrameDefault() call links as `previous` of the frame it pushes;
 *  - one recursion counter, tstate->recursion_remaining, counts Python frames and
 *    C calls (tp_call) alike;
 *  - _PyInterpreterFrame.localsplus holds co_nlocalsplus fast locals (locals,
 *    cells, free variables) followed by the value stack; `stacktop` is valid only
 *    while the frame is not running its own eval loop (suspended in an inlined
 *    call, or a suspended generator); prev_instr is the last instruction started;
 *  - a frame entered from C has is_entry set;
 *  - a generator's frame is gi_iframe, its state gi_frame_state;
 *  - MAKE_CELL and COPY_FREE_VARS run before RESUME: a frame resumed past them
 *    must be given its cells and free variables directly.
 */
#ifndef PORTAL_FRAME_ACCESS_DISPATCH
#error "portal: compile src/native/frame_access.c, which includes this file for CPython 3.11"
#endif

#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION != 11
#error "portal: frame_access_311.c is CPython 3.11's frame layout"
#endif

const portal_frame_states portal_frame_state = {
    .created = FRAME_CREATED,
    .suspended = FRAME_SUSPENDED,
    .suspended_yield_from = FRAME_SUSPENDED, /* 3.11 has no state of its own for it */
    .executing = FRAME_EXECUTING,
    .completed = FRAME_COMPLETED,
    .cleared = FRAME_CLEARED,
};

/* Levels of the one recursion counter a call through tp_call counts
 * (_PyObject_MakeTpCall's _Py_EnterRecursiveCallTstate). */
#define TP_CALL_RECURSION_LEVELS 1

/* ---- the top level ------------------------------------------------------ */

portal_frame_link portal_frame_detach_caller(void)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    portal_frame_link link = {
        tstate->cframe->current_frame,
        tstate->recursion_limit - tstate->recursion_remaining,
    };
    tstate->cframe->current_frame = NULL;
    tstate->recursion_remaining = tstate->recursion_limit;
    return link;
}

void portal_frame_reattach(portal_frame_link link)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->cframe->current_frame = link.frame;
    tstate->recursion_remaining = tstate->recursion_limit - link.depth;
}

void portal_recursion_shift(int levels)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->recursion_remaining += levels;
}

int portal_recursion_remaining(void)
{
    return PyThreadState_Get()->recursion_remaining;
}

int portal_tp_call_levels(void)
{
    return TP_CALL_RECURSION_LEVELS;
}

int portal_c_recursion_set(int levels)
{
    (void)levels;   /* 3.11: C calls count in tstate->recursion_remaining */
    return -1;
}

/* ---- calls no tracer sees ---------------------------------------------------- */

/* 3.11: call_trace() and the profile hooks do nothing while tstate->tracing is
 * set, and the eval loop tests its C frame's use_tracing (inherited by the frames
 * it starts) before looking for a tracer at all. */
portal_trace_pause portal_trace_pause_begin(void)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    portal_trace_pause pause = { tstate->cframe->use_tracing };
    tstate->tracing++;
    tstate->cframe->use_tracing = 0;
    return pause;
}

void portal_trace_resume(portal_trace_pause pause)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->tracing--;
    tstate->cframe->use_tracing = (uint8_t)pause.use_tracing;
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

int portal_iframe_nlocalsplus(portal_iframe *f)
{
    return f->f_code->co_nlocalsplus;
}

PyObject *portal_iframe_slot(portal_iframe *f, int i)
{
    return f->localsplus[i];
}

int portal_iframe_slot_is_object(portal_iframe *f, int i)
{
    (void)f;
    (void)i;
    return 1; /* every slot holds an object pointer (or NULL) */
}

int portal_iframe_stacktop(portal_iframe *f)
{
    return f->stacktop;
}

int portal_iframe_is_entry(portal_iframe *f)
{
    return f->is_entry;
}

PyObject *portal_iframe_function(portal_iframe *f)
{
    return (PyObject *)f->f_func;
}

int portal_gen_frame_state(PyObject *gen)
{
    return ((PyGenObject *)gen)->gi_frame_state;
}

int portal_iframe_lasti(portal_iframe *f)
{
    return _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);
}

PyCodeObject *portal_iframe_code(portal_iframe *f)
{
    return f->f_code;
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
    PyObject *closure = f->f_func ? f->f_func->func_closure : NULL; /* borrowed */
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
    f->prev_instr = _PyCode_CODE(co) + resume_offset / (int)sizeof(_Py_CODEUNIT) - 1;
    return 0;
}

void portal_gen_mark_suspended(PyObject *gen)
{
    ((PyGenObject *)gen)->gi_frame_state = FRAME_SUSPENDED;
}

/* ---- the frame-evaluation hook ------------------------------------------------ */

/* 3.11: whoever called the evaluation function pops the frame (_PyEval_Vector,
 * gen_send_ex2): an unrun frame is just not evaluated. */
PyObject *portal_eval_unrun(PyThreadState *tstate, portal_iframe *f)
{
    (void)tstate;
    (void)f;
    return NULL;
}
