/* itertools_state.c: the `_portal._itertools` extension module, the door to the
 * private state of itertools objects (count, islice, chain, cycle, product).
 *
 * CPython 3.14 removed their __reduce__/__setstate__ (pickling of itertools
 * objects, deprecated in 3.12), so a loop over `cycle(loader)` could no longer be
 * saved.  Portal reads and writes the objects' fields itself there; the layouts are
 * those of CPython's Modules/itertoolsmodule.c (in no header), one file per
 * version, picked here.  Up to 3.13 the types' own __reduce__ is used
 * (itertools_state.py) and this module offers no type: it is built for every
 * interpreter only so that one module name serves them all.
 *
 * Interface (every version): SUPPORTED, a tuple of the names of the types whose
 * layout was checked at import (tp_basicsize equal to the struct's size); state(obj) ->
 * tuple and fill_*(obj, ...) (see the version's file).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PORTAL_ITERTOOLS_DISPATCH 1
#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION >= 11 && PY_MINOR_VERSION <= 13
#include "itertools_state_own_reduce.c"
#elif PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 14
#include "itertools_state_314.c"
#else
#error "portal: the itertools layouts of this CPython version have not been checked (checked: 3.14; 3.11-3.13 use the types' own __reduce__); see itertools_state.c"
#endif
