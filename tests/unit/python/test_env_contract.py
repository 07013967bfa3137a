"""The environment variables Portal's sides set for each other are one contract
(contract/job_record.json, "environment": name, meaning, who sets, who reads),
generated for C (env_contract.h), C++ (job_contract.hpp) and Python
(_portal/job_contract.py): no side spells a variable's name itself, and every
variable is used by the sides the contract says."""
import json
import re
from pathlib import Path

from _portal import job_contract

ROOT = Path(__file__).resolve().parents[3]
CONTRACT = json.loads((ROOT / "contract" / "job_record.json").read_text())["environment"]
LITERAL = re.compile(r'"(PORTAL_[A-Z0-9_]+)"')


def _code(path):
    """The file's text without its comments (// and /* */ in C and C++, # in Python)."""
    text = path.read_text()
    if path.suffix == ".py":
        return "\n".join(line.split("#")[0] if not line.lstrip().startswith(('"', "'")) else line
                         for line in text.splitlines())
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def _sources(*dirs, suffixes):
    return [p for d in dirs for p in sorted((ROOT / d).rglob("*")) if p.suffix in suffixes]


CPP = _sources("src", "include", suffixes={".cpp", ".hpp", ".h", ".c"})
PY = _sources("python/_portal", suffixes={".py"})


def test_python_reads_the_generated_names():
    assert job_contract.ENVIRONMENT.keys() == CONTRACT.keys()
    for name, entry in CONTRACT.items():
        assert getattr(job_contract, "ENV_" + name[len("PORTAL_"):]) == name
        assert job_contract.ENVIRONMENT[name] == (entry["meaning"], entry["set_by"],
                                                   tuple(entry["read_by"]))


def _spelled(path):
    """The PORTAL_ names the file spells in a string, but for the names of its own
    constants (`__all__ = [..., "PORTAL_VERSION"]`)."""
    code = _code(path)
    return {m for m in LITERAL.findall(code)
            if not re.search(rf"^\s*{m}\s*=", code, flags=re.M)}


def test_no_side_spells_a_variable_itself():
    spelled = {f"{p.relative_to(ROOT)}: {m}" for p in CPP + PY for m in _spelled(p)}
    assert not spelled, ("environment variables spelled outside the contract "
                         f"(use job_contract.ENV_*, portal::contract::env::k*, PORTAL_ENV_*): {sorted(spelled)}")


def _camel(name):
    return "".join(part.capitalize() for part in name[len("PORTAL_"):].split("_"))


def test_every_variable_is_used_where_the_contract_says():
    cpp = "\n".join(_code(p) for p in CPP if "native" not in p.parts)
    c = "\n".join(_code(p) for p in CPP if "native" in p.parts)
    py = "\n".join(_code(p) for p in PY)
    for name, entry in CONTRACT.items():
        uses = {"python": "ENV_" + name[len("PORTAL_"):] in py,
                "portal-run": f"env::k{_camel(name)}" in cpp,
                "portal": f"env::k{_camel(name)}" in cpp,
                "libportal_alloc": f"PORTAL_ENV_{name[len('PORTAL_'):]}" in c}
        for side in entry["read_by"]:
            assert uses[side], f"{name}: the contract says {side} reads it; it does not"
        if entry["set_by"] in uses:
            assert uses[entry["set_by"]], f"{name}: the contract says {entry['set_by']} sets it"
        assert any(uses.values()), f"{name}: used by no side"
