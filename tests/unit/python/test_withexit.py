"""Tests of _portal.rescue.withexit: which with statements' __exit__ provably never
swallows an error, looked up without running the program's code."""
import contextlib
import textwrap
import threading

import pytest

from _portal.bytecode import codemap
from _portal.rescue import withexit


class Plain:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class ReturnsFalse(Plain):
    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return None
        return False


class Swallows(Plain):
    def __exit__(self, *exc):
        return True


class MaySwallow(Plain):
    def __exit__(self, exc_type, exc, tb):
        return exc_type is KeyError


class ChildOfPlain(Plain):
    def __exit__(self, exc_type, exc, tb):
        return super().__exit__(exc_type, exc, tb)


class ChildOfSwallows(Swallows):
    def __exit__(self, exc_type, exc, tb):
        return super().__exit__(exc_type, exc, tb)


class GeneratorExit_(Plain):
    def __exit__(self, *exc):
        yield


class Meta(type):
    def __call__(cls, *a):
        return Swallows()


class MadeByMeta(Plain, metaclass=Meta):
    pass


class OwnNew(Plain):
    def __new__(cls):
        return Swallows()


@pytest.mark.parametrize("cls,expected", [
    (Plain, True), (ReturnsFalse, True), (ChildOfPlain, True),
    (Swallows, False), (MaySwallow, False), (ChildOfSwallows, False), (GeneratorExit_, False),
    (contextlib.nullcontext, True), (contextlib.suppress, False),
    (contextlib.ExitStack, False),   # its __exit__ returns what the callbacks decided
    (type(threading.Lock()), True), (threading.Condition, False),
])
def test_exit_never_suppresses(cls, expected):
    assert withexit.exit_never_suppresses(cls) is expected


def test_torch_managers_never_suppress():
    torch = pytest.importorskip("torch")
    for cls in (torch.autocast, torch.no_grad, torch.enable_grad, torch.inference_mode,
                torch.set_grad_enabled, torch.cuda.amp.autocast, torch.cpu.amp.autocast):
        assert withexit.exit_never_suppresses(cls), cls


def test_torch_autocast_under_a_torch_function_mode_is_proven_only_without_its_mode_return():
    torch = pytest.importorskip("torch")
    # torch 2.6's autocast.__exit__ returns a torch function mode's result (a node of
    # torch.export's graph, true) while such a mode is on; torch 1.13's only False/None,
    # and torch 2.14's calls the mode but returns False after it
    import inspect
    mode_return = "return mode.__torch_function__" in inspect.getsource(torch.autocast.__exit__)
    with torch.overrides.TorchFunctionMode():
        assert withexit.exit_never_suppresses(torch.autocast) is not mode_return
    assert withexit.exit_never_suppresses(torch.autocast)


class ReturnsTorchFunction(Plain):
    """The shape of torch's autocast.__exit__ return, in a class that is not torch's."""
    def __exit__(self, exc_type, exc, tb):
        return self.__torch_function__(None, (), ())


def test_a_torch_function_return_is_proven_only_in_torchs_own_autocast():
    assert withexit.exit_never_suppresses(ReturnsTorchFunction) is False


SRC = """
def f(xs, local_manager):
    for x in xs:
        with Plain():
            a = 1
        with Swallows():
            b = 2
        with MadeByMeta():
            c = 3
        with OwnNew():
            d = 4
        with open(x) as fh:
            e = 5
        with ns.Plain():
            g = 6
        with LOCK:
            h = 7
        with local_manager:
            i = 8
        with missing():
            j = 9
        print(a, b, c, d, e, g, h, i, j)
"""


class _Namespace:
    Plain = Plain


def test_never_suppressing_names_the_provable_withs():
    import types
    ns = types.ModuleType("ns")
    ns.Plain = Plain
    code = compile(textwrap.dedent(SRC), "<test>", "exec")
    f = next(c for c in code.co_consts if isinstance(c, type(code)))
    globals_ = {"Plain": Plain, "Swallows": Swallows, "MadeByMeta": MadeByMeta, "OwnNew": OwnNew,
                "ns": ns, "LOCK": threading.Lock()}
    sites = codemap.with_sites(f)
    assert len(sites) == 9
    proven = withexit.never_suppressing(f, globals_)
    assert [s.before_with in proven for s in sites] == [
        True,    # Plain()
        False,   # Swallows()
        False,   # a metaclass whose __call__ may make anything
        False,   # a __new__ that may return another class
        True,    # open(): a file
        True,    # a module's attribute
        True,    # a global lock
        False,   # a local: unknown at the next iteration
        False,   # a name that is not there
    ]


def test_a_class_attribute_is_looked_up_without_running_code():
    class Tricky:
        def __getattr__(self, name):
            raise AssertionError("ran the program's code")
    code = compile("with t.Plain():\n    pass\n", "<test>", "exec")
    assert withexit.never_suppressing(code, {"t": Tricky()}) == frozenset()
    code = compile("with N.Plain():\n    pass\n", "<test>", "exec")
    [site] = codemap.with_sites(code)
    assert withexit.never_suppressing(code, {"N": _Namespace}) == {site.before_with}
