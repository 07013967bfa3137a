"""sqlite3 connections and cursors in a program's state (sqlite_state.py):
fidelity_idioms/sqlite_metrics.py writes two metric rows per step and commits
every 4 steps; it is suspended by a fake out-of-memory error before, inside and
after a commit, resumed in a new process, and compared with python's run: the
same output, or different only as the `will differ:` line says."""
import sqlite3
import subprocess

import pytest

from conftest import store_env
from test_fidelity_idioms import HERE, work  # noqa: F401 - the fixture
from test_training import PORTAL, PORTAL_RUN, PYTHON

SCRIPT = "sqlite_metrics.py"
LINES = (HERE / SCRIPT).read_text().splitlines()
# Its lines: the first insert, the `if` of the commit, the second insert.
LOSS, COMMIT, W0 = (1 + next(i for i, line in enumerate(LINES) if text in line)
                    for text in ('"loss"', "if step % 4", '"w0"'))
UNCOMMITTED = ("had uncommitted changes: Portal committed them at the suspension, with what the failed "
               "iteration may have written before the error (Portal cannot tell), which it writes again")
KEPT = "keeps what the failed iteration may have written before the error (Portal cannot tell), which it writes again"


def python_run(work, **env):
    clean = work.parent / "python"
    clean.mkdir()
    (clean / SCRIPT).write_bytes((HERE / SCRIPT).read_bytes())
    r = subprocess.run([PYTHON, SCRIPT], cwd=clean, capture_output=True, timeout=120,
                       env=store_env(work.parent / "home-python", **env))
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def portal_run(work, spec, options=(), **env):
    return subprocess.run([PORTAL_RUN, *options, SCRIPT], cwd=work, capture_output=True, timeout=120,
                          env=store_env(work.parent / "home", PORTAL_FAKE_OOM=f"{SCRIPT}:{spec}", **env))


def suspend_and_resume(work, spec, **env):
    first = portal_run(work, spec, **env)
    assert first.returncode == 75, first.stderr.decode()
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    second = subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, timeout=120,
                            env=store_env(work.parent / "home", **env))
    assert second.returncode == 0, second.stderr.decode()
    differ = [line.split("will differ: ", 1)[1] for line in first.stderr.decode().splitlines()
              if line.startswith("portal: suspended: will differ: ")]
    return first.stdout.decode() + second.stdout.decode(), differ


def again(output, row):
    """python's output with ROW of the failed iteration written twice, as the rerun does."""
    assert output.count(row + "\n") == 1
    return output.replace(row + "\n", row + "\n" + row + "\n")


FILE_CASES = [
    # (where, spec, the will differ line's end, the row the failed iteration wrote before the error)
    ("before", f"{LOSS}@9", UNCOMMITTED, None),   # step 8 before its first insert; step 7's w0 uncommitted
    ("inside", f"{COMMIT}@8", UNCOMMITTED, "7 loss"),   # step 7 between its insert and the commit
    ("after", f"{W0}@8", KEPT, "7 loss"),   # step 7 after its commit, before its second insert
]


