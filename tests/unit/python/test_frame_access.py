"""The native layer on each CPython version it is built for (src/native/frame_access_3XX.c
behind include/portal/frame_access.h), tested through _portal._frames and
_portal._toplevel directly: reading a live frame, the frame states, injecting a
created generator and a function's frame and running them from an offset chosen by
hand, the resume hook's chaining to another frame-evaluation function, the trace
pause, the bottom frame of _toplevel.run and the recursion accounting of Reenter.

Run on 3.11 by CTest (unit.python); on 3.13 inside a Debian 13 root with the build
of that interpreter, e.g.
    PYTHONPATH=build-313/lib/portal/python PORTAL_TEST_NATIVE_DIR=build-313/tests/native \\
        python3 -m pytest -q -p no:cacheprovider tests/unit/python/test_frame_access.py
"""
import dis
import importlib
import os
import pathlib
import sys
import types

import pytest

from _portal import _frames, _toplevel

EMPTY = object()  # the empty-slot marker the tests hand to _frames

# CPython's own PyFrameState values (Include/internal/pycore_frame.h of each version).
EXPECTED_STATES = {
    (3, 11): dict(FRAME_CREATED=-2, FRAME_SUSPENDED=-1, FRAME_SUSPENDED_YIELD_FROM=-1,
                  FRAME_EXECUTING=0, FRAME_COMPLETED=1, FRAME_CLEARED=4),
    (3, 12): dict(FRAME_CREATED=-2, FRAME_SUSPENDED=-1, FRAME_SUSPENDED_YIELD_FROM=-1,
                  FRAME_EXECUTING=0, FRAME_COMPLETED=1, FRAME_CLEARED=4),
    (3, 13): dict(FRAME_CREATED=-3, FRAME_SUSPENDED=-2, FRAME_SUSPENDED_YIELD_FROM=-1,
                  FRAME_EXECUTING=0, FRAME_COMPLETED=1, FRAME_CLEARED=4),
    (3, 14): dict(FRAME_CREATED=-3, FRAME_SUSPENDED=-2, FRAME_SUSPENDED_YIELD_FROM=-1,
                  FRAME_EXECUTING=0, FRAME_COMPLETED=1, FRAME_CLEARED=4),
}


@pytest.fixture(scope="module")
def probe():
    """The test-only frame-evaluation function (tests/unit/native/evalframe_probe.c)."""
    native = os.environ.get("PORTAL_TEST_NATIVE_DIR")
    if native is None:  # by hand from a build tree: <build>/lib/portal/python/_portal
        native = pathlib.Path(_frames.__file__).resolve().parents[4] / "tests" / "native"
    assert pathlib.Path(native).is_dir(), f"no {native}: build the tests (cmake --build)"
    sys.path.insert(0, str(native))
    try:
        module = importlib.import_module("evalframe_probe")
    finally:
        sys.path.remove(str(native))
    yield module
    if module.installed():
        module.remove()


@pytest.fixture(autouse=True)
def _no_hook_left():
    yield
    _frames.resume_cancel()
    assert not _frames.eval_hook_installed(), "a frame-evaluation function was left installed"


def slot_index(code, name):
    """The localsplus slot of a plain local (locals come first, in co_varnames order)."""
    return code.co_varnames.index(name)


def offset_of(code, opname, nth=0):
    found = [i.offset for i in dis.get_instructions(code) if i.opname == opname]
    return found[nth]


def first_offset_of_line(code, line):
    return min(offset for offset, lineno in dis.findlinestarts(code) if lineno == line)


# ---- the frame states --------------------------------------------------------------

def test_frame_states_are_this_versions_own():
    expected = EXPECTED_STATES.get(sys.version_info[:2])
    assert expected is not None, f"no expected frame states for {sys.version_info[:2]}: add them"
    assert {name: getattr(_frames, name) for name in expected} == expected
    assert _frames.FRAME_SUSPENDED_STATES == frozenset(
        {expected["FRAME_SUSPENDED"], expected["FRAME_SUSPENDED_YIELD_FROM"]})


