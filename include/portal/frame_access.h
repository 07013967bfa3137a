/* frame_access.h: the only door to CPython's per-version frame internals.
 *
 * Everything that depends on the layout of _PyInterpreterFrame, _PyCFrame,
 * PyThreadState or generator objects lives in one file per CPython version,
 * src/native/frame_access_3XX.c, chosen by src/native/frame_access.c, which
 * refuses to build for a Python version whose layout has not been checked.
 * Callers see only the narrow operations below, the same on every version.  All
 * need the GIL.
 *
 * Reference conventions: "borrowed" results must not be decref'ed and are valid
 * while the frame lives; "new" results are owned by the caller.
 */
#ifndef PORTAL_FRAME_ACCESS_H
#define PORTAL_FRAME_ACCESS_H

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the top level ------------------------------------------------------ */

/* An opaque saved link to the Python frame that is running the caller. */
typedef struct portal_frame_link {
    void *frame; /* struct _PyInterpreterFrame * (lives on the data stack) */
    int depth;   /* the recursion depth the caller's frames had used */
} portal_frame_link;

/* Make the next Python frame entered on this thread a bottom frame: it gets no
 * f_back, so tracebacks, sys._getframe() and warnings see the program's own frames
 * only, as under `python script.py`; and the recursion depth starts again from
 * zero, so the frames under it do not count against sys.getrecursionlimit()
 * (RecursionError, sys.setrecursionlimit()'s "at the recursion depth N" see
 * python's depths).  Must be undone by portal_frame_reattach() with the returned
 * link before the caller's frame runs again (under the recursion limit in force
 * then, which the program may have changed). */
portal_frame_link portal_frame_detach_caller(void);
void portal_frame_reattach(portal_frame_link link);

/* Make `levels` more levels of recursion available to this thread (negative:
 * take them back): for a C call that stands in for one python makes without
 * counting a level (restore's Reenter). */
void portal_recursion_shift(int levels);
/* Recursion levels this thread has left before RecursionError. */
int portal_recursion_remaining(void);
/* Levels of that recursion depth that a call through a C type's tp_call counts
 * (3.11: one, the shared counter; 3.12+: none, it counts C levels apart). */
int portal_tp_call_levels(void);
/* Give this thread `levels` levels of C recursion (a C function calling back into
 * C, such as the C pickler saving a nested object) before RecursionError, for a
 * thread started with a C stack large enough for them; returns the levels it had.
 * 3.12+ counts C levels apart from sys.getrecursionlimit() (a fixed budget per
 * thread); 3.11 counts them in the one counter sys.setrecursionlimit() sets, so
 * there it does nothing and returns -1. */
int portal_c_recursion_set(int levels);

/* ---- calls no tracer sees ---------------------------------------------------- */

/* Pause sys.settrace/sys.setprofile for this thread: the Python code called until
 * portal_trace_resume() gives no trace or profile events (as inside a trace
 * function).  Pairs nest; each resume undoes exactly its pause. */
typedef struct portal_trace_pause {
    int use_tracing; /* 3.11: the running C frame's flag before the pause; else unused */
} portal_trace_pause;

portal_trace_pause portal_trace_pause_begin(void);
void portal_trace_resume(portal_trace_pause pause);

/* ---- reading a live frame (capture) --------------------------------------- */

/* The interpreter frame behind a frame object, or a generator's own frame. */
typedef struct _PyInterpreterFrame portal_iframe;

portal_iframe *portal_iframe_of_frame(PyFrameObject *frame);
/* NULL (with TypeError) unless `gen` is a generator, coroutine or async generator. */
portal_iframe *portal_iframe_of_gen(PyObject *gen);

/* Number of fast-local slots (locals, cells, free variables) of the frame's code. */
int portal_iframe_nlocalsplus(portal_iframe *f);
/* Slot i of localsplus: locals first, then the value stack.  Borrowed; NULL for an
 * empty slot.  The caller keeps i below the frame's valid extent. */
PyObject *portal_iframe_slot(portal_iframe *f, int i);
/* False when slot i holds no object but a tagged integer (3.14+: the instruction
 * offset an exception handler entry with `lasti` pushes), which portal_iframe_slot
 * cannot give; always true before 3.14. */
