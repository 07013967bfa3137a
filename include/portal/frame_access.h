/* frame_access.h: the only door to CPython's per-version frame internals.
 *
 * Everything that depends on the layout of _PyInterpreterFrame, _PyCFrame or
 * PyThreadState lives in src/native/frame_access.c, which refuses to build for a
 * Python version whose layout has not been checked.  Callers see only the narrow
 * operations below.
 */
#ifndef PORTAL_FRAME_ACCESS_H
#define PORTAL_FRAME_ACCESS_H

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque saved link to the Python frame that is running the caller. */
typedef struct portal_frame_link {
    void *frame; /* struct _PyInterpreterFrame * (borrowed, lives on the data stack) */
} portal_frame_link;

/* Make the next Python frame entered on this thread a bottom frame: it gets no
 * f_back, so tracebacks, sys._getframe() and warnings see the program's own frames
 * only, as under `python script.py`.  Must be undone by portal_frame_reattach()
 * with the returned link before the caller's frame runs again.  Needs the GIL. */
portal_frame_link portal_frame_detach_caller(void);
void portal_frame_reattach(portal_frame_link link);

#ifdef __cplusplus
}
#endif
#endif
