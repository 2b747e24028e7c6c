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


def module_graph() -> dict[str, set[str]]:
    """Every module of the project's packages -> the project modules it imports (also inside functions and under
    TYPE_CHECKING: a cycle there is a cycle in what the code means); `from pkg import name` is an import of the
    module pkg.name where there is one, else of pkg."""
    modules = {}
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                module = node.module if not node.level else \
                    ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                found = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                         for alias in node.names]
            else:
                continue
            graph[name] |= {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_anywhere():
    """No module imports one that imports it back, however far round (contracts/specs.py and task_spec.py did:
    ConfigError and a task's identity now sit below both, in contracts/errors.py and contracts/identity.py)."""
    assert cycles(module_graph()) == []


@pytest.mark.parametrize("package", ["evaluators", "orchestrator", "contracts", "envs", "agents"])
def test_inside_a_package_its_parts_import_one_way(package):
    """A package's parts (its modules and sub-packages, each taken whole) import one way: one that imports another
    is above it, never also below (evaluators/model_size.py imported backends/base for ModelLoadError while the
    backends import model_size: the error now lives in contracts/errors.py)."""
    graph = module_graph()

    def part(module: str) -> str | None:
        names = module.split(".")
        return names[1] if names[0] == package and len(names) > 1 else None

    parts: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if (here := part(module)) is not None:
            parts.setdefault(here, set())
            parts[here] |= {p for m in imported if (p := part(m)) is not None and p != here}
    for imported in list(parts.values()):
        for other in imported:
            parts.setdefault(other, set())
    assert cycles(parts) == []


def test_the_cycle_check_finds_a_cycle_and_a_long_one():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
