"""Stores into objects that the failed iteration made before the error.

carried.py finds the variables the failed iteration rebound; this module finds,
on the same path (carried.path_before: the instructions from the body's start to
the one that raised, within the iteration, through the handlers of the body's own
`try` statements), the statements that changed an object in place:

* an attribute or item stored or deleted: `self.step += 1`, `counts[j] += x`,
  `stats["n"] = 1`, `del cache[k]`, `buf[1:3] = ...` (STORE_ATTR, STORE_SUBSCR,
  STORE_SLICE, DELETE_ATTR, DELETE_SUBSCR);
* a call of a container's mutating method that returned: `history.append(loss)`,
  `seen.update(batch_ids)`, `self.log["loss"].extend(...)`;
* a tensor changed in place (verb "in place"): a call of an in-place method
  (torch's trailing underscore: `param.data.add_(...)`, `buf.mul_(m)`; not those
  whose result does not depend on what the tensor held, `zero_()`, `normal_()` ...)
  and an augmented assignment to a variable (`p -= lr * p.grad`: a tensor's
  `__isub__` changes it in place; the variable is the one carried.py sees rebound).

Each is found by the instruction's source position (co_positions), which is that
of its target (`counts[j]`) or of its call (`history.append(loss)`), in the file's
syntax tree: the text named is the program's own.  A store instruction's
position is exact; a call is taken when the method was loaded (LOAD_ATTR,
LOAD_METHOD at the `history.append` span) on the path and the first call at the
call's span after it was too (not the call that raised).

Whose object: only one the rerun sees changed.  The receiver's root variable
(`self` of `self.log["loss"]`) must be live at the body's start (its value comes
from before the iteration: carried's read-before-store), or, in a function, hold
now an object the checkpoint holds (decide.py's trial): `row = self.rows[-1];
row["n"] += 1`.  An object the iteration made itself (`d = {}; d["k"] = 1`) is
made again.  A method call counts only on a builtin container (list, dict, set,
deque, bytearray and their subclasses), found by reading the receiver without
running the program's code (instance dictionaries, nn.Module's registries);
where it cannot be read, only the container-only names (append, extend, insert,
appendleft, extendleft, setdefault) count: `meter.update(loss)` of a class of the
program's own changes its object inside the call (what callees did: suspend.py's
note), and `bar.update()` of a tqdm bar is rolled back (tqdm_state.py).
"""
from __future__ import annotations

import ast
import linecache
import types
from typing import Dict, List, Optional, Tuple

from _portal.bytecode.decode import CODE_UNIT
from _portal.bytecode.model import LoopSite
from _portal.bytecode.tables import T

_OP = T.OPMAP
_STORES = {_OP[n]: verb for n, verb in (("STORE_ATTR", "changed"), ("STORE_SUBSCR", "changed"),
                                        ("STORE_SLICE", "changed"), ("DELETE_ATTR", "deleted"),
                                        ("DELETE_SUBSCR", "deleted")) if n in _OP}
# Every store into an object, and into a global (stores_changed.callee_note).
STORE_OPS = frozenset(_STORES) | frozenset(_OP[n] for n in ("STORE_GLOBAL", "DELETE_GLOBAL") if n in _OP)
_LOAD_METHODS = frozenset(_OP[n] for n in ("LOAD_METHOD", "LOAD_ATTR") if n in _OP)
LOAD_METHODS, LOAD_ATTR = _LOAD_METHODS, _OP["LOAD_ATTR"]
_CALLS = frozenset(_OP[n] for n in ("CALL", "CALL_KW", "CALL_FUNCTION_EX") if n in _OP)

# Methods that change a builtin container in place.
MUTATORS = frozenset({"append", "extend", "insert", "update", "add", "setdefault", "pop", "popitem",
                      "remove", "discard", "clear", "appendleft", "extendleft", "popleft",
                      "sort", "reverse", "difference_update", "intersection_update",
                      "symmetric_difference_update", "__setitem__", "__delitem__"})
# Those no other kind of object is likely to have: counted where the receiver cannot be read.
CONTAINER_ONLY = frozenset({"append", "extend", "insert", "appendleft", "extendleft", "setdefault"})
# Trailing-underscore methods of torch.Tensor whose effect does not depend on what the
# tensor held (the rerun makes it again alike), or that change no values.
_NOT_INPLACE_DATA = frozenset({"zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                               "geometric_", "cauchy_", "log_normal_", "requires_grad_", "share_memory_",
                               "detach_", "rename_", "retain_grad_"})
# Stores of a plain variable: the target of an augmented assignment.
_NAME_STORE_OPS = frozenset(_OP[n] for n in ("STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF")
                            if n in _OP)


