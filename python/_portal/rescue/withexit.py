"""Which with statements of a frame's code cannot swallow an error.

A with block's handler has a path "`__exit__` returned true: the error is
swallowed, go on after the block".  On that path the code after the block reads
what the block would have written, so a local the block writes in every
iteration (`with torch.autocast(...): loss = ...` then `loss.backward()`) is
still live at the start of the loop body: were the block to fail and its
`__exit__` to swallow the error, the code after it would read the last
iteration's `loss`.  The capture would then save the failed iteration's `loss`,
a tensor whose graph is still live, and decline the loop.

For most managers that path cannot be taken: `torch.autocast`, `torch.no_grad`,
`contextlib.nullcontext`, files, locks.  never_suppressing() names the with
statements of a code object (codemap.with_sites) whose manager is made as
`NAME.ATTR...(ARGS)` (or is `NAME.ATTR...` itself), NAME a global or builtin of
the frame, and whose `__exit__` provably never returns true:

  * a Python function whose every `return` returns the constant None or False,
    or `super().__exit__(...)` of a class whose own `__exit__` is such
    (torch.cuda.amp.autocast); never a generator or coroutine;
  * the `__exit__` of io's files, `threading`'s locks (C code that returns None);
  * torch 2.x's `torch.autocast.__exit__`, whose one other return gives
    torch.export's graph node while a torch function mode is on: proven only when
    none is on at the capture.

The name is looked up at the capture, without running any code of the program
(module and class dicts only; no `__getattr__`, no descriptors); a class must be
made by `type.__call__` with `object.__new__`, so that calling it gives an
instance of it.  What this takes for granted: that the program does not rebind
the name between the failed iteration and the next to a manager that swallows
errors.  Anything else keeps the path (and the local) alive, as before.
"""
import builtins
import sys
import types

from _portal.bytecode import codemap
from _portal.bytecode.tables import T as _BYTECODE

__all__ = ["never_suppressing", "exit_never_suppresses"]

_MAX_SUPER_CHAIN = 8
_MISSING = object()


def never_suppressing(code, globals_, builtins_=None):
    """frozenset of the BEFORE_WITH offsets of `code` whose manager's __exit__
    never returns true (see the module docstring)."""
    try:
        sites = codemap.with_sites(code)
    except (codemap.CodeMapError, codemap.NotResumable, ValueError):
        return frozenset()
    if builtins_ is None:
        builtins_ = builtins.__dict__
    out = []
    for site in sites:
        if site.manager is not None and _manager_never_suppresses(site.manager, globals_, builtins_):
            out.append(site.before_with)
    return frozenset(out)


def _manager_never_suppresses(manager, globals_, builtins_):
    how, _scope, names = manager
    obj = _lookup(names, globals_, builtins_)
    if obj is _MISSING:
        return False
    if how == "value":
        return exit_never_suppresses(type(obj))
    if _is_io_open(obj):
        return True         # open(...): a file of io, whose __exit__ is _IOBase's
    if not issubclass(type(obj), type) or not _plain_construction(obj):
        return False
    return exit_never_suppresses(obj)


def _lookup(names, globals_, builtins_):
    """The object a dotted name denotes, through module and class dicts only."""
    root = names[0]
    if isinstance(globals_, dict) and root in globals_:
        obj = globals_[root]
    elif isinstance(builtins_, dict) and root in builtins_:
        obj = builtins_[root]
    else:
        return _MISSING
    for name in names[1:]:
        if issubclass(type(obj), types.ModuleType):  # type(): no __class__ of the program asked
            d = obj.__dict__
            if name not in d:
                return _MISSING
            obj = d[name]
        elif issubclass(type(obj), type):
            obj = _static_lookup(obj, name)
            if obj is _MISSING:
                return _MISSING
        else:
            return _MISSING
    return obj


def _static_lookup(cls, name, after=None):
    """(The raw value of `name` in the first class of cls's MRO (after `after`)
    that defines it; _MISSING if none)."""
    found = _owner_lookup(cls, name, after)
    return _MISSING if found is None else found[1]


def _owner_lookup(cls, name, after=None):
    mro = type.__dict__["__mro__"].__get__(cls)
    start = 0
    if after is not None:
        try:
            start = mro.index(after) + 1
        except ValueError:
            return None
    for klass in mro[start:]:
        d = type.__dict__["__dict__"].__get__(klass)
        if name in d:
            return klass, d[name]
    return None


def _plain_construction(cls):
    """Calling cls makes an instance of cls: its metaclass does not override
    __call__, and no class of its MRO overrides __new__."""
    meta_call = _static_lookup(type(cls), "__call__")
    if meta_call is not type.__dict__["__call__"]:
        return False
    return _static_lookup(cls, "__new__") is object.__dict__["__new__"]


