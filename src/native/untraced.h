/* untraced.h: Portal's builtins, called from the program's instrumented code,
 * hidden from the program's tracer and profiler (untraced.c). */
#ifndef PORTAL_UNTRACED_H
#define PORTAL_UNTRACED_H

#include <Python.h>

/* Add the type `Untraced` to `module`; 0, or -1 with an exception set. */
int portal_untraced_add_type(PyObject *module);

#endif