def test_gen_info_states_through_a_generators_life():
    seen = {}

    def gen():
        seen["running"] = _frames.gen_info(g)[0]
        yield 1
        yield from inner()

    def inner():
        yield 2

    g = gen()
    assert _frames.gen_info(g)[0] == _frames.FRAME_CREATED
    assert next(g) == 1
    assert seen["running"] == _frames.FRAME_EXECUTING
    assert _frames.gen_info(g)[0] == _frames.FRAME_SUSPENDED
    assert next(g) == 2  # suspended inside the yield from
    assert _frames.gen_info(g)[0] in _frames.FRAME_SUSPENDED_STATES
    assert _frames.gen_info(g)[0] == _frames.FRAME_SUSPENDED_YIELD_FROM
    assert list(g) == []
    assert _frames.gen_info(g)[0] in (_frames.FRAME_COMPLETED, _frames.FRAME_CLEARED)


def test_gen_info_lasti_is_the_instruction_before_the_next():
    def gen(a):
        yield a
        yield a + 1

    g = gen(5)
    state, lasti, nlocalsplus, stacktop, function = _frames.gen_info(g)
    assert function is gen
    assert lasti == offset_of(gen.__code__, "RETURN_GENERATOR")
    assert nlocalsplus == gen.__code__.co_nlocals
    next(g)
    state, lasti, nlocalsplus, stacktop, function = _frames.gen_info(g)
    assert lasti == offset_of(gen.__code__, "YIELD_VALUE", 0)
    # the suspended frame's stack pointer is known; the yielded value is gone from it
    assert stacktop >= nlocalsplus
    assert _frames.gen_slots(g, 0, nlocalsplus, EMPTY) == [5]
    next(g)
    assert _frames.gen_info(g)[1] == offset_of(gen.__code__, "YIELD_VALUE", 1)


def test_gen_info_refuses_what_is_not_a_generator():
    with pytest.raises(TypeError, match="a generator is required"):
        _frames.gen_info([1, 2])


# ---- reading a live frame ----------------------------------------------------------

def test_a_live_callers_locals_cells_and_stack():
    seen = {}

    def callee():
        caller = sys._getframe(1)
        seen["caller"] = _frames.frame_info(caller)
        nlocalsplus, stacktop = seen["caller"][0], seen["caller"][1]
        seen["locals"] = _frames.frame_slots(caller, 0, nlocalsplus, EMPTY)
        seen["stack"] = _frames.frame_slots(caller, nlocalsplus, stacktop, EMPTY)
        seen["self"] = _frames.frame_info(sys._getframe())
        return 3

    def caller(a):
        b = "two"
        unset = None
        del unset
        kept = [a]
        t = (a, b, callee())  # a and b are on the value stack during the call
        return t, lambda: kept

    caller(1)
    nlocalsplus, stacktop, is_entry, function = seen["caller"]
    code = caller.__code__
    assert function is caller
    assert nlocalsplus == len(code.co_varnames) + len(code.co_cellvars) + len(code.co_freevars)
    assert seen["locals"][slot_index(code, "a")] == 1
    assert seen["locals"][slot_index(code, "b")] == "two"
    assert seen["locals"][slot_index(code, "unset")] is EMPTY
    # cells (of locals that are not arguments) follow the locals, free variables last
    cell = seen["locals"][len(code.co_varnames) + code.co_cellvars.index("kept")]
    assert isinstance(cell, types.CellType) and cell.cell_contents == [1]
    # callee() is an inlined Python call: the caller's stack pointer is saved, with
    # the tuple's first two items below the call
    assert stacktop == nlocalsplus + 2
    assert seen["stack"] == [1, "two"]
    assert seen["self"][2] is False  # callee was not entered from C


def test_a_frame_entered_from_c_is_an_entry_frame():
    seen = []

    def key(x):
        seen.append(_frames.frame_info(sys._getframe())[2])
        return x

    sorted([2, 1], key=key)  # key() is called by C code (list.sort)
    assert seen == [True, True]


def test_frame_slots_refuses_a_range_beyond_the_frame():
    frame = sys._getframe()
    code = frame.f_code
    with pytest.raises(ValueError, match="beyond the frame"):
        _frames.frame_slots(frame, 0, code.co_nlocals + code.co_stacksize + len(code.co_cellvars)
                            + len(code.co_freevars) + 1, EMPTY)


# ---- writing a generator -------------------------------------------------------------

def _pair(a, b):
    yield a
    yield b
    yield a + b


def test_inject_locals_into_a_created_generator():
    g = _pair(0, 0)
    lasti = _frames.gen_info(g)[1]
    _frames.gen_inject(g, [1, 2], [], lasti + 2, EMPTY, False)
    assert _frames.gen_info(g)[0] == _frames.FRAME_CREATED
    assert list(g) == [1, 2, 3]


