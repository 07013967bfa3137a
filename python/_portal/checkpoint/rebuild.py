"""The load side of a checkpoint's stream: the functions it names to rebuild
objects (words of stream_words.WORDS: renaming or moving one needs an alias there).

Each is called by the unpickler with the arguments the pickler (reducers.py)
wrote; a function's arguments keep their meaning across versions (a new one is
optional).  Functions whose name starts with _ctx_ need the loader's context (the recompiler,
the table of restored modules): loader.Loader.find_class hands out its own bound
methods for them.
"""
import abc
import functools
import pickle
import types
import typing
import weakref

ModuleType = types.ModuleType
FunctionType = types.FunctionType
CellType = types.CellType
MethodType = types.MethodType
MappingProxyType = types.MappingProxyType
#: A module's dict without its (maybe overridden, maybe lazy-loading) __getattribute__.
module_dict = ModuleType.__dict__["__dict__"].__get__
LIBRARY_REF = "lib"         # the one kind of persistent id in a stream

def _ctx_unbound():
    raise pickle.UnpicklingError("this stream needs _portal.checkpoint.loader.Loader to load")


def _ctx_code(filename, path, sha256):
    _ctx_unbound()


def _ctx_module(name):
    _ctx_unbound()


def _ctx_module_dict(name):
    _ctx_unbound()


CTX_NAMES = frozenset({"_ctx_code", "_ctx_module", "_ctx_module_dict"})


def _rb_function(code, globals_, name, closure):
    return FunctionType(code, globals_, name, None, closure)


def _set_function_state(func, state):
    qualname, defaults, kwdefaults, fdict, annotations, module, doc = state
    func.__qualname__ = qualname
    func.__defaults__ = defaults
    func.__kwdefaults__ = kwdefaults
    if fdict:
        func.__dict__.update(fdict)
    func.__annotations__ = annotations if annotations is not None else {}
    func.__module__ = module
    func.__doc__ = doc


def _rb_cell():
    return CellType()


def _set_cell(cell, state):
    cell.cell_contents = state[0]


def _rb_method(func, obj):
    return MethodType(func, obj)


def _rb_property(cls, fget, fset, fdel, doc):
    prop = cls.__new__(cls)
    property.__init__(prop, fget, fset, fdel, doc)
    return prop


def _rb_cached_property(cls, func, attrname, doc):
    prop = cls.__new__(cls)
    functools.cached_property.__init__(prop, func)
    prop.attrname = attrname
    prop.__doc__ = doc
    return prop


def _rb_lru_cache(func, maxsize, typed):
    return functools.lru_cache(maxsize=maxsize, typed=typed)(func)


def _set_dict(obj, state):
    obj.__dict__.update(state)


def _rb_descriptor(owner, name):
    return owner.__dict__[name]


def _rb_mappingproxy(mapping):
    return MappingProxyType(mapping)


def _rb_dict_view(d, kind):
    return d.keys() if kind == 0 else d.values() if kind == 1 else d.items()


def _rb_dict_iter(d, kind, consumed):
    it = iter(_rb_dict_view(d, kind))
    for _ in range(consumed):
        if next(it, _rb_dict_iter) is _rb_dict_iter:
            break
    return it


def _rb_weakref(referent, callback):
    return weakref.ref(referent, callback) if callback is not None else weakref.ref(referent)


def _rb_dead_weakref():
    class _Gone:
        pass
    return weakref.ref(_Gone())


def _rb_typevar(kind, name, constraints, bound, covariant, contravariant, module):
    if kind == "ParamSpec":
        tv = typing.ParamSpec(name, bound=bound, covariant=covariant,
                              contravariant=contravariant)
    else:
        tv = typing.TypeVar(name, *constraints, bound=bound, covariant=covariant,
                            contravariant=contravariant)
    tv.__module__ = module
    return tv


def _rb_random_global(state):
    import random
    random._inst.setstate(state)
    return random._inst


