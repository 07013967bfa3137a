/* itertools_state_314.c: the private state of itertools objects on CPython 3.14
 * (see itertools_state.c).  Compiled only through itertools_state.c.
 *
 * The layouts below are those of CPython 3.14's Modules/itertoolsmodule.c (its
 * countobject, isliceobject, chainobject, cycleobject, productobject; they are in no
 * header), written here from reading it and checked against 3.14.8 as Debian forky
 * ships it, whose cycle has no `firstpass` flag any more: its index is -1 during the
 * first pass (measured there: tp_basicsize 40, and the fields read through ctypes
 * across a first pass and after).  A type whose tp_basicsize differs from
 * the struct's size is left out of SUPPORTED (a tuple of the types' names), and state()/fill_*() refuse it with
 * a TypeError, so that a layout that changed declines the object by name
 * (itertools_state.py) instead of reading the wrong memory.  Only the exact types
 * are read, never a subclass (whose instances may hold more).
 *
 *   state(obj) -> tuple, by type:
 *     count    (cnt, long_cnt or None, long_step)
 *     islice   (it or None, next, stop, step, cnt)
 *     chain    (source or None, active or None)
 *     cycle    (it or None, saved, index)  index -1: in the first pass
 *     product  (pools, indices, started, stopped)
 *   fill_islice(obj, cnt)                       items taken from its iterator so far
 *   fill_chain(obj, source, active)             either may be None
 *   fill_cycle(obj, it, saved, index)           it None and 0 <= index < len(saved)
 *                                               (or 0 for an empty one), or an
 *                                               iterator and index -1
 *   fill_product(obj, indices)                  a product not yet started: its result
 *                                               becomes that of those indices
 * Each fill_*() is meant for an object just made (itertools_state.py builds it),
 * returns None, and validates what it writes so that no later next() reads out
 * of bounds.
 */
#ifndef PORTAL_ITERTOOLS_DISPATCH
#error "portal: compile src/native/itertools_state.c, which includes this file for CPython 3.14"
#endif
#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION != 14
#error "portal: itertools_state_314.c is CPython 3.14's itertools layout"
#endif
#ifdef Py_GIL_DISABLED
#error "portal: itertools_state_314.c is checked for the GIL build of CPython 3.14 only (not free-threaded)"
#endif

typedef struct {
    PyObject_HEAD
    Py_ssize_t cnt;        /* the next value in fast mode; PY_SSIZE_T_MAX in slow mode */
    PyObject *long_cnt;    /* the next value in slow mode, NULL in fast mode */
    PyObject *long_step;
} portal_count_layout;

typedef struct {
    PyObject_HEAD
    PyObject *it;          /* NULL once exhausted */
    Py_ssize_t next;       /* the index of the next item to give */
    Py_ssize_t stop;       /* -1: none */
    Py_ssize_t step;
    Py_ssize_t cnt;        /* items taken from it so far */
} portal_islice_layout;

typedef struct {
    PyObject_HEAD
    PyObject *source;      /* the iterator over the iterables, NULL once exhausted */
    PyObject *active;      /* the iterator being drawn from, or NULL */
} portal_chain_layout;

typedef struct {
    PyObject_HEAD
    PyObject *it;          /* NULL once the first pass is over */
    PyObject *saved;       /* list: the items of the first pass */
    Py_ssize_t index;      /* -1 during the first pass, then the next item of saved */
} portal_cycle_layout;

/* cycle's index during its first pass (while it draws from, and saves, its iterator). */
#define CYCLE_FIRST_PASS ((Py_ssize_t)-1)

typedef struct {
    PyObject_HEAD
    PyObject *pools;       /* tuple of tuples */
    Py_ssize_t *indices;   /* one per pool */
    PyObject *result;      /* the last tuple given, NULL before the first */
    int stopped;
} portal_product_layout;

enum kind { K_COUNT, K_ISLICE, K_CHAIN, K_CYCLE, K_PRODUCT, K_N };

static const struct {
    const char *name;
    Py_ssize_t size;
} kinds[K_N] = {
    [K_COUNT] = {"count", (Py_ssize_t)sizeof(portal_count_layout)},
    [K_ISLICE] = {"islice", (Py_ssize_t)sizeof(portal_islice_layout)},
    [K_CHAIN] = {"chain", (Py_ssize_t)sizeof(portal_chain_layout)},
    [K_CYCLE] = {"cycle", (Py_ssize_t)sizeof(portal_cycle_layout)},
    [K_PRODUCT] = {"product", (Py_ssize_t)sizeof(portal_product_layout)},
};

/* The tp_iternext of itertools.<name> for each kind whose layout checked, else NULL.
 * A type is recognised by it, not by identity: itertools is a multi-phase module, and
 * a program that imports it again after Portal's start-up forgot it (boot.py) gets
 * new type objects with the same code; a subclass inherits tp_iternext too, so its
 * base must be object as well. */
static iternextfunc iternexts[K_N];

