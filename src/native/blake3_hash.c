/* blake3_hash.c: the `_portal._blake3` extension module: BLAKE3 (the reference C
 * implementation, third_party/blake3, unchanged) for the chunk digests of pack
 * files (checkpoint format version 3, docs/checkpoint-format.md).
 *
 *   digest(buffer) -> bytes: the 32-byte BLAKE3 hash of a C-contiguous buffer
 *   Hasher(): update(buffer), digest() -> bytes (32), for data given in pieces
 *   IMPLEMENTATION: "blake3 <version>"
 *
 * Why: a restore verifies every byte before anything is unpickled, and on this
 * platform's 2 cores sha256 (SHA-NI) costs more CPU than reading the bytes does
 * (measured: docs/benchmarks.md); BLAKE3 with AVX-512/AVX2 hashes several times
 * faster per core and is collision-resistant (256-bit output).  The GIL is
 * released while hashing, so worker threads hash chunks in parallel.
 *
 * References: every function below returns a new reference or NULL with an
 * exception set; the buffers taken with PyObject_GetBuffer are released before
 * returning, after the GIL is taken back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../../third_party/blake3/blake3.h"

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030F0000
#error "blake3_hash.c: checked for CPython 3.11-3.14 only"
#endif

enum { DIGEST_BYTES = BLAKE3_OUT_LEN }; /* 32: the default output length */

typedef struct {
    PyObject_HEAD
    blake3_hasher state;
    int busy; /* an update runs without the GIL: refuse another meanwhile */
} Hasher;

/* Hash ``view`` into ``state`` without the GIL. */
static void update_released(blake3_hasher *state, const Py_buffer *view)
{
    Py_BEGIN_ALLOW_THREADS
    blake3_hasher_update(state, view->buf, (size_t)view->len);
    Py_END_ALLOW_THREADS
}

static PyObject *finish(const blake3_hasher *state)
{
    uint8_t out[DIGEST_BYTES];
    blake3_hasher_finalize(state, out, DIGEST_BYTES);
    return PyBytes_FromStringAndSize((const char *)out, DIGEST_BYTES); /* new reference */
}

static PyObject *module_digest(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    blake3_hasher state;
    blake3_hasher_init(&state);
    update_released(&state, &view);
    PyBuffer_Release(&view);
    return finish(&state);
}

static PyObject *hasher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Hasher() takes no arguments");
        return NULL;
    }
    Hasher *self = (Hasher *)type->tp_alloc(type, 0); /* new reference */
    if (self == NULL)
        return NULL;
    blake3_hasher_init(&self->state);
    self->busy = 0;
    return (PyObject *)self;
}

static PyObject *hasher_update(Hasher *self, PyObject *arg)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "blake3 hasher used by two threads at once");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    self->busy = 1;
    update_released(&self->state, &view);
    self->busy = 0;
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *hasher_digest(Hasher *self, PyObject *Py_UNUSED(ignored))
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "blake3 hasher used by two threads at once");
        return NULL;
    }
    return finish(&self->state);
}

static PyMethodDef hasher_methods[] = {
    {"update", (PyCFunction)hasher_update, METH_O, "hash the bytes of a buffer (GIL released)"},
    {"digest", (PyCFunction)hasher_digest, METH_NOARGS, "the 32-byte digest so far"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HasherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_portal._blake3.Hasher",
    .tp_basicsize = sizeof(Hasher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BLAKE3 over data given in pieces",
    .tp_new = hasher_new,
    .tp_methods = hasher_methods,
};

static PyMethodDef module_methods[] = {
    {"digest", module_digest, METH_O, "the 32-byte BLAKE3 digest of a buffer (GIL released)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_portal._blake3",
    "BLAKE3 (reference C implementation) for pack-file chunk digests", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__blake3(void)
{
    if (PyType_Ready(&HasherType) < 0)
        return NULL;
    /* The first hash detects the CPU's features (a static in blake3_dispatch.c):
     * done here, with the GIL held, so that worker threads never race on it. */
    blake3_hasher warm;
    blake3_hasher_init(&warm);
    blake3_hasher_update(&warm, "", 0);
    uint8_t out[DIGEST_BYTES];
    blake3_hasher_finalize(&warm, out, DIGEST_BYTES);

    PyObject *module = PyModule_Create(&module_def); /* new reference */
    if (module == NULL)
        return NULL;
    /* PyModule_AddObjectRef does not steal: our reference to the type is static. */
    if (PyModule_AddObjectRef(module, "Hasher", (PyObject *)&HasherType) < 0 ||
        PyModule_AddStringConstant(module, "IMPLEMENTATION", "blake3 " BLAKE3_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(module, "DIGEST_BYTES", DIGEST_BYTES) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
