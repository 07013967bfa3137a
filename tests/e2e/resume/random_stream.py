# The random module's stream (and a Random instance's) continue identically.
import random

random.seed(1234)
rng = random.Random(99)
out = []
for i in range(8):  # [loop]
    a = random.random()  # [oom]
    b = random.gauss(0, 1)
    c = rng.randint(0, 10**6)
    d = random.choice("abcdefgh")
    out.append((round(a, 9), round(b, 9), c, d))
    print(i, out[-1])
deck = list(range(10))
random.shuffle(deck)
print(deck, random.getrandbits(64), rng.random())
