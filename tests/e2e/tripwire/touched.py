# One 3 GiB allocation written at once, outside any loop: past a 2G cap no safe
# point can take the tripwire's request, so the program goes on as under python.
data = b"\x01" * (3 << 30)
print("allocated", len(data) >> 20, "MiB")
