import sys

parts = []
for i in range(3):
    parts.append(bytearray(8))


def grow(n):
    return bytearray(n)


print(len(parts))
grow(16)
print("done")
