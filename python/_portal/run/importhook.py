"""Import hook: the user's own modules are compiled instrumented (docs/architecture.md, "How a suspension and a resume work").

install() puts a meta-path finder in front of importlib's PathFinder.  It asks
PathFinder for the spec (so that the spec, __file__, __cached__, __path__, namespace
packages and reload are python's own) and, for a plain source module of the user's
code (a SourceFileLoader spec whose origin is a .py file that UserCode accepts),
swaps in PortalLoader, a SourceFileLoader whose get_code() returns the code of
instrument.compile_user_source().  get_source, get_resource_reader, is_package,
exec_module and friends are SourceFileLoader's.

The finder sits right before PathFinder, not first of all: BuiltinImporter and
FrozenImporter keep precedence (a user's time.py still loses to the builtin `time`,
the frozen `os` stays frozen), and finders that site or the program put in front of
PathFinder keep their place.

Instrumented code is cached, never in python's own .pyc (name or format) and never
beside the source (a shared project directory, a __pycache__ others can write
into): only inside the job store, once it is trusted (store/trust.py), in
$PORTAL_HOME/cache/instrumented/ (0700), under a name derived from the source's
absolute path and the -O level.  An entry is HEADER CODE MAC: a header of its
own (a magic that python rejects, the instrumenter version, flags (wrapped or
not, -O level), the source's SipHash and length (the source is read on every
import, as the code registry needs it anyway, so a cache is never stale whatever
the file times say) and the fake-OOM lines), the marshalled code, and an
HMAC-SHA256 with the user's key (signing.py) over both: a cache entry is code,
so one the user did not write is never loaded.  Entries are opened
O_NOFOLLOW|O_NONBLOCK and checked on the descriptor; a bad entry (another
owner, a wrong MAC, damaged) is ignored and recompiled.  No trusted store, or no
key: no cache (every start compiles again; still correct).  Written atomically
(store.atomic_write), silently nothing on any error.

When install() is given a codeindex.CodeRegistry, every instrumented module (and the
main script, compile_main) is registered there with the source it came from.
"""
import _imp
import marshal
import os
import sys
# importlib's own objects, taken where importlib takes them: importing importlib
# (or importlib.machinery) here would import it for the program too.
_bootstrap_external = sys.modules["_frozen_importlib_external"]
PathFinder = _bootstrap_external.PathFinder
SourceFileLoader = _bootstrap_external.SourceFileLoader
MAGIC_NUMBER = _bootstrap_external.MAGIC_NUMBER

import _portal as _package  # noqa: E402  (kept: start-up takes it out of sys.modules)
import _portal.run as _run_package  # noqa: E402  (the instrumenter's folder, kept the same way)
from _portal import INSTRUMENT_VERSION  # noqa: E402  (instrument.py imports ast: only on a cache miss)
# Bound now, at start-up: a module imported later by the program must find the
# very store and key state of this run (start-up forgets Portal's modules).
from _portal.store import signing, trust as store  # noqa: E402

FORMAT = 1
_MAGIC = b"PORTAL" + bytes((FORMAT, 0)) + MAGIC_NUMBER
_FLAG_WRAP = 1

# What install() was given: compile_main() uses the same fake-OOM specs.
_installed = {"user_code": None, "fake_oom": None, "finder": None, "registry": None}


# --- fake-OOM specs -----------------------------------------------------------------------

def _spec_list(fake_oom):
    """The specs of fake_oom: a FakeOom (its .specs), or a sequence of specs."""
    if not fake_oom:
        return ()
    specs = getattr(fake_oom, "specs", fake_oom)
    return tuple(specs)


def _spec_fields(spec):
    """(path_suffix, line) of a fake-OOM spec: a tuple (suffix, line, ...) or an object
    with .suffix (or .path_suffix) and .line (fake_oom.Spec)."""
    if isinstance(spec, (tuple, list)):
        return os.fspath(spec[0]), int(spec[1])
    suffix = getattr(spec, "suffix", None)
    if suffix is None:
        suffix = spec.path_suffix
    return os.fspath(suffix), int(spec.line)


