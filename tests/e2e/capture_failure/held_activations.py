# forward() holds larger activations each iteration (4 MiB buffers, untouched
# zero pages) until, under a memory cap, one more does not fit: the memory is full
# and forward()'s frame holds nearly all of it.  Saving `kept` takes a UTF-8 copy
# of it, 48 MiB, more than Portal's reserve: the checkpoint can be written only
# because the rescue clears the frames inside the loop (forward()'s) first.
kept = "\u00e9" * (24 << 20)


def forward(i):
    activations = []
    activations.extend(bytes(4 << 20) for _ in range(i * 8))
    return len(activations)


total = 0
for i in range(1, 10):
    total += forward(i)
    print("step", i, total, flush=True)
print("total", total, len(kept))
