# A while loop at module level, with continue.
import random

random.seed(3)
n = 0
acc = []
while n < 8:  # [loop]
    value = random.randint(0, 100)  # [oom]
    acc.append(value)
    n += 1
    if value % 7 == 0:
        continue
    print("n", n, "value", value)
print("acc", acc, sum(acc))
