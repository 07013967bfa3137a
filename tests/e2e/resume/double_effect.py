# What the failed iteration did before the error happens again when it re-runs;
# nothing of the iterations before it does.
for i in range(6):  # [loop]
    with open("journal.txt", "a") as j:
        j.write(f"begin {i}\n")
    print("begin", i)
    value = i * 10  # [oom]
    with open("journal.txt", "a") as j:
        j.write(f"end {i} {value}\n")
    print("end", i, value)
print("finished")
