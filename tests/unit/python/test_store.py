"""_portal.store.trust: the job store's trust rule and the one private-directory,
atomic-write and checked-open helper of the Python side; _portal.store.jobs' use of
them (docs/security.md, "The store")."""
import errno
import json
import os
import stat
import subprocess
import sys

import pytest

import _portal
from _portal.store import jobs, trust as store
from _portal.store.trust import StoreError

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(_portal.__file__)))


@pytest.fixture
def private(tmp_path):
    """A directory whose parents are root's or ours and not writable by others
    (pytest's own tmp_path is under the sticky /tmp: a shared parent)."""
    os.chmod(tmp_path, 0o700)
    return tmp_path


@pytest.fixture
def umask_000():
    old = os.umask(0)
    yield
    os.umask(old)


@pytest.fixture(autouse=True)
def _fresh_state():
    store.reset()
    yield
    store.reset()


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- the rule ------------------------------------------------------------------------------

def test_a_missing_store_is_made_private_level_by_level_whatever_the_umask(private, umask_000):
    home = private / "a" / "b" / ".portal"
    with pytest.raises(FileNotFoundError):
        store.check_store(str(home))              # reading makes nothing
    assert not (private / "a").exists()
    store.check_store(str(home), create=True)
    for level in (private / "a", private / "a" / "b", home):
        assert _mode(level) == 0o700, level


def test_a_store_others_can_write_is_refused(private):
    home = private / "home"
    home.mkdir()
    os.chmod(home, 0o777)
    with pytest.raises(StoreError) as e:
        store.check_store(str(home), create=True)
    assert str(e.value) == (f"{home}: writable by group or others (mode 0777); it cannot be "
                            f"trusted (chmod 700 {home})")
    assert _mode(home) == 0o777                    # refused, never repaired


def test_a_symlinked_store_is_refused(private):
    real = private / "real"
    real.mkdir(mode=0o700)
    link = private / "home"
    link.symlink_to(real)
    with pytest.raises(StoreError) as e:
        store.check_store(str(link))
    assert f"{link}: a symlink; it cannot be trusted" in str(e.value)


def test_under_a_sticky_shared_parent_only_a_private_store_is_trusted(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    home = shared / "home"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o755)
    with pytest.raises(StoreError) as e:
        store.check_store(str(home))
    assert "inside a directory others can write into, and not private (mode 0755)" in str(e.value)
    os.chmod(home, 0o700)
    store.check_store(str(home))                  # the ssh rule: yours and private is fine


def test_under_a_non_sticky_shared_parent_nothing_is_trusted(tmp_path):
    shared = tmp_path / "open"
    shared.mkdir()
    os.chmod(shared, 0o777)
    home = shared / "home"
    home.mkdir(mode=0o700)
    with pytest.raises(StoreError) as e:
        store.check_store(str(home))
    assert f"its parent {shared} is writable by others (mode 0777) and not sticky" in str(e.value)
    with pytest.raises(StoreError):               # and nothing is made under it
        store.check_store(str(shared / "new"), create=True)
    assert not (shared / "new").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_store_of_another_user_is_refused(private):
    home = private / "home"
    home.mkdir(mode=0o700)
    os.chown(home, 65534, 65534)
    with pytest.raises(StoreError) as e:
        store.check_store(str(home), create=True)
    assert f"{home}: owned by uid 65534; it cannot be trusted (it is not yours" in str(e.value)
    parent = private / "theirs"
    parent.mkdir(mode=0o755)
    os.chown(parent, 65534, 65534)
    with pytest.raises(StoreError) as e:
        store.check_store(str(parent / "home"), create=True)
    assert f"its parent {parent} is owned by uid 65534, neither you nor root" in str(e.value)
    assert not (parent / "home").exists()


def test_boot_fixes_the_store_before_the_program_can_chdir(private, monkeypatch):
    monkeypatch.chdir(private)
    store.boot({"PORTAL_HOME": "rel/home"}, supervised=True)
    monkeypatch.chdir("/")
    assert store.home() == str(private / "rel" / "home")


def test_under_portal_run_the_interpreter_never_makes_a_store(private):
    home = private / "home"
    assert store.boot({"PORTAL_HOME": str(home)}, supervised=True) is None
    with pytest.raises(StoreError):
        store.require(create=True)
    assert not home.exists()
    with pytest.raises(StoreError):
        jobs.Job.create("train.py")
    assert not home.exists()


def test_a_refused_store_stays_refused_for_the_run(private):
    home = private / "home"
    home.mkdir()
    os.chmod(home, 0o777)
    problem = store.boot({"PORTAL_HOME": str(home)}, supervised=True)
    assert problem.startswith(f"{home}: writable by group or others")
    assert store.trusted_home() is None
    os.chmod(home, 0o700)                         # fixed meanwhile: still not used this run
    assert store.problem() == problem
    with pytest.raises(StoreError):
        store.require()


# --- the helpers ---------------------------------------------------------------------------

