# A training loop that logs its loss to a TensorBoard-style event file every step
# (tbwriter.py; TB_WRITER picks the writer: subclass, target or batching), as
# scripts that use torch.utils.tensorboard's SummaryWriter do.  It prints whether
# the writer's worker thread is alive, and the event file's records at the end.
import hashlib
import os
import sys
import threading

import torch
from torch import nn

import tbwriter


def train(writer, steps=20):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xs, ys = torch.randn(5, 3, 4), torch.randn(5, 3, 1)
    for step in range(steps):
        x, y = xs[step % 5], ys[step % 5]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        writer.add_scalar("train/loss", loss.item(), step)
        if step % 7 == 6:
            writer.flush()
            print("step", step, "worker alive", writer.worker.is_alive(), flush=True)
    return model


# a first writer closed before training: the state holds its ended worker too
warmup = tbwriter.WRITERS[os.environ.get("TB_WRITER", "subclass")]("warmup")
warmup.add_scalar("warmup/lr", 0.05, 0)
warmup.close()
writer = tbwriter.WRITERS[os.environ.get("TB_WRITER", "subclass")]("runs")
model = train(writer)
writer.add_scalar("final/bias", float(model[2].bias.item()), 20)
writer.close()
print("worker alive after close", writer.worker.is_alive(), "threads", threading.active_count())
warmup.worker.join()
print("warm-up worker alive", warmup.worker.is_alive(), "records",
      len(tbwriter.read_records(os.path.join("warmup", "events.out.tfevents"))))
records = tbwriter.read_records(os.path.join("runs", "events.out.tfevents"))
print("records", len(records), hashlib.sha256(b"".join(records)).hexdigest())
for record in records[1:]:
    step, value = tbwriter.struct.unpack("<qd", record[:16])
    print(step, record[16:].decode(), repr(value))
sys.stdout.flush()
