"""The per-user secret key that signs checkpoint manifests.

A checkpoint is code: unpickling it runs whatever it says.  Every manifest carries
an HMAC-SHA256 made with a key only this user can read, so a checkpoint planted or
edited by someone else is refused before anything is unpickled
(docs/security.md, docs/checkpoint-format.md).

    $PORTAL_HOME/key     32 random bytes, mode 0600, owned by the user

The key is created on first use.  Creation is atomic and race-safe: the bytes are
written and fsynced in a private temporary file which is then hard-linked to
``key``; link(2) fails if the name exists, so two processes creating it at once end
with the one key that was linked first, and nobody ever reads a half-written key.
A key with the wrong owner, mode, size or type is refused, never repaired: a key
others could read or replace signs nothing.
"""
import errno
import os
import stat
# hashlib and hmac cost ~4 ms to import (OpenSSL): every run imports this module
# at start-up (the bytecode cache), only a checkpoint needs them: imported there.
from _operator import _compare_digest as compare_digest

try:
    from _sha256 import sha256 as _sha256      # built in: no OpenSSL to load
except ImportError:
    try:
        from _sha2 import sha256 as _sha256    # CPython 3.12+: one builtin for the SHA-2 family
    except ImportError:
        from hashlib import sha256 as _sha256

from _portal.store import trust as store

__all__ = ["SigningKeyError", "key_path", "load_key", "load_or_create_key", "sign", "verify",
           "make_private_dir", "euid", "KEY_BYTES", "DOMAIN", "CODE_DOMAIN", "code_mac"]

KEY_BYTES = 32
KEY_NAME = "key"
# Signed messages start with this, so the key's HMACs over manifests can never be
# confused with HMACs the key may make over something else later.
DOMAIN = b"portal-checkpoint-manifest\n"
# ... and entries of the instrumented-bytecode cache (importhook.py) with this.
CODE_DOMAIN = b"portal-instrumented-code\n"


class SigningKeyError(store.PortalError):
    """The key cannot be used; the message says why and what to do, in lower case."""


def euid():
    """The user whose files are trusted (a seam for tests that cannot chown)."""
    return store.euid()


def key_path(home=None):
    return os.path.join(home or store.home(), KEY_NAME)


def _problem(path, st):
    """Why the key (``st``, a regular file) is not a private file of this user's."""
    if st.st_uid != euid():
        return (f"key: {path}: is owned by uid {st.st_uid}, not by you (uid "
                f"{euid()}); it cannot be trusted")
    if st.st_mode & 0o077:
        return (f"key: {path}: has mode {stat.S_IMODE(st.st_mode):04o}, others may "
                f"read or change it; it cannot be trusted (if only you ever had "
                f"access: chmod 600 {path})")
    if st.st_size != KEY_BYTES:
        return f"key: {path}: is {st.st_size} bytes, not {KEY_BYTES} (damaged)"
    return None


def _read(path):
    """The key at ``path``, checked on its descriptor (store.open_checked:
    O_NOFOLLOW|O_NONBLOCK, a regular file of the user's); None if there is none."""
    try:
        fd, _ = store.open_checked(path, label=f"key: {path}",
                                   trust=lambda label, st: _problem(path, st))
    except FileNotFoundError:
        return None
    except store.StoreError as exc:
        raise SigningKeyError(str(exc)) from None
    try:
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise SigningKeyError(f"key: {path}: is {len(data)} bytes, not {KEY_BYTES} (damaged)")
    return data


def _store_home(home):
    """The store the key lives in: ``home`` as given (tests), else the run's
    store, once trusted (SigningKeyError when it is refused: no key of a store
    others can change)."""
    if home is not None:
        return home
    try:
        return store.require(create=False)
    except store.StoreError as exc:
        raise SigningKeyError(f"store: {exc}") from None


def load_key(home=None):
    """The user's key, or None if it was never made (then nothing was signed)."""
    if home is None and store.problem() is None and store.trusted_home() is None:
        return None          # no store yet: no key
    return _read(key_path(_store_home(home)))


def make_private_dir(path):
    """store.make_private_dir: mkdir -p, each new level 0700 whatever the umask."""
    store.make_private_dir(path)


def load_or_create_key(home=None):
    """The user's key, made now if this is the first use."""
    if home is None:
        try:
            home = store.require(create=True)
        except store.StoreError as exc:
            raise SigningKeyError(f"store: {exc}") from None
    path = key_path(home)
    key = _read(path)
    if key is not None:
        return key
    directory = os.path.dirname(path)
    make_private_dir(directory)
    tmp = os.path.join(directory, f".key.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            data = os.urandom(KEY_BYTES)
            if os.write(fd, data) != KEY_BYTES:
                raise OSError(errno.EIO, "short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)        # atomic, and fails if another process won
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    key = _read(path)
    if key is None:
        raise SigningKeyError(f"key: {path}: vanished while it was being made")
    return key


def sign(key, message):
    """HMAC-SHA256 of DOMAIN + message, as 64 lower-case hex digits."""
    import hashlib
    import hmac
    return hmac.new(key, DOMAIN + bytes(message), hashlib.sha256).hexdigest()


def verify(key, message, mac):
    """Whether ``mac`` is ``sign(key, message)`` (compared in constant time)."""
    return isinstance(mac, str) and mac.isascii() and compare_digest(sign(key, message), mac)


_BLOCK = 64                                      # SHA-256's block size (RFC 2104)
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def code_mac(key, data):
    """HMAC-SHA256 (32 raw bytes) of CODE_DOMAIN + data: a cache entry's seal.
    RFC 2104 over the interpreter's built-in sha256, which costs nothing to
    import (hmac/hashlib load OpenSSL: ~4 ms at every start)."""
    if len(key) > _BLOCK:
        key = _sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = _sha256(key.translate(_IPAD))
    inner.update(CODE_DOMAIN)
    inner.update(data)
    outer = _sha256(key.translate(_OPAD))
    outer.update(inner.digest())
    return outer.digest()