def test_copy_a_suspended_generator_into_a_new_one():
    old = _pair(10, 20)
    assert next(old) == 10
    state, lasti, nlocalsplus, stacktop, _ = _frames.gen_info(old)
    assert state == _frames.FRAME_SUSPENDED
    locals_ = _frames.gen_slots(old, 0, nlocalsplus, EMPTY)
    stack = _frames.gen_slots(old, nlocalsplus, stacktop, EMPTY)
    new = _pair(0, 0)
    _frames.gen_inject(new, locals_, stack, lasti + 2, EMPTY, True)
    assert _frames.gen_info(new)[0] == _frames.FRAME_SUSPENDED
    assert new.send("ignored") == 20  # resumes after the first yield, as `old` would
    assert list(new) == [30]
    assert list(old) == [20, 30]


def test_resume_a_generator_at_an_offset_given_by_hand():
    # after the second yield: locals a=5, b=7; the next value is a + b
    code = _pair.__code__
    after_second_yield = offset_of(code, "YIELD_VALUE", 1) + 2
    g = _pair(0, 0)
    _frames.gen_inject(g, [5, 7], [], after_second_yield, EMPTY, True)
    assert g.send(None) == 12
    with pytest.raises(StopIteration):
        next(g)


def test_gen_inject_refuses_a_started_generator_and_a_bad_shape():
    g = _pair(1, 2)
    next(g)
    with pytest.raises(ValueError, match="already started"):
        _frames.gen_inject(g, [1, 2], [], 0, EMPTY, True)
    fresh = _pair(1, 2)
    with pytest.raises(ValueError, match="fast locals expected"):
        _frames.gen_inject(fresh, [1], [], 0, EMPTY, True)
    with pytest.raises(ValueError, match="bad resume offset"):
        _frames.gen_inject(fresh, [1, 2], [], 1, EMPTY, True)
    with pytest.raises(ValueError, match="does not fit"):
        _frames.gen_inject(fresh, [1, 2], [None] * (_pair.__code__.co_stacksize + 1), 0, EMPTY, True)
    assert list(fresh) == [1, 2, 3]  # refused injections leave it as it was


# ---- the resume hook ------------------------------------------------------------------

def _twice_plus_one(x):
    y = x * 2
    z = y + 1  # resumed here by hand: y comes from the injected locals
    return z


def _resume_line():
    return _twice_plus_one.__code__.co_firstlineno + 2


def _calls_twice_plus_one():
    return _helper() + _twice_plus_one(0)


def _helper():
    return 0


def _chain_for_twice_plus_one(y):
    code = _twice_plus_one.__code__
    locals_ = [EMPTY] * code.co_nlocals
    locals_[slot_index(code, "x")] = 0
    locals_[slot_index(code, "y")] = y
    return [(code, locals_, [], first_offset_of_line(code, _resume_line()))]


def test_resume_runs_a_function_frame_from_the_injected_offset():
    _frames.resume(_chain_for_twice_plus_one(100), EMPTY)
    assert _frames.resume_pending() == 1
    assert _frames.eval_hook_installed()
    assert _helper() == 0  # another frame first: left alone, the entry still pending
    assert _frames.resume_pending() == 1
    assert _twice_plus_one(0) == 101  # x = 0, but y = 100 injected
    assert _frames.resume_pending() == 0
    assert not _frames.eval_hook_installed()  # full speed again: no hook at all
    assert _twice_plus_one(0) == 1


def _make_adder():
    k = 10

    def adder(x):
        y = x + k  # resumed here: MAKE_CELL and COPY_FREE_VARS are behind
        return y, (lambda: y)()
    return adder


def test_resume_past_the_cell_set_up_takes_cells_as_given_and_free_variables_from_the_closure():
    adder = _make_adder()
    code = adder.__code__
    assert code.co_cellvars == ("y",) and code.co_freevars == ("k",)
    cell = types.CellType()  # y's cell, as the capture saves it (shared with closures)
    locals_ = [5, cell, "not k"]  # x, then the cell of y, then the free variable k
    line = code.co_firstlineno + 1
    _frames.resume([(code, locals_, [], first_offset_of_line(code, line))], EMPTY)
    assert adder(0) == (15, 15)  # x injected, k from the closure, y written into the cell
    assert cell.cell_contents == 15
    assert adder(1) == (11, 11)


