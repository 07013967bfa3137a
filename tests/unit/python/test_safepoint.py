"""safepoint.py: a request is taken at the next first instruction of a wrapped
loop body, in the program's own frames only, and nothing is traced before it."""
import builtins
import sys

import pytest

from _portal.rescue import safepoint
from _portal.run.instrument import compile_user_source

PROG = """
def work(n):
    s = 0
    for k in range(n):
        s += k
    return s

def train(log):
    for step in range(100):
        log.append(("start", step))
        log.append(("work", work(50)))
        if step == 3:
            request("preempted")
        log.append(("end", step))
"""


@pytest.fixture
def rescue_log():
    seen = []

    def rescue(line, span=None):
        exc = sys.exception()
        seen.append((line, type(exc).__name__, sys._getframe(1).f_lineno, sys.gettrace()))
        return None

    old = getattr(builtins, "__portal_rescue__", None)
    builtins.__portal_rescue__ = rescue
    safepoint._pending[0] = None
    try:
        yield seen
    finally:
        safepoint._pending[0] = None
        sys.settrace(None)
        if old is None:
            del builtins.__portal_rescue__
        else:
            builtins.__portal_rescue__ = old


def test_a_request_raises_preempted_at_the_next_iteration_start(rescue_log):
    g = {"request": safepoint.request}
    exec(compile_user_source(PROG, "/tmp/safepoint_prog.py"), g)
    log = []
    assert sys.gettrace() is None
    with pytest.raises(safepoint.Preempted) as raised:
        g["train"](log)
    # step 3 ran to its end; step 4 had not started when the safe point was taken
    assert log[-1] == ("end", 3) and ("start", 4) not in log
    # the rescue saw it in the handler of train()'s loop (line 9), with no tracing left on
    assert rescue_log == [(9, "Preempted", None, None)]
    assert str(raised.value) == "preempted" and safepoint.is_preempted(raised.value)
    assert sys.gettrace() is None


def test_no_request_no_tracing(rescue_log):
    g = {"request": lambda reason: None}
    exec(compile_user_source(PROG, "/tmp/safepoint_prog.py"), g)
    log = []
    g["train"](log)
    assert len(log) == 300 and rescue_log == [] and sys.gettrace() is None


class _Runtime:
    def __init__(self):
        from _portal.rescue import entry
        self.rescuer = entry.Rescuer(self)


def test_a_memory_request_during_a_rescue_is_not_made(rescue_log, monkeypatch):
    runtime = _Runtime()
    runtime.rescuer.rescuing = True
    monkeypatch.setattr(safepoint, "_runtime", [runtime])
    safepoint._on_memory(0, sys._getframe())
    assert safepoint.pending() is None and sys.gettrace() is None


def test_a_memory_request_that_cannot_be_armed_is_dropped(rescue_log, monkeypatch):
    def half_done_import(code):
        raise ImportError("cannot import name 'Dict' from partially initialized module 'typing'")

    monkeypatch.setattr(safepoint, "_runtime", [_Runtime()])
    monkeypatch.setattr(safepoint, "_body_starts", half_done_import)
    safepoint._on_memory(0, sys._getframe())        # no error out of the handler
    assert safepoint.pending() is None and sys.gettrace() is None
