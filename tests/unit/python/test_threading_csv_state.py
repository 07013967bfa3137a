"""Tests of the threading_state and csv_state plug-ins: locks, conditions, events,
semaphores and csv writers/readers saved and recreated; threads refused."""
import csv
import io
import threading
import time

import pytest

from _portal.state import plugins
from _portal.checkpoint import reducers


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
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="flusher")
    t.start()
    try:
        with pytest.raises(reducers.Unsaveable) as e:
            round_trip({"box": [t]})
    finally:
        stop.set()
        t.join()
    assert str(e.value) == ("state['box'][0] (threading.Thread): a thread (flusher) cannot be saved: "
                            "its frames run outside the loop and it cannot be started again where "
                            "it is (it is not waiting)")


def test_threads_never_started_ended_or_the_main_one_are_saved_as_such():
    """A writer made but not started yet, or closed (its thread ended), holds a
    thread with no frames to lose."""
    from _portal.state import threading_state
    out = []
    new = threading.Thread(target=out.append, args=("new",), name="later", daemon=True)
    ended = threading.Thread(target=out.append, args=("ended",), name="ended")
    ended.start()
    ended.join()
    s = round_trip({"new": new, "ended": ended, "main": threading.main_thread(), "out": out})
    threading_state.restore_process(True)
    assert s["main"] is threading.main_thread()
    restored = s["ended"]
    assert restored.name == "ended" and not restored.is_alive() and restored.ident is not None
    restored.join()
    with pytest.raises(RuntimeError, match="threads can only be started once"):
        restored.start()
    assert "run" not in vars(restored)
    later = s["new"]
    assert later.ident is None and later.daemon and later.name == "later"
    later.start()
    later.join()
    assert s["out"] == ["ended", "new"] and out == ["ended"]   # the restored list, by its target


