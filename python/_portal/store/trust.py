"""The job store's trust rule, on the Python side (docs/security.md, "The store").

Every file under PORTAL_HOME is attacker-controlled until it is checked on its
open descriptor.  The rule (src/jobs/store_trust.cpp holds the same one):

* PORTAL_HOME, and every directory and file under it that Portal reads or
  writes, is owned by the effective uid, not group/other-writable, and not a
  symbolic link (the `checkpoint` link Portal makes itself is checked by
  checkpoint/read.py, through open_dir and trust_problem here);
* each existing parent of PORTAL_HOME up to / is owned by the user or by root;
  a parent that others can write into must be sticky (/tmp), and then
  PORTAL_HOME itself must be private (no group/other permission at all): the
  ssh rule, a store of yours and private is fine even inside /tmp;
* missing levels are created 0700 whatever the umask, missing parents included.

One helper per job: ``make_private_dir`` (mkdir -p, 0700 per created level,
each level opened O_DIRECTORY|O_NOFOLLOW and checked with fstat),
``atomic_write`` (O_NOFOLLOW|O_CREAT|O_EXCL temporary, fchmod 0600, write,
fsync, rename, fsync of the directory) and ``open_checked`` / ``read_checked``
(O_NOFOLLOW|O_NONBLOCK, fstat: a regular file of the user's, not group/other
writable, below a size cap).  Every Python reader and writer of store files
(jobs.py, signing.py, checkpoint/read.py and write.py, importhook.py) goes
through them.

The store is checked once per process (``boot`` at start-up, or the first use):
a store that fails is not used at all by that run (no job, no cache, no key).
"""
import errno
import os
import stat

from _portal import job_contract  # the environment variables' names (contract/job_record.json)

__all__ = ["PortalError", "StoreError", "boot", "home", "problem", "trusted_home", "require",
           "make_private_dir", "open_dir", "open_checked", "read_checked", "atomic_write",
           "fsync_dir", "shown", "euid", "parse_json"]

_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
_GROUP_OTHER_ANY = 0o077
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
ROOT_UID = 0


class PortalError(Exception):
    """Every refusal of Portal's own: its message is a `portal: subject: problem`
    line's subject and problem, lower case (checkpoint, job record, key, store)."""


class StoreError(PortalError):
    """The store, or a directory or file in it, cannot be trusted (or read)."""


def euid():
    """The user whose files are trusted (a seam for tests that cannot chown)."""
    return os.geteuid()


def _why(exc):
    return str(exc.strerror or exc).lower()


# --- the store itself ------------------------------------------------------------------------

def home_from(environ):
    """PORTAL_HOME made absolute (against the working directory now), or ~/.portal."""
    path = environ.get(job_contract.ENV_HOME) or os.path.join(os.path.expanduser("~"), ".portal")
    return os.path.abspath(path)


# home: fixed by boot() (None: outside portal-run, taken from the environment at
# each use); status, for the home in "of": None (not checked yet), "missing",
# "trusted" or "refused" (problem says why); supervised: portal-run's supervisor
# started this process (boot.py).
_STATE = {"home": None, "of": None, "status": None, "problem": None, "supervised": False}


def boot(environ=os.environ, supervised=False):
    """At start-up, before the program can chdir: fix PORTAL_HOME as an absolute
    path and check the store once.  Returns the problem (a message) or None.  A
    store that is missing is not created here (portal-run's supervisor made it)."""
    _STATE.update(home=home_from(environ), of=None, status=None, problem=None,
                  supervised=supervised)
    return problem()


def reset():
    """Forget boot() and the check (tests)."""
    _STATE.update(home=None, of=None, status=None, problem=None, supervised=False)


def home():
    """The store's absolute path (fixed at boot, else from the environment now)."""
    return _STATE["home"] or home_from(os.environ)


def supervised():
    return _STATE["supervised"]


def _check(create):
    path = home()
    _STATE["of"] = path
    try:
        check_store(path, create=create)
    except StoreError as exc:
        _STATE.update(status="refused", problem=str(exc))
    except FileNotFoundError:
        _STATE.update(status="missing", problem=None)
    except OSError as exc:      # a parent that cannot be examined, a full disk ...
        _STATE.update(status="refused", problem=str(_refusal(
            path, f"cannot be checked ({_why(exc)})", _set_yours(path))))
    else:
        _STATE.update(status="trusted", problem=None)


