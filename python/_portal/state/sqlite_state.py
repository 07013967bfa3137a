"""sqlite3 connections and cursors of the program (a plug-in, see plugins.py).

Neither `sqlite3.Connection` nor `sqlite3.Cursor` can be pickled; a training
script that logs its metrics to sqlite holds both.

| object | saved as | restored as |
|---|---|---|
| connection to a database file | the file's absolute path (`PRAGMA database_list`, main) + `isolation_level`, `autocommit` (3.12+), `row_factory`, `text_factory`, `PRAGMA busy_timeout` (the `timeout`), `foreign_keys`, `synchronous`, `check_same_thread=False` (a query from another thread answered) | `sqlite3.connect(path)` with the same settings; the file is the program's data on disk: not copied |
| ... in a transaction at the suspension (`in_transaction`) | its uncommitted changes are committed once the suspension is decided, before the checkpoint is written (the process ends: they would be lost; python's run would have committed them later); a commit that fails (locked, disk full) declines the loop | `will differ:` line; `oom.exact=true` declines, committing nothing |
| in-memory or temporary database (`:memory:`, `""`) | its content by value, `conn.serialize()`: with the uncommitted changes (sqlite serializes what the connection sees) + the settings above | `deserialize()`, copied into a new `:memory:` database (a temporary `""` one too) (its bytes then stay python's); a connection that was in a transaction gets `BEGIN` again, so `in_transaction` and a later `commit()` are as they were (a later `rollback()` cannot undo what was written before the suspension) |
| connection that wrote (`total_changes`) | the above | `will differ:` line: what the failed iteration wrote before the error is kept (in the file or the saved image) and it writes it again; Portal cannot tell whether it wrote, hence "may" |
| closed connection | closed | a closed connection |
| cursor | its connection (restored as above), `arraysize`, `row_factory` | a new cursor of the restored connection; its `description`, `lastrowid`, `rowcount` start empty |
| cursor with rows still pending (a SELECT not read to its end) | declined by name | - |

Why a cursor with pending rows declines rather than differs: its position
cannot be restored, and a program reading it after the resume (`for row in
cur:` as the loop itself) would see it empty and silently stop: a different
run, not a footnote.  A SELECT read to its end (`fetchone()` of a count,
`fetchall()`) is not pending and is saved.  Pending is sqlite3's own statement
still held by the cursor (its garbage-collector referents).

A connection is read in the program's thread (prepare(), before decide.py's
trial: sqlite3 serves a connection only in the thread that made it, and the
pickler runs in one of Portal's); the garbage collector lists them (a
connection cannot be weakly referenced, so none is tracked as it is made).

Declined by name: a connection made in another thread of the program (without
`check_same_thread=False`), a connection with attached databases (more than one row of
`PRAGMA database_list` besides `temp`), one with functions, aggregates or
collations of the program's (`create_function`, `create_aggregate`,
`create_window_function`, `create_collation`: seen in `PRAGMA function_list` /
`collation_list` against a fresh connection's).  Not seen, so not restored:
an authorizer, progress handler or trace callback, `detect_types`,
`cached_statements`, a read-only `file:...?mode=ro` URI (reopened read-write),
other per-connection pragmas, an online backup in progress (`conn.backup()`
runs to its end inside one call, so a loop's state cannot hold one half done).
Subclasses of `Connection` or `Cursor` (`factory=`) are not handled: they cannot be
pickled, as before.
"""
import sys

from _portal.checkpoint.refusals import Refuse

_INFO = {}   # id -> (connection, its in_transaction, _inspect()), noted by prepare()


def _rows(conn, sql):
    cur = conn.cursor()
    cur.row_factory = None     # tuples, whatever the program's row_factory
    try:
        return cur.execute(sql).fetchall()
    finally:
        cur.close()


def _settings(conn, text_factory):
    return {"isolation_level": conn.isolation_level,
            "autocommit": getattr(conn, "autocommit", None),      # 3.12+
            "row_factory": conn.row_factory,
            "text_factory": text_factory,
            "busy_timeout": _rows(conn, "PRAGMA busy_timeout")[0][0],
            "foreign_keys": _rows(conn, "PRAGMA foreign_keys")[0][0],
            "synchronous": _rows(conn, "PRAGMA synchronous")[0][0]}


