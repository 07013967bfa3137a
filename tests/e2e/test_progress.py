"""Large checkpoints feel fast (issue 14, item 3): writing or reading a checkpoint of
more than 1 GiB shows one progress line redrawn in place on a terminal (a pty
here), a single final line on a pipe, and `portal show` keeps the figures.

The program (tests/e2e/progress/big_state.py) holds 1.1 GiB of dense bytes.
"""
import os
import pty
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import PYTHON, base_env

CORPUS = Path(__file__).resolve().parent / "progress"
SCRIPT = "big_state.py"
TIMEOUT = 600                # seconds per run: a loaded 2-core machine
SIZE = r"\d+\.\d GiB"        # 1.1 GiB (the state), as progress.py writes sizes
RATE = r"\d+(?:\.\d)? (?:bytes|KiB|MiB|GiB)/s"
LIVE = re.compile(rf"portal: writing checkpoint: \d+(?:\.\d)? (?:bytes|KiB|MiB|GiB) of {SIZE}"
                  rf"(?:, {RATE}, \d+ s left)? *")
FINAL_WRITE = re.compile(rf"portal: checkpoint written: {SIZE} in \d+\.\d s \({RATE}\)\r?\n")
FINAL_READ = re.compile(rf"portal: checkpoint read: {SIZE} in \d+\.\d s \({RATE}\)\n")


def line_of(marker):
    for n, line in enumerate((CORPUS / SCRIPT).read_text().splitlines(), 1):
        if marker in line:
            return n
    raise AssertionError(f"no {marker!r} in {SCRIPT}")


def run_on_a_terminal(cmd, cwd, env):
    """(exit status, everything written to the terminal) of ``cmd`` on a new pty."""
    master, slave = pty.openpty()
    out = []

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:           # EIO: every writer closed the terminal
                return
            if not data:
                return
            out.append(data)
    reader = threading.Thread(target=drain)
    reader.start()
    try:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                             start_new_session=True)
        os.close(slave)
        status = p.wait(timeout=TIMEOUT)
    finally:
        reader.join(timeout=TIMEOUT)
        os.close(master)
    return status, b"".join(out).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def job(tmp_path_factory, portal_run, portal_cli):
    work = tmp_path_factory.mktemp("progress")
    root = work / "prog"
    shutil.copytree(CORPUS, root)
    home = work / "home"
    python = subprocess.run([PYTHON, SCRIPT], cwd=root, env=base_env(), capture_output=True,
                            timeout=TIMEOUT)
    env = base_env({"PORTAL_HOME": str(home),
                    "PORTAL_FAKE_OOM": f"{SCRIPT}:{line_of('FAKE-OOM here')}@2"})
    status, terminal = run_on_a_terminal([portal_run, SCRIPT], root, env)
    found = re.search(r"portal: suspended: job (\S+),", terminal)
    job_id = found.group(1) if found else None
    home_env = base_env({"PORTAL_HOME": str(home)})
    shown = resumed = shown_after = None
    if job_id:
        shown = subprocess.run([portal_cli, "show", job_id], env=home_env, capture_output=True,
                               text=True, timeout=TIMEOUT)
        resumed = subprocess.run([portal_cli, "resume", job_id], cwd=work, env=home_env,
                                 stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)
        shown_after = subprocess.run([portal_cli, "show", job_id], env=home_env,
                                     capture_output=True, text=True, timeout=TIMEOUT)
    return python, status, terminal, shown, resumed, shown_after


def test_on_a_terminal_the_write_shows_one_line_redrawn_in_place(job):
    _, status, terminal, _, _, _ = job
    assert status == 75, terminal[-3000:]
    start = terminal.index("\rportal: writing checkpoint: ")
    end = terminal.index("portal: checkpoint written: ")
    live = terminal[start:end]
    assert "\n" not in live, live                       # never scrolled: redrawn in place
    segments = live.split("\r")[1:]
    draws = [seg for seg in segments if seg.strip()]
    assert draws and all(LIVE.fullmatch(d) for d in draws), repr(live)
    assert segments[-1] == "" and segments[-2].strip() == "", repr(live)   # cleared
    assert FINAL_WRITE.match(terminal, end), repr(terminal[end:end + 200])
    assert terminal.index("portal: suspended: ") > end


def test_on_a_pipe_the_read_says_one_line_at_the_end(job):
    python, _, _, _, resumed, _ = job
    assert resumed is not None and resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout == python.stdout
    err = resumed.stderr.decode()
    assert "\r" not in err and "reading checkpoint" not in err
    assert len(FINAL_READ.findall(err)) == 1, err


def test_portal_show_keeps_the_figures(job):
    _, _, _, shown, _, shown_after = job
    assert shown is not None and shown.returncode == 0, shown
    assert re.search(rf"^written     {SIZE} in \d+\.\d s \({RATE}\)$", shown.stdout, re.M), \
        shown.stdout
    assert re.search(rf"^restored    {SIZE} in \d+\.\d s \({RATE}\) \(the last resume's",
                     shown_after.stdout, re.M), shown_after.stdout
