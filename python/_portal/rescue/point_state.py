"""The program's state at the point a rescue saves (decide.py builds it once, for
its trial pickling and the checkpoint alike): the frames the capture took, the
globals of __main__, the process (argv, cwd, environment, sys.path, random
states, the plug-ins'), the loop and the iteration as the program counts it, and
the states rolled back to the failed iteration's start (fidelity/iteration.py).
"""
import os
import random
import sys

# Imported by a rescue only (decide.py): its imports at the top cost the
# program's start-up nothing.
from _portal.bytecode import codemap
from _portal.bytecode.range_loops import RANGE, enclosing_for_iter, range_start
from _portal.checkpoint.program import LoopInfo, ProcessState, ProgramState
from _portal.fidelity import iteration, iteration_count
from _portal.state import plugins

def _process_state(runtime):
    numpy_state = None
    np = sys.modules.get("numpy")
    if np is not None:
        numpy_state = np.random.get_state()
    return ProcessState(argv=list(sys.argv), orig_argv=list(sys.orig_argv), cwd=os.getcwd(),
                        environ=dict(os.environ),
                        path=list(runtime.program_path if runtime.program_path is not None
                                  else sys.path),
                        random_state=random.getstate(), numpy_state=numpy_state,
                        plugins=plugins.capture_process(),
                        recursion_limit=sys.getrecursionlimit())


# Iterators whose __reduce__ gives (iter, (sequence,), items taken so far).
_INDEXED_ITERATORS = frozenset({
    "list_iterator", "tuple_iterator", "range_iterator", "longrange_iterator",
    "str_ascii_iterator", "str_iterator", "bytes_iterator", "bytearray_iterator"})
_RANGE_ITERATORS = frozenset({"range_iterator", "longrange_iterator"})


def _index(it):
    """The 0-based index of the item `it` gave last, as the program counts it: a
    list, tuple, range, str ... iterator, enumerate over one, or a DataLoader's
    iterator (batch); None when its state is not a count of the items it gave
    (islice, zip, reversed, a dict's ...).  (kind, index) with kind 'iteration'
    or 'batch'."""
    try:
        for _ in range(8):  # enumerate(enumerate(...)) ...
            name = type(it).__name__
            if name == "enumerate":
                it = it.__reduce__()[1][0]
                continue
            if name == "generator":   # tqdm(iterable): the iterable's iterator (iteration_count.py)
                it = iteration_count.wrapped_iterator(it)
                continue
            if name in _INDEXED_ITERATORS:
                reduced = it.__reduce__()
                if len(reduced) >= 3 and isinstance(reduced[2], int) and reduced[2] > 0:
                    return "iteration", reduced[2] - 1
            elif isinstance(getattr(it, "_num_yielded", None), int) and it._num_yielded > 0 \
                    and hasattr(it, "_index_sampler"):
                return "batch", it._num_yielded - 1
            return None
    except Exception:
        return None
    return None


def _range_index(it, frame, for_iter):
    """The 0-based index of the item a range iterator gave last, where it keeps
    only what is left (CPython 3.12+: `range(next, stop, step)`) and the code of
    the loop whose FOR_ITER is at `for_iter` in `frame` (a live frame) says where
    the range began (bytecode/range_loops.py), the name `range` being the builtin
    there; None otherwise."""
    if type(it).__name__ not in _RANGE_ITERATORS or for_iter is None:
        return None
    found = range_start(frame.f_code, for_iter)
    if found is None:
        return None
    scope, start = found
    bound = frame.f_globals.get(RANGE, frame.f_builtins.get(RANGE))   # LOAD_GLOBAL's lookup
    if scope == "name":                 # LOAD_NAME: a class body's namespace first
        bound = frame.f_locals.get(RANGE, bound)
    if bound is not range:
        return None
    try:
        left = it.__reduce__()[1][0]
    except Exception:
        return None
    if not isinstance(left, range) or left.step == 0:
        return None
    given, rest = divmod(left.start - start, left.step)
    return given - 1 if rest == 0 and given > 0 else None


def _counted(it, frame, for_iter):
    """_index(it), or for a range iterator that does not tell, _range_index."""
    found = _index(it)
    if found is None and frame is not None:
        try:
            index = _range_index(it, frame, for_iter)
            if index is None:   # enumerate(generator): the enumerate's own count
                index = iteration_count.enumerate_index(it, frame, for_iter)
        except Exception:   # code the bytecode layer cannot read: no count, never a wrong one
            index = None
        found = None if index is None else ("iteration", index)
    return found


