/* toplevel.c: the `_portal._toplevel` extension module.
 *
 * Runs the program's top level (a script's code, or runpy for -m) the way
 * CPython's own main does: as a bottom frame, with the same handling of an
 * uncaught exception (flush, sys.excepthook, exit status 1, SystemExit, and the
 * exit by SIGINT after finalisation for an unhandled KeyboardInterrupt).  The
 * interpreter process is Debian's /usr/bin/python3 started by portal-run with a
 * bootstrap (python/_portal/run/boot.py); this module is what makes the bootstrap's
 * own frames invisible to the program.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include "portal/frame_access.h"
#include "untraced.h"

static int exit_by_sigint_registered = 0;

/* Recursion levels the bootstrap needs once the program's top level is over
 * (run() returned: the report of an unrescued out-of-memory error, the clean-up
 * of __main__, the exit).  A program that lowered its recursion limit below the
 * bootstrap's own depth would make those steps raise RecursionError: what is
 * missing is lent until settle(). */
#define BOOT_LEVELS_AFTER_RUN 50
static int boot_levels_lent = 0;

/* The program's recursion limit saved with a suspended job, set when run()
 * starts the program's top level again (0: none). */
static int program_recursion_limit = 0;

/* Lend the bootstrap what it lacks of BOOT_LEVELS_AFTER_RUN. */
static void lend_boot_levels(void)
{
    int room = portal_recursion_remaining();
    if (room < BOOT_LEVELS_AFTER_RUN) {
        int lend = BOOT_LEVELS_AFTER_RUN - room;
        portal_recursion_shift(lend);
        boot_levels_lent += lend;
    }
}

/* Py_AtExit callback: the last step of Py_FinalizeEx.  CPython's main exits by
 * SIGINT after an unhandled KeyboardInterrupt, so that a calling shell learns of
 * the ^C; the interpreter process does the same. */
static void exit_by_sigint(void)
{
    if (PyOS_setsig(SIGINT, SIG_DFL) == SIG_ERR) {
        perror("signal");
    } else {
        kill(getpid(), SIGINT);
    }
}

/* CPython's flush_io(): flush sys.stderr, then sys.stdout, keeping the pending
 * exception.  The file runner does it before printing a traceback, which fixes
 * how output and traceback interleave on one pipe. */
static void flush_io(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    const char *names[2] = {"stderr", "stdout"};
    for (int i = 0; i < 2; i++) {
        PyObject *f = PySys_GetObject(names[i]); /* borrowed */
        if (f != NULL && f != Py_None) {
            PyObject *r = PyObject_CallMethod(f, "flush", NULL); /* new */
            if (r == NULL) {
                PyErr_Clear();
            }
            Py_XDECREF(r);
        }
    }
    PyErr_Restore(type, value, tb); /* steals all three */
}

/* The exception pending now escaped the program's top level.  SystemExit stays
 * pending (returns NULL): the caller lets it propagate, and the interpreter's -c
 * runner handles it exactly as for a script (exit code, message, finalisation,
 * __main__.__file__ still set).  Anything else is reported as CPython's main
 * reports it, and the exit status python would use (1) is returned as a new int. */
static PyObject *toplevel_failed(int flush)
{
    if (flush) {
        flush_io();
    }
    if (PyErr_ExceptionMatches(PyExc_SystemExit)) {
        return NULL;
    }
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt) && !exit_by_sigint_registered) {
        if (Py_AtExit(exit_by_sigint) == 0) {
            exit_by_sigint_registered = 1;
        }
    }
    PyErr_Print(); /* sys.excepthook, sys.last_*; exits itself if the hook raises SystemExit */
    return PyLong_FromLong(1); /* new */
}

/* run(target, arg, flush_io) -> None or exit status
 *   target is a code object: exec it with globals `arg`;
 *   otherwise call target(*arg).
 * The call runs as a bottom frame.  Returns None when it returns; on an uncaught
 * exception, reports it as CPython's main does and returns the exit status
 * (SystemExit propagates instead).  flush_io: flush the std streams once the call
 * is over, returned or raised (the script runner does; -c and -m do not). */
static PyObject *toplevel_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *target, *arg; /* borrowed */
    int flush = 0;
    if (!PyArg_ParseTuple(args, "OO|p:run", &target, &arg, &flush)) {
        return NULL;
    }
    if (PyCode_Check(target) && !PyDict_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "run: globals must be a dict");
        return NULL;
    }
    if (!PyCode_Check(target) && !PyTuple_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "run: arguments must be a tuple");
        return NULL;
    }

    /* The program runs, and its uncaught exception is reported (sys.excepthook),
     * at the bottom of the stack: no bootstrap frames under it, recursion depth
     * counted from zero, as under python's main. */
    portal_frame_link link = portal_frame_detach_caller();
    if (program_recursion_limit > 0) {
        Py_SetRecursionLimit(program_recursion_limit); /* at depth zero: never refused */
        program_recursion_limit = 0;
    }
    PyObject *result = PyCode_Check(target)
        ? PyEval_EvalCode(target, arg, arg)   /* new */
        : PyObject_Call(target, arg, NULL);   /* new */

    /* CPython's file runner flushes stderr, then stdout, once the script is done,
     * whether it returned or raised; without it the interpreter's finalisation
     * would flush stdout first, and output left unterminated on both streams
     * would come out in the other order on a shared pipe. */
    if (flush) {
        flush_io();
    }
    PyObject *status = NULL; /* new */
    if (result == NULL) {
        status = toplevel_failed(0);
    } else {
        Py_DECREF(result);
        status = Py_NewRef(Py_None);
    }
    portal_frame_reattach(link);
    if (status != NULL) {
        lend_boot_levels(); /* a SystemExit only propagates: no step of ours runs */
    }
    return status;
}

