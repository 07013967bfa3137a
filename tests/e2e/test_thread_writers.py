"""Writers that own a worker thread (thread_writers/): a training loop logging its
loss every step to a TensorBoard-style event file (tbwriter.py, built the way
tensorboard's event_file_writer.py is: a queue, a daemon worker thread, an event
file opened "wb"), suspended by a fake out-of-memory error mid-run, resumed by
`portal resume` in a new process and compared with python's run: the output, and
the event file record by record and byte for byte.  A worker whose state lives in
its frame is declined, naming why."""
import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON, store_env, torch_oom_name
from test_training import PORTAL, PORTAL_RUN

HERE = Path(__file__).parent / "thread_writers"
EVENTS = Path("runs") / "events.out.tfevents"

sys.path.insert(0, str(HERE))
import tbwriter  # noqa: E402  (reads the event files)


@functools.lru_cache(maxsize=None)
def python_run(writer, tmp_root):
    work = Path(tmp_root) / f"python-{writer}"
    shutil.copytree(HERE, work)
    r = subprocess.run([PYTHON, "tb_train.py"], cwd=work, capture_output=True, timeout=300,
                       env=store_env(work.parent / "python-home", TB_WRITER=writer))
    assert r.returncode == 0, r.stderr
    return r.stdout, (work / EVENTS).read_bytes()


@pytest.fixture
def work(tmp_path):
    shutil.copytree(HERE, tmp_path / "work")
    return tmp_path / "work"


def env_for(work, **extra):
    return store_env(work.parent / "home", **extra)


# Where the iteration fails: before the forward pass (after the step 6 flush), in
# it, in backward() after the step 13 flush; all before the step's record is put
# on the queue (a record put before the error is the failed iteration's own side
# effect: it would be there twice, as the product page says).
CASES = [("tb_train.py:22@8", "memory"), ("tb_train.py:24@10", "torch"), ("tb_train.py:25@16", "cpu")]


@pytest.mark.parametrize("writer", ["subclass", "target"])
@pytest.mark.parametrize("spec,kind", CASES, ids=[c[0].split(":")[1] for c in CASES])
def test_a_training_loop_logging_to_an_event_file_resumes_bit_for_bit(work, tmp_path_factory,
                                                                       writer, spec, kind):
    """subclass: the worker a threading.Thread subclass whose run() calls _run()
    (tensorboard's _AsyncWriterThread); target: threading.Thread(target=self._run,
    daemon=True).  The thread is held at its wait while the state is saved, the
    writer saved without it, and a new one started at the resume; the event file
    is re-opened at its place."""
    out, events = python_run(writer, str(tmp_path_factory.getbasetemp()))
    first = subprocess.run([PORTAL_RUN, "tb_train.py"], cwd=work, capture_output=True, timeout=300,
                           env=env_for(work, TB_WRITER=writer, PORTAL_FAKE_OOM=f"{spec}={kind}"))
    assert first.returncode == 75, first.stderr.decode()
    assert (f"portal: suspended: will continue from the loop at {work / 'tb_train.py'}:21 in train()"
            ).encode() in first.stderr
    # what the worker had written before the suspension is in the file already
    step = int(spec.split("@")[1]) - 1
    before = tbwriter.read_records(work / EVENTS)
    assert len(before) <= 1 + step
    assert before == tbwriter.read_records_of(events)[:len(before)]
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, timeout=300,
                            env=env_for(work))
    assert second.returncode == 0, second.stderr.decode()
    # The output: the worker alive at every flush after the resume, not alive once
    # close() joined it, no thread left; the records python's, in python's order.
    assert first.stdout + second.stdout == out
    assert b"step 13 worker alive True\n" in (second.stdout if step < 13 else first.stdout)
    assert b"worker alive after close False threads 1\n" in second.stdout
    assert b"warm-up worker alive False records 2\n" in second.stdout   # its thread had ended
    records = tbwriter.read_records(work / EVENTS)
    assert records == tbwriter.read_records_of(events)
    assert len(records) == 22 and records[0] == b"brain.Event:2"
    assert [tbwriter.struct.unpack("<q", r[:8])[0] for r in records[1:]] == list(range(21))
    assert (work / EVENTS).read_bytes() == events


def test_a_worker_keeping_records_in_its_frame_is_declined_naming_why(work):
    """BatchingEventFileWriter's worker gathers records in a local list between
    its waits: a new thread would start with none of them, so the loop declines
    and, with no loop further out, the job fails as under python, naming why."""
    r = subprocess.run([PORTAL_RUN, "tb_train.py"], cwd=work, capture_output=True, timeout=300,
                       env=env_for(work, TB_WRITER="batching", PORTAL_FAKE_OOM="tb_train.py:24@10=torch"))
    assert r.returncode == 1, r.stderr
    lines = r.stderr.decode().splitlines()
    assert lines[-2].startswith(f"{torch_oom_name()}: CUDA out of memory.")
    assert lines[-1] == (
        "portal: not rescued: its state holds global 'writer'._thread (threading.Thread): a thread "
        "(event-writer) cannot be saved: its frames run outside the loop and it cannot be started "
        "again where it is (its loop keeps batch in locals); Portal cannot save it: close or drop it "
        "before the loop, keep it out of the loop's state, or give its class "
        "__getstate__/__setstate__ that leave it out and make it again")
    assert r.stdout == b"step 6 worker alive True\n"