def fake_oom_lines(path, fake_oom):
    """((spec_index, line), ...) of the specs whose path suffix ends `path` (the file
    name the code is compiled with, as fake_oom.Spec.matches does); None when none."""
    if not fake_oom or not path:
        return None
    out = []
    for index, spec in enumerate(_spec_list(fake_oom)):
        suffix, line = _spec_fields(spec)
        if suffix and path.endswith(suffix):
            out.append((index, line))
    return tuple(out) or None


# --- the instrumented-bytecode cache ------------------------------------------------------

MAX_ENTRY_BYTES = 64 << 20      # an entry larger than this is not one of ours
_MAC_BYTES = 32
# {"dir": the cache directory once checked (or False: none), "key": the user's key
#  (or False: none)}; each looked up once per process.
_cache = {}


def _cache_dir(create):
    """The cache directory inside the trusted store, or None: no trusted store
    (refused, or missing and not ``create``) means no cache."""
    known = _cache.get("dir")
    if known or (known is False and not create):
        return known or None
    try:
        home = store.require(create=True) if create else store.trusted_home()
        if home is None:
            _cache["dir"] = False
            return None
        path = os.path.join(home, "cache", "instrumented")
        if create:
            store.make_private_dir(path)
        else:
            os.close(store.open_dir(path))
    except (OSError, store.StoreError):
        _cache["dir"] = False
        return None
    _cache["dir"] = path
    return path


def _cache_key(create):
    """The user's signing key, or None (no key yet and not ``create``, or refused)."""
    known = _cache.get("key")
    if known or (known is False and not create):
        return known or None
    try:
        key = signing.load_or_create_key() if create else signing.load_key()
    except (OSError, store.PortalError):
        key = None
    _cache["key"] = key or False
    return key


def portal_cache_path(source_path, create=False):
    """Where the instrumented code of source_path is cached (None: nowhere)."""
    directory = _cache_dir(create)
    if directory is None:
        return None
    absolute = os.path.abspath(source_path)
    key = _imp.source_hash(_HASH_KEY, absolute.encode("utf-8", "surrogateescape")).hex()
    stem = os.path.splitext(os.path.basename(absolute))[0][:40]
    level = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(directory, f"{stem}-{key}{level}.portal-{FORMAT}.pyc")


_HASH_KEY = int.from_bytes(_MAGIC[:8], "little")


def _header(source, wrap, fake):
    """The cache file's header: what the cached code depends on.  The source is
    identified by its content (SipHash, as python's hash-based .pyc) and length,
    so a cache is never stale, whatever the file times say."""
    flags = (_FLAG_WRAP if wrap else 0) | (sys.flags.optimize << 1)
    fake_bytes = repr(tuple(fake or ())).encode()
    return b"".join((
        _MAGIC,
        INSTRUMENT_VERSION.to_bytes(4, "little"),
        flags.to_bytes(4, "little"),
        _imp.source_hash(_HASH_KEY, source),
        len(source).to_bytes(8, "little"),
        len(fake_bytes).to_bytes(4, "little"),
        fake_bytes,
    ))


def _read_cache(cache_path, header):
    """The cached code, or None: missing, not the user's own file (owner, mode,
    a link, a FIFO), another header, a MAC not made with the user's key, damaged."""
    key = _cache_key(False)
    if key is None:
        return None
    try:
        data = store.read_checked(cache_path, MAX_ENTRY_BYTES)
    except (OSError, store.StoreError):
        return None
    if len(data) < len(header) + _MAC_BYTES or data[:len(header)] != header:
        return None
    body, mac = data[:-_MAC_BYTES], data[-_MAC_BYTES:]
    if not signing.compare_digest(signing.code_mac(key, body), mac):
        return None
    try:
        code = marshal.loads(memoryview(body)[len(header):])
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, type(_read_cache.__code__)) else None


def _write_cache(cache_path, body):
    """Seal ``body`` (header + code) with the user's key and write it atomically;
    silently nothing on any error (no key can be made, a full disk)."""
    key = _cache_key(True)
    if key is None:
        return False
    try:
        store.atomic_write(cache_path, body + signing.code_mac(key, body), durable=False)
    except OSError:
        return False
    return True


