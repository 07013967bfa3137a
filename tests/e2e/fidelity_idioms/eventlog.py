"""A TensorBoard-SummaryWriter-like event writer, as makemore uses one: records
go into a queue under a lock, and a daemon thread flushes them to an open event
file every few milliseconds; close() stops the thread and writes the rest."""
import queue
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


class SummaryWriter:
    """The writer as torch.utils.tensorboard's EventFileWriter is made: records put
    on a queue.Queue, a daemon thread taking them off and writing them to the open
    event file under a lock, flushing it whenever the queue stays empty for a
    while; an Event tells it to stop.  No __getstate__: Portal saves it as it is."""

    def __init__(self, path, flush_secs=FLUSH_SECONDS):
        self._file = open(path, "a")
        self._queue = queue.Queue()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._flush_secs = flush_secs
        self._worker = threading.Thread(target=self._run, name="summary-flush", daemon=True)
        self._worker.start()

    def add_scalar(self, tag, value, step):
        self._queue.put(f"{step}\t{tag}\t{value!r}\n")

    def _run(self):
        while not self._closed.is_set():
            try:
                record = self._queue.get(timeout=self._flush_secs)
            except queue.Empty:
                self.flush()
                continue
            with self._lock:
                self._file.write(record)
            self._queue.task_done()

    def flush(self):
        with self._lock:
            self._file.flush()

    def close(self):
        self._queue.join()
        self._closed.set()
        self._worker.join()
        self.flush()
        self._file.close()