def _numbers(n):
    i = 0
    while i < n:
        yield i
        i += 1  # the generator is resumed here


def _sum_numbers(n):
    total = 0
    for v in _numbers(n):  # the caller is resumed at this FOR_ITER
        total += v
    return total


def test_resume_a_caller_at_its_for_loop_and_the_generator_it_drives():
    caller, gen = _sum_numbers.__code__, _numbers.__code__
    caller_locals = [EMPTY] * caller.co_nlocals
    caller_locals[slot_index(caller, "n")] = 5
    caller_locals[slot_index(caller, "total")] = 100
    gen_locals = [EMPTY] * gen.co_nlocals
    gen_locals[slot_index(gen, "n")] = 5
    gen_locals[slot_index(gen, "i")] = 3
    chain = [
        # FOR_ITER with the generator on the stack: a fresh one, whose frame the hook
        # fills when FOR_ITER first resumes it (the None its first send pushed goes)
        (caller, caller_locals, [_numbers(0)], offset_of(caller, "FOR_ITER")),
        (gen, gen_locals, [], first_offset_of_line(gen, gen.co_firstlineno + 4)),
    ]
    _frames.resume(chain, EMPTY)
    assert _sum_numbers(0) == 104  # i = 3 -> 4 is yielded once more, added to 100
    assert _frames.resume_pending() == 0
    assert _sum_numbers(5) == 10


def test_resume_refuses_a_bad_entry_and_leaves_no_hook():
    with pytest.raises(TypeError, match="must be"):
        _frames.resume([(1, 2)], EMPTY)
    assert not _frames.eval_hook_installed()


def test_a_failed_injection_raises_in_the_caller_and_removes_the_hook():
    code = _twice_plus_one.__code__
    _frames.resume([(code, [EMPTY], [], 0)], EMPTY)  # too few locals
    with pytest.raises(ValueError, match="fast locals expected"):
        _twice_plus_one(0)
    assert not _frames.eval_hook_installed()
    assert _twice_plus_one(3) == 7


def test_the_hook_chains_to_the_function_in_place_and_puts_it_back(probe):
    probe.install()
    try:
        _chains_and_puts_back(probe)
    finally:
        _frames.resume_cancel()
        if probe.installed():
            probe.remove()


def _chains_and_puts_back(probe):
    probe.seen()
    _frames.resume(_chain_for_twice_plus_one(50), EMPTY)
    assert not probe.installed()  # Portal's is in place now...
    assert _calls_twice_plus_one() == 51
    # ...and passed the frames it did not fill to the probe, not the one it filled
    seen = probe.seen()
    assert "_calls_twice_plus_one" in seen and "_helper" in seen
    assert "_twice_plus_one" not in seen
    assert _frames.resume_pending() == 0
    assert probe.installed()  # put back when the chain was done
    assert _frames.eval_hook_installed()
    _helper()
    assert "_helper" in probe.seen()


def test_cancelling_the_resume_puts_back_the_function_in_place(probe):
    probe.install()
    try:
        _frames.resume(_chain_for_twice_plus_one(50), EMPTY)
        assert not probe.installed()
        _frames.resume_cancel()
        assert probe.installed()
        assert _twice_plus_one(1) == 3
    finally:
        _frames.resume_cancel()
        if probe.installed():
            probe.remove()


def _dynamo_run_as_is():
    """What a Dynamo callback returns to run a frame as it is and skip its code from
    then on: torch 2.6, None; later torch (2.14), a default ConvertFrameReturn (a
    None there is an AttributeError inside Dynamo's C frame evaluation)."""
    try:
        from torch._dynamo.types import ConvertFrameReturn
    except ImportError:
        return None
    return ConvertFrameReturn()


