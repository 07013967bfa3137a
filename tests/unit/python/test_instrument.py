"""The loop wrap of _portal.run.instrument: same behaviour as plain compile() (output,
exceptions, tracebacks, settrace events), rescue calls innermost first, the nesting
budget, fake-OOM calls, identical errors."""
import ast
import asyncio  # noqa: F401  (imported before tracing starts)
import builtins
import contextlib
import collections
import dis
import io
import marshal
import random
import sys
import textwrap
import traceback
import warnings

import pytest

from _portal.run import instrument, reraise
from _portal.run.instrument import compile_user_source
from _portal.bytecode.tables import T as BYTECODE

# --- harness ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def rescue_log():
    """__portal_rescue__ stand-in: a C callable (dict.setdefault: it takes the loop
    line, and a while loop's body span as a second argument), so that calling it adds
    no call/line events to a traced run.  The keys are the loop lines."""
    log = {}
    old = getattr(builtins, "__portal_rescue__", None)
    builtins.__portal_rescue__ = log.setdefault
    yield log
    if old is None:
        del builtins.__portal_rescue__
    else:
        builtins.__portal_rescue__ = old


def _summary(event, arg):
    if event == "exception":
        return arg[0].__name__
    if event == "return":
        return type(arg).__name__
    return None


class Run:
    """Result of running a program: its output, exception, traceback text, events."""

    def __init__(self, path, code, trace):
        self.events = []
        self.exc = None
        out = io.StringIO()
        fname = str(path)

        def tracer(frame, event, arg):
            if frame.f_code.co_filename != fname:
                return None
            self.events.append((event, frame.f_code.co_name, frame.f_lineno,
                                _summary(event, arg)))
            return tracer

        glb = {"__name__": "prog", "__file__": fname}
        with contextlib.redirect_stdout(out):
            if trace:
                sys.settrace(tracer)
            try:
                exec(code, glb)
            except BaseException as exc:   # noqa: B902 - the program's own
                self.exc = exc
            finally:
                sys.settrace(None)
        self.output = out.getvalue()
        if self.exc is not None:
            self.exc_text = "".join(traceback.format_exception(self.exc))
            self.tb = [(f.filename, f.lineno, f.name, f.line, f.colno, f.end_colno)
                       for f in traceback.extract_tb(self.exc.__traceback__)]
        else:
            self.exc_text = self.tb = None
        # tracebacks stored on the exception object keep frames alive: drop them
        self.exc = None if self.exc is None else (type(self.exc), str(self.exc))


