"""A guard on the test command's wall time: each test module's time against the budget recorded for it.

The suite has to stay under 25 minutes on two cores, and every issue adds tests; a module that grows is caught in the
run that grows it, not a turn later. tests/module_times.json holds each module's seconds on the quiet 2-core machine
(setup, call and teardown of its tests, as pytest reports them: a session fixture counts in the module that first
asks for it). A module fails the run when it takes more than SLACK times its budget plus GRACE seconds: a loaded
machine (about twice the quiet time, measured) passes, a module that doubled its work on a quiet one does not. A
module without a budget gets DEFAULT_S.

    A2RL_MODULE_TIMES=record scripts/test     # rewrites tests/module_times.json from this run's times
    A2RL_MODULE_TIMES=off scripts/test        # no check (a machine far slower than the one the budgets are from)
    A2RL_MODULE_TIMES_FILE=path               # budgets kept elsewhere (another machine's)
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

BUDGETS = Path(os.environ.get("A2RL_MODULE_TIMES_FILE") or Path(__file__).resolve().parent.parent / "module_times.json")
SLACK, GRACE_S, DEFAULT_S = 2.5, 60.0, 60.0

times: dict[str, float] = defaultdict(float)


def limit(budget_s: float) -> float:
    return SLACK * budget_s + GRACE_S


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # pytest-xdist sends each worker's reports to the controller, so this sums the same way with or without it
    times[report.nodeid.split("::")[0]] += report.duration


def over_budget(measured: dict[str, float], budgets: dict[str, float]) -> list[str]:
    lines = []
    for module, seconds in sorted(measured.items()):
        budget = budgets.get(module, DEFAULT_S)
        if seconds > limit(budget):
            where = f"its budget {budget:.0f} s" if module in budgets else f"no budget recorded, default {budget:.0f} s"
            lines.append(f"{module}: {seconds:.0f} s, over {limit(budget):.0f} s ({where})")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller checks
        return
    mode = os.environ.get("A2RL_MODULE_TIMES", "check")
    if mode == "off" or not times:
        return
    if mode == "record":
        BUDGETS.write_text(json.dumps({m: round(s, 1) for m, s in sorted(times.items())}, indent=1) + "\n")
        return
    lines = over_budget(times, json.loads(BUDGETS.read_text()) if BUDGETS.exists() else {})
    if lines:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = ("test modules over their time budget (tests/support/module_times.py; make them faster, move what a "
                "faster test covers behind -m slow, or record a new budget with A2RL_MODULE_TIMES=record):\n  "
                + "\n  ".join(lines))
        if reporter is not None:
            reporter.write_line(text, red=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
