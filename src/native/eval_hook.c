/* eval_hook.c: Portal's PEP 523 frame-evaluation hook, chained to the function in
 * place (include/portal/frame_access.h, "the frame-evaluation hook").
 *
 * The same on every checked version: _PyInterpreterState_{Get,Set}EvalFrameFunc
 * and _PyEval_EvalFrameDefault are the CPython API of 3.11 to 3.13.  Another
 * evaluation function may be in place when the restore starts (torch Dynamo
 * installs its own around compiled code): frames Portal does not fill are passed to
 * it, and it is put back when Portal's hook is removed.
 */
#include "portal/frame_access.h"

static portal_eval_hook current_hook = NULL;
/* The function in place when the hook was installed; never Portal's trampoline. */
static _PyFrameEvalFunction previous_eval = NULL;

static PyObject *eval_trampoline(PyThreadState *tstate, struct _PyInterpreterFrame *f, int throwflag)
{
    if (current_hook != NULL) {
        return current_hook(tstate, f, throwflag);
    }
    return portal_eval_previous(tstate, f, throwflag);
}

void portal_eval_hook_install(portal_eval_hook hook)
{
    PyInterpreterState *interp = PyInterpreterState_Get(); /* borrowed */
    _PyFrameEvalFunction in_place = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (in_place != eval_trampoline) {
        previous_eval = in_place;
    }
    current_hook = hook;
    _PyInterpreterState_SetEvalFrameFunc(interp, eval_trampoline);
}

void portal_eval_hook_remove(void)
{
    current_hook = NULL;
    PyInterpreterState *interp = PyInterpreterState_Get(); /* borrowed */
    if (_PyInterpreterState_GetEvalFrameFunc(interp) != eval_trampoline) {
        return; /* another's installed over Portal's: theirs stays */
    }
    /* Setting CPython's own back clears the hook (inlined calls resume). */
    _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval ? previous_eval : _PyEval_EvalFrameDefault);
}

PyObject *portal_eval_previous(PyThreadState *tstate, portal_iframe *f, int throwflag)
{
    if (previous_eval != NULL && previous_eval != _PyEval_EvalFrameDefault) {
        return previous_eval(tstate, f, throwflag);
    }
    return _PyEval_EvalFrameDefault(tstate, f, throwflag);
}

PyObject *portal_eval_default(PyThreadState *tstate, portal_iframe *f, int throwflag)
{
    return _PyEval_EvalFrameDefault(tstate, f, throwflag);
}

int portal_eval_hook_active(void)
{
    return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) != _PyEval_EvalFrameDefault;
}

int portal_eval_hook_installed(void)
{
    return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == eval_trampoline;
}