def _instrument():
    """The instrumenter, imported on the first cache miss.  That may come while the
    program runs (a user module imported late), after start-up took Portal's
    modules out of sys.modules and its directory out of sys.path, where a plain
    `from _portal.run import instrument` fails: the package is put back for the import,
    and what the import added (instrument, ast ...) is forgotten again, as start-up
    forgets it; Portal keeps its own references."""
    module = getattr(_run_package, "instrument", None)
    if module is not None:
        return module
    before = set(sys.modules)
    put_back = (sys.modules.get("_portal") is not _package
                or sys.modules.get("_portal.run") is not _run_package)
    if put_back:
        sys.modules["_portal"] = _package
        sys.modules["_portal.run"] = _run_package
    try:
        from _portal.run import instrument
    finally:
        if put_back:
            for name in [n for n in sys.modules if n not in before]:
                del sys.modules[name]
    return instrument


def load_code(source_path, wrap=True, fake=None, source=None, read=None, registry=None):
    """(code, source) where code is the instrumented code of source_path, from the
    cache if it holds this very source, else compiled (and cached); code is None when
    it does not compile (the caller then raises python's own error by compiling the
    plain source).  source: the source bytes if already read; read: how to read
    them (a loader's get_data), open() by default.  registry: a
    codeindex.CodeRegistry in which wrapped code is registered."""
    if source is None:
        if read is None:
            with open(source_path, "rb") as f:
                source = f.read()
        else:
            source = read(source_path)
    key = source.encode("utf-8", "surrogateescape") if isinstance(source, str) else source
    cache_path = portal_cache_path(source_path)
    header = _header(key, wrap, fake)
    code = _read_cache(cache_path, header) if cache_path is not None else None
    if code is not None:
        _imp._fix_co_filename(code, source_path)
    else:
        try:
            code = _instrument().compile_user_source(source, source_path, fake, wrap=wrap)
        except Exception:
            return None, source
        cache_path = cache_path or portal_cache_path(source_path, create=True)
        if cache_path is not None:
            _write_cache(cache_path, header + marshal.dumps(code))
    if registry is not None and wrap:
        registry.register(source_path, code, key)
    return code, source


# --- loader and finder ----------------------------------------------------------------------

class PortalLoader(SourceFileLoader):
    """SourceFileLoader whose code is instrumented (and cached apart)."""

    def __init__(self, fullname, path, wrap=True, fake_oom=None, registry=None):
        super().__init__(fullname, path)
        self._portal_wrap = wrap
        self._portal_fake = fake_oom
        self._portal_registry = registry

    def _portal_load(self, source_path):
        return load_code(source_path, self._portal_wrap, self._portal_fake, None,
                         self.get_data, self._portal_registry)


# get_code() must look like importlib's own in a traceback.  When the source does not
# compile, python's error is raised the way importlib raises it, through
# SourceLoader.source_to_code -> _call_with_frames_removed(compile, ...), and:
# * under an import statement, the import system hides a chain of importlib frames
#   only when it is unbroken down to _call_with_frames_removed (Python/import.c,
#   remove_importlib_frames): get_code sits in that chain;
# * under runpy (python -m), nothing is hidden and the traceback names
#   `<frozen importlib._bootstrap_external>`, line N, in get_code, N being the line of
#   importlib's call of source_to_code.
# So get_code is compiled under importlib's file name, with its call of
# source_to_code on that same line.
_GET_CODE = """
def get_code(self, fullname):
    source_path = self.get_filename(fullname)
    code, source = self._portal_load(source_path)
    if code is None:
        code = self.source_to_code(source, source_path)
    return code
"""
_GET_CODE_CALL_LINE = 6


