"""A runaway recursion: python's RecursionError traceback, whose count of repeated
lines ("[Previous line repeated 996 more times]" with the default limit) shows how
deep the program could go.  Portal's own frames under the script must not count."""
import sys


def down(n):
    return down(n + 1)


def down_looping(n):
    for i in range(2):   # each level's loop handler sees the RecursionError
        down_looping(n + 1)


if len(sys.argv) > 1 and sys.argv[1] == "looping":
    down_looping(0)
if len(sys.argv) > 1 and sys.argv[1] == "in-loop":
    for attempt in range(3):   # a wrapped loop on the way: its handler declines
        down(0)
down(0)
