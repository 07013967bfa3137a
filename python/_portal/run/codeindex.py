"""Code objects of the user's own source, named so that another process can find them.

A checkpoint cannot hold the code objects of the user's program by value: the
restoring process must run the very code objects its import hook compiled (the
loop-wrapped ones), so that the functions it rebuilds, the frames it re-enters and
the resume offsets it injects all agree.  So a code object of user code is saved
as a *reference*

    (filename, path, sha256)

where ``path`` is the tuple of ``co_consts`` indices that leads from the module's
code object to it (``()`` is the module code itself) and ``sha256`` the hash of
the source it was compiled from.  The restoring side compiles each file once, with
the same compiler, checks the hash and walks the same path.

- ``CodeIndex(root)``: every code object nested in ``root`` with its path.
- ``CodeRegistry``: filename -> (root code, sha256) for all user code compiled
  in this process; the import hook and the main-script compiler call
  ``register``.  ``REGISTRY`` is the process-wide instance.
- ``Recompiler(compile_fn)``: the restoring side; raises ``CodeChanged`` naming
  the file when its source is missing or differs from the one recorded.
"""
import _thread
import types

__all__ = ["CodeIndex", "CodeRegistry", "Recompiler", "CodeChanged", "REGISTRY",
           "sha256_hex"]

CodeType = types.CodeType


try:
    # Taken once, at start-up (whose imports the program never sees): an import
    # at each call would put _sha256 back into the program's sys.modules when a
    # user module is registered while the program runs (`-m`, a late import).
    from _sha256 import sha256 as _sha256  # builtin: hashlib would load OpenSSL at start-up
except ImportError:
    try:
        from _sha2 import sha256 as _sha256  # CPython 3.12+: one builtin for the SHA-2 family
    except ImportError:  # pragma: no cover
        _sha256 = None


def sha256_hex(data):
    sha256 = _sha256
    if sha256 is None:  # pragma: no cover
        from hashlib import sha256
    return sha256(data).hexdigest()


class CodeIndex:
    """Every code object reachable from ``root_code`` through ``co_consts``.

    Paths are tuples of ``co_consts`` indices from the root (the root's path is
    ``()``).  Lookups by code object are by identity.  A code object that appears
    twice in the tree (CPython does not merge code constants, but a hand-built
    tree could share one) keeps the first path found in depth-first order.
    """

    __slots__ = ("root", "_by_id")

    def __init__(self, root_code):
        if not isinstance(root_code, CodeType):
            raise TypeError(f"CodeIndex needs a code object, not {type(root_code).__name__}")
        self.root = root_code
        by_id = {}
        stack = [(root_code, ())]
        while stack:
            code, path = stack.pop()
            if id(code) in by_id:
                continue
            by_id[id(code)] = (path, code)
            children = [(c, path + (i,)) for i, c in enumerate(code.co_consts)
                        if isinstance(c, CodeType)]
            stack.extend(reversed(children))
        self._by_id = by_id

    def path_of(self, code):
        """The path of ``code`` (by identity); KeyError if it is not in the tree."""
        entry = self._by_id.get(id(code))
        if entry is None or entry[1] is not code:
            raise KeyError(f"code object {getattr(code, 'co_qualname', code)!r} is not "
                           f"inside {self.root.co_filename!r}")
        return entry[0]

    def __contains__(self, code):
        entry = self._by_id.get(id(code))
        return entry is not None and entry[1] is code

    def code_at(self, path):
        """The code object at ``path``; KeyError if the path leads nowhere."""
        code = self.root
        for i in path:
            try:
                code = code.co_consts[i]
            except (IndexError, TypeError):
                code = None
            if not isinstance(code, CodeType):
                raise KeyError(f"no code object at {tuple(path)!r} in "
                               f"{self.root.co_filename!r}")
        return code

    def __iter__(self):
        """(path, code) pairs, root first, in depth-first order."""
        return iter(sorted(self._by_id.values(), key=lambda e: e[0]))

    def __len__(self):
        return len(self._by_id)


class _Generation:
    __slots__ = ("root", "sha256", "_index")

    def __init__(self, root, sha):
        self.root = root
        self.sha256 = sha
        self._index = None

    @property
    def index(self):
        if self._index is None:
            self._index = CodeIndex(self.root)
        return self._index


