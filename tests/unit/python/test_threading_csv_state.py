"""Tests of the threading_state and csv_state plug-ins: locks, conditions, events,
semaphores and csv writers/readers saved and recreated; threads refused."""
import csv
import io
import threading

import pytest

from _portal import plugins, reducers


def round_trip(state):
    exact, inherited = plugins.reducers()
    data, buffers = reducers.dumps(state, reducers=exact, subclass_reducers=inherited, modules={})
    return reducers.loads(data, buffers)


def test_locks_events_conditions_semaphores_keep_their_state():
    free, held = threading.Lock(), threading.Lock()
    held.acquire()
    mine = threading.RLock()
    mine.acquire()
    mine.acquire()
    event, unset = threading.Event(), threading.Event()
    event.set()
    cond = threading.Condition(threading.Lock())
    sem = threading.BoundedSemaphore(3)
    sem.acquire()
    s = round_trip(dict(free=free, held=held, mine=mine, event=event, unset=unset, cond=cond, sem=sem))
    assert not s["free"].locked() and s["held"].locked()
    assert "count=2" in repr(s["mine"]) and s["mine"]._is_owned()
    s["mine"].release()
    s["mine"].release()
    assert not s["mine"]._is_owned()
    assert s["event"].is_set() and not s["unset"].is_set()
    with s["cond"]:
        s["cond"].notify_all()          # works on the restored lock
    assert s["sem"]._value == 2
    assert s["sem"].acquire(timeout=0) and s["sem"].acquire(timeout=0) and not s["sem"].acquire(timeout=0)


def test_an_rlock_another_thread_holds_is_restored_free():
    lock, got, leave = threading.RLock(), threading.Event(), threading.Event()

    def hold():
        with lock:
            got.set()
            leave.wait()
    t = threading.Thread(target=hold)
    t.start()
    got.wait()
    try:
        restored = round_trip({"lock": lock})["lock"]
    finally:
        leave.set()
        t.join()
    assert restored.acquire(blocking=False)


def test_a_thread_is_refused_naming_it():
    t = threading.Thread(target=print, name="flusher")
    with pytest.raises(reducers.Unsaveable) as e:
        round_trip({"box": [t]})
    assert str(e.value) == ("state['box'][0] (threading.Thread): a thread (flusher) cannot be saved: "
                            "its frames run outside the loop")


def test_csv_writers_keep_writing_to_the_same_file(tmp_path):
    path = tmp_path / "log.csv"
    f = open(path, "w", newline="")
    w = csv.writer(f, delimiter=";", quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    w.writerow(["a", 1])
    dw = csv.DictWriter(f, fieldnames=["x", "y"])
    dw.writerow({"x": 1, "y": 2})
    s = round_trip({"f": f, "w": w, "dw": dw})
    f.close()
    s["w"].writerow(["b", 2])
    s["dw"].writerow({"x": 3, "y": 4})
    s["f"].close()
    assert path.read_bytes() == b'"a";1\n1,2\r\n"b";2\n3,4\r\n'


def test_csv_readers_continue_at_their_row_and_line_number():
    lines = iter(["a,b\n", "1,2\n", "3,4\n", "5,6\n"])
    r = csv.reader(lines)
    next(r), next(r)
    more = iter(["k,v\n", "1,2\n", "3,4\n"])
    dr = csv.DictReader(more)
    next(dr)
    s = round_trip({"r": r, "dr": dr})
    assert s["r"].line_num == 2 and next(s["r"]) == ["3", "4"] and s["r"].line_num == 3
    assert next(s["dr"]) == {"k": "3", "v": "4"} and s["dr"].line_num == 3
    again = round_trip({"r": s["r"]})["r"]   # a restored reader saved again
    assert again.line_num == 3 and next(again) == ["5", "6"]


def test_a_writer_to_a_string_buffer():
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([1, 2])
    s = round_trip({"buf": buf, "w": w})
    s["w"].writerow([3, 4])
    assert s["buf"].getvalue() == "1,2\r\n3,4\r\n"
