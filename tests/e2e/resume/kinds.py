# A plain loop in a function, for each kind of fake error.
def work(items):
    out = []
    for it in items:  # [loop]
        doubled = it * 2  # [oom]
        out.append(doubled)
        print("it", it, doubled)
    return out


print(work([5, 6, 7, 8, 9]))  # [last_call]
print("done")
