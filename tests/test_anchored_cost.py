"""Anchored scores pooled across tasks, and what every run cost, on a small ledger with known answers written through
the real Ledger class and the record files the driver proxy and the judge leave (driver_calls, judge_calls)."""
from __future__ import annotations

import glob
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from contracts.records import append_jsonl
from contracts.specs import AgentSpec, Budget, CellSpec, ConfigError, DriverSpec
from contracts.task_spec import TaskSpec
from orchestrator.analysis import stats
from orchestrator.analysis.formats import MISSING
from orchestrator.analysis.report import build_report
from orchestrator.ledger import Ledger
from orchestrator.summary import print_summary

# Task "easy": baseline 40, reference 80 (span 40); task "hard": baseline 10, reference 20 (span 10); task "free"
# has no reference. Improvements in points; anchored = improvement / span.
TASKS = {"easy": (40.0, {"reference_score": 80.0, "reference_source": "a2rl reference run (test)"}),
         "hard": (10.0, {"reference_score": 20.0, "reference_source": "Paper et al. 2026, table 2"}),
         "free": (50.0, {})}
RUNS = {("easy", 0): 20.0, ("easy", 1): 10.0, ("hard", 0): 5.0, ("hard", 1): None, ("free", 0): 3.0}
DRIVER = {"name": "fake-gpt", "model": "gpt-fake", "provider": "openai"}


