# Three calls deep: a method with keyword arguments, a call with **options, a call
# with *batches and keywords; the innermost loop is inside an outer loop.
import random

random.seed(5)


class Trainer:
    def __init__(self, name):
        self.name = name
        self.history = []

    def fit(self, batches, *, lr=0.5, **options):
        return run_epochs(self, batches, lr, **options)


def run_epochs(trainer, batches, lr, epochs=1, verbose=False):
    losses = []
    for epoch in range(epochs):  # [epochs]
        losses.append(one_epoch(trainer, *batches, lr=lr, verbose=verbose))
        print("epoch", epoch, "done")
    return losses


def one_epoch(trainer, *batches, lr, verbose):
    loss = 0.0
    for b in batches:  # [loop]
        jitter = random.random()  # [oom]
        loss += b * lr + jitter
        trainer.history.append(round(loss, 6))
        if verbose:
            print(trainer.name, "batch", b, round(loss, 6))
    return round(loss, 6)


t = Trainer("t1")
out = t.fit([1, 2, 3, 4, 5], lr=0.25, epochs=3, verbose=True)
print("losses", out)
print("history", t.history)