def write(tmp_path, src, name="prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(src))
    return path


def plain_code(path):
    return compile(path.read_bytes(), str(path), "exec", dont_inherit=True)


def inst_code(path, **kw):
    return compile_user_source(path.read_bytes(), str(path), **kw)


def same_events(plain, inst):
    """The trace events of the instrumented run are the plain run's, each event's
    frame line included (reraise.py keeps it in 'return' events)."""
    assert plain == inst


# --- a corpus of tricky programs --------------------------------------------------------------

CORPUS = {
    "break_continue_else": """
        def f(n):
            out = []
            for i in range(n):
                if i == 1:
                    continue
                if i == 5:
                    break
                out.append(i)
            else:
                out.append("else")
            j = 0
            while j < n:
                j += 1
                if j % 2:
                    continue
                out.append(j)
            else:
                out.append("while-else")
            while True:
                j -= 1
                if j < 2: break
            return out, j
        print(f(3)); print(f(8))
        for i in range(3): pass
        else: print("module else", i)
    """,
    "return_in_try_finally": """
        def f(xs):
            try:
                for x in xs:
                    try:
                        if x == 3:
                            return x * 10
                    finally:
                        print("inner finally", x)
                        if x == 2:
                            continue
            finally:
                print("outer finally")
            return None
        print(f([1, 2, 3, 4]))
        def g():
            for i in range(5):
                try:
                    return i
                finally:
                    if i < 3:
                        continue
        print(g())
        def h():
            while True:
                try:
                    break
                finally:
                    print("h finally")
            return "h"
        print(h())
    """,
    "generators": """
        def gen(n):
            total = 0
            for i in range(n):
                try:
                    got = yield i
                except KeyError as e:
                    print("gen caught", e)
                    got = -1
                total += got or 0
            return total
        g = gen(5)
        print(next(g), g.send(10), g.throw(KeyError("k")), g.send(3))
        try:
            while True:
                next(g)
        except StopIteration as e:
            print("stop", e.value)
        g = gen(5)
        next(g)
        g.close()
        print("closed", g.gi_frame)
        g = gen(5)
        next(g)
        try:
            g.throw(ValueError("thrown"))
        except ValueError as e:
            print("escaped", e)
        def delegate():
            for k in range(2):
                r = yield from gen(2)
                print("delegate got", r)
        print(list(delegate()))
        def cleanup():
            try:
                for i in range(10):
                    yield i
            finally:
                print("cleanup ran")
        c = cleanup(); next(c); next(c); del c
        def pep479():
            for i in range(3):
                yield i
                raise StopIteration("inner")
        print(list(pep479()))
    """,
    "nested_user_handlers": """
        def f(rows):
            res = []
            for row in rows:
                try:
                    for v in row:
                        try:
                            res.append(10 // v)
                        except ZeroDivisionError:
                            res.append("zero")
                            continue
                        if v < 0:
                            raise KeyError(v)
                except KeyError as e:
                    res.append(("key", e.args))
            return res
        print(f([[1, 0, 2], [3, -1, 4], [5]]))
        def g():
            for i in range(3):
                try:
                    for j in range(3):
                        if j == i:
                            raise ValueError(i, j)
                except ValueError as e:
                    print("caught", e, sys.exc_info()[0].__name__)
                print("after", sys.exc_info())
        import sys
        g()
    """,
    "with_blocks": """
        class CM:
            def __init__(self, name, swallow=False):
                self.name, self.swallow = name, swallow
            def __enter__(self):
                print("enter", self.name)
                return self
            def __exit__(self, t, v, tb):
                print("exit", self.name, t and t.__name__)
                return self.swallow
        def f():
            with CM("outer"):
                for i in range(3):
                    with CM(i, swallow=True):
                        if i == 1:
                            raise ValueError(i)
                        if i == 2:
                            break
                    print("loop", i)
            with CM("ret"):
                for i in range(3):
                    with CM("r", swallow=True):
                        return i
        print(f())
        def g():
            with CM("g"):
                for i in range(3):
                    with CM("gi"):
                        if i == 2:
                            raise KeyError(i)
        g()
    """,
    "class_bodies_and_module": """
        class A:
            items = []
            for i in range(3):
                items.append(i * i)
            while items and items[-1] > 3:
                items.pop()
            class B:
                for j in "ab":
                    x = j
        print(A.items, A.B.x, A.i)
        total = 0
        for k in range(4):
            for m in range(k):
                total += m
        print(total, k, m)
        f = lambda xs: [x for x in xs for _ in range(2)]
        print(f([1, 2]), [y for y in range(3) if y], {z: z for z in "ab"})
    """,
    "async_for": """
        import asyncio
        class Agen:
            def __init__(self, n): self.i, self.n = 0, n
            def __aiter__(self): return self
            async def __anext__(self):
                await asyncio.sleep(0)
                if self.i >= self.n:
                    raise StopAsyncIteration
                self.i += 1
                return self.i
        async def agen(n):
            for i in range(n):
                yield i
                await asyncio.sleep(0)
        async def main():
            out = []
            async for v in Agen(4):
                if v == 2:
                    continue
                out.append(v)
            else:
                out.append("else")
            async for v in agen(3):
                out.append(v)
                if v == 1:
                    break
            try:
                async for v in Agen(3):
                    if v == 2:
                        raise KeyError(v)
            except KeyError as e:
                out.append(("caught", e.args))
            return out
        print(asyncio.run(main()))
    """,
    "caught_inside_body": """
        def f(xs):
            out = []
            for x in xs:
                try:
                    out.append(1 / x)
                except ZeroDivisionError as e:
                    out.append(str(e))
            return out
        print(f([1, 0, 2]))
        def g(n):
            i = 0
            while i < n:
                i += 1
                try:
                    raise KeyError(i)
                except KeyError:
                    pass
                else:
                    print("never")
                finally:
                    print("finally", i)
        g(2)
    """,
    "uncaught_from_nested_call": """
        def leaf(x):
            return {1: "a"}[x]
        def mid(xs):
            for x in xs:
                print(leaf(x))
        def top():
            n = 0
            while n < 2:
                n += 1
                mid([1, 2])
        top()
    """,
    "exception_chaining": """
        def f():
            for i in range(2):
                try:
                    1 / 0
                except ZeroDivisionError:
                    for j in range(2):
                        if j == 1:
                            raise ValueError("in handler")
        try:
            f()
        except ValueError as e:
            print(repr(e.__context__), e.__suppress_context__)
        def g():
            for i in range(2):
                try:
                    {}[i]
                except KeyError as e:
                    raise RuntimeError("from") from e
        g()
    """,
    "loop_in_except_block": """
        import sys
        def f():
            try:
                raise KeyError("outer")
            except KeyError:
                for i in range(2):
                    print(i, sys.exc_info()[1])
                    try:
                        raise ValueError(i)
                    except ValueError:
                        print("inner", sys.exc_info()[1])
                    print("restored", sys.exc_info()[1])
            print("after", sys.exc_info())
        f()
    """,
    "locals_and_names": """
        def f():
            for i in range(2):
                x = i
            return sorted(locals()), f.__code__.co_varnames
        print(f())
        def g():
            acc = 0
            def inner():
                nonlocal acc
                for i in range(3):
                    acc += i
            inner()
            return acc
        print(g())
        counter = 0
        def h():
            global counter
            while counter < 3:
                counter += 1
        h(); print(counter)
    """,
    "match_and_exception_groups": """
        def f(cmds):
            out = []
            for c in cmds:
                match c:
                    case ("go", n):
                        for _ in range(n):
                            out.append("step")
                    case "stop":
                        break
                    case _:
                        continue
            return out
        print(f([("go", 2), "x", "stop", ("go", 1)]))
        def g():
            for i in range(2):
                try:
                    raise ExceptionGroup("eg", [ValueError(i), KeyError(i)])
                except* ValueError as e:
                    print("v", e.exceptions)
                except* KeyError as e:
                    print("k", e.exceptions)
        g()
    """,
    "base_exceptions_pass": """
        def f():
            for i in range(3):
                if i == 1:
                    raise SystemExit(3)
        try:
            f()
        except SystemExit as e:
            print("exit", e.code)
        def g():
            while True:
                raise KeyboardInterrupt
        try:
            g()
        except KeyboardInterrupt:
            print("kbi")
    """,
    "recursion": """
        def walk(tree, depth=0):
            total = 0
            for child in tree:
                if isinstance(child, list):
                    total += walk(child, depth + 1)
                else:
                    total += child
            if depth == 2 and total > 5:
                raise OverflowError(total)
            return total
        print(walk([1, [2, [3]], 4]))
        walk([1, [2, [3, [4]]]])
    """,
    "uncaught_module_level": """
        data = [1, 2, 0]
        for d in data:
            while True:
                print(6 // d)
                break
    """,
}


def _deep_corpus_program():
    """12 nested loops (some unwrapped: past the budget), a user try around the
    middle ones, an exception from the innermost, handled then one escaping."""
    lines = ["def f(limit):", "    hits = []"]
    ind = "    "
    for i in range(12):
        if i == 5:
            lines.append(ind + "try:")
            try_ind = ind
            ind += "    "
        lines.append(ind + (f"for i{i} in range(2 if {i} < 3 else 1):" if i % 3 else
                            f"for i{i} in [0, 1][:1 + ({i} == 0)]:"))
        ind += "    "
    lines += [ind + "hits.append(i0 + i1 + i2)",
              ind + "if limit == 0 and len(hits) == 4:",
              ind + "    raise KeyError('escapes')",
              ind + "if len(hits) == limit:",
              ind + "    raise ValueError(len(hits))"]
    lines += [try_ind + "except ValueError as e:",
              try_ind + "    hits.append(('caught', e.args))"]
    lines += ["    return hits", "print(f(3))", "print(f(100))", "f(0)"]
    return "\n".join(lines) + "\n"


CORPUS["deep_nesting"] = _deep_corpus_program()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_behaves_like_plain(tmp_path, name, rescue_log):
    path = write(tmp_path, CORPUS[name])
    for trace in (False, True):
        plain = Run(path, plain_code(path), trace)
        rescue_log.clear()
        inst = Run(path, inst_code(path), trace)
        assert inst.output == plain.output
        assert inst.exc == plain.exc
        assert inst.exc_text == plain.exc_text
        assert inst.tb == plain.tb
        if trace:
            assert inst.events, "nothing traced"
            same_events(plain.events, inst.events)


def test_corpus_is_instrumented():
    for name, src in CORPUS.items():
        tree, lines = instrument.instrument(ast.parse(textwrap.dedent(src)))
        assert lines, name
        assert len(set(lines)) == len(lines)


def test_return_event_line_is_plain(tmp_path):
    """When an exception leaves a frame through a loop handler, the frame ends on the
    raising instruction as under python: the 'return' trace event and the dead
    frame (tb_frame.f_lineno) show the raising line, for an exception the handler
    matches and for one it does not (KeyboardInterrupt), for a for and a while
    loop, and for a re-raise from the user's own except or finally inside the body."""
    path = write(tmp_path, """
        import sys
        def f(kind):
            for i in range(3):
                if i == 1:
                    raise kind(i)
        def w(n):
            while n:
                n -= 1
                {}[n]
        def again():
            for i in range(2):
                try:
                    {}[i]
                except KeyError:
                    raise
        def fin():
            for i in range(2):
                try:
                    {}[i]
                finally:
                    i = 0
        lines = []
        for fn, arg in ((f, ValueError), (f, KeyboardInterrupt), (w, 3), (again, None),
                        (fin, None)):
            try:
                fn(arg) if arg is not None else fn()
            except BaseException as exc:
                tb = exc.__traceback__.tb_next
                lines.append((fn.__name__, tb.tb_lineno, tb.tb_frame.f_lineno,
                              tb.tb_frame.f_lasti == tb.tb_lasti or None))
        print(lines)
    """)
    plain = Run(path, plain_code(path), True)
    inst = Run(path, inst_code(path), True)
    returns = [e for e in plain.events if e[0] == "return" and e[1] == "f"]
    assert returns == [("return", "f", 6, "NoneType")] * 2
    assert "('fin', 20, 22" in plain.output and "('again', 14, 16" in plain.output
    same_events(plain.events, inst.events)
    # f_lasti is an offset of the instrumented code; its line is python's
    assert inst.output.replace("True", "None") == plain.output.replace("True", "None")
    assert plain.exc_text == inst.exc_text


def test_reraise_table_round_trip_on_stdlib():
    """reraise.py's exception-table reader and writer give back the compiler's bytes
    (and dis's reading) for every code object of a sample of the stdlib."""
    import argparse
    import asyncio.base_events
    import email.message
    import typing
    n = 0
    for mod in (argparse, asyncio.base_events, email.message, typing, dis):
        co = compile(open(mod.__file__, "rb").read(), mod.__file__, "exec", dont_inherit=True)
        todo = [co]
        while todo:
            c = todo.pop()
            todo.extend(k for k in c.co_consts if isinstance(k, type(co)))
            entries = reraise.parse_table(c.co_exceptiontable)
            assert [tuple(e) for e in entries] == [tuple(e) for e in dis._parse_exception_table(c)]
            assert reraise.encode_table(entries) == c.co_exceptiontable
            n += 1
    assert n > 500


# The conditional jump of an `except E:` or `if` that is not taken (3.11:
# POP_JUMP_FORWARD_IF_FALSE), and what tests the value first (3.13: TO_BOOL; 3.11:
# nothing), from the bytecode layer's table of this interpreter.
JUMP_IF_FALSE = BYTECODE.JUMP_IF_FALSE
TRUTH_TEST = ["TO_BOOL"] if "TO_BOOL" in BYTECODE.OPMAP else []


def test_every_handler_reraises_with_lasti():
    """In instrumented stdlib modules every loop handler was given the raising
    instruction's offset (no RAISE_VARARGS after a rescue call is left), and its
    entries carry the lasti flag."""
    import argparse
    import asyncio.base_events
    import typing
    handlers = 0
    for mod in (argparse, asyncio.base_events, typing):
        co = compile_user_source(open(mod.__file__, "rb").read(), mod.__file__)
        todo = [co]
        while todo:
            c = todo.pop()
            todo.extend(k for k in c.co_consts if isinstance(k, type(co)))
            # 3.14's NOT_TAKEN after each conditional jump is a no-op (branch events only)
            ins = [i for i in dis.get_instructions(c) if i.opname != "NOT_TAKEN"]
            table = dis._parse_exception_table(c)
            for k, x in enumerate(ins):
                if x.opname in ("LOAD_GLOBAL", "LOAD_NAME") and x.argval == "__portal_rescue__":
                    h = max(j for j in range(k) if ins[j].opname == "PUSH_EXC_INFO")
                    start = ins[h].offset
                    assert [y.opname for y in ins[h + 2:h + 5]] == \
                        ["CHECK_EXC_MATCH", JUMP_IF_FALSE, "NOP"]
                    call = next(j for j in range(k, len(ins)) if ins[j].opname == "CALL")
                    after = [(y.opname, y.arg) for y in ins[call + 1:]]
                    test = len(TRUTH_TEST)
                    if [op for op, _ in after[:test + 1]] == TRUTH_TEST + [JUMP_IF_FALSE]:
                        # a for loop's `if rescue(...)`: the skip's way back (POP_TOP,
                        # POP_EXCEPT, POP_TOP, room, JUMP_BACKWARD), then the re-raises
                        back = next(j for j, (op, _) in enumerate(after) if op == "JUMP_BACKWARD")
                        assert [op for op, _ in after[test + 1:test + 4]] == ["POP_TOP", "POP_EXCEPT", "POP_TOP"]
                        assert {op for op, _ in after[test + 4:back]} <= {"NOP", "EXTENDED_ARG"}, \
                            (mod.__name__, c.co_name)
                        after = [("POP_TOP", None)] + after[back + 1:]
                    assert after[:3] == \
                        [("POP_TOP", None), ("RERAISE", 2), ("RERAISE", 2)], (mod.__name__, c.co_name)
                    into = [e for e in table if e.target == start]
                    assert into and all(e.lasti for e in into), (mod.__name__, c.co_name)
                    handlers += 1
    assert handlers > 100


# --- rescue calls ---------------------------------------------------------------------------

RESCUE_PROG = """
def inner(xs):
    for x in xs:                 # 3
        if x == 2:
            raise ValueError(x)

def outer():
    for i in range(3):           # 8
        j = 0
        while True:              # 10
            j += 1
            [inner([1, 2]) for _ in range(1)]

for k in range(2):               # 14
    outer()
"""


def test_rescue_called_per_loop_innermost_first(tmp_path, monkeypatch):
    path = write(tmp_path, RESCUE_PROG)
    seen = []

    def rescue(line, body_span=None):
        seen.append((line, sys.exc_info()[1]))

    monkeypatch.setattr(builtins, "__portal_rescue__", rescue)
    glb = {"__name__": "prog"}
    with pytest.raises(ValueError) as info:
        exec(inst_code(path), glb)
    assert [line for line, _ in seen] == [3, 10, 8, 14]
    assert all(exc is info.value for _, exc in seen)
    # re-raised unchanged: the same traceback as without instrumentation
    with pytest.raises(ValueError) as plain_info:
        exec(plain_code(path), {"__name__": "prog"})
    fmt = lambda e: [(f.filename, f.lineno, f.name, f.line)
                     for f in traceback.extract_tb(e.__traceback__)][1:]
    assert fmt(info.value) == fmt(plain_info.value)
    # 3.11 runs the list comprehension in a frame of its own (line 12 twice);
    # 3.13 inlines it in outer's frame (PEP 709)
    assert [f.lineno for f in traceback.extract_tb(info.value.__traceback__)][1:] == \
        ([15, 12, 12, 5] if sys.version_info < (3, 12) else [15, 12, 5])


def test_rescue_not_called_for_handled_or_base_exceptions(tmp_path, rescue_log):
    path = write(tmp_path, """
        def f():
            for i in range(3):
                try:
                    raise KeyError(i)
                except KeyError:
                    pass
        f()
        def g():
            for i in range(3):
                yield i
        it = g(); next(it); it.close()
        try:
            for i in range(2):
                raise SystemExit
        except SystemExit:
            pass
    """)
    exec(inst_code(path), {"__name__": "prog"})
    assert list(rescue_log) == []


def test_generator_throw_reaches_rescue(tmp_path, rescue_log):
    path = write(tmp_path, """
        def g():
            for i in range(3):
                yield i
        it = g()
        next(it)
    """)
    glb = {"__name__": "prog"}
    exec(inst_code(path), glb)
    exc = KeyError("t")
    with pytest.raises(KeyError) as info:
        glb["it"].throw(exc)
    assert info.value is exc
    assert list(rescue_log) == [3]


def test_wrapped_lines_and_shape():
    src = textwrap.dedent("""
        for a in b:
            x = 1
        else:
            y = 2
        while c:
            pass
        async def f():
            async for q in r:
                z = 3
        [i for i in j]
    """)
    tree, lines = instrument.instrument(ast.parse(src))
    assert sorted(lines) == [2, 6, 9]
    loop = tree.body[0]
    assert isinstance(loop.body[0], ast.Try) and len(loop.body) == 1
    t = loop.body[0]
    assert (t.lineno, t.col_offset) == (3, 4)
    assert isinstance(loop.orelse[0], ast.Assign)        # else: untouched
    h = t.handlers[0]
    assert h.name is None and h.type.id == "Exception"
    # `if __portal_rescue__(2): __portal_rescue__; continue` (a skip, oom.action=skip), then `raise`
    skip = h.body[0]
    assert isinstance(skip, ast.If) and not skip.orelse
    call = skip.test
    assert call.func.id == "__portal_rescue__" and call.args[0].value == 2
    assert [type(s) for s in skip.body] == [ast.Expr, ast.Continue]
    assert skip.body[0].value.id == "__portal_rescue__"
    assert isinstance(h.body[1], ast.Raise) and h.body[1].exc is None
    assert {n.lineno for n in ast.walk(h) if hasattr(n, "lineno")} == {-1}


# --- bytecode --------------------------------------------------------------------------------

def _loop_body_instructions(code):
    ins = list(dis.get_instructions(code))
    start = next(i for i, x in enumerate(ins) if x.opname == "FOR_ITER")
    end = next(i for i, x in enumerate(ins) if x.opname == "JUMP_BACKWARD")
    return [(x.opname, None if x.opcode in dis.hasjrel else x.argval, x.positions)
            for x in ins[start:end + 1]]


def test_for_loop_runs_the_same_instructions_per_iteration():
    src = textwrap.dedent("""
        def f(xs):
            t = 0
            for x in xs:
                t += x * 2
                if t > 10:
                    continue
                t -= 1
            return t
    """)
    plain = compile(src, "f.py", "exec").co_consts[0]
    inst = compile_user_source(src.encode(), "f.py").co_consts[0]
    assert _loop_body_instructions(plain) == _loop_body_instructions(inst)
    # the handler instructions carry no line number
    lines = {x.positions.lineno for x in dis.get_instructions(inst)} - \
        {x.positions.lineno for x in dis.get_instructions(plain)}
    assert lines <= {None}


def test_no_loops_means_identical_code():
    import argparse
    import string
    for mod in (string,):
        src = open(mod.__file__, "rb").read()
        tree, lines = instrument.instrument(ast.parse(src))
        if not lines:
            assert marshal.dumps(compile_user_source(src, mod.__file__)) == \
                marshal.dumps(compile(src, mod.__file__, "exec", dont_inherit=True))
    src = b"'''doc'''\nimport os\nx = [i for i in range(3)]\ndef f(a):\n    return a\n"
    assert marshal.dumps(compile_user_source(src, "m.py")) == \
        marshal.dumps(compile(src, "m.py", "exec", dont_inherit=True))
    # wrap=False, no fake OOM: the module compiles as python compiles it
    src = open(argparse.__file__, "rb").read()
    assert marshal.dumps(compile_user_source(src, "a.py", wrap=False)) == \
        marshal.dumps(compile(src, "a.py", "exec", dont_inherit=True))


# --- nesting budget -------------------------------------------------------------------------

def _nested_loops(n, inner="hits.append(1)"):
    lines = ["def f(hits):"]
    ind = "    "
    for i in range(n):
        kw = "for" if i % 2 == 0 else "while"
        lines.append(ind + (f"for i{i} in range(1):" if kw == "for" else
                            f"while not hits or len(hits) < 0:"))
        ind += "    "
    lines.append(ind + inner)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("n", [1, 5, 9, 10, 11, 17, 19, 20])
def test_deep_nesting_still_compiles_and_runs(n):
    src = _nested_loops(n)
    plain = compile(src, "d.py", "exec")
    tree, lines = instrument.instrument(ast.parse(src))
    code = compile(tree, "d.py", "exec")          # no fallback needed
    assert compile_user_source(src.encode(), "d.py") is not None
    for c in (plain, code):
        glb = {}
        exec(c, glb)
        hits = []
        glb["f"](hits)
        assert hits == [1]
    # outer loops keep priority: the wrapped ones are the outermost
    loop_lines = list(range(2, 2 + n))
    assert sorted(lines) == loop_lines[:len(lines)]
    # k outer loops wrapped: the body of the innermost sits at 2k + (n - k) blocks and
    # the handler of the k-th wrapped loop at 2(k - 1) + 3 for a for loop (inside it),
    # 2(k - 1) + 2 for a while loop (the try is around the loop)
    limit = instrument.MAX_BLOCKS      # CO_MAXBLOCKS: 20 on 3.11, 21 on 3.13
    fits = [k for k in range(n + 1) if 2 * k + (n - k) <= limit
            and (k == 0 or 2 * (k - 1) + (2 if (k - 1) % 2 else 3) <= limit)]
    assert len(lines) == max(fits)


@pytest.mark.parametrize("deepest", [False, True])
def test_deep_nesting_in_a_generator_compiles_and_runs(deepest):
    """A generator's body starts one block deep on 3.13 (its implicit StopIteration
    handler): the budget there is one less, and the deepest nesting python
    compiles still compiles instrumented, without a fallback."""
    n = instrument.MAX_BLOCKS - instrument.GENERATOR_BLOCKS - (0 if deepest else 1)
    src = _nested_loops(n, inner="yield hits.append(1)")
    plain = compile(src, "g.py", "exec")
    tree, lines = instrument.instrument(ast.parse(src))
    code = compile(tree, "g.py", "exec")          # no fallback needed
    for c in (plain, code):
        glb = {}
        exec(c, glb)
        hits = []
        assert list(glb["f"](hits)) == [None] and hits == [1]
    # one block of head-room wraps the outermost loop alone; none at the deepest
    assert sorted(lines) == ([] if deepest else [2])


def test_too_deep_for_python_is_the_same_error():
    src = _nested_loops(instrument.MAX_BLOCKS + 1)
    with pytest.raises(SyntaxError) as plain:
        compile(src, "d.py", "exec", dont_inherit=True)
    with pytest.raises(SyntaxError) as inst:
        compile_user_source(src.encode(), "d.py")
    assert _err(inst.value) == _err(plain.value)


def _random_program(rnd, depth=0):
    if depth > 7 or rnd.random() < 0.2 + 0.1 * depth:
        return [rnd.choice(["x = 1", "return 1", "pass"])]
    kind = rnd.choice(["for", "while", "afor", "with", "with2", "try", "tryf", "tryef",
                       "trystar", "if", "match", "def", "class"])

    def b():
        return ["    " + line for _ in range(rnd.randint(1, 2 if depth < 3 else 1))
                for line in _random_program(rnd, depth + 1)]
    if kind == "for":
        return ["for i in y:"] + b() + (["else:"] + b() if rnd.random() < .3 else [])
    if kind == "while":
        return ["while y:"] + b()
    if kind == "afor":
        return ["async for i in y:"] + b()
    if kind == "with":
        return ["with a:"] + b()
    if kind == "with2":
        return ["async with a, b as c:"] + b()
    if kind == "try":
        return ["try:"] + b() + ["except E as e:"] + b() + ["else:"] + b()
    if kind == "tryf":
        return ["try:"] + b() + ["finally:"] + b()
    if kind == "tryef":
        return ["try:"] + b() + ["except E:"] + b() + ["else:"] + b() + ["finally:"] + b()
    if kind == "trystar":
        return ["try:"] + b() + ["except* E:", "    pass", "finally:"] + b()
    if kind == "if":
        return ["if y:"] + b() + ["else:"] + b()
    if kind == "match":
        return ["match y:", "    case 1:"] + ["    " + line for line in b()]
    if kind == "def":
        return ["async def g():"] + b()
    return ["class C:", "    x = 1", "    async def m():"] + ["    " + line for line in b()]


def _compiles(src):
    try:
        compile(src, "t.py", "exec", dont_inherit=True)
        return True
    except SyntaxError as e:
        assert "nested blocks" in e.msg, e
        return False


def test_block_depth_model_matches_cpython():
    """The static block depth the rewriter computes is CPython's: a statement list
    needing D blocks compiles under k enclosing loops iff k + D <= CO_MAXBLOCKS
    (20 on 3.11, 21 on 3.13); and the instrumented program compiles exactly when
    the plain one does."""
    # the programs below are coroutines: 3.13 starts their body one block deep
    limit = instrument.MAX_BLOCKS - instrument.GENERATOR_BLOCKS
    rnd = random.Random(1234)
    for _ in range(150):
        body = _random_program(rnd)
        need = instrument._need_list(ast.parse("\n".join(body)).body, {})

        def wrapped_in(k):
            head = [("    " * i) + f"for z{i} in y:" for i in range(k)]
            lines = head + ["    " * k + line for line in body]
            return "async def f():\n" + textwrap.indent("\n".join(lines), "    ") + "\n"
        assert _compiles(wrapped_in(limit - need))
        assert not _compiles(wrapped_in(limit + 1 - need))
        for k in (limit - 2 - need, limit - 1 - need, limit - need, limit + 1 - need):
            if k < 0:
                continue
            src = wrapped_in(k)
            tree, _ = instrument.instrument(ast.parse(src))
            try:
                compile(tree, "t.py", "exec", dont_inherit=True)
                ok = True
            except SyntaxError:
                ok = False
            assert ok == _compiles(src)


# --- errors --------------------------------------------------------------------------------

def _err(e):
    return (type(e), e.msg, e.filename, e.lineno, e.offset, e.end_lineno, e.end_offset,
            e.text)


BAD_SOURCES = [
    b"x = (\n",
    b"for x in y:\nprint(x)\n",
    b"def f():\n    for x in y:\n        return\n  x = 1\n",
    b"return 1\n",
    b"for x in y:\n    pass\nbreak\n",
    b"def f():\n    for x in y:\n        nonlocal q\n",
    b"for x in y:\n    await z\n",
    b"def f():\n    x = 1\n    for i in y:\n        global x\n",
    b"try:\n    pass\nexcept* E:\n    for x in y:\n        pass\n    break\n",
    b"async def f():\n    for x in y:\n        yield from z\n",
    b"\xef\xbb\xbf# -*- coding: latin-1 -*-\nx = 1\n",
    b"x = '\xff'\n",
    b"# coding: bogus\nx = 1\n",
    b"x = 1\n\x00\n",
    b"from __future__ import braces\n",
    b"x = 1\nfrom __future__ import annotations\n",
]


@pytest.mark.parametrize("src", BAD_SOURCES)
def test_errors_are_plain_compiles(src):
    with pytest.raises(Exception) as plain:
        compile(src, "bad.py", "exec", dont_inherit=True)
    with pytest.raises(Exception) as inst:
        compile_user_source(src, "bad.py")
    assert type(inst.value) is type(plain.value)
    if isinstance(plain.value, SyntaxError):
        assert _err(inst.value) == _err(plain.value)
    else:
        assert str(inst.value) == str(plain.value)


def test_encodings_honoured():
    for src in (b"# -*- coding: latin-1 -*-\nfor c in '\xe9':\n    s = c\n",
                b"\xef\xbb\xbffor c in '\xc3\xa9':\n    s = c\n",
                "for c in 'é':\n    s = c\n".encode()):
        glb = {}
        exec(compile_user_source(src, "e.py"), glb)
        plain = {}
        exec(compile(src, "e.py", "exec"), plain)
        assert glb["s"] == plain["s"] == "é"


def test_warnings_once_and_as_errors(recwarn):
    src = b"def f(x):\n    for i in x:\n        if i is 1:\n            pass\n"
    compile_user_source(src, "w.py")
    said = ('"is" with a literal. Did you mean "=="?' if sys.version_info < (3, 12)
            else '"is" with \'int\' literal. Did you mean "=="?')
    assert [str(w.message) for w in recwarn.list] == [said]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SyntaxError) as plain:
            compile(src, "w.py", "exec", dont_inherit=True)
        with pytest.raises(SyntaxError) as inst:
            compile_user_source(src, "w.py")
    assert _err(inst.value) == _err(plain.value)


