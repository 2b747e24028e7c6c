"""SIGKILL the orchestrator mid-sweep: nothing recorded is lost, and the same command finishes only the rest."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from orchestrator.ledger import Ledger
from orchestrator.runner import RAY_AGENTS
from tests.conftest import ROOT
from tests.support.cells import cells_ended


def name_of(proc: psutil.Process) -> str | None:
    try:
        return proc.name()
    except psutil.Error:  # gone already
        return None


def test_sigkill_mid_sweep_then_resume_runs_only_the_rest(cache_dir, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "orchestrator", "sweep=smoke", "sweep.agents=[noop,sleeper]", "sweep.seeds=[0,1]",
           "sweep.budget.wall_time_s=4", f"output_dir={out}", f"cache_dir={cache_dir}", "logger=none",
           "cluster.num_cpus=2", "grading.port=0"]
    # As a user runs it: the command line itself must turn on Ray's token auth (before ray is imported).
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}, "A2RL_CACHE_DIR": str(cache_dir)}
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(tmp_path / "first.log", "w"), stderr=subprocess.STDOUT)
    ledger_path = out / "ledger.sqlite"
    deadline = time.time() + 240
    finished_before = {}
    try:
        while time.time() < deadline:
            time.sleep(0.5)
            if not ledger_path.exists():
                continue
            rows = Ledger(ledger_path).cells()
            done = {c: r for c, r in rows.items() if r["status"] in ("completed", "budget_exhausted")}
            running = [r for r in rows.values() if r["status"] == "running"]
            if done and running and any(r["agent"] == "sleeper" for r in running):
                finished_before = done
                break
        assert finished_before, (tmp_path / "first.log").read_text()[-3000:]
        children = psutil.Process(first.pid).children(recursive=True)
        first.send_signal(signal.SIGKILL)  # a crash: no cleanup code runs
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    # Ray's workers share the driver's fate, and each sandbox dies with its parent: no cell process lingers.
    # (Ray's dashboard and runtime-env agents outlive a killed driver until the next run reaps them: not waited for)
    gone, alive = psutil.wait_procs([p for p in children if name_of(p) not in RAY_AGENTS], timeout=30)
    alive += [p for p in children if name_of(p) in RAY_AGENTS]
    lingering = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert all(p.name() in RAY_AGENTS for p in lingering), lingering

    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    rows = Ledger(ledger_path).cells()
    assert len(rows) == 4, rows
    cells_ended(rows.values())  # completed with no error, or budget_exhausted naming its limit
    assert {(r["status"], r["limit_hit"]) for r in rows.values() if r["agent"] == "sleeper"} == {
        ("budget_exhausted", "wall_time")}, rows  # the sleeper works until its wall time ends it
    for cell_id, before in finished_before.items():
        after = rows[cell_id]
        assert after["attempts"] == before["attempts"] == 1, "a finished cell ran again"
        assert (after["status"], after["ended_at"]) == (before["status"], before["ended_at"])
    # the interrupted cell ran again as a new attempt; its first attempt's events are still in the ledger
    rerun = [r for r in rows.values() if r["attempts"] == 2]
    assert rerun, "the cell cut off by the crash should have been run again"
    events = Ledger(ledger_path).events(cell_id=rerun[0]["cell_id"])
    assert {e["attempt"] for e in events} == {1, 2}
    assert f"{4 - len(finished_before)} to run" in second.stdout
    # the manifest holds the command line as Hydra read it: what `plan` repeats to extend the sweep (plan_command.py)
    assert json.loads((out / "manifest.json").read_text())["overrides"] == cmd[3:]
    # Ray's agents that outlived the killed cluster were reaped when the next local cluster started
    assert not [p for p in lingering if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], lingering
