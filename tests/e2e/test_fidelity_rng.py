"""Random draws in loops without .backward() (issue 26, item 1): the failed
iteration's draws are rolled back, or the suspension names the generator.

fidelity_rng/draws.py: loops that draw from `random`, a `random.Random`, a numpy
Generator at module level and in a function, torch's default generator and a
torch.Generator passed as generator=, each drawn before a fake out-of-memory error
in the same iteration: suspended, resumed by `portal resume` in a new process, the
printed numbers (repr: every bit) must be python's.  fidelity_rng/unseen.py: a loop
that draws through a name the table (rng_names.py) cannot see is named, and
`oom.exact=true` declines it; a loop that draws nothing says nothing.
fidelity_rng/loader.py: an evaluation loop over a shuffled DataLoader in a torch
program (torch's generator drew before its iterations) says nothing and resumes
exactly; dropout drawn through `model(x)` is named."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON, store_env

HERE = Path(__file__).parent / "fidelity_rng"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))
TIMEOUT = 300
SUSPENDED = 75


@pytest.fixture
def work(tmp_path):
    shutil.copytree(HERE, tmp_path / "work")
    return tmp_path / "work"


def _line(script, marker):
    """The line of `script` whose comment starts with `# line N: marker`."""
    for number, text in enumerate((HERE / script).read_text().splitlines(), 1):
        if f"# line {number}: {marker}" in text:
            return number
    raise AssertionError(f"no line marked {marker!r} in {script}")


def suspend(work, script, case, line, *options):
    home = work.parent / "home"
    return subprocess.run([PORTAL_RUN, *options, script, case], cwd=work, capture_output=True,
                          env=store_env(home, PORTAL_FAKE_OOM=f"{script}:{line}@3"), timeout=TIMEOUT)


def resume(work):
    home = work.parent / "home"
    [job] = [p.name for p in (home / "jobs").iterdir()]
    return subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True,
                          env=store_env(home), timeout=TIMEOUT)


def python(work, script, case):
    r = subprocess.run([PYTHON, script, case], cwd=work, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def differ_lines(stderr):
    return [line for line in stderr.decode().splitlines() if "will differ" in line]


DRAWS = [("random", "random's global generator"),
         ("gauss", "a random.Random object"),
         ("numpy", "a module-level numpy Generator"),
         ("function", "in a function, numpy Generator"),
         ("gauss_function", "in a function, random and a random.Random"),
         ("randn", "torch"),
         ("multinomial", "torch")]


@pytest.mark.parametrize("case,marker", DRAWS, ids=[c for c, _ in DRAWS])
def test_draws_of_the_failed_iteration_are_drawn_again_bit_for_bit(work, case, marker):
    if case in ("randn", "multinomial"):
        pytest.importorskip("torch")
    first = suspend(work, "draws.py", case, _line("draws.py", marker))
    assert first.returncode == SUSPENDED, first.stderr.decode()
    assert differ_lines(first.stderr) == []
    second = resume(work)
    assert second.returncode == 0, second.stderr.decode()
    expected = python(work, "draws.py", case)
    # iteration 2 failed after its draws, before its print: python's lines, each once
    assert first.stdout.decode().splitlines() == expected.decode().splitlines()[:2]
    assert first.stdout + second.stdout == expected


def test_a_draw_the_name_table_cannot_see_is_named(work):
    line = _line("unseen.py", "drew through a name not in the table")
    first = suspend(work, "unseen.py", "unseen", line)
    assert first.returncode == SUSPENDED, first.stderr.decode()
    named = ("random draws of the failed iteration are not rolled back: 'rng' (numpy.random.Generator) "
             "(Portal did not note its state when that iteration started, and cannot tell that nothing "
             "was drawn since)")
    assert differ_lines(first.stderr) == [f"portal: suspended: will differ: {named}"]
    # what it said is true: the rerun draws other bytes than python's
    second = resume(work)
    assert second.returncode == 0, second.stderr.decode()
    assert first.stdout + second.stdout != python(work, "unseen.py", "unseen")
    shutil.rmtree(work.parent / "home")
    exact = suspend(work, "unseen.py", "unseen", line, "--policy", "oom.exact=true")
    assert exact.returncode == 1, exact.stderr.decode()
    assert f"portal: not rescued: with oom.exact=true, not a point where something will differ: {named}" \
        in exact.stderr.decode().splitlines()


def test_a_loop_that_draws_nothing_says_nothing_and_resumes_exactly(work):
    first = suspend(work, "unseen.py", "nothing", _line("unseen.py", "drew nothing"))
    assert first.returncode == SUSPENDED, first.stderr.decode()
    assert differ_lines(first.stderr) == []
    second = resume(work)
    assert second.returncode == 0, second.stderr.decode()
    assert first.stdout + second.stdout == python(work, "unseen.py", "nothing")


def test_an_evaluation_loop_over_a_shuffled_loader_says_nothing_and_resumes_exactly(work):
    """torch's generator drew (the model's initialisation, the epoch's shuffle)
    before the loop's iterations: compared with what the loader noted once its
    epoch's sampling had drawn, nothing was drawn since."""
    pytest.importorskip("torch")
    first = suspend(work, "loader.py", "eval", _line("loader.py", "evaluation"))
    assert first.returncode == SUSPENDED, first.stderr.decode()
    assert differ_lines(first.stderr) == []
    second = resume(work)
    assert second.returncode == 0, second.stderr.decode()
    assert first.stdout + second.stdout == python(work, "loader.py", "eval")


def test_dropout_drawn_through_the_model_is_named(work):
    pytest.importorskip("torch")
    first = suspend(work, "loader.py", "train", _line("loader.py", "dropout drew"))
    assert first.returncode == SUSPENDED, first.stderr.decode()
    assert differ_lines(first.stderr) == [
        "portal: suspended: will differ: random draws of the failed iteration are not rolled back: "
        "torch's default generator (Portal did not note its state when that iteration started, and "
        "cannot tell that nothing was drawn since)"]