def _outer_iterators(frames, site, loop_frame):
    """(iterator, live frame, FOR_ITER offset or None) for each stack item of the
    loops around the loop's, innermost first: the loop frame's slots below its
    iterator, then each caller's."""
    live = []                           # the live frame of each caller, where found
    f = loop_frame.f_back
    main = sys.modules["__main__"].__dict__
    for fs in frames[-2::-1]:
        code = fs.function.__code__ if fs.function is not None else None
        while f is not None and not (f.f_code is code if code is not None else
                                     (f.f_globals is main and f.f_code.co_name == "<module>")):
            f = f.f_back
        live.append(f)
        if f is not None:
            f = f.f_back
    chain = [(frames[-1].stack[:site.iter_slot], loop_frame, site.for_iter)]
    chain += [(fs.stack, frame, fs.offset) for fs, frame in zip(frames[-2::-1], live)]
    for items, frame, offset in chain:
        for slot in range(len(items) - 1, -1, -1):
            for_iter = None
            if frame is not None and offset is not None:
                try:
                    for_iter = enclosing_for_iter(frame.f_code, offset, slot)
                except Exception:   # as in _counted: no count
                    for_iter = None
            yield items[slot], frame, for_iter


def _iteration(frames, site, loop_frame):
    """(index, text) of the iteration that runs again: `iteration 13 (0-based)`,
    `batch 4 (0-based) of epoch 2 (0-based)` for a DataLoader loop inside an
    indexed one; (None, None) when the loop's iterator does not tell (a while
    loop, whose stack holds only what outer loops iterate)."""
    stack = frames[-1].stack
    if not site.is_for or site.iter_slot is None or site.iter_slot >= len(stack):
        return None, None
    found = _counted(stack[site.iter_slot], loop_frame, site.for_iter)
    if found is None:
        return None, None
    kind, index = found
    text = f"{kind} {index} (0-based)"
    if kind == "batch":   # the epoch: the nearest enclosing loop that counts
        for item, frame, for_iter in _outer_iterators(frames, site, loop_frame):
            got = _counted(item, frame, for_iter)
            if got is not None and got[0] == "iteration":
                text += f" of epoch {got[1]} (0-based)"
                break
    return index, text


def roots_of(state):
    """{description: object} of every root of the state, for the messages that
    name where an object is (``global 'x'``, ``local 'y' of f() at FILE:LINE``)."""
    roots = {}
    for name, value in state.main.items():
        roots[f"global {name!r}"] = value
    for fs in state.frames:
        names = codemap.slot_names(fs.function.__code__) if fs.function is not None else []
        for i, value in enumerate(fs.locals):
            name = repr(names[i]) if i < len(names) else str(i)
            roots[f"local {name} of {fs.name}() at {fs.filename}:{fs.line}"] = value
        for i, value in enumerate(fs.stack):
            # a for loop's iterator, a with statement's __exit__, an operand ...
            roots[f"stack item {i} of {fs.name}() at {fs.filename}:{fs.line}"] = value
    return roots


def make(runtime, loop_frame, loop_line, frames, site, roll_back=True):
    """(ProgramState to save at this loop, the names of its roots, the marks of the
    iteration's start it is rolled back to or None).  roll_back=False: the point is
    the start of an iteration that has not run yet (a preemption's safe point): the
    states are saved as they are."""
    index, text = _iteration(frames, site, loop_frame)
    loop = LoopInfo(filename=loop_frame.f_code.co_filename, line=loop_line,
                    iteration=index, function=loop_frame.f_code.co_name, iteration_text=text)
    process = _process_state(runtime)
    marks = iteration.at_start(loop_frame.f_code, loop_line)
    if not roll_back:
        marks = None
    if marks is not None:   # the iteration runs again: with the random numbers it drew
        iteration.roll_back(process, marks)
    state = ProgramState(frames=frames, main=sys.modules["__main__"].__dict__,
                         process=process, loop=loop,
                         fake_oom=runtime.fake_oom.counts if runtime.fake_oom else None)
    return state, roots_of(state), marks