@pytest.mark.parametrize("where,spec,said,written", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_a_database_file_is_reconnected_and_differs_only_as_said(work, where, spec, said, written):
    expected = python_run(work)
    output, differ = suspend_and_resume(work, spec)
    assert differ == [f"the sqlite database {work / 'metrics.db'} ('conn') {said}"]
    if written is not None:
        row = next(line for line in expected.splitlines() if line.startswith(written + " "))
        expected = again(expected, row)
    # Every row, the connection's row_factory (sqlite3.Row), foreign_keys and isolation
    # level, the cursor's arraysize and row_factory, as python's.
    assert output == expected
    assert "\ncursor 7 False type 1 \n" in output


def test_an_in_memory_database_is_saved_by_value_bit_for_bit(work):
    expected = python_run(work, DB="memory")
    output, differ = suspend_and_resume(work, f"{LOSS}@9", DB="memory")
    # Nothing was written by the failed iteration: the same rows, and the same bytes
    # of the database (its serialized image), uncommitted changes and transaction included.
    assert differ == [f"the sqlite database in memory ('conn') {KEPT}"]
    assert output == expected
    assert "\nimage " in output and "\n8 True\n" in output


def test_an_in_memory_database_keeps_its_uncommitted_rows(work):
    expected = python_run(work, DB="memory")
    output, differ = suspend_and_resume(work, f"{COMMIT}@8", DB="memory")
    assert differ == [f"the sqlite database in memory ('conn') {KEPT}"]
    rows = [line for line in expected.splitlines() if not line.startswith("image ")]
    out = [line for line in output.splitlines() if not line.startswith("image ")]
    assert "\n".join(out) + "\n" == again("\n".join(rows) + "\n", next(r for r in rows if r.startswith("7 loss ")))


def test_a_cursor_read_to_its_end_is_saved(work):
    expected = python_run(work, CURSOR="read")
    output, _ = suspend_and_resume(work, f"{LOSS}@9", CURSOR="read")
    assert output == expected and "rows before 0\n" in output and "\nsel [] 1 True\n" in output


def test_a_cursor_with_rows_to_read_is_declined_by_name(work):
    r = portal_run(work, f"{LOSS}@9", CURSOR="pending")
    assert r.returncode == 1, r.stderr.decode()
    assert (b"global 'sel' (sqlite3.Cursor): an sqlite3 cursor with rows of a SELECT still to read: "
            b"its position cannot be restored") in r.stderr, r.stderr.decode()
    assert b"\nMemoryError\n" in r.stderr


def test_oom_exact_declines_with_the_same_words_and_commits_nothing(work):
    r = portal_run(work, f"{COMMIT}@8", options=("--policy", "oom.exact=true"))
    assert r.returncode == 1, r.stderr.decode()
    assert (f"portal: not rescued: with oom.exact=true, not a point where something will differ: "
            f"the sqlite database {work / 'metrics.db'} ('conn') {UNCOMMITTED}\n").encode() in r.stderr, \
        r.stderr.decode()
    # As under python: the rows since the last commit (step 3's) are lost with the process.
    conn = sqlite3.connect(work / "metrics.db")
    assert conn.execute("SELECT step, name FROM metrics ORDER BY rowid").fetchall() == \
        [(s, n) for s in range(4) for n in ("loss", "w0")][:-1]
    conn.close()


def test_a_restored_connection_is_saved_again_at_a_second_suspension(work):
    """Suspended inside step 5's commit (its loss row committed with the rest, written
    again by the rerun), resumed, suspended again before step 8 (nothing of it
    written: no row twice), resumed: python's rows with step 5's loss row twice."""
    expected = python_run(work)
    env = store_env(work.parent / "home", PORTAL_FAKE_OOM=f"{SCRIPT}:{COMMIT}@6,{SCRIPT}:{LOSS}@10")
    first = subprocess.run([PORTAL_RUN, SCRIPT], cwd=work, capture_output=True, timeout=120, env=env)
    assert first.returncode == 75, first.stderr.decode()
    [job] = [p.name for p in (work.parent / "home" / "jobs").iterdir()]
    runs = [subprocess.run([PORTAL, "resume", job], cwd=work, capture_output=True, timeout=120,
                           env=store_env(work.parent / "home")) for _ in range(2)]
    assert [r.returncode for r in runs] == [75, 0], runs[-1].stderr.decode()
    assert f"will differ: the sqlite database {work / 'metrics.db'} ('conn') {UNCOMMITTED}".encode() \
        in runs[0].stderr
    row = next(line for line in expected.splitlines() if line.startswith("5 loss "))
    assert first.stdout.decode() + "".join(r.stdout.decode() for r in runs) == again(expected, row)
