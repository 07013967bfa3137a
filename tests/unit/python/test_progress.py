"""The progress line of long checkpoint writes and reads (python/_portal/checkpoint/progress.py):
redrawn in place on a terminal (a real pty here), one final line on a pipe, nothing
for small transfers."""
import os
import pty
import threading

import pytest

from _portal.checkpoint import progress
from _portal.checkpoint.progress import GIB, MIB, Progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def read_all(fd):
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:           # EIO: the other side is closed
            break
        if not data:
            break
        out += data
    return out


def test_on_a_terminal_one_line_redrawn_in_place_then_the_final_line():
    master, slave = pty.openpty()
    clock = Clock()
    with os.fdopen(slave, "w", closefd=True) as tty:
        assert tty.isatty()
        p = Progress("writing checkpoint", "checkpoint written", 5 * GIB, stream=tty,
                     clock=clock)
        for _ in range(4):                 # 1.25 GiB per second, a second apart
            clock.now += 1.0
            p.advance(5 * GIB // 4)
            p.advance(0)                   # at once again: not redrawn
        assert p.finish() == pytest.approx(4.0)
    text = read_all(master).decode()
    os.close(master)
    lines = text.split("\r")
    drawn = [line for line in lines if line.strip().startswith("portal: writing checkpoint")]
    assert [d.rstrip() for d in drawn] == [
        "portal: writing checkpoint: 1.2 GiB of 5.0 GiB, 1.2 GiB/s, 3 s left",
        "portal: writing checkpoint: 2.5 GiB of 5.0 GiB, 1.2 GiB/s, 2 s left",
        "portal: writing checkpoint: 3.8 GiB of 5.0 GiB, 1.2 GiB/s, 1 s left",
        "portal: writing checkpoint: 5.0 GiB of 5.0 GiB, 1.2 GiB/s, 0 s left"]
    assert "\n" not in "".join(lines[:-1])            # redrawn in place, never scrolled
    # cleared (spaces over the line, back to its start), then the final line
    assert text.endswith("\r" + " " * len(drawn[-1].rstrip()) + "\r"
                         "portal: checkpoint written: 5.0 GiB in 4.0 s (1.2 GiB/s)\r\n")


def test_on_a_pipe_only_the_final_line():
    r, w = os.pipe()
    clock = Clock()
    with os.fdopen(w, "w") as pipe:
        p = Progress("reading checkpoint", "checkpoint read", 2 * GIB + 512 * MIB, stream=pipe,
                     clock=clock)
        for _ in range(10):
            clock.now += 0.5
            p.advance(256 * MIB)
        p.finish()
    with os.fdopen(r) as f:
        assert f.read() == "portal: checkpoint read: 2.5 GiB in 5.0 s (512.0 MiB/s)\n"


def test_small_transfers_say_nothing():
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        p = Progress("writing checkpoint", "checkpoint written", progress.SHOW_BYTES,
                     stream=pipe)
        p.advance(progress.SHOW_BYTES)
        p.finish()
    with os.fdopen(r) as f:
        assert f.read() == ""


def test_a_failed_transfer_clears_its_line_and_says_no_more():
    master, slave = pty.openpty()
    clock = Clock()
    with os.fdopen(slave, "w") as tty:
        p = Progress("writing checkpoint", "checkpoint written", 2 * GIB, stream=tty,
                     clock=clock)
        clock.now += 1
        p.advance(GIB)
        p.abandon()
        p.finish()
    text = read_all(master).decode()
    os.close(master)
    assert text.startswith("\rportal: writing checkpoint: 1.0 GiB of 2.0 GiB")
    assert text.endswith("\r") and "written" not in text


def test_advance_from_many_threads_counts_every_byte():
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        p = Progress("reading checkpoint", "checkpoint read", 2 * GIB, stream=pipe)
        threads = [threading.Thread(target=lambda: [p.advance(MIB) for _ in range(256)])
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.moved == 2 * GIB
        p.finish()
    with os.fdopen(r) as f:
        assert f.read().startswith("portal: checkpoint read: 2.0 GiB in ")


def test_sizes_for_people():
    assert [progress.size_text(n) for n in (17, 12 * 1024, 850 * MIB, int(1.25 * GIB))] == \
        ["17 bytes", "12.0 KiB", "850.0 MiB", "1.2 GiB"]
