# Training samples streamed from a csv file as people stream them: csv.reader over
# an open file, the header taken by next(), the rows iterated by the for loop (the
# file cannot tell its position then); a quoted note spans two lines in some rows,
# so the reader's line_num is not the row count.
import csv

import torch
from torch import nn

from common import digest

ROWS = 60


def write_samples(path):
    g = torch.Generator().manual_seed(3)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["a", "b", "c", "d", "y", "note"])
        for i in range(ROWS):
            x = torch.randn(4, generator=g)
            note = f"row {i}\nchecked" if i % 4 == 0 else f"row {i}"
            out.writerow([f"{v:.6f}" for v in x.tolist()] + [f"{float(x.sum()) * 0.5:.6f}", note])


def train(path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    samples = open(path, newline="")
    rows = csv.reader(samples)
    header = next(rows)
    for step, row in enumerate(rows):
        x = torch.tensor([[float(v) for v in row[:4]]])
        y = torch.tensor([[float(row[4])]])
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} line {rows.line_num} {row[5]!r} loss {float(loss).hex()}")
    samples.close()
    print("columns", header)
    return model


write_samples("samples.csv")
print("weights", digest(train("samples.csv").state_dict()))
