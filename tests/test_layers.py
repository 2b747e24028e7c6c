"""The packages import one way: orchestrator -> evaluators / envs / agents -> contracts.

Read from the source with ast (every import statement, also those inside functions), so a lower package that
imports a higher one, or a sibling, fails here before it is ever run.
"""
from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT

# package -> the project packages it may import (besides itself)
ALLOWED = {
    "contracts": set(),
    "evaluators": {"contracts"},
    "envs": {"contracts"},
    "agents": {"contracts"},
    "orchestrator": {"contracts", "evaluators", "envs", "agents"},
}


def imported_packages(source: str) -> set[str]:
    """The top-level names of every absolute import in a module's source."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def violations(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        forbidden = (imported_packages(path.read_text()) & set(ALLOWED)) - ALLOWED[package] - {package}
        found += [f"{path.relative_to(ROOT)} imports {other}" for other in sorted(forbidden)]
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_package_imports_upward_or_sideways(package):
    assert violations(package) == []


def test_the_check_sees_imports_inside_functions():
    source = "import json\ndef f():\n    from orchestrator.ledger import Ledger\n    import envs.alfworld\n"
    assert imported_packages(source) == {"json", "orchestrator", "envs"}
    assert imported_packages("from . import task\nfrom .generator import x\n") == set()


def test_every_package_has_a_layer():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert packages == set(ALLOWED)


def test_the_analysis_never_imports_the_viewer():
    """Inside orchestrator, the viewer renders the analysis' sweep model: it may import the analysis, never the
    reverse (the `report` command calls both from above them: orchestrator/report_command.py)."""
    found = []
    for path in sorted((ROOT / "orchestrator" / "analysis").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)} imports {n}" for n in names
                      if n.startswith(("orchestrator.viewer", "orchestrator.report_command"))]
    assert found == []
