"""The package's folders are its pipeline (docs/architecture.md, "The Python package,
by stage"): each module in one stage's folder, none loose at the top but the
generated contract, and no folder grown past what still reads as one stage."""
import re
from pathlib import Path

import _portal

PACKAGE = Path(_portal.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"
STAGES = {"run", "rescue", "fidelity", "state", "torch", "checkpoint", "restore", "store", "bytecode"}
MOST_MODULES = 18      # bytecode/: one per Python version beside the shared passes


def test_every_module_is_in_a_stage_folder():
    loose = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py", "job_contract.py"}
    assert not loose, f"modules at the package's top, outside any stage: {sorted(loose)}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == STAGES


def test_no_folder_outgrows_one_stage():
    for stage in STAGES:
        modules = [p for p in (PACKAGE / stage).glob("*.py") if p.name != "__init__.py"]
        assert 0 < len(modules) <= MOST_MODULES, (stage, len(modules))
        assert not [p for p in (PACKAGE / stage).iterdir() if p.is_dir() and p.name != "__pycache__"]


def test_the_architecture_page_names_each_folder():
    text = ARCHITECTURE.read_text()
    section = text.split("## The Python package, by stage", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `(\w+)/` \|", section, re.M))
    assert named == STAGES
