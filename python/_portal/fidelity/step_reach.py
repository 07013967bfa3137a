"""Could the failed iteration of a loop without marks have stepped this object?

A loop whose iterations are not marked (iteration.py: its body reaches no
`.backward()`) cannot say when its failed iteration started, so an optimizer or
LR scheduler of the state that has stepped at all may have stepped in it
(irreversible.py says "it may step again").  A validation loop never steps one:
it cannot, when nothing its body loads leads to the object.  This looks at what
the body loads (its variables, the globals and builtins it names, the functions
it defines), and from there at what can lead to a call of the object's step():

- a function of the program's own code: the globals its code names, however
  deep its nested functions, its closure's cells and its defaults;
- a bound method: its function and its object; a functools.partial: its
  function and arguments;
- an object: its attributes, and the methods of its class when the class is the
  program's own; a list, tuple, set or dict: its items; a module of the
  program's own: its globals.

Functions, classes and modules of libraries are not looked into (as the marks
do not look for `.backward()` there): a library that steps the program's
optimizer on its own, from an object the body never names, is not seen.
Tensors and arrays lead nowhere.  Anything that cannot be read, or more than
the budget of objects, counts as leading to it: the line is then said, as
before.
"""
import dis
import functools
import types

BUDGET = 20000          # objects looked at, at most
ITEMS = 2000            # items of one container, at most


def could_step(frame, loop_line, target, is_user_file):
    """False only when nothing the body of the loop at `loop_line` of `frame`
    loads leads to `target` (see the module's docstring)."""
    try:
        return _Search(target, is_user_file).run(_loaded(frame, loop_line))
    except Exception:  # noqa: BLE001 - cannot tell: the line is said
        return True


class _Exhausted(Exception):
    pass


def _body_instructions(code, loop_line, lasti):
    from _portal.bytecode import codemap
    site = codemap.find_loop(code, loop_line, lasti=lasti)
    instructions = list(dis.get_instructions(code))
    if not site.is_for:
        return instructions        # a while statement, wrapped whole: all of it
    return [i for i in instructions if site.body_start <= i.offset < site.handler]


def _loaded(frame, loop_line):
    """The objects the loop's body loads."""
    from _portal.bytecode import frame_locals
    from _portal.bytecode.tables import T
    code = frame.f_code
    variables = frame_locals.snapshot(frame)
    builtins = frame.f_builtins
    out = []
    for ins in _body_instructions(code, loop_line, frame.f_lasti):
        op = ins.opname
        if op in ("LOAD_GLOBAL", "LOAD_NAME") or op in T.VARIABLE_LOADS or op == "LOAD_CLOSURE":
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            for name in names:
                if not isinstance(name, str):
                    continue
                for space in (variables, frame.f_globals, builtins):
                    if name in space:
                        out.append(space[name])
                        break
        elif op == "LOAD_CONST" and isinstance(ins.argval, types.CodeType):
            out.append(_CodeOf(ins.argval, frame.f_globals))
    return out


class _CodeOf:
    """A function the body defines (its code constant), seen with its globals."""

    def __init__(self, code, globals_):
        self.code, self.globals = code, globals_


_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), range, slice)


class _Search:
    def __init__(self, target, is_user_file):
        self.target = target
        self.is_user_file = is_user_file
        self.seen = set()
        self.todo = []

    def run(self, roots):
        self.todo = list(roots)
        try:
            while self.todo:
                obj = self.todo.pop()
                if obj is self.target:
                    return True
                if id(obj) in self.seen:
                    continue
                self.seen.add(id(obj))
                if len(self.seen) > BUDGET:
                    raise _Exhausted
                self._follow(obj)
        except _Exhausted:
            return True
        return False

    def _user(self, filename):
        return filename is _MAIN or isinstance(filename, str) and self.is_user_file(filename)

    def _code(self, code, globals_):
        for name in _global_names(code):
            if name in globals_:
                self.todo.append(globals_[name])

    def _follow(self, obj):
        if isinstance(obj, _LEAVES):
            return
        kind = type(obj)
        if kind is _CodeOf:
            self._code(obj.code, obj.globals)
            return
        if kind is types.FunctionType:
            if self._user(obj.__code__.co_filename):
                self._code(obj.__code__, obj.__globals__)
                for cell in obj.__closure__ or ():
                    try:
                        self.todo.append(cell.cell_contents)
                    except ValueError:
                        pass
                self.todo.extend(obj.__defaults__ or ())
                self.todo.extend((obj.__kwdefaults__ or {}).values())
            return
        if kind is types.MethodType:
            self.todo += [obj.__func__, obj.__self__]
            return
        if isinstance(obj, functools.partial):
            self.todo += [obj.func, *obj.args, *obj.keywords.values()]
            return
        if kind is types.ModuleType:
            if self._user(getattr(obj, "__file__", None)):
                self._items(list(vars(obj).values()))
            return
        if isinstance(obj, type):
            if self._user(_class_file(obj)):
                self._items(list(vars(obj).values()))
            return
        if kind in (list, tuple, set, frozenset):
            self._items(obj)
            return
        if kind is dict:
            self._items(list(obj.values()))
            return
        module = getattr(kind, "__module__", "") or ""
        if module.startswith("torch") and kind.__name__ in ("Tensor", "Parameter") or \
                module.startswith("numpy") and kind.__name__ == "ndarray":
            return
        if isinstance(obj, (dict, list, tuple)):   # subclasses: their items too
            self._items(list(obj.values()) if isinstance(obj, dict) else obj)
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            self._items(list(attrs.values()))
        for cls in kind.__mro__:
            slots = vars(cls).get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                try:
                    self.todo.append(object.__getattribute__(obj, slot))
                except Exception:  # noqa: BLE001 - unset, or not a plain slot
                    pass
        if self._user(_class_file(kind)):
            self.todo.append(kind)

    def _items(self, items):
        count = 0
        for item in items:
            count += 1
            if count > ITEMS:
                raise _Exhausted
            self.todo.append(item)


_MAIN = object()   # the __main__ module's classes: the program's own (a -c program has no __file__)


def _class_file(cls):
    import sys
    name = getattr(cls, "__module__", None) or ""
    if name == "__main__":
        return _MAIN
    return getattr(sys.modules.get(name), "__file__", None)


def _global_names(code):
    names = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
            names.append(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _global_names(const)
    return names
