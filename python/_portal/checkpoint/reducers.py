"""One pickle stream for a whole program state.

The checkpoint writer saves everything the capture collected -- frames' locals and
stack items, the globals of ``__main__`` and of the user's own modules, process
state -- as *one* object graph, so that an object shared anywhere (a list held by
two frames and a global) is still shared after the restore.  ``Pickler`` is the C
pickler (protocol 5) with a ``reducer_override`` that knows what plain pickle does
not:

user code
    functions whose ``__code__`` is registered user code (``codeindex``) are
    rebuilt on the freshly compiled code of the same source, with their globals
    dict, closure cells, defaults, ``__dict__`` ...; other functions of user
    modules (dataclass-generated methods, ``exec``) carry their code marshalled.
    Classes of user modules are saved *by value* (metaclass, bases, class dict:
    methods at creation, data afterwards), enum members by value.  User modules,
    ``__main__`` included, are saved by value: their dicts keep their identity
    (every function's ``__globals__`` *is* its module's dict after the restore).
library code
    by reference (module + qualified name); a library function that cannot be
    found by name (lambda, local function) is rebuilt from its marshalled code
    with the globals of its module; objects that are globals of a library module
    (``dataclasses.MISSING``, ``sys.stdout``, ``os.environ`` ...) by reference.
builtins
    cells (empty ones too), bound methods, class/static methods, properties,
    ``functools.partial``/``lru_cache``/``cached_property``, mapping proxies, dict
    views, dict iterators (rebuilt over the same dict), weak references,
    ``random``'s hidden generator (restored in place).
numpy
    arrays travel OUT OF BAND (``PickleBuffer`` straight from
    their memory, handed to ``buffer_callback``): the stream does not grow with
    their size.  Views keep sharing memory with their base array (see
    ``_reduce_ndarray``), ``np.memmap`` is re-mapped from its file, object arrays
    go in band.  Torch's objects are saved by the ``torch_state`` plug-in.

Layout of a stream (``dump_state``; ``loader.Loader.load_state`` reads it)::

    stream   = prelude body                 two pickles, one memo
    prelude  = (ModuleDict(name)..., LibraryDict('builtins'))
    body     = ([SetGlobal(module_dict, key, value)...], state)

The prelude creates every user module (registered in ``sys.modules``; for
``__main__`` the loader's main module) and reserves memo slots for their dicts:
after it, the pickler's memo maps each real module dict to its slot, so any
reference to a module dict anywhere in the body loads as the restored module's own
dict.  The body then fills the dicts one global at a time in definition order
(a global defined early is there when a later one is rebuilt), and carries the
caller's state.

An object that cannot be pickled makes ``dump_state`` raise ``Unsaveable`` naming
where it is (unsaveable.py finds it).  The functions the stream names to rebuild
objects are in rebuild.py, the loader in loader.py.

Limits (documented in docs/checkpoint-format.md too): generators, coroutines,
frames, open files, sockets, locks, threads and weak containers are not saved
(``reducers=`` lets the capture plug its own); the state of library modules is
not saved (their globals are referenced, not copied); a view whose base array
otherwise is unreachable still saves the whole base; dict iterators are rebuilt
by advancing a fresh iterator over the same dict; the ``__init_subclass__`` and
metaclass ``__new__`` of a user class are not run again on restore (their effects
are in the saved class dict and globals).
"""
import abc
import builtins
import enum
import functools
import io
import marshal
import mmap
import pickle
import sys
import threading
import types
import typing
import weakref

from _portal.run.codeindex import REGISTRY
from _portal.checkpoint import unsaveable
from _portal.checkpoint.loader import Loader
from _portal.checkpoint.rebuild import (  # the words the stream names (stream_words.py)
    LIBRARY_REF, _ctx_code, _ctx_module, _ctx_module_dict, _fill_module, _rb_cached_property,
    _rb_cell, _rb_class, _rb_dead_weakref, _rb_descriptor, _rb_detached_module, _rb_dict_iter,
    _rb_dict_view, _rb_enum_member, _rb_function, _rb_global_attr, _rb_import,
    _rb_library_dict, _rb_lru_cache, _rb_mappingproxy, _rb_memmap, _rb_memmap_view, _rb_method,
    _rb_ndarray, _rb_ndview, _rb_np_global_random, _rb_property, _rb_random_global,
    _rb_system_random, _rb_typevar, _rb_weakref, _set_cell, _set_class_state, _set_dict,
    _set_function_state, _set_global, _set_module_class, module_dict)