def test_dont_inherit_future_flags():
    # this test module has no `from __future__ import annotations`; compile_user_source
    # must not pick up the caller's flags either way
    src = b"def f(x: undefined_name) -> None:\n    for i in x:\n        pass\n"
    glb = {}
    with pytest.raises(NameError):
        exec(compile_user_source(src, "a.py"), glb)
        glb["f"].__annotations__   # 3.14 (PEP 649): evaluated when first asked for


# --- fake OOM --------------------------------------------------------------------------------

@pytest.fixture
def fake_oom(monkeypatch):
    calls = []

    def fire(index):
        calls.append(index)
        if index == 0:
            raise MemoryError("fake")

    monkeypatch.setattr(builtins, "__portal_fake_oom__", fire, raising=False)
    return calls


def test_fake_oom_call_before_statements_on_line(tmp_path, fake_oom, rescue_log):
    path = write(tmp_path, """\
        '''doc'''
        from __future__ import annotations
        total = 0
        for i in range(3):
            total += i; total *= 1
            if i == 1: total += 100
    """)
    code = inst_code(path, fake_oom=[(1, 5), (2, 6), (3, 2), (4, 1)])
    glb = {"__name__": "prog"}
    exec(code, glb)
    assert glb["__doc__"] == "doc"
    # line 5: once per iteration (two statements, one call); line 6: the `if` and its
    # one-line body: 3 + 1; line 1/2 (docstring, __future__): once, after them
    assert fake_oom.count(1) == 3 and fake_oom.count(2) == 4
    assert fake_oom[:2] == [3, 4] or fake_oom[:2] == [4, 3]
    assert glb["total"] == 103
    # zero effect without specs
    src = path.read_bytes()
    assert marshal.dumps(compile_user_source(src, str(path))) == \
        marshal.dumps(compile_user_source(src, str(path), fake_oom=None))


