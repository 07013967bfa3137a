"""Idioms of ordinary training code (fidelity_idioms/), each run uninterrupted
under /usr/bin/python3, then under portal-run suspended by a fake out-of-memory
error at a chosen point of an iteration, resumed by `portal resume` in a new
process, and compared with python's run bit for bit: the printed loss curve and
the digest of the final state_dict (every tensor's bytes)."""
import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import python_version, store_env, torch_oom_name
from test_training import PORTAL, PORTAL_RUN, PYTHON

HERE = Path(__file__).parent / "fidelity_idioms"


@functools.lru_cache(maxsize=None)
def python_output(script, tmp_root):
    work = Path(tmp_root) / f"python-idioms-{script}"
    shutil.copytree(HERE, work)
    r = subprocess.run([PYTHON, script], cwd=work, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def work(tmp_path):
    shutil.copytree(HERE, tmp_path / "work")
    return tmp_path / "work"


def env_for(work, **extra):
    return store_env(work.parent / "home", **extra)


def suspend_and_resume(work, program, **env):
    """portal-run PROGRAM... suspended (exit 75), then `portal resume JOB`."""
    first = subprocess.run([PORTAL_RUN, *program], cwd=work, capture_output=True,
                           env=env_for(work, **env), timeout=300)
    assert first.returncode == 75, first.stderr.decode()
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True,
                            env=env_for(work), timeout=300)
    assert second.returncode == 0, second.stderr.decode()
    return first, second


# --- with torch.autocast(...) / torch.no_grad() / contextlib.nullcontext() ------------------

AMP_CASES = [
    # (fake OOM spec, kind): where in the iteration it fails
    ("amp_train.py:20@9", "torch"),     # before the forward pass
    ("amp_train.py:23@12", "cpu"),      # inside the autocast block, the forward pass
    ("amp_train.py:26@7", "cuda"),      # in backward(): the loss was assigned inside the with
    ("amp_train.py:26@15", "torch"),    # in backward(), after a no_grad validation pass
    ("amp_train.py:27@10", "cpu"),      # in the gradient clipping
]


@pytest.mark.parametrize("spec,kind", AMP_CASES, ids=[f"{c[1]}-{c[0].split(':')[1]}" for c in AMP_CASES])
def test_autocast_training_resumes_bit_for_bit(work, tmp_path_factory, spec, kind):
    expected = python_output("amp_train.py", str(tmp_path_factory.getbasetemp()))
    first, second = suspend_and_resume(work, ["amp_train.py"], PORTAL_FAKE_OOM=f"{spec}={kind}")
    assert first.stdout + second.stdout == expected
    assert b"weights " in expected and expected.count(b"step ") == 6
    # The failed iteration's loss was a dead local, not a tensor in a live graph.
    assert b"live autograd graph" not in first.stderr
    assert b"portal: suspended: will continue from the loop at " in first.stderr


# --- portal-run -m pkg.train, portal-run -c CODE --------------------------------------------

# The line of runpy's _run_module_as_main that calls _run_code: 198 up to 3.13,
# 203 in 3.14 (python3.14 -m in the forky root).
RUNPY_MAIN_LINE = 198 if tuple(int(p) for p in python_version().split(".")[:2]) < (3, 14) else 203


@pytest.mark.parametrize("spec", ["pkg/train.py:21@10=torch", "pkg/train.py:19@19=cpu"])
def test_a_module_run_with_dash_m_is_rescued_and_resumes_bit_for_bit(work, spec):
    python = subprocess.run([PYTHON, "-m", "pkg.train"], cwd=work, capture_output=True, timeout=300)
    assert python.returncode == 0, python.stderr
    first, second = suspend_and_resume(work, ["-m", "pkg.train"], PORTAL_FAKE_OOM=spec)
    assert b"portal: suspended: will continue from the loop at " + str(work / "pkg" / "train.py:18").encode() \
        in first.stderr, first.stderr
    # The loss curve, the weights, the module's __doc__/__name__/__spec__, and the
    # frames below the module's: runpy's, at python's own lines.
    assert first.stdout + second.stdout == python.stdout
    assert b"stack [('<frozen runpy>', %d, '_run_module_as_main'), ('<frozen runpy>', 88, '_run_code')" \
        % RUNPY_MAIN_LINE in python.stdout


