"""The progress of a long checkpoint write or read, in `portal:` style on stderr.

A transfer of more than SHOW_BYTES shows, on a terminal, one line redrawn in
place (carriage return, at most every REDRAW_SECONDS, cleared at the end)::

    portal: writing checkpoint: 1.2 GiB of 5.0 GiB, 850 MiB/s, 4 s left

and, at the end, on a terminal as on a pipe or file, a single line::

    portal: checkpoint written: 5.0 GiB in 6.1 s (840 MiB/s)

Smaller transfers print nothing.  ``advance`` may be called from any thread (the
writer's and reader's worker threads); the figures are also returned by
``finish`` for the job's record.  Used by checkpoint/write.py and read.py.
"""
import sys
import threading
import time

__all__ = ["Progress", "SHOW_BYTES", "size_text", "rate_text"]

SHOW_BYTES = 1 << 30          # a transfer over 1 GiB shows its progress
REDRAW_SECONDS = 0.25         # a terminal's line is redrawn at most this often
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def size_text(n):
    """``n`` bytes for people, as every message of Portal's Python side writes a size
    (and the C++ side's, format_size in src/launcher/size.cpp): 17 bytes, 12.0 KiB, 850.0 MiB, 1.2 GiB."""
    if n < KIB:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= KIB
        if n < KIB or unit == "TiB":
            return f"{n:.1f} {unit}"


def rate_text(nbytes, seconds):
    """A rate for people: 850.0 MiB/s, 1.6 GiB/s."""
    if seconds <= 0:
        return "-"
    return size_text(int(nbytes / seconds)) + "/s"


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """One transfer of ``total`` bytes: ``verb`` ("writing checkpoint") while it
    runs, ``done`` ("checkpoint written") in the final line."""

    def __init__(self, verb, done, total, *, stream=None, clock=time.monotonic):
        self.verb, self.done, self.total = verb, done, total
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.start = clock()
        self.moved = 0
        self.shown = total > SHOW_BYTES
        self.live = self.shown and _is_terminal(self.stream)
        self.drawn = 0                # characters of the line now on the terminal
        self.last_draw = None
        self.lock = threading.Lock()
        if self.shown and self.stream is sys.stderr:
            from _portal.run import lines
            lines.start()   # below a progress bar of the program's that left its line unfinished

    def advance(self, nbytes):
        """``nbytes`` more were moved (any thread)."""
        with self.lock:
            self.moved += nbytes
            if not self.live:
                return
            now = self.clock()
            if self.last_draw is None or now - self.last_draw >= REDRAW_SECONDS:
                self.last_draw = now
                self._draw(now - self.start)

    def _draw(self, elapsed):
        text = f"portal: {self.verb}: {size_text(self.moved)} of {size_text(self.total)}"
        if elapsed > 0 and self.moved > 0:
            rate = self.moved / elapsed
            left = max(self.total - self.moved, 0) / rate
            text += f", {rate_text(self.moved, elapsed)}, {left:.0f} s left"
        pad = max(self.drawn - len(text), 0)
        self._write("\r" + text + " " * pad)
        self.drawn = len(text)

    def _clear(self):
        if self.drawn:
            self._write("\r" + " " * self.drawn + "\r")
            self.drawn = 0

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.live = self.shown = False      # stderr went away: say nothing more

    def finish(self):
        """The end: the line cleared, the final line printed (when shown);
        returns the seconds it took."""
        with self.lock:
            seconds = self.clock() - self.start
            self._clear()
            if self.shown:
                self._write(f"portal: {self.done}: {size_text(self.total)} in {seconds:.1f} s "
                            f"({rate_text(self.total, seconds)})\n")
            self.live = self.shown = False
            return seconds

    def abandon(self):
        """It failed: the line cleared, nothing more said (the error says why)."""
        with self.lock:
            self._clear()
            self.live = self.shown = False