/* settle() -> None: take back the recursion levels lent to the bootstrap since
 * run() returned; the bootstrap's last step, before the interpreter finalises. */
static PyObject *toplevel_settle(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    portal_recursion_shift(-boot_levels_lent);
    boot_levels_lent = 0;
    Py_RETURN_NONE;
}

/* set_program_recursion_limit(n) -> None: the limit the next run() sets for the
 * program (a resumed job's own; 0: leave it). */
static PyObject *toplevel_set_program_recursion_limit(PyObject *self, PyObject *arg)
{
    (void)self;
    long limit = PyLong_AsLong(arg);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (limit < 0 || limit > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "set_program_recursion_limit: out of range");
        return NULL;
    }
    program_recursion_limit = (int)limit;
    Py_RETURN_NONE;
}

/* fail(exc, flush_io) -> exit status: report `exc` (raised before the program
 * started, e.g. the script's SyntaxError) as run() reports an uncaught exception. */
static PyObject *toplevel_fail(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *exc; /* borrowed */
    int flush = 0;
    if (!PyArg_ParseTuple(args, "O|p:fail", &exc, &flush)) {
        return NULL;
    }
    if (!PyExceptionInstance_Check(exc)) {
        PyErr_SetString(PyExc_TypeError, "fail: an exception instance is required");
        return NULL;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc); /* does not steal */
    portal_frame_link link = portal_frame_detach_caller();
    PyObject *status = toplevel_failed(flush); /* new, or NULL */
    portal_frame_reattach(link);
    return status;
}

/* with_field(seq, index, value) -> a copy of the struct sequence `seq` (an
 * instance of a type such as sys.flags's, which Python code cannot make) with
 * its field `index` set to `value`: every field copied, those beyond the
 * sequence's visible length included.  boot.py gives the program this copy of
 * sys.flags with python's own safe_path (portal-run starts the interpreter with
 * -P).  Returns a new reference; `seq` and `value` are borrowed. */
static PyObject *toplevel_with_field(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *seq;   /* borrowed */
    Py_ssize_t index;
    PyObject *value; /* borrowed */
    if (!PyArg_ParseTuple(args, "OnO:with_field", &seq, &index, &value)) {
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(seq); /* borrowed */
    PyObject *n_obj = PyObject_GetAttrString((PyObject *)type, "n_fields"); /* new */
    if (n_obj == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(n_obj);
    Py_DECREF(n_obj);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyTuple_Check(seq) || index < 0 || index >= PyTuple_GET_SIZE(seq)) {
        PyErr_SetString(PyExc_ValueError, "with_field: not a struct sequence, or index out of range");
        return NULL;
    }
    PyObject *copy = PyStructSequence_New(type); /* new */
    if (copy == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = i == index ? value : PyStructSequence_GetItem(seq, i); /* borrowed */
        if (item == NULL) {
            item = Py_None; /* an unset hidden field */
        }
        PyStructSequence_SetItem(copy, i, Py_NewRef(item)); /* steals the new reference */
    }
    return copy;
}

static PyMethodDef toplevel_methods[] = {
    {"with_field", toplevel_with_field, METH_VARARGS,
     "with_field(seq, index, value): a copy of a struct sequence with one field replaced."},
    {"run", toplevel_run, METH_VARARGS,
     "run(target, arg, flush_io=False): run the program's top level as python's main does."},
    {"fail", toplevel_fail, METH_VARARGS,
     "fail(exc, flush_io=False): report an exception raised before the program started."},
    {"set_program_recursion_limit", toplevel_set_program_recursion_limit, METH_O,
     "set_program_recursion_limit(n): the recursion limit the next run() gives the program."},
    {"settle", toplevel_settle, METH_NOARGS,
     "settle(): take back the recursion levels lent to the bootstrap after run()."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef toplevel_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_portal._toplevel",
    .m_doc = "Run the program's top level as CPython's main does.",
    .m_size = -1,
    .m_methods = toplevel_methods,
};

PyMODINIT_FUNC PyInit__toplevel(void)
{
    PyObject *module = PyModule_Create(&toplevel_module); /* new */
    if (module != NULL && portal_untraced_add_type(module) < 0) {
        Py_CLEAR(module);
    }
    return module;
}
