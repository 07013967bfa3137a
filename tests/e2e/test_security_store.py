"""The job store against another user and bad input (issue 10, "The store" in
docs/security.md): every command checks PORTAL_HOME and each job before use; a
planted symlink, FIFO, foreign job or damaged record is refused with the reason,
and nothing is ever written through it.

Cross-user cases run the victim and the attacker as two real unprivileged users
(the `users` fixture: root only, skipped otherwise with that reason).
"""
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import RUN_TIMEOUT, base_env

PORTAL_RUN = os.environ.get("PORTAL_RUN")
PORTAL = os.environ.get("PORTAL") or (PORTAL_RUN and str(Path(PORTAL_RUN).with_name("portal")))
SUSPENDED = 75
LOOP = """\
import os, sys
total = 0
for i in range(6):
    total += i
    if len(sys.argv) > 1:
        os.chdir(sys.argv[1])   # a program that moves: the store must not move with it
    print("i", i, total, flush=True)
print("total", total)
"""
LOOP_OOM = "/loop.py:4@3"   # `total += i` the 3rd time: iteration 2 runs again
OK = 'print("hello")\n'
VICTIM_TEXT = b"the victim's own file\n"


def run(cmd, *, cwd, home, expect, user=None, extra=None):
    env = base_env({"PORTAL_HOME": str(home), **(extra or {})})
    kwargs = dict(cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT)
    p = user.run(cmd, **kwargs) if user else subprocess.run(cmd, **kwargs)
    assert p.returncode == expect, (cmd, p.returncode, p.stdout, p.stderr)
    assert b"Traceback" not in p.stderr and b"terminate called" not in p.stderr, p.stderr
    return p


def programs(w):
    w.mkdir(mode=0o755)
    os.chmod(w, 0o755)
    (w / "loop.py").write_text(LOOP)
    (w / "ok.py").write_text(OK)
    return w


@pytest.fixture
def work(tmp_path):
    return programs(tmp_path / "work")


@pytest.fixture
def shared_work(shared_dir):
    """The programs where both users can read them (root's tmp_path is 0700)."""
    return programs(shared_dir / "work")


def new_job(work, home, script="ok.py", expect=0, fake=None, args=()):
    before = set(os.listdir(home / "jobs")) if (home / "jobs").exists() else set()
    run([PORTAL_RUN, script, *args], cwd=work, home=home, expect=expect,
        extra={"PORTAL_FAKE_OOM": fake} if fake else None)
    (job,) = set(os.listdir(home / "jobs")) - before
    return job


def row(listed, job):
    """The `portal list` row of `job`, its columns single-spaced."""
    for line in listed.splitlines():
        if line.startswith(job + " "):
            return " ".join(line.split())
    raise AssertionError(f"no row for {job} in:\n{listed}")