def problem():
    """Why the store is refused for this run, or None (checked once per home)."""
    if _STATE["status"] is None or _STATE["of"] != home():
        _check(create=False)
    return _STATE["problem"]


def trusted_home():
    """The store's path if it exists and is trusted, else None (never creates it)."""
    problem()
    return home() if _STATE["status"] == "trusted" else None


def require(create=True):
    """The store's path, trusted (made now, 0700 per level, if missing and
    ``create``); raises StoreError with the refusal when the store is refused."""
    problem()
    # Under portal-run the supervisor made (or refused) the store: the
    # interpreter never makes one, nor changes the mode of one it refused.
    if _STATE["status"] != "trusted" and create and not _STATE["supervised"]:
        _check(create=True)
    if _STATE["status"] == "refused":
        raise StoreError(_STATE["problem"])
    if _STATE["status"] != "trusted":
        raise StoreError(f"{home()}: does not exist")
    return home()


def _refusal(path, why, fix):
    return StoreError(f"{path}: {why}; it cannot be trusted ({fix})")


def _set_yours(path):
    """What to do about a store that is not the user's (the same words as the C++ side)."""
    return "set PORTAL_HOME to a directory of yours"


def _check_parents(path):
    """Whether a parent of the store lets others write into it (sticky, root's
    or the user's); raises StoreError for a parent that lets others replace it."""
    uid = euid()
    # A symbolic link on the way must be root's or the user's: others could
    # point it elsewhere later.
    prefix = "/"
    for part in [p for p in os.path.dirname(path).split("/") if p]:
        prefix = os.path.join(prefix, part)
        try:
            st = os.lstat(prefix)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (uid, ROOT_UID):
            raise _refusal(path, f"its parent {prefix} is a symlink owned by uid {st.st_uid}, "
                                 f"neither you nor root, who could point it elsewhere",
                           _set_yours(path))
    shared = False
    parent = os.path.realpath(os.path.dirname(path))
    while True:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            st = None           # created below
        if st is not None:
            if st.st_uid not in (uid, ROOT_UID):
                raise _refusal(path, f"its parent {parent} is owned by uid {st.st_uid}, "
                                     f"neither you nor root, who could replace it",
                               _set_yours(path))
            if st.st_mode & _GROUP_OTHER_WRITE:
                if not st.st_mode & stat.S_ISVTX:
                    raise _refusal(path, f"its parent {parent} is writable by others (mode "
                                         f"{stat.S_IMODE(st.st_mode):04o}) and not sticky, so "
                                         f"another user could replace it", _set_yours(path))
                shared = True
        up = os.path.dirname(parent)
        if up == parent:
            return shared
        parent = up


