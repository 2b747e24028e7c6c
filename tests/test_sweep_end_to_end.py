"""Real sweeps with real grading: W&B offline runs per cell, and the demo sweep's improvement over the base model."""
from __future__ import annotations

import glob
import json
import subprocess
import sys

import pandas as pd
import pytest

from orchestrator.ledger import Ledger
from tests.conftest import ROOT
from tests.support.cells import cells_ended


@pytest.mark.slow  # the CLI sweep's cells write offline W&B runs too (test_cli_agents: driver usage per cell's run)
def test_wandb_offline_run_per_cell(run_sweep):
    _, _, out = run_sweep(["sweep=smoke", "sweep.agents=[copy_base]", "sweep.seeds=[0,1]", "logger=wandb",
                           "logger.mode=offline"])
    runs = sorted(glob.glob(str(out / "wandb" / "offline-run-*" / "*.wandb")))
    assert len(runs) == 2
    cells = Ledger(out / "ledger.sqlite").cells()
    cells_ended(cells.values())
    for path in runs:
        data = open(path, "rb").read()  # the run's protobuf log: its strings are stored as they are
        cell_id = next(c for c in cells if c.encode() in data)
        seed = cells[cell_id]["seed"]
        for expected in (b"agent:copy_base", b"driver:none", b"task:arithmetic", f"seed:{seed}".encode(),
                         b"smoke", b"submission/score", b"submission/best", b"submission/index", b"elapsed_s",
                         b"cost/driver_cost_usd", b"cost/judge_cost_usd", b"cost/gpu_hours"):
            assert expected in data, (expected, path)

    # The manifest was written before the first cell started, and a resumed run with another seed is kept beside it
    first = json.loads((out / "manifest.json").read_text())
    assert (out / "manifest.json").stat().st_mtime < min(c["started_at"] for c in cells.values())
    assert first["seeds"] == [0, 1] and len(first["cells"]) == 2 and first["a2rl"]["commit"]
    assert first["tasks"]["arithmetic"]["protocol"] == "a2rl" and first["sandbox"]["network"] == "isolated"
    assert first["hardware"]["cpus"] and first["hardware"]["cluster"]["CPU"] > 0
    _, text, _ = run_sweep(["sweep=smoke", "sweep.agents=[copy_base]", "sweep.seeds=[0,1,2]"], out)
    assert "differs from the sweep's first (manifest.json) in cells, " in text and "recorded in manifest-2.json" in text
    assert json.loads((out / "manifest.json").read_text()) == first
    assert json.loads((out / "manifest-2.json").read_text())["seeds"] == [0, 1, 2]
    cells_ended(Ledger(out / "ledger.sqlite").cells().values())  # the new seed's cell too
    from orchestrator.analysis.report import build_report

    report = (build_report(out, n_boot=100) / "report.md").read_text()
    assert "Written before the first cell started: [manifest.json](../manifest.json)" in report
    assert "[manifest-2.json](../manifest-2.json)" in report and "`config.sweep.seeds`" in report
    assert "`seeds`" in report and "`a2rl.commit`" not in report


