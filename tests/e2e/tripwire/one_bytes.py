# Round 2 asks for one 384 MiB bytes object written at once (b"\x01" * n, from
# malloc): under a 512M cap (256 MiB) the allocation check refuses it before a
# page is written; python is given it.
total = 0
for i in range(1, 4):
    block = b"\x01" * ((384 if i == 2 else 16) << 20)
    total += block.count(1) + i
    print(f"round {i}: {len(block) >> 20} MiB, total {total}", flush=True)
    del block
print("done", total)
