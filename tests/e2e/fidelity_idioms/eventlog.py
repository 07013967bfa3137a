"""A TensorBoard-SummaryWriter-like event writer, as makemore uses one: records
go into a queue under a lock, and a daemon thread flushes them to an open event
file every few milliseconds; close() stops the thread and writes the rest."""
import threading
import time

FLUSH_SECONDS = 0.005


class PlainEventLog:
    """The writer as a library writes it: nothing says how to save it."""

    def __init__(self, path):
        self.path = path
        self._file = open(path, "a")
        self._lock = threading.Lock()
        self._queue = []
        self._closed = False
        self._start()

    def _start(self):
        self._thread = threading.Thread(target=self._flush_loop, name="event-flush", daemon=True)
        self._thread.start()

    def add_scalar(self, tag, value, step):
        with self._lock:
            self._queue.append(f"{step}\t{tag}\t{value!r}\n")

    def _flush(self):
        with self._lock:
            pending, self._queue = self._queue, []
        self._file.writelines(pending)
        self._file.flush()

    def _flush_loop(self):
        while not self._closed:
            self._flush()
            time.sleep(FLUSH_SECONDS)

    def close(self):
        self._closed = True
        self._thread.join()
        self._flush()
        self._file.close()


class EventLog(PlainEventLog):
    """The same writer with what a checkpoint needs: the state without the flush
    thread and its lock (the pending records written out first); a new thread
    and lock when restored."""

    def __getstate__(self):
        self._flush()
        state = dict(self.__dict__)
        del state["_thread"], state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._start()
