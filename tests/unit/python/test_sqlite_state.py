"""Tests of the sqlite_state plug-in: connections and cursors saved and made again
(the end-to-end runs: tests/e2e/test_sqlite_state.py); what it cannot rebuild refused
by name."""
import sqlite3

import pytest

from _portal.state import plugins
from _portal.checkpoint import reducers


def round_trip(state):
    plugins.prepare()   # decide.py, in the program's thread, before pickling
    exact, inherited = plugins.reducers()
    data, buffers = reducers.dumps(state, reducers=exact, subclass_reducers=inherited, modules={})
    return reducers.loads(data, buffers)


def test_a_file_connection_is_reconnected_with_its_settings(tmp_path):
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level="IMMEDIATE", timeout=2.5)
    conn.row_factory, conn.text_factory = sqlite3.Row, bytes
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE t (a TEXT)")
    conn.execute("INSERT INTO t VALUES ('x')")
    conn.commit()
    cur = conn.cursor()
    cur.arraysize, cur.row_factory = 5, None
    back, back_cur = round_trip([conn, cur])
    assert back is not conn and back_cur.connection is back
    assert (back.isolation_level, back.row_factory, back.text_factory) == ("IMMEDIATE", sqlite3.Row, bytes)
    assert [back.execute(f"PRAGMA {p}").fetchone()[0] for p in ("foreign_keys", "busy_timeout")] == [1, 2500]
    assert (back_cur.arraysize, back_cur.row_factory) == (5, None)
    assert back_cur.execute("SELECT a FROM t").fetchall() == [(b"x",)]


def test_a_closed_connection_stays_closed_with_its_cursor():
    conn = sqlite3.connect(":memory:")
    cur = conn.cursor()
    conn.close()
    back, back_cur = round_trip([conn, cur])
    assert back_cur.connection is back
    for run in (back.execute, back_cur.execute):
        with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
            run("SELECT 1")


def test_an_in_memory_database_keeps_its_open_transaction():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a)")
    conn.commit()
    conn.execute("INSERT INTO t VALUES (1)")
    [back] = round_trip([conn])
    assert back.in_transaction and back.execute("SELECT a FROM t").fetchall() == [(1,)]
    assert back.serialize() == conn.serialize()


@pytest.mark.parametrize("add,name", [
    (lambda c: c.execute("ATTACH ':memory:' AS aux"), "attached databases (aux)"),
    (lambda c: c.create_function("twice", 1, lambda x: 2 * x), "functions or collations of the program's (twice)"),
    (lambda c: c.create_collation("backwards", lambda a, b: 0), "functions or collations of the program's (backwards)"),
])
def test_what_cannot_be_rebuilt_is_refused_by_name(add, name):
    conn = sqlite3.connect(":memory:")
    add(conn)
    with pytest.raises(reducers.Unsaveable) as e:
        round_trip({"conn": conn})
    assert f"(sqlite3.Connection): an sqlite3 connection with {name}" in str(e.value)


def test_a_cursor_is_refused_only_while_rows_are_left_to_read():
    conn = sqlite3.connect(":memory:")
    cur = conn.execute("SELECT 1 UNION ALL SELECT 2")
    cur.fetchone()
    with pytest.raises(reducers.Unsaveable) as e:
        round_trip({"cur": cur})
    assert "an sqlite3 cursor with rows of a SELECT still to read" in str(e.value)
    cur.fetchone()
    [back] = round_trip([cur])
    assert back.fetchall() == []


def test_a_connection_of_another_thread_is_refused_unless_shared():
    import threading
    made = {}
    worker = threading.Thread(target=lambda: made.update(
        own=sqlite3.connect(":memory:"), shared=sqlite3.connect(":memory:", check_same_thread=False)))
    worker.start()
    worker.join()
    with pytest.raises(reducers.Unsaveable) as e:
        round_trip({"conn": made["own"]})
    assert "an sqlite3 connection made in another thread: Portal cannot read it from this one" in str(e.value)
    [back] = round_trip([made["shared"]])
    answer = []
    worker = threading.Thread(target=lambda: answer.append(back.execute("SELECT 2").fetchone()))
    worker.start()
    worker.join()
    assert answer == [(2,)]   # still usable from any thread