def spec(task: str, seed: int) -> CellSpec:
    return CellSpec(agent=AgentSpec(name="cli", kind="cli"),
                    driver=DriverSpec(name="fake-gpt", provider="openai", model="gpt-fake"),
                    task=TaskSpec.from_config({"name": task, "cls": "reasoning_gym", "base_model": "tiny",
                                               **TASKS[task][1]}), seed=seed,
                    sweep="anchor", budget=Budget(wall_time_s=3600, max_submissions=3, gpus=0.5))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Each cell ran 1800 s with 0.5 GPUs (0.25 GPU-h), made two driver calls (1000 + 200 tokens, $0.01 each) and,
    on task hard, its judge two calls of $0.002."""
    out = tmp_path_factory.mktemp("anchor")
    ledger = Ledger(out / "ledger.sqlite")
    specs = {key: spec(*key) for key in RUNS}
    ledger.add_cells(list(specs.values()))
    for (task, seed), improvement in RUNS.items():
        s, baseline = specs[task, seed], TASKS[task][0]
        cid = s.cell_id
        ledger.mark_running(cid, 1, 1000.0)
        adir = out / "cells" / cid / "attempt-1"
        adir.mkdir(parents=True)
        events = [{"t": 10.0 * i, "kind": "driver_usage", "key": f"{cid}:d{i}",
                   "payload": {"t": 1000.0 + i, "input_tokens": 1000, "output_tokens": 200, "cached_tokens": 0,
                               "cost_usd": 0.01}} for i in (1, 2)]
        if task == "hard":
            for _ in range(2):
                append_jsonl(adir / "judge_calls.jsonl", {"input_tokens": 300, "output_tokens": 5, "cost_usd": 0.002})
        if improvement is not None:
            events.append({"t": 50.0, "kind": "submission", "key": f"{cid}:s1", "payload": {
                "submission_id": 1, "score": baseline + improvement, "baseline_score": baseline,
                "improvement": improvement, "best": baseline + improvement, "flags": [], "error": None}})
        ledger.add_events(cid, 1, events)
        ledger.update_scores(cid, baseline if improvement is not None else None,
                             None if improvement is None else baseline + improvement, int(improvement is not None))
        ledger.finish(cid, "completed", 2800.0)
    ledger.close()
    report_dir = build_report(out, n_boot=200, wandb_cfg={"kind": "wandb", "project": "a2rl-test", "mode": "offline"})
    return out, report_dir, specs


def test_a_reference_score_needs_its_source_and_changes_no_cell_id():
    base = {"name": "t", "cls": "reasoning_gym", "base_model": "tiny"}
    assert TaskSpec.from_config(base).reference_score is None
    with pytest.raises(ConfigError, match="reference_score=55.0 needs reference_source"):
        TaskSpec.from_config({**base, "reference_score": 55.0})
    with pytest.raises(ConfigError, match="reference_score='high' must be a number"):
        TaskSpec.from_config({**base, "reference_score": "high", "reference_source": "x"})
    ok = TaskSpec.from_config({**base, "reference_score": 55, "reference_source": "run"})
    assert (ok.reference_score, ok.reference_source, ok.params) == (55.0, "run", {})
    plain = spec("free", 0)
    anchored = CellSpec(**{**plain.__dict__, "task": TaskSpec.from_config(
        {**plain.task.config, "reference_score": 9.0, "reference_source": "r"})})
    assert anchored.cell_id == plain.cell_id  # a reference added later keeps every finished cell


def test_every_cell_is_anchored_and_the_pool_beside_the_raw_one(swept):
    out, report_dir, specs = swept
    cells = pd.read_parquet(report_dir / "cells.parquet").set_index("cell_id")
    got = {key: cells.loc[s.cell_id, "anchored"] for key, s in specs.items()}
    assert got["easy", 0] == pytest.approx(0.5) and got["easy", 1] == pytest.approx(0.25)
    assert got["hard", 0] == pytest.approx(0.5)
    assert np.isnan(got["hard", 1]) and np.isnan(got["free", 0])  # no submission; no reference

    pooled = pd.read_parquet(report_dir / "pooled.parquet")
    row = pooled[pooled["infra_errors"] == "failure"].iloc[0]
    raw = np.array([20.0, 10.0, 5.0, 0.0, 3.0])
    assert row["n"] == 5 and row["mean"] == pytest.approx(raw.mean())
    # anchored: the run without a submission counts 0 there too; the task without a reference is left out
    anchored = np.array([0.5, 0.25, 0.5, 0.0])
    assert (row["anchored_n"], row["anchored_n_clusters"]) == (4, 2)
    assert row["anchored_mean"] == pytest.approx(anchored.mean())
    assert row["anchored_clustered_se"] == pytest.approx(
        stats.clustered_se(anchored, pd.Series(["easy", "easy", "hard", "hard"])))
    refs = pd.read_parquet(report_dir / "references.parquet").set_index("task")
    assert refs.loc["hard", "reference_source"] == "Paper et al. 2026, table 2" and refs.loc["easy", "baseline"] == 40

    md = (report_dir / "report.md").read_text()
    assert "anchored mean" in md and "anchored clustered SE" in md
    assert f"| cli | fake-gpt | failure | 3 | 5 | {raw.mean():+.3f} |" in md
    assert "| hard | 10.000 | 20.000 | Paper et al. 2026, table 2 |" in md
    assert f"| free | 50.000 | {MISSING} | none: not anchored |" in md
    report = json.loads((out / "cells" / specs["easy", 0].cell_id / "report.json").read_text())
    assert report["anchored"] == pytest.approx(0.5) and report["reference_score"] == 80.0


def test_every_row_has_its_cost_and_the_cost_of_a_point(swept):
    out, report_dir, specs = swept
    cells = pd.read_parquet(report_dir / "cells.parquet").set_index("cell_id")
    hard = cells.loc[specs["hard", 0].cell_id]
    assert (hard["driver_calls"], hard["driver_input_tokens"], hard["driver_output_tokens"]) == (2, 2000, 400)
    assert hard["driver_cost_usd"] == pytest.approx(0.02) and hard["judge_cost_usd"] == pytest.approx(0.004)
    assert hard["gpu_hours"] == pytest.approx(0.5 * 1800 / 3600) and hard["cost_usd"] == pytest.approx(0.024)
    assert cells.loc[specs["easy", 0].cell_id, "judge_cost_usd"] == 0

    imp = pd.read_parquet(report_dir / "improvement.parquet")
    hard = imp[(imp["task"] == "hard") & (imp["infra_errors"] == "failure")].iloc[0]
    assert hard["driver_tokens_mean"] == 2400 and hard["judge_cost_usd_mean"] == pytest.approx(0.004)
    assert hard["usd_per_point"] == pytest.approx(2 * 0.024 / 5.0)  # two runs' dollars over 5 points gained
    assert hard["gpu_hours_per_point"] == pytest.approx(0.5 / 5.0)
    pooled = pd.read_parquet(report_dir / "pooled.parquet")
    assert pooled["usd_per_point"].iloc[0] == pytest.approx((5 * 0.02 + 2 * 0.004) / 38.0)
    held = pd.read_parquet(report_dir / "held_out.parquet")
    assert "usd_per_point" in held.columns

    md = (report_dir / "report.md").read_text()
    assert "## Cost (per task x agent x driver x training mode)" in md
    assert f"| hard | cli | fake-gpt | free | 2 | 2400 | $0.0200 | $0.0040 | 0.250 | $0.0480 | ${0.048 / 5:.4f} |" in md

    # the table printed at the end of a sweep
    buf = io.StringIO()
    rows = {r["task"]: r for r in print_summary(Ledger(out / "ledger.sqlite"), [s.cell_id for s in specs.values()],
                                                buf)}
    assert rows["hard"]["driver_tokens"] == 2400 and rows["hard"]["judge_cost_usd"] == pytest.approx(0.004)
    assert rows["hard"]["usd_per_point"] == pytest.approx(0.048 / 5) and rows["hard"]["gpu_hours"] == 0.25
    assert "$/point" in buf.getvalue() and "0.0096" in buf.getvalue()

    # the report's W&B run (offline) holds the sweep's totals
    (log,) = glob.glob(str(Path(out) / "wandb" / "offline-run-*" / "*.wandb"))
    data = open(log, "rb").read()
    for key in (b"cost/driver_cost_usd", b"cost/judge_cost_usd", b"cost/gpu_hours", b"cost/cost_usd"):
        assert key in data, key
    (table,) = glob.glob(str(Path(out) / "wandb" / "offline-run-*" / "files" / "media" / "table" / "**" /
                              "improvement_*.table.json"), recursive=True)
    assert {"usd_per_point", "gpu_hours_per_point", "judge_cost_usd_mean"} <= set(json.loads(
        Path(table).read_text())["columns"])
