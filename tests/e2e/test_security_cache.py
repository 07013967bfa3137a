"""Attack suite: the instrumented-bytecode cache can never run code the user did not
compile (issue 10, item 2; docs/security.md, "The bytecode cache").

Another user of the machine plants a cache entry for the victim's script: in a
store under a shared sticky directory that the attacker made first, in a store
under a non-sticky directory others can write into, or beside the script in a
shared project's __pycache__ (where Portal kept its cache before).  The planted
code would create a marker file; the marker must never appear, the program must
give python's own output, and Portal must say why the store is not used.

A control shows the planted entry is a working one: sealed with the victim's own
key, in the victim's own store, it is run.  The cross-user cases need root (two
real users); they skip, saying so, otherwise.
"""
import hashlib
import hmac
import marshal
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest

from conftest import base_env, cache_tag

SCRIPT = """\
import helper
total = 0
for i in range(10):
    total += helper.square(i)
print("total", total)
"""
HELPER = """\
def square(x):
    for _ in range(1):
        pass
    return x * x
"""
EXPECTED = b"total 285\n"
CODE_DOMAIN = b"portal-instrumented-code\n"
MAC_BYTES = 32
HEADER_FIXED = 12 + 4 + 4 + 8 + 8      # magic, version, flags, source hash, length


def _header(entry):
    n = int.from_bytes(entry[HEADER_FIXED:HEADER_FIXED + 4], "little")
    return entry[:HEADER_FIXED + 4 + n]


def _evil(entry, marker, name, key):
    """A cache entry with ``entry``'s header whose code creates ``marker`` (then
    defines what the module should), sealed with ``key`` (None: not sealed)."""
    source = (f"open({str(marker)!r}, 'w').close()\n" +
              (HELPER if name == "helper" else SCRIPT))
    body = _header(entry) + marshal.dumps(compile(source, name, "exec"))
    if key is None:
        return body
    return body + hmac.new(key, CODE_DOMAIN + body, hashlib.sha256).digest()


def _chown_tree(path, user, mode_dir=None, mode_file=None):
    for root, dirs, files in os.walk(path):
        for p in [root] + [os.path.join(root, f) for f in files]:
            os.lchown(p, user.uid, user.gid)
            if os.path.isdir(p) and mode_dir is not None:
                os.chmod(p, mode_dir)
            elif mode_file is not None and not os.path.isdir(p):
                os.chmod(p, mode_file)


@pytest.fixture
def project(shared_dir, users):
    """The victim's program in a directory every user can read."""
    victim, _ = users
    root = shared_dir / f"project-{uuid.uuid4().hex[:6]}"
    root.mkdir()
    (root / "main.py").write_text(SCRIPT)
    (root / "helper.py").write_text(HELPER)
    _chown_tree(root, victim, 0o755, 0o644)
    return root


def _run(user, portal_run, project, home, dont_write_bytecode):
    env = base_env({"PORTAL_HOME": str(home)})
    if dont_write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return user.run([portal_run, "main.py"], env=env, cwd=str(project), capture_output=True)


def _entries(home):
    cache = Path(home) / "cache" / "instrumented"
    return {p.name.split("-")[0]: p for p in cache.iterdir()} if cache.is_dir() else {}


def _victim_home(victim):
    return victim.home / f".portal-test-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def victim_entries(users, portal_run, project):
    """{module: (file name, entry bytes)} of the victim's modules, as a run of the
    victim's makes them (the names depend only on the sources' paths)."""
    victim, _ = users
    home = _victim_home(victim)
    try:
        out = _run(victim, portal_run, project, home, True)
        assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
        entries = {name: (p.name, p.read_bytes()) for name, p in _entries(home).items()}
        assert set(entries) == {"main", "helper"}
        return entries
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_control_a_planted_entry_sealed_with_your_own_key_would_run(users, portal_run, project,
                                                                  shared_dir):
    """Without this control the refusals below could pass for a broken entry."""
    victim, _ = users
    home = _victim_home(victim)
    marker = shared_dir / f"marker-{uuid.uuid4().hex[:6]}"
    try:
        first = _run(victim, portal_run, project, home, True)
        assert (first.returncode, first.stdout) == (0, EXPECTED), first.stderr
        key = (home / "key").read_bytes()
        helper = _entries(home)["helper"]
        helper.write_bytes(_evil(helper.read_bytes(), marker, "helper", key))
        again = _run(victim, portal_run, project, home, True)
        assert (again.returncode, again.stdout) == (0, EXPECTED), again.stderr
        assert marker.exists(), "the control entry was not run: the attack entries are not sound"
        # and the same entry sealed with another key is not
        marker.unlink()
        helper.write_bytes(_evil(helper.read_bytes(), marker, "helper", os.urandom(32)))
        third = _run(victim, portal_run, project, home, True)
        assert (third.returncode, third.stdout) == (0, EXPECTED), third.stderr
        assert not marker.exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)


STORE_MESSAGE = rb"portal: (job )?store: [^\n]*%s"


