"""A guard on the test command's wall time: each test module's time, in this machine's units, against the budget
recorded for it.

The suite has to stay under 25 minutes on two cores, and every issue adds tests; a module that grows is caught in the
run that grows it, not a turn later. But a busy or slower machine is not a module that grew: a run beside other work
took 1,259 s for a module whose budget was 132 s, all its tests passing. So time is measured in the machine's pace
as it was while the module ran: a metronome process (started with the run) times a fixed CPU loop every
TICK_EVERY_S, and each test phase's seconds (setup, call, teardown, as pytest reports them: a session fixture counts
in the module that first asks for it) are divided by the loop's time around that phase and multiplied by UNIT_S's
value recorded with the budgets: seconds as the recording run would have spent them. Twice the load (the loop takes
twice as long) halves a phase's count; twice the work on the same machine doubles it.

tests/module_times.json holds the loop's median time in the recording run ("unit_s") and each module's seconds in
that unit ("modules"). A module fails the run when it counts more than SLACK times its budget plus GRACE_S seconds.
A module without a budget gets DEFAULT_S.

    A2RL_MODULE_TIMES=record scripts/test     # rewrites tests/module_times.json from this run's times
    A2RL_MODULE_TIMES=report scripts/test     # prints the modules over their budget, never fails the run
    A2RL_MODULE_TIMES=off scripts/test        # no check
    A2RL_MODULE_TIMES_FILE=path               # budgets kept elsewhere
    A2RL_MODULE_TIMES_OUT=path                # also write this run's times there (the record's format)

The same budgets order the run: the longest modules first (a module without a budget counts DEFAULT_S). pytest-xdist
hands whole modules to its workers in collection order (scripts/test: --dist loadfile --no-loadscope-reorder), so the
short ones fill in at the end instead of a long module starting last while the other worker idles.
"""
from __future__ import annotations

import bisect
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

BUDGETS = Path(os.environ.get("A2RL_MODULE_TIMES_FILE") or Path(__file__).resolve().parent.parent / "module_times.json")
SLACK, GRACE_S, DEFAULT_S = 1.5, 30.0, 60.0
# The loop: about 30 ms of one core on the 2-core development machine, once a second (1.5% of the machine). Long
# enough that the scheduler's credit to a process that slept (a few ms) does not hide the load.
TICK_EVERY_S, LOOP_N = 1.0, 400_000

METRONOME = """
import sys, time
n, every = int(sys.argv[1]), float(sys.argv[2])
while True:
    started = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    print(f"{time.time():.3f} {time.perf_counter() - started:.6f}", flush=True)
    time.sleep(every)
"""

phases: dict[str, list[tuple[float, float, float]]] = defaultdict(list)  # module -> (start, stop, seconds)


class Metronome:
    """The fixed loop's time, sampled while the run goes: (when it ended, seconds), in order."""

    def __init__(self):
        self.ticks: list[tuple[float, float]] = []
        self.proc = subprocess.Popen([sys.executable, "-c", METRONOME, str(LOOP_N), str(TICK_EVERY_S)],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            when, seconds = line.split()
            self.ticks.append((float(when), float(seconds)))

    def stop(self) -> list[tuple[float, float]]:
        """The ticks so far (waiting for the first one in a run shorter than the metronome's start)."""
        for _ in range(600):
            if self.ticks or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.proc.kill()
        self.proc.wait()
        return self.ticks[:]


metronome: Metronome | None = None


def pace(ticks: list[tuple[float, float]], start: float, stop: float) -> float | None:
    """The loop's mean time around [start, stop] (a tick on either side of a phase shorter than a tick)."""
    if not ticks:
        return None
    times = [t for t, _ in ticks]
    lo = max(0, bisect.bisect_left(times, start) - 1)
    hi = min(len(ticks), bisect.bisect_right(times, stop) + 1)
    return statistics.fmean(seconds for _, seconds in ticks[lo:hi])


def in_units(measured: dict[str, list[tuple[float, float, float]]], ticks: list[tuple[float, float]],
             unit_s: float | None) -> dict[str, float]:
    """Each module's seconds as a machine at the loop time unit_s would have spent them (unit_s None, or no ticks:
    the seconds as measured)."""
    out = {}
    for module, spans in measured.items():
        total = 0.0
        for start, stop, seconds in spans:
            loop_s = pace(ticks, start, stop)
            total += seconds * (unit_s / loop_s if unit_s and loop_s else 1.0)
        out[module] = total
    return out


def limit(budget_s: float) -> float:
    return SLACK * budget_s + GRACE_S


def over_budget(counted: dict[str, float], budgets: dict[str, float]) -> list[str]:
    lines = []
    for module, seconds in sorted(counted.items()):
        budget = budgets.get(module, DEFAULT_S)
        if seconds > limit(budget):
            where = f"its budget {budget:.0f} s" if module in budgets else f"no budget recorded, default {budget:.0f} s"
            lines.append(f"{module}: {seconds:.0f} s in the budgets' unit, over {limit(budget):.0f} s ({where})")
    return lines


def write_times(path: Path, ticks: list[tuple[float, float]]) -> None:
    """This run's module times in its own loop's median: tests/module_times.json's format."""
    unit_s = statistics.median(s for _, s in ticks) if ticks else None
    counted = in_units(phases, ticks, unit_s)
    path.write_text(json.dumps({"unit_s": unit_s and round(unit_s, 5),
                                "modules": {m: round(s, 1) for m, s in sorted(counted.items())}}, indent=1) + "\n")


def mode() -> str:
    return os.environ.get("A2RL_MODULE_TIMES", "check")


def pytest_configure(config: pytest.Config) -> None:
    global metronome
    if not hasattr(config, "workerinput") and mode() != "off" and metronome is None:
        metronome = Metronome()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    budgets = json.loads(BUDGETS.read_text()).get("modules", {}) if BUDGETS.exists() else {}
    # a stable sort: each module's tests keep their order; every worker collects the same order (xdist requires it)
    items.sort(key=lambda item: -budgets.get(item.nodeid.split("::")[0], DEFAULT_S))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # pytest-xdist sends each worker's reports (with their start and stop) to the controller
    phases[report.nodeid.split("::")[0]].append((report.start, report.stop, report.duration))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller checks
        return
    ticks = metronome.stop() if metronome else []
    if mode() == "off" or not phases:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if mode() == "record":
        write_times(BUDGETS, ticks)
        return
    if os.environ.get("A2RL_MODULE_TIMES_OUT"):  # this run's times as budgets, beside the check
        write_times(Path(os.environ["A2RL_MODULE_TIMES_OUT"]), ticks)
    recorded = json.loads(BUDGETS.read_text()) if BUDGETS.exists() else {}
    unit_s = recorded.get("unit_s")
    lines = over_budget(in_units(phases, ticks, unit_s), recorded.get("modules", {}))
    loop = f"the loop's median {statistics.median(s for _, s in ticks):.3f} s" if ticks else "no loop times"
    if lines:
        failing = mode() == "check"
        text = (f"test modules over their time budget ({loop} in this run, {unit_s} s when the budgets were "
                "recorded; tests/support/module_times.py): make them faster, move what a faster test covers behind "
                "-m slow, or record a new budget with A2RL_MODULE_TIMES=record"
                + ("" if failing else " (reported only: A2RL_MODULE_TIMES=report)") + ":\n  " + "\n  ".join(lines))
        if reporter is not None:
            reporter.write_line(text, red=failing)
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
