"""What the failed iteration changed in objects of the state before the error, named.

The failed iteration runs again from its start after a resume; a store it made
into an object the checkpoint holds (`self.step += 1`, `counts[j] += x`,
`stats["n"] += 1`, `history.append(loss)`) is in the saved object, and the rerun
makes it again: counted twice.  bytecode/stores.py finds such statements on the
path from the body's start to the raising instruction; here each is judged
against the live frame (decide.py runs before anything is freed) and the objects
the checkpoint will hold (decide.py's trial), and named with its file:line:

    will differ: the failed iteration may already have changed 'counts[j]'
    (kmeans.py:31) before the error: it runs again from the changed value

A tensor changed in place (`param.data.add_(-lr * param.grad)`, `p -= lr *
p.grad` in a hand-written SGD step, `ema.mul_(d)`) is named the same way when the
tensor is one of the state's from before the iteration: its root variable was,
or the tensor (a view's, `.data`'s own) is held by the saved state other than
through the variables the iteration rebound (a model's parameter reached by
`for param in model.parameters()`).  A gradient (`p.grad.add_`) is grads.py's.

`oom.exact=true` declines such a point, as for the variables carried.py finds.
What functions called by the failing statement had done before the error stays
the rule of docs/product-page.md (side effects happen twice): callee_note() says
it once, where the error came from inside a function of the program's own.
"""
import ast
import builtins
import gc
import sys
import types

# Imported at the rescue only (decide.py, suspend.py): the bytecode layer is the rescue's cost.
from _portal.bytecode import carried, frame_locals, stores
from _portal.bytecode.carried import _successors
from _portal.bytecode.decode import CODE_UNIT, info as _info
from _portal.fidelity import comprehensions, iteration
from _portal.rescue import tracebacks

_DATALOADER = "torch.utils.data.dataloader"


def _containers():
    kinds = [list, dict, set, bytearray]
    collections = sys.modules.get("collections")
    if collections is not None:
        kinds.append(collections.deque)
    return tuple(kinds)


def will_differ(loop_frame, site, exc, saved):
    """[text] for each store into an object of the saved state that the failed
    iteration may have made before the error (see the module's docstring)."""
    tb = tracebacks.loop_entry(exc, loop_frame)
    if tb is None:
        return []
    code = loop_frame.f_code
    try:
        found = stores.stored_before(code, site, tb.tb_lasti)
    except Exception:   # code the bytecode layer cannot read: nothing found, as before
        return []
    if not found:
        return []
    fast = frame_locals.has_fast_locals(loop_frame)
    names = frame_locals.snapshot(loop_frame) if fast else dict(loop_frame.f_locals)
    globals_, builtins_ = loop_frame.f_globals, vars(builtins)

    def scope(name):
        for space in (names, globals_, builtins_):
            if name in space:
                return space[name]
        return stores.UNKNOWN

    path = carried.path_before(code, site, tb.tb_lasti)
    info = path[0]
    effects = carried._name_effects(info, code)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    start, handler = info.idx(site.body_start), info.idx(site.handler)
    live = {}

    def from_before(root):
        """Is the root variable's value one from before the iteration?"""
        if root not in live:
            live[root] = root in cells or carried._read_before_store(info, effects, start, handler, root)
        return live[root]

    containers = _containers()
    out, said = [], set()
    for store in found:
        if store.verb == "in place":
            if _tensor_changed(store, scope, from_before, loop_frame, fast, saved, names):
                _say(out, said, _text(store, code.co_filename))
            continue
        receiver = stores.read(store.receiver, scope)
        held = store.root is not None and from_before(store.root)
        if not held and fast and saved is not None and receiver is not stores.UNKNOWN:
            held = id(receiver) in saved        # reached from the state some other way
        if store.root is None:
            held = saved is None or (receiver is not stores.UNKNOWN and id(receiver) in saved)
        if not held:
            continue
        if store.method is not None:
            if receiver is stores.UNKNOWN:
                if store.method not in stores.CONTAINER_ONLY:
                    continue
            elif not isinstance(receiver, containers):
                continue      # an object of its own: what its method did is the callee's
        _say(out, said, _text(store, code.co_filename))
    return out


def _say(out, said, text):
    if text not in said:
        said.add(text)
        out.append(text)


def _tensor_of(node, scope, tensor):
    """The tensor whose values a change through the expression `node` changes
    (`param.data`, `w[0]`, `w.data[:, 1]`: `param`, `w`), or None."""
    if isinstance(node, ast.Subscript) or (isinstance(node, ast.Attribute) and node.attr == "data"):
        base = _tensor_of(node.value, scope, tensor)
        if base is not None:
            return base
    value = stores.read(node, scope)
    return value if issubclass(type(value), tensor) else None


