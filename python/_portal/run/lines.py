"""Portal's report starts on a line of its own.

A program's last output may be an unfinished line: a tqdm bar redraws itself
with `\\r...` and no newline, and `portal: suspended: ...` written after it would
be glued to the bar.  Only the supervisor knows the last byte the program's
stderr passed on (it passes the program's output through, output_tee.hpp), so
before the first line of a report Portal writes the supervisor's mark (kLineMark)
to fd 2: the supervisor takes it out and writes a newline in its place when that
last byte was not one.  The supervisor says it takes the mark (PORTAL_LINE_MARK,
taken out of the environment at start-up by boot.py); otherwise nothing is
written, and the report is as it was.
"""
import os
import sys

from _portal import job_contract  # the environment variables' names (contract/job_record.json)

VARIABLE = job_contract.ENV_LINE_MARK
MARK = b"\x1bPportal;line\x1b\\"   # include/portal/output_tee.hpp: kLineMark

_TAKEN = [False]


def take(value):
    """At start-up: the supervisor's PORTAL_LINE_MARK (None when unset)."""
    _TAKEN[0] = value == "1"


def start():
    """Before a report's first line: the program's output so far is flushed, and
    the next byte on stderr starts a line."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:   # noqa: BLE001 - a closed or broken stream: nothing to flush
            pass
    if not _TAKEN[0]:
        return
    try:
        os.write(2, MARK)
    except OSError:
        pass
