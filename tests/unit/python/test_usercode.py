"""_portal.run.usercode: which files are the user's own code."""
import os
import site
import sysconfig

import pytest

import _portal
from _portal.run.usercode import UserCode


@pytest.fixture
def proj(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text("x = 1\n")
    (root / "train.py").write_text("")
    return root


def test_roots_and_outside(proj, tmp_path):
    uc = UserCode([str(proj)])
    assert uc.is_user_file(str(proj / "train.py"))
    assert uc.is_user_file(str(proj / "pkg" / "m.py"))
    assert uc.is_user_file(proj / "pkg" / "not_yet.py")         # need not exist
    assert not uc.is_user_file(str(tmp_path / "other.py"))
    assert not uc.is_user_file(str(proj) + "x/y.py")              # prefix, not a parent
    for bad in (None, "", "<string>", "<frozen os>", 3):
        assert not uc.is_user_file(bad)


def test_from_environment(tmp_path, proj):
    lib = tmp_path / "lib"
    extra = tmp_path / "extra"
    cwd = tmp_path / "work"
    for d in (lib, extra, cwd):
        d.mkdir()
    uc = UserCode.from_environment(str(proj), str(cwd),
                                   os.pathsep.join(["", str(lib), "rel"]), [str(extra)])
    for p in (proj / "train.py", lib / "a.py", extra / "b.py", cwd / "c.py",
              cwd / "rel" / "d.py"):
        assert uc.is_user_file(str(p)), p
    assert not uc.is_user_file(str(tmp_path / "elsewhere.py"))
    # no script (python -m / -c), no PYTHONPATH
    uc = UserCode.from_environment(None, str(cwd), None, [])
    assert uc.is_user_file(str(cwd / "c.py"))
    assert not uc.is_user_file(str(proj / "train.py"))
    # relative --user-code and script dir are taken from the working directory
    uc = UserCode.from_environment("sub", str(cwd), "", ["x"])
    assert uc.is_user_file(str(cwd / "sub" / "s.py"))
    assert uc.is_user_file(str(cwd / "x" / "s.py"))


def test_stdlib_and_site_packages_never(tmp_path):
    paths = sysconfig.get_paths()
    dirs = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    dirs += site.getsitepackages() + [site.getusersitepackages()]
    # even with the filesystem root, or the directories themselves, as user roots
    uc = UserCode(["/", "/usr", *dirs])
    for d in dirs:
        assert not uc.is_user_file(os.path.join(d, "mod.py")), d
        assert not uc.is_user_file(os.path.join(d, "pkg", "sub", "mod.py")), d
    assert not uc.is_user_file(os.__file__)
    assert not uc.is_user_file(sysconfig.__file__)
    assert uc.is_user_file("/usr/bin/tool.py")
    # cwd=/usr must not make the stdlib user code
    uc = UserCode.from_environment(None, "/usr", "", [])
    assert not uc.is_user_file(os.__file__)
    assert not uc.is_user_file(os.path.join(paths["stdlib"], "json", "decoder.py"))


@pytest.mark.parametrize("name", ["site-packages", "dist-packages"])
def test_package_dirs_anywhere(tmp_path, name):
    root = tmp_path / "proj"
    uc = UserCode([str(root)])
    assert not uc.is_user_file(str(root / "venv" / "lib" / "python3.11" / name / "t.py"))
    assert not uc.is_user_file(str(root / name / "t.py"))
    assert uc.is_user_file(str(root / (name + "-not") / "t.py"))
    assert uc.is_user_file(str(root / "my-site-packages" / "t.py"))


def test_portal_package_is_not_user_code():
    pkg = os.path.dirname(_portal.__file__)
    uc = UserCode([os.path.dirname(pkg), "/"])
    assert not uc.is_user_file(os.path.join(pkg, "run", "boot.py"))
    assert not uc.is_user_file(os.path.join(pkg, "run", "usercode.py"))
    assert not uc.is_user_file(os.path.join(pkg, "rescue", "suspend.py"))


def test_symlinks_resolved(tmp_path, proj):
    # a root given through a link, files seen through the real path, and the reverse
    link_root = tmp_path / "link_to_proj"
    link_root.symlink_to(proj)
    uc = UserCode([str(link_root)])
    assert uc.is_user_file(str(proj / "train.py"))
    assert uc.is_user_file(str(link_root / "train.py"))
    uc = UserCode([str(proj)])
    assert uc.is_user_file(str(link_root / "pkg" / "m.py"))
    # a link inside the project to a file elsewhere: the real file decides
    outside = tmp_path / "outside.py"
    outside.write_text("")
    (proj / "alias.py").symlink_to(outside)
    assert not uc.is_user_file(str(proj / "alias.py"))


def test_links_into_or_from_site_packages(tmp_path, proj):
    sp = tmp_path / "venv" / "lib" / "site-packages"
    (sp / "lib1").mkdir(parents=True)
    (sp / "lib1" / "a.py").write_text("")
    (proj / "vendored").symlink_to(sp / "lib1")        # project -> site-packages
    uc = UserCode([str(proj)])
    assert not uc.is_user_file(str(proj / "vendored" / "a.py"))
    # site-packages -> project (a path given through site-packages is excluded too)
    (sp / "mine.py").symlink_to(proj / "train.py")
    assert not uc.is_user_file(str(sp / "mine.py"))
    # a root inside an excluded directory does not make it user code
    uc = UserCode([str(sp)])
    assert not uc.is_user_file(str(sp / "lib1" / "a.py"))


def test_relative_paths_use_cwd(tmp_path, proj, monkeypatch):
    monkeypatch.chdir(proj)
    uc = UserCode(["."])
    assert uc.is_user_file("train.py")
    assert uc.is_user_file("pkg/m.py")
    assert uc.is_user_file(str(proj / "pkg" / ".." / "train.py"))
    monkeypatch.chdir(tmp_path)
    assert not uc.is_user_file("elsewhere.py")


def test_explicit_exclusions(tmp_path, proj):
    uc = UserCode([str(proj)], excluded=[str(proj / "pkg")])
    assert uc.is_user_file(str(proj / "train.py"))
    assert not uc.is_user_file(str(proj / "pkg" / "m.py"))
