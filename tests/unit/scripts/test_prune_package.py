"""cmake/PrunePackage.cmake: a staged or installed `_portal` keeps exactly the
modules the source has (and the generated contract, the native modules); a module
moved into a folder or deleted does not live on under its old name, nor its
byte-code, nor a folder left empty."""
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "cmake" / "PrunePackage.cmake"
CMAKE = shutil.which("cmake")


@pytest.mark.skipif(CMAKE is None, reason="cmake is not installed here")
def test_only_the_sources_modules_stay(tmp_path):
    pkg = tmp_path / "_portal"
    files = ["__init__.py", "job_contract.py", "rescue.py", "run/__init__.py", "run/boot.py",
             "run/old.py", "gone/__init__.py", "gone/x.py", "_frames.cpython-311-x86_64-linux-gnu.so",
             "__pycache__/rescue.cpython-311.pyc", "__pycache__/__init__.cpython-311.pyc",
             "run/__pycache__/boot.cpython-311.pyc", "run/__pycache__/old.cpython-311.pyc"]
    for f in files:
        (pkg / f).parent.mkdir(parents=True, exist_ok=True)
        (pkg / f).write_text("")
    keep = ["_portal/__init__.py", "_portal/run/__init__.py", "_portal/run/boot.py", "_portal/job_contract.py"]
    r = subprocess.run([CMAKE, f"-DDIR={tmp_path}", f"-DKEEP={';'.join(keep)}", "-P", str(SCRIPT)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    left = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file())
    assert left == sorted(["__init__.py", "job_contract.py", "run/__init__.py", "run/boot.py",
                           "_frames.cpython-311-x86_64-linux-gnu.so", "__pycache__/__init__.cpython-311.pyc",
                           "run/__pycache__/boot.cpython-311.pyc"])
    assert not (pkg / "gone").exists()