def check_store(path, create=False):
    """Check the store at the absolute ``path`` by the rule; with ``create``,
    missing levels are created 0700, and an existing store of the user's that
    others may enter is made 0700 (as portal-run does).  Raises StoreError, or
    FileNotFoundError when it is missing and not ``create``."""
    if path == "/":
        raise _refusal(path, "the root directory", _set_yours(path))
    shared = _check_parents(path)
    if create and not os.path.lexists(path):
        make_private_dir(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symlink" if os.path.islink(path) else "not a directory"
            raise _refusal(path, kind, "Portal makes no such thing there: remove it, or "
                                       + _set_yours(path)) from None
        raise _refusal(path, f"cannot be opened ({_why(exc)})", _set_yours(path)) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != euid():
            raise _refusal(path, f"owned by uid {st.st_uid}", "it is not yours: " + _set_yours(path))
        if st.st_mode & _GROUP_OTHER_WRITE:
            raise _refusal(path, f"writable by group or others (mode "
                                 f"{stat.S_IMODE(st.st_mode):04o})", f"chmod 700 {path}")
        if create and st.st_mode & _GROUP_OTHER_ANY:
            os.fchmod(fd, PRIVATE_DIR_MODE)
            st = os.fstat(fd)
    finally:
        os.close(fd)
    if shared and st.st_mode & _GROUP_OTHER_ANY:
        raise _refusal(path, f"inside a directory others can write into, and not private (mode "
                             f"{stat.S_IMODE(st.st_mode):04o})", f"chmod 700 {path}")


# --- directories --------------------------------------------------------------------------------

def _kind(st):
    return ("a fifo" if stat.S_ISFIFO(st.st_mode) else
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
            "a socket" if stat.S_ISSOCK(st.st_mode) else
            "a directory" if stat.S_ISDIR(st.st_mode) else "something else")


def not_regular(st):
    """Why ``st`` is not a regular file, or None."""
    return None if stat.S_ISREG(st.st_mode) else f"is not a regular file ({_kind(st)})"


def owner_problem(st):
    """Why ``st`` (owner, mode) is not the user's own to trust, or None."""
    if st.st_uid != euid():
        return f"is owned by uid {st.st_uid}, not by you (uid {euid()})"
    if st.st_mode & _GROUP_OTHER_WRITE:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _distrust(st, want_dir):
    """Why the fstat result ``st`` is not ours to trust, or None."""
    if want_dir and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not want_dir:
        why = not_regular(st)
        if why:
            return why
    return owner_problem(st)


def trust_problem(label, st):
    """Why a checkpoint's file or directory (``os.stat_result`` st) cannot be
    trusted, or None: owner_problem's rule, in the words `portal inspect` and a
    refused resume show (who can write it, and the chmod that fixes it)."""
    uid = euid()
    if st.st_uid != uid:
        return (f"{label}: is owned by uid {st.st_uid}, not by you (uid {uid}); "
                f"it is not trusted")
    if st.st_mode & _GROUP_OTHER_WRITE:
        who = {0o020: "your group", 0o002: "others", 0o022: "your group and others"}
        return (f"{label}: is writable by {who[st.st_mode & _GROUP_OTHER_WRITE]} (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); it is not trusted (if only you ever "
                f"had access: chmod go-w {label})")
    return None


def open_dir(path, label=None, trust=None, untrusted="it cannot be trusted"):
    """A descriptor of the directory ``path`` (O_DIRECTORY|O_NOFOLLOW), checked:
    owned by us, not group/other-writable.  FileNotFoundError when missing.
    ``label``, ``trust`` and ``untrusted`` as for open_checked."""
    label = label or path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symbolic link" if os.path.islink(path) else "not a directory"
            raise StoreError(f"{label}: is {kind}; {untrusted}") from None
        raise StoreError(f"{label}: cannot be opened ({_why(exc)})") from None
    try:
        st = os.fstat(fd)
        if trust is not None:
            message = trust(label, st)
        else:
            why = _distrust(st, True)
            message = f"{label}: {why}; {untrusted}" if why else None
    except BaseException:
        os.close(fd)
        raise
    if message:
        os.close(fd)
        raise StoreError(message)
    return fd


def make_private_dir(path):
    """mkdir -p ``path``: each level created here is 0700 whatever the umask
    (fchmod on its descriptor); each level created, and ``path`` itself, is
    opened O_DIRECTORY|O_NOFOLLOW relative to the level above it (mkdirat,
    openat: no name on the way can be swapped meanwhile) and checked (ours, not
    group/other-writable).  Raises StoreError for a level that is not ours."""
    path = os.path.abspath(path)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(os.path.basename(probe))
        up = os.path.dirname(probe)
        if up == probe:
            break
        probe = up
    if not missing:
        os.close(open_dir(path))
        return path
    # the deepest existing level (a parent of the store, checked by check_store,
    # or a checked directory of the store); the new levels below it, by descriptor
    parent = os.open(probe, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        here = probe
        for name in reversed(missing):
            here = os.path.join(here, name)
            try:
                os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=parent)
            except FileExistsError:
                pass                # made by another process meanwhile: checked below
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=parent)
            except OSError as exc:
                raise StoreError(f"{here}: cannot be opened as a directory ({_why(exc)}); "
                                 f"it cannot be trusted") from None
            try:
                why = _distrust(os.fstat(fd), True)
                if why:
                    raise StoreError(f"{here}: {why}; it cannot be trusted")
                os.fchmod(fd, PRIVATE_DIR_MODE)
            except BaseException:
                os.close(fd)
                raise
            os.close(parent)
            parent = fd
    finally:
        os.close(parent)
    return path


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- files ----------------------------------------------------------------------------------------

