"""Which source files are "the user's own code" (docs/architecture.md).

The user's code is what lies under the script's directory, the working directory,
the PYTHONPATH entries and any root given with ``--user-code PATH``, but never the
interpreter's standard library or an installed package: the sysconfig stdlib,
platstdlib, purelib and platlib directories, site.getsitepackages(),
site.getusersitepackages(), Portal's own package, and any path with a component named
``site-packages`` or ``dist-packages``, wherever they are.  Exclusion beats inclusion
(running from /usr does not make the stdlib the user's code).

Paths are compared after resolving symbolic links (os.path.realpath), and the
exclusions are checked on both the path as given (made absolute) and the resolved
path, so that neither a link into site-packages nor a link from it makes library code
the user's.
"""
import os
import site
import sysconfig

_PACKAGE_DIR_NAMES = ("site-packages", "dist-packages")


def _abs(path):
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def _real(path):
    return os.path.realpath(os.fspath(path))


def _under(path, root):
    """path is root or inside it (both normalised absolute paths)."""
    if root == os.sep:
        return path.startswith(os.sep)
    return path == root or path.startswith(root + os.sep)


def _interpreter_dirs():
    dirs = []
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            p = sysconfig.get_path(key)
        except KeyError:
            p = None
        if p:
            dirs.append(p)
    try:
        dirs.extend(site.getsitepackages())
    except AttributeError:          # some virtualenv versions lack it
        pass
    try:
        user = site.getusersitepackages()
    except AttributeError:
        user = None
    if user:
        dirs.append(user)
    # Portal's own package is never instrumented, even when it lies under a user root.
    dirs.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # _portal/, above run/
    return dirs


class UserCode:
    """The set of files that count as the user's own code."""

    def __init__(self, roots, excluded=None):
        self.roots = []
        for r in roots:
            if r is None or r == "":
                continue
            real = _real(_abs(r))
            if real not in self.roots:
                self.roots.append(real)
        excl = _interpreter_dirs() if excluded is None else list(excluded)
        self.excluded = []
        for d in excl:
            for p in (_abs(d), _real(_abs(d))):
                if p not in self.excluded:
                    self.excluded.append(p)
        self._cache = {}

    @classmethod
    def from_environment(cls, script_dir, cwd, pythonpath, extra=()):
        """script_dir: the script's directory (None for -m/-c); cwd: the working
        directory; pythonpath: the PYTHONPATH value (os.pathsep separated, may be
        empty or None); extra: the --user-code roots."""
        cwd = os.fspath(cwd) if cwd else os.getcwd()
        roots = []
        if script_dir:
            roots.append(os.path.join(cwd, os.fspath(script_dir)))
        roots.append(cwd)
        for entry in (pythonpath or "").split(os.pathsep):
            if entry:
                roots.append(os.path.join(cwd, entry))
        for entry in extra or ():
            roots.append(os.path.join(cwd, os.fspath(entry)))
        return cls(roots)

    def _is_excluded(self, path):
        for p in path:
            parts = p.split(os.sep)
            if any(name in parts for name in _PACKAGE_DIR_NAMES):
                return True
            for d in self.excluded:
                if _under(p, d):
                    return True
        return False

    def is_user_file(self, path):
        """True for a file of the user's own code (the file need not exist)."""
        if path is None:
            return False
        try:
            path = os.fspath(path)
        except TypeError:
            return False
        if not isinstance(path, str) or not path or path.startswith("<"):
            return False
        given = _abs(path)
        hit = self._cache.get(given)
        if hit is not None:
            return hit
        real = _real(given)
        result = (not self._is_excluded((given, real))
                  and any(_under(real, root) for root in self.roots))
        if len(self._cache) < 100000:
            self._cache[given] = result
        return result

    def __repr__(self):
        return f"UserCode(roots={self.roots!r})"
