/* frame_access.c: the door to CPython's per-version frame internals
 * (include/portal/frame_access.h).
 *
 * One file per CPython version implements the interface against that version's
 * _PyInterpreterFrame, PyThreadState and generator layout; this file compiles the
 * one of the version being built for, and refuses a version nobody has checked.
 * Porting to a new version: read its Include/internal/pycore_frame.h,
 * pycore_genobject.h, cpython/pystate.h and the eval loop's frame handling, write
 * frame_access_3XX.c, add it below and to PORTAL_SUPPORTED_PYTHONS
 * (cmake/PortalPython.cmake), and run tests/unit/python/test_frame_access.py.
 */
#define Py_BUILD_CORE 1
#include "portal/frame_access.h"

#define PORTAL_FRAME_ACCESS_DISPATCH 1
#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 11
#include "frame_access_311.c"
#elif PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 12
#include "frame_access_312.c"
#elif PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 13
#include "frame_access_313.c"
#elif PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 14
#include "frame_access_314.c"
#else
#error "portal: the frame layout of this CPython version has not been checked (checked: 3.11, 3.12, 3.13, 3.14); see frame_access.c"
#endif
