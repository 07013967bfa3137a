/* rng_snapshot.c: the `_portal._rngstate` extension module: the state of a
 * `random.Random` copied in one memcpy, for the iteration marks (iteration.py).
 *
 *   snapshot(rng) -> bytes: the generator's Mersenne Twister words and index,
 *       RNG_SNAPSHOT_SIZE bytes; rng must be a random.Random (or subclass)
 *   internal_state(snapshot) -> tuple: what rng.getstate()[1] gives for that state
 *       (the 624 words, then the index), for Random.setstate
 *
 * Why: random.getstate() builds a tuple of 625 ints, about 6 microseconds, the
 * largest part of a mark that every iteration of a training loop pays; a copy of
 * the 2,500 bytes behind it costs a tenth of that.  The copy is taken only at a
 * mark; a tuple is built only for the iteration a capture rolls back to.
 *
 * The layout is that of CPython's Modules/_randommodule.c (not in any header):
 * PyObject_HEAD, then `int index`, then `uint32_t state[624]`; the same in every
 * version Portal supports.  It is not trusted blindly: iteration.py compares
 * internal_state(snapshot(r)) with r.getstate()[1] for a freshly seeded and
 * drawn-from generator once, and uses getstate() if they ever differ.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030F0000
#error "rng_snapshot.c: the layout of random.Random is checked for CPython 3.11-3.14 only"
#endif

enum { MT_WORDS = 624 }; /* the Mersenne Twister's state size (N in _randommodule.c) */

typedef struct {
    PyObject_HEAD
    int index;
    uint32_t state[MT_WORDS];
} portal_random_layout;

/* The snapshot: the words, then the index, native byte order. */
#define RNG_SNAPSHOT_SIZE ((Py_ssize_t)(sizeof(uint32_t) * MT_WORDS + sizeof(int)))

static PyTypeObject *random_type; /* _random.Random; a strong reference held by the module */

/* Whether rng is a _random.Random: the type this module was initialised with, or
   another type object of the same C implementation (same tp_new and size: _random
   imported again gives new heap types, and the program's `random` is not the copy
   Portal's start-up imported, boot.py), or a subclass of one.  Borrowed references. */
static int is_random(PyObject *rng)
{
    for (PyTypeObject *t = Py_TYPE(rng); t != NULL; t = t->tp_base) {
        if (t == random_type || (t->tp_new == random_type->tp_new
                                 && t->tp_basicsize == random_type->tp_basicsize
                                 && strcmp(t->tp_name, random_type->tp_name) == 0)) {
            return 1;
        }
    }
    return 0;
}

/* snapshot(rng) -> new bytes. */
static PyObject *rngstate_snapshot(PyObject *self, PyObject *rng)
{
    (void)self;
    if (!is_random(rng)) {
        PyErr_SetString(PyExc_TypeError, "snapshot() needs a random.Random");
        return NULL;
    }
    const portal_random_layout *r = (const portal_random_layout *)rng;
    PyObject *out = PyBytes_FromStringAndSize(NULL, RNG_SNAPSHOT_SIZE); /* new */
    if (out == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    memcpy(p, r->state, sizeof r->state);
    memcpy(p + sizeof r->state, &r->index, sizeof r->index);
    return out;
}

/* internal_state(snapshot) -> new tuple of 625 ints. */
static PyObject *rngstate_internal_state(PyObject *self, PyObject *snap)
{
    (void)self;
    if (!PyBytes_Check(snap) || PyBytes_GET_SIZE(snap) != RNG_SNAPSHOT_SIZE) {
        PyErr_SetString(PyExc_ValueError, "internal_state() needs a snapshot() result");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(snap);
    uint32_t words[MT_WORDS];
    int index;
    memcpy(words, p, sizeof words);
    memcpy(&index, p + sizeof words, sizeof index);
    PyObject *out = PyTuple_New(MT_WORDS + 1); /* new */
    if (out == NULL) {
        return NULL;
    }
    for (int i = 0; i < MT_WORDS; i++) {
        PyObject *w = PyLong_FromUnsignedLong(words[i]); /* new, stolen below */
        if (w == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, w);
    }
    PyObject *ix = PyLong_FromLong(index); /* new, stolen below */
    if (ix == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, MT_WORDS, ix);
    return out;
}

static PyMethodDef rngstate_methods[] = {
    {"snapshot", rngstate_snapshot, METH_O, "snapshot(rng) -> bytes: rng's state, copied"},
    {"internal_state", rngstate_internal_state, METH_O,
     "internal_state(snapshot) -> tuple: getstate()[1] of that state"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef rngstate_module = {
    PyModuleDef_HEAD_INIT, "_portal._rngstate",
    "random.Random's state copied in one memcpy (iteration marks).", -1, rngstate_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rngstate(void)
{
    PyObject *mod = PyImport_ImportModule("_random"); /* new */
    if (mod == NULL) {
        return NULL;
    }
    PyObject *type = PyObject_GetAttrString(mod, "Random"); /* new: kept in random_type */
    Py_DECREF(mod);
    if (type == NULL) {
        return NULL;
    }
    if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_basicsize < (Py_ssize_t)sizeof(portal_random_layout)) {
        Py_DECREF(type);
        PyErr_SetString(PyExc_ImportError, "_random.Random does not have the layout rng_snapshot.c expects");
        return NULL;
    }
    random_type = (PyTypeObject *)type;
    PyObject *m = PyModule_Create(&rngstate_module); /* new: returned */
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "SNAPSHOT_SIZE", (long)RNG_SNAPSHOT_SIZE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