def test_fake_oom_raises_at_line_with_plain_traceback(tmp_path, fake_oom, rescue_log):
    path = write(tmp_path, """\
        def work(xs):
            out = []
            for x in xs:
                out.append(x * 2)
            return out
        work([1, 2])
    """)
    code = inst_code(path, fake_oom=[(0, 4)])
    with pytest.raises(MemoryError) as info:
        exec(code, {"__name__": "prog"})
    frames = traceback.extract_tb(info.value.__traceback__)[1:3]   # then the stand-in
    assert [(f.lineno, f.name, f.line) for f in frames] == \
        [(6, "<module>", "work([1, 2])"), (4, "work", "out.append(x * 2)")]
    assert list(rescue_log) == [3]
    # wrap=False: only the call (non-user file matched by a spec)
    rescue_log.clear()
    code = inst_code(path, fake_oom=[(0, 4)], wrap=False)
    with pytest.raises(MemoryError):
        exec(code, {"__name__": "prog"})
    assert list(rescue_log) == []


def test_fake_oom_lines_trace_like_plain(tmp_path, fake_oom):
    path = write(tmp_path, """\
        def work(xs):
            out = []
            for x in xs:
                out.append(x * 2)
            return out
        work([1, 2])
    """)
    plain = Run(path, plain_code(path), True)
    inst = Run(path, inst_code(path, fake_oom=[(5, 4)]), True)
    assert fake_oom == [5, 5]
    same_events(plain.events, inst.events)