def inplace_method(name: str, call=None) -> bool:
    """Is `name` (the method of `call`, an ast.Call) a tensor's in-place change
    whose result depends on what the tensor held?  `fill_` with a constant does not."""
    if not name.endswith("_") or name.startswith("_") or name in _NOT_INPLACE_DATA:
        return False
    if name == "fill_" and call is not None and all(isinstance(a, ast.Constant) for a in call.args):
        return False
    return True

UNKNOWN = object()


def _span(node) -> Tuple[int, int, int, int]:
    return (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)


_TREES: Dict[str, Tuple[dict, dict, str]] = {}


def _nodes(filename: str):
    """({span: Attribute/Subscript stored or deleted}, {span of a method's
    Attribute: the Call}, {span of an augmented assignment's Name target: the
    statement}, source) of the file, or None when it cannot be parsed."""
    if filename not in _TREES:
        source = "".join(linecache.getlines(filename))
        try:
            tree = ast.parse(source, filename)
        except (SyntaxError, ValueError):
            _TREES[filename] = None
            return None
        targets, calls, augmented = {}, {}, {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
                targets[_span(node)] = node
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and (node.func.attr in MUTATORS or inplace_method(node.func.attr, node)):
                calls[_span(node.func)] = node
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                augmented[_span(node.target)] = node
        _TREES[filename] = (targets, calls, augmented, source)
    return _TREES[filename]


def _root(node) -> Optional[str]:
    """The variable an expression's object is reached from (`self` of
    `self.log["loss"]`, `log` of `log.setdefault("k", [])`), or None (a literal)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


class Found:
    """One store of the failed iteration into an object."""

    def __init__(self, verb, text, line, receiver, root, method=None):
        self.verb, self.text, self.line = verb, text, line
        self.receiver, self.root, self.method = receiver, root, method


def stored_before(code: types.CodeType, site: LoopSite, error_offset: int) -> List[Found]:
    """The stores into objects (and the mutating calls) the failed iteration may
    have made before the instruction at `error_offset` raised, in code order;
    whose object they changed is judged by the caller (decide.py: it has the
    frame and the checkpoint's objects)."""
    from _portal.bytecode import carried
    path = carried.path_before(code, site, error_offset)
    if path is None:
        return []
    info, before = path
    parsed = _nodes(code.co_filename)
    if parsed is None:
        return []
    targets, calls, augmented, source = parsed
    positions = info.positions()
    instrs = info.instrs
    out = []
    for k in sorted(before):
        ins = instrs[k]
        pos = positions[ins.offset // CODE_UNIT]
        if None in pos:
            continue
        if ins.opcode in _STORES and pos in targets:
            node = targets[pos]
            out.append(Found(_STORES[ins.opcode], ast.get_source_segment(source, node) or "?",
                             pos[0], node.value, _root(node.value)))
        elif ins.opcode in _NAME_STORE_OPS and pos in augmented:
            node = augmented[pos]
            out.append(Found("in place", ast.get_source_segment(source, node) or node.target.id,
                             pos[0], node.target, node.target.id))
        elif ins.opcode in _LOAD_METHODS and pos in calls:
            call = calls[pos]
            want = _span(call)
            # the first call at the call's span after the method was loaded: its own
            for j in range(k + 1, len(instrs)):
                if instrs[j].opcode in _CALLS and positions[instrs[j].offset // CODE_UNIT] == want:
                    if j in before:
                        func = call.func
                        verb = "called" if func.attr in MUTATORS else "in place"
                        out.append(Found(verb, ast.get_source_segment(source, func) or func.attr,
                                         pos[0], func.value, _root(func.value), func.attr))
                    break
    return out


# --- reading a receiver without running the program's code --------------------------------

def _attr(obj, name):
    attrs = getattr(obj, "__dict__", None) if not isinstance(obj, type) else None
    if isinstance(attrs, dict):
        if name in attrs:
            return attrs[name]
        for registry in ("_parameters", "_buffers", "_modules"):   # torch.nn.Module's
            held = attrs.get(registry)
            if isinstance(held, dict) and name in held:
                return held[name]
    return UNKNOWN


def read(node, scope) -> object:
    """The value of a Name / Attribute / Subscript expression, read from `scope`
    (name -> value, UNKNOWN when not there) through instance dictionaries and the
    items of builtin dicts, lists and tuples only; UNKNOWN otherwise."""
    if isinstance(node, ast.Name):
        return scope(node.id)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute):
        obj = read(node.value, scope)
        return UNKNOWN if obj is UNKNOWN else _attr(obj, node.attr)
    if isinstance(node, ast.Subscript):
        obj = read(node.value, scope)
        if type(obj) not in (dict, list, tuple):
            return UNKNOWN
        key = read(node.slice, scope)
        if key is UNKNOWN or not isinstance(key, (int, str, bytes, float, type(None))):
            return UNKNOWN
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            return UNKNOWN
    return UNKNOWN
