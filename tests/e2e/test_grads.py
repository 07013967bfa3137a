"""Issue 26, item 2 (grads/train.py): an error inside or after `loss.backward()`
leaves the gradients the failed iteration's backward had already written.  Where
they were None or zero when that backward started (zero_grad() at the end of the
body, or first in it; set_to_none either way; an optimizer's or a module's
zero_grad; a block under torch.utils.checkpoint, its recomputation inside
backward), they are put back: the resumed run ends bit for bit as python's.
Where they held earlier micro-batches (gradient accumulation), the suspension
names it, and the resumed run does differ; `--policy oom.exact=true` declines
such a point."""
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, store_env

HERE = Path(__file__).parent / "grads"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
SUSPENDED = 75
TIMEOUT = 300


def _line(text):
    return 1 + next(i for i, line in enumerate((HERE / "train.py").read_text().splitlines())
                    if line.strip() == text)


IN_BACKWARD = _line("grad = grad * 1.0")            # Probe.backward: inside the engine
IN_RECOMPUTE = _line("return torch.tanh(self.b(h))")  # the checkpointed block: 2 hits a step
AFTER_BACKWARD = _line("after = loss.detach()")
GRADS = "the failed iteration's backward() had already added to the gradients of"


@pytest.fixture
def work(tmp_path):
    shutil.copytree(HERE, tmp_path / "work")
    return tmp_path / "work"