# --- the stdlib as input ------------------------------------------------------------------------

def test_large_stdlib_modules_compile():
    import argparse
    import tarfile
    import typing
    for mod in (argparse, typing, tarfile):
        src = open(mod.__file__, "rb").read()
        code = compile_user_source(src, mod.__file__)
        assert "__portal_rescue__" in marshal.dumps(code).decode("latin-1")


def test_fake_oom_on_decorator_and_multiline_lines(tmp_path, fake_oom):
    path = write(tmp_path, """\
        def deco(f):
            return f
        @deco
        def g():
            x = (1,
                 2); y = 3
            return x, y
        g()
    """)
    glb = {"__name__": "prog"}
    exec(inst_code(path, fake_oom=[(3, 3), (4, 4), (6, 6)]), glb)
    # the decorated def starts on its decorator line; line 6 starts `y = 3`
    assert fake_oom == [3, 6]


def test_future_imports_kept():
    src = b"from __future__ import annotations\nfor i in range(1):\n" \
          b"    def f(x: undefined_name) -> None:\n        pass\n"
    glb = {}
    exec(compile_user_source(src, "a.py"), glb)
    assert glb["f"].__annotations__ == {"x": "undefined_name", "return": "None"}
    src = b"'''doc'''\nfrom __future__ import annotations\ndef f(x: int): pass\n"
    assert marshal.dumps(compile_user_source(src, "a.py")) == \
        marshal.dumps(compile(src, "a.py", "exec", dont_inherit=True))