def open_checked(path, max_bytes=None, label=None, trust=None, untrusted="it cannot be trusted"):
    """(fd, stat) of the existing file ``path``, opened O_RDONLY|O_NOFOLLOW|
    O_NONBLOCK (a planted FIFO is never waited on) and checked on the descriptor:
    a regular file, ours, not group/other-writable, at most ``max_bytes``.
    ``trust(label, st)`` replaces the owner check with one giving its own whole
    message (or None).  FileNotFoundError when missing, StoreError otherwise,
    ``label`` naming the file and ``untrusted`` ending the message."""
    label = label or path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{label}: is a symbolic link; {untrusted}") from None
        raise StoreError(f"{label}: cannot be opened ({_why(exc)})") from None
    try:
        st = os.fstat(fd)
        why = not_regular(st)
        if why:
            raise StoreError(f"{label}: {why}; {untrusted}")
        if trust is not None:
            message = trust(label, st)
        else:
            why = owner_problem(st)
            message = f"{label}: {why}; {untrusted}" if why else None
        if message:
            raise StoreError(message)
        if max_bytes is not None and st.st_size > max_bytes:
            raise StoreError(f"{label}: is {st.st_size} bytes, more than the {max_bytes} a "
                             f"valid one can be; {untrusted}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_all(fd, limit):
    """Every byte of ``fd`` up to ``limit`` + 1 (the caller refuses more)."""
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_checked(path, max_bytes, label=None, trust=None, untrusted="it cannot be trusted"):
    """The bytes of the store file ``path``, through open_checked; a file that
    grew past ``max_bytes`` while read is refused too."""
    label = label or path
    fd, _ = open_checked(path, max_bytes, label, trust, untrusted)
    try:
        data = read_all(fd, max_bytes)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise StoreError(f"{label}: is more than the {max_bytes} bytes a valid one can be; "
                         f"{untrusted}")
    return data


def atomic_write(path, data, mode=PRIVATE_FILE_MODE, durable=True):
    """Replace ``path`` with ``data``: a temporary file beside it opened
    O_NOFOLLOW|O_CREAT|O_EXCL, fchmod ``mode`` (whatever the umask), written,
    fsynced, renamed over ``path``, the directory fsynced.  On any failure (a full
    disk) the temporary file is removed, ``path`` is left as it was, and the
    OSError propagates."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = f"{path}.tmp{os.getpid()}-{os.urandom(3).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(directory)


# --- JSON from untrusted files ----------------------------------------------------------------------

def _int_parser(max_digits):
    def parse(text):
        if len(text.lstrip("-")) > max_digits:
            raise ValueError(f"a number of more than {max_digits} digits")
        return int(text)
    return parse


def _no_constant(name):
    raise ValueError(f"{name} is not json")


def _depth_ok(raw, limit):
    """Whether the JSON text nests objects/arrays at most ``limit`` deep (strings
    skipped), so that parsing it can never exhaust the interpreter's stack."""
    depth, in_string, escaped = 0, False, False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:      # backslash
                escaped = True
            elif byte == 0x22:      # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


def _unique_object(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"the key {shown(key)!r} appears twice")
        seen[key] = value
    return seen


def parse_json(raw, max_depth, max_int_digits):
    """The JSON text ``raw`` (bytes) of an untrusted file, parsed with bounds:
    objects and arrays at most ``max_depth`` deep, integers of at most
    ``max_int_digits`` digits, no NaN or Infinity, no key twice in an object.
    Raises ValueError (json.JSONDecodeError and UnicodeDecodeError are ones)."""
    import json   # here: start-up (boot) needs no json
    if not _depth_ok(raw, max_depth):
        raise ValueError(f"nested deeper than {max_depth} levels")
    return json.loads(raw.decode("utf-8"), parse_int=_int_parser(max_int_digits),
                      parse_constant=_no_constant, object_pairs_hook=_unique_object)


# --- text from untrusted files ----------------------------------------------------------------------

def shown(value):
    """``value`` as text safe to print: control characters (C0, DEL, C1 and the
    other non-printable ones) escaped as \\xNN / \\uNNNN, so that a name or message
    from a manifest, record or file name cannot drive the terminal."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        else:
            n = ord(ch)
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
    return "".join(out)