def test_an_error_after_a_dash_m_resume_has_pythons_traceback(work):
    env = dict(FAIL_AFTER="1")
    python = subprocess.run([PYTHON, "-m", "pkg.train"], cwd=work, capture_output=True, timeout=300,
                            env=env_for(work, **env))
    assert python.returncode == 1
    first = subprocess.run([PORTAL_RUN, "-m", "pkg.train"], cwd=work, capture_output=True, timeout=300,
                           env=env_for(work, PORTAL_FAKE_OOM="pkg/train.py:21@10", **env))
    assert first.returncode == 75, first.stderr
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, env=env_for(work),
                            timeout=300)
    assert second.returncode == 1
    assert second.stderr == python.stderr
    assert b'File "<frozen runpy>", line 88, in _run_code' in python.stderr


# A -c program as people write one: a loop at module level, a function with a training
# loop (marked: backward() in its body, dropout drawing), argv, and an error at the end
# whose traceback must be python's (File "<string>", line N, in <module>).
DASH_C = """import sys, torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
def fit(steps):
    for step in range(steps):
        x = torch.randn(5, 4)
        loss = net(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print('step', step, float(loss).hex())
for epoch in range(3):
    fit(4)
    print('epoch', epoch, sys.argv, __name__)
print('weights', float(sum(p.sum() for p in net.parameters())).hex())
raise ValueError('the end')
"""

DASH_C_CASES = [("<string>:15@2", "memory"),    # the module-level loop, before its call of fit()
                ("<string>:9@6", "torch"),      # the function's loop, in the forward
                ("<string>:11@10", "cpu")]      # in backward(), dropout drawn before it


@pytest.mark.parametrize("spec,kind", DASH_C_CASES, ids=[c[0].split(":")[1] for c in DASH_C_CASES])
def test_a_dash_c_program_is_rescued_and_resumes_bit_for_bit(work, spec, kind):
    python = subprocess.run([PYTHON, "-c", DASH_C, "a", "b"], cwd=work, capture_output=True,
                            timeout=300)
    assert python.returncode == 1 and b"weights " in python.stdout, python.stderr
    first = subprocess.run([PORTAL_RUN, "-c", DASH_C, "a", "b"], cwd=work, capture_output=True,
                           env=env_for(work, PORTAL_FAKE_OOM=f"{spec}={kind}"), timeout=300)
    assert first.returncode == 75, first.stderr.decode()
    loop_line = 14 if spec.startswith("<string>:15") else 7
    assert f"portal: suspended: will continue from the loop at <string>:{loop_line}".encode() \
        in first.stderr, first.stderr
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True,
                            env=env_for(work), timeout=300)
    assert second.returncode == 1
    assert first.stdout + second.stdout == python.stdout
    # A warning python prints once before the traceback (torch 2.14: "Converting a
    # tensor with requires_grad=True to a scalar ...", at the first step) was printed
    # by the first run; the resumed one, whose __main__ keeps its __warningregistry__,
    # prints the rest exactly as python does (with torch 1.13 there is none).
    warned = python.stderr[:python.stderr.index(b"Traceback (most recent call last)")]
    assert warned in first.stderr
    assert second.stderr == python.stderr[len(warned):]
    assert b'File "<string>", line 18, in <module>' in python.stderr


# --- csv writers, locks, events, a SummaryWriter-like writer with a flush thread -------------

# before the optimizer steps (an error after it is rollback's: the step would run twice)
LOGGED_CASES = [("logged_train.py:31@9", "torch"), ("logged_train.py:30@17", "cpu"),
                ("logged_train.py:29@5", "memory")]


@pytest.mark.parametrize("spec,kind", LOGGED_CASES, ids=[c[0].split(":")[1] for c in LOGGED_CASES])
def test_csv_logs_locks_and_an_event_writer_resume_bit_for_bit(work, tmp_path_factory, spec, kind):
    expected = python_output("logged_train.py", str(tmp_path_factory.getbasetemp()))
    python_dir = Path(tmp_path_factory.getbasetemp()) / "python-idioms-logged_train.py"
    first, second = suspend_and_resume(work, ["logged_train.py"], PORTAL_FAKE_OOM=f"{spec}={kind}")
    assert first.stdout + second.stdout == expected
    assert b"done True False\n" in expected
    # The files the program wrote, byte for byte: no row lost, none twice (the
    # failed iteration had not written its row yet).
    for name in ("metrics.csv", "events.tsv"):
        assert (work / name).read_bytes() == (python_dir / name).read_bytes(), name
    assert (work / "metrics.csv").read_bytes().count(b"\n") == 1 + 2 * 24


