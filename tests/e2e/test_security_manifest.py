"""Attack suite: bad input in a checkpoint gets a `portal:` line, never a hang, a
crash, a traceback, a file outside the checkpoint read, or wrong numbers (issue
10, items 4 and 5; docs/security.md, "The manifest reader").

Each case damages a suspended job's checkpoint (integrity/train.py, suspended at
its third iteration) and runs both `portal resume JOB` and `portal inspect JOB`:
each must refuse with one `portal:` line on stderr, within a timeout, with no
traceback, and never print a control character of the checkpoint's.  Cases that
get past the signature are re-signed with the user's own key (a user's own
damaged file, or anything running as the user): the reader validates everything
after the signature too.  Then the damage is undone and the job resumes to
python's own output: the refusal left the job intact.
"""
import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess

import pytest

from test_integrity import (CORPUS, PORTAL, PORTAL_RUN, Job, env_for, expected,  # noqa: F401
                            oom_line)

DOMAIN = b"portal-checkpoint-manifest\n"
TIMEOUT = 30
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")   # C0 (but \t \n), DEL, C1


def _sign(key, prefix):
    """The manifest text ``prefix`` + its signature tail, as the writer lays it out."""
    mac = hmac.new(key, DOMAIN + prefix, hashlib.sha256).hexdigest()
    return prefix + f',\n "hmac": "{mac}"\n}}\n'.encode()


def _resign(job, manifest):
    """Write ``manifest`` (a dict) into the job's checkpoint, signed with the user's key."""
    manifest = {k: v for k, v in manifest.items() if k != "hmac"}
    body = json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8")[:-2]
    (job.gen / "manifest.json").write_bytes(_sign(job.key.read_bytes(), body))


def _inspect(job):
    return subprocess.run([PORTAL, "inspect", job.id], cwd=job.cwd, capture_output=True,
                          timeout=TIMEOUT, env=env_for(job.home))


def _assert_portal_line(r, command):
    err = r.stderr
    assert r.returncode == 1, (command, r.returncode, r.stdout[-2000:], err)
    assert b"Traceback" not in err and b"Traceback" not in r.stdout, (command, err)
    lines = err.decode("utf-8", "replace").splitlines()
    assert lines and all(line.startswith("portal: ") for line in lines), (command, err)
    assert not CONTROL.search(err) and not CONTROL.search(r.stdout), (command, err, r.stdout)
    return err.decode("utf-8", "replace")


def _refused_both(job, says):
    """`portal resume` and `portal inspect` both refuse; the resume's one line says ``says``."""
    err = job.assert_refused(says)
    _assert_portal_line(subprocess.run([PORTAL, "resume", job.id], cwd=job.cwd,
                                       capture_output=True, timeout=TIMEOUT,
                                       env=env_for(job.home)), "resume")
    ins = _inspect(job)
    ins_err = _assert_portal_line(ins, "inspect")
    assert b"sound        NO" in ins.stdout or ins.stdout == b"", ins.stdout
    return err, ins_err, ins.stdout


@pytest.fixture
def job(tmp_path):
    return Job(tmp_path)


@pytest.fixture
def saved(job, tmp_path):
    return job.backup(tmp_path / "saved")


# --- files that are not files ------------------------------------------------------------

@pytest.mark.parametrize("name", ["manifest.json", "state.pickle", "blobs/0000.bin"])
def test_a_fifo_is_refused_never_waited_on(job, saved, expected, name):
    path = job.gen / name
    os.unlink(path)
    os.mkfifo(path, 0o600)
    err, ins_err, _ = _refused_both(job, f"checkpoint: {name}: is not a regular file (a fifo)")
    assert "is not a regular file (a fifo)" in ins_err
    job.restore(saved)
    job.assert_resumes(expected)


@pytest.mark.parametrize("name", ["manifest.json", "state.pickle", "blobs/0000.bin"])
def test_a_symlink_to_dev_zero_is_refused_never_read(job, saved, expected, name):
    path = job.gen / name
    os.unlink(path)
    os.symlink("/dev/zero", path)
    _refused_both(job, f"checkpoint: {name}: is a symbolic link; it is not trusted")
    job.restore(saved)
    job.assert_resumes(expected)