# --- while loops: wrapped whole -------------------------------------------------------------

WHILE_SHAPES = {
    "cond": """
        def f(n, out):
            while n > 0:
                n -= 1
                out.append(n)
            return n
    """,
    "true_break_continue": """
        def f(n, out):
            while True:
                n -= 1
                if n % 3 == 0:
                    continue
                out.append(n)
                if n <= 0:
                    break
            return n
    """,
    "cond_else": """
        def f(n, out):
            while n and n > 0:
                n -= 1
                if n == -5:
                    break
                if n % 2:
                    continue
                out.append(n)
            else:
                out.append("else")
            return n
    """,
    "in_for": """
        def f(n, out):
            for i in range(2):
                k = n
                while k: k -= 1
                out.append(k)
    """,
}


def _executed(code, n):
    """Opnames f executes for f(n, out), with opcode tracing."""
    glb = {}
    exec(code, glb)
    f = glb["f"]
    ops = []

    def tracer(frame, event, arg):
        if frame.f_code is not f.__code__:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            ops.append(dis.opname[frame.f_code.co_code[frame.f_lasti]])
        return tracer

    sys.settrace(tracer)
    try:
        f(n, [])
    finally:
        sys.settrace(None)
    return ops


@pytest.mark.parametrize("name", sorted(WHILE_SHAPES))
def test_while_iteration_runs_the_plain_instructions(tmp_path, name, rescue_log):
    """An iteration of a wrapped while loop executes exactly the instructions of the
    plain loop: whatever the wrap adds runs once per loop, never per iteration."""
    path = write(tmp_path, WHILE_SHAPES[name])
    plain, inst = plain_code(path), inst_code(path)
    assert any("__portal_rescue__" in c.co_names for c in inst.co_consts
               if isinstance(c, type(inst)))
    extra = {}
    for n in (7, 40):
        p, i = _executed(plain, n), _executed(inst, n)
        assert len(p) > n
        extra[n] = (len(i) - len(p), collections.Counter(i) - collections.Counter(p))
    assert extra[7] == extra[40]
    assert extra[7][0] <= 2      # at most a NOP and the jump over the handler, once