def _tensor_changed(store, scope, from_before, loop_frame, fast, saved, names):
    """Is the tensor an in-place store changed one the rerun sees changed?"""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    value = _tensor_of(store.receiver, scope, torch.Tensor)
    if value is None:
        return False
    if store.method is None:   # `p -= x`: a variable from before is carried.py's (irreversible.py names it)
        return not from_before(store.root) and _held(value, loop_frame, fast, saved, names)
    return from_before(store.root) or _held(value, loop_frame, fast, saved, names)


def _held(value, loop_frame, fast, saved, names):
    """Does the saved state hold the tensor other than through the frame's own
    variables?  In a function only variables live at the body's start are saved
    (the trial's objects are the state's); at module level every global is, so the
    holder must be another object of the state (a module's parameter dict).  A
    walk of the collector's referrers, for the few tensors found, on the rescue's
    path only.  Never holders: the frame's names and this module's copy of them, a
    frame, and the capture's own records of the globals (which may be alive or
    not, as the collector left them; `saved` holds ids from the trial's pickling,
    so an object made since may have the id of one the trial made and freed)."""
    if saved is None:
        return True
    if id(value) not in saved:
        return False
    if fast:
        return True
    bound = loop_frame.f_globals
    own = {id(bound), id(loop_frame.f_locals), id(names)}   # f_locals: a class body's namespace

    def holder(ref, plain_only=False):
        """A dict of the state (a module's parameter registry, an optimizer's
        param group, an instance's attributes) or an object of another class
        than Portal's own; a list or tuple counts where such a holder, or a
        global of the program, holds it (the capture's own lists and tuples,
        its records of the globals, do not: a frame or another list holds those)."""
        kind = type(ref)
        if id(ref) in own or kind is types.FrameType or kind.__module__.startswith("_portal"):
            return False
        if kind in (list, tuple):
            return not plain_only and any(r is bound or holder(r, plain_only=True)
                                          for r in gc.get_referrers(ref) if id(r) != id(names))
        if isinstance(ref, dict):    # not a copy of the globals' bindings (the capture's)
            return not any(v is value and bound.get(k, bound) is value for k, v in list(ref.items())
                           if isinstance(k, str))
        return kind.__module__ != "builtins"
    return any(id(ref) in saved and holder(ref) for ref in gc.get_referrers(value))


def _text(store, filename):
    at = f"({filename}:{store.line})"
    if store.verb == "in place":
        what = f"'{store.text}()'" if store.method is not None else f"'{store.text}'"
        return (f"the failed iteration may already have changed a tensor of the state in place with {what} "
                f"{at} before the error: it runs again from the changed values")
    if store.verb == "called":
        return (f"the failed iteration may already have called '{store.text}' {at} before the error: "
                f"the rerun calls it again on what the first call left")
    if store.verb == "deleted":
        return (f"the failed iteration may already have deleted '{store.text}' {at} before the error: "
                f"it runs again without it")
    return (f"the failed iteration may already have changed '{store.text}' {at} before the error: "
            f"it runs again from the changed value")


def rolled_back(loop_frame, name, marks):
    """Does the resume undo the rebinding of the variable `name` by the failed
    iteration?  In a marked loop, a DataLoader iterator it holds is either the one
    of the iteration's start, wound back to its count there, or, over a map-style
    dataset, one the iteration made (`except StopIteration: it = iter(loader)`),
    saved run out (dataloader.py): the rerun's next() ends it again and the
    iteration takes the same path, making a new one as it did."""
    if not marks:
        return False
    try:
        return _rolled_back(loop_frame, name, marks)
    except Exception:  # noqa: BLE001 - not known: named, as before
        return False


def _rolled_back(loop_frame, name, marks):
    module = sys.modules.get(_DATALOADER)
    base = getattr(module, "_BaseDataLoaderIter", None)
    if base is None:
        return False
    if frame_locals.has_fast_locals(loop_frame):
        value = frame_locals.value(loop_frame, name)
    else:
        value = loop_frame.f_locals.get(name)
    if not isinstance(value, base):
        return False
    if any(ref() is value for ref, _ in marks.get("loaders", ())):
        return True       # the iterator of the iteration's start (only a path the error may not
        #                   have taken rebinds it), wound back to its count there
    try:
        return value._dataset_kind == module._DatasetKind.Map and len(value._index_sampler) >= 0
    except Exception:   # a sampler without a length (or one that fails): not saved run out
        return False


