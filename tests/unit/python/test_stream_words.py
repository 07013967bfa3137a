"""The checkpoint stream's vocabulary (python/_portal/checkpoint/stream_words.py): every name
of Portal's own a stream may reference is declared, resolves, and is the only kind
of Portal name a loader accepts; checkpoints written by every format version's
writer (checkpoint_fixtures/vN, made by make_fixture.py with that version's
Portal) still read, to the state they were written from."""
import ast
import importlib
import importlib.util
import io
import json
import pickle
import platform
import shutil
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from _portal.checkpoint import (format as ckformat, manifest as ckmanifest, read as ckread,
                                write as ckwrite, loader, rebuild, reducers, stream_words)
from _portal.state import plugins
from _portal.store import signing
from _portal.run.codeindex import CodeRegistry

FIXTURES = Path(__file__).parent / "checkpoint_fixtures"
PACKAGE_DIR = Path(reducers.__file__).parents[1]   # _portal/, above checkpoint/


def _fixture_state():
    spec = importlib.util.spec_from_file_location("checkpoint_fixture_state",
                                                  FIXTURES / "state.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expected_state()


def portal_names(names):
    return {n for n in names if stream_words.is_portal(n[0])}


def known(name):
    return stream_words.resolve(*name) is not None


# --- the table itself ---------------------------------------------------------------------

@pytest.mark.parametrize("module, name", sorted(stream_words.WORDS))
def test_every_word_resolves_to_what_pickle_would_name_so(module, name):
    obj = getattr(importlib.import_module(module), name)
    if isinstance(obj, (type, types.FunctionType)):
        # pickle spells a function or class by its __module__ and __qualname__: the
        # word must be that spelling, or the stream would name something else.
        assert (obj.__module__, obj.__qualname__) == (module, name)


def test_aliases_lead_to_words_and_hide_none():
    for old, new in stream_words.ALIASES.items():
        assert new in stream_words.WORDS, f"alias {old} -> {new}: not a word"
        assert old not in stream_words.WORDS, f"alias {old} hides a word of that name"


def _handed_to_pickle(tree):
    """Functions that the module uses as a value (not only calls): what a reducer
    returns for pickle to name.  Its own module-level functions, and those it
    imports by name from Portal's modules (reducers.py hands over rebuild.py's)."""
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith("_portal") for a in n.names}
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and n.id in defined | imported and id(n) not in callees}


def test_every_rebuild_function_of_the_package_is_a_word():
    """A new rebuild function (the _rb_/_set_/_fill naming of the package) that a
    module hands to pickle must be declared: else the loader would refuse the
    checkpoints that name it, and nothing would freeze its spelling.  The word is
    where the function is defined (pickle names its __module__)."""
    missing, seen = [], 0
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        for name in sorted(_handed_to_pickle(tree)):
            if not name.startswith(("_rb_", "_set_", "_fill", "_ctx_")):
                continue
            obj = getattr(importlib.import_module(module), name)
            word = (obj.__module__, obj.__qualname__)
            seen += 1
            if word not in stream_words.WORDS:
                missing.append(f"{module}.{name} ({word[0]}.{word[1]})")
    assert not missing, f"rebuild functions not in stream_words.WORDS: {missing}"
    assert seen > 40        # the walk found the pickler's own and the plug-ins'


# --- names read out of real streams -------------------------------------------------------

def test_names_in_reads_both_pickles_and_the_memo():
    f = io.BytesIO()
    p = pickle.Pickler(f, protocol=5)
    p.dump([rebuild._rb_cell, io.BytesIO])
    p.dump((rebuild._rb_cell, threading.Lock))       # memoized strings: BINGET
    names = stream_words.names_in(f.getvalue())
    # how pickle names threading.Lock depends on the version (3.11: _thread.allocate_lock,
    # 3.13: _thread.lock): read from its protocol-3 GLOBAL, b"\x80\x03c<module>\n<name>\n"
    text = pickle.dumps(threading.Lock, protocol=3, fix_imports=False)
    assert text[2:3] == b"c", text
    lock = tuple(text[3:].decode("latin-1").split("\n")[:2])
    assert names == {("_portal.checkpoint.rebuild", "_rb_cell"), ("_io", "BytesIO"), lock}
    assert stream_words.names_in(pickle.dumps(io.BytesIO, protocol=0)) == {("_io", "BytesIO")}


