"""The test command's guard on each module's wall time (tests/support/module_times.py), on a small suite of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.module_times import limit, over_budget

ROOT = Path(__file__).resolve().parent.parent


def test_a_module_over_its_limit_is_named_with_its_budget():
    assert limit(100) == 310
    budgets = {"tests/test_a.py": 100, "tests/test_b.py": 100}
    assert over_budget({"tests/test_a.py": 311, "tests/test_b.py": 309}, budgets) == [
        "tests/test_a.py: 311 s, over 310 s (its budget 100 s)"]
    assert over_budget({"tests/test_new.py": 211}, {}) == [
        "tests/test_new.py: 211 s, over 210 s (no budget recorded, default 60 s)"]


def run_suite(tmp_path: Path, mode: str, budgets: dict | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    budget_file = tmp_path / "budgets.json"
    if budgets is not None:
        budget_file.write_text(json.dumps(budgets))
    env = {**os.environ, "A2RL_MODULE_TIMES": mode, "A2RL_MODULE_TIMES_FILE": str(budget_file),
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.support.module_times", "-p",
                           "no:cacheprovider", "-o", "addopts=", "test_a.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_record_then_check_then_a_module_over_budget_fails_the_run(tmp_path):
    recorded = run_suite(tmp_path, "record", None)
    assert recorded.returncode == 0, recorded.stdout
    assert list(json.loads((tmp_path / "budgets.json").read_text())) == ["test_a.py"]

    assert run_suite(tmp_path, "check", None).returncode == 0  # its recorded budget: passes

    over = run_suite(tmp_path, "check", {"test_a.py": -100})  # a limit no run can meet
    assert over.returncode == 1, over.stdout
    assert "test_a.py:" in over.stdout and "over -190 s (its budget -100 s)" in over.stdout
    assert "2 passed" in over.stdout  # the tests themselves passed: only the guard failed the run

    assert run_suite(tmp_path, "off", {"test_a.py": -100}).returncode == 0
