"""A while loop: skip cannot continue it (the statement is wrapped whole), so
oom.action=skip suspends there instead."""
total = 0
i = 0
while i < 6:
    total += i * i
    i += 1
print("total", total)