@pytest.mark.parametrize("spec,kind", LOGGED_CASES, ids=[c[0].split(":")[1] for c in LOGGED_CASES])
def test_a_summary_writer_with_a_live_flush_thread_resumes_bit_for_bit(work, tmp_path_factory,
                                                                       spec, kind):
    """eventlog.SummaryWriter: an open event file, a lock, a queue, an Event and a
    daemon thread flushing, as torch.utils.tensorboard's writer has, and no
    __getstate__: the thread is held at its wait while the state is saved and
    started again at the resume; the event file is python's, byte for byte."""
    expected = python_output("logged_train.py", str(tmp_path_factory.getbasetemp()))
    python_dir = Path(tmp_path_factory.getbasetemp()) / "python-idioms-logged_train.py"
    first, second = suspend_and_resume(work, ["logged_train.py"], EVENT_LOG="SummaryWriter",
                                       PORTAL_FAKE_OOM=f"{spec}={kind}")
    assert b"portal: suspended: will continue from the loop at " in first.stderr
    assert first.stdout + second.stdout == expected
    for name in ("metrics.csv", "events.tsv"):
        assert (work / name).read_bytes() == (python_dir / name).read_bytes(), name
    assert (work / "events.tsv").read_bytes().count(b"\tloss\t") == 24


# before the forward, in backward() in a row whose note spans two lines, late in the file
CSV_STREAM_CASES = [("csv_stream.py:34@7", "torch"), ("csv_stream.py:38@9", "cpu"),
                    ("csv_stream.py:36@50", "memory")]


@pytest.mark.parametrize("spec,kind", CSV_STREAM_CASES, ids=[c[0].split(":")[1] for c in CSV_STREAM_CASES])
def test_a_csv_reader_over_an_iterated_file_resumes_at_its_row(work, tmp_path_factory, spec, kind):
    """csv.reader(open(path, newline="")) iterated by the loop: the file cannot tell
    its position (python disables tell() while a file is iterated); it is saved at
    it all the same, and the reader with its line_num: the rows, the line numbers
    and the losses are python's."""
    expected = python_output("csv_stream.py", str(tmp_path_factory.getbasetemp()))
    first, second = suspend_and_resume(work, ["csv_stream.py"], PORTAL_FAKE_OOM=f"{spec}={kind}")
    assert b"portal: suspended: will continue from the loop at " in first.stderr
    assert first.stdout + second.stdout == expected
    assert b"step 59 line 76 'row 59'" in expected and b"weights " in expected


def test_a_thread_in_the_loops_state_declines_naming_it_and_what_to_do(work):
    r = subprocess.run([PORTAL_RUN, "logged_train.py"], cwd=work, capture_output=True, timeout=300,
                       env=env_for(work, EVENT_LOG="PlainEventLog",
                                   PORTAL_FAKE_OOM="logged_train.py:31@9=torch"))
    assert r.returncode == 1, r.stderr
    lines = r.stderr.decode().splitlines()
    assert lines[-2].startswith(f"{torch_oom_name()}: CUDA out of memory.")
    assert lines[-1] == (
        f"portal: not rescued: its state holds local 'events' of train() at {work / 'logged_train.py'}:28"
        "._thread (threading.Thread): a thread (event-flush) cannot be saved: its frames run outside "
        "the loop and it cannot be started again where it is (it is not waiting on a Condition, "
        "Event or Queue); Portal cannot save it: close or drop it before the loop, keep it out of the loop's "
        "state, or give its class __getstate__/__setstate__ that leave it out and make it again")
    assert "tried twice" not in r.stderr.decode()


def test_an_unsaveable_object_sends_the_rescue_to_the_next_loop_out(work):
    first = subprocess.run([PORTAL_RUN, "epochs_unsaveable.py"], cwd=work, capture_output=True,
                           timeout=300, env=env_for(work, PORTAL_FAKE_OOM="epochs_unsaveable.py:11@6"))
    assert first.returncode == 75, first.stderr
    assert (f"portal: suspended: will continue from the loop at {work / 'epochs_unsaveable.py'}:17 "
            "in <module>()").encode() in first.stderr
    assert first.stdout == b"epoch 0 done\n"
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, env=env_for(work),
                            timeout=300)
    assert second.returncode == 0, second.stderr
    # Epoch 1 runs again from its start: the item it had appended is there twice.
    assert second.stdout == b"epoch 1 done\nepoch 2 done\n[0, 1, 2, 3, 10, 10, 11, 12, 13, 20, 21, 22, 23]\n"


