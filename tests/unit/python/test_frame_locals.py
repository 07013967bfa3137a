"""Tests of _portal.bytecode.frame_locals: a frame's variables as python sees them, read
without writing or keeping anything of the program's, on each version."""
import gc
import sys
import weakref

from _portal.bytecode import frame_locals


class _Weakable:
    pass


def _python_view(frame):
    """The frame's variables as python itself shows them (f_locals), copied."""
    return dict(frame.f_locals)


def test_a_function_frame_reads_as_python_shows_it():
    seen = {}

    def f(arg, celled, *rest, kw=3, **more):
        plain = [arg]
        late = None
        del late                        # bound, then deleted: not a variable now

        def inner():
            return celled, plain_cell

        plain_cell = "cell"
        frame = sys._getframe()
        seen["portal"] = frame_locals.snapshot(frame)
        seen["python"] = _python_view(frame)
        unbound_yet = 1                 # not bound when read
        return inner, unbound_yet

    f(1, 2, 3, 4, kw=5, x=6)
    assert seen["portal"] == seen["python"]
    assert seen["portal"]["celled"] == 2 and seen["portal"]["plain_cell"] == "cell"
    assert "late" not in seen["portal"] and "unbound_yet" not in seen["portal"]
    assert seen["portal"]["rest"] == (3, 4) and seen["portal"]["more"] == {"x": 6}


def test_free_variables_and_an_empty_cell_read_as_python_shows_them():
    seen = {}

    def outer():
        bound = "b"
        empty_until_later = None
        del empty_until_later           # its cell is empty now

        def inner():
            frame = sys._getframe()
            seen["portal"] = frame_locals.snapshot(frame)
            seen["python"] = _python_view(frame)
            return bound, empty_until_later

        return inner

    try:
        outer()()
    except NameError:
        pass                            # the empty cell, read by the return
    assert seen["portal"] == seen["python"]
    assert "empty_until_later" not in seen["portal"] and seen["portal"]["bound"] == "b"


def test_a_suspended_callers_frame_reads_as_python_shows_it():
    def caller():
        here = "caller's"
        return callee()

    def callee():
        frame = sys._getframe(1)
        return frame_locals.snapshot(frame), _python_view(frame)

    portal, python = caller()
    assert portal == python and portal["here"] == "caller's"


def test_the_snapshot_is_the_callers_own_dict_and_writes_nothing_back():
    x = 1
    got = frame_locals.snapshot(sys._getframe())
    got["x"] = 2
    got["new"] = 3
    assert x == 1 and "new" not in _python_view(sys._getframe())


def test_a_locals_dict_the_program_holds_stays_as_it_was():
    obj = _Weakable()
    held = locals()                     # 3.11: the frame's own dict; 3.13: a copy
    before = dict(held)
    later = "bound after locals()"
    frame_locals.snapshot(sys._getframe())
    assert held == before and "later" not in held
    assert later


def test_the_snapshot_keeps_nothing_of_the_frame_alive():
    def run():
        obj = _Weakable()
        ref = weakref.ref(obj)
        frame_locals.snapshot(sys._getframe())
        del obj
        return ref

    gc.disable()                        # freed by its count, not by a collection
    try:
        assert run()() is None
    finally:
        gc.enable()


def test_a_module_frame_reads_its_namespace_copied():
    namespace = {"__name__": "m"}
    exec("import sys\nframe = sys._getframe()\na = 1\n", namespace)
    frame = namespace.pop("frame")
    got = frame_locals.snapshot(frame)
    assert got == namespace and got is not namespace
    assert frame_locals.namespace_is_globals(frame) and not frame_locals.has_fast_locals(frame)
    got["a"] = 2
    assert namespace["a"] == 1


def test_a_class_body_reads_its_namespace():
    seen = {}

    class Body:
        attribute = 1
        seen["portal"] = frame_locals.snapshot(sys._getframe())
        seen["python"] = _python_view(sys._getframe())
        seen["is_globals"] = frame_locals.namespace_is_globals(sys._getframe())

    assert seen["portal"] == seen["python"] and seen["portal"]["attribute"] == 1
    assert seen["is_globals"] is False


def test_value_reads_one_variable():
    here = "here"
    frame = sys._getframe()
    assert frame_locals.value(frame, "here") == "here"
    assert frame_locals.value(frame, "nowhere", "default") == "default"
