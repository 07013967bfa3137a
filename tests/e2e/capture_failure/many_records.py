# Millions of small records, kept, and a 16 MiB scratch buffer after each batch:
# under a memory cap the buffer is what runs out (a batch keeps far less than 16
# MiB more, so the batch before it always fits), with the memory full of records.
# Saving the program then needs a pickler memo of 16 bytes and more per tuple
# (over 64 MiB for the millions kept), more than Portal can free: its checkpoint
# fails twice, and the job ends as under python with the same cap.
keys = list(range(50_000))
records = []
for i in keys[:1000]:
    for k in keys:
        records.append((i, k))
    scratch = bytes(16 << 20)
    del scratch
print("records", len(records))