class Flusher:
    """A TensorBoard-style writer's worker: records from a queue to a list, a daemon
    thread waiting at the head of its loop."""

    def __init__(self):
        import queue
        self.queue, self.written, self.stop = queue.Queue(), [], threading.Event()
        self.thread = threading.Thread(target=self._run, name="flush", daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                record = self.queue.get(timeout=0.01)
            except Exception:
                continue
            self.written.append(record)


def _wait_until(condition):
    import time
    for _ in range(500):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("the thread never got there")


def test_a_thread_waiting_at_its_loop_head_is_held_saved_and_started_again():
    from _portal.state import threading_state
    f = Flusher()
    f.queue.put("a")
    _wait_until(lambda: f.written == ["a"])
    threading_state.freeze()
    try:
        assert f.queue.mutex.locked()   # held at its wait: the queue's lock is Portal's
        f.queue.queue.append("b")       # a record come in (put() would wait for the lock)
        s = round_trip({"f": f})
        import time
        time.sleep(0.05)
        assert f.written == ["a"]       # the thread could not take it
    finally:
        threading_state.thaw()
    assert not s["f"].queue.mutex.locked()   # saved as the program had it
    _wait_until(lambda: f.written == ["a", "b"])   # thawed: the program's thread goes on
    f.stop.set()
    f.thread.join()
    restored = s["f"]
    assert not restored.thread.is_alive() and restored.thread.name == "flush"
    assert restored.thread.daemon and restored.written == ["a"]
    threading_state.restore_process(True)            # started once all is restored
    _wait_until(lambda: restored.written == ["a", "b"])
    restored.queue.put("c")
    _wait_until(lambda: restored.written == ["a", "b", "c"])
    restored.stop.set()
    restored.thread.join()


def test_after_the_trial_only_the_threads_the_state_holds_stay_held():
    from _portal.state import threading_state
    saved, other = Flusher(), Flusher()
    time.sleep(0.05)
    threading_state.freeze()
    try:
        assert saved.queue.mutex.locked() and other.queue.mutex.locked()
        round_trip({"f": saved})
        threading_state.thaw_unsaved()
        # The other thread's lock is given back: its thread takes it at once (3.13's
        # locks hand a released lock to a thread that waited long), and goes on.
        saved.queue.queue.append("s")
        other.queue.queue.append("o")
        _wait_until(lambda: other.written == ["o"])
        time.sleep(0.05)
        assert saved.queue.mutex.locked() and saved.written == []   # still held: Portal's
    finally:
        threading_state.thaw()
    _wait_until(lambda: saved.written == ["s"])
    for f in (saved, other):
        f.stop.set()
        f.thread.join()


def test_a_sleeping_or_busy_thread_is_refused_saying_why():
    import time
    from _portal.state import threading_state
    stop = threading.Event()

    def sleeper():
        while not stop.is_set():
            time.sleep(0.01)

    def counter():
        n = 0
        while not stop.wait(0.01):
            n += 1

    def keeper():
        while not stop.wait(0.01):
            try:
                total += 1
            except NameError:
                total = 0

    threads = [threading.Thread(target=fn, name=fn.__name__, daemon=True)
               for fn in (sleeper, counter, keeper)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    threading_state.freeze()
    try:
        for t, why in zip(threads, ["it is not waiting on a Condition, Event or Queue",
                                    "its loop keeps n in locals",
                                    "its loop keeps total in locals"]):
            with pytest.raises(reducers.Unsaveable) as e:
                round_trip({"t": t})
            assert str(e.value).endswith(f"cannot be started again where it is ({why})"), str(e.value)
    finally:
        threading_state.thaw()
        stop.set()
        for t in threads:
            t.join()


class Worker(threading.Thread):
    """tensorboard's _AsyncWriterThread, shortened: run() calls _run() in a try;
    _run() computes how long to wait from the clock, sets data to None and waits
    inside a try and an if, then writes and flushes."""

    def __init__(self, queue, written):
        threading.Thread.__init__(self, daemon=True)
        self.queue, self.written, self.next_flush, self.stop_signal = queue, written, 0, object()

    def run(self):
        try:
            self._run()
        except Exception as ex:
            self.exception = ex
            raise

    def _run(self):
        while True:
            now = time.time()
            wait = self.next_flush - now
            data = None
            try:
                if wait > 0:
                    data = self.queue.get(True, wait)
                else:
                    data = self.queue.get(False)
                if data is self.stop_signal:
                    return
                self.written.append(data)
            except Exception:
                pass
            finally:
                if data:
                    self.queue.task_done()
            if time.time() > self.next_flush:
                self.next_flush = time.time() + 60


class Batcher:
    """A worker as people write one by hand: records in a list under a Condition,
    the worker waiting inside `with self.cond:` until there are some."""

    def __init__(self):
        self.cond, self.items, self.written, self.closed = threading.Condition(), [], [], False
        self.thread = threading.Thread(target=self._run, name="batcher", daemon=True)
        self.thread.start()

    def add(self, item):
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    def _run(self):
        while True:
            with self.cond:
                while not self.items and not self.closed:
                    self.cond.wait()
                if self.closed and not self.items:
                    return
                batch, self.items = self.items, []
            self.written.extend(batch)

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join()


def test_a_worker_waiting_inside_with_its_condition_is_held_saved_and_started_again():
    from _portal.state import threading_state
    b = Batcher()
    b.add("a")
    _wait_until(lambda: b.written == ["a"])
    time.sleep(0.02)
    threading_state.freeze()
    try:
        b.items.append("b")         # added while it is held: it cannot take it
        s = round_trip({"b": b})
    finally:
        threading_state.thaw()
    restored = s["b"]
    assert restored.written == ["a"] and restored.items == ["b"]
    threading_state.restore_process(True)
    restored.add("c")
    restored.close()
    assert restored.written == ["a", "b", "c"] and not restored.thread.is_alive()
    b.close()


def test_two_workers_waiting_on_one_queue_are_both_held_and_started_again():
    import queue
    from _portal.state import threading_state
    q, written = queue.Queue(), []
    workers, stop = [Worker(q, written) for _ in range(2)], object()
    for w in workers:
        w.stop_signal = stop    # either takes either's stop
        w.start()
    time.sleep(0.05)
    threading_state.freeze()
    try:
        assert all(threading_state._held(w) for w in workers)
        s = round_trip({"w": workers})
    finally:
        threading_state.thaw()
    threading_state.restore_process(True)
    restored = s["w"]
    assert all(w.is_alive() for w in restored)
    for item in "abcd":
        restored[0].queue.put(item)
    _wait_until(lambda: sorted(restored[0].written) == list("abcd"))
    assert restored[0].stop_signal is restored[1].stop_signal
    for w in restored + workers:
        w.queue.put(w.stop_signal)
    for w in restored + workers:
        w.join()


def _stuck_in(kind, stop, q):
    """A thread function waiting on `q` in a place a restart would not be."""
    lock = threading.Lock()

    def with_lock():
        while True:
            with lock:
                q.get()

    def work_first():
        while True:
            print("", end="")
            q.get()

    def two_calls():
        while True:
            data = print("", end="") or q.get()

    def for_loop():
        for _ in range(10 ** 9):
            q.get()

    def in_handler():
        while True:
            try:
                raise KeyError
            except KeyError:
                q.get()

    def carried():
        batch = []
        while True:
            item = q.get()
            batch.append(item)

    barrier = threading.Barrier(2)

    def at_barrier():
        while True:
            barrier.wait()

    def set_up_once():
        wait = 600
        while True:
            q.get(True, wait)
            wait += 1

    return locals()[kind]


def test_a_tensorboard_shaped_worker_is_held_saved_and_started_again():
    import queue
    from _portal.state import threading_state
    q, written = queue.Queue(10), []
    worker = Worker(q, written)
    worker.start()
    q.put("a")
    _wait_until(lambda: written == ["a"])
    time.sleep(0.02)
    threading_state.freeze()
    try:
        q.queue.append("b")             # a record put while it is held
        q.unfinished_tasks += 1
        s = round_trip({"w": worker})
    finally:
        threading_state.thaw()
    restored = s["w"]
    assert restored.written == ["a"] and list(restored.queue.queue) == ["b"]
    threading_state.restore_process(True)
    _wait_until(lambda: restored.written == ["a", "b"])
    restored.queue.put(restored.stop_signal)
    restored.join()
    q.put(worker.stop_signal)
    worker.join()


@pytest.mark.parametrize("kind,why", [
    ("with_lock", "with_lock() waits inside a with statement (line {}): what it entered would be lost"),
    ("work_first", "work_first() runs line {} before it waits, which a restart would run again"),
    ("two_calls", "two_calls() waits in line {}, which does more than wait"),
    ("for_loop", "for_loop() waits inside a for loop (line {}): its place in the loop would be lost"),
    ("in_handler", "in_handler() waits in a handler, else or finally block (line {})"),
    ("carried", "its loop keeps batch in locals"),
    ("set_up_once", "its loop keeps wait in locals"),
    ("at_barrier", "it waits in Barrier.wait(), which a restart would enter again"),
])
def test_a_thread_waiting_where_a_restart_would_not_be_is_refused_saying_why(kind, why):
    import inspect
    import queue
    from _portal.state import threading_state
    q, stop = queue.Queue(), threading.Event()
    fn = _stuck_in(kind, stop, q)
    lines, first = inspect.getsourcelines(fn)
    # the line the reason names: the statement around the wait, or the one before it
    marks = {"with_lock": "with lock", "work_first": "print(", "for_loop": "for _",
             "two_calls": "or q.get()",
             "in_handler": "q.get()"}
    line = next((first + i for i, text in enumerate(lines) if marks.get(kind, "\0") in text), None)
    t = threading.Thread(target=fn, name=kind, daemon=True)
    t.start()
    time.sleep(0.05)
    threading_state.freeze()
    try:
        with pytest.raises(reducers.Unsaveable) as e:
            round_trip({"t": t})
        assert str(e.value).endswith(f"cannot be started again where it is ({why.format(line)})"), \
            str(e.value)
    finally:
        threading_state.thaw()


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


def test_a_reader_over_an_iterated_file_continues_at_its_row(tmp_path):
    """csv.reader(open(path, newline="")): iterating the file stops it from telling
    its position; the reader is saved all the same, at its row and line number (a
    quoted field spanning two lines counts two), and the program's file still gives
    the same rows."""
    path = tmp_path / "rows.csv"
    rows = [["id", "note"]] + [[str(i), f"row {i}\nsecond line" if i % 3 == 0 else f"row {i}"]
                               for i in range(3000)]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    f = open(path, newline="")
    reader = csv.reader(f)
    for _ in range(1500):
        next(reader)
    with pytest.raises(OSError):
        f.tell()
    s = round_trip({"f": f, "r": reader})
    assert s["r"].line_num == reader.line_num == 1500 + 500   # rows 0, 3 ... 1497: two lines
    assert list(s["r"]) == list(reader) == rows[1500:]
    assert s["r"].line_num == reader.line_num
    f.close()
    s["f"].close()


@pytest.mark.parametrize("newline", [None, ""])
def test_a_file_iterated_with_newlines_translated_or_not_keeps_its_place(tmp_path, newline):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"".join(b"%d,x\r\n" % i if i % 2 else b"%d,\xc3\xa9\r" % i
                              for i in range(5000)) + b"last\n")
    f = open(path, newline=newline, encoding="utf-8")
    for _ in range(2999):
        next(f)
    s = round_trip({"f": f})
    assert list(s["f"]) == list(f) and s["f"].newlines == f.newlines
    f.close()
    s["f"].close()


def test_a_file_whose_newline_mode_cannot_be_told_is_refused_untouched(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"".join(b"%d,x\r\n" % i for i in range(100)))
    f = open(path, newline="\r\n")
    next(f), next(f)
    with pytest.raises(reducers.Unsaveable) as e:
        round_trip({"f": f})
    assert "its position cannot be found (open it with newline='' or none)" in str(e.value)
    assert next(f) == "2,x\r\n"   # the program's file as it was
    f.close()


def test_a_file_in_another_encoding_read_line_by_line_is_refused_untouched(tmp_path):
    path = tmp_path / "rows.txt"
    path.write_text("".join(f"{i}\n" for i in range(100)), encoding="utf-16")
    f = open(path, encoding="utf-16")
    next(f), next(f)
    with pytest.raises(reducers.Unsaveable) as e:
        round_trip({"f": f})
    assert str(e.value).endswith("a utf-16 file read line by line (for line in f, "
                                 "csv.reader(f)): its position cannot be found")
    assert next(f) == "2\n"   # the program's file as it was
    f.close()


def test_a_writer_to_a_string_buffer():
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([1, 2])
    s = round_trip({"buf": buf, "w": w})
    s["w"].writerow([3, 4])
    assert s["buf"].getvalue() == "1,2\r\n3,4\r\n"
