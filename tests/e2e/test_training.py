"""Training scripts written the way people write them (training/), each suspended
at a chosen step by an out-of-memory error - the fake of each kind (`torch`,
`cuda`, `cpu`) and a real one under `portal-run --mem` - resumed by `portal
resume` in a new process, and compared with an uninterrupted python3 run: the
printed loss curve and the digest of the final state_dict (every tensor's bytes)
must be identical."""
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, store_env, torch_oom_name  # PYTHON: the interpreter under test ($PORTAL_PYTHON)

HERE = Path(__file__).parent / "training"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))


@functools.lru_cache(maxsize=None)
def python_output(script, tmp_root):
    work = Path(tmp_root) / f"python-{script}"
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


def suspend_and_resume(work, script, run_options=(), resume_options=(), **env):
    first = subprocess.run([PORTAL_RUN, *run_options, script], cwd=work, capture_output=True,
                           env=env_for(work, **env), timeout=300)
    assert first.returncode == 75, first.stderr.decode()
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job, *resume_options], cwd=work, capture_output=True,
                            env=env_for(work), timeout=300)
    assert second.returncode == 0, second.stderr.decode()
    return first, second


CASES = [
    # script, fake OOM spec (the step's statement that fails), kind
    ("cnn_train.py", "cnn_train.py:30@7", "torch"),
    ("cnn_train.py", "cnn_train.py:30@12", "cuda"),
    # in backward(), in a loop in a function: the failed iteration's loss is a
    # dead local at the resume point
    ("backward_oom.py", "backward_oom.py:19@13", "cuda"),
    # in backward() after dropout drew random numbers in the forward pass: the
    # generators are rolled back to the iteration's start (iteration.py)
    ("cnn_train.py", "cnn_train.py:31@12", "cpu"),
    ("cnn_train.py", "cnn_train.py:30@23", "cpu"),    # second epoch, after a user torch.save
    ("lstm_tbptt.py", "lstm_tbptt.py:32@20", "torch"),
    ("while_true.py", "while_true.py:20@25", "cpu"),
    ("layers_loop.py", "layers_loop.py:17@30", "torch"),  # inside forward(): resumed at the outer loop
]


@pytest.mark.parametrize("script,spec,kind", CASES, ids=[f"{c[0][:-3]}-{c[2]}-{c[1].split(':')[1]}" for c in CASES])
def test_suspended_training_resumes_bit_for_bit(work, tmp_path_factory, script, spec, kind):
    expected = python_output(script, str(tmp_path_factory.getbasetemp()))
    first, second = suspend_and_resume(work, script, PORTAL_FAKE_OOM=f"{spec}={kind}")
    assert first.stdout + second.stdout == expected
    assert b"weights " in expected


def test_the_loop_inside_forward_is_not_the_resume_point(work):
    first = subprocess.run([PORTAL_RUN, "layers_loop.py"], cwd=work, capture_output=True,
                           env=env_for(work, PORTAL_FAKE_OOM="layers_loop.py:17@30"), timeout=300)
    assert first.returncode == 75
    text = first.stderr.decode()
    assert f"will continue from the loop at {work / 'layers_loop.py'}:25 in <module>(), iteration 7 (0-based);" in text, text


def test_a_consumed_graph_is_saved_as_values_and_named(work):
    first = subprocess.run([PORTAL_RUN, "lstm_tbptt.py"], cwd=work, capture_output=True,
                           env=env_for(work, PORTAL_FAKE_OOM="lstm_tbptt.py:32@20"), timeout=300)
    assert first.returncode == 75
    assert ("portal: suspended: saved as plain tensors, their autograd graph already used by backward(): "
            "global 'logits', global 'loss'\n") in first.stderr.decode()


