"""More than one buffer of stdout between lines of stderr: where the buffer
boundaries fall decides the interleaving on one pipe."""
import sys

for block in range(4):
    for i in range(700):
        print(f"out {block}:{i:04d} " + "x" * 10)
    print(f"err after block {block}", file=sys.stderr)
print("last line")
