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


def _imports(path, modules):
    """The package's modules that ``path`` imports, at its top or inside a function."""
    import ast
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("_portal"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if name in modules:
                    out.add(name)                   # from _portal.checkpoint import read
                elif node.module in modules and node.module != "_portal":
                    out.add(node.module)            # from _portal.checkpoint.read import locate
    return out


def test_no_module_imports_itself_back():
    """No circle among the package's modules, counting imports inside functions: a
    circle is state one stage keeps for another (decide.TRIAL once closed one)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert sum(map(len, graph.values())) > 150       # the walk sees the package's imports
    state, circle = {}, []

    def visit(name, trail):
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                circle.append(trail[trail.index(other):] + [other])
            elif other not in state:
                visit(other, trail + [other])
        state[name] = "done"
    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not circle, f"import circles: {circle[:3]}"