def test_the_hook_chains_to_torch_dynamo_and_puts_it_back():
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:
        pytest.skip("torch 2.x's Dynamo is not installed (Debian 12's torch 1.13 has none)")
    seen = []
    run_as_is = _dynamo_run_as_is()

    def callback(frame, *rest):  # Dynamo's callback: its "skip" runs the frame as it is
        seen.append(frame.f_code.co_name)
        return run_as_is

    previous = eval_frame.set_eval_frame(callback)
    try:
        _frames.resume(_chain_for_twice_plus_one(100), EMPTY)
        assert _calls_twice_plus_one() == 101
        assert "_calls_twice_plus_one" in seen and "_helper" in seen
        assert "_twice_plus_one" not in seen  # the frame Portal filled ran as injected
        assert _frames.resume_pending() == 0
        assert _frames.eval_hook_installed()  # Dynamo's, put back
        # Dynamo passes each code to its callback once (None marks it to skip): a
        # code it has not seen yet shows that its callback is in place again
        def not_seen_before():
            return 1
        not_seen_before()
        assert "not_seen_before" in seen
    finally:
        _frames.resume_cancel()
        eval_frame.set_eval_frame(previous)


# ---- Reenter and the recursion accounting -------------------------------------------------

def _depth_left(n=0):
    """How many more Python calls fit before RecursionError."""
    try:
        return _depth_left(n + 1)
    except RecursionError:
        return n


def test_reenter_calls_through_and_counts_no_extra_recursion_level():
    direct = _depth_left()
    through = _frames.Reenter(_depth_left, ())()
    assert through == direct
    reenter = _frames.Reenter(divmod, (7, 2))
    assert reenter() == (3, 1) and reenter.func is divmod and reenter.result is None
    marker = object()
    assert _frames.Reenter(divmod, (7, 2), None, marker)() is marker


# ---- _toplevel: the bottom frame and the trace pause -----------------------------------------

def test_run_makes_a_bottom_frame_with_the_whole_recursion_limit():
    seen = {}

    def program():
        seen["back"] = sys._getframe().f_back
        seen["depth_left"] = _depth_left()

    under_pytest = _depth_left()
    assert _toplevel.run(program, ()) is None
    assert seen["back"] is None  # no Portal (here: pytest) frames under the program
    limit = sys.getrecursionlimit()
    assert under_pytest < seen["depth_left"] <= limit
    assert seen["depth_left"] >= limit - 2  # program() and _depth_left's first call
    assert sys._getframe().f_back is not None  # the caller's link is back
    assert _depth_left() == under_pytest


def test_untraced_calls_are_seen_by_no_tracer_or_profiler():
    events = []

    def tracer(frame, event, arg):
        events.append(("trace", event, frame.f_code.co_name))
        return tracer

    def profiler(frame, event, arg):
        events.append(("profile", event, getattr(arg, "__name__", frame.f_code.co_name)))

    def hidden(x):
        return [x * 2 for _ in range(2)][0] + len("ab")

    untraced = _toplevel.Untraced(hidden)
    sys.settrace(tracer)
    try:
        assert untraced(3) == 8
    finally:
        sys.settrace(None)
    sys.setprofile(profiler)
    try:
        assert untraced(4) == 10
    finally:
        sys.setprofile(None)
    names = {name for _, _, name in events}
    assert "hidden" not in names and "<listcomp>" not in names and "len" not in names
    assert untraced.__wrapped__ is hidden
    # the same tracer does see the function when it is called plainly
    sys.settrace(tracer)
    try:
        hidden(1)
    finally:
        sys.settrace(None)
    assert ("trace", "call", "hidden") in events


def test_untraced_calls_run_with_recursion_levels_lent_at_the_limit():
    def needs_frames(n):
        return 0 if n == 0 else needs_frames(n - 1) + 1

    untraced = _toplevel.Untraced(needs_frames)
    deepest = [0]

    def at_the_limit(depth=0):
        deepest[0] = max(deepest[0], depth)
        try:
            return at_the_limit(depth + 1)
        except RecursionError:
            # the deepest frame handles it, where no Python call fits any more
            return depth, untraced(50)

    depth, value = at_the_limit()
    assert value == 50
    assert depth == deepest[0]  # not a frame nearer the bottom after a second RecursionError


# ---- the fake-OOM trigger ------------------------------------------------------------------

def test_fake_oom_raises_on_the_configured_hit():
    class Boom(Exception):
        pass

    counts = [0, 0]
    _frames.fake_oom_configure(counts, [2, 1], lambda i: Boom(i))
    try:
        assert _frames.fake_oom_tick(0) is None
        with pytest.raises(Boom) as raised:
            _frames.fake_oom_tick((0, 1))  # both specs count; the first target raises
        assert raised.value.args == (0,)
        assert counts == [2, 1]
    finally:
        _frames.fake_oom_configure([], [], None)
