"""_portal.checkpoint.reducers: one pickle stream for a whole program state.

User code is simulated: sources are written to a temporary directory, compiled,
registered in a test-local CodeRegistry and run in fresh modules (one plays
``__main__``), exactly as the import hook and the main-script compiler will do.
"""
import collections
import contextlib
import dataclasses
import io
import itertools
import math
import os
import pickle
import random
import socket
import sys
import textwrap
import threading
import tracemalloc
import types

import numpy as np
import pytest

from _portal.checkpoint import reducers
from _portal.run.codeindex import CodeRegistry, Recompiler
from _portal.checkpoint.reducers import Unsaveable


def compile_fn(source, filename):
    return compile(source, filename, "exec", dont_inherit=True)


class World:
    """User modules of a simulated program, and their restore."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.registry = CodeRegistry()
        self.modules = {}
        self._saved_modules = dict(sys.modules)

    def module(self, name, source, main=False):
        source = textwrap.dedent(source)
        filename = str(self.dir / f"{name}.py")
        with open(filename, "w") as f:
            f.write(source)
        code = compile_fn(source.encode(), filename)
        self.registry.register(filename, code, source.encode())
        mod = types.ModuleType("__main__" if main else name)
        mod.__file__ = filename
        key = "__main__" if main else name
        sys.modules[key] = mod                 # as at run time (dataclasses look here)
        self.modules[key] = mod
        exec(code, mod.__dict__)
        return mod

    def dumps(self, state, roots=None, out_of_band=True, **kw):
        return reducers.dumps(state, roots=roots, out_of_band=out_of_band,
                              registry=self.registry, modules=self.modules, **kw)

    def roundtrip(self, state, out_of_band=True):
        """(restored state, restored __main__ module) after dump and load."""
        data, buffers = self.dumps(state, out_of_band=out_of_band)
        self.forget()
        main = types.ModuleType("__main__")
        loader = reducers.Loader(io.BytesIO(data), buffers=buffers,
                                 recompiler=Recompiler(compile_fn), main_module=main)
        restored = loader.load_state()
        self.loaded = loader.modules
        return restored, main

    def forget(self):
        """The restoring process has none of the user modules."""
        for key in self.modules:
            if key != "__main__":
                sys.modules.pop(key, None)
        sys.modules["__main__"] = self._saved_modules["__main__"]

    def cleanup(self):
        # The program's own modules go; a library's imported meanwhile stay (torch
        # 2.x imports torch._dynamo lazily, registering C++ operator libraries once
        # per process: a second import of a forgotten one fails).
        for key in list(sys.modules):
            if key not in self._saved_modules and (key in self.modules or self._ours(sys.modules[key])):
                del sys.modules[key]
        sys.modules.update(self._saved_modules)

    def _ours(self, module):
        path = getattr(module, "__file__", None) or ""
        return str(path).startswith(str(self.dir) + os.sep)


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.cleanup()


# --- identity, cycles, modules ---------------------------------------------

def test_identity_shared_across_frames_and_globals(world):
    main = world.module("__main__", """
        data = [1, 2, 3]
        alias = data
        nested = {"d": data}
    """, main=True)
    frames = [{"locals": {"x": main.data}}, {"locals": {"y": main.data, "t": (main.data,)}}]
    state, main2 = world.roundtrip({"frames": frames})
    f = state["frames"]
    assert f[0]["locals"]["x"] is f[1]["locals"]["y"] is f[1]["locals"]["t"][0]
    assert f[0]["locals"]["x"] is main2.data is main2.alias is main2.nested["d"]
    assert f[0]["locals"]["x"] == [1, 2, 3] and f[0]["locals"]["x"] is not main.data


def test_module_dict_cycles_through_functions(world):
    mod = world.module("umod", """
        import sys
        def f():
            return g() + 1
        def g():
            return LIMIT
        LIMIT = 41
        me = sys.modules[__name__]
        table = {"f": f}
    """)
    state, _ = world.roundtrip({"fn": mod.f, "mod": mod})   # function reached first
    m2 = state["mod"]
    assert m2 is sys.modules["umod"] is world.loaded["umod"] and m2 is not mod
    f2 = state["fn"]
    assert f2 is m2.f is m2.table["f"]
    assert f2.__globals__ is m2.__dict__ and m2.g.__globals__ is m2.__dict__
    assert m2.me is m2
    assert f2() == 42
    m2.LIMIT = 1                                           # globals are live
    assert f2() == 2


def test_main_dict_is_restored_into_main_module(world):
    main = world.module("__main__", """
        import math
        x = 5
        def area(r):
            return math.pi * r * r * x
    """, main=True)
    state, main2 = world.roundtrip({"f": main.area})
    assert state["f"] is main2.area and main2.__dict__["x"] == 5
    assert state["f"].__globals__ is main2.__dict__
    assert main2.math is math and main2.__builtins__ is __builtins__ or \
        main2.__builtins__ is __import__("builtins")
    assert state["f"](1) == pytest.approx(math.pi * 5)
    assert main2.__name__ == "__main__"


def test_functions_rebuilt_on_fresh_code(world):
    mod = world.module("umod", """
        def f(a, b=[1], *, c=2) -> int:
            "doc of f"
            return a + b[0] + c
        f.tag = "tagged"
        class K:
            def m(self):
                return __class__
    """)
    filename = mod.__file__
    ref = world.registry.ref_of(mod.f.__code__)
    rc = Recompiler(compile_fn)
    data, bufs = world.dumps({"f": mod.f, "code": mod.f.__code__})
    world.forget()
    state = reducers.loads(data, bufs, recompiler=rc)
    f2 = state["f"]
    sha = world.registry.sha256_of(filename)
    assert f2.__code__ is rc.code_for(filename, ref[1], sha) is state["code"]
    assert f2.__code__ is not mod.f.__code__
    assert f2.__defaults__ == ([1],) and f2.__kwdefaults__ == {"c": 2}
    assert f2.__doc__ == "doc of f" and f2.tag == "tagged"
    assert f2.__annotations__ == {"return": int}
    assert f2.__qualname__ == "f" and f2.__module__ == "umod"
    assert f2(1) == 4
    k2 = sys.modules["umod"].K
    assert k2().m() is k2                       # the __class__ cell


def test_closures_share_nonlocal_cells(world):
    mod = world.module("umod", """
        def make():
            n = 0
            def inc():
                nonlocal n
                n += 1
                return n
            def get():
                return n
            return inc, get
        inc, get = make()
        inc(); inc()
        def make_empty():
            def g():
                return later
            return g
            later = 1
        empty = make_empty()
        def rec():
            def fact(k):
                return 1 if k < 2 else k * fact(k - 1)
            return fact
        fact = rec()
    """)
    state, _ = world.roundtrip({"inc": mod.inc, "get": mod.get, "empty": mod.empty,
                                "cell": mod.inc.__closure__[0]})
    assert state["get"]() == 2 and state["inc"]() == 3 and state["get"]() == 3
    assert state["inc"].__closure__[0] is state["get"].__closure__[0] is state["cell"]
    with pytest.raises(NameError):
        state["empty"]()
    assert sys.modules["umod"].fact(5) == 120


def test_user_classes_by_value(world):
    mod = world.module("umod", """
        import collections
        class Base:
            kind = "base"
            def hello(self):
                return f"hello from {self.kind}"
        class Point(Base):
            __slots__ = ("x", "y")
            kind = "point"
            ORIGIN = None
            def __init__(self, x, y):
                self.x, self.y = x, y
            @property
            def norm(self):
                return abs(self.x) + abs(self.y)
            @classmethod
            def unit(cls):
                return cls(1, 0)
            @staticmethod
            def dims():
                return 2
            def __eq__(self, other):
                return (self.x, self.y) == (other.x, other.y)
            __hash__ = None
            def __repr__(self):
                return f"Point({self.x}, {self.y})"
        Point.ORIGIN = Point(0, 0)
        class Counter(collections.OrderedDict):
            def total(self):
                return sum(self.values())
        class MyList(list):
            pass
        class WithDict:
            def __init__(self):
                self.items = [1]
                self.me = self
        c = Counter(a=1, b=2)
        ml = MyList([1, 2])
        ml.extra = "x"
        w = WithDict()
        p = Point(3, -4)
    """)
    state, _ = world.roundtrip({"p": mod.p, "w": mod.w})
    m2 = sys.modules["umod"]
    P = m2.Point
    assert P is not mod.Point and type(state["p"]) is P
    assert state["p"] is m2.p and state["p"].norm == 7 and repr(state["p"]) == "Point(3, -4)"
    assert P.ORIGIN == P(0, 0) and type(P.ORIGIN) is P
    assert P.unit() == P(1, 0) and P.dims() == 2 and P.__slots__ == ("x", "y")
    assert isinstance(P.__dict__["x"], types.MemberDescriptorType)
    assert state["p"].__dict__ == {}                 # Base has no __slots__
    assert state["p"].hello() == "hello from point" and issubclass(P, m2.Base)
    assert P.__hash__ is None and P.__qualname__ == "Point" and P.__module__ == "umod"
    assert m2.c.total() == 3 and list(m2.c) == ["a", "b"]
    assert isinstance(m2.c, collections.OrderedDict) and type(m2.c) is m2.Counter
    assert m2.ml == [1, 2] and m2.ml.extra == "x" and type(m2.ml) is m2.MyList
    assert state["w"].me is state["w"] is m2.w


def test_dataclasses_enums_metaclasses_abcs(world):
    mod = world.module("umod", """
        import abc, dataclasses, enum, typing
        @dataclasses.dataclass
        class DC:
            a: int
            b: list = dataclasses.field(default_factory=list)
            c: str = "c"
        @dataclasses.dataclass(frozen=True, order=True)
        class Frozen:
            x: int
            y: int = 0
        @dataclasses.dataclass(slots=True)
        class Slotted:
            s: int
        class Color(enum.Enum):
            RED = 1
            GREEN = 2
            def describe(self):
                return f"{self.name}={self.value}"
        class Level(enum.IntEnum):
            LOW = 1
            HIGH = 10
        class Perm(enum.Flag):
            R = 4
            W = 2
        class Planet(enum.Enum):
            EARTH = (5.97e24, 6.37e6)
            def __init__(self, mass, radius):
                self.mass = mass
        class Meta(type):
            created = []
            def __new__(mcs, name, bases, ns):
                cls = super().__new__(mcs, name, bases, ns)
                mcs.created.append(name)
                cls.stamp = name.lower()
                return cls
        class Tracked(metaclass=Meta):
            pass
        class Plugin:
            registry = []
            def __init_subclass__(cls, **kw):
                super().__init_subclass__(**kw)
                Plugin.registry.append(cls)
        class APlugin(Plugin):
            pass
        class Shape(abc.ABC):
            @abc.abstractmethod
            def area(self): ...
        class Square(Shape):
            def area(self):
                return 4
        class Virtual:
            pass
        Shape.register(Virtual)
        class NT(typing.NamedTuple):
            a: int
            b: str = "b"
        T = typing.TypeVar("T")
        class Box(typing.Generic[T]):
            def __init__(self, item: T):
                self.item = item
        @typing.runtime_checkable
        class Sized(typing.Protocol):
            def size(self) -> int: ...
        class HasSize:
            def size(self):
                return 1
        fav = Color.GREEN
        both = Perm.R | Perm.W
        dc = DC(1, [2])
        fz = Frozen(1, 2)
        sl = Slotted(3)
        nt = NT(1)
    """)
    state, _ = world.roundtrip({"fav": mod.fav})
    m2 = sys.modules["umod"]
    assert m2.dc == m2.DC(1, [2]) and repr(m2.dc) == "DC(a=1, b=[2], c='c')"
    assert m2.DC(5).b == [] and m2.DC(5).b is not m2.DC(5).b       # default_factory
    assert dataclasses.fields(m2.DC)[0].name == "a"
    assert dataclasses.fields(m2.DC)[1].default is dataclasses.MISSING
    assert m2.fz < m2.Frozen(1, 3) and hash(m2.fz) == hash(m2.Frozen(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m2.fz.x = 5
    assert m2.sl.s == 3 and not hasattr(m2.sl, "__dict__")
    assert dataclasses.replace(m2.dc, a=9).a == 9
    assert state["fav"] is m2.Color.GREEN is m2.Color(2) is m2.Color["GREEN"]
    assert m2.Color.RED.describe() == "RED=1" and list(m2.Color) == [m2.Color.RED, m2.Color.GREEN]
    assert m2.Level.HIGH + 1 == 11 and m2.Level(10) is m2.Level.HIGH
    assert m2.both == m2.Perm.R | m2.Perm.W and m2.Perm.R in m2.both
    assert m2.Planet.EARTH.mass == 5.97e24
    assert type(m2.Tracked) is m2.Meta and m2.Tracked.stamp == "tracked"
    assert m2.Meta.created == ["Tracked"]                    # metaclass not run again
    assert m2.Plugin.registry == [m2.APlugin]                # __init_subclass__ not again
    with pytest.raises(TypeError):
        m2.Shape()
    assert m2.Square().area() == 4 and isinstance(m2.Virtual(), m2.Shape)
    assert m2.nt == m2.NT(1, "b") and m2.nt._replace(a=2).a == 2
    assert m2.Box[int](3).item == 3 and m2.Box.__parameters__ == (m2.T,)
    assert isinstance(m2.HasSize(), m2.Sized) and not isinstance(1, m2.Sized)


def test_library_objects_by_reference(world):
    world.module("umod", """
        import contextlib, dataclasses, functools, os, sys, typing
        T = typing.TypeVar("T", bound=int)
        out = sys.stdout
        env = os.environ
        missing = dataclasses.MISSING
        @contextlib.contextmanager
        def managed():
            yield "inside"
        @functools.lru_cache(maxsize=8)
        def square(x):
            return x * x
        square(3)
        part = functools.partial(square, 4)
    """)
    state, _ = world.roundtrip({"len": len, "sqrt": math.sqrt, "od": collections.OrderedDict,
                                "cell_type": types.CellType, "app": [].append})
    m2 = sys.modules["umod"]
    assert state["len"] is len and state["sqrt"] is math.sqrt
    assert state["od"] is collections.OrderedDict and state["cell_type"] is types.CellType
    assert m2.out is sys.stdout and m2.env is os.environ
    assert m2.missing is dataclasses.MISSING
    with m2.managed() as v:
        assert v == "inside"
    assert m2.managed.__globals__ is contextlib.__dict__     # library code, marshalled
    assert m2.square(5) == 25 and m2.square.cache_info().maxsize == 8
    assert m2.part() == 16 and m2.part.func is m2.square
    assert m2.T.__bound__ is int and m2.T.__name__ == "T"


def test_library_local_function_is_marshalled(world):
    lib = types.ModuleType("portal_test_libmod")
    exec(compile("BASE = 10\ndef factory():\n    return lambda x: x + BASE\n",
                 "/usr/lib/fake/libmod.py", "exec"), lib.__dict__)
    sys.modules["portal_test_libmod"] = lib
    fn = lib.factory()
    state, _ = world.roundtrip({"fn": fn, "code": fn.__code__})
    assert state["fn"](1) == 11 and state["fn"].__globals__ is lib.__dict__
    assert state["code"] is state["fn"].__code__ and state["code"] is not fn.__code__


def test_builtin_kinds(world):
    world.module("umod", """
        import functools, types, weakref
        class Thing:
            def method(self):
                return id(self)
            @classmethod
            def cm(cls):
                return cls
        t = Thing()
        bound = t.method
        cbound = Thing.cm
        d = {"a": 1, "b": 2, "c": 3}
        keys = d.keys()
        items = d.items()
        ki = iter(d)
        next(ki)
        vi = iter(d.values())
        ii = iter(d.items())
        next(ii); next(ii)
        proxy = types.MappingProxyType(d)
        ref = weakref.ref(t)
        l = [10, 20, 30, 40]
        li = iter(l)
        next(li)
        en = enumerate(l)
        next(en)
    """)
    state, _ = world.roundtrip({})
    m2 = sys.modules["umod"]
    assert m2.bound.__self__ is m2.t and m2.bound() == id(m2.t)
    assert m2.cbound() is m2.Thing
    assert next(m2.ki) == "b" and next(m2.vi) == 1
    assert next(m2.ii) == ("c", 3)
    m2.d["z"] = 26
    assert list(m2.keys) == ["a", "b", "c", "z"]                 # a live view of d
    assert ("z", 26) in m2.items
    with pytest.raises(RuntimeError, match="changed size"):     # iterating d itself
        next(m2.ki)
    assert m2.proxy["a"] == 1
    assert m2.ref() is m2.t
    assert next(m2.li) == 20
    m2.l[2] = 99                                            # the iterator holds l itself
    assert next(m2.li) == 99
    assert next(m2.en) == (1, 20)


def test_builtin_iterators(world):
    l = [1, 2, 3, 4, 5]
    its = {"list": iter(l), "tuple": iter((1, 2, 3)), "range": iter(range(10)),
           "rev": reversed(l), "zip": zip(l, "abcde"), "count": itertools.count(7),
           "cycle": itertools.cycle("ab"), "islice": itertools.islice(l, 1, None),
           "chain": itertools.chain(l, [6]), "map": map(str, l), "str": iter("xyz"),
           "filter": filter(None, [0, 1, 2])}
    for it in its.values():
        next(it)
    state, _ = world.roundtrip({"l": l, "its": its})
    l2, its2 = state["l"], state["its"]
    expected = {"list": 2, "tuple": 2, "range": 1, "rev": 4, "zip": (2, "b"), "count": 8,
                "cycle": "b", "islice": 3, "chain": 2, "map": "2", "str": "y", "filter": 2}
    assert {k: next(v) for k, v in its2.items()} == expected
    l2[2] = 33
    assert next(its2["list"]) == 33                # list_iterator shares the list


def test_random_generators_continue_identically(world):
    r = random.Random(7)
    r.random()
    random.seed(11)
    random.random()
    np_gen = np.random.default_rng(3)
    np_gen.random()
    np_rs = np.random.RandomState(4)
    np.random.seed(5)
    state = {"r": r, "hidden": random._inst, "gen": np_gen, "rs": np_rs,
             "global_np": np.random.mtrand._rand, "fn": random.random}
    data, bufs = world.dumps(state)
    expected = [r.random(), random.random(), np_gen.random(), np_rs.rand(), np.random.rand()]
    random.seed(999)
    np.random.seed(999)
    s = reducers.loads(data, bufs)
    assert s["hidden"] is random._inst and s["global_np"] is np.random.mtrand._rand
    got = [s["r"].random(), s["fn"](), s["gen"].random(), s["rs"].rand(), np.random.rand()]
    assert got == expected


# --- numpy ---------------------------------------------------------------------

DTYPES = ["?", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "f16",
          "c8", "c16", "M8[ns]", "m8[s]", "S5", "U3", ">i4", "<f8", "V6"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_ndarray_dtypes(world, dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(4, 6)
    zero_d = np.array(a.flat[5])
    state, _ = world.roundtrip({"a": a, "z": zero_d, "e": np.empty((0, 3), dtype)})
    assert state["a"].dtype == a.dtype and state["a"].shape == a.shape
    assert state["a"].tobytes() == a.tobytes()
    assert state["z"].shape == () and state["z"].tobytes() == zero_d.tobytes()
    assert state["e"].shape == (0, 3) and state["e"].dtype == a.dtype
    assert state["a"].flags.writeable


def test_ndarray_layouts_and_views(world):
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    fortran = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    views = {"base": base, "slice": base[1:4, ::3], "rev": base[::-1, ::-2],
             "col": base[:, 3], "T": base.T, "flat_view": base.reshape(-1)[5:50:7],
             "fortran": fortran, "fview": fortran[1:, 1:], "bytes_view": base.view(np.uint8)[3:11]}
    readonly = np.arange(5)
    readonly.flags.writeable = False
    struct = np.zeros(4, dtype=[("id", "i4"), ("pos", "f8", (2,)), ("name", "S4")])
    struct["id"] = [1, 2, 3, 4]
    struct["name"] = b"ab"
    objs = np.array([{"k": 1}, None, [1, 2]], dtype=object)
    shared = objs[0]
    strided = np.lib.stride_tricks.as_strided(np.arange(10), shape=(3, 3), strides=(8, 8))
    data, bufs = world.dumps({"views": views, "ro": readonly, "struct": struct,
                              "field": struct["pos"], "objs": objs, "shared": shared,
                              "strided": strided})
    assert len(bufs) == 5          # base, fortran, readonly, struct, as_strided's root
    world.forget()
    s = reducers.loads(data, bufs)
    v = s["views"]
    for key, arr in views.items():
        assert np.array_equal(v[key], arr), key
        assert v[key].strides == arr.strides, key
    assert v["fortran"].flags.f_contiguous and not v["fortran"].flags.c_contiguous
    v["base"][2, 3] = -1.0                             # views still share memory
    assert v["slice"][1, 1] == -1.0 and v["col"][2] == -1.0 and v["T"][3, 2] == -1.0
    v["fortran"][2, 3] = -5
    assert v["fview"][1, 2] == -5
    assert not s["ro"].flags.writeable and list(s["ro"]) == [0, 1, 2, 3, 4]
    assert s["struct"].dtype == struct.dtype and s["struct"]["id"].tolist() == [1, 2, 3, 4]
    s["struct"]["pos"][1] = [7, 8]
    assert s["field"][1].tolist() == [7.0, 8.0]
    assert s["objs"][0] is s["shared"] and s["objs"][2] == [1, 2]
    assert np.array_equal(s["strided"], strided)


def test_ndarray_goes_out_of_band_without_copies(world):
    big = np.random.default_rng(0).random(50 * 2**20 // 8)          # 50 MiB
    state = {"big": big, "again": big, "small": np.arange(3)}
    tracemalloc.start()
    try:
        data, bufs = world.dumps(state)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) < 4096                          # the stream does not grow with it
    assert sum(b.raw().nbytes for b in bufs) == big.nbytes + 24
    assert peak < 5 * 2**20, peak                     # no copy of the 50 MiB
    assert bufs[0].raw().obj is big or np.shares_memory(np.frombuffer(bufs[0], np.uint8), big)
    s = reducers.loads(data, bufs)
    assert s["big"] is s["again"] and np.array_equal(s["big"], big)
    in_band, no_bufs = world.dumps(state, out_of_band=False)
    assert no_bufs == [] and len(in_band) > big.nbytes
    assert np.array_equal(reducers.loads(in_band)["big"], big)


def test_memmap_is_remapped_not_copied(world, tmp_path):
    path = str(tmp_path / "data.bin")
    mm = np.memmap(path, dtype=np.int32, mode="w+", shape=(1000, 100))
    mm[:] = 3
    view = mm[10:20, 5:]
    plain = np.asarray(mm)[500]
    ro = np.memmap(path, dtype=np.int32, mode="r", shape=(100,), offset=400)
    data, bufs = world.dumps({"mm": mm, "view": view, "plain": plain, "ro": ro})
    assert bufs == [] and len(data) < 2048
    s = reducers.loads(data, bufs)
    assert isinstance(s["mm"], np.memmap) and s["mm"].filename == path
    assert s["mm"].shape == (1000, 100) and int(s["mm"][999, 99]) == 3
    s["view"][0, 0] = 77                           # one mapping, written through
    assert s["mm"][10, 5] == 77 and isinstance(s["view"], np.memmap)
    s["mm"].flush()
    assert np.fromfile(path, dtype=np.int32)[10 * 100 + 5] == 77
    assert np.shares_memory(s["plain"], s["mm"]) and s["plain"].shape == (100,)
    assert not s["ro"].flags.writeable and s["ro"].offset == 400


def test_torch_tensors_share_storage_out_of_band(world):
    """Through the torch_state plug-in, as the capture plugs it in (more in
    test_torch_state.py)."""
    torch = pytest.importorskip("torch")
    from _portal.state import plugins
    exact, inherited = plugins.reducers()
    plug = {"reducers": exact, "subclass_reducers": inherited}
    mod = world.module("umod", """
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 2)
            def forward(self, x):
                return self.fc(x).relu()
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        net(torch.ones(3, 4)).sum().backward()
        opt.step()
    """)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = base[1:, ::2]
    lin = torch.nn.Linear(4, 2)
    lin(torch.ones(1, 4)).sum().backward()
    bf = torch.ones(5, dtype=torch.bfloat16)
    data, bufs = world.dumps({"base": base, "view": view, "lin": lin, "bf": bf,
                              "gen": torch.Generator().manual_seed(3)}, **plug)
    assert len(data) < 16384 and len(bufs) >= 4
    world.forget()
    s = reducers.loads(data, bufs, recompiler=Recompiler(compile_fn))
    m2 = sys.modules["umod"]
    assert type(m2.net) is m2.Net and m2.opt.param_groups[0]["params"][0] is m2.net.fc.weight
    assert torch.equal(m2.net(torch.ones(1, 4)), mod.net(torch.ones(1, 4)))
    assert torch.equal(m2.opt.state[m2.net.fc.weight]["momentum_buffer"],
                       mod.opt.state[mod.net.fc.weight]["momentum_buffer"])
    m2.opt.step()                                   # the optimizer still drives the model
    mod.opt.step()
    assert torch.equal(m2.net.fc.weight, mod.net.fc.weight)
    assert torch.equal(s["view"], view) and s["view"].stride() == view.stride()
    s["base"][1, 0] = 100
    assert s["view"][0, 0] == 100                              # one storage
    w = s["lin"].weight
    assert isinstance(w, torch.nn.Parameter) and w.requires_grad
    assert torch.equal(w.grad, lin.weight.grad) and torch.equal(w, lin.weight)
    assert s["bf"].dtype == torch.bfloat16 and s["bf"].sum().item() == 5
    assert torch.equal(s["gen"].get_state(), torch.Generator().manual_seed(3).get_state())
    # a graph that could still be back-propagated: not this loop (autograd.py)
    y = lin(torch.ones(1, 4))
    with pytest.raises(reducers.DeclineLoop) as e:
        world.dumps({"y": y}, roots={"local 'y'": y}, **plug)
    assert str(e.value).startswith("local 'y' (torch.Tensor): a tensor in a live autograd graph")


# --- deep graphs and errors -----------------------------------------------------

def test_deep_graph_saves(world):
    world.module("umod", """
        class Node:
            def __init__(self, nxt):
                self.nxt = nxt
        head = None
        for i in range(30000):
            head = Node(head)
    """)
    state, _ = world.roundtrip({})
    n, count = sys.modules["umod"].head, 0
    while n is not None:
        n, count = n.nxt, count + 1
    assert count == 30000
    assert sys.getrecursionlimit() < reducers.PICKLE_RECURSION_LIMIT


def test_unsaveable_names_the_path(world):
    sock = socket.socket()
    try:
        lock = threading.Lock()
        mod = world.module("umod", """
            class Model:
                pass
        """)
        model = mod.Model()
        model.layers = [1, 2]
        model.lock = lock
        roots = {"global 'sock'": sock, "global 'state'": {"ok": [1], "conn": sock},
                 "local 'model' of train() at train.py:12": model}
        with pytest.raises(Unsaveable) as e:
            world.dumps({"g": [sock]}, roots={"global 'sock'": sock})
        assert str(e.value) == "global 'sock' (socket.socket): cannot pickle 'socket' object"
        assert e.value.path == "global 'sock'" and e.value.type_name == "socket.socket"
        with pytest.raises(Unsaveable) as e:
            world.dumps({"s": roots["global 'state'"]},
                        roots={"global 'state'": roots["global 'state'"]})
        assert str(e.value).startswith("global 'state'['conn'] (socket.socket): ")
        with pytest.raises(Unsaveable) as e:
            world.dumps({"m": model}, roots={"local 'model' of train() at train.py:12": model})
        assert str(e.value) == ("local 'model' of train() at train.py:12.lock (_thread.lock): "
                                "cannot pickle '_thread.lock' object")

        def gen():
            yield 1
        with pytest.raises(Unsaveable) as e:
            world.dumps({"x": {"it": gen()}}, roots={"local 'x'": {"it": gen()}})
        assert str(e.value).startswith("local 'x'['it'] (generator): cannot pickle")
    finally:
        sock.close()


def test_plain_unpickler_is_refused(world):
    world.module("umod", "def f():\n    return 1\n")
    data, bufs = world.dumps({})
    with pytest.raises(pickle.UnpicklingError, match="Loader"):
        pickle.Unpickler(io.BytesIO(data), buffers=bufs).load()


def test_unsaveable_global_is_named_without_roots(world):
    world.module("__main__", """
        import threading
        ok = [1, 2]
        class Holder:
            pass
        holder = Holder()
        holder.guard = {"lock": threading.Lock()}
    """, main=True)
    with pytest.raises(Unsaveable) as e:
        world.dumps({"frames": []}, roots={"local 'x'": [1]})
    assert str(e.value) == ("global 'holder'.guard['lock'] (_thread.lock): "
                            "cannot pickle '_thread.lock' object")
    world.module("umod", "import socket\nconn = socket.socket()\n")
    try:
        with pytest.raises(Unsaveable) as e:
            reducers.dumps({}, registry=world.registry, modules={"umod": world.modules["umod"]})
        assert e.value.path == "global 'umod.conn'"
    finally:
        world.modules["umod"].conn.close()


def test_closure_paths_and_extra_reducers(world):
    mod = world.module("umod", """
        import threading
        def make():
            guard = threading.Lock()
            def locked():
                return guard
            return locked
        locked = make()
    """)
    with pytest.raises(Unsaveable) as e:
        world.dumps({}, roots={"local 'f'": mod.locked})
    assert e.value.path == "local 'f'.<closure 'guard'>" and e.value.type_name == "_thread.lock"
    with pytest.raises(Unsaveable) as e:        # reached through a class's globals
        reducers.dumps({"f": mod.locked}, registry=world.registry, modules={},
                       user_module_names={"umod"})
    assert e.value.path.startswith("state['f'].") and e.value.type_name == "_thread.lock"
    gmod = world.module("gmod", """
        class Gen:
            def __init__(self):
                self.it = (i for i in range(3))
    """)
    g = gmod.Gen()
    next(g.it)
    data, bufs = reducers.dumps({"g": g}, registry=world.registry, modules={"gmod": gmod},
                                reducers={types.GeneratorType: lambda gen: (list, ([1, 2],))})
    assert reducers.loads(data, bufs, recompiler=Recompiler(compile_fn))["g"].it == [1, 2]


def test_module_dict_held_directly_and_saved_again(world):
    world.module("helper", """
        def double(x):
            return 2 * x
    """)
    main = world.module("__main__", """
        import helper
        counter = {"n": 0}
        def bump():
            counter["n"] += 1
            return helper.double(counter["n"])
    """, main=True)
    main.bump()
    # A module frame's state is its globals dict itself.
    data, bufs = world.dumps({"f_globals": main.__dict__, "helper_globals":
                              world.modules["helper"].__dict__})
    world.forget()
    restore_registry = CodeRegistry()
    main2 = types.ModuleType("__main__")
    loader = reducers.Loader(io.BytesIO(data), buffers=bufs, main_module=main2,
                             recompiler=Recompiler(compile_fn, registry=restore_registry))
    s = loader.load_state()
    assert s["f_globals"] is main2.__dict__
    assert s["helper_globals"] is sys.modules["helper"].__dict__ is loader.modules["helper"].__dict__
    assert main2.bump() == 4
    # Suspended again: the restored program is saved with the restoring registry.
    data, bufs = reducers.dumps({"g": main2.__dict__}, registry=restore_registry,
                                modules={"__main__": main2, "helper": sys.modules["helper"]})
    sys.modules.pop("helper")
    main3 = types.ModuleType("__main__")
    s = reducers.loads(data, bufs, recompiler=Recompiler(compile_fn), main_module=main3)
    assert s["g"] is main3.__dict__ and main3.bump() == 6
    assert main3.bump.__code__ is not main2.bump.__code__


def test_module_with_its_own_class(world):
    mod = world.module("umod", """
        import sys, types
        _hidden = 21
        class Mod(types.ModuleType):
            @property
            def answer(self):
                return _hidden * 2
        sys.modules[__name__].__class__ = Mod
    """)
    assert mod.answer == 42
    state, _ = world.roundtrip({"m": mod})
    m2 = state["m"]
    assert m2 is sys.modules["umod"] and type(m2) is m2.Mod and m2.answer == 42


# --- library globals of built-in types, by reference --------------------------------------

def test_library_globals_of_builtin_types_keep_their_identity():
    import argparse
    import functools
    import logging
    state = {"suppress": argparse.SUPPRESS, "levels": logging._nameToLevel,
             "assigned": functools.WRAPPER_ASSIGNMENTS, "plain": "==SUPPRESS==" + "",
             "mine": {"a": 1}}
    data, buffers = reducers.dumps(state)
    back = reducers.loads(data, buffers)
    assert back["suppress"] is argparse.SUPPRESS
    assert back["levels"] is logging._nameToLevel
    assert back["assigned"] is functools.WRAPPER_ASSIGNMENTS
    # An equal object that is not the library's stays a copy, and the program's own
    # dict is never the library's.
    assert back["plain"] == "==SUPPRESS==" and back["mine"] == {"a": 1}
    assert back["mine"] is not state["mine"]


def test_the_pickler_has_the_native_hook_and_names_the_global():
    import argparse
    assert reducers._librefs is not None, "the native module _librefs is not built"
    pid = reducers._library_ref("argparse", "SUPPRESS", argparse.SUPPRESS, str)
    assert pid == ("lib", "argparse", "SUPPRESS", argparse.SUPPRESS)
    assert pid[3] is not argparse.SUPPRESS       # the id carries a copy, not the object
    # CPython's own singletons and interned names say nothing: no reference.
    assert reducers._library_ref("m", "K", "x", str) is None
    assert reducers._library_ref("m", "K", "name_like", str) is None
    assert reducers._library_ref("m", "__doc__", "some text", str) is None
    assert reducers._library_ref("m", "K", (), tuple) is None


def test_a_library_value_that_changed_loads_as_the_saved_value(monkeypatch):
    import argparse
    data, buffers = reducers.dumps({"s": argparse.SUPPRESS})
    monkeypatch.setattr(argparse, "SUPPRESS", "==CHANGED==")
    assert reducers.loads(data, buffers)["s"] == "==SUPPRESS=="


def test_a_library_dict_that_is_gone_is_refused_by_name(monkeypatch):
    import logging
    data, buffers = reducers.dumps({"d": logging._nameToLevel})
    monkeypatch.delattr(logging, "_nameToLevel")
    with pytest.raises(pickle.UnpicklingError, match=r"logging\._nameToLevel is gone"):
        reducers.loads(data, buffers)
