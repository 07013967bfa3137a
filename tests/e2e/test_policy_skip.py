"""--policy oom.action=skip (docs/policies.md): the failed item is dropped, the
loop goes on in the same process, and the result is that of a run that leaves
the item out (its random draw consumed).  Fake OOMs (PORTAL_FAKE_OOM) and a real
one under --mem; the count per job (oom.max_skips) and the fall-back to a
suspension; a while loop, which skip cannot continue; declines as for suspend."""
import pytest

from conftest import sgd_step_start
from policy_helpers import (SUSPENDED, corpus, lines, only_job, portal, portal_run, python,
                            record)

WORK_LINE = 30        # items.py: `value = work(i, r)`, after the iteration's draw
DRAW_LINE = 27        # items.py: `r = random.random()`, the iteration's first line
SKIP = ["--policy", "oom.action=skip"]


@pytest.fixture
def work(tmp_path):
    return corpus(tmp_path)


def fake(*hits, kind="memory"):
    return ",".join(f"items.py:{WORK_LINE}@{h}={kind}" for h in hits)


def test_skipped_items_leave_the_result_of_a_run_without_them(work):
    # hits 3 and 7 of the work line: items 2 and 6 (0-based)
    run = portal_run(work, *SKIP, "items.py", env={"PORTAL_FAKE_OOM": fake(3, 7)})
    assert run.returncode == 0, run.stderr.decode()
    reference = python(work, "items.py", "2,6")
    assert reference.returncode == 0
    assert run.stdout == reference.stdout
    skipped = lines(run.stderr, "portal: skipped: ")
    assert len(skipped) == 2, run.stderr.decode()
    assert f"items.py:26, iteration 2 (0-based): MemoryError" in skipped[0]
    assert f"items.py:26, iteration 6 (0-based): MemoryError" in skipped[1]
    assert f"at {work}/items.py:{WORK_LINE}" in skipped[0]
    assert "(skip 1 of at most 10)" in skipped[0] and "(skip 2 of at most 10)" in skipped[1]
    r = record(work, only_job(work))
    assert r["state"] == "completed" and r["policies"] == {"oom.action": "skip"}
    assert [(s["loop"].rsplit("/", 1)[1], s["iteration"]) for s in r["skipped"]] == \
        [("items.py:26", 2), ("items.py:26", 6)]
    shown = portal(work, "show", only_job(work))
    assert shown.returncode == 0
    text = shown.stdout.decode()
    assert "skipped     2 items" in text and "iteration 6 (0-based): MemoryError" in text
    assert "policies    oom.action=skip" in text


def test_a_torch_oom_is_skipped_and_a_non_oom_error_is_not(work):
    run = portal_run(work, *SKIP, "items.py", env={"PORTAL_FAKE_OOM": fake(2, kind="cuda")})
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == python(work, "items.py", "1").stdout
    other = portal_run(work, *SKIP, "items.py", env={"PORTAL_FAKE_OOM": fake(2, kind="other")})
    assert other.returncode == 1
    assert b"Traceback" in other.stderr and b"portal: skipped" not in other.stderr


def test_max_skips_then_suspends_and_the_resume_finishes(work):
    # item 2 fails after its draw (skipped), item 6 before its own (suspended: the
    # resumed iteration draws as an uninterrupted run does; the loop is no
    # training loop, whose draws a resume would roll back)
    run = portal_run(work, *SKIP, "--policy", "oom.max_skips=1", "items.py",
                     env={"PORTAL_FAKE_OOM": f"{fake(3)},items.py:{DRAW_LINE}@7"})
    assert run.returncode == SUSPENDED, run.stderr.decode()
    assert len(lines(run.stderr, "portal: skipped: ")) == 1
    assert lines(run.stderr, "portal: skip: ") == [
        f"portal: skip: 1 items skipped already in job {only_job(work)} (oom.max_skips=1): suspending instead"]
    assert any("will continue from the loop at" in line and "iteration 6 (0-based)" in line
               for line in lines(run.stderr, "portal: suspended: "))
    resumed = portal(work, "resume", only_job(work))
    assert resumed.returncode == 0, resumed.stderr.decode()
    # item 2 skipped, item 6 ran again after the resume: as a run without item 2
    assert run.stdout + resumed.stdout == python(work, "items.py", "2").stdout


