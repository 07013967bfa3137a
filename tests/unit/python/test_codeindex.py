"""_portal.run.codeindex: code objects named by (file, path in co_consts, sha256)."""
import hashlib
import types

import pytest

from _portal.run.codeindex import CodeChanged, CodeIndex, CodeRegistry, Recompiler

SOURCE = b'''
def outer(a):
    def inner(b):
        return lambda c: a + b + c
    return inner

class K:
    def method(self):
        return [x for x in range(3)]

async def coro():
    pass
'''


def compile_fn(source, filename):
    return compile(source, filename, "exec", dont_inherit=True)


def all_codes(code):
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += all_codes(c)
    return out


# Whether this interpreter's compiler gives a list comprehension a code object of
# its own (3.11) or inlines it into the enclosing one (3.12+, PEP 709): asked of
# the compiler itself.
LISTCOMP_HAS_CODE = any(isinstance(c, types.CodeType)
                        for c in compile("[x for x in ()]", "c.py", "exec").co_consts)


def test_index_enumerates_every_nested_code_object():
    root = compile_fn(SOURCE, "m.py")
    index = CodeIndex(root)
    codes = all_codes(root)
    names = sorted(c.co_qualname for c in codes)
    expected = ["<module>", "K", "K.method", "coro", "outer", "outer.<locals>.inner",
                "outer.<locals>.inner.<locals>.<lambda>"]
    if LISTCOMP_HAS_CODE:
        expected.append("K.method.<locals>.<listcomp>")
    assert names == sorted(expected)
    assert len(index) == len(codes) == len(expected)
    for code in codes:
        path = index.path_of(code)
        assert index.code_at(path) is code
    assert index.path_of(root) == ()
    assert list(index)[0] == ((), root)


def test_paths_are_co_consts_indices():
    root = compile_fn(SOURCE, "m.py")
    index = CodeIndex(root)
    outer = next(c for c in root.co_consts if isinstance(c, types.CodeType))
    i = root.co_consts.index(outer)
    assert index.path_of(outer) == (i,)
    inner = next(c for c in outer.co_consts if isinstance(c, types.CodeType))
    assert index.path_of(inner) == (i, outer.co_consts.index(inner))


def test_lookup_is_by_identity_and_refuses_foreign_code():
    root = compile_fn(SOURCE, "m.py")
    twin = compile_fn(SOURCE, "m.py")            # equal, not identical
    index = CodeIndex(root)
    with pytest.raises(KeyError):
        index.path_of(twin)
    with pytest.raises(KeyError):
        index.path_of(compile_fn(b"x = 1", "other.py"))
    with pytest.raises(KeyError):
        index.code_at((999,))
    with pytest.raises(KeyError):
        index.code_at((0, 0, 0, 0))
    assert twin not in index and root in index


def test_same_path_in_a_fresh_compilation():
    a = CodeIndex(compile_fn(SOURCE, "m.py"))
    b = CodeIndex(compile_fn(SOURCE, "m.py"))
    for path, code in a:
        assert b.code_at(path).co_qualname == code.co_qualname
        assert b.code_at(path).co_code == code.co_code


def test_registry_refs_and_sources():
    reg = CodeRegistry()
    root = compile_fn(SOURCE, "/src/m.py")
    reg.register("/src/m.py", root, SOURCE)
    ns = {}
    exec(root, ns)
    inner = ns["outer"](1)
    path = reg.ref_of(inner.__code__)[1]
    assert reg.ref_of(inner.__code__) == ("/src/m.py", path)
    assert CodeIndex(root).code_at(path) is inner.__code__
    sha = hashlib.sha256(SOURCE).hexdigest()
    assert reg.full_ref(root) == ("/src/m.py", (), sha)
    assert reg.sources() == {"/src/m.py": sha}
    assert reg.ref_of(compile_fn(b"pass", "/src/other.py")) is None
    assert reg.ref_of(compile_fn(SOURCE, "/src/m.py")) is None     # not the registered one


def test_registry_generations():
    reg = CodeRegistry()
    old = compile_fn(SOURCE, "m.py")
    reg.register("m.py", old, SOURCE)
    same = compile_fn(SOURCE, "m.py")                 # reload, same source
    reg.register("m.py", same, SOURCE)
    assert reg.ref_of(old) == ("m.py", ()) and reg.ref_of(same) == ("m.py", ())
    edited = SOURCE + b"\nx = 1\n"
    reg.register("m.py", compile_fn(edited, "m.py"), edited)
    assert reg.ref_of(old) is None                     # its source is gone: marshal it
    assert reg.sha256_of("m.py") == hashlib.sha256(edited).hexdigest()
    with pytest.raises(ValueError):
        reg.register("n.py", old, SOURCE)              # co_filename must match


def test_recompiler_compiles_once_and_finds_the_code(tmp_path):
    src = tmp_path / "m.py"
    src.write_bytes(SOURCE)
    reg = CodeRegistry()
    root = compile_fn(SOURCE, str(src))
    reg.register(str(src), root, SOURCE)
    ns = {}
    exec(root, ns)
    code = ns["outer"](1)(2).__code__
    filename, path, sha = reg.full_ref(code)
    calls = []

    def counting(source, fname):
        calls.append(fname)
        return compile_fn(source, fname)

    restore_reg = CodeRegistry()
    rc = Recompiler(counting, registry=restore_reg)
    fresh = rc.code_for(filename, path, sha)
    assert fresh is not code and fresh.co_code == code.co_code
    assert fresh.co_qualname == "outer.<locals>.inner.<locals>.<lambda>"
    assert rc.code_for(filename, (), sha) is rc.root(filename, sha)
    assert calls == [str(src)]
    assert restore_reg.ref_of(fresh) == (filename, path)     # saveable again


def test_recompiler_refuses_changed_or_missing_source(tmp_path):
    src = tmp_path / "train.py"
    src.write_bytes(SOURCE)
    sha = hashlib.sha256(SOURCE).hexdigest()
    src.write_bytes(SOURCE + b"# edited\n")
    with pytest.raises(CodeChanged) as e:
        Recompiler(compile_fn).code_for(str(src), (), sha)
    assert e.value.filename == str(src)
    assert "train.py" in str(e.value) and "has changed" in str(e.value)
    with pytest.raises(CodeChanged) as e:
        Recompiler(compile_fn).code_for(str(tmp_path / "gone.py"), (), sha)
    assert "gone.py" in str(e.value) and "missing" in str(e.value)
    src.write_bytes(SOURCE)
    with pytest.raises(CodeChanged) as e:
        Recompiler(compile_fn).code_for(str(src), (99,), sha)
    assert "no code object" in str(e.value)
