"""After a resume, the frame-evaluation hook is gone once the loop's frame has
started (docs/architecture.md: a normal run, resumed or not, never keeps one), and a
chain through a method with keyword-only arguments, called from a function,
continues exactly."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent / "resume_hook"
PORTAL_RUN = os.environ.get("PORTAL_RUN") or shutil.which("portal-run")
PORTAL = os.environ.get("PORTAL") or str(Path(PORTAL_RUN).with_name("portal"))


def test_hook_is_gone_after_resume(tmp_path):
    script = tmp_path / "methods_hook.py"
    shutil.copy(HERE / "methods_hook.py", script)
    env = dict(os.environ, PORTAL_HOME=str(tmp_path / "home"))
    reference = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path)
    assert reference.returncode == 0
    assert b"no portal" in reference.stdout

    first = subprocess.run([PORTAL_RUN, str(script)], capture_output=True, cwd=tmp_path,
                           env=dict(env, PORTAL_FAKE_OOM="methods_hook.py:15@3"))
    assert first.returncode == 75, first.stderr
    job = re.search(rb"portal resume (\S+)", first.stderr).group(1).decode()
    second = subprocess.run([PORTAL, "resume", job], capture_output=True, cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr

    out = first.stdout + second.stdout
    # Before the failure (i=0) and after the resume (i=3): no hook installed.
    assert out.count(b"hook installed: False") == 2, out
    assert b"hook installed: True" not in out
    plain = reference.stdout.replace(b"no portal", b"hook installed: False")
    assert out == plain