def _rb_system_random(cls):
    return cls()


def _rb_import(name):
    import importlib
    return importlib.import_module(name)


def _rb_global_attr(modname, qualname):
    obj = _rb_import(modname)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _rb_library_dict(name):
    return _rb_import(name).__dict__


def _rb_detached_module(name):
    return ModuleType(name)


def _fill_module(module, items):
    module.__dict__.update(items)


def _set_global(module_dict, key, value):
    module_dict[key] = value


def _set_module_class(module, cls):
    module.__class__ = cls


# --- classes ---------------------------------------------------------------

class _SuppressInitSubclass:
    """Within the block, ``__init_subclass__`` of the bases' classes does nothing.

    A restored class is created with ``type.__new__``; its bases'
    ``__init_subclass__`` already ran in the saving process (a registry it filled
    is restored with the rest of the state), so it must not run again."""

    def __init__(self, bases):
        self.patched = []
        self.bases = bases

    def __enter__(self):
        noop = classmethod(lambda cls, **kw: None)
        seen = set()
        for base in self.bases:
            for klass in base.__mro__:
                if klass is object or id(klass) in seen:
                    continue
                seen.add(id(klass))
                orig = klass.__dict__.get("__init_subclass__")
                if orig is None:
                    continue
                try:
                    type.__setattr__(klass, "__init_subclass__", noop)
                except (TypeError, AttributeError):
                    continue
                self.patched.append((klass, orig))
        return self

    def __exit__(self, *exc):
        for klass, orig in reversed(self.patched):
            type.__setattr__(klass, "__init_subclass__", orig)


def _rb_class(metaclass, name, bases, namespace, methods, is_abc):
    with _SuppressInitSubclass(bases):
        cls = type.__new__(metaclass, name, bases, dict(namespace))
    for key, value in methods.items():
        type.__setattr__(cls, key, value)
    if is_abc:
        abc._abc_init(cls)
    return cls


def _set_class_state(cls, state):
    data, abc_registry = state
    for key, value in data.items():
        type.__setattr__(cls, key, value)
    for sub in abc_registry or ():
        cls.register(sub)


def _rb_enum_member(cls, member_type, newargs):
    if member_type is object:
        return object.__new__(cls)
    return member_type.__new__(cls, *newargs)


# --- numpy -----------------------------------------------------------------

def _rb_ndarray(buf, dtype, shape, fortran):
    # Built straight on the buffer (not a reshape of a flat array): its .base is
    # then no ndarray, so numpy takes it as the owner of its memory, as the saved
    # array was; a view made of it, by the program (weights[1:3]) or by the
    # restore (_rb_ndview), has it as .base, as before the suspension.
    import numpy as np
    return np.ndarray(shape, dtype, buffer=buf, order="F" if fortran else "C")


def _view_base(root):
    return root if root.flags.c_contiguous else root.T


def _rb_ndview(root, dtype, shape, strides, offset, writeable):
    import numpy as np
    v = np.ndarray(shape, dtype, buffer=_view_base(root), offset=offset, strides=strides)
    if not writeable and v.flags.writeable:
        v.flags.writeable = False
    return v


def _rb_memmap(filename, dtype, mode, offset, shape, order):
    import numpy as np
    return np.memmap(filename, dtype=dtype, mode=mode, offset=offset, shape=shape,
                     order=order)


def _rb_memmap_view(root, dtype, shape, strides, offset, as_memmap):
    import numpy as np
    cls = np.memmap if as_memmap else np.ndarray
    v = np.ndarray.__new__(cls, shape, dtype, buffer=_view_base(root), offset=offset,
                           strides=strides)
    if as_memmap:
        v._mmap, v.filename, v.offset, v.mode = root._mmap, root.filename, root.offset, root.mode
    return v


def _rb_np_global_random(state):
    import numpy as np
    rand = np.random.mtrand._rand
    rand.__setstate__(state)
    return rand

