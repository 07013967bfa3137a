total = 0
for i in range(6):
    total += i  # [oom]
    print("i", i, total)
print("total", total)
