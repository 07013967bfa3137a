# A loop at module level: enumerate over a list, the random module's stream.
import random

random.seed(11)
results = []
total = 0.0
for step, word in enumerate(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]):  # [loop]
    noise = random.random()  # [oom]
    total += noise * len(word)
    results.append((step, word.upper(), round(noise, 6)))
    print("step", step, word, round(total, 6))
print("results", results)
print("total", round(total, 6), "next random", round(random.random(), 6))
