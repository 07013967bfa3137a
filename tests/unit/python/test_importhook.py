"""_portal.run.importhook: user modules import instrumented, everything else (spec,
attributes, namespace packages, reload, resources, tracebacks, getsource) as without
the hook; the instrumented code is cached apart from python's own .pyc.

Each case runs in a fresh /usr/bin/python3 so that sys.modules, sys.meta_path and
the bytecode-writing settings are clean."""
import hashlib
import hmac
import json
import marshal
import os
import subprocess
import sys
import textwrap
from importlib.util import MAGIC_NUMBER

import pytest

# The interpreter's .pyc tag (cpython-311, cpython-313).
TAG = sys.implementation.cache_tag

import _portal
from _portal.run import importhook

PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(_portal.__file__)))

FILES = {
    "app.py": """\
        def f(n):
            total = 0
            for i in range(n):
                total += i
            return total

        def boom():
            for i in range(3):
                if i == 1:
                    raise ValueError(i)
        """,
    "pkg/__init__.py": """\
        LOOPED = [i for i in range(2)]
        for _i in range(2):
            pass
        def f():
            while False:
                pass
        """,
    "pkg/sub.py": """\
        def f():
            for c in "ab":
                pass
        """,
    "pkg/data.txt": "resource text\n",
    "nspkg/part.py": """\
        def f():
            for c in "ab":
                pass
        """,
    "time.py": "raise AssertionError('the builtin time must win')\n",
    "bad.py": "x = 1\ny = (\n",
    "sp/site-packages/libmod.py": """\
        def f():
            for c in "ab":
                pass
        """,
    "main.py": """\
        for i in range(2):
            pass
        """,
}

DRIVER = r"""
import builtins, importlib, importlib.resources, inspect, json, linecache, sys
import traceback
from importlib.machinery import SourceFileLoader
mode, proj = sys.argv[1], sys.argv[2]
opts = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
sys.path[:0] = [proj, proj + "/sp/site-packages"]
builtins.__portal_rescue__ = lambda line: None
fired = []
builtins.__portal_fake_oom__ = fired.append
from _portal.run import importhook, instrument, usercode
compiled = []
_orig = instrument.compile_user_source
def counting(source, filename, *a, **k):
    compiled.append(filename[len(proj) + 1:])
    return _orig(source, filename, *a, **k)
instrument.compile_user_source = counting
class Registry:                     # stand-in of codeindex.CodeRegistry
    def __init__(self):
        self.seen = []
    def register(self, filename, code, source):
        assert code.co_filename == filename and isinstance(source, bytes)
        with open(filename, "rb") as fh:
            assert fh.read() == source
        self.seen.append(filename[len(proj) + 1:])
class Spec:                         # stand-in of fake_oom.Spec / FakeOom
    def __init__(self, suffix, line):
        self.suffix, self.line, self.hit, self.kind = suffix, line, 1, "memory"
class FakeOom:
    def __init__(self, specs):
        self.specs = specs
registry = Registry()
if mode == "hook":
    fake = [tuple(x) for x in opts.get("fake", [])] or None
    if fake and opts.get("fake_objects"):
        fake = FakeOom([Spec(*x) for x in fake])
    importhook.install(usercode.UserCode([proj]), fake,
                       registry=registry if opts.get("registry") else None)
out = {"meta_path": [type(f).__name__ if not isinstance(f, type) else f.__name__
                     for f in sys.meta_path]}

def walk_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= walk_names(c)
    return names

def info(m):
    spec = m.__spec__
    ssl = spec.submodule_search_locations
    return dict(
        file=getattr(m, "__file__", None), cached=getattr(m, "__cached__", None),
        name=spec.name, origin=spec.origin, spec_cached=spec.cached,
        has_location=spec.has_location, parent=spec.parent,
        ssl=None if ssl is None else list(ssl),
        path=list(m.__path__) if hasattr(m, "__path__") else None,
        package=m.__package__, sfl=isinstance(m.__loader__, SourceFileLoader),
        loader_is_spec_loader=m.__loader__ is spec.loader)

mods = {}
for name in opts.get("modules", ["app", "pkg", "pkg.sub", "nspkg", "nspkg.part",
                                 "libmod", "time"]):
    m = importlib.import_module(name)
    mods[name] = m
    out.setdefault("info", {})[name] = info(m)
    f = getattr(m, "f", None)
    out.setdefault("instrumented", {})[name] = (
        "__portal_rescue__" in walk_names(f.__code__) if f else None)
    out.setdefault("fake_in_code", {})[name] = (
        "__portal_fake_oom__" in walk_names(f.__code__) if f else None)

if "app" in mods:
    app = mods["app"]
    out["f"] = app.f(4)
    try:
        app.boom()
    except ValueError:
        out["tb"] = traceback.format_exc()
    out["getsource"] = inspect.getsource(app.boom)
    out["linecache"] = linecache.getline(app.__file__, 7)
    out["resource"] = importlib.resources.files("pkg").joinpath("data.txt").read_text()
    out["time_origin"] = mods["time"].__spec__.origin
if opts.get("bad"):
    try:
        import bad
    except SyntaxError:
        out["bad_tb"] = traceback.format_exc()
    import runpy
    try:
        runpy.run_module("bad")       # as python -m does: get_code called directly
    except SyntaxError:
        out["bad_runpy_tb"] = traceback.format_exc()
    try:
        runpy.run_module("app")
    except Exception:
        raise
    out["runpy_code_instrumented"] = "__portal_rescue__" in walk_names(
        runpy._get_module_details("app")[2])
if opts.get("reload"):
    import app
    with open(app.__file__, "a") as fh:
        fh.write("\nRELOADED = 1\ndef g():\n    for i in ():\n        pass\n")
    importlib.reload(app)
    out["reloaded"] = [getattr(app, "RELOADED", None),
                       "__portal_rescue__" in walk_names(app.g.__code__),
                       type(app.__loader__).__name__, app.__spec__.origin]
if opts.get("main"):
    for path in opts["main"]:
        code = importhook.compile_main(path)
        out.setdefault("main", []).append(
            [code.co_filename, "__portal_rescue__" in code.co_names])
if opts.get("call_f"):
    for name in opts["call_f"]:
        mods[name].f()
out["fired"] = fired
out["compiled"] = compiled
out["registered"] = registry.seen
print(json.dumps(out))
"""