# Names of calls that write somewhere else than a local: files, loggers, checkpoints.
_WRITES = frozenset({"write", "writerow", "writerows", "writelines", "save", "add_scalar", "log",
                     "log_metrics", "dump", "send"})


def _changed_before(code, lasti):
    """Can the frame of `code` have changed something outside its own variables
    before its instruction at `lasti`: an attribute or item store, a global, a
    container's mutating call or a write (by its name), on a path from the code's
    start to that instruction?"""
    info = _info(code)
    error_k = info.owner(lasti - lasti % CODE_UNIT)
    preds = {}
    for k in range(len(info.instrs)):
        for j in _successors(info, k):
            preds.setdefault(j, []).append(k)
    before, todo = set(), list(preds.get(error_k, ()))
    while todo:
        k = todo.pop()
        if k not in before:
            before.add(k)
            todo.extend(preds.get(k, ()))
    names = stores.MUTATORS | _WRITES
    shifted = sys.version_info >= (3, 12)      # LOAD_ATTR's argument: the name's index << 1
    for k in before:
        ins = info.instrs[k]
        if ins.opcode in stores.STORE_OPS:
            return True
        if ins.opcode in stores.LOAD_METHODS and ins.arg is not None:
            index = ins.arg >> 1 if shifted and ins.opcode == stores.LOAD_ATTR else ins.arg
            if index < len(code.co_names) and (code.co_names[index] in names
                                               or stores.inplace_method(code.co_names[index])):
                return True
    return False


def callee_note(exc, loop_frame, is_user_file):
    """The report's line where the error came from inside a function of the
    program's own code that the failed iteration called, one of whose frames (it,
    or what it called of the program's own) may have changed something before the
    error (_changed_before): what that call had already done stays done
    (docs/product-page.md, 4), or None."""
    try:
        return _callee_note(exc, loop_frame, is_user_file)
    except Exception:  # noqa: BLE001 - a line of the report, never a reason to fail the suspension
        return None


def _callee_note(exc, loop_frame, is_user_file):
    tb = tracebacks.loop_entry(exc, loop_frame)
    if tb is None:
        return None
    tb, callee, changed = tb.tb_next, None, False
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            if callee is None and code.co_name not in comprehensions.KINDS and not code.co_name.startswith("<"):
                callee = (code, tb.tb_lineno)
            changed = changed or _changed_before(code, tb.tb_lasti)
        tb = tb.tb_next
    if callee is None or not changed:
        return None
    code, line = callee
    return (f"the error came from inside {code.co_name}() ({code.co_filename}:{line}), "
            f"called by the failed iteration: what that call had already changed before the error "
            f"(objects of the program, files) is not rolled back, and is changed again when the "
            f"iteration runs again")


def unmarked_loaders(runtime, loop_frame, loop_line, exc, saved):
    """[text] where the error came from inside a comprehension or generator
    expression of a loop whose iterations are not marked (instrument.py marks one
    whose comprehension iterates a loader by its name, or calls next()/iter():
    comprehensions.iterates_loader): the DataLoader iterators it may have made
    (each drew the loader's seed, and a shuffled sampler its order, from torch's
    default generator, which the rerun draws from again) or advanced (batches the
    rerun does not get again).  Nothing where the loop is marked: the generators
    and the loaders' counts are rolled back to the iteration's start."""
    if iteration.marks_of(loop_frame.f_code, loop_line) is not None:
        return []
    user = runtime.is_program_file
    if comprehensions.passed_over(exc, loop_frame, user) is None:
        return []
    module = sys.modules.get(_DATALOADER)
    live = getattr(getattr(module, "_BaseDataLoaderIter", None), "_portal_live", None)
    if not live:
        return []
    where = f"the comprehension at {loop_frame.f_code.co_filename}:{_comprehension_line(exc, loop_frame)}"
    out = []
    for ref in list(live.data):
        it = ref()
        if it is None:
            continue
        if saved is not None and id(it) not in saved:
            out.append(f"{where} made a DataLoader iterator in the failed iteration, which drew its seed "
                       f"(and a shuffled order) from torch's default generator: this loop's iterations "
                       f"are not marked, so the rerun draws again and its batches and later random "
                       f"numbers differ (a loader whose name says so, `val_loader`, marks them)")
        else:
            out.append(f"{where} may have taken batches from a DataLoader iterator of the state "
                       f"({it._num_yielded} given so far): this loop's iterations are not marked, so "
                       f"the rerun does not get them again")
    return out


def _comprehension_line(exc, loop_frame):
    tb = tracebacks.loop_entry(exc, loop_frame)
    return tb.tb_lineno if tb is not None else "?"