from _portal.checkpoint.refusals import DeclineLoop, Unsaveable

try:
    from _portal import _librefs      # the native module: library globals by reference
except ImportError:             # not built (a source checkout): saved by value
    _librefs = None

__all__ = ["Pickler", "Loader", "Unsaveable", "dumps", "loads", "user_modules"]

FunctionType = types.FunctionType
CodeType = types.CodeType
CellType = types.CellType
ModuleType = types.ModuleType
MethodType = types.MethodType
MappingProxyType = types.MappingProxyType
GetSetDescriptorType = types.GetSetDescriptorType
MemberDescriptorType = types.MemberDescriptorType
PickleBuffer = pickle.PickleBuffer

#: C stack for the pickling thread and the recursion limit it allows: deep graphs
#: (linked lists, nested containers) need far more than the default 1000 levels.
#: Measured on 3.11: about 270 bytes of C stack per nested save, and an object
#: with a __dict__ costs 3 levels; 120,000 levels (40,000 linked objects) ran
#: in 64 MiB without a crash.  A thread stack counts against RLIMIT_DATA.
PICKLE_STACK_BYTES = 64 << 20
PICKLE_RECURSION_LIMIT = 120000



class _ModuleDict:
    """Prelude placeholder: loads as the dict of the restored user module ``name``."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class _LibraryDict:
    """Loads as the ``__dict__`` of library module ``name`` (imported by name)."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


#: Built-in types whose library globals are saved by reference (persistent ids,
#: see _library_ref); the immutable ones carry their value too.
_REF_IMMUTABLE = frozenset({str, bytes, tuple, frozenset})
_REF_MUTABLE = frozenset({dict, list, set})


def _library_ref(modname, key, value, t):
    """The persistent id of ``value``, the global ``key`` of library module
    ``modname``, or None where identity cannot matter or the name says nothing:

    - ("lib", MODULE, KEY, COPY) for str, bytes, tuple, frozenset: the loader
      gives the module's object where it still equals COPY (an equal object
      of the same type), else COPY, so the value is always the saved one;
    - ("lib", MODULE, KEY) for dict, list, set: the library's own object,
      whatever it holds then (the state of library modules is not saved).

    Not for dunder names (module metadata), empty immutables and one-character
    strings (CPython's own singletons), nor identifier-like strings (interned:
    any equal constant of any code is that very object)."""
    if key.startswith("__") and key.endswith("__"):
        return None
    # Every part of the id is a fresh object, never one of the table's (the module's
    # name or the key may itself be some library's global): the pickler saves the
    # id's parts through persistent_id too.
    if t in _REF_MUTABLE:
        return (LIBRARY_REF, _fresh(modname), _fresh(key))
    if t not in _REF_IMMUTABLE or len(value) == 0:
        return None
    if t is str:
        if len(value) == 1 or value.isidentifier():
            return None
        copy = _fresh(value)
    elif t is bytes:
        copy = bytes(bytearray(value))
    else:
        copy = t(list(value))
    return (LIBRARY_REF, _fresh(modname), _fresh(key), copy)


def _fresh(text):
    """An equal str that is not ``text`` itself (where CPython allows: strings of
    one character or none are its singletons, and never in the table)."""
    return text[:1] + text[1:]


class _SetGlobal:
    """Body item: sets one global of a restored user module."""
    __slots__ = ("module_dict", "key", "value")

    def __init__(self, module_dict, key, value):
        self.module_dict, self.key, self.value = module_dict, key, value


#: Types whose instances are never module-level singletons worth naming.
_PLAIN_TYPES = frozenset({int, float, complex, str, bytes, bool, type(None), tuple,
                          list, dict, set, frozenset, bytearray, FunctionType,
                          types.BuiltinFunctionType, ModuleType, CodeType,
                          type(Ellipsis), type(NotImplemented), MethodType,
                          types.WrapperDescriptorType, types.MethodDescriptorType,
                          types.ClassMethodDescriptorType, GetSetDescriptorType,
                          MemberDescriptorType, staticmethod, classmethod, property})