def test_zero_max_skips_is_plain_suspend(work):
    run = portal_run(work, "--policy", "oom.action=skip", "--policy", "oom.max_skips=0", "items.py",
                     env={"PORTAL_FAKE_OOM": fake(3)})
    assert run.returncode == SUSPENDED
    assert not lines(run.stderr, "portal: skipped: ")


def test_a_real_oom_under_mem_is_skipped(work):
    run = portal_run(work, "--mem", "1G", *SKIP, "items.py", env={"ITEMS_BIG": "4"})
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == python(work, "items.py", "4").stdout
    [line] = lines(run.stderr, "portal: skipped: ")
    assert "iteration 4 (0-based): MemoryError" in line


def test_a_while_loop_is_suspended_not_skipped(work):
    run = portal_run(work, *SKIP, "while_items.py", env={"PORTAL_FAKE_OOM": "while_items.py:6@3"})
    assert run.returncode == SUSPENDED, run.stderr.decode()
    assert any("is wrapped whole, so an item of it cannot be skipped: suspending instead" in line
               for line in lines(run.stderr, "portal: skip: "))
    resumed = portal(work, "resume", only_job(work))
    assert resumed.returncode == 0
    assert resumed.stdout == python(work, "while_items.py").stdout


def test_policy_values_are_checked(work):
    bad = portal_run(work, "--policy", "oom.action=drop", "items.py")
    assert bad.returncode == 2
    assert bad.stderr.decode().splitlines() == [
        "portal: policy: 'oom.action=drop': oom.action takes suspend|retry|skip (see portal-run --help)"]
    count = portal_run(work, "--policy", "oom.max_skips=many", "items.py")
    assert count.returncode == 2 and b"takes a whole number, 0 or more" in count.stderr
    from_env = portal_run(work, "items.py", env={"PORTAL_POLICY": "oom.action=skip",
                                                 "PORTAL_FAKE_OOM": fake(3)})
    assert from_env.returncode == 0 and len(lines(from_env.stderr, "portal: skipped: ")) == 1


@pytest.mark.parametrize("action", ["skip", "retry"])
def test_an_oom_inside_an_optimizer_step_is_declined_as_for_suspend(work, action):
    """decide.py's rules run first, for every action: the weights may be half
    updated, so the item is neither skipped nor retried; the job fails as under
    python, with the same `not rescued` line."""
    _, step_line = sgd_step_start()   # `loss = None`, in the interpreter's own torch
    run = portal_run(work, "--policy", f"oom.action={action}", "train_preempt.py", "6", "0",
                     env={"PORTAL_FAKE_OOM": f"torch/optim/sgd.py:{step_line}@3"})
    assert run.returncode == 1, run.stderr.decode()
    assert run.stdout.count(b"step ") == 2
    last = run.stderr.decode().splitlines()[-1]
    assert last.startswith("portal: not rescued: raised inside an optimizer step (")
    assert not lines(run.stderr, "portal: skipped: ") and not lines(run.stderr, "portal: retrying: ")


def test_a_training_loop_survives_scattered_ooms_and_finishes(work):
    """Torch OOMs in backward() at steps 2, 6 and 10 of a seeded training loop:
    each step is dropped (its batch and dropout draws consumed), the loop
    finishes, and the model is that of a run that leaves those updates out."""
    pytest.importorskip("torch", reason="the training loop is torch's")
    backward_line = 26    # train_preempt.py: `loss.backward()`
    spec = ",".join(f"train_preempt.py:{backward_line}@{h}=torch" for h in (3, 7, 11))
    run = portal_run(work, *SKIP, "train_preempt.py", "14", "0", env={"PORTAL_FAKE_OOM": spec})
    assert run.returncode == 0, run.stderr.decode()
    reference = python(work, "train_preempt.py", "14", "0", TRAIN_LEAVE_OUT="2,6,10")
    assert reference.returncode == 0, reference.stderr.decode()
    assert run.stdout == reference.stdout
    skipped = lines(run.stderr, "portal: skipped: ")
    assert [line.split(", ")[1].split(":")[0] for line in skipped] == \
        [f"iteration {i} (0-based)" for i in (2, 6, 10)]
    assert all("OutOfMemoryError" in line or "out of memory" in line for line in skipped), skipped
