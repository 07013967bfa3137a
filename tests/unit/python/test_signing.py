"""_portal.store.signing: the per-user key ($PORTAL_HOME/key) and the manifests' HMAC."""
import hashlib
import hmac
import os
import subprocess
import sys
import time

import pytest

import _portal
from _portal.store import signing
from _portal.store.signing import SigningKeyError

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(_portal.__file__)))


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home" / ".portal"      # neither exists yet
    monkeypatch.setenv("PORTAL_HOME", str(home))
    return home


@pytest.fixture
def umask_000():
    old = os.umask(0)
    yield
    os.umask(old)


def test_made_on_first_use_private_whatever_the_umask(home, umask_000):
    assert signing.load_key() is None                  # reading makes nothing
    assert not home.exists()
    key = signing.load_or_create_key()
    assert len(key) == 32
    assert (home / "key").read_bytes() == key
    assert os.stat(home / "key").st_mode & 0o777 == 0o600
    assert os.stat(home).st_mode & 0o777 == 0o700
    assert os.stat(home.parent).st_mode & 0o777 == 0o700
    assert os.listdir(home) == ["key"]                 # no temporary left
    assert signing.load_or_create_key() == key == signing.load_key()
    other = signing.load_or_create_key(str(home.parent / "elsewhere"))
    assert other != key and len(other) == 32


def test_an_existing_home_is_made_private_as_portal_run_makes_it(home):
    # (the same rule as the supervisor's, docs/security.md "The store": a store of
    # yours that others may enter is made 0700 when Portal first writes to it)
    home.mkdir(parents=True, mode=0o755)
    os.chmod(home, 0o755)
    signing.load_or_create_key()
    assert os.stat(home).st_mode & 0o777 == 0o700


def test_no_key_in_a_store_others_can_write(home):
    home.mkdir(parents=True, mode=0o700)
    os.chmod(home, 0o777)
    with pytest.raises(SigningKeyError) as e:
        signing.load_or_create_key()
    assert str(e.value).startswith(f"store: {home}: writable by group or others (mode 0777); "
                                   f"it cannot be trusted (chmod 700 {home})")
    with pytest.raises(SigningKeyError):
        signing.load_key()
    assert os.listdir(home) == []            # no key made there


RACER = r"""
import os, sys, time
sys.path.insert(0, {pydir!r})
from _portal.store import signing
go = float(sys.argv[1])
while time.time() < go:
    pass
print(signing.load_or_create_key().hex())
"""


def test_processes_creating_it_at_once_end_with_one_key(home, tmp_path):
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(pydir=PYDIR))
    for attempt in range(3):
        if (home / "key").exists():
            os.unlink(home / "key")
        go = time.time() + 0.6               # all started and spinning by then
        procs = [subprocess.Popen([sys.executable, str(script), str(go)], stdout=subprocess.PIPE,
                                  text=True) for _ in range(8)]
        keys = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert len(keys) == 1 and (home / "key").read_bytes().hex() in keys
        assert os.listdir(home) == ["key"]


def _refused(says):
    for load in (signing.load_key, signing.load_or_create_key):   # never repaired or replaced
        with pytest.raises(SigningKeyError) as e:
            load()
        assert says in str(e.value) and str(e.value).startswith("key: ")


def test_a_key_others_may_read_or_change_is_refused(home):
    key = signing.load_or_create_key()
    for mode in (0o640, 0o604, 0o660, 0o644):
        os.chmod(home / "key", mode)
        _refused(f"key: {home / 'key'}: has mode {mode:04o}, others may read or change it")
    os.chmod(home / "key", 0o400)                # stricter than 0600 is fine
    assert signing.load_key() == key
    assert (home / "key").read_bytes() == key


def test_a_damaged_or_odd_key_is_refused(home, tmp_path):
    signing.load_or_create_key()
    path = home / "key"
    os.truncate(path, 16)
    _refused("is 16 bytes, not 32 (damaged)")
    os.unlink(path)
    target = tmp_path / "elsewhere"
    target.write_bytes(os.urandom(32))
    os.chmod(target, 0o600)
    os.symlink(target, path)
    _refused("is a symbolic link")
    os.unlink(path)
    path.mkdir(mode=0o700)
    _refused("is not a regular file")


def test_a_key_owned_by_someone_else_is_refused(home, monkeypatch):
    key = signing.load_or_create_key()
    me = os.geteuid()
    with monkeypatch.context() as m:             # be someone else (works without root)
        m.setattr(signing, "euid", lambda: me + 1)
        _refused(f"is owned by uid {me}, not by you (uid {me + 1})")
    assert signing.load_key() == key
    if me == 0:                                  # and really give it away where we can
        os.chown(home / "key", 65534, 65534)
        _refused("is owned by uid 65534, not by you (uid 0)")


@pytest.mark.parametrize("key", [bytes(range(32)), b"k" * 64, b"long" * 40, b""])
def test_the_cache_seal_is_hmac_sha256_over_its_own_domain(key):
    data = os.urandom(5000)
    assert signing.code_mac(key, data) == hmac.new(key, b"portal-instrumented-code\n" + data,
                                                   hashlib.sha256).digest()


def test_hmac_is_over_the_domain_and_the_message():
    key = bytes(range(32))
    mac = signing.sign(key, b"manifest bytes")
    assert mac == hmac.new(key, b"portal-checkpoint-manifest\nmanifest bytes",
                           hashlib.sha256).hexdigest()
    assert signing.verify(key, b"manifest bytes", mac)
    assert not signing.verify(key, b"manifest bytez", mac)
    assert not signing.verify(bytes(32), b"manifest bytes", mac)
    assert not signing.verify(key, b"manifest bytes", mac.upper())
    assert not signing.verify(key, b"manifest bytes", None)
