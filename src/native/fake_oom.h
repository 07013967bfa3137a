/* fake_oom.h: PORTAL_FAKE_OOM's trigger (see fake_oom.c); methods of _portal._frames. */
#ifndef PORTAL_FAKE_OOM_H
#define PORTAL_FAKE_OOM_H
#include <Python.h>
/* fake_oom_configure(counts: list[int], targets: list[int], factory) */
PyObject *portal_fake_oom_configure(PyObject *self, PyObject *args);
/* fake_oom_tick(i) or fake_oom_tick((i, j, ...)): count a hit of each spec given;
 * raise factory(k) for the first spec k whose target hit this is. */
PyObject *portal_fake_oom_tick(PyObject *self, PyObject *arg);
#endif