def _write(parent, state):
    exact, inherited = plugins.reducers()
    return ckwrite.write_checkpoint(parent, "job", state, None, {}, registry=CodeRegistry(),
                                       modules={}, reducers=exact, subclass_reducers=inherited)


def test_a_fresh_checkpoint_names_only_words(tmp_path):
    gen = torch.Generator().manual_seed(3)
    torch.randn(2, generator=gen)
    state = dict(_fixture_state(), gen=gen, view=torch.arange(10.0)[2:7],
                 sparse=torch.eye(3).to_sparse(), lock=threading.Lock())
    info = _write(tmp_path, state)
    names = stream_words.names_in((Path(info.path) / ckformat.STATE).read_bytes())
    assert portal_names(names), "the state names none of Portal's rebuild functions"
    assert all(known(n) for n in portal_names(names)), \
        sorted(n for n in portal_names(names) if not known(n))


# --- the loader: words only ---------------------------------------------------------------

def _stream_naming(module, name):
    return b"\x80\x05c" + f"{module}\n{name}\n".encode() + b"."


def _load(data):
    return loader.Loader(io.BytesIO(data), buffers=(), recompiler=None,
                         main_module=None).load()


def test_the_loader_refuses_a_portal_name_that_is_not_a_word():
    for module, name in [("_portal.run.boot", "_set_argv"), ("_portal.checkpoint.rebuild", "_ctx_unbound"),
                         ("_portal.checkpoint.reducers", "_ctx_unbound"),
                         ("_portal.checkpoint.loader", "Loader"), ("_portal", "checkpoint")]:
        with pytest.raises(pickle.UnpicklingError,
                           match=rf"names {module}\.{name}, which is not a word"):
            _load(_stream_naming(module, name))
    assert _load(_stream_naming("_portal.checkpoint.rebuild", "_rb_cell")) is rebuild._rb_cell
    # the word's spelling before rebuild.py was split out of reducers.py: through its alias
    assert _load(_stream_naming("_portal.checkpoint.reducers", "_rb_cell")) is rebuild._rb_cell
    assert _load(_stream_naming("collections", "OrderedDict")).__name__ == "OrderedDict"


def test_an_alias_loads_the_word_it_names(monkeypatch):
    monkeypatch.setitem(stream_words.ALIASES, ("_portal.old_reducers", "_rb_old_cell"),
                        ("_portal.checkpoint.rebuild", "_rb_cell"))
    assert _load(_stream_naming("_portal.old_reducers", "_rb_old_cell")) is rebuild._rb_cell


# --- every format version's writer --------------------------------------------------------

VERSIONS = sorted(int(p.name[1:]) for p in FIXTURES.glob("v*"))


def test_there_is_a_fixture_of_every_format_version():
    assert VERSIONS == list(range(1, ckformat.FORMAT_VERSION + 1))


def _as_this_interpreters(directory):
    """The fixture signed with this test's key, recorded for this interpreter: its
    state holds no code, so the bytecode magic it was written under is no matter."""
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("hmac", None)
    manifest["python"] = dict(manifest["python"], version=platform.python_version(),
                              implementation=sys.implementation.name,
                              magic=ckformat.PYTHON_MAGIC)
    path.write_text(ckmanifest.signed_manifest_text(manifest, signing.load_or_create_key()))


def _same(a, b, where):
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride()), where
        assert torch.equal(a, b) and a.requires_grad == b.requires_grad, where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, np.random.Generator):
        assert a.bit_generator.state == b.bit_generator.state, where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, where


@pytest.mark.parametrize("version", VERSIONS)
def test_a_checkpoint_of_every_format_version_still_reads(tmp_path, version):
    fixture = FIXTURES / f"v{version}"
    names = stream_words.names_in((fixture / ckformat.STATE).read_bytes())
    assert all(known(n) for n in portal_names(names)), \
        sorted(n for n in portal_names(names) if not known(n))
    job = tmp_path / "job"
    shutil.copytree(fixture, job)
    _as_this_interpreters(job)
    manifest, state = ckread.read_checkpoint(str(job), None, main_module=types.ModuleType("m"),
                                                 check_sources=False)
    assert manifest["format_version"] == version
    _same(state, _fixture_state(), "state")