def test_demo_sweep_sft_beats_the_base_model_and_copy_is_flagged(run_sweep):
    # Ended by its submissions, not its clock: two rounds of 250 steps on any machine (a loaded one trained too
    # little in 75 s to beat the base model), half the time of the old 75 s cells on a quiet one.
    _, text, out = run_sweep(["sweep=demo", "sweep.budget.wall_time_s=600", "sweep.budget.max_submissions=2"])
    ledger = Ledger(out / "ledger.sqlite")
    rows = list(ledger.cells().values())
    assert len(rows) == 4, rows
    cells_ended(rows)  # each stopped on its own or at its budget, none with an error
    sft = [r for r in rows if r["agent"] == "sft"]
    copies = [r for r in rows if r["agent"] == "copy_base"]
    assert all(r["improvement"] is not None and r["improvement"] > 0 for r in sft), sft
    assert all(r["improvement"] == 0 and r["n_submissions"] == 1 for r in copies), copies
    flags = [e["payload"]["flags"] for e in ledger.events(kind="submission") if e["cell_id"] in
             {r["cell_id"] for r in copies}]
    assert all("copy_of_base" in f for f in flags)
    # the summary table: improvement mean ± SEM per agent
    line = next(ln for ln in text.splitlines() if ln.startswith("arithmetic") and " sft " in ln)
    assert "±" in line and "(n=2)" in line

    # every cell got its run report as it ended
    for row in rows:
        report = (out / "cells" / row["cell_id"] / "report.md").read_text()
        assert row["agent"] in report and row["status"] in report

    # the analyses on this real sweep, through the command line
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "report", f"output_dir={out}", "logger=none"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = (out / "report" / "report.md").read_text()
    assert "sft" in report and "copy_base" in report
    cells = pd.read_parquet(out / "report" / "cells.parquet")
    assert len(cells) == 4 and set(cells["agent"]) == {"sft", "copy_base"}
    assert list((out / "report").glob("*.png"))
    filtered = subprocess.run([sys.executable, "-m", "orchestrator", "report", f"output_dir={out}", "logger=none",
                               "filter.agent=nope"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert filtered.returncode == 2 and len(filtered.stderr.strip().splitlines()) == 1, filtered.stderr


def test_report_on_a_missing_ledger_is_one_clear_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "report", f"output_dir={tmp_path}", "logger=none"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no ledger" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # ~2.5 min; the level-3 path runs in scripts/test through test_paper_data's WebShop cell, the agent
# client's sft_grpo against real graders and the lockstep grading tests (final split included)
def test_alfworld_sweep_runs_sft_grpo_in_its_sandbox(run_sweep):
    """Level 3 through the orchestrator: sft_grpo, sandboxed, warms up on the expert steps, plays train games through
    the rollout service for GRPO, and each submission is graded by ReAct rollouts on the hidden eval games."""
    small_task = ["task=alfworld", "task.data_path=null", "task.n_train=3", "task.n_eval=2",
                  "task.task_types=[pick,clean,look]", "task.expert_episodes=2", "task.rollout.num_hosts=1",
                  "task.rollout.max_sessions_per_run=8", "task.grader.batch_size=8", "task.grader.max_new_tokens=12"]
    quick_agent = ["agent=sft_grpo", "agent.args.sft_steps=10", "+agent.args.grpo_rounds=1",
                   "agent.args.grpo_steps_per_round=2", "agent.args.episodes_per_round=1", "agent.args.horizon=3",
                   "agent.args.submit_every=1", "agent.args.grading_estimate_s=20", "agent.args.margin_s=5",
                   "+agent.args.max_new_tokens=12"]
    # The agent stops after its one GRPO round: the budget only has to be more than a slow machine needs (120 s
    # was not, once, on a busy one), and a fast one does not wait for it.
    _, _, out = run_sweep(["sweep=alfworld_small", "sweep.budget.wall_time_s=1200", *small_task, *quick_agent])
    ledger = Ledger(out / "ledger.sqlite")
    (cell,) = ledger.cells().values()
    assert cell["agent"] == "sft_grpo" and cell["status"] == "completed", cell
    subs = [e["payload"] for e in ledger.events(kind="submission")]
    paths = [s["model_path"] for s in subs]
    assert paths[0] == "output/sft" and any(p.startswith("output/grpo-") for p in paths[1:]), paths
    assert all(s["score"] is not None and s["error"] is None for s in subs), subs
    (outcome,) = [e["payload"] for e in ledger.events(kind="outcome")]
    env = outcome["env_usage"]  # what it did in the environment, recorded with the cell
    assert env["resets"] > 0 and env["steps"] > 0 and env["closed"] >= 0, env
    # the held-out score: its best submission (it marks none final) played on the final games (final_size: null,
    # as many as n_eval), recorded in final.json and the ledger
    final = json.loads((out / "cells" / cell["cell_id"] / "attempt-1" / "final.json").read_text())
    best = next(s for s in subs if s["score"] == max(s["score"] for s in subs))
    assert final["n"] == 2 and final["error"] is None and final["score"] is not None, final
    assert (final["submission_id"], final["feedback_score"]) == (best["submission_id"], best["score"]), final
    assert (cell["final_score"], cell["final_baseline_score"], cell["final_improvement"]) == (
        final["score"], final["baseline_score"], final["improvement"])
    stdout = (out / "cells" / cell["cell_id"] / "attempt-1" / "agent.stdout").read_text()
    assert '"onpolicy_success"' in stdout
    assert "Environment (rollout service)" in (out / "cells" / cell["cell_id"] / "report.md").read_text()
