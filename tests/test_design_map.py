"""docs/design.md's code map names every module of the five packages: a module added without a line there fails
here, so the map is the tree as it is (one row per module, or a folder's row naming its modules)."""
from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGES = ("contracts", "evaluators", "envs", "agents", "orchestrator")


def code_map_rows() -> list[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Code map", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def on_the_map(path: str, rows: list[str]) -> bool:
    """`pkg/mod.py` in a row, or its folder (`pkg/sub/`) first in a row that names the module (`mod`)."""
    folder, stem = path.rsplit("/", 1)[0] + "/", path.rsplit("/", 1)[1].removesuffix(".py")
    return any(f"`{path}`" in row or (row.startswith(f"| `{folder}`") and re.search(rf"`{stem}`", row))
               for row in rows)


def product_modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if p.name not in ("__init__.py", "__main__.py"))


def test_every_product_module_is_on_the_design_maps():
    rows = code_map_rows()
    assert [m for m in product_modules() if not on_the_map(m, rows)] == []


def test_the_map_names_nothing_that_is_not_there():
    """Every path the map names exists (a module moved or removed leaves no stale row)."""
    named = {p for row in code_map_rows() for p in re.findall(r"`((?:contracts|evaluators|envs|agents|orchestrator)"
                                                             r"/[\w/]*(?:\.py|/))`", row)}
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_the_check_tells_a_listed_module_from_a_missing_one():
    rows = ["| `envs/webshop/` | `task` and `paper_task`, `shop` |", "| `contracts/task.py` | the task |"]
    assert on_the_map("envs/webshop/shop.py", rows) and on_the_map("contracts/task.py", rows)
    assert not on_the_map("envs/webshop/reward.py", rows) and not on_the_map("contracts/specs.py", rows)
    assert not on_the_map("envs/alfworld/task.py", rows)  # a stem listed under another folder does not count
