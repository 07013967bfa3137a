"""Event-file writers built the way tensorboard's summary/writer/event_file_writer.py
(used by torch.utils.tensorboard's SummaryWriter) and tensorboardX build theirs:
an event file opened "wb", framed records (length, its checksum, the payload, its
checksum) written by a RecordWriter, and an _AsyncWriter that puts each record on
a bounded queue.Queue taken off by a daemon worker thread, which writes it and
flushes the file at most every flush_secs.  Records are deterministic (no wall
time), so two runs' event files compare byte for byte.

    EventFileWriter             the worker a threading.Thread subclass whose run()
                                calls _run() (tensorboard's _AsyncWriterThread)
    TargetEventFileWriter       the same loop as a method of the writer, started
                                as threading.Thread(target=self._run, daemon=True)
    BatchingEventFileWriter     a worker that gathers records in a local list and
                                writes them four at a time: its state lives in its
                                frame, and cannot be rebuilt
"""
import os
import queue
import struct
import threading
import time
import zlib


def read_records(path):
    """The payloads of an event file, checked record by record."""
    with open(path, "rb") as f:
        return read_records_of(f.read())


def read_records_of(data):
    out = []
    at = 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert header_crc == zlib.crc32(header), f"bad header checksum at {at}"
        payload = data[at + 12:at + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert payload_crc == zlib.crc32(payload), f"bad payload checksum at {at}"
        out.append(payload)
        at += 16 + length
    return out


def encode_scalar(tag, value, step):
    return struct.pack("<qd", step, value) + tag.encode()


class RecordWriter:
    """Frames each payload as tensorboard's record_writer.RecordWriter does."""

    def __init__(self, writer):
        self._writer = writer

    def write(self, data):
        header = struct.pack("<Q", len(data))
        header_crc = struct.pack("<I", zlib.crc32(header))
        footer_crc = struct.pack("<I", zlib.crc32(data))
        self._writer.write(header + header_crc + data + footer_crc)

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()


class _AsyncWriterThread(threading.Thread):
    """Takes the records off the queue and writes them (tensorboard's worker)."""

    def __init__(self, queue, record_writer, flush_secs):
        threading.Thread.__init__(self)
        self.daemon = True
        self.exception = None
        self._queue = queue
        self._record_writer = record_writer
        self._flush_secs = flush_secs
        self._next_flush_time = 0
        self._has_pending_data = False
        self._shutdown_signal = object()

    def stop(self):
        self._queue.put(self._shutdown_signal)
        self.join()

    def run(self):
        try:
            self._run()
        except Exception as ex:
            self.exception = ex
            raise

    def _run(self):
        # Wait for a record until the next flush is due; write it, or flush.
        while True:
            now = time.time()
            queue_wait_duration = self._next_flush_time - now
            data = None
            try:
                if queue_wait_duration > 0:
                    data = self._queue.get(True, queue_wait_duration)
                else:
                    data = self._queue.get(False)
                if data is self._shutdown_signal:
                    return
                self._record_writer.write(data)
                self._has_pending_data = True
            except queue.Empty:
                pass
            finally:
                if data:
                    self._queue.task_done()
            now = time.time()
            if now > self._next_flush_time:
                if self._has_pending_data:
                    self._record_writer.flush()
                    self._has_pending_data = False
                self._next_flush_time = now + self._flush_secs


class _AsyncWriter:
    """Puts records on the queue; flush() waits until the worker wrote them."""

    def __init__(self, record_writer, max_queue_size=10, flush_secs=120):
        self._writer = record_writer
        self._closed = False
        self._byte_queue = queue.Queue(max_queue_size)
        self._worker = _AsyncWriterThread(self._byte_queue, self._writer, flush_secs)
        self._lock = threading.Lock()
        self._worker.start()

    def write(self, bytestring):
        with self._lock:
            self._check_worker_status()
            if self._closed:
                raise IOError("Writer is closed")
            self._byte_queue.put(bytestring)

    def flush(self):
        with self._lock:
            self._check_worker_status()
            self._byte_queue.join()
            self._writer.flush()

    def close(self):
        if not self._closed:
            with self._lock:
                if not self._closed:
                    self._closed = True
                    self._worker.stop()
                    self._writer.flush()
                    self._writer.close()

    def _check_worker_status(self):
        if self._worker.exception is not None:
            raise self._worker.exception

    @property
    def worker(self):
        return self._worker


class EventFileWriter:
    """An event file in logdir, written asynchronously (tensorboard's writer)."""

    def __init__(self, logdir, max_queue_size=10, flush_secs=120, filename_suffix=""):
        os.makedirs(logdir, exist_ok=True)
        self._file_name = os.path.join(logdir, "events.out.tfevents" + filename_suffix)
        self._general_file_writer = open(self._file_name, "wb")
        self._async_writer = _AsyncWriter(RecordWriter(self._general_file_writer), max_queue_size,
                                          flush_secs)
        self.add_event(b"brain.Event:2")
        self.flush()

    @property
    def worker(self):
        return self._async_writer.worker

    def add_event(self, event):
        self._async_writer.write(event)

    def add_scalar(self, tag, value, step):
        self.add_event(encode_scalar(tag, value, step))

    def flush(self):
        self._async_writer.flush()

    def close(self):
        self._async_writer.close()


class TargetEventFileWriter:
    """The same writer with the worker's loop a method of its own, started as
    threading.Thread(target=self._run, daemon=True)."""

    def __init__(self, logdir, max_queue_size=10, flush_secs=120):
        os.makedirs(logdir, exist_ok=True)
        self._file = open(os.path.join(logdir, "events.out.tfevents"), "wb")
        self._records = RecordWriter(self._file)
        self._queue = queue.Queue(max_queue_size)
        self._flush_secs = flush_secs
        self._next_flush_time = 0
        self._pending = False
        self._stop = object()
        self._thread = threading.Thread(target=self._run, name="event-writer", daemon=True)
        self._thread.start()
        self.add_event(b"brain.Event:2")
        self.flush()

    @property
    def worker(self):
        return self._thread

    def add_event(self, event):
        self._queue.put(event)

    def add_scalar(self, tag, value, step):
        self.add_event(encode_scalar(tag, value, step))

    def _run(self):
        while True:
            wait = self._next_flush_time - time.monotonic()
            data = None
            try:
                data = self._queue.get(True, wait) if wait > 0 else self._queue.get(False)
                if data is self._stop:
                    return
                self._records.write(data)
                self._pending = True
            except queue.Empty:
                pass
            finally:
                if data is not None:
                    self._queue.task_done()
            if time.monotonic() > self._next_flush_time:
                if self._pending:
                    self._records.flush()
                    self._pending = False
                self._next_flush_time = time.monotonic() + self._flush_secs

    def flush(self):
        self._queue.join()
        self._records.flush()

    def close(self):
        self._queue.put(self._stop)
        self._thread.join()
        self._records.close()


class BatchingEventFileWriter(TargetEventFileWriter):
    """A worker that keeps the records it has taken in a local list until it has
    four: where it waits, part of the writer's state is in its frame."""

    def _run(self):
        batch = []
        while True:
            data = self._queue.get()
            if data is self._stop:
                for record in batch:
                    self._records.write(record)
                return
            batch.append(data)
            if len(batch) == 4:
                for record in batch:
                    self._records.write(record)
                batch = []
            self._queue.task_done()

    def flush(self):
        self._records.flush()


WRITERS = {"subclass": EventFileWriter, "target": TargetEventFileWriter,
           "batching": BatchingEventFileWriter}