@functools.lru_cache(maxsize=None)
def python_digest(args):
    out = subprocess.run([PYTHON, "train.py", *args], cwd=HERE, capture_output=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


def suspend_and_resume(work, args, fake=None, options=(), resume_options=(), before_resume=None, **env):
    if fake:
        env["PORTAL_FAKE_OOM"] = f"work/train.py:{fake}"
    first = subprocess.run([PORTAL_RUN, *options, "train.py", *args], cwd=work, capture_output=True,
                           env=store_env(work.parent / "home", **env), timeout=TIMEOUT)
    assert first.returncode == SUSPENDED, first.stderr.decode()
    [job] = os.listdir(work.parent / "home" / "jobs")
    if before_resume:
        before_resume(job)
    second = subprocess.run([PORTAL, "resume", job, *resume_options], cwd=work, capture_output=True,
                            env=store_env(work.parent / "home"), timeout=TIMEOUT)
    assert second.returncode == 0, second.stderr.decode()
    return first, second


def differ_lines(stderr):
    return [line for line in stderr.decode().splitlines() if "will differ" in line]


# (pattern, set_to_none, who zeroes, checkpointed block), where the error strikes
EXACT = [
    ("zero_last", "0", "opt", "0", f"{IN_BACKWARD}@6"),
    ("zero_last", "1", "opt", "0", f"{IN_BACKWARD}@6"),
    ("zero_last", "0", "net", "1", f"{IN_RECOMPUTE}@12"),
    ("zero_last", "1", "net", "1", f"{IN_BACKWARD}@6"),
    ("zero_last", "0", "opt", "1", f"{AFTER_BACKWARD}@6"),
    ("zero_first", "0", "opt", "0", f"{AFTER_BACKWARD}@6"),
    ("zero_first", "1", "opt", "1", f"{IN_RECOMPUTE}@12"),
    ("accum", "0", "opt", "0", f"{IN_BACKWARD}@5"),     # the first micro-batch after zero_grad
]


@pytest.mark.parametrize("case", EXACT, ids=["-".join(c[:4]) + "-at-" + c[4] for c in EXACT])
def test_gradients_zero_or_none_at_the_start_are_put_back(work, case):
    *args, fake = case
    first, second = suspend_and_resume(work, tuple(args), fake)
    assert differ_lines(first.stderr) == [], first.stderr.decode()
    assert second.stdout == python_digest(tuple(args))


# accumulation: the failed micro-batch's backward had reached some parameters
NAMED = [
    (("accum", "0", "opt", "0"), f"{IN_BACKWARD}@6", 4),      # the last layer and the middle block
    (("accum", "1", "opt", "1"), f"{IN_RECOMPUTE}@12", 2),    # the last layer only
    (("accum", "0", "net", "0"), f"{AFTER_BACKWARD}@6", 6),   # all of them
]


@pytest.mark.parametrize("args,fake,count", NAMED, ids=["-".join(c[0]) + "-at-" + c[1] for c in NAMED])
def test_accumulated_gradients_are_named(work, args, fake, count):
    shown = []

    def show(job):   # the job record keeps it: `portal show` lists it
        shown.append(subprocess.run([PORTAL, "show", job], cwd=work, capture_output=True,
                                    env=store_env(work.parent / "home"), timeout=TIMEOUT).stdout.decode())
    first, second = suspend_and_resume(work, args, fake, before_resume=show)
    assert differ_lines(first.stderr) == [
        f"portal: suspended: will differ: {GRADS} {count} parameters: that micro-batch will count twice"]
    # true: the micro-batch did count twice
    assert second.stdout != python_digest(args) and len(second.stdout) == len(python_digest(args))
    assert f"{GRADS} {count} parameters" in shown[0]


def test_oom_exact_declines_accumulated_gradients(work):
    args = ("accum", "0", "opt", "0")
    python = subprocess.run([PYTHON, "train.py", *args], cwd=work, capture_output=True, timeout=TIMEOUT,
                            env=dict(os.environ))
    out = subprocess.run([PORTAL_RUN, "--policy", "oom.exact=true", "train.py", *args], cwd=work,
                         capture_output=True, timeout=TIMEOUT,
                         env=store_env(work.parent / "home", PORTAL_FAKE_OOM=f"work/train.py:{IN_BACKWARD}@6"))
    assert python.returncode == 0 and out.returncode == 1, out.stderr.decode()
    assert out.stdout == b""
    assert (f"portal: not rescued: with oom.exact=true, not a point where something will differ: "
            f"{GRADS} 4 parameters: that micro-batch will count twice") in out.stderr.decode()
    # a point where the gradients are put back is exact: oom.exact=true suspends there
    shutil.rmtree(work.parent / "home")
    first, second = suspend_and_resume(work, ("zero_last", "0", "opt", "0"), f"{IN_BACKWARD}@6",
                                       options=("--policy", "oom.exact=true"))
    assert second.stdout == python_digest(("zero_last", "0", "opt", "0"))


def test_a_real_out_of_memory_error_inside_backward(work):
    """torch's allocator refuses a request inside a custom Function's backward under
    `--mem 1G`, after the last layers' gradients were accumulated; resumed with
    `--mem 8G` the job ends as python's."""
    args = ("zero_last", "0", "opt", "1")
    first, second = suspend_and_resume(work, args, options=("--mem", "1G"), resume_options=("--mem", "8G"),
                                       SPIKE_AT="6")
    assert b"can't allocate memory" in first.stderr or b"MemoryError" in first.stderr, first.stderr.decode()
    assert differ_lines(first.stderr) == []
    assert second.stdout == python_digest(args)


def test_a_retry_sees_the_gradients_put_back(work):
    """oom.action=retry resumes at once from the checkpoint written after the
    gradients were put back: one command, python's result."""
    args = ("zero_last", "1", "opt", "1")
    run = subprocess.run([PORTAL_RUN, "--policy", "oom.action=retry", "train.py", *args], cwd=work,
                         capture_output=True, timeout=TIMEOUT,
                         env=store_env(work.parent / "home", PORTAL_FAKE_OOM=f"work/train.py:{IN_BACKWARD}@6"))
    assert run.returncode == 0, run.stderr.decode()
    assert b"portal: retrying: " in run.stderr
    assert run.stdout == python_digest(args)


def test_a_skipped_item_leaves_no_half_backward_in_the_gradients(work):
    """oom.action=skip drops the item in the same process: its half-done backward
    does not reach the next step.  Python's equivalent is the run whose step 5
    never happened (SKIP=5), with no fake error."""
    args = ("zero_last", "0", "opt", "0")
    run = subprocess.run([PORTAL_RUN, "--policy", "oom.action=skip", "train.py", *args], cwd=work,
                         capture_output=True, timeout=TIMEOUT,
                         env=store_env(work.parent / "home", PORTAL_FAKE_OOM=f"work/train.py:{IN_BACKWARD}@6"))
    assert run.returncode == 0, run.stderr.decode()
    python = subprocess.run([PYTHON, "train.py", *args], cwd=work, capture_output=True, timeout=TIMEOUT,
                            env=dict(os.environ, SKIP="5"))
    assert python.returncode == 0, python.stderr.decode()
    assert run.stdout == python.stdout != python_digest(args)


def test_gradients_outside_any_optimizer_are_named_as_possible(work):
    """A hand-written SGD step over a module's parameters, no optimizer, no
    zero_grad(): Portal did not note those gradients before the backward, so the
    tensors of the state that hold one are named as possibly counted twice."""
    args = ("zero_last", "1", "none", "0")
    first, second = suspend_and_resume(work, args, f"{IN_BACKWARD}@6")
    assert differ_lines(first.stderr) == [
        "portal: suspended: will differ: the failed iteration's backward() may have added to the gradients of "
        "4 tensors that no optimizer holds (Portal notes only an optimizer's parameters, or a module's that "
        "zero_grad() zeroes): that micro-batch may count twice"]
    assert second.stdout != python_digest(args)
