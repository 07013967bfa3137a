"""Training that logs scalars to an event file through a writer made as
TensorBoard's EventFileWriter is: records put on a queue, a daemon
threading.Thread subclass taking them off, writing and flushing every flush_secs,
stopped by a sentinel object put on the queue.  At the end the event file is
printed: every record once, in order."""
# corpus-names: writer, event, thread, opt
import queue
import threading
import time

import torch
from torch import nn

import corpus


class _AsyncWriterThread(threading.Thread):
    def __init__(self, q, record_file, flush_secs):
        threading.Thread.__init__(self)
        self.daemon = True
        self._queue = q
        self._record_file = record_file
        self._flush_secs = flush_secs
        self._next_flush_time = 0
        self._has_pending_data = False
        self._shutdown_signal = object()

    def stop(self):
        self._queue.put(self._shutdown_signal)
        self.join()

    def run(self):
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
                self._record_file.write(data)
                self._has_pending_data = True
            except queue.Empty:
                pass
            finally:
                if data:
                    self._queue.task_done()
            now = time.time()
            if now > self._next_flush_time:
                if self._has_pending_data:
                    self._record_file.flush()
                    self._has_pending_data = False
                self._next_flush_time = now + self._flush_secs


class SummaryWriter:
    def __init__(self, logdir, flush_secs=0.02):
        self._file = open(f"{logdir}/events.out.tfevents", "a")
        self._queue = queue.Queue(10)
        self._worker = _AsyncWriterThread(self._queue, self._file, flush_secs)
        self._worker.start()

    def add_scalar(self, tag, value, global_step):
        self._queue.put(f"{global_step}\t{tag}\t{float(value).hex()}\n")

    def close(self):
        self._worker.stop()
        self._file.flush()
        self._file.close()


def main():
    torch.manual_seed(0)
    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    writer = SummaryWriter(".")
    for step in range(16):
        x = torch.randn(8, 5)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()       # corpus: before@4=torch
        opt.zero_grad()
        loss.backward()                                                # corpus: inside@9=cpu
        corpus.grow()                                                  # corpus: real@6
        opt.step()
        writer.add_scalar("loss", loss.item(), step)
        writer.add_scalar("weight", model.weight.sum().item(), step)   # corpus: after@12=memory
        print(step, corpus.exact(loss))
    writer.close()
    with open("events.out.tfevents") as f:
        print(f.read(), end="")
    print("weights", corpus.digest(model.state_dict()))


if __name__ == "__main__":
    main()
