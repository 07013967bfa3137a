# `with open(...)` around the loop, writing a file; `with` blocks inside the body
# (a class of the script, another file appended to).  argv[1]: module | function.
import os
import sys


class Tag:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, *exc):
        self.log.append(f"exit {self.name}")
        return False


def write_all(path, n, events):
    with open(path, "w", encoding="utf-8") as out:
        out.write("header\n")
        for i in range(n):  # [f_loop]
            line = f"line {i} {i * i}\n"  # [f_oom]
            with Tag(events, f"t{i}"):
                out.write(line)
            with open("side.txt", "a") as side:
                side.write(f"side {i}\n")
            print("wrote", i)
        out.write("footer\n")
    return out


events = []
if sys.argv[1] == "module":
    with open("out.txt", "w") as out:
        out.write("header\n")
        for i in range(8):  # [loop]
            line = f"line {i} {i * i}\n"  # [oom]
            with Tag(events, f"t{i}"):
                out.write(line)
            with open("side.txt", "a") as side:
                side.write(f"side {i}\n")
            print("wrote", i)
        out.write("footer\n")
else:
    out = write_all("out.txt", 8, events)
print("closed", out.closed, out.name, os.path.getsize("out.txt"))
print("events", events)