WHILE_RESCUE = """
    def cond(x):
        if x == 3:
            raise MemoryError("cond")
        return x < 5
    def body(x):
        if x == 3:
            raise MemoryError("body")
    def in_cond():
        x = 0
        while cond(x):
            x += 1
    def in_body():
        x = 0
        while cond(x - 1):
            body(x)
            x += 1
    def in_else():
        x = 0
        while x < 2:
            x += 1
        else:
            body(3)
    def nested():
        for i in range(1):
            x = 0
            while x < 5:
                y = 0
                while cond(y):
                    y += 1
                x += 1
"""


def test_while_rescue_only_for_its_body(tmp_path, monkeypatch):
    """The rescue of a while loop takes an error of its body (or a call the body
    made); one of its condition or else clause is not this loop's iteration."""
    pytest.importorskip("_portal._frames", reason="capture needs the native _frames module, "
                        "not built for this interpreter here")
    from _portal.rescue import capture
    path = write(tmp_path, WHILE_RESCUE)
    seen = []

    def rescue(line, body_span=None):
        frame = sys._getframe(1)
        seen.append((frame.f_code.co_name, line,
                     capture.raised_in_body(frame, line, sys.exception())))

    monkeypatch.setattr(builtins, "__portal_rescue__", rescue)
    glb = {"__name__": "prog"}
    exec(inst_code(path), glb)
    src = open(path).read().splitlines()
    at = lambda text: [i for i, t in enumerate(src, 1) if t.strip() == text]
    w_cond, w_body, w_else, w_outer, w_inner = (
        at("while cond(x):")[0], at("while cond(x - 1):")[0], at("while x < 2:")[0],
        at("while x < 5:")[0], at("while cond(y):")[0])
    w_for = at("for i in range(1):")[0]
    expected = {
        "in_cond": [("in_cond", w_cond, False)],
        "in_body": [("in_body", w_body, True)],
        "in_else": [("in_else", w_else, False)],
        # the inner loop declines (its condition), the outer ones take it
        "nested": [("nested", w_inner, False), ("nested", w_outer, True),
                   ("nested", w_for, True)],
    }
    for name, want in expected.items():
        seen.clear()
        with pytest.raises(MemoryError):
            glb[name]()
        assert seen == want, name


