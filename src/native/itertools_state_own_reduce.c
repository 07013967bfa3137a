/* itertools_state_own_reduce.c: `_portal._itertools` for CPython 3.11-3.13, whose
 * itertools types pickle themselves (__reduce__/__setstate__): no type is read
 * here, SUPPORTED is empty.  Compiled only through itertools_state.c.
 */
#ifndef PORTAL_ITERTOOLS_DISPATCH
#error "portal: compile src/native/itertools_state.c, which includes this file"
#endif

static struct PyModuleDef itertools_module = {
    PyModuleDef_HEAD_INIT, "_portal._itertools",
    "itertools state: nothing to read on this version (the types pickle themselves).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__itertools(void)
{
    PyObject *m = PyModule_Create(&itertools_module); /* new: returned */
    if (m == NULL) {
        return NULL;
    }
    PyObject *none = PyTuple_New(0); /* new: stolen by PyModule_AddObject on success */
    if (none == NULL || PyModule_AddObject(m, "SUPPORTED", none) < 0) {
        Py_XDECREF(none);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
