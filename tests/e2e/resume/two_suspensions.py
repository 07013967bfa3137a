# Two loops, two suspensions in one job.
def phase(name, n):
    acc = 0
    for i in range(n):  # [loop]
        step = i + 1  # [oom]
        acc += step
        print(name, i, acc)
    return acc


first = phase("one", 5)
second = 0
k = 0
while k < 4:  # [loop2]
    inc = first + k  # [oom2]
    second += inc
    k += 1
    print("two", k, second)
print(first, second)
