/* library_refs.c: the `_portal._librefs` extension module: the pickler's
 * persistent_id for the plain objects that are globals of library modules.
 *
 *   Refs(table) -> a callable; refs(obj) returns table[id(obj)] when obj is a
 *       str, bytes, tuple, frozenset, dict, list or set (exactly those types)
 *       and its id is a key of table, else None.  table is a dict
 *       {int id: persistent id}, read at each call (never copied).
 *
 * Why: pickle never calls reducer_override for these built-in types, so a
 * library's sentinel string (`argparse.SUPPRESS`) or module-level dict in the
 * program state was saved by value and restored as a copy: `x is SUPPRESS`
 * turned false after a resume.  persistent_id is the one hook the C pickler
 * calls for every object; a Python function there made pickling an
 * object-heavy state 2.3x slower (measured on 3.11: 1M floats and 200k small
 * dicts, 0.43 s -> 1.0 s), this one costs a type check for most objects and a
 * dict lookup for the containers and strings.  reducers.py builds the table
 * (Pickler._build_indexes) and keeps every object in it alive while it is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyObject *table;         /* dict {id: pid}; a strong reference */
    vectorcallfunc vectorcall; /* refs_vectorcall: the pickler calls without a tuple */
} RefsObject;

static int is_candidate(PyObject *obj)
{
    PyTypeObject *t = Py_TYPE(obj);
    return t == &PyUnicode_Type || t == &PyBytes_Type || t == &PyTuple_Type ||
           t == &PyFrozenSet_Type || t == &PyDict_Type || t == &PyList_Type || t == &PySet_Type;
}

/* refs(obj) -> new reference: the persistent id, or None.  Called through
 * vectorcall (no argument tuple: the pickler calls it once per object saved);
 * args are borrowed. */
static PyObject *refs_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RefsObject *r = (RefsObject *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a Refs takes exactly one argument");
        return NULL;
    }
    PyObject *obj = args[0]; /* borrowed */
    if (!is_candidate(obj) || PyDict_GET_SIZE(r->table) == 0) {
        Py_RETURN_NONE;
    }
    PyObject *key = PyLong_FromVoidPtr(obj); /* new: id(obj) */
    if (key == NULL) {
        return NULL;
    }
    PyObject *pid = PyDict_GetItemWithError(r->table, key); /* borrowed */
    Py_DECREF(key);
    if (pid == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    return Py_NewRef(pid);
}

static PyObject *refs_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *table; /* borrowed from args */
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Refs() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Refs", 1, 1, &table)) {
        return NULL;
    }
    if (!PyDict_CheckExact(table)) {
        PyErr_SetString(PyExc_TypeError, "Refs() needs a dict");
        return NULL;
    }
    RefsObject *r = (RefsObject *)type->tp_alloc(type, 0); /* new */
    if (r == NULL) {
        return NULL;
    }
    r->table = Py_NewRef(table);
    r->vectorcall = refs_vectorcall;
    return (PyObject *)r;
}

static int refs_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((RefsObject *)self)->table);
    return 0;
}

static int refs_clear(PyObject *self)
{
    Py_CLEAR(((RefsObject *)self)->table);
    return 0;
}

static void refs_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    refs_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject RefsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_portal._librefs.Refs",
    .tp_basicsize = sizeof(RefsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(RefsObject, vectorcall),
    .tp_doc = "Refs(table): persistent_id for library globals of built-in types",
    .tp_new = refs_new,
    .tp_call = PyVectorcall_Call,
    .tp_traverse = refs_traverse,
    .tp_clear = refs_clear,
    .tp_dealloc = refs_dealloc,
};

static struct PyModuleDef librefs_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_portal._librefs",
    .m_doc = "persistent ids for the plain objects that are globals of library modules",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__librefs(void)
{
    if (PyType_Ready(&RefsType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&librefs_module); /* new */
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Refs", (PyObject *)&RefsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