# --- the skip (oom.action=skip): a rescue that returns True continues the loop ------------------

SKIP_PROG = """
def f(n, out):
    for i in range(n):
        try:
            if i % 3 == 0:
                raise MemoryError(i)
        finally:
            out.append(("f", i))
        out.append(i)
    return "done"

out = []
result = f(3000, out)
for j in range(6):
    if j % 2:
        raise ValueError(j)
    out.append(("module", j))
"""


def test_a_rescue_returning_true_continues_with_the_next_item():
    """Thousands of skipped items at function level (through a user's `finally`)
    and at module level: the loop goes on, its stack and the handled exception
    stay balanced (sys.exception() is None after each skip), and an item the
    rescue declines (returns None) is raised as before."""
    seen = []

    def rescue(line, span=None):
        seen.append((line, type(sys.exception()).__name__))
        return not (isinstance(sys.exception(), ValueError) and len(seen) > 1001)

    old = getattr(builtins, "__portal_rescue__", None)
    builtins.__portal_rescue__ = rescue
    try:
        code = compile_user_source(SKIP_PROG, "/tmp/skip_prog.py")
        g = {}
        with pytest.raises(ValueError) as raised:
            exec(code, g)
        assert sys.exception() is None
    finally:
        if old is None:
            del builtins.__portal_rescue__
        else:
            builtins.__portal_rescue__ = old
    assert g["result"] == "done"
    out = g["out"]
    assert [x for x in out if isinstance(x, int)] == [i for i in range(3000) if i % 3]
    assert [x for x in out if isinstance(x, tuple) and x[0] == "f"] == [("f", i) for i in range(3000)]
    assert [x for x in out if isinstance(x, tuple) and x[0] == "module"] == [("module", 0), ("module", 2)]
    assert raised.value.args == (3,)
    assert seen.count((3, "MemoryError")) == 1000 and seen[-2:] == [(14, "ValueError"), (14, "ValueError")]
    # the traceback of the declined error is python's: its raise line, no handler line
    assert [e.lineno for e in traceback.extract_tb(raised.value.__traceback__)][-1] == 16
