# One untouched 3 GiB allocation (bytes(n): calloc's zero pages), outside any loop:
# beyond a 2G cap, but never used, so python and the tripwire both give it.
data = bytes(3 << 30)
print("allocated", len(data) >> 20, "MiB")
