"""Portal's report starts on a line of its own (output_tee.hpp's kLineMark,
python/_portal/run/lines.py): after a progress line the program left unfinished
(a tqdm bar, `\\r` and no newline) the supervisor puts a newline before
`portal: suspended: ...`; after a finished line it adds nothing; the mark itself
never reaches the terminal, the file or the job's output.log."""
import subprocess

import pytest

from conftest import PYTHON, RUN_TIMEOUT, base_env, run_in_terminal

SUSPENDED = 75
MARK = b"\x1bP"      # the start of the supervisor's mark (a device control string)

# A progress line redrawn with "\r" on stderr (on stdout with "out"); item 3 runs
# out of memory (PORTAL_FAKE_OOM at the `kept.append` line).
PROGRESS = """import sys
stream = sys.stdout if sys.argv[1:] == ["out"] else sys.stderr
kept = []
for i in range(6):
    stream.write(f"\\rstep {i} of 6"); stream.flush()
    kept.append(i * i)
print(kept)
"""
FINISHED = """import sys
kept = []
for i in range(6):
    print(f"step {i} of 6", file=sys.stderr, flush=True)
    kept.append(i * i)
print(kept)
"""
TQDM = """from tqdm import tqdm
kept = []
for i in tqdm(range(6), desc="work", mininterval=0, ascii=True):
    kept.append(i * i)
print(kept)
"""
APPEND_LINE = 6


def run(tmp_path, source, *args, merged=False, fake=None, options=()):
    (tmp_path / "prog.py").write_text(source)
    env = base_env({"PORTAL_HOME": str(tmp_path / "home"),
                    "PORTAL_FAKE_OOM": fake or f"prog.py:{APPEND_LINE}@4"})
    return subprocess.run([_portal_run(), *options, "prog.py", *args], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE, timeout=RUN_TIMEOUT)


def _portal_run():
    from conftest import find_portal_run
    return find_portal_run()


def output_log(tmp_path):
    [log] = (tmp_path / "home" / "jobs").glob("*/output.log")
    return log.read_bytes()


def test_after_an_unfinished_line_the_report_starts_on_the_next(tmp_path):
    p = run(tmp_path, PROGRESS)
    assert p.returncode == SUSPENDED, p.stderr.decode()
    before, report = p.stderr.split(b"portal: suspended: ", 1)
    assert before == b"\rstep 0 of 6\rstep 1 of 6\rstep 2 of 6\rstep 3 of 6\n", p.stderr
    assert MARK not in p.stderr and MARK not in output_log(tmp_path)
    assert output_log(tmp_path) == p.stderr                   # the log has the very bytes


def test_after_a_finished_line_nothing_is_added(tmp_path):
    p = run(tmp_path, FINISHED, fake="prog.py:5@4")
    assert p.returncode == SUSPENDED, p.stderr.decode()
    before, _ = p.stderr.split(b"portal: suspended: ", 1)
    assert before == b"".join(b"step %d of 6\n" % i for i in range(4)), p.stderr
    assert MARK not in p.stderr


def test_stdout_and_stderr_on_one_pipe_share_the_line(tmp_path):
    # the progress on stdout, the report on stderr: one channel, one last byte
    p = run(tmp_path, PROGRESS, "out", merged=True)
    assert p.returncode == SUSPENDED, p.stdout.decode()
    assert b"\rstep 3 of 6\nportal: suspended: " in p.stdout, p.stdout
    assert MARK not in p.stdout


def test_a_skipped_item_is_said_on_a_line_of_its_own(tmp_path):
    p = run(tmp_path, PROGRESS, options=["--policy", "oom.action=skip"])
    assert p.returncode == 0, p.stderr.decode()
    assert b"\rstep 3 of 6\nportal: skipped: " in p.stderr, p.stderr
    assert b"\n\rstep 4 of 6" in p.stderr and MARK not in p.stderr


def test_after_a_tqdm_bar(tmp_path):
    if subprocess.run([PYTHON, "-c", "import tqdm"], capture_output=True).returncode:
        pytest.skip("tqdm is not installed")
    p = run(tmp_path, TQDM, fake="prog.py:4@4")
    assert p.returncode == SUSPENDED, p.stderr.decode()
    before, _ = p.stderr.split(b"portal: suspended: ", 1)
    bar = before.rsplit(b"\r", 1)[1]
    assert bar.startswith(b"work:  50%|") and bar.endswith(b"]\n"), before   # its line, then a newline
    assert MARK not in p.stderr


def test_on_a_terminal(tmp_path):
    # stdout and stderr on one terminal (a pty): the report starts below the line
    (tmp_path / "prog.py").write_text(PROGRESS)
    env = base_env({"PORTAL_HOME": str(tmp_path / "home"), "PORTAL_FAKE_OOM": f"prog.py:{APPEND_LINE}@4"})
    outcome = run_in_terminal([_portal_run(), "prog.py"], tmp_path, env, [])
    assert outcome.returncode == SUSPENDED, outcome.stdout
    before, _ = outcome.stdout.split(b"portal: suspended: ", 1)
    # (the terminal's own output processing makes the newline \r\n, as for python's)
    assert before == b"\rstep 0 of 6\rstep 1 of 6\rstep 2 of 6\rstep 3 of 6\r\n", outcome.stdout
    assert MARK not in outcome.stdout


BIG = """import sys
import numpy as np
data = np.ones(1100 << 20, dtype=np.uint8)   # a checkpoint over 1 GiB: its progress is said
for step in range(3):
    sys.stderr.write(f"\\rstep {step}"); sys.stderr.flush()
    data[step] = step + 2
print(int(data[:4].sum()))
"""


def test_a_long_checkpoints_progress_starts_below_the_line(tmp_path):
    # on a pipe the checkpoint's progress is one final line, before the report
    if subprocess.run([PYTHON, "-c", "import numpy"], capture_output=True).returncode:
        pytest.skip("numpy is not installed")
    p = run(tmp_path, BIG, fake="prog.py:6@2")
    assert p.returncode == SUSPENDED, p.stderr.decode()
    assert p.stderr.startswith(b"\rstep 0\rstep 1\nportal: checkpoint written: "), p.stderr
    assert MARK not in p.stderr
