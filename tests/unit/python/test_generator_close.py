"""_portal.run.generator_close: a generator's close() behaves as python's where only the
instrumenter's loop handlers enclose the yield (3.13 ends it without running the
frame; a try block of the user's own still has GeneratorExit thrown in), and
the instrumented code marks its yields exactly as python's compiler does."""
import dis
import sys
import textwrap

import pytest

from _portal.run.instrument import compile_user_source

SOURCE = textwrap.dedent('''
    def loop(n):
        for i in range(n):
            yield i

    def nested(n):
        for i in range(n):
            for j in range(2):
                sent = yield (i, j)
        while n:
            n -= 1
            yield n

    def in_else(n):
        for i in range(n):
            pass
        else:
            yield "else"

    def user_finally(n):
        for i in range(n):
            try:
                yield i
            finally:
                print("finally", i)

    def user_try_around(n):
        try:
            for i in range(n):
                yield i
        except ValueError:
            pass

    def with_block(n):
        import contextlib
        with contextlib.nullcontext():
            for i in range(n):
                yield i

    def delegating(n):
        for i in range(n):
            yield from loop(2)

    async def agen(n):
        for i in range(n):
            yield i
''')
GENERATORS = ["loop", "nested", "in_else", "user_finally", "user_try_around", "with_block",
              "delegating"]


def resume_args(code):
    """{qualname: [RESUME arguments]} of every code object in `code`'s constants tree."""
    out, stack = {}, [code]
    while stack:
        c = stack.pop()
        out[c.co_qualname] = [i.arg for i in dis.get_instructions(c) if i.opname == "RESUME"]
        stack.extend(k for k in c.co_consts if isinstance(k, type(c)))
    return out


def run(code, name, advance=1):
    """The trace events and output of close() on generator `name` suspended after
    `advance` values."""
    printed = []
    ns = {"__portal_rescue__": lambda *a: False, "print": lambda *a: printed.append(a)}
    exec(code, ns)
    gen = ns[name](3)
    for _ in range(advance):
        next(gen)
    events = []

    def tracer(frame, event, arg):
        events.append((event, frame.f_code.co_name, frame.f_lineno,
                       arg[0].__name__ if event == "exception" else None))
        return tracer
    sys.settrace(tracer)
    try:
        gen.close()
    finally:
        sys.settrace(None)
    return events, printed, gen.gi_frame


@pytest.fixture(scope="module")
def codes():
    return compile(SOURCE, "gens.py", "exec"), compile_user_source(SOURCE, "gens.py")


def test_yields_are_marked_as_the_compiler_marks_them(codes):
    plain, instrumented = codes
    assert resume_args(instrumented) == resume_args(plain)


def test_instrumented_generators_are_wrapped(codes):
    """The case the module is for: the yields are inside the instrumenter's handlers."""
    _, instrumented = codes
    loop = next(c for c in instrumented.co_consts if getattr(c, "co_name", "") == "loop")
    assert "__portal_rescue__" in loop.co_names
    assert loop.co_exceptiontable


@pytest.mark.parametrize("name", GENERATORS)
def test_close_events_and_output_are_python_s(codes, name):
    plain, instrumented = codes
    assert run(instrumented, name) == run(plain, name)


def test_a_user_finally_still_runs_on_close(codes):
    _, instrumented = codes
    events, printed, _ = run(instrumented, "user_finally")
    assert printed == [("finally", 0)]
    assert [e for e in events if e[0] == "exception"] == [
        ("exception", "user_finally", e[2], "GeneratorExit") for e in events if e[0] == "exception"]
    assert any(e[0] == "exception" for e in events)
