# The innermost loop cannot be re-entered (its function is called by map, C code):
# it declines and the loop further out resumes, re-running its whole iteration.
def inner(batch):
    acc = 0
    for x in batch:  # [inner]
        y = x * 2  # [oom]
        acc += y
    return acc


results = []
for epoch in range(3):  # [outer]
    sums = list(map(inner, [[1, 2], [3, 4], [5, 6]]))
    results.append(sums)
    print("epoch", epoch, sums)
print(results)