_HEAPTYPE = 1 << 9

_METHOD_LIKE = (FunctionType, classmethod, staticmethod, property,
                functools.cached_property)


def user_modules(registry=None, names=(), main=True):
    """{name: module} of the user modules of this process: those whose file is
    registered user code, those named in ``names``, and ``__main__``."""
    registry = registry or REGISTRY
    files = set(registry.filenames())
    names = set(names)
    found, seen = {}, set()
    items = list(sys.modules.items())
    if main and "__main__" in sys.modules:      # before an alias such as __mp_main__
        items.insert(0, ("__main__", sys.modules["__main__"]))
    for name, mod in items:
        if not issubclass(type(mod), ModuleType) or id(mod) in seen:
            continue
        if name in names or (main and name == "__main__") or \
                module_dict(mod).get("__file__") in files:
            found[name] = mod
            seen.add(id(mod))
    return found


class Pickler(pickle.Pickler):
    """Protocol-5 pickler for program state; see the module docstring.

    registry      the CodeRegistry of user code (default: the process one)
    modules       {name: module} saved by value; default ``user_modules()``
    user_module_names  further module names whose objects must not be saved by
                  name (their classes by value)
    buffer_callback  receives each out-of-band ``PickleBuffer`` (None: in band)
    reducers      {type: fn(obj) -> reduce tuple | NotImplemented} tried first
    subclass_reducers  the same for a type and its subclasses (first in the MRO
                  wins), tried after ``reducers`` and before the built-in ones
    """

    def __init__(self, file, *, registry=None, modules=None, user_module_names=(),
                 buffer_callback=None, reducers=None, subclass_reducers=None):
        # Library globals of built-in types (argparse.SUPPRESS, a library's module-level
        # dict) by reference: pickle calls no reducer_override for those types, only
        # persistent_id (a C callable: _librefs), filled by _build_indexes.  Set before
        # the C pickler's __init__, which looks the hook up.
        self._lib_table = {}
        if _librefs is not None:
            self.persistent_id = _librefs.Refs(self._lib_table)
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._out = file
        self.registry = registry or REGISTRY
        if modules is None:
            modules = user_modules(self.registry, user_module_names)
        self.modules, seen = {}, set()
        for name, mod in modules.items():
            if id(mod) not in seen:     # one memo slot per dict: no aliases
                seen.add(id(mod))
                self.modules[name] = mod
        self.user_names = set(self.modules) | set(user_module_names)
        self._module_names = {id(m): name for name, m in self.modules.items()}
        self._module_dicts = {id(m.__dict__): name for name, m in self.modules.items()}
        self._extra = dict(reducers or {})
        self._extra_inherited = dict(subclass_reducers or {})
        self._handlers = {}
        self._user_class = {}
        self._resolved = {}
        self._libdicts = {}
        self._singletons = None
        self._library_dict_names = None
        self._class_aliases = None
        self._flushed = set()
        self._keep = []          # objects whose id() is used as a key
        np = sys.modules.get("numpy")
        self._np = np
        self._static = self._static_handlers()

    # --- stream layout ---

    def dump_state(self, state, roots=None):
        """Write prelude and body (see the module docstring) for ``state``.

        ``roots`` ({description: object}) names where things are, for the error
        message of ``Unsaveable``; default ``{'state': state}``."""
        if self._singletons is None:
            self._build_indexes()           # before any object: the library references
        placeholders = [_ModuleDict(name) for name in self.modules]
        builtins_dict = self._libdict("builtins")
        _run_deep(self.dump, (tuple(placeholders) + (builtins_dict,)))
        memo = self.memo.copy()
        real = {id(ph): self.modules[ph.name].__dict__ for ph in placeholders}
        real[id(builtins_dict)] = builtins.__dict__
        for key, (index, obj) in list(memo.items()):
            target = real.get(id(obj))
            if target is not None:
                memo[key] = (index, target)
        self.memo = memo
        fills = []
        from _portal.torch import dynamo_globals
        dynamos = dynamo_globals.installed()   # torch.compile's cache: made again on resume
        for name in self._fill_order():
            mod = self.modules[name]
            d = module_dict(mod)
            fills.extend(_SetGlobal(d, k, v) for k, v in list(d.items())
                         if (id(d), k) not in dynamos)
            if type(mod) is not ModuleType:      # sys.modules[__name__].__class__ = ...
                fills.append(_SetGlobal(None, mod, type(mod)))
        try:
            _run_deep(self.dump, (fills, state))
        except (MemoryError, RecursionError) as exc:
            if isinstance(exc, RecursionError):
                raise self.find_unsaveable({}, exc) from exc
            raise
        except DeclineLoop as exc:
            found = self.find_unsaveable(self._roots_for_errors(state, roots), exc)
            raise DeclineLoop(str(found)) from exc
        except Exception as exc:
            if exc is getattr(self._out, "error", None):
                raise               # the output file failed (ENOSPC ...), not an object
            raise self.find_unsaveable(self._roots_for_errors(state, roots), exc) from exc

    def _roots_for_errors(self, state, roots):
        roots = dict(roots) if roots is not None else {"state": state}
        for name in self._fill_order():         # globals are saved too
            prefix = "" if name == "__main__" else f"{name}."
            for key, value in list(self.modules[name].__dict__.items()):
                roots.setdefault(f"global '{prefix}{key}'", value)
        return roots

    def _fill_order(self):
        order = [n for n in reversed(list(sys.modules)) if n in self.modules
                 and n != "__main__" and sys.modules[n] is self.modules[n]]
        rest = [n for n in self.modules if n not in order and n != "__main__"]
        return order + rest + (["__main__"] if "__main__" in self.modules else [])

    # --- dispatch ---

    def reducer_override(self, obj):
        t = type(obj)
        try:
            handler = self._handlers[t]
        except KeyError:
            handler = self._handlers[t] = self._handler_for(t)
        except TypeError:          # a metaclass that makes its classes unhashable
            handler = self._generic
        return handler(obj)

    def _static_handlers(self):
        h = {
            FunctionType: self._reduce_function,
            CodeType: self._reduce_code,
            CellType: self._reduce_cell,
            MethodType: self._reduce_method,
            ModuleType: self._reduce_module,
            classmethod: self._reduce_wrapper,
            staticmethod: self._reduce_wrapper,
            MappingProxyType: lambda mp: (_rb_mappingproxy, (mp.copy(),)),
            GetSetDescriptorType: self._reduce_descriptor,
            MemberDescriptorType: self._reduce_descriptor,
            type({}.keys()): lambda v: self._reduce_dict_view(v, 0),
            type({}.values()): lambda v: self._reduce_dict_view(v, 1),
            type({}.items()): lambda v: self._reduce_dict_view(v, 2),
            type(iter({})): lambda it: self._reduce_dict_iter(it, 0),
            type(iter({}.values())): lambda it: self._reduce_dict_iter(it, 1),
            type(iter({}.items())): lambda it: self._reduce_dict_iter(it, 2),
            weakref.ReferenceType: self._reduce_weakref,
            functools._lru_cache_wrapper: self._reduce_lru_cache,
            typing.TypeVar: self._reduce_typevar,
            typing.ParamSpec: self._reduce_typevar,
            _ModuleDict: lambda ph: (_ctx_module_dict, (ph.name,)),
            _LibraryDict: lambda ph: (_rb_library_dict, (ph.name,)),
            _SetGlobal: lambda s: (_set_global, (s.module_dict, s.key, s.value))
            if s.module_dict is not None else (_set_module_class, (s.key, s.value)),
            PickleBuffer: _not_implemented,
        }
        # count, islice, chain, cycle, product where CPython no longer pickles them
        # (3.14: Portal's reader of their fields; nothing up to 3.13)
        from _portal.state import itertools_state
        from _portal.checkpoint.context import PickleContext
        h.update(itertools_state.reducers(PickleContext()))   # needs nothing of the pickling
        random = sys.modules.get("random")
        if random is not None:
            h[random.Random] = self._reduce_random
            h[random.SystemRandom] = lambda r: (_rb_system_random, (type(r),))
        np = self._np
        if np is not None:
            h[np.ndarray] = self._reduce_ndarray
            h[np.memmap] = self._reduce_ndarray
            h[np.random.RandomState] = self._reduce_np_randomstate
        return h

    def _handler_for(self, t):
        extra = self._extra.get(t)
        if extra is None and self._extra_inherited:
            extra = next((self._extra_inherited[k] for k in t.__mro__ if k in self._extra_inherited), None)
        if extra is not None:
            fallback = self._static.get(t, self._generic)
            return lambda obj: _first_implemented(extra(obj), fallback, obj)
        handler = self._static.get(t)
        if handler is not None:
            return handler
        if issubclass(t, type):
            return self._reduce_class
        if issubclass(t, ModuleType):
            return self._reduce_module
        if issubclass(t, property):
            return self._reduce_property
        if issubclass(t, functools.cached_property):
            return self._reduce_cached_property
        if issubclass(t, enum.Enum) and self._is_user_class(t):
            return self._reduce_enum_member
        return self._generic

    def _generic(self, obj):
        index = self._singletons
        if index is None:
            index = self._build_indexes()
        ref = index.get(id(obj))
        if ref is not None:
            return (_rb_global_attr, ref)
        return NotImplemented

    # --- name resolution ---

    def _build_indexes(self):
        """Globals of library modules -> (module, name), and library module dicts."""
        index, fallback, dicts, classes = {}, {}, {}, {}
        refs = self._lib_table
        user_ids = set(self._module_names)
        for modname, mod in list(sys.modules.items()):
            if not issubclass(type(mod), ModuleType) or id(mod) in user_ids or \
                    modname in self.user_names or modname in ("__main__", "__mp_main__"):
                continue
            try:
                d = module_dict(mod)
                items = list(d.items())
            except Exception:
                continue
            dicts.setdefault(id(d), modname)
            own = modname == "_portal" or modname.startswith("_portal.")   # never the program's
            for key, value in items:
                t = type(value)
                if not isinstance(key, str):
                    continue
                if issubclass(t, type):     # not isinstance: no __class__ lookups
                    classes.setdefault(id(value), (modname, key))
                    continue
                if t in _PLAIN_TYPES:
                    pid = None if own else _library_ref(modname, key, value, t)
                    if pid is not None:
                        refs.setdefault(id(value), pid)
                        self._keep.append(value)
                    continue
                i = id(value)
                if getattr(t, "__module__", None) == modname:
                    index.setdefault(i, (modname, key))
                else:
                    fallback.setdefault(i, (modname, key))
                self._keep.append(value)
        for i, ref in fallback.items():
            index.setdefault(i, ref)
        self._library_dict_names = dicts
        self._class_aliases = classes
        self._singletons = index
        return index

    def _libdict(self, name):
        ph = self._libdicts.get(name)
        if ph is None:
            ph = self._libdicts[name] = _LibraryDict(name)
        return ph

    def resolves(self, obj):
        """Whether pickle's save_global would find ``obj`` by module and qualname
        (looking only at modules already imported), and it is not user code."""
        key = id(obj)
        hit = self._resolved.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        ok = False
        try:
            qualname = getattr(obj, "__qualname__", None) or obj.__name__
            modname = getattr(obj, "__module__", None)
            if modname is None:
                modname = pickle.whichmodule(obj, qualname)
            if modname not in self.user_names and "<locals>" not in qualname:
                target = sys.modules.get(modname)
                for part in qualname.split("."):
                    target = getattr(target, part)
                ok = target is obj
        except Exception:
            ok = False
        self._resolved[key] = (obj, ok)
        return ok

    def _is_user_class(self, cls):
        key = id(cls)
        hit = self._user_class.get(key)
        if hit is not None and hit[0] is cls:
            return hit[1]
        d = cls.__dict__
        user = d.get("__module__", getattr(cls, "__module__", None)) in self.user_names
        if not user:
            for value in list(d.values()):
                func = value.__func__ if type(value) in (classmethod, staticmethod) \
                    else value
                if type(func) is FunctionType and \
                        self.registry.full_ref(func.__code__) is not None:
                    user = True
                    break
        self._user_class[key] = (cls, user)
        return user

    # --- code, functions, cells ---

    def _reduce_code(self, code):
        ref = self.registry.full_ref(code)
        if ref is not None:
            return (_ctx_code, ref)
        return (marshal.loads, (marshal.dumps(code),))

    def _reduce_function(self, func):
        code = func.__code__
        user_code = self.registry.full_ref(code) is not None
        if not user_code and func.__module__ not in self.user_names and \
                self.resolves(func):
            return NotImplemented
        g = func.__globals__
        if id(g) not in self._module_dicts:
            if self._library_dict_names is None:
                self._build_indexes()
            libname = self._library_dict_names.get(id(g))
            if libname is not None:
                g = self._libdict(libname)
        state = (func.__qualname__, func.__defaults__, func.__kwdefaults__,
                 func.__dict__ or None, func.__annotations__ or None, func.__module__,
                 func.__doc__)
        return (_rb_function, (code, g, func.__name__, func.__closure__), state,
                None, None, _set_function_state)

    def _reduce_cell(self, cell):
        try:
            contents = cell.cell_contents
        except ValueError:          # an empty cell
            return (_rb_cell, ())
        return (_rb_cell, (), (contents,), None, None, _set_cell)

    def _reduce_method(self, method):
        return (_rb_method, (method.__func__, method.__self__))

    def _reduce_wrapper(self, wrapper):
        return (type(wrapper), (wrapper.__func__,), dict(wrapper.__dict__) or None,
                None, None, _set_dict)

    def _reduce_descriptor(self, descr):
        owner, name = descr.__objclass__, descr.__name__
        if owner.__dict__.get(name) is not descr:
            return NotImplemented
        return (_rb_descriptor, (owner, name))

    def _reduce_property(self, prop):
        state = getattr(prop, "__dict__", None)
        return (_rb_property, (type(prop), prop.fget, prop.fset, prop.fdel, prop.__doc__),
                dict(state) if state else None, None, None, _set_dict)

    def _reduce_cached_property(self, prop):
        return (_rb_cached_property, (type(prop), prop.func, prop.attrname, prop.__doc__))

    def _reduce_lru_cache(self, wrapper):
        if getattr(wrapper, "__module__", None) not in self.user_names and \
                self.resolves(wrapper):
            return NotImplemented
        params = wrapper.cache_parameters()
        return (_rb_lru_cache, (wrapper.__wrapped__, params["maxsize"], params["typed"]),
                dict(wrapper.__dict__), None, None, _set_dict)

    def _reduce_typevar(self, tv):
        if tv.__module__ not in self.user_names:
            return NotImplemented
        return (_rb_typevar, (type(tv).__name__, tv.__name__,
                              getattr(tv, "__constraints__", ()), tv.__bound__,
                              tv.__covariant__, tv.__contravariant__, tv.__module__))

    # --- modules ---

    def _reduce_module(self, mod):
        name = self._module_names.get(id(mod))
        if name is not None:
            return (_ctx_module, (name,))
        modname = mod.__name__
        if sys.modules.get(modname) is mod:
            return (_rb_import, (modname,))
        # A module object that is not imported anywhere: saved by value, detached.
        return (_rb_detached_module, (modname,), dict(module_dict(mod)), None, None,
                _fill_module)

    # --- classes ---

    def _reduce_class(self, cls):
        if not self._is_user_class(cls):
            if self.resolves(cls):
                return NotImplemented
            if self._class_aliases is None:
                self._build_indexes()
            alias = self._class_aliases.get(id(cls))
            if alias is not None:       # e.g. types.CellType, not builtins.cell
                return (_rb_global_attr, alias)
            if not cls.__flags__ & _HEAPTYPE:
                return NotImplemented   # a C type cannot be rebuilt: pickle's error
        d = cls.__dict__
        namespace = {"__qualname__": cls.__qualname__}
        for key in ("__module__", "__doc__", "__slots__"):
            if key in d:
                namespace[key] = d[key]
        methods, data = {}, {}
        for key, value in d.items():
            if key in namespace:
                continue
            vt = type(value)
            if vt is GetSetDescriptorType and key in ("__dict__", "__weakref__") and \
                    value.__objclass__ is cls:
                continue
            if vt is MemberDescriptorType and value.__objclass__ is cls:
                continue            # created again from __slots__
            if key == "_abc_impl":
                continue            # created again by abc._abc_init
            if issubclass(vt, _METHOD_LIKE):
                methods[key] = value
            else:
                data[key] = value
        is_abc = isinstance(cls, abc.ABCMeta)
        registry = None
        if is_abc:
            registry = [r() for r in abc._get_dump(cls)[0]]
            registry = [c for c in registry if c is not None] or None
        return (_rb_class, (type(cls), cls.__name__, cls.__bases__, namespace, methods,
                            is_abc),
                (data, registry), None, None, _set_class_state)

    def _reduce_enum_member(self, member):
        cls = type(member)
        member_type = cls._member_type_
        newargs = ()
        if member_type is not object:
            getnewargs = getattr(member_type, "__getnewargs__", None)
            if getnewargs is None:
                return NotImplemented
            newargs = getnewargs(member)
        return (_rb_enum_member, (cls, member_type, newargs), dict(member.__dict__))

    # --- builtins with hidden references ---

    def _reduce_dict_view(self, view, kind):
        import gc
        dicts = [r for r in gc.get_referents(view) if isinstance(r, dict)]
        if not dicts:
            return NotImplemented
        return (_rb_dict_view, (dicts[0], kind))

    def _reduce_dict_iter(self, it, kind):
        import gc
        dicts = [r for r in gc.get_referents(it) if isinstance(r, dict)]
        if not dicts:               # exhausted: no dict any more
            return (iter, ((),))
        d = dicts[0]
        remaining = it.__length_hint__()
        return (_rb_dict_iter, (d, kind, max(0, len(d) - remaining)))

    def _reduce_weakref(self, ref):
        target = ref()
        if target is None:
            return (_rb_dead_weakref, ())
        return (_rb_weakref, (target, ref.__callback__))

    def _reduce_random(self, rng):
        random = sys.modules["random"]
        if rng is random._inst:
            return (_rb_random_global, (rng.getstate(),))
        return NotImplemented

    # --- numpy ---

    def _reduce_np_randomstate(self, rs):
        if rs is self._np.random.mtrand._rand:
            return (_rb_np_global_random, (rs.__getstate__(),))
        return NotImplemented

    def _reduce_ndarray(self, a):
        """Exact ndarrays and memmaps.

        - object dtypes, zero-size items: numpy's own reduce (in band);
        - a memmap (or a view of one) of a file mapped read-only or read-write:
          re-mapped from its file (flushed first), not copied;
        - a view of another array (base chain ending at a contiguous ndarray):
          the root array is saved (once) and the view rebuilt on it with the same
          offset and strides: memory sharing survives, and its ``.base`` is the
          restored root (which, built on its buffer, owns its memory as numpy sees it);
        - otherwise the array's own memory, C or Fortran order, out of band; a
          non-contiguous array that is not such a view is made contiguous first
          (a copy of its size).
        """
        np = self._np
        dtype = a.dtype
        if dtype.hasobject or dtype.itemsize == 0:
            return NotImplemented
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        if isinstance(root, np.memmap) and isinstance(root.base, mmap.mmap) and \
                root.mode in ("r", "r+", "w+") and root.filename:
            return self._reduce_memmap(a, root)
        if root is not a and type(root) in (np.ndarray, np.memmap) and \
                not root.dtype.hasobject and root.dtype.itemsize and \
                (root.flags.c_contiguous or root.flags.f_contiguous):
            offset = _data_offset(a, root)
            if offset is not None:
                return (_rb_ndview, (root, dtype, a.shape, a.strides, offset,
                                     bool(a.flags.writeable)))
        if a.flags.c_contiguous:
            buf, fortran = a, False
        elif a.flags.f_contiguous:
            buf, fortran = a.T, True
        else:
            buf, fortran = np.ascontiguousarray(a), False
        return (_rb_ndarray, (_raw_buffer(buf), dtype, a.shape, fortran))

    def _reduce_memmap(self, a, root):
        if root.mode != "r" and id(root) not in self._flushed:
            root.flush()
            self._flushed.add(id(root))
            self._keep.append(root)
        if a is root:
            order = "F" if root.flags.f_contiguous and not root.flags.c_contiguous else "C"
            mode = "r" if root.mode == "r" else "r+"
            return (_rb_memmap, (root.filename, root.dtype, mode, root.offset,
                                 root.shape, order))
        offset = _data_offset(a, root)
        if offset is None:
            return (_rb_ndarray, (_raw_buffer(self._np.ascontiguousarray(a)), a.dtype,
                                  a.shape, False))
        return (_rb_memmap_view, (root, a.dtype, a.shape, a.strides, offset,
                                  isinstance(a, self._np.memmap)))

    # --- the error path ---

    def find_unsaveable(self, roots, exc=None):
        """The shallowest object under ``roots`` that does not reduce, as an
        ``Unsaveable`` (unsaveable.find)."""
        return unsaveable.find(self, roots, exc)


