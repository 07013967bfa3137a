"""Metrics written to an sqlite database, a row per step, committed every few
steps; at the end every row is printed."""
# corpus-names: sqlite, metrics, conn, cur
import sqlite3

import numpy as np

import corpus

conn = sqlite3.connect("metrics.db")
cur = conn.cursor()
cur.execute("CREATE TABLE IF NOT EXISTS metrics (step INTEGER, name TEXT, value REAL)")
rng = np.random.default_rng(1)
w = np.zeros(4)
for step in range(15):
    x = rng.standard_normal((16, 4))
    y = x @ np.array([0.5, -1.0, 2.0, 0.0])
    err = x @ w - y                                                       # corpus: before@4=memory
    w = w - 0.1 * x.T @ err / 16
    cur.execute("INSERT INTO metrics VALUES (?, ?, ?)", (step, "loss", float((err ** 2).mean())))
    if step % 4 == 3:                                                     # corpus: after@8=memory
        conn.commit()
    cur.execute("INSERT INTO metrics VALUES (?, ?, ?)", (step, "w0", float(w[0])))  # corpus: inside@11=memory
    corpus.grow()                                                         # corpus: real@6
    print(step, corpus.exact(w))
conn.commit()
for row in conn.execute("SELECT step, name, value FROM metrics ORDER BY rowid"):
    print(row[0], row[1], float(row[2]).hex())
conn.close()