def _importlib_source_to_code_line():
    """The line of SourceLoader.get_code's call of self.source_to_code (1074 in 3.11.2)."""
    # Only the tables (opcode): start-up does not pay for the bytecode layer's decoder.
    from types import SimpleNamespace
    from _portal.bytecode.tables import T
    code = _bootstrap_external.SourceLoader.get_code.__code__
    try:
        index = code.co_names.index("source_to_code")
    except ValueError:
        return None
    raw = code.co_code
    ops = {T.OPMAP[name] for name in ("LOAD_METHOD", "LOAD_ATTR") if name in T.OPMAP}
    positions = list(code.co_positions())
    for i in range(0, len(raw), 2):
        if raw[i] in ops:
            # the name index as the version encodes it (3.11 LOAD_METHOD's argument;
            # 3.13 LOAD_ATTR's argument >> 1); get_code has no EXTENDED_ARG
            attr = T.attribute(SimpleNamespace(opname=T.OPNAME[raw[i]], arg=raw[i + 1]))
            if attr is not None and attr[0] == index:
                return positions[i // 2][0]
    return None


def _make_get_code():
    line = _importlib_source_to_code_line()
    pad = "\n" * (line - _GET_CODE_CALL_LINE) if line and line > _GET_CODE_CALL_LINE else ""
    ns = {"__name__": __name__}
    exec(compile(pad + _GET_CODE, "<frozen importlib._bootstrap_external>", "exec"), ns)
    fn = ns["get_code"]
    fn.__qualname__ = "PortalLoader.get_code"
    fn.__doc__ = "The module's instrumented code (importlib's get_code, instrumented)."
    return fn


PortalLoader.get_code = _make_get_code()


class PortalFinder:
    """Meta-path finder: PathFinder's spec, with PortalLoader for the user's code."""

    def __init__(self, user_code, fake_oom=None, registry=None, patches=None):
        self.user_code = user_code
        self.fake_oom = _spec_list(fake_oom) or None
        self.registry = registry
        self.patches = patches or None

    def find_spec(self, fullname, path=None, target=None):
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None:
            return None
        loader = spec.loader
        if type(loader) is not SourceFileLoader:
            return spec
        if self.patches is not None and fullname in self.patches:
            spec.loader = PatchingLoader(loader.name, loader.path, self.patches[fullname])
            return spec
        origin = spec.origin
        if not isinstance(origin, str) or not origin.endswith(".py"):
            return spec
        wrap = self.user_code is not None and self.user_code.is_user_file(origin)
        fake = fake_oom_lines(origin, self.fake_oom)
        if wrap or fake:
            spec.loader = PortalLoader(loader.name, loader.path, wrap, fake, self.registry)
        return spec

    def invalidate_caches(self):
        pass        # PathFinder, still on sys.meta_path, clears its own caches

    def __repr__(self):
        return f"<PortalFinder {self.user_code!r}>"


class PatchingLoader(SourceFileLoader):
    """A library module's own loader that, once the module has run, hands it to a
    plug-in's patch (plugins.import_patches(): a DataLoader iterator notes the RNG
    states its epoch starts from).  A patch that fails leaves the module as it is."""

    def __init__(self, fullname, path, patch):
        super().__init__(fullname, path)
        self._portal_patch = patch

    def exec_module(self, module):
        super().exec_module(module)
        try:
            self._portal_patch(module)
        except Exception:
            pass


def install(user_code, fake_oom=None, registry=None, patches=None):
    """Install the finder right before PathFinder on sys.meta_path (replacing one
    installed before).  fake_oom: a fake_oom.FakeOom, or its specs: objects with
    .suffix and .line, or (path_suffix, line) tuples, in spec order (the index is
    what __portal_fake_oom__ receives).  registry: a codeindex.CodeRegistry in which
    every instrumented module's code is registered.  patches: {module name:
    fn(module)} run after those library modules are executed (plugins.import_patches())."""
    uninstall()
    finder = PortalFinder(user_code, fake_oom, registry, patches)
    for i, f in enumerate(sys.meta_path):
        if f is PathFinder:
            sys.meta_path.insert(i, finder)
            break
    else:
        sys.meta_path.append(finder)
    _installed.update(user_code=user_code, fake_oom=finder.fake_oom, finder=finder,
                      registry=registry)
    return finder


def uninstall():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, PortalFinder)]
    _installed.update(user_code=None, fake_oom=None, finder=None, registry=None)


_INSTALLED = object()


def compile_main(path, source=None, fake_oom=_INSTALLED, registry=_INSTALLED):
    """The instrumented code of the main script `path` (its co_filename: the name
    python gives the script), through the same cache; a SyntaxError is python's own
    (compile() of the plain source).  source: its bytes if already read.  fake_oom
    and registry: those given to install() unless given here."""
    if fake_oom is _INSTALLED:
        fake_oom = _installed["fake_oom"]
    if registry is _INSTALLED:
        registry = _installed["registry"]
    path = os.fspath(path)
    code, source = load_code(path, True, fake_oom_lines(path, fake_oom), source,
                             None, registry)
    if code is None:
        code = compile(source, path, "exec", dont_inherit=True)
    return code