def _not_implemented(obj):
    return NotImplemented


def _first_implemented(result, fallback, obj):
    return fallback(obj) if result is NotImplemented else result


def _raw_buffer(c_array):
    """A PickleBuffer over the bytes of a C-contiguous array, without a copy (a
    uint8 view: datetime64 and some other dtypes cannot export a buffer)."""
    import numpy as np
    return PickleBuffer(c_array.reshape(-1).view(np.uint8))


def _data_offset(a, root):
    """Byte offset of ``a``'s data in ``root``'s buffer, or None when ``a``'s
    elements are not all inside it."""
    if a.size == 0:
        return None
    start = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    lo = hi = start
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    hi += a.itemsize
    if lo < 0 or hi > root.nbytes:
        return None
    return start


def _allow_deep_c_recursion():
    """In the pickling thread (its C stack is PICKLE_STACK_BYTES): as many levels of
    C recursion as of Python recursion.  CPython 3.12+ counts C levels apart, in a
    fixed budget per thread that sys.setrecursionlimit() does not raise (3.13: 10000,
    a third of a 30000-deep linked list); 3.11 counts both in one (the native
    layer then does nothing)."""
    try:
        from _portal import _frames
    except ImportError:          # the native modules not built: the default budget
        return
    _frames.c_recursion_set(PICKLE_RECURSION_LIMIT)