int portal_iframe_slot_is_object(portal_iframe *f, int i);
/* Slot count up to the top of the value stack when it is known (a frame suspended
 * in an inlined call or a suspended generator), else -1. */
int portal_iframe_stacktop(portal_iframe *f);
/* True when the frame was entered from C (not through an inlined Python call). */
int portal_iframe_is_entry(portal_iframe *f);
/* The function being run (borrowed; NULL for module and class bodies). */
PyObject *portal_iframe_function(portal_iframe *f);
/* CPython's PyFrameState values, which differ between versions (3.11: created -2,
 * suspended -1; 3.13 and 3.14: created -3, suspended -2, suspended in `yield from`/await -1):
 * compare a state only with these (exported to Python as _frames.FRAME_*). */
typedef struct portal_frame_states {
    int created;
    int suspended;            /* at a yield */
    int suspended_yield_from; /* 3.12+: at the yield of a `yield from`/await; 3.11: = suspended */
    int executing;
    int completed;
    int cleared;
} portal_frame_states;
extern const portal_frame_states portal_frame_state;

/* The generator's frame state, one of portal_frame_state. */
int portal_gen_frame_state(PyObject *gen);
/* Byte offset of the instruction before the next one to run, for a frame that is
 * not running its own instruction: a created generator's RETURN_GENERATOR, a
 * suspended one's YIELD_VALUE (the next instruction is 2 bytes on, on every version). */
int portal_iframe_lasti(portal_iframe *f);

/* ---- writing a frame that has not started, or a suspended generator ---------- */

/* Replace the frame's fast locals with `locals` (n = nlocalsplus entries; NULL
 * entries make empty slots), then its value stack with `stack` (nstack entries,
 * NULL allowed), and make `resume_offset` (bytes) the next instruction.  Free
 * variables are always taken from the frame's function closure.  References are
 * not stolen.  Returns -1 with an exception set if the stack does not fit. */
int portal_iframe_inject(portal_iframe *f, PyObject *const *locals, Py_ssize_t nlocals,
                         PyObject *const *stack, Py_ssize_t nstack, int resume_offset);
/* Mark a created generator as suspended at its injected instruction. */
void portal_gen_mark_suspended(PyObject *gen);

/* ---- the frame-evaluation hook (restore only) ------------------------------- */

/* Called for each frame while installed; must return the frame's result as
 * _PyEval_EvalFrameDefault does: by portal_eval_previous() for a frame it leaves
 * alone, by portal_eval_default() for a frame it has injected. */
typedef PyObject *(*portal_eval_hook)(PyThreadState *tstate, portal_iframe *f, int throwflag);
/* Install `hook` over the frame-evaluation function in place now (CPython's own, or
 * another's such as torch Dynamo's), which it chains to.  Installing again while
 * installed only replaces the hook. */
void portal_eval_hook_install(portal_eval_hook hook);
/* Put back the function that was in place before portal_eval_hook_install (no hook
 * at all, full speed, when that was CPython's own).  If another function has been
 * installed over Portal's since, it is left in place (and chains on to nothing of
 * Portal's: the hook is forgotten). */
void portal_eval_hook_remove(void);
/* Evaluate `f` with the function that was in place before the hook. */
PyObject *portal_eval_previous(PyThreadState *tstate, portal_iframe *f, int throwflag);
/* Evaluate `f` with CPython's own loop: the only one that resumes a frame at the
 * instruction injected (another evaluation function would start it over). */
PyObject *portal_eval_default(PyThreadState *tstate, portal_iframe *f, int throwflag);
/* Give back `f`, which the hook will not run, with the exception set: returns NULL
 * once the frame is cleaned up as its evaluation would have (3.12+: by the eval
 * loop, which must see it; 3.11: by the caller). */
PyObject *portal_eval_unrun(PyThreadState *tstate, portal_iframe *f);
/* True while any frame-evaluation function (Portal's or another) is installed. */
int portal_eval_hook_active(void);
/* True while Portal's hook is the one installed. */
int portal_eval_hook_installed(void);
PyCodeObject *portal_iframe_code(portal_iframe *f); /* borrowed */

#ifdef __cplusplus
}
#endif
#endif
