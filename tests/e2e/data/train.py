"""A small training script written the usual way: a shuffled DataLoader over a
map-style dataset read from an np.memmap, `for batch in tqdm(loader)`, logging to a
file, SGD with momentum.  Run by test_data_loading.py under python3 and under
portal-run (suspended by PORTAL_FAKE_OOM, then resumed).

    train.py WORKERS PERSISTENT RNG EPOCHS [DROPOUT]
      RNG: default (torch's default generator), loader (DataLoader(generator=)),
           sampler (RandomSampler(generator=))

stdout: every step's batch indices and loss, the weights' sha256, and what the
dataset's array is.  getitem.log: one line per __getitem__ call (workers too).
"""
import hashlib
import logging
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler
from tqdm import tqdm

WORKERS, PERSISTENT, RNG, EPOCHS = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], int(sys.argv[4])
DROPOUT = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
N, D = 256, 1024


def make_features(path):
    rows = np.random.RandomState(0).standard_normal((N, D)).astype(np.float32)
    rows.tofile(path)


class Features(Dataset):
    """Rows of a file mapped read-only; the target is the sum of the first 4 columns."""

    def __init__(self, path):
        self.x = np.memmap(path, dtype=np.float32, mode="r", shape=(N, D))

    def __len__(self):
        return N

    def __getitem__(self, i):
        with open("getitem.log", "a") as f:
            f.write(f"{i}\n")
        row = torch.from_numpy(np.array(self.x[i]))
        return i, row, row[:4].sum(0, keepdim=True)


def make_loader(ds):
    if RNG == "loader":
        return DataLoader(ds, batch_size=32, shuffle=True, num_workers=WORKERS,
                          persistent_workers=PERSISTENT, generator=torch.Generator().manual_seed(5))
    if RNG == "sampler":
        sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(6))
        return DataLoader(ds, batch_size=32, sampler=sampler, num_workers=WORKERS,
                          persistent_workers=PERSISTENT)
    return DataLoader(ds, batch_size=32, shuffle=True, num_workers=WORKERS,
                      persistent_workers=PERSISTENT)


def train(model, opt, loader, log):
    step = 0
    for epoch in range(EPOCHS):
        print(f"epoch {epoch}")
        for idx, x, y in tqdm(loader, desc=f"epoch {epoch}", mininterval=0, ascii=True):
            opt.zero_grad()  # [oom]
            step += 1
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            print(f"step {step} items {idx.tolist()} loss {loss.item():.8f}")
            log.info("epoch %d step %d loss %.8f", epoch, step, loss.item())


def main():
    make_features("features.bin")
    logging.basicConfig(filename="train.log", level=logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("train")
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(D, 16), torch.nn.ReLU(),
                                torch.nn.Dropout(DROPOUT), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ds = Features("features.bin")
    train(model, opt, make_loader(ds), log)
    weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    print("weights", hashlib.sha256(weights).hexdigest())
    print("features", type(ds.x).__name__, ds.x.mode, ds.x.filename == os.path.abspath("features.bin"))
    log.info("done")


# The usual idiom: CPython 3.14 starts DataLoader workers by forkserver (its new
# default on Linux), which imports this file again in each worker as __mp_main__.
if __name__ == "__main__":
    main()