def _run_deep(fn, arg):
    """Run ``fn(arg)`` in a thread with a large C stack and a high recursion
    limit (the C pickler recurses once per nesting level); in this thread when
    a thread cannot be started."""
    result, error = [], []

    def target():
        try:
            _allow_deep_c_recursion()
            result.append(fn(arg))
        except BaseException as e:          # handed to the caller below
            error.append(e)

    old_limit = sys.getrecursionlimit()
    try:
        old_size = threading.stack_size(PICKLE_STACK_BYTES)
    except (ValueError, RuntimeError):
        return fn(arg)
    thread = threading.Thread(target=target, name="portal-pickle", daemon=True)
    try:
        sys.setrecursionlimit(max(old_limit, PICKLE_RECURSION_LIMIT))
        try:
            thread.start()
        except RuntimeError:
            sys.setrecursionlimit(old_limit)
            return fn(arg)
    finally:
        threading.stack_size(old_size)
    interrupted = None
    while thread.is_alive():        # never leave it writing to a file being removed
        try:
            thread.join()
        except KeyboardInterrupt as exc:
            interrupted = exc
    sys.setrecursionlimit(old_limit)
    if interrupted is not None:
        raise interrupted
    if error:
        raise error[0]
    return result[0]

# ---------------------------------------------------------------------------
# Conveniences

def dumps(state, *, roots=None, out_of_band=True, **pickler_options):
    """(stream bytes, [PickleBuffer ...]) of ``state``; in band when not
    ``out_of_band``."""
    buffers = []
    f = io.BytesIO()
    p = Pickler(f, buffer_callback=buffers.append if out_of_band else None,
                **pickler_options)
    p.dump_state(state, roots)
    return f.getvalue(), buffers


def loads(data, buffers=(), *, recompiler=None, main_module=None):
    """The state of a ``dumps`` stream."""
    return Loader(io.BytesIO(data), buffers=buffers, recompiler=recompiler,
                  main_module=main_module).load_state()
