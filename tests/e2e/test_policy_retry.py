"""--policy oom.action=retry (docs/policies.md): the checkpoint is written as for
a suspension and portal-run resumes it at once in a fresh interpreter; the
output is continuous, the result bit for bit that of an uninterrupted run, and
each retry a run of the job's record with its reason.  At most oom.retries
retries of one item, then the usual suspension.  A real OOM under --mem that a
fresh process cures (memory held outside the program's state)."""
import pytest

from policy_helpers import (SUSPENDED, corpus, lines, only_job, portal, portal_run, python,
                            record)

# items.py: `r = random.random()`, the iteration's first line (its loop is no
# training loop, so an iteration that runs again after its draw would draw anew)
DRAW_LINE = 27
BACKWARD_LINE = 26    # train_preempt.py: `loss.backward()`
RETRY = ["--policy", "oom.action=retry"]


@pytest.fixture
def work(tmp_path):
    return corpus(tmp_path)


def assert_says_retrying(stderr):
    """A run that was retried and finished was never left suspended: each of
    Portal's lines of the retry says `retrying`, and nothing says `suspended`."""
    text = stderr.decode()
    assert "suspended" not in text.lower(), text
    ours = [line for line in text.splitlines() if line.startswith("portal: ")]
    assert ours and all(line.startswith("portal: retrying: ") for line in ours), text
    return ours


def retries(stderr):
    """The lines that say a retry starts, one per retry."""
    return [line for line in lines(stderr, "portal: retrying: ") if "resumed at once in a fresh process" in line]


def test_a_retry_of_a_training_step_is_bit_for_bit(work):
    """A torch OOM in backward(), after dropout drew its random numbers: the
    retried step draws them again, and the run ends as an uninterrupted one."""
    pytest.importorskip("torch", reason="the training loop is torch's")
    args = ("train_preempt.py", "12", "0")
    run = portal_run(work, *RETRY, *args, env={"PORTAL_FAKE_OOM": f"train_preempt.py:{BACKWARD_LINE}@6=torch"})
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == python(work, *args).stdout
    assert_says_retrying(run.stderr)
    assert len(retries(run.stderr)) == 1


def test_a_retry_finishes_bit_for_bit_in_a_fresh_process(work):
    run = portal_run(work, *RETRY, "items.py", env={"PORTAL_FAKE_OOM": f"items.py:{DRAW_LINE}@5"})
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == python(work, "items.py").stdout          # continuous, nothing twice
    said = assert_says_retrying(run.stderr)
    assert said[0] == f"portal: retrying: MemoryError at {work / 'items.py'}:{DRAW_LINE}"
    assert said[1].startswith(f"portal: retrying: will continue from the loop at {work / 'items.py'}:26 "
                              "in main(), iteration 4 (0-based)")
    [retrying] = [line for line in said if "resumed at once" in line]
    assert "resumed at once in a fresh process (retry 1 of 1, oom.action=retry)" in retrying
    r = record(work, only_job(work))
    assert r["state"] == "completed" and r["exit_status"] == 0
    runs = r["runs"]
    assert [(x["kind"], x["outcome"]) for x in runs] == [("run", "retried"), ("retry", "completed")]
    assert runs[0]["pid"] == runs[1]["pid"]                        # the same supervisor
    assert runs[1]["reason"].startswith("retry: MemoryError")
    assert runs[1]["item"]["iteration"] == 4 and runs[1]["item"]["loop"].endswith("items.py:26")
    assert "retry_requested" not in r
    log = (work.parent / "home" / "jobs" / only_job(work) / "output.log").read_bytes()
    for line in python(work, "items.py").stdout.splitlines():
        assert line in log
    shown = portal(work, "show", only_job(work)).stdout.decode()
    assert "reason      retry: MemoryError" in shown and "retried" in shown


def test_the_same_item_is_retried_at_most_retries_times(work):
    # hits 5 and 6 of the work line: item 4 fails, and fails again when retried
    twice = f"items.py:{DRAW_LINE}@5,items.py:{DRAW_LINE}@6"
    run = portal_run(work, *RETRY, "items.py", env={"PORTAL_FAKE_OOM": twice})
    assert run.returncode == SUSPENDED, run.stderr.decode()
    assert len(retries(run.stderr)) == 1
    assert "portal: suspended: this item was retried once already (oom.retries=1): suspended as usual" \
        in run.stderr.decode().splitlines()
    assert any(line.startswith("portal: suspended: resume it on a machine with more memory: portal resume ")
               for line in run.stderr.decode().splitlines())
    r = record(work, only_job(work))
    assert r["state"] == "suspended"
    assert [(x["kind"], x["outcome"]) for x in r["runs"]] == [("run", "retried"), ("retry", "suspended")]
    resumed = portal(work, "resume", only_job(work))
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert run.stdout + resumed.stdout == python(work, "items.py").stdout

    # oom.retries=2: the second failure is retried too, and the job finishes
    again = corpus(work.parent / "again")
    run = portal_run(again, *RETRY, "--policy", "oom.retries=2", "items.py",
                     env={"PORTAL_FAKE_OOM": twice})
    assert run.returncode == 0, run.stderr.decode()
    assert len(retries(run.stderr)) == 2
    assert run.stdout == python(again, "items.py").stdout


def test_the_final_exit_status_is_the_programs(work):
    run = portal_run(work, *RETRY, "items.py", "not-a-number",
                     env={"PORTAL_FAKE_OOM": f"items.py:{DRAW_LINE}@1"})
    reference = python(work, "items.py", "not-a-number")
    assert (run.returncode, reference.returncode) == (1, 1)
    assert b"ValueError" in run.stderr and not lines(run.stderr, "portal: retrying: ")


def test_a_real_oom_that_a_fresh_process_cures(work):
    run = portal_run(work, "--mem", "1G", *RETRY, "leaky.py")
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout == python(work, "leaky.py").stdout
    said = assert_says_retrying(run.stderr)
    assert said[0].startswith("portal: retrying: MemoryError")
    assert any(line.startswith("portal: retrying: what ran short: ") for line in said), said
    [retrying] = [line for line in said if "resumed at once" in line]
    r = record(work, only_job(work))
    assert [(x["kind"], x["outcome"]) for x in r["runs"]] == [("run", "retried"), ("retry", "completed")]
    assert r["runs"][1]["mem"] == r["runs"][0]["mem"]           # the same cap


def test_a_retry_names_what_will_differ_as_retrying(work):
    """The failed iteration had already stepped the optimizer: the retry says so,
    under `retrying`, and never says the job was suspended."""
    pytest.importorskip("torch", reason="the training loop is torch's")
    run = portal_run(work, *RETRY, "train_preempt.py", "5", "0",
                     env={"PORTAL_FAKE_OOM": f"train_preempt.py:{BACKWARD_LINE + 2}@3=torch"})
    assert run.returncode == 0, run.stderr.decode()
    said = assert_says_retrying(run.stderr)
    assert "portal: retrying: will differ: the failed iteration had already stepped optimizer 'opt': " \
           "it will step again" in said, said
    assert said[-1].endswith("resumed at once in a fresh process (retry 1 of 1, oom.action=retry)")