def test_make_private_dir_refuses_a_level_that_is_not_ours(private):
    (private / "elsewhere").mkdir()
    (private / "link").symlink_to(private / "elsewhere")
    with pytest.raises(StoreError) as e:
        store.make_private_dir(str(private / "link"))
    assert "is a symbolic link" in str(e.value)
    if os.geteuid() == 0:                     # a level made meanwhile by someone else
        theirs = private / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(StoreError) as e:
            store.make_private_dir(str(theirs))
        assert "is owned by uid 65534" in str(e.value)


def test_atomic_write_is_private_and_leaves_nothing_on_a_full_disk(private, umask_000,
                                                                   monkeypatch):
    path = private / "job.json"
    store.atomic_write(str(path), b"one")
    assert path.read_bytes() == b"one" and _mode(path) == 0o600
    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        store.atomic_write(str(path), b"two")
    monkeypatch.setattr(os, "write", real)
    assert path.read_bytes() == b"one"
    assert os.listdir(private) == ["job.json"]


def test_atomic_write_never_writes_through_a_planted_temporary_link(private):
    victim = private / "victim"
    victim.write_bytes(b"keep")
    path = private / "job.json"
    # whatever temporary name it picks is new (O_EXCL|O_NOFOLLOW): a link in the
    # way fails the write instead of following it
    store.atomic_write(str(path), b"data")
    assert victim.read_bytes() == b"keep"


@pytest.mark.parametrize("what", ["fifo", "symlink", "group-writable", "too-big", "directory"])
def test_open_checked_refuses_what_is_not_a_small_private_file(private, what):
    path = private / "f"
    if what == "fifo":
        os.mkfifo(path, 0o600)
        says = "is not a regular file (a fifo)"
    elif what == "symlink":
        path.symlink_to("/dev/zero")
        says = "is a symbolic link"
    elif what == "group-writable":
        path.write_bytes(b"x")
        os.chmod(path, 0o620)
        says = "is writable by group or others (mode 0620)"
    elif what == "too-big":
        path.write_bytes(b"x" * 101)
        says = "is 101 bytes, more than the 100 a valid one can be"
    else:
        path.mkdir()
        says = "is not a regular file (a directory)"
    with pytest.raises(StoreError) as e:
        store.read_checked(str(path), 100)
    assert says in str(e.value) and "it cannot be trusted" in str(e.value)


def test_shown_escapes_control_characters():
    assert store.shown("plain text, ünïcode") == "plain text, ünïcode"
    assert store.shown("\x1b]0;x\x07\u009b2J\r\n\t") == "\\x1b]0;x\\x07\\x9b2J\\x0d\\x0a\\x09"


@pytest.mark.parametrize("raw, says", [
    (b"[" * 50 + b"]" * 50, "nested deeper than 16 levels"),
    (b"1" * 30, "a number of more than 20 digits"),
    (b'{"a": 1, "a": 2}', "appears twice"),
    (b"[Infinity]", "Infinity is not json"),
])
def test_parse_json_has_bounds(raw, says):
    with pytest.raises(ValueError) as e:
        store.parse_json(raw, 16, 20)
    assert says in str(e.value)


# --- the job record ------------------------------------------------------------------------

def test_a_job_record_is_written_privately_and_read_checked(private, monkeypatch, umask_000):
    monkeypatch.setenv("PORTAL_HOME", str(private / "home"))
    job = jobs.Job.create("train.py")
    assert _mode(private / "home") == _mode(private / "home" / "jobs") == _mode(job.dir) == 0o700
    record = job.update_record(state="suspended")
    assert job.read_record() == record and _mode(job.record_path) == 0o600
    with open(job.record_path, "w") as f:
        json.dump({"state": None}, f)
    with pytest.raises(jobs.RecordError) as e:
        job.read_record()
    assert str(e.value) == f"job {job.id}: job.json: is damaged (its 'state' is a NoneType)"


def test_a_symlinked_record_or_job_dir_is_never_written_through(private, monkeypatch):
    monkeypatch.setenv("PORTAL_HOME", str(private / "home"))
    job = jobs.Job.create("train.py")
    target = private / "target"
    target.write_text("{}")
    os.symlink(target, job.record_path)
    with pytest.raises(store.StoreError) as e:
        job.update_record(state="suspended")
    assert "is a symbolic link" in str(e.value)
    assert target.read_text() == "{}"
    os.unlink(job.record_path)
    elsewhere = private / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.rename(job.dir, str(job.dir) + ".moved")
    os.symlink(elsewhere, job.dir)
    with pytest.raises(store.StoreError):
        job.update_record(state="suspended")
    assert os.listdir(elsewhere) == []


def test_a_fifo_record_is_refused_without_waiting(private, monkeypatch):
    monkeypatch.setenv("PORTAL_HOME", str(private / "home"))
    job = jobs.Job.create("train.py")
    os.mkfifo(job.record_path, 0o600)
    r = subprocess.run([sys.executable, "-c",
                        "import sys; from _portal.store import jobs\n"
                        "try:\n    jobs.Job(sys.argv[1]).read_record()\n"
                        "except Exception as e:\n    print(type(e).__name__, e)", job.dir],
                       capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, PYTHONPATH=PYDIR))
    assert r.stdout.startswith("StoreError job ") and "is not a regular file (a fifo)" in r.stdout
