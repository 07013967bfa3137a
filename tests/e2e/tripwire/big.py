# One 3 GiB allocation, outside any loop: under a 2G cap python's MemoryError
# traceback, without the cap it succeeds, and under the resident cap too (its zero
# pages are never touched).
data = bytes(3 << 30)
print("allocated", len(data) >> 20, "MiB")
