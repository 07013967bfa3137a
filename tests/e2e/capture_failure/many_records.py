# Millions of small records, kept, and a 64 MiB scratch buffer after each batch:
# under a memory cap the buffer is what runs out (a batch keeps far less than 64
# MiB more, so the batch before it always fits), with the memory full of records.
# 64 MiB is above glibc's largest mmap threshold (32 MiB), so the buffer is always
# a mapping of its own, which the tripwire's address-space bound refuses near the
# cap; a buffer glibc takes from its brk heap is checked by the kernel against the
# heap's size only (docs/architecture.md "The memory tripwire").
# Saving the program then needs a pickler memo of 16 bytes and more per tuple
# (over 64 MiB for the millions kept), more than Portal can free: its checkpoint
# fails twice, and the job ends as under python with the same cap.
keys = list(range(50_000))
records = []
for i in keys[:1000]:
    for k in keys:
        records.append((i, k))
    scratch = bytes(64 << 20)
    del scratch
print("records", len(records))