def _c_exits():
    """The C __exit__ methods known to return None: io's files, threading's locks."""
    out = []
    io = sys.modules.get("_io")
    if io is not None:
        out.append(io._IOBase.__dict__.get("__exit__"))
    thread = sys.modules.get("_thread")
    if thread is not None:
        for name in ("LockType", "RLock"):
            t = getattr(thread, name, None)
            if isinstance(t, type):
                out.append(t.__dict__.get("__exit__"))
    return [e for e in out if e is not None]


def _is_io_open(obj):
    io = sys.modules.get("_io")
    return io is not None and obj is io.open


def exit_never_suppresses(cls, after=None, depth=0):
    """Whether `cls.__exit__` (the one found after class `after` in its MRO, for a
    super() call) can be shown never to return true."""
    found = _owner_lookup(cls, "__exit__", after)
    if found is None:
        return False
    owner, exit_ = found
    if any(exit_ is c for c in _c_exits()):
        return True
    if type(exit_) is not types.FunctionType:
        return False
    code = exit_.__code__
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):  # generator, coroutine, iterable coroutine, async generator
        return False
    try:
        instrs = codemap.instructions(code)
    except codemap.CodeMapError:
        return False
    # 3.13 returns a constant with RETURN_CONST (no LOAD_CONST before it)
    returns = [k for k, ins in enumerate(instrs) if ins.opname in ("RETURN_VALUE", "RETURN_CONST")]
    if not returns:
        return True             # never returns: it raises
    for k in returns:
        if _returns_false_constant(code, instrs, k):
            continue
        if _returns_export_tracing_node(exit_, instrs, k):
            continue
        if depth < _MAX_SUPER_CHAIN and _returns_super_exit(exit_, owner, instrs, k):
            if exit_never_suppresses(cls, owner, depth + 1):
                continue
        return False
    return True


# torch 2.x's autocast.__exit__ (torch/amp/autocast_mode.py) ends with
#     if torch._C._is_torch_function_mode_enabled():
#         for mode in torch.overrides._get_current_function_mode_stack():
#             if isinstance(mode, PreDispatchTorchFunctionMode):
#                 return mode.__torch_function__(torch.amp._exit_autocast, (), ())
#     return False
# The middle return gives a node of the graph torch.export's pre-dispatch tracing
# builds: only while a torch function mode is on.  Taken as never true when no
# torch function mode is on at the capture (a training loop runs eagerly).
_TORCH_AUTOCAST_EXIT = ("torch.amp.autocast_mode", "autocast.__exit__")
_TORCH_FUNCTION = "__torch_function__"


def _returns_export_tracing_node(func, instrs, k):
    """Whether instrs[k] is torch's autocast.__exit__ returning a torch function
    mode's result (see above), with no torch function mode on now."""
    if (getattr(func, "__module__", None), getattr(func, "__qualname__", None)) != _TORCH_AUTOCAST_EXIT:
        return False
    torch = sys.modules.get("torch")
    enabled = getattr(getattr(torch, "_C", None), "_is_torch_function_mode_enabled", None)
    if enabled is None or enabled():
        return False
    code = func.__code__
    line = codemap.line_at(code, instrs[k].op_offset)
    if line is None:
        return False
    for ins in instrs[:k]:
        loaded = _BYTECODE.attribute(ins)
        if loaded is not None and code.co_names[loaded[0]] == _TORCH_FUNCTION \
                and codemap.line_at(code, ins.op_offset) == line:
            return True
    return False


def _returns_false_constant(code, instrs, k):
    if instrs[k].opname == "RETURN_CONST":
        value = code.co_consts[instrs[k].arg]
        return value is None or value is False
    if k == 0 or instrs[k - 1].opname != "LOAD_CONST":
        return False
    value = code.co_consts[instrs[k - 1].arg]
    return value is None or value is False


def _returns_super_exit(func, owner, instrs, k):
    """`return super().__exit__(a, b, c)` with the arguments plain locals, super
    the builtin and its __class__ cell the class that defines the function."""
    code = func.__code__
    # the call's shape is the version's (bytecode/tables.py)
    if _BYTECODE.super_method_call(code, instrs, k) != "__exit__":
        return False
    if "super" in func.__globals__:
        return False
    b = func.__builtins__ if isinstance(func.__builtins__, dict) else getattr(func.__builtins__, "__dict__", {})
    if b.get("super") is not super:
        return False
    if "__class__" not in code.co_freevars or func.__closure__ is None:
        return False
    cell = func.__closure__[code.co_freevars.index("__class__")]
    try:
        return cell.cell_contents is owner
    except ValueError:
        return False