static int is_kind(PyTypeObject *t, int k)
{
    return iternexts[k] != NULL && t->tp_iternext == iternexts[k] &&
           t->tp_base == &PyBaseObject_Type && t->tp_basicsize == kinds[k].size &&
           t->tp_itemsize == 0;
}

/* The kind of obj's exact type, or -1 with a TypeError set. */
static int kind_of(PyObject *obj)
{
    for (int k = 0; k < K_N; k++) {
        if (is_kind(Py_TYPE(obj), k)) {
            return k;
        }
    }
    PyErr_Format(PyExc_TypeError, "cannot read the state of %s: not an itertools type whose "
                 "layout Portal checked for this CPython", Py_TYPE(obj)->tp_name);
    return -1;
}

static int expect(PyObject *obj, enum kind k)
{
    if (!is_kind(Py_TYPE(obj), k)) {
        PyErr_Format(PyExc_TypeError, "needs an itertools.%s whose layout Portal checked, "
                     "not %s", kinds[k].name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

/* obj, or None for NULL: a new reference either way. */
static PyObject *or_none(PyObject *obj)
{
    return Py_NewRef(obj != NULL ? obj : Py_None);
}

/* state(obj) -> new tuple. */
static PyObject *itertools_state(PyObject *self, PyObject *obj)
{
    (void)self;
    switch (kind_of(obj)) {
    case K_COUNT: {
        portal_count_layout *c = (portal_count_layout *)obj;
        /* "n" makes a new int, "N" steals the new references or_none gives */
        return Py_BuildValue("(nNN)", c->cnt, or_none(c->long_cnt), or_none(c->long_step));
    }
    case K_ISLICE: {
        portal_islice_layout *s = (portal_islice_layout *)obj;
        return Py_BuildValue("(Nnnnn)", or_none(s->it), s->next, s->stop, s->step, s->cnt);
    }
    case K_CHAIN: {
        portal_chain_layout *c = (portal_chain_layout *)obj;
        return Py_BuildValue("(NN)", or_none(c->source), or_none(c->active));
    }
    case K_CYCLE: {
        portal_cycle_layout *c = (portal_cycle_layout *)obj;
        return Py_BuildValue("(NNn)", or_none(c->it), or_none(c->saved), c->index);
    }
    case K_PRODUCT: {
        portal_product_layout *p = (portal_product_layout *)obj;
        Py_ssize_t n = PyTuple_GET_SIZE(p->pools);
        PyObject *indices = PyTuple_New(n); /* new: stolen by Py_BuildValue's "N" */
        if (indices == NULL) {
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyLong_FromSsize_t(p->indices[i]); /* new, stolen below */
            if (v == NULL) {
                Py_DECREF(indices);
                return NULL;
            }
            PyTuple_SET_ITEM(indices, i, v);
        }
        return Py_BuildValue("(ONNN)", p->pools, indices, PyBool_FromLong(p->result != NULL),
                             PyBool_FromLong(p->stopped));
    }
    default:
        return NULL;
    }
}

/* fill_islice(obj, cnt) -> None. */
static PyObject *itertools_fill_islice(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj;
    Py_ssize_t cnt;
    if (!PyArg_ParseTuple(args, "On:fill_islice", &obj, &cnt) || expect(obj, K_ISLICE) < 0) {
        return NULL;
    }
    if (cnt < 0) {
        PyErr_SetString(PyExc_ValueError, "fill_islice(): cnt must be >= 0");
        return NULL;
    }
    ((portal_islice_layout *)obj)->cnt = cnt;
    Py_RETURN_NONE;
}

/* Replace *slot (an owned reference or NULL) by value (borrowed; None: NULL). */
static void set_slot(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    *slot = value == Py_None ? NULL : Py_NewRef(value);
    Py_XDECREF(old);
}

/* fill_chain(obj, source, active) -> None. */
static PyObject *itertools_fill_chain(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj, *source, *active; /* borrowed from args */
    if (!PyArg_ParseTuple(args, "OOO:fill_chain", &obj, &source, &active) ||
        expect(obj, K_CHAIN) < 0) {
        return NULL;
    }
    if ((source != Py_None && !PyIter_Check(source)) || (active != Py_None && !PyIter_Check(active))) {
        PyErr_SetString(PyExc_TypeError, "fill_chain(): source and active must be iterators or None");
        return NULL;
    }
    portal_chain_layout *c = (portal_chain_layout *)obj;
    set_slot(&c->source, source);
    set_slot(&c->active, active);
    Py_RETURN_NONE;
}

/* fill_cycle(obj, it, saved, index) -> None. */
static PyObject *itertools_fill_cycle(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj, *it, *saved; /* borrowed from args */
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "OOO!n:fill_cycle", &obj, &it, &PyList_Type, &saved, &index) ||
        expect(obj, K_CYCLE) < 0) {
        return NULL;
    }
    if (it != Py_None && !PyIter_Check(it)) {
        PyErr_SetString(PyExc_TypeError, "fill_cycle(): it must be an iterator or None");
        return NULL;
    }
    /* the two states the type makes: drawing from it (index -1), or it gone and
     * index on an item of saved, which next() then reads unchecked */
    Py_ssize_t n = PyList_GET_SIZE(saved);
    if (it != Py_None ? index != CYCLE_FIRST_PASS
                      : index < 0 || (n == 0 ? index != 0 : index >= n)) {
        PyErr_SetString(PyExc_ValueError, "fill_cycle(): index out of range of saved, or "
                        "not -1 while it has an iterator");
        return NULL;
    }
    portal_cycle_layout *c = (portal_cycle_layout *)obj;
    set_slot(&c->it, it);
    set_slot(&c->saved, saved);
    c->index = index;
    Py_RETURN_NONE;
}

/* fill_product(obj, indices) -> None. */
static PyObject *itertools_fill_product(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj, *indices; /* borrowed from args */
    if (!PyArg_ParseTuple(args, "OO!:fill_product", &obj, &PyTuple_Type, &indices) ||
        expect(obj, K_PRODUCT) < 0) {
        return NULL;
    }
    portal_product_layout *p = (portal_product_layout *)obj;
    Py_ssize_t n = PyTuple_GET_SIZE(p->pools);
    if (p->result != NULL || p->stopped) {
        PyErr_SetString(PyExc_ValueError, "fill_product(): the product has started already");
        return NULL;
    }
    if (PyTuple_GET_SIZE(indices) != n) {
        PyErr_SetString(PyExc_ValueError, "fill_product(): one index per pool is needed");
        return NULL;
    }
    Py_ssize_t *at = PyMem_New(Py_ssize_t, n > 0 ? n : 1); /* freed below */
    if (at == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *result = PyTuple_New(n); /* new: kept in p->result on success */
    if (result == NULL) {
        PyMem_Free(at);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pool = PyTuple_GET_ITEM(p->pools, i); /* borrowed */
        at[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(indices, i));
        if (at[i] == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (at[i] < 0 || at[i] >= PyTuple_GET_SIZE(pool)) {
            PyErr_SetString(PyExc_ValueError, "fill_product(): index out of range of its pool");
            goto fail;
        }
        PyTuple_SET_ITEM(result, i, Py_NewRef(PyTuple_GET_ITEM(pool, at[i])));
    }
    memcpy(p->indices, at, (size_t)n * sizeof *at);
    PyMem_Free(at);
    p->result = result;
    Py_RETURN_NONE;
fail:
    PyMem_Free(at);
    Py_DECREF(result);
    return NULL;
}

static PyMethodDef itertools_methods[] = {
    {"state", itertools_state, METH_O, "state(obj) -> tuple: an itertools object's fields"},
    {"fill_islice", itertools_fill_islice, METH_VARARGS, "fill_islice(obj, cnt)"},
    {"fill_chain", itertools_fill_chain, METH_VARARGS, "fill_chain(obj, source, active)"},
    {"fill_cycle", itertools_fill_cycle, METH_VARARGS, "fill_cycle(obj, it, saved, index)"},
    {"fill_product", itertools_fill_product, METH_VARARGS, "fill_product(obj, indices)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef itertools_module = {
    PyModuleDef_HEAD_INIT, "_portal._itertools",
    "The private state of itertools objects on CPython 3.14 (their pickling was removed).",
    -1, itertools_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__itertools(void)
{
    PyObject *mod = PyImport_ImportModule("itertools"); /* new */
    if (mod == NULL) {
        return NULL;
    }
    PyObject *supported = PyList_New(0); /* new: turned into the SUPPORTED tuple (names) */
    if (supported == NULL) {
        Py_DECREF(mod);
        return NULL;
    }
    for (int k = 0; k < K_N; k++) {
        PyObject *t = PyObject_GetAttrString(mod, kinds[k].name); /* new, released below */
        if (t == NULL) {
            goto fail;
        }
        PyTypeObject *tp = (PyTypeObject *)t;
        if (PyType_Check(t) && tp->tp_basicsize == kinds[k].size && tp->tp_itemsize == 0 &&
            tp->tp_base == &PyBaseObject_Type && tp->tp_iternext != NULL) {
            PyObject *name = PyUnicode_FromString(kinds[k].name); /* new, released below */
            if (name == NULL || PyList_Append(supported, name) < 0) {
                Py_XDECREF(name);
                Py_DECREF(t);
                goto fail;
            }
            Py_DECREF(name);
            iternexts[k] = tp->tp_iternext;
        }
        /* else: not the layout read: left out, refused by name */
        Py_DECREF(t);
    }
    Py_DECREF(mod);
    mod = NULL;
    PyObject *m = PyModule_Create(&itertools_module); /* new: returned */
    if (m == NULL) {
        Py_DECREF(supported);
        return NULL;
    }
    PyObject *tuple = PyList_AsTuple(supported); /* new: stolen by PyModule_AddObject */
    Py_DECREF(supported);
    if (tuple == NULL || PyModule_AddObject(m, "SUPPORTED", tuple) < 0) {
        Py_XDECREF(tuple);
        Py_DECREF(m);
        return NULL;
    }
    return m;
fail:
    Py_XDECREF(mod);
    Py_DECREF(supported);
    return NULL;
}
