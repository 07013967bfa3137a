# Each iteration's forward() builds larger activations (small tuples) than the
# last: under a memory cap they run out while they are built, at one small
# allocation among millions, and what was built stays in forward()'s frame: the
# memory is full.  Portal needs memory to rescue it before it can free any (its
# reserve, rescue.py); it then clears forward()'s frame, and saves what is left.
def forward(i):
    activations = []
    activations.extend((i, k) for k in range(i * 125_000))
    return len(activations) + activations[-1][1]


total = 0
for i in range(1, 6):
    total += forward(i)
    print("batch", i, total, flush=True)
print("total", total)