# --- comprehensions and generator expressions -----------------------------------------------

@pytest.mark.parametrize("hit,kind,line", [(8, "a list comprehension", 25), (10, "a generator expression", 26)])
def test_an_error_inside_a_comprehension_says_it_was_passed_over(work, hit, kind, line):
    first = subprocess.run([PORTAL_RUN, "validate.py"], cwd=work, capture_output=True, timeout=300,
                           env=env_for(work, PORTAL_FAKE_OOM=f"validate.py:9@{hit}"))
    assert first.returncode == 75, first.stderr
    text = first.stderr.decode()
    # Rescued at the epoch loop around it (its iteration runs again), saying why.
    assert f"will continue from the loop at {work / 'validate.py'}:18 in main()" in text, text
    assert (f"portal: suspended: the error came from inside {kind} at {work / 'validate.py'}:{line}, "
            "which Portal cannot resume at its item (its loop is inside an expression, which cannot "
            "be wrapped): its partial result is dropped and it runs again whole, with the loop's "
            "iteration\n") in text, text
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, env=env_for(work),
                            timeout=300)
    assert second.returncode == 0, second.stderr
    assert first.stdout.count(b"epoch ") + second.stdout.count(b"epoch ") == 3


# --- DataLoader workers ---------------------------------------------------------------------

def processes_in(directory):
    """The pids of the processes whose working directory is `directory`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(directory):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# multiprocessing's own server processes (CPython 3.14 starts DataLoader workers
# through a forkserver by default): they leave when they see their parent gone,
# a moment after it, under python3.14 as under Portal (measured in the forky root).
MP_SERVERS = ("from multiprocessing.forkserver import main", "from multiprocessing.resource_tracker import main")


def workers_left(directory, servers_may_linger_s=3.0):
    """The processes left in `directory` right after the program ended, but for
    multiprocessing's own servers - which must then be gone within a few seconds.
    A worker (a forkserver's child, or the program's under fork) counts at once."""
    found = {}
    for pid in processes_in(directory):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found[pid] = (ppid, cmdline)
    workers = [pid for pid, (ppid, cmdline) in found.items()
               if ppid in found or not any(s in cmdline for s in MP_SERVERS)]
    if workers:
        return workers
    deadline = time.monotonic() + servers_may_linger_s
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in found):
        time.sleep(0.05)
    return [pid for pid in found if os.path.exists(f"/proc/{pid}") and pid in processes_in(directory)]


def test_dataloader_workers_end_with_the_suspended_process(work):
    """No worker process outlives the suspended one (they used to go on until
    their watchdog noticed the parent gone, 5 s later, holding its output pipes)."""
    first = subprocess.run([PORTAL_RUN, "workers_train.py"], cwd=work, capture_output=True, timeout=300,
                           env=env_for(work, PORTAL_FAKE_OOM="workers_train.py:16@20"))
    assert first.returncode == 75, first.stderr
    assert workers_left(work) == []
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, env=env_for(work),
                            timeout=300)
    assert second.returncode == 0, second.stderr
    python = subprocess.run([PYTHON, "workers_train.py"], cwd=work, capture_output=True, timeout=300)
    assert first.stdout + second.stdout == python.stdout


# --- library objects keep their identity: argparse.SUPPRESS, a library's dict ---------------

@pytest.mark.parametrize("spec", ["library_identity.py:25@3", "library_identity.py:27@2"])
def test_a_parser_resumed_parses_again_with_the_librarys_own_objects(work, tmp_path_factory, spec):
    expected = python_output("library_identity.py", str(tmp_path_factory.getbasetemp()))
    first, second = suspend_and_resume(work, ["library_identity.py"], PORTAL_FAKE_OOM=spec)
    assert first.stdout + second.stdout == expected
    # python's own run: a suppressed option stays out, and every object is the library's
    assert b'0 {"debug": false, "lr": 0.1} True True True True True\n' in expected
    assert b"--debug" not in expected