def test_a_checkpoint_link_leading_out_of_the_job_is_refused(job, expected, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(job.gen, elsewhere, symlinks=True)
    target = os.readlink(job.link)
    os.unlink(job.link)
    os.symlink(elsewhere, job.link)
    _refused_both(job, "not to a generation beside it; it is not trusted")
    os.unlink(job.link)
    os.symlink(target, job.link)
    job.assert_resumes(expected)


# --- names leading out of the checkpoint -----------------------------------------------------

@pytest.mark.parametrize("name", ["../../../job.json", "/etc/passwd", "blobs/../../job.json",
                                  "state.pickle/..", "blobs/0000.bin\x1b[2J"])
@pytest.mark.parametrize("signed", [True, False], ids=["re-signed", "unsigned"])
def test_a_name_outside_the_checkpoint_is_never_opened(job, saved, expected, name, signed):
    manifest = job.manifest()
    manifest["files"][name] = {"size": 1, "sha256": "0" * 64}
    if signed:
        _resign(job, manifest)
        says = "which is not one of a checkpoint's"
    else:
        body = json.dumps({k: v for k, v in manifest.items() if k != "hmac"}, indent=1)
        (job.gen / "manifest.json").write_text(body + "\n")
        says = "carries no signature (hmac)"
    err, ins_err, out = _refused_both(job, says)
    if signed:
        assert "\x1b" not in err + ins_err
    job.restore(saved)
    job.assert_resumes(expected)


# --- escape sequences ------------------------------------------------------------------------

def test_escape_sequences_in_a_manifest_are_never_printed_raw(job, saved, expected):
    manifest = job.manifest()
    evil = "\x1b]0;owned\x07\x1b[2J\u009b31m\r"
    manifest["script"] = evil
    manifest["error"]["message"] = evil
    manifest["argv"] = [evil]
    manifest["loop"]["file"] = evil
    manifest["job_id"] = "train" + evil         # not a job id: refused, shown escaped
    _resign(job, manifest)
    err, ins_err, out = _refused_both(job, "corrupted (bad job_id)")
    assert b"\\x1b]0;owned\\x07" in out        # shown, escaped
    job.restore(saved)
    job.assert_resumes(expected)


# --- parsers' limits -----------------------------------------------------------------------

@pytest.mark.parametrize("text, says", [
    (b'{"format_version": 1, "x": ' + b"[" * 200000 + b"]" * 200000, "nested deeper than"),
    (b'{"format_version": 1' + b"0" * 100000, "a number of more than"),
    (b'{"format_version": 1, "x": 1' + b"9" * 30, "a number of more than"),
    (b'{"format_version": 1, "x": NaN', "NaN is not json"),
    (b'{"format_version": 1, "format_version": 1', "appears twice"),
    (b'{"format_version": 1, "x": "\xff"', "corrupted (not utf-8)"),
], ids=["nested", "huge-int", "long-int", "nan", "duplicate-key", "not-utf8"])
def test_a_nested_or_huge_manifest_gets_a_portal_line(job, saved, expected, text, says):
    (job.gen / "manifest.json").write_bytes(_sign(job.key.read_bytes(), text))
    _refused_both(job, says)
    job.restore(saved)
    job.assert_resumes(expected)


def test_a_manifest_past_the_size_cap_is_refused_unread(job, saved, expected):
    path = job.gen / "manifest.json"
    with open(path, "r+b") as f:
        f.truncate(16 << 20 | 1)                # sparse: nothing to read, all to refuse
    _refused_both(job, "more than the 16777216 a valid one can be")
    job.restore(saved)
    job.assert_resumes(expected)


# --- a damaged buffer table, re-signed -------------------------------------------------------

def _damage(kind, manifest):
    table = manifest["buffers"]
    blob = next(rel for rel in manifest["files"] if rel.startswith("blobs/"))
    if kind == "misaligned":
        table[0][1] += 8
    elif kind == "overlapping":
        table.append(list(table[0]))
    elif kind == "outside":
        table[0][1] = manifest["files"][blob]["size"]
    elif kind == "in-state-pickle":
        table[0][0] = "state.pickle"
    elif kind == "shrunk":                      # same file, fewer bytes: wrong numbers
        table[0][2] -= 8
    elif kind == "negative":
        table[0][1] = -4096
    elif kind == "bool":
        table[0][2] = True
    elif kind == "string-size":
        table[0][2] = str(table[0][2])


@pytest.mark.parametrize("kind", ["misaligned", "overlapping", "outside", "in-state-pickle",
                                  "shrunk", "negative", "bool", "string-size"])
def test_a_damaged_buffer_table_signed_with_your_own_key_is_refused(job, saved, expected, kind):
    manifest = job.manifest()
    assert manifest["buffers"], "the job's checkpoint has an out-of-band buffer"
    _damage(kind, manifest)
    _resign(job, manifest)
    if kind == "shrunk":
        # still where the writer would put it (the gap after it takes the 8 bytes):
        # the array built on it refuses the short buffer before any number is used
        # (so only resume, which builds it, can tell; inspect never unpickles)
        err = job.assert_refused("checkpoint: ")
        assert re.search(r"manifest.json: .*buffer|state.pickle: cannot be loaded \(.*buffer is "
                         r"too small", err), err
    else:
        err, _, _ = _refused_both(job, "checkpoint: manifest.json: ")
        assert re.search(r"buffer|corrupted", err), err
    job.restore(saved)
    job.assert_resumes(expected)


# --- replay -------------------------------------------------------------------------------------

def test_a_checkpoint_of_another_job_of_yours_is_refused(tmp_path, expected):
    first = Job(tmp_path / "a")
    # a second job of the same user, in the same store
    second_cwd = tmp_path / "b"
    second_cwd.mkdir()
    shutil.copy(CORPUS / "train.py", second_cwd)
    r = subprocess.run([PORTAL_RUN, "train.py"], cwd=second_cwd, capture_output=True, timeout=60,
                       env=env_for(first.home, PORTAL_FAKE_OOM=f"train.py:{oom_line()}@3"))
    assert r.returncode == 75, r.stderr
    other = re.search(rb"portal resume (\S+)", r.stderr).group(1).decode()
    other_gen = first.home / "jobs" / other / os.readlink(first.home / "jobs" / other / "checkpoint")
    saved = first.backup(tmp_path / "saved")
    shutil.rmtree(first.gen)
    shutil.copytree(other_gen, first.gen, symlinks=True)    # signed with the same key
    err = first.assert_refused(f"checkpoint: it belongs to job {other}, not {first.id} "
                               f"(replayed or moved)")
    ins = _inspect(first)
    assert f"it belongs to job {other}, not {first.id}".encode() in ins.stderr + ins.stdout
    first.restore(saved)
    first.assert_resumes(expected)