def _apply(conn, settings):
    conn.row_factory = settings["row_factory"]
    conn.text_factory = settings["text_factory"]
    conn.execute(f"PRAGMA busy_timeout = {int(settings['busy_timeout'])}")
    conn.execute(f"PRAGMA foreign_keys = {int(settings['foreign_keys'])}")
    conn.execute(f"PRAGMA synchronous = {int(settings['synchronous'])}")
    autocommit = settings["autocommit"]
    if autocommit is not None and hasattr(conn, "autocommit"):
        conn.autocommit = autocommit
    return conn


def _connect(path, settings):
    import sqlite3
    return sqlite3.connect(path, isolation_level=settings["isolation_level"],
                           check_same_thread=settings.get("check_same_thread", True))


def _rb_connection(path, settings):
    return _apply(_connect(path, settings), settings)


def _rb_memory_connection(image, settings, in_transaction):
    import sqlite3
    # Copied from the deserialized image into a plain in-memory database: one left
    # on deserialize()'s own file system would count its commits in its header (bytes
    # 24-27, 92-99) where an in-memory database of python's run does not.
    conn = _connect(":memory:", settings)
    if image:
        image_db = sqlite3.connect(":memory:")
        try:
            image_db.deserialize(image)
            image_db.backup(conn)
        finally:
            image_db.close()
    _apply(conn, settings)
    if in_transaction and not conn.in_transaction:
        conn.execute("BEGIN")
    return conn


def _rb_closed_connection():
    conn = _connect(":memory:", {"isolation_level": ""})
    conn.close()
    return conn


def _rb_cursor(conn, arraysize, row_factory):
    import sqlite3
    cur = sqlite3.Cursor(conn)   # not conn.cursor(): that refuses a closed connection
    cur.arraysize = arraysize
    cur.row_factory = row_factory
    return cur


_BUILTIN = []   # [(function names, collation names)] of a fresh connection


def _own_callables(conn):
    """The names of functions and collations the program added to conn."""
    import sqlite3
    if not _BUILTIN:
        fresh = sqlite3.connect(":memory:")
        try:
            _BUILTIN.append((_functions(fresh), {r[1] for r in _rows(fresh, "PRAGMA collation_list")}))
        finally:
            fresh.close()
    functions, collations = _BUILTIN[0]
    own = sorted(_functions(conn) - functions) + sorted({r[1] for r in _rows(conn, "PRAGMA collation_list")}
                                                         - collations)
    return own


def _functions(conn):
    try:
        return {(r[0], r[4]) for r in _rows(conn, "PRAGMA function_list")}
    except Exception:   # noqa: BLE001 - an sqlite built without the introspection pragmas
        return set()


def _inspect(conn):
    text_factory = conn.text_factory
    conn.text_factory = str    # the pragmas' text as str, whatever the program reads
    try:
        return _inspect_as_str(conn, text_factory)
    finally:
        conn.text_factory = text_factory


def _inspect_as_str(conn, text_factory):
    """What the reducer saves of conn, asked in the program's thread (sqlite3
    serves a connection only in the thread that made it; the pickler runs in
    one of Portal's own): (reducer args) or a reason to decline."""
    import sqlite3
    try:
        databases = _rows(conn, "PRAGMA database_list")
    except sqlite3.ProgrammingError as e:
        if "thread" in str(e):
            return "an sqlite3 connection made in another thread: Portal cannot read it from this one"
        return (_rb_closed_connection, ())   # closed
    attached = [name for _, name, _ in databases if name not in ("main", "temp")]
    if attached:
        return f"an sqlite3 connection with attached databases ({', '.join(attached)}): Portal cannot reattach them"
    own = _own_callables(conn)
    if own:
        return (f"an sqlite3 connection with functions or collations of the program's "
                f"({', '.join(n if isinstance(n, str) else n[0] for n in own)}): Portal cannot rebuild them")
    path = next(file for _, name, file in databases if name == "main")
    settings = _settings(conn, text_factory)
    if not path:
        empty = not _rows(conn, "PRAGMA page_count")[0][0]    # serialize() refuses an empty one
        return (_rb_memory_connection, (b"" if empty else conn.serialize(), settings, conn.in_transaction))
    return (_rb_connection, (path, settings))