def test_a_live_graph_across_iterations_is_never_cut(work):
    python = subprocess.run([PYTHON, "live_sum.py"], cwd=work, capture_output=True,
                            env=env_for(work, PORTAL_FAKE_OOM="live_sum.py:11@5"))
    r = subprocess.run([PORTAL_RUN, "live_sum.py"], cwd=work, capture_output=True,
                       env=env_for(work, PORTAL_FAKE_OOM="live_sum.py:11@5"), timeout=300)
    assert r.returncode == 1
    lines = r.stderr.decode().splitlines()
    assert lines[-2] == "MemoryError"
    assert lines[-1] == ("portal: not rescued: its state holds global 'total' (torch.Tensor): a tensor in "
                         "a live autograd graph (grad_fn=AddBackward0): it could still be back-propagated, "
                         "and saving it would cut its graph")
    assert python.returncode == 0  # python never saw the fake; the real run had nothing to fail


def test_a_real_out_of_memory_error_in_training(work, tmp_path_factory):
    expected = python_output("while_true.py", str(tmp_path_factory.getbasetemp()))
    first, second = suspend_and_resume(work, "while_true.py", run_options=("--mem", "2G"),
                                       resume_options=("--mem", "8G"), BIG_AT="33")
    assert b"DefaultCPUAllocator: can't allocate memory" in first.stderr
    assert first.stdout + second.stdout == expected


def test_an_error_inside_an_lbfgs_closure_is_inside_the_step(work):
    r = subprocess.run([PORTAL_RUN, "lbfgs.py"], cwd=work, capture_output=True,
                       env=env_for(work, PORTAL_FAKE_OOM="lbfgs.py:13@7=torch"), timeout=300)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.decode().splitlines()
    assert lines[-2].startswith(f"{torch_oom_name()}: CUDA out of memory.")
    assert lines[-1].startswith("portal: not rescued: raised inside an optimizer step (")
    assert "/torch/optim/" in lines[-1] and lines[-1].endswith("): the weights may be half updated")
    assert not [p for p in (work.parent / "home" / "jobs").glob("*/checkpoint*")]


def _torch_compile_missing():
    """Why torch.compile cannot run under the interpreter under test, or None."""
    r = subprocess.run([PYTHON, "-c", "import torch; print(int(hasattr(torch, 'compile')))"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or r.stdout.strip() != "1":
        return "this torch has no torch.compile (torch 1.x: Debian 12's 1.13); the 3.13 and 3.14 lanes run it"
    return None


COMPILED_CASES = [
    # backend, fake OOM spec, kind: before the compiled forward, and in backward()
    # (through the compiled graph's backward), after Dynamo compiled in earlier steps
    ("aot_eager", "compiled_train.py:27@6", "torch"),
    ("inductor", "compiled_train.py:27@9", "torch"),
    ("inductor", "compiled_train.py:29@5", "cpu"),
]


@pytest.mark.parametrize("backend,spec,kind", COMPILED_CASES,
                         ids=[f"{c[0]}-{c[1].split(':')[1]}" for c in COMPILED_CASES])
def test_a_compiled_model_resumes_bit_for_bit_on_the_compiled_path(work, backend, spec, kind):
    # torch.compile in the loop: Dynamo installs its own frame-evaluation function, which
    # Portal's resume hook chains to; the resumed process compiles the model again
    # ("compiled graphs" counts this process's graphs) and its numbers are python's.
    missing = _torch_compile_missing()
    if missing:
        pytest.skip(missing)
    plain = subprocess.run([PYTHON, "compiled_train.py", backend], cwd=work, capture_output=True,
                           timeout=600)
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    assert b"compiled graphs 0\n" not in plain.stdout
    shutil.rmtree(work.parent / "home", ignore_errors=True)
    first = subprocess.run([PORTAL_RUN, "compiled_train.py", backend], cwd=work, capture_output=True,
                           env=env_for(work, PORTAL_FAKE_OOM=f"{spec}={kind}"), timeout=600)
    assert first.returncode == 75, first.stderr.decode()[-3000:]
    assert b"compiled graphs" not in first.stdout
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True,
                            env=env_for(work), timeout=600)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert first.stdout + second.stdout == plain.stdout
