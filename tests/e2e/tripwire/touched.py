# One 384 MiB allocation written at once, outside any loop: past a 512M cap (256
# MiB) no safe point can take the tripwire's request, so the program goes on as
# under python.
data = b"\x01" * (384 << 20)
print("allocated", len(data) >> 20, "MiB")
