"""Where an object that cannot be saved is: the pickler's error path walks the
caller's named roots breadth first, the way the pickler descends, to the
shallowest object that does not reduce (``find``), e.g. ``global 'state'['conn']
(socket.socket): cannot pickle 'socket' object``."""
import collections
import copyreg
import pickle
import types

from _portal.checkpoint.rebuild import _rb_cell, _rb_class, _rb_function, _rb_method, _set_global
from _portal.checkpoint.refusals import Refuse, Unsaveable, type_name

FunctionType = types.FunctionType
PickleBuffer = pickle.PickleBuffer


def find(pickler, roots, exc=None):
    """The shallowest object under ``roots`` that does not reduce under
    ``pickler``, as an ``Unsaveable``; ``exc``: what the pickler raised."""
    if isinstance(exc, RecursionError):
        return Unsaveable("<state>", "RecursionError",
                          "the object graph is nested too deeply to save")
    found = _Walker(pickler).run(roots)
    if found is not None:
        return found
    return Unsaveable(next(iter(roots), "<state>"), type(exc).__name__ if exc else "?",
                      str(exc) if exc else "cannot be saved")


_ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None), bytearray,
                    type(Ellipsis), type(NotImplemented), PickleBuffer})


class _Walker:
    """Breadth-first search for an object that does not reduce."""

    LIMIT = 5_000_000

    def __init__(self, pickler):
        self.p = pickler
        self.nodes = []       # (parent index, label, object)
        self.seen = set()

    def run(self, roots):
        queue = collections.deque()
        for name, obj in roots.items():
            self._add(queue, obj, -1, str(name))
        while queue:
            if len(self.nodes) > self.LIMIT:
                return None
            index = queue.popleft()
            obj = self.nodes[index][2]
            try:
                children = self._children(obj)
            except _Culprit as c:
                return Unsaveable(self._path(index), type_name(obj), c.reason)
            for label, child in children:
                self._add(queue, child, index, label)
        return None

    def _add(self, queue, obj, parent, label):
        if type(obj) in _ATOMS or id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        self.nodes.append((parent, label, obj))
        queue.append(len(self.nodes) - 1)

    def _path(self, index):
        parts = []
        while index >= 0:
            parent, label, _ = self.nodes[index]
            parts.append(label)
            index = parent
        return "".join(reversed(parts))

    def _children(self, obj):
        t = type(obj)
        if t is dict:
            out = []
            for k, v in obj.items():
                out.append((f"[{k!r}]", v))
                out.append((f".<key {k!r}>", k))
            return out
        if t is list or t is tuple:
            return [(f"[{i}]", v) for i, v in enumerate(obj)]
        if t is set or t is frozenset:
            return [(".<item>", v) for v in obj]
        p = self.p
        try:
            r = p.reducer_override(obj)
            if r is NotImplemented:
                if isinstance(obj, type) or t in (FunctionType, types.BuiltinFunctionType):
                    if isinstance(obj, (type, FunctionType)) and not p.resolves(obj):
                        raise _Culprit(f"cannot be found by name as "
                                       f"{getattr(obj, '__module__', '?')}."
                                       f"{getattr(obj, '__qualname__', '?')}")
                    return []
                reduce = copyreg.dispatch_table.get(t)
                r = reduce(obj) if reduce is not None else obj.__reduce_ex__(5)
        except _Culprit:
            raise
        except Refuse as e:
            raise _Culprit(str(e)) from None
        except Exception as e:
            raise _Culprit(str(e) or type(e).__name__) from None
        if isinstance(r, str):
            return []
        if not isinstance(r, tuple) or not 2 <= len(r) <= 6:
            raise _Culprit(f"__reduce__ returned {type(r).__name__}, not a tuple")
        func, args = r[0], r[1]
        state = r[2] if len(r) > 2 else None
        listitems = r[3] if len(r) > 3 else None
        dictitems = r[4] if len(r) > 4 else None
        out = []
        if func is _rb_function:
            code, g, _, closure = args
            for name, cell in zip(code.co_freevars, closure or ()):
                out.append((f".<closure {name!r}>", cell))
            out.append((".__globals__", g))
            qualname, defaults, kwdefaults, fdict, annotations, _, _ = state
            out += [(".__defaults__", defaults), (".__kwdefaults__", kwdefaults),
                    (".__dict__", fdict)]
            return out
        if func is _rb_cell:
            return [("", state[0])] if state else []
        if func is _rb_method:
            return [(".__func__", args[0]), (".__self__", args[1])]
        if func is _rb_class:
            out = [(f".{k}", v) for k, v in args[4].items()]
            out += [(f".{k}", v) for k, v in state[0].items()]
            return out + [(".__bases__", args[2])]
        if func is _set_global:
            return [(f"[{args[1]!r}]", args[2])]
        if func in (copyreg.__newobj__, copyreg.__newobj_ex__, copyreg._reconstructor):
            out.append((".__class__", args[0]))
            out += [(f".__reduce__()[1][{i}]", a) for i, a in enumerate(args) if i]
        else:
            out.append((".__reduce__()[0]", func))
            out += [(f".__reduce__()[1][{i}]", a) for i, a in enumerate(args or ())]
        if isinstance(state, dict):
            out += [(f".{k}", v) for k, v in state.items()]
        elif isinstance(state, tuple) and len(state) == 2 and \
                all(s is None or isinstance(s, dict) for s in state):
            for part in state:
                out += [(f".{k}", v) for k, v in (part or {}).items()]
        elif state is not None:
            out.append((".__getstate__()", state))
        if listitems is not None:
            out += [(f"[{i}]", v) for i, v in enumerate(listitems)]
        if dictitems is not None:
            out += [(f"[{k!r}]", v) for k, v in dictitems]
        return out


class _Culprit(Exception):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason

