# A training loop that logs as people log: a csv.DictWriter on a file held open
# across the loop (rows written under a threading.Lock shared with nothing), a
# threading.Event set at the end, and a SummaryWriter-like event log with its
# own flush thread (eventlog.py).
import csv
import os
import threading

import torch
from torch import nn

from common import digest
import eventlog


def train(steps=24):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 10), nn.Tanh(), nn.Dropout(0.1), nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xs, ys = torch.randn(6, 4, 5), torch.randn(6, 4, 1)
    lock, done = threading.Lock(), threading.Event()
    metrics = open("metrics.csv", "w", newline="")
    log = csv.DictWriter(metrics, fieldnames=["step", "loss"])
    log.writeheader()
    raw = csv.writer(metrics, delimiter=";", quoting=csv.QUOTE_NONNUMERIC)
    events = getattr(eventlog, os.environ.get("EVENT_LOG", "EventLog"))("events.tsv")
    for step in range(steps):
        x, y = xs[step % 6], ys[step % 6]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        with lock:
            log.writerow({"step": step, "loss": f"{loss.item():.6f}"})
        raw.writerow(["raw", step])
        events.add_scalar("loss", loss.item(), step)
    done.set()
    metrics.close()
    events.close()
    print("done", done.is_set(), lock.locked())
    return model


print("weights", digest(train().state_dict()))
