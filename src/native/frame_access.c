/* frame_access.c: per-Python-version frame access (see include/portal/frame_access.h).
 *
 * Checked against CPython 3.11 only: PyThreadState.cframe -> _PyCFrame.current_frame
 * is the interpreter frame that the next _PyEval_EvalFrameDefault() call links
 * as `previous` of the frame it pushes.
 */
#include "portal/frame_access.h"

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION != 11
#error "portal: frame_access.c has been checked for CPython 3.11 only; check the frame layout of this version first"
#endif

portal_frame_link portal_frame_detach_caller(void)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    portal_frame_link link = { tstate->cframe->current_frame };
    tstate->cframe->current_frame = NULL;
    return link;
}

void portal_frame_reattach(portal_frame_link link)
{
    PyThreadState *tstate = PyThreadState_Get(); /* borrowed */
    tstate->cframe->current_frame = link.frame;
}