class CodeRegistry:
    """filename -> (root code object, source sha256) of all user code compiled so far.

    A file compiled again (``importlib.reload``, a restore that recompiles) adds a
    generation.  Code of every generation whose hash equals the latest one resolves
    to a reference; code of an older generation compiled from a different source
    does not (``ref_of`` returns None) since that source no longer exists: such code
    is saved by value (marshal) instead.
    """

    def __init__(self):
        self._files = {}  # filename -> [ _Generation, ... ], latest last
        self._lock = _thread.allocate_lock()

    def register(self, filename, root_code, source_bytes):
        """Record ``root_code`` as compiled from ``source_bytes`` read from ``filename``.

        ``filename`` must be the name passed to ``compile`` (the code objects'
        ``co_filename``)."""
        if not isinstance(root_code, CodeType):
            raise TypeError("register() needs the module's code object")
        if root_code.co_filename != filename:
            raise ValueError(f"code was compiled as {root_code.co_filename!r}, "
                             f"not {filename!r}")
        if isinstance(source_bytes, str):
            source_bytes = source_bytes.encode("utf-8")
        sha = sha256_hex(source_bytes)
        with self._lock:
            gens = self._files.setdefault(filename, [])
            if any(g.root is root_code for g in gens):
                return
            gens.append(_Generation(root_code, sha))

    def __contains__(self, filename):
        return filename in self._files

    def filenames(self):
        return list(self._files)

    def entry(self, filename):
        """(root code, sha256) of the latest compilation of ``filename``."""
        gen = self._files[filename][-1]
        return gen.root, gen.sha256

    def sha256_of(self, filename):
        return self._files[filename][-1].sha256

    def sources(self):
        """{filename: sha256} of the latest compilation of every file (for a manifest)."""
        return {name: gens[-1].sha256 for name, gens in list(self._files.items())}

    def full_ref(self, code):
        """(filename, path, sha256) for a code object of registered user code, else None."""
        gens = self._files.get(code.co_filename)
        if not gens:
            return None
        latest = gens[-1].sha256
        for gen in reversed(gens):
            if gen.sha256 != latest:
                continue
            index = gen.index
            if code in index:
                return code.co_filename, index.path_of(code), gen.sha256
        return None

    def ref_of(self, code):
        """(filename, path) for a code object of registered user code, else None."""
        ref = self.full_ref(code)
        return None if ref is None else ref[:2]

    def is_user_code(self, code):
        return self.full_ref(code) is not None


#: The process-wide registry that the import hook and the main-script compiler fill.
REGISTRY = CodeRegistry()


class CodeChanged(Exception):
    """The source of a saved code reference is missing or is not the one saved."""

    def __init__(self, filename, reason=None):
        self.filename = filename
        self.reason = reason or "has changed since the checkpoint was written"
        super().__init__(filename, self.reason)

    def __str__(self):
        return f"source file {self.filename!r} {self.reason}"


def _read_file(filename):
    with open(filename, "rb") as f:
        return f.read()


class Recompiler:
    """The restoring side of code references.

    ``compile_fn(source_bytes, filename) -> code`` must compile exactly as the
    saving process did (the same instrumentation).  Each file is read, hashed and
    compiled once; with ``registry`` given, the fresh code is registered there so
    that the restored program can be saved again.
    """

    def __init__(self, compile_fn, registry=None, read_fn=_read_file):
        self._compile = compile_fn
        self._registry = registry
        self._read = read_fn
        self._files = {}  # filename -> (sha256, CodeIndex)

    def _load(self, filename, expected_sha256):
        entry = self._files.get(filename)
        if entry is None:
            try:
                source = self._read(filename)
            except FileNotFoundError:
                raise CodeChanged(filename, "is missing") from None
            except OSError as exc:
                raise CodeChanged(filename, f"cannot be read: {exc}") from None
            sha = sha256_hex(source)
            if sha != expected_sha256:
                raise CodeChanged(
                    filename, f"has changed since the checkpoint was written "
                    f"(sha256 {sha[:12]}..., saved {str(expected_sha256)[:12]}...)")
            root = self._compile(source, filename)
            if self._registry is not None:
                self._registry.register(filename, root, source)
            entry = self._files[filename] = (sha, CodeIndex(root))
        elif entry[0] != expected_sha256:
            raise CodeChanged(
                filename, f"was saved from two different sources "
                f"({entry[0][:12]}... and {str(expected_sha256)[:12]}...)")
        return entry[1]

    def root(self, filename, expected_sha256):
        """The freshly compiled module code of ``filename``."""
        return self._load(filename, expected_sha256).root

    def code_for(self, filename, path, expected_sha256):
        """The freshly compiled code object at ``path`` inside ``filename``."""
        index = self._load(filename, expected_sha256)
        try:
            return index.code_at(tuple(path))
        except KeyError:
            raise CodeChanged(filename, f"has no code object at {tuple(path)!r} "
                              "(compiled differently than when saved)") from None

    __call__ = code_for