def victim_file(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_bytes(VICTIM_TEXT)
    return target


# --- planted symlinks in the user's own store ---------------------------------------

def test_a_symlinked_lock_is_refused_and_never_written_through(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home)
    target = victim_file(tmp_path)
    lock = home / "jobs" / job / "job.lock"
    lock.unlink()
    lock.symlink_to(target)
    p = run([PORTAL, "rm", job], cwd=work, home=home, expect=1)
    assert f"portal: rm: {lock}: a symlink; it cannot be trusted (".encode() in p.stderr, p.stderr
    listed = run([PORTAL, "list"], cwd=work, home=home, expect=0).stdout.decode()
    assert row(listed, job).startswith(f"{job} refused (job.lock: a symlink)"), listed
    assert target.read_bytes() == VICTIM_TEXT and (home / "jobs" / job).is_dir()


def test_a_symlinked_log_is_refused_by_logs_and_by_the_run_that_would_append(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home, "loop.py", expect=SUSPENDED, fake=LOOP_OOM)
    target = victim_file(tmp_path)
    log = home / "jobs" / job / "output.log"
    log.unlink()
    log.symlink_to(target)
    p = run([PORTAL, "logs", job], cwd=work, home=home, expect=1)
    assert f"portal: logs: {log}: a symlink; it cannot be trusted (".encode() in p.stderr, p.stderr
    # The resume runs the program, but keeps no output through the link.
    p = run([PORTAL, "resume", job], cwd=work, home=home, expect=0)
    assert f"portal: store: {log}: a symlink; it cannot be trusted (".encode() in p.stderr, p.stderr
    assert b"total 15" in p.stdout
    assert target.read_bytes() == VICTIM_TEXT


def test_a_symlinked_record_or_jobs_dir_is_refused_and_never_written_through(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home)
    target = victim_file(tmp_path)
    record = home / "jobs" / job / "job.json"
    record.unlink()
    record.symlink_to(target)
    listed = run([PORTAL, "list"], cwd=work, home=home, expect=0).stdout.decode()
    assert row(listed, job).startswith(f"{job} refused (job.json: a symlink)"), listed
    p = run([PORTAL, "show", job], cwd=work, home=home, expect=1)
    assert f"{record}: a symlink; it cannot be trusted".encode() in p.stderr, p.stderr
    run([PORTAL, "gc", "--older-than", "0"], cwd=work, home=home, expect=0)
    assert target.read_bytes() == VICTIM_TEXT

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (home / "jobs").rename(tmp_path / "old-jobs")
    (home / "jobs").symlink_to(elsewhere)
    p = run([PORTAL, "list"], cwd=work, home=home, expect=1)
    assert p.stderr.startswith(f"portal: store: {home / 'jobs'}: a symlink; it cannot be trusted (".encode()), p.stderr
    p = run([PORTAL_RUN, "ok.py"], cwd=work, home=home, expect=0)
    assert p.stdout == b"hello\n" and b"it cannot be trusted" in p.stderr
    assert os.listdir(elsewhere) == []


def test_a_fifo_or_dev_zero_in_a_job_is_refused_without_waiting_or_reading(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home)
    d = home / "jobs" / job
    for name in ("output.log", "job.lock"):
        (d / name).unlink()
        os.mkfifo(d / name, 0o600)   # an open that waited for a writer would hang here
    p = run([PORTAL, "logs", job], cwd=work, home=home, expect=1)
    assert b"job.lock: a FIFO, not a regular file; it cannot be trusted" in p.stderr, p.stderr
    (d / "job.lock").unlink()
    p = run([PORTAL, "logs", job], cwd=work, home=home, expect=1)
    assert f"portal: logs: {d / 'output.log'}: a FIFO, not a regular file; it cannot be trusted".encode() in p.stderr
    (d / "job.json").unlink()
    (d / "job.json").symlink_to("/dev/zero")
    listed = run([PORTAL, "list"], cwd=work, home=home, expect=0).stdout.decode()
    assert row(listed, job).startswith(f"{job} refused (job.json: a symlink)"), listed


# --- another user ---------------------------------------------------------------------

def test_a_store_owned_by_another_user_is_refused_by_every_command(users, shared_dir, shared_work):
    work = shared_work
    victim, attacker = users
    home = shared_dir / "store"
    attacker.run(["mkdir", "-m", "700", "-p", str(home / "jobs" / "ok-aaaaaa")], check=True)
    for command in (["list"], ["show", "ok-aaaaaa"], ["resume", "ok-aaaaaa"], ["rm", "ok-aaaaaa"], ["gc"],
                    ["logs", "ok-aaaaaa"], ["inspect", "ok-aaaaaa"]):
        p = run([PORTAL, *command], cwd="/", home=home, expect=1, user=victim)
        assert p.stderr == (f"portal: store: {home}: owned by uid {attacker.uid}; it cannot be trusted "
                            "(it is not yours: set PORTAL_HOME to a directory of yours)\n").encode(), (command, p.stderr)
    # A run still runs the program, exactly, and writes nothing into that store.
    p = run([PORTAL_RUN, str(work / "ok.py")], cwd="/", home=home, expect=0, user=victim)
    assert p.stdout == b"hello\n" and b"it cannot be trusted" in p.stderr, p.stderr
    assert os.listdir(home / "jobs") == ["ok-aaaaaa"]


def test_another_users_job_in_my_store_is_refused_and_kept(users, shared_dir, shared_work):
    work = shared_work
    victim, attacker = users
    home = shared_dir / "store"
    run([PORTAL_RUN, str(work / "ok.py")], cwd="/", home=home, expect=0, user=victim)
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700  # created private, inside the sticky shared dir
    (mine,) = os.listdir(home / "jobs")
    planted = home / "jobs" / "evil-bbbbbb"
    planted.mkdir()
    (planted / "job.json").write_text(json.dumps({"state": "suspended", "id": "evil-bbbbbb"}))
    for path in (planted, planted / "job.json"):
        os.chown(path, attacker.uid, attacker.gid)
    listed = run([PORTAL, "list"], cwd="/", home=home, expect=0, user=victim).stdout.decode()
    assert f"evil-bbbbbb  refused (owned by uid {attacker.uid})" in listed, listed
    assert row(listed, mine).startswith(f"{mine} completed"), listed
    for command in (["show"], ["resume"], ["rm"]):
        p = run([PORTAL, *command, "evil-bbbbbb"], cwd="/", home=home, expect=1, user=victim)
        assert f"{planted}: owned by uid {attacker.uid}; it cannot be trusted".encode() in p.stderr, p.stderr
    assert (planted / "job.json").exists()


def test_a_store_under_a_sticky_dir_the_attacker_made_is_refused(users, shared_dir, shared_work):
    work = shared_work
    victim, attacker = users
    trap = shared_dir / "team"
    attacker.run(["mkdir", "-m", "1777", str(trap)], check=True)
    home = trap / "portal"
    p = run([PORTAL_RUN, str(work / "ok.py")], cwd="/", home=home, expect=0, user=victim)
    assert p.stdout == b"hello\n"
    assert (f"{home}: its parent {trap} is owned by uid {attacker.uid}, neither you nor root, who could "
            "replace it; it cannot be trusted").encode() in p.stderr, p.stderr
    assert not home.exists()
    p = run([PORTAL, "list"], cwd="/", home=home, expect=1, user=victim)
    assert p.stderr.startswith(f"portal: store: {home}: its parent {trap}".encode()), p.stderr


# --- damaged and planted records ------------------------------------------------------

DAMAGED = {
    "nullstate-000001": (b'{"state": null}', "unreadable (field 'state' is null, not a string)"),
    "array-000002": (b"[1, 2, 3]", "unreadable (not a job record (an array, not an object))"),
    "string-000003": (b'"suspended"', "unreadable (not a job record (a string, not an object))"),
    "hugeint-000004": (b'{"state": "failed", "exit_status": 1' + b"0" * 400 + b"}",
                       "unreadable (not valid json (a number too large))"),
    "float-000008": (b'{"state": "failed", "exit_status": 1e300}',
                     "unreadable (field 'exit_status' is a number, not an integer)"),
    "big-000005": (b" " * (1 << 20) + b"{}", "unreadable (larger than 1048576 bytes)"),
    "notutf8-000006": (b'{"cwd": "\xff\xfe"}', "unreadable (not UTF-8 text)"),
}


def test_damaged_records_are_unreadable_with_their_reason_and_every_other_job_works(tmp_path, work):
    home = tmp_path / "home"
    good = new_job(work, home)
    for job, (text, _) in DAMAGED.items():
        (home / "jobs" / job).mkdir(mode=0o700)
        (home / "jobs" / job / "job.json").write_bytes(text)
    (home / "jobs" / "fifo-000007").mkdir(mode=0o700)
    os.mkfifo(home / "jobs" / "fifo-000007" / "job.json", 0o600)
    listed = run([PORTAL, "list"], cwd=work, home=home, expect=0).stdout.decode()
    for job, (_, shown) in DAMAGED.items():
        assert row(listed, job).startswith(f"{job} {shown}"), listed
    assert row(listed, "fifo-000007").startswith("fifo-000007 refused (job.json: a FIFO, not a regular file)"), listed
    assert row(listed, good).startswith(f"{good} completed"), listed
    for job in (*DAMAGED, "fifo-000007"):
        p = run([PORTAL, "show", job], cwd=work, home=home, expect=1)
        assert p.stderr.startswith(f"portal: show: job {job}: ".encode()), p.stderr
    run([PORTAL, "show", good], cwd=work, home=home, expect=0)
    run([PORTAL, "gc"], cwd=work, home=home, expect=0)
    json.loads(run([PORTAL, "list", "--json"], cwd=work, home=home, expect=0).stdout)


def test_escape_sequences_in_a_record_are_printed_escaped(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home)
    path = home / "jobs" / job / "job.json"
    record = json.loads(path.read_text())
    record["cwd"] = "/w\x1b]0;owned\x07\x1b[2J"
    record["program"]["target"] = "/w/\x1b[31mtrain.py"
    record["args"] = ["\x9b31m", "\r"]
    path.write_text(json.dumps(record))
    for command in (["list"], ["show", job]):
        out = run([PORTAL, *command], cwd=work, home=home, expect=0).stdout
        assert b"\x1b" not in out and b"\x07" not in out and b"\r" not in out and "\x9b".encode() not in out, out
    shown = run([PORTAL, "show", job], cwd=work, home=home, expect=0).stdout.decode()
    assert "cwd         /w\\x1b]0;owned\\x07\\x1b[2J" in shown, shown


# --- never lose a suspended job -------------------------------------------------------

def test_a_relative_store_is_made_absolute_for_a_program_that_chdirs(tmp_path, work):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env_home = Path("rel-home")
    job = new_job(work, work / env_home, "loop.py", expect=SUSPENDED, fake=LOOP_OOM, args=[str(elsewhere)])
    assert not (elsewhere / env_home).exists()
    listed = run([PORTAL, "list"], cwd=work, home=env_home, expect=0).stdout.decode()
    assert row(listed, job).startswith(f"{job} suspended"), listed
    p = run([PORTAL, "resume", job], cwd=work, home=env_home, expect=0)
    assert b"total 15" in p.stdout


def test_leftovers_of_interrupted_writes_are_cleaned_by_the_next_command(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home, "loop.py", expect=SUSPENDED, fake=LOOP_OOM)
    d = home / "jobs" / job
    (d / "job.json.tmp4242").write_text("{half a rec")
    (d / ".checkpoint.tmp-4242-abcd").mkdir(mode=0o700)
    (d / ".checkpoint.tmp-4242-abcd" / "state.pickle").write_bytes(b"x" * 100)
    run([PORTAL, "list"], cwd=work, home=home, expect=0)
    assert not (d / "job.json.tmp4242").exists() and not (d / ".checkpoint.tmp-4242-abcd").exists()
    p = run([PORTAL, "resume", job], cwd=work, home=home, expect=0)
    assert b"total 15" in p.stdout


def test_a_job_whose_record_missed_its_checkpoint_is_recovered_and_resumes(tmp_path, work):
    home = tmp_path / "home"
    job = new_job(work, home, "loop.py", expect=SUSPENDED, fake=LOOP_OOM)
    path = home / "jobs" / job / "job.json"
    # What a full disk at the record write (or a kill right after the commit) leaves.
    record = json.loads(path.read_text())
    for key in ("suspended_at", "expires_at", "loop", "iteration"):
        record.pop(key, None)
    record["state"] = "failed"
    path.write_text(json.dumps(record))
    listed = run([PORTAL, "list"], cwd=work, home=home, expect=0).stdout.decode()
    assert row(listed, job).startswith(f"{job} suspended (recovered from its checkpoint)"), listed
    p = run([PORTAL, "resume", job], cwd=work, home=home, expect=0)
    assert b"total 15" in p.stdout
    assert json.loads(path.read_text())["state"] == "completed"


# --- the signing key ------------------------------------------------------------------

def fails_as_python(work, home):
    """loop.py with its out-of-memory error: it ends with python's traceback of it
    (the program's, not Portal's) and exit status 1."""
    p = subprocess.run([PORTAL_RUN, "loop.py"], cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=RUN_TIMEOUT,
                       env=base_env({"PORTAL_HOME": str(home), "PORTAL_FAKE_OOM": LOOP_OOM}))
    assert p.returncode == 1, p
    assert p.stderr.count(b"Traceback") == 1 and b"\nMemoryError" in p.stderr, p.stderr
    assert b"_portal" not in p.stderr, p.stderr   # no frame of Portal's own
    return p


def test_a_symlinked_key_signs_nothing_and_is_never_written_through(tmp_path, work):
    """A `key` planted as a symlink to a file of the user's: the rescue refuses it
    (the out-of-memory error then fails the job as under python, saying why), the
    file it points at is unchanged, and no checkpoint is left."""
    home = tmp_path / "home"
    new_job(work, home)                      # the store exists (and its key, made by the cache)
    target = victim_file(tmp_path)
    if (home / "key").exists():
        os.unlink(home / "key")
    os.symlink(target, home / "key")
    p = fails_as_python(work, home)
    last = p.stderr.decode().splitlines()[-1]
    assert last.startswith("portal: not rescued: ") and "key" in last and "symbolic link" in last, p.stderr
    assert b"MemoryError" in p.stderr
    assert target.read_bytes() == VICTIM_TEXT
    assert not list(home.glob("jobs/*/checkpoint*")), list(home.glob("jobs/*/*"))


def test_a_key_of_another_user_signs_nothing(users, tmp_path, work):
    """A `key` in the store owned by someone else (chown, as root): refused, the job
    fails as under python, naming the owner."""
    home = tmp_path / "home"
    new_job(work, home)
    key = home / "key"
    if key.exists():
        os.unlink(key)
    key.write_bytes(b"k" * 32)
    os.chmod(key, 0o600)
    os.chown(key, users[1].uid, users[1].gid)
    p = fails_as_python(work, home)
    last = p.stderr.decode().splitlines()[-1]
    assert last.startswith("portal: not rescued: ") and f"owned by uid {users[1].uid}" in last, p.stderr
    assert key.read_bytes() == b"k" * 32
