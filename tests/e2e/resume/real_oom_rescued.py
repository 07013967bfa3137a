# A real allocation failure in a loop (no fixture): while the file `small_machine`
# exists the third item needs more memory than any machine has.
import os


def allocate(n):
    big = n == 3 and os.path.exists("small_machine")
    return bytearray((1 << 62) if big else 1000 + n)  # [oom]


sizes = []
for n in range(1, 6):  # [loop]
    block = allocate(n)
    sizes.append(len(block))
    print("allocated", n, len(block))
print("sizes", sizes)
