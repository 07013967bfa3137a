"""stdout and stderr: whole lines, partial lines, flush=True and not, in an order
that shows how the two streams' buffering interleaves on one pipe."""
import sys

print("out 1")
print("err 1", file=sys.stderr)
print("out 2 (flushed)", flush=True)
sys.stderr.write("err partial ")
print("out partial", end="")
sys.stderr.write("err rest\n")
print(" out rest")
sys.stdout.write("no newline, flushed")
sys.stdout.flush()
print("err 2", file=sys.stderr, flush=True)
print()
print("out 3")
sys.stderr.write("err without newline at exit")
sys.stdout.write("out without newline at exit")
