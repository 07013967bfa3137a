# One 3 GiB allocation, outside any loop: under a 2G cap python's MemoryError
# traceback, without the cap it succeeds.
data = bytes(3 << 30)
print("allocated", len(data) >> 20, "MiB")
