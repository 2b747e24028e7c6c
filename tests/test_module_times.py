"""The test command's guard on each module's wall time (tests/support/module_times.py), on a small suite of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.module_times import in_units, limit, over_budget

ROOT = Path(__file__).resolve().parent.parent


def test_a_module_over_its_limit_is_named_with_its_budget():
    assert limit(100) == 180
    budgets = {"tests/test_a.py": 100, "tests/test_b.py": 100}
    assert over_budget({"tests/test_a.py": 181, "tests/test_b.py": 179}, budgets) == [
        "tests/test_a.py: 181 s in the budgets' unit, over 180 s (its budget 100 s)"]
    assert over_budget({"tests/test_new.py": 121}, {}) == [
        "tests/test_new.py: 121 s in the budgets' unit, over 120 s (no budget recorded, default 60 s)"]


def test_time_counts_in_the_machines_pace_a_busy_machine_passes_and_doubled_work_does_not():
    """Budgets recorded where the loop took 0.03 s. A module of 100 s there: on a machine three times as busy (the
    loop takes 0.09 s around it) it takes 300 s and counts 100; with twice its work at the recorded pace it counts
    200, over its limit of 180."""
    def ticks(loop_s: float, until: float) -> list[tuple[float, float]]:
        return [(float(t), loop_s) for t in range(0, int(until) + 2)]

    busy = in_units({"tests/test_a.py": [(0.0, 150.0, 150.0), (150.0, 300.0, 150.0)]}, ticks(0.09, 300), 0.03)
    assert busy == {"tests/test_a.py": pytest.approx(100.0)}
    assert over_budget(busy, {"tests/test_a.py": 100}) == []
    doubled = in_units({"tests/test_a.py": [(0.0, 200.0, 200.0)]}, ticks(0.03, 200), 0.03)
    assert over_budget(doubled, {"tests/test_a.py": 100}) != []
    # a phase shorter than a tick takes the ticks on either side; no ticks, or no recorded unit: seconds as measured
    assert in_units({"m": [(10.2, 10.4, 0.2)]}, [(10.0, 0.06), (11.0, 0.06)], 0.03) == {"m": pytest.approx(0.1)}
    assert in_units({"m": [(0.0, 5.0, 5.0)]}, [], 0.03) == in_units({"m": [(0.0, 5.0, 5.0)]}, ticks(0.09, 5), None)


def pytest_in(folder: Path, mode: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """pytest on the suite in folder with the guard as a plugin, its budgets in folder/budgets.json."""
    env = {**os.environ, "A2RL_MODULE_TIMES": mode, "A2RL_MODULE_TIMES_FILE": str(folder / "budgets.json"),
           "PYTHONPATH": str(ROOT), **extra}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.support.module_times", "-p",
                           "no:cacheprovider", "-o", "addopts=", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def run_suite(tmp_path: Path, mode: str, budgets: dict | None, **extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    if budgets is not None:
        (tmp_path / "budgets.json").write_text(json.dumps(budgets))
    return pytest_in(tmp_path, mode, "-q", "test_a.py", **extra)


def test_record_then_check_then_a_module_over_budget_fails_the_run(tmp_path):
    recorded = run_suite(tmp_path, "record", None)
    assert recorded.returncode == 0, recorded.stdout
    written = json.loads((tmp_path / "budgets.json").read_text())
    assert list(written["modules"]) == ["test_a.py"] and written["unit_s"] > 0  # the metronome's loop was timed

    out = tmp_path / "this_run.json"
    assert run_suite(tmp_path, "check", None, A2RL_MODULE_TIMES_OUT=str(out)).returncode == 0  # its recorded budget
    assert list(json.loads(out.read_text())["modules"]) == ["test_a.py"]  # and this run's times beside the check

    over = {"unit_s": written["unit_s"], "modules": {"test_a.py": -100}}  # a limit no run can meet
    failed = run_suite(tmp_path, "check", over)
    assert failed.returncode == 1, failed.stdout
    assert "test_a.py:" in failed.stdout and "over -120 s (its budget -100 s)" in failed.stdout
    assert "2 passed" in failed.stdout  # the tests themselves passed: only the guard failed the run

    reported = run_suite(tmp_path, "report", over)  # said, not failed
    assert reported.returncode == 0 and "over -120 s (its budget -100 s)" in reported.stdout, reported.stdout
    assert run_suite(tmp_path, "off", over).returncode == 0


def test_two_workers_take_the_longest_modules_first_and_each_modules_tests_in_order(tmp_path):
    """Budgets order the run: modules longest first (a module without a budget counts the default), each module's
    tests in their own order; with two workers as scripts/test runs them, the two longest start at once."""
    for name in "abcd":
        (tmp_path / f"test_{name}.py").write_text(
            "import os\n\n"
            "def ran(test):\n"
            "    with open('ran.txt', 'a') as f:\n"
            "        f.write(f\"{os.environ.get('PYTEST_XDIST_WORKER')} {__name__} {test}\\n\")\n\n"
            + "".join(f"def test_{n}():\n    ran('{n}')\n\n" for n in ("one", "two", "three")))
    budgets = {"modules": {"test_a.py": 1, "test_b.py": 500, "test_d.py": 90}}  # test_c.py: none (default 60 s)
    (tmp_path / "budgets.json").write_text(json.dumps(budgets))

    def pytest(*args: str) -> str:
        done = pytest_in(tmp_path, "off", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    listed = [line.split("::")[0] for line in pytest("--collect-only", "-q").splitlines() if "::" in line]
    assert listed == ["test_b.py"] * 3 + ["test_d.py"] * 3 + ["test_c.py"] * 3 + ["test_a.py"] * 3

    pytest("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
    by_worker: dict[str, list[tuple[str, str]]] = {}
    for line in (tmp_path / "ran.txt").read_text().splitlines():
        worker, module, test = line.split()
        by_worker.setdefault(worker, []).append((module, test))
    assert sorted(ran[0][0] for ran in by_worker.values()) == ["test_b", "test_d"]  # the two longest, at once
    for ran in by_worker.values():
        for module in {m for m, _ in ran}:
            assert [t for m, t in ran if m == module] == ["one", "two", "three"]
