# One 384 MiB anonymous mapping written at once in one C call (memset), outside any
# loop: the allocation check does not see mappings, and past a 512M cap (256 MiB)
# no safe point can take the tripwire's request, so the program goes on as under
# python.
import ctypes
import mmap

size = 384 << 20
data = mmap.mmap(-1, size)
ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(data)), 1, size)
print("allocated", data[size - 1] and size >> 20, "MiB")
