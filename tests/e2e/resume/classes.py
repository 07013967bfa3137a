# Classes, instances and dataclasses of the script in the saved state.
import dataclasses
import random
from dataclasses import dataclass, field

random.seed(9)


@dataclass
class Point:
    x: float
    y: float

    def norm2(self):
        return self.x * self.x + self.y * self.y


@dataclass(frozen=True)
class Label:
    name: str
    rank: int = 0


@dataclass(order=True)
class Stats:
    count: int = 0
    points: list = field(default_factory=list)


class Registry:
    instances = 0

    def __init__(self):
        Registry.instances += 1
        self.by_label = {}

    def add(self, label, point):
        self.by_label.setdefault(label, []).append(point)

    def __repr__(self):
        return f"Registry({sorted((k.name, len(v)) for k, v in self.by_label.items())})"


class Special(Point):
    def norm2(self):
        return 2 * super().norm2()


reg = Registry()
stats = Stats()
labels = [Label("even"), Label("odd", 1)]
for i in range(7):  # [loop]
    x = round(random.uniform(-1, 1), 4)  # [oom]
    p = (Special if i % 3 == 0 else Point)(x, i)
    stats.count += 1
    stats.points.append(p)
    reg.add(labels[i % 2], p)
    print(i, p, round(p.norm2(), 4))
print(reg, stats.count)
print(type(stats.points[0]) is Special, isinstance(stats.points[1], Point),
      Label("odd", 1) in reg.by_label, labels[0] == Label("even"))
print(dataclasses.asdict(stats)["points"][:2], Stats() < stats, Registry.instances)
print(hash(Label("even")) == hash(labels[0]), dataclasses.fields(Label)[1].default)
try:
    labels[0].name = "changed"
except dataclasses.FrozenInstanceError as e:
    print("frozen", type(e).__name__)