@pytest.fixture
def proj(tmp_path):
    root = tmp_path / "proj"
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    (tmp_path / "driver.py").write_text(DRIVER)
    return root


def run(proj, mode, write_bytecode=True, flags=(), **opts):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = PKG_PARENT
    env["PORTAL_HOME"] = str(proj.parent / "portal-home")
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [sys.executable, *flags, str(proj.parent / "driver.py"), mode, str(proj),
           json.dumps(opts)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def pyc_dirs(proj):
    return [proj / "__pycache__", proj / "pkg" / "__pycache__",
            proj / "nspkg" / "__pycache__", proj / "sp" / "site-packages" / "__pycache__"]


def listing(proj):
    return sorted(str(p.relative_to(proj)) for d in pyc_dirs(proj) if d.is_dir()
                  for p in d.iterdir())


# --- behaviour as without the hook ---------------------------------------------------------

def test_same_modules_as_plain_import(proj):
    plain = run(proj, "plain", write_bytecode=False, bad=True)
    hook = run(proj, "hook", write_bytecode=False, bad=True)
    for key in ("info", "f", "tb", "getsource", "linecache", "resource", "time_origin",
                "bad_tb", "bad_runpy_tb"):
        assert hook[key] == plain[key], key
    assert "in source_to_code" in hook["bad_runpy_tb"]      # importlib's own frames
    assert hook["runpy_code_instrumented"] and not plain["runpy_code_instrumented"]
    assert hook["time_origin"] == "built-in"
    assert plain["instrumented"] == {"app": False, "pkg": False, "pkg.sub": False,
                                     "nspkg": None, "nspkg.part": False,
                                     "libmod": False, "time": None}
    assert hook["instrumented"] == {"app": True, "pkg": True, "pkg.sub": True,
                                    "nspkg": None, "nspkg.part": True,
                                    "libmod": False, "time": None}
    assert hook["info"]["nspkg"]["path"] == [str(proj / "nspkg")]
    assert "SyntaxError" in hook["bad_tb"] and "importlib" not in hook["bad_tb"]
    # our finder sits right before PathFinder
    mp = hook["meta_path"]
    assert mp.index("PortalFinder") + 1 == mp.index("PathFinder")
    assert mp.index("BuiltinImporter") < mp.index("PortalFinder")
    assert mp.index("FrozenImporter") < mp.index("PortalFinder")
    assert sorted(set(hook["compiled"])) == ["app.py", "bad.py", "nspkg/part.py",
                                             "pkg/__init__.py", "pkg/sub.py"]


def test_reload(proj):
    out = run(proj, "hook", write_bytecode=True, reload=True)
    assert out["reloaded"] == [1, True, "PortalLoader", str(proj / "app.py")]


def test_install_is_idempotent_and_uninstalls():
    before = list(sys.meta_path)
    try:
        importhook.install(None)
        importhook.install(None)
        assert sum(isinstance(f, importhook.PortalFinder) for f in sys.meta_path) == 1
    finally:
        importhook.uninstall()
    assert sys.meta_path == before


# --- the cache --------------------------------------------------------------------------------

def _load_pyc_names(path):
    data = path.read_bytes()
    assert data[:4] == MAGIC_NUMBER
    code = marshal.loads(data[16:])
    names = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names |= set(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


def cache_dir(proj):
    return proj.parent / "portal-home" / "cache" / "instrumented"


def entries(proj):
    d = cache_dir(proj)
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def entry(proj, stem):
    found = [n for n in entries(proj) if n.startswith(stem + "-")]
    assert len(found) == 1, entries(proj)
    return cache_dir(proj) / found[0]


def test_normal_pyc_never_written_or_used(proj):
    first = run(proj, "hook")
    assert first["instrumented"]["app"]
    names = listing(proj)
    # no python .pyc for the user's modules, and none of ours beside the sources
    # (a directory others may write into); libmod (not user code) is compiled by
    # python itself as usual
    assert not any("portal" in n for n in names), names
    assert f"__pycache__/app.{TAG}.pyc" not in names
    assert f"sp/site-packages/__pycache__/libmod.{TAG}.pyc" in names
    # ours live in the store, private
    assert len(entries(proj)) == 4 and all(".portal-1.pyc" in n for n in entries(proj))
    assert os.stat(cache_dir(proj)).st_mode & 0o777 == 0o700
    ours = entry(proj, "app")
    assert ours.read_bytes()[:4] != MAGIC_NUMBER        # python would reject it
    assert os.stat(ours).st_mode & 0o777 == 0o600
    # a plain python then writes and uses its own, uninstrumented
    plain = run(proj, "plain")
    assert not plain["instrumented"]["app"]
    normal = proj / "__pycache__" / f"app.{TAG}.pyc"
    assert "__portal_rescue__" not in _load_pyc_names(normal)
    before = normal.read_bytes(), normal.stat().st_mtime_ns
    # the hook neither loads nor replaces python's .pyc
    again = run(proj, "hook")
    assert again["instrumented"]["app"] and again["compiled"] == []
    assert (normal.read_bytes(), normal.stat().st_mtime_ns) == before
    assert "__portal_rescue__" not in _load_pyc_names(normal)


def test_second_import_does_not_reparse(proj):
    first = run(proj, "hook", main=[str(proj / "main.py")])
    assert sorted(first["compiled"]) == ["app.py", "main.py", "nspkg/part.py",
                                         "pkg/__init__.py", "pkg/sub.py"]
    second = run(proj, "hook", main=[str(proj / "main.py")])
    assert second["compiled"] == []
    assert second["instrumented"] == first["instrumented"]
    assert second["tb"] == first["tb"]
    # a changed source is compiled again, and only it
    with open(proj / "pkg" / "sub.py", "a") as f:
        f.write("# changed\n")
    third = run(proj, "hook")
    assert third["compiled"] == ["pkg/sub.py"]
    # the key is the content: a touch does not recompile, a change of the same size
    # with the old times does
    app = proj / "app.py"
    st = os.stat(app)
    os.utime(app, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert run(proj, "hook")["compiled"] == []
    st = os.stat(app)
    app.write_text(app.read_text().replace("total = 0", "total = 1"))
    os.utime(app, ns=(st.st_atime_ns, st.st_mtime_ns))
    out = run(proj, "hook")
    assert out["compiled"] == ["app.py"] and out["f"] == 7
    # -O compiles (and caches) separately from the plain level
    assert sorted(run(proj, "hook", flags=["-O"])["compiled"]) == \
        ["app.py", "nspkg/part.py", "pkg/__init__.py", "pkg/sub.py"]
    assert run(proj, "hook", flags=["-O"])["compiled"] == []
    assert run(proj, "hook")["compiled"] == []


def test_cache_key_includes_fake_oom_specs(proj):
    run(proj, "hook")
    out = run(proj, "hook", fake=[["app.py", 4]])
    assert out["compiled"] == ["app.py"]
    assert out["fake_in_code"]["app"]
    assert run(proj, "hook", fake=[["app.py", 4]])["compiled"] == []
    out = run(proj, "hook")
    assert out["compiled"] == ["app.py"] and not out["fake_in_code"]["app"]


@pytest.mark.parametrize("write_bytecode", [True, False])
def test_the_cache_is_the_same_with_and_without_dont_write_bytecode(proj, write_bytecode):
    out = run(proj, "hook", write_bytecode=write_bytecode)
    assert out["instrumented"]["app"]
    assert not any("portal" in n for n in listing(proj))
    assert len(entries(proj)) == 4
    assert run(proj, "hook", write_bytecode=not write_bytecode)["compiled"] == []


def test_an_entry_is_sealed_with_the_users_key(proj):
    run(proj, "hook")
    key = (proj.parent / "portal-home" / "key").read_bytes()
    data = entry(proj, "app").read_bytes()
    body, mac = data[:-32], data[-32:]
    assert hmac.new(key, b"portal-instrumented-code\n" + body, hashlib.sha256).digest() == mac


def _evil_entry(proj, good, marker, key):
    """``good``'s header with code that creates ``marker``, sealed with ``key``."""
    header = good[:_header_len(good)]
    code = compile(f"open({str(marker)!r}, 'w').close()\ndef f(n): return -1\n", "app", "exec")
    body = header + marshal.dumps(code)
    return body + hmac.new(key, b"portal-instrumented-code\n" + body, hashlib.sha256).digest()


def _header_len(data):
    from _portal.run.importhook import _MAGIC
    fixed = len(_MAGIC) + 4 + 4 + 8 + 8
    n = int.from_bytes(data[fixed:fixed + 4], "little")
    return fixed + 4 + n


@pytest.mark.parametrize("how", ["unsealed", "another-key", "truncated-mac", "symlink", "fifo",
                                 "group-writable"])
def test_a_planted_or_bad_entry_is_never_run(proj, tmp_path, how):
    run(proj, "hook")
    path = entry(proj, "app")
    good = path.read_bytes()
    marker = tmp_path / "planted-code-ran"
    key = (proj.parent / "portal-home" / "key").read_bytes()
    evil = _evil_entry(proj, good, marker, os.urandom(32) if how == "another-key" else key)
    path.unlink()
    if how == "unsealed":
        path.write_bytes(evil[:-32])
    elif how == "another-key":
        path.write_bytes(evil)
    elif how == "truncated-mac":
        path.write_bytes(evil[:-1])
    elif how == "symlink":                 # a sealed entry, but reached through a link
        elsewhere = tmp_path / "elsewhere.pyc"
        elsewhere.write_bytes(evil)
        os.symlink(elsewhere, path)
    elif how == "fifo":
        os.mkfifo(path, 0o600)
    else:                                  # sealed, but others may change it
        path.write_bytes(evil)
        os.chmod(path, 0o620)
    out = run(proj, "hook")
    assert not marker.exists()
    assert out["compiled"] == ["app.py"] and out["f"] == 6 and out["instrumented"]["app"]


def test_no_cache_without_a_trusted_store(proj):
    home = proj.parent / "portal-home"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o777)                    # others may write into it: refused
    try:
        out = run(proj, "hook")
        assert out["instrumented"]["app"] and out["f"] == 6
        assert os.listdir(home) == []        # nothing written: no cache, no key
        assert sorted(run(proj, "hook")["compiled"]) == ["app.py", "nspkg/part.py",
                                                         "pkg/__init__.py", "pkg/sub.py"]
    finally:
        os.chmod(home, 0o700)


def test_unwritable_cache_dir_is_skipped_silently(proj):
    (proj.parent / "portal-home" / "cache").mkdir(parents=True, mode=0o700)
    cache_dir(proj).write_text("not a directory")
    out = run(proj, "hook")
    assert out["instrumented"]["app"]
    assert run(proj, "hook")["compiled"].count("app.py") == 1
    assert cache_dir(proj).read_text() == "not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_dir_is_skipped_silently(proj):
    os.chmod(proj, 0o555)
    try:
        out = run(proj, "hook")
        assert out["instrumented"]["app"]
    finally:
        os.chmod(proj, 0o755)


def test_corrupt_cache_is_recompiled(proj):
    run(proj, "hook")
    ours = entry(proj, "app")
    data = ours.read_bytes()
    ours.write_bytes(data[:len(data) // 2])
    out = run(proj, "hook")
    assert out["compiled"] == ["app.py"] and out["instrumented"]["app"]
    assert ours.read_bytes() == data
    ours.write_bytes(b"garbage")
    assert run(proj, "hook")["compiled"] == ["app.py"]
    # no temporary files left behind
    assert not [n for n in entries(proj) if ".tmp" in n]


def test_pycache_prefix_gets_nothing_of_ours(proj, tmp_path):
    prefix = tmp_path / "prefix"
    out = run(proj, "hook", flags=["-X", f"pycache_prefix={prefix}"])
    assert out["instrumented"]["app"]
    assert listing(proj) == []
    found = [p.name for p in prefix.rglob("*.pyc")]
    assert not any("portal" in n for n in found) and f"app.{TAG}.pyc" not in found
    assert len(entries(proj)) == 4


# --- compile_main ---------------------------------------------------------------------------

def test_compile_main_uses_the_cache_and_its_own_filename(proj):
    dotted = os.path.join(str(proj), ".", "main.py")
    out = run(proj, "hook", main=[dotted, str(proj / "main.py")])
    assert out["main"] == [[dotted, True], [str(proj / "main.py"), True]]
    assert [c for c in out["compiled"] if c.endswith("main.py")] == ["./main.py"]
    assert entry(proj, "main").exists()
    assert not (proj / "__pycache__" / f"main.{TAG}.pyc").exists()


def test_compile_main_syntax_error_is_pythons(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("for x in y:\nprint(x)\n")
    with pytest.raises(SyntaxError) as plain:
        compile(bad.read_bytes(), str(bad), "exec", dont_inherit=True)
    with pytest.raises(SyntaxError) as inst:
        importhook.compile_main(str(bad), fake_oom=None)
    e, p = inst.value, plain.value
    assert (e.msg, e.filename, e.lineno, e.offset, e.text) == \
        (p.msg, p.filename, p.lineno, p.offset, p.text)


# --- fake OOM ---------------------------------------------------------------------------------

def test_fake_oom_specs_select_files(proj):
    out = run(proj, "hook", write_bytecode=False,
              fake=[["app.py", 4], ["site-packages/libmod.py", 3], ["nope.py", 1]],
              call_f=["libmod"])
    assert out["fake_in_code"]["app"] and out["instrumented"]["app"]
    # a non-user file named by a spec gets the call, not the loop wrap
    assert out["fake_in_code"]["libmod"] and not out["instrumented"]["libmod"]
    assert not out["fake_in_code"]["pkg.sub"]
    # app.f(4) ran line 4 four times; libmod.f() line 3 twice
    assert out["fired"] == [0, 0, 0, 0, 1, 1]


def test_fake_oom_objects_and_registry(proj):
    out = run(proj, "hook", fake=[["app.py", 4]], fake_objects=True, registry=True,
              main=[str(proj / "main.py")])
    assert out["fake_in_code"]["app"] and out["fired"] == [0, 0, 0, 0]
    # every instrumented module and the main script, not python's own compilations
    assert sorted(out["registered"]) == ["app.py", "main.py", "nspkg/part.py",
                                         "pkg/__init__.py", "pkg/sub.py"]
    # from the cache too
    again = run(proj, "hook", fake=[["app.py", 4]], fake_objects=True, registry=True,
                main=[str(proj / "main.py")])
    assert again["compiled"] == [] and sorted(again["registered"]) == \
        sorted(out["registered"])


def test_compile_main_with_source_given(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    script = tmp_path / "s.py"
    script.write_bytes(b"for i in range(2):\n    pass\n")
    seen = []

    class Reg:
        def register(self, filename, code, source):
            seen.append((filename, source))
    # the bytes given are what is compiled (not re-read), and registered
    code = importhook.compile_main(str(script), b"while 0:\n    pass\n", fake_oom=None,
                                   registry=Reg())
    assert code.co_filename == str(script) and "__portal_rescue__" in code.co_names
    assert seen == [(str(script), b"while 0:\n    pass\n")]
    assert code.co_firstlineno == 1
    code = importhook.compile_main(str(script), fake_oom=[("s.py", 1)], registry=None)
    assert "__portal_fake_oom__" in code.co_names


def test_fake_oom_lines_helper():
    specs = [("train.py", 3), ("pkg/m.py", 5), ("train.py", 9)]
    assert importhook.fake_oom_lines("/x/train.py", specs) == ((0, 3), (2, 9))
    assert importhook.fake_oom_lines("/x/pkg/m.py", specs) == ((1, 5),)
    assert importhook.fake_oom_lines("/x/other.py", specs) is None
    assert importhook.fake_oom_lines("/x/train.py", None) is None
