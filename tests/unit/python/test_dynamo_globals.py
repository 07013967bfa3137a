"""dynamo_globals.installed: the globals Dynamo's cleanup hooks record, and nothing else
(the real Dynamo is exercised end to end: e2e.training's compiled_train.py)."""
import sys
import types

from _portal.torch import dynamo_globals


class Hook:
    def __init__(self, scope, name):
        self.scope, self.name = scope, name


def fake_utils(monkeypatch, values):
    utils = types.ModuleType(dynamo_globals._UTILS)
    utils.CleanupManager = type("CleanupManager", (), {})
    utils.CleanupManager.instance = types.SimpleNamespace(values=values)
    monkeypatch.setitem(sys.modules, dynamo_globals._UTILS, utils)


def test_the_names_the_hooks_installed_and_still_hold(monkeypatch):
    scope = {"__compiled_fn_1": object(), "model": object(), "__resume_at_20_2": object()}
    other = {"x": 1}
    fake_utils(monkeypatch, {11: [Hook(scope, "__compiled_fn_1"), Hook(scope, "gone")],
                             12: [Hook(scope, "__resume_at_20_2"), Hook(other, "x")]})
    assert dynamo_globals.installed() == {(id(scope), "__compiled_fn_1"),
                                          (id(scope), "__resume_at_20_2"), (id(other), "x")}


def test_nothing_without_dynamo_or_with_another_shape(monkeypatch):
    monkeypatch.delitem(sys.modules, dynamo_globals._UTILS, raising=False)
    assert dynamo_globals.installed() == frozenset()
    fake_utils(monkeypatch, None)
    assert dynamo_globals.installed() == frozenset()
    fake_utils(monkeypatch, {1: "not hooks", 2: [types.SimpleNamespace(scope=[], name="x")]})
    assert dynamo_globals.installed() == frozenset()