@pytest.mark.parametrize("dont_write_bytecode", [True, False], ids=["PYTHONDONTWRITEBYTECODE", "default"])
@pytest.mark.parametrize("parent_kind", ["sticky", "not-sticky"])
@pytest.mark.parametrize("store_mode", [0o755, 0o777])
@pytest.mark.parametrize("sealed", [True, False], ids=["sealed-by-attacker", "unsealed"])
def test_a_planted_entry_in_a_store_another_user_made_never_runs(
        users, portal_run, project, shared_dir, victim_entries, dont_write_bytecode,
        parent_kind, store_mode, sealed):
    victim, attacker = users
    parent = shared_dir / f"shared-{uuid.uuid4().hex[:6]}"
    parent.mkdir()
    os.chmod(parent, 0o1777 if parent_kind == "sticky" else 0o777)
    marker = shared_dir / f"marker-{uuid.uuid4().hex[:6]}"
    home = parent / "portal"
    cache = home / "cache" / "instrumented"
    cache.mkdir(parents=True)
    key = os.urandom(32)
    (home / "key").write_bytes(key)
    for name, (filename, entry) in victim_entries.items():
        (cache / filename).write_bytes(_evil(entry, marker, name, key if sealed else None))
    _chown_tree(home, attacker, store_mode, 0o666 if store_mode == 0o777 else 0o644)

    out = _run(victim, portal_run, project, home, dont_write_bytecode)
    assert not marker.exists(), "the attacker's code ran as the victim"
    assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
    assert re.search(STORE_MESSAGE % re.escape(str(home)).encode(), out.stderr), out.stderr
    assert b"Traceback" not in out.stderr
    # nothing of the victim's was written into the attacker's store
    owners = {os.lstat(os.path.join(r, f)).st_uid for r, ds, fs in os.walk(home) for f in ds + fs}
    assert owners <= {attacker.uid}, owners


@pytest.mark.parametrize("dont_write_bytecode", [True, False], ids=["PYTHONDONTWRITEBYTECODE", "default"])
def test_a_store_of_yours_under_a_non_sticky_shared_parent_is_not_used(
        users, portal_run, project, shared_dir, dont_write_bytecode):
    """Others cannot write into it, but they can rename it away and put theirs in
    its place: refused too, and nothing is cached there."""
    victim, _ = users
    parent = shared_dir / f"open-{uuid.uuid4().hex[:6]}"
    parent.mkdir()
    os.chmod(parent, 0o777)
    home = parent / "portal"
    home.mkdir(mode=0o700)
    os.chown(home, victim.uid, victim.gid)
    out = _run(victim, portal_run, project, home, dont_write_bytecode)
    assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
    assert b"Traceback" not in out.stderr
    assert re.search(STORE_MESSAGE % re.escape(str(home)).encode(), out.stderr), out.stderr
    assert not (home / "cache").exists() and not (home / "key").exists()


@pytest.mark.parametrize("dont_write_bytecode", [True, False], ids=["PYTHONDONTWRITEBYTECODE", "default"])
def test_a_planted_entry_beside_the_script_in_a_shared_project_never_runs(
        users, portal_run, project, shared_dir, victim_entries, dont_write_bytecode):
    """Portal's cache is never beside the source: a __pycache__ of a shared
    project (where it was kept before) is never read, whatever is planted there."""
    victim, attacker = users
    marker = shared_dir / f"marker-{uuid.uuid4().hex[:6]}"
    pycache = project / "__pycache__"
    pycache.mkdir()
    for name, (_, entry) in victim_entries.items():
        (pycache / f"{name}.{cache_tag()}.portal-1.pyc").write_bytes(_evil(entry, marker, name, None))
    _chown_tree(pycache, attacker, 0o777, 0o666)
    os.chmod(project, 0o1777)                 # the attacker could create __pycache__
    home = _victim_home(victim)
    try:
        out = _run(victim, portal_run, project, home, dont_write_bytecode)
        assert not marker.exists(), "the planted __pycache__ entry ran as the victim"
        assert (out.returncode, out.stdout) == (0, EXPECTED), out.stderr
        assert out.stderr == b"", out.stderr    # the store is the victim's: nothing to say
        assert sorted(os.listdir(pycache)) == [f"helper.{cache_tag()}.portal-1.pyc",
                                               f"main.{cache_tag()}.portal-1.pyc"]
        # the cache is the victim's own store's, and it is used
        assert set(_entries(home)) == {"main", "helper"}
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("parent_kind", ["sticky", "not-sticky"])
def test_out_of_memory_with_an_untrusted_store_fails_as_under_python_naming_the_store(
        users, portal_run, project, shared_dir, parent_kind):
    """No job, no key, no checkpoint in a store another user made: the error ends
    the program as under python, and Portal says why it was not rescued."""
    victim, attacker = users
    parent = shared_dir / f"shared-{uuid.uuid4().hex[:6]}"
    parent.mkdir()
    os.chmod(parent, 0o1777 if parent_kind == "sticky" else 0o777)
    home = parent / "portal"
    home.mkdir()
    _chown_tree(home, attacker, 0o777)
    env = base_env({"PORTAL_HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1",
                    "PORTAL_FAKE_OOM": "main.py:4"})
    out = victim.run([portal_run, "main.py"], env=env, cwd=str(project), capture_output=True)
    assert out.returncode == 1, out.stderr
    err = out.stderr.decode()
    assert "Traceback (most recent call last)" in err and "\nMemoryError" in err, err
    assert re.search(r"^portal: not rescued: the job store cannot be trusted: "
                     + re.escape(str(home)) + r": ", err, re.M), err
    assert os.listdir(home) == [], os.listdir(home)      # nothing of the victim's there
