"""Metrics written to an sqlite database, two rows per step, committed every 4
steps; every row printed at the end.  DB=memory: an in-memory database, whose
bytes are printed too.  CURSOR=read: a cursor whose SELECT was read to its end,
CURSOR=pending: one with a row still to read, held across the loop."""
import hashlib
import math
import os
import sqlite3


memory = os.environ.get("DB") == "memory"
conn = sqlite3.connect(":memory:" if memory else "metrics.db")
conn.row_factory = sqlite3.Row
conn.execute("PRAGMA foreign_keys = ON")
cur = conn.cursor()
cur.arraysize = 7
cur.execute("CREATE TABLE IF NOT EXISTS metrics (step INTEGER, name TEXT, value REAL)")
conn.commit()
sel = conn.cursor()
if os.environ.get("CURSOR") == "read":
    print("rows before", sel.execute("SELECT count(*) FROM metrics").fetchone()[0])
elif os.environ.get("CURSOR") == "pending":
    print("first", sel.execute("SELECT 1 UNION ALL SELECT 2").fetchone()[0])
for step in range(12):
    cur.execute("INSERT INTO metrics VALUES (?, ?, ?)", (step, "loss", 1.0 / (step + 1.5)))
    if step % 4 == 3:
        conn.commit()
    cur.execute("INSERT INTO metrics VALUES (?, ?, ?)", (step, "w0", math.sin(step)))
    print(step, conn.in_transaction, flush=True)
print("sel", sel.fetchall(), sel.arraysize, sel.connection is conn)
print("cursor", cur.arraysize, cur.row_factory is None, type(conn.row_factory).__name__,
      conn.execute("PRAGMA foreign_keys").fetchone()[0], conn.isolation_level)
conn.commit()
for row in conn.execute("SELECT step, name, value FROM metrics ORDER BY rowid"):
    print(row["step"], row["name"], float(row["value"]).hex())
if memory:
    print("image", hashlib.sha256(conn.serialize()).hexdigest())
conn.close()