def prepare():
    """Before decide.py's trial, in the program's thread: each connection of the
    program inspected (the module's docstring)."""
    _INFO.clear()
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is None:
        return
    import gc
    for obj in gc.get_objects():
        if type(obj) is sqlite3.Connection:
            try:
                how = _inspect(obj)
                in_transaction = how[0] is not _rb_closed_connection and obj.in_transaction
            except Exception as e:  # noqa: BLE001 - declined by name if the state holds it
                how = f"an sqlite3 connection Portal could not read ({type(e).__name__}: {e})"
                in_transaction = False
            _INFO[id(obj)] = (obj, in_transaction, how)
    _note_shared((how[1][1], conn)    # the settings of either rebuild
                 for conn, _, how in _INFO.values() if not isinstance(how, str) and how[0] is not _rb_closed_connection)


def _note_shared(settings_and_connections):
    """check_same_thread=False is not shown: a connection another thread may use is one
    that answers a query from a thread of Portal's (once, at the suspension)."""
    import threading
    pairs = list(settings_and_connections)
    if not pairs:
        return

    def probe():
        for settings, conn in pairs:
            try:
                _rows(conn, "PRAGMA busy_timeout")
                settings["check_same_thread"] = False
            except Exception:  # noqa: BLE001 - the thread check: the default
                pass
    prober = threading.Thread(target=probe, name="portal-sqlite-probe", daemon=True)
    prober.start()
    prober.join()


def at_suspension(saved):
    """The suspension is decided: the uncommitted changes of each database file
    the checkpoint holds a connection to are committed (the process ends: they
    would be lost); will_differ() said so.  Returns a reason to decline, or None."""
    for conn, in_transaction, how in list(_INFO.values()):
        if (saved is None or id(conn) in saved) and in_transaction and how[0] is _rb_connection:
            try:
                conn.commit()
            except Exception as e:  # noqa: BLE001 - locked, disk full ...: the loop declines
                return (f"the uncommitted changes of the sqlite database {how[1][0]} could not be "
                        f"committed ({type(e).__name__}: {e})")
    return None


def _reduce_connection(conn):
    noted = _INFO.get(id(conn))
    if noted is None or noted[0] is not conn:
        raise Refuse("an sqlite3 connection Portal did not find before the capture")
    how = noted[2]
    if isinstance(how, str):
        raise Refuse(how)
    return how


def _pending(cursor):
    if cursor.description is None:
        return False
    import gc
    return any(type(r).__name__ == "Statement" for r in gc.get_referents(cursor))


def _reduce_cursor(cursor):
    if _pending(cursor):
        raise Refuse("an sqlite3 cursor with rows of a SELECT still to read: its position cannot be "
                      "restored (read them to the end with fetchall() before the loop)")
    return (_rb_cursor, (cursor.connection, cursor.arraysize, cursor.row_factory))


def will_differ(roots, saved):
    """[text] for the connections decide.py's trial saw (plugins.will_differ)."""
    seen = [s for s in _INFO.values() if (saved is None or id(s[0]) in saved) and not isinstance(s[2], str)]
    if not seen:
        return []
    from _portal.fidelity.irreversible import _name
    out = []
    for conn, in_transaction, how in seen:
        if how[0] is _rb_closed_connection:
            continue
        path = how[1][0] if how[0] is _rb_connection else None
        what = f"the sqlite database {path or 'in memory'} ({_name(conn, roots)})"
        wrote = "what the failed iteration may have written before the error (Portal cannot tell), which it writes again"
        if in_transaction and path:
            out.append(f"{what} had uncommitted changes: Portal committed them at the suspension, with {wrote}")
        elif conn.total_changes:
            out.append(f"{what} keeps {wrote}")
    return out


def reducers(context):
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is None:
        return {}
    return {sqlite3.Connection: _reduce_connection, sqlite3.Cursor: _reduce_cursor}
