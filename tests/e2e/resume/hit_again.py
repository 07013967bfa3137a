# The same line runs out of memory twice in the job's life.
def work(n):
    total = 0
    for i in range(n):  # [loop]
        sq = i * i  # [oom]
        total += sq
        print("i", i, "total", total)
    return total


print("result", work(10))
