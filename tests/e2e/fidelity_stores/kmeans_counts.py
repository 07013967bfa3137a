# Mini-batch k-means written the usual way: per-centre counts and centres updated
# in place, a stats dict, an object's step counter, a history list and a log dict
# of the program's state, all changed inside the iteration before its end.
import numpy as np


class Tracker:
    def __init__(self):
        self.step = 0
        self.log = {}


def main():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((96, 2))
    centers = data[:4].copy()
    counts = [0, 0, 0, 0]
    stats = {"n": 0}
    history = []
    tracker = Tracker()
    for it in range(8):
        batch = data[it * 12:(it + 1) * 12]
        row = {}
        row["it"] = it                                    # a dict of this iteration's own
        for x in batch:
            j = int(np.argmin(((centers - x) ** 2).sum(1)))
            counts[j] += 1
            centers[j] += (x - centers[j]) / counts[j]
        stats["n"] += 1
        tracker.step += 1
        history.append(float(centers.sum()))
        tracker.log.update(last=history[-1])
        spread = float(np.abs(centers).sum())                   # the fake error's line
        tracker.log["spread"] = spread
        del row["it"]
        print(it, counts, stats, tracker.step, history[-1].hex(), spread.hex())
    print("centers", float(np.sum(centers)).hex())


main()
