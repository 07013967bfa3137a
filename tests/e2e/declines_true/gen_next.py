def batches():
    for i in range(10):
        value = i * i
        yield value


it = batches()
total = 0
for _ in range(2):
    total += next(it)
total += next(it)
total += next(it)
print(total)
