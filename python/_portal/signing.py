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
import hashlib
import hmac
import os
import stat

from . import jobs

__all__ = ["SigningKeyError", "key_path", "load_key", "load_or_create_key", "sign", "verify",
           "make_private_dir", "euid", "KEY_BYTES", "DOMAIN"]

KEY_BYTES = 32
KEY_NAME = "key"
# Signed messages start with this, so the key's HMACs over manifests can never be
# confused with HMACs the key may make over something else later.
DOMAIN = b"portal-checkpoint-manifest\n"


class SigningKeyError(Exception):
    """The key cannot be used; the message says why and what to do, in lower case."""


def euid():
    """The user whose files are trusted (a seam for tests that cannot chown)."""
    return os.geteuid()


def key_path(home=None):
    return os.path.join(home or jobs.portal_home(), KEY_NAME)


def _check(path, st):
    """Refuse a key that is not a private regular file of this user."""
    if not stat.S_ISREG(st.st_mode):
        raise SigningKeyError(f"key: {path}: is not a regular file; remove it and portal makes a new "
                              f"one (suspended jobs then cannot be resumed)")
    if st.st_uid != euid():
        raise SigningKeyError(f"key: {path}: is owned by uid {st.st_uid}, not by you (uid "
                              f"{euid()}); it cannot be trusted")
    if st.st_mode & 0o077:
        raise SigningKeyError(f"key: {path}: has mode {stat.S_IMODE(st.st_mode):04o}, others may "
                              f"read or change it; it cannot be trusted (if only you ever had "
                              f"access: chmod 600 {path})")
    if st.st_size != KEY_BYTES:
        raise SigningKeyError(f"key: {path}: is {st.st_size} bytes, not {KEY_BYTES} (damaged)")


def _read(path):
    """The key at ``path``, checked; None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SigningKeyError(f"key: {path}: is a symbolic link; it cannot be trusted") from None
        raise SigningKeyError(f"key: {path}: cannot be read ({str(exc.strerror or exc).lower()})") from None
    try:
        _check(path, os.fstat(fd))
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise SigningKeyError(f"key: {path}: is {len(data)} bytes, not {KEY_BYTES} (damaged)")
    return data


def load_key(home=None):
    """The user's key, or None if it was never made (then nothing was signed)."""
    return _read(key_path(home))


def make_private_dir(path):
    """Make ``path`` and any missing parents; each new directory is 0700 whatever
    the umask (an existing one is left as it is)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path:
        make_private_dir(parent)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)
    except FileExistsError:
        pass


def load_or_create_key(home=None):
    """The user's key, made now if this is the first use."""
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
    return hmac.new(key, DOMAIN + bytes(message), hashlib.sha256).hexdigest()


def verify(key, message, mac):
    """Whether ``mac`` is ``sign(key, message)`` (compared in constant time)."""
    return isinstance(mac, str) and hmac.compare_digest(sign(key, message), mac)
