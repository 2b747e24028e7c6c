"""The sweep report and the per-cell run reports on a synthetic ledger with known answers, written through the
real Ledger class, plus the notebook executed on the report's exports."""
import json
import os
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

from contracts.task_spec import TaskSpec
from contracts.code_snapshots import snapshot_code
from contracts.specs import AgentSpec, Budget, CellSpec, ConfigError, DriverSpec
from orchestrator.analysis import curves, tables
from orchestrator.analysis.report import build_report
from orchestrator.analysis.run_report import cell_report, write_cell_reports
from orchestrator.ledger import Ledger

ESTIMATED = {"input_tokens": "characters/4", "output_tokens": "characters/4"}
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "analysis.ipynb"
BASELINE = 0.5


def spec(task: str, agent: str, seed: int, driver: str = "none") -> CellSpec:
    return CellSpec(agent=AgentSpec(name=agent, kind="builtin"), driver=DriverSpec(name=driver),
                    task=TaskSpec.from_config({"name": task, "cls": "arithmetic", "base_model": "tiny"}), seed=seed,
                    sweep="synth",
                    budget=Budget(wall_time_s=100, max_submissions=4, max_tokens=1000))


def record_cell(ledger: Ledger, out: Path, s: CellSpec, subs: list, status: str, limit_hit=None, usage=(),
                exit_code=0, attempt=1, stderr=None):
    """subs: (t, improvement or None for a failed evaluation, flags). Writes code snapshots like the grader."""
    cid = s.cell_id
    ledger.mark_running(cid, attempt, 1000.0)
    # usage: (t, tokens) or (t, tokens, how the proxy estimated them: a stream cut before the server's usage)
    events = [{"t": u[0], "kind": "driver_usage", "payload": {"input_tokens": u[1], "output_tokens": 0,
                                                              "cost_usd": 0.01, "estimated": (u[2:] or [None])[0]}}
              for u in usage]
    code = out / "workspaces" / cid / "code"
    code.mkdir(parents=True, exist_ok=True)
    best = None
    for i, (t, improvement, flags) in enumerate(subs, 1):
        (code / "train.py").write_text("".join(f"step {j}\n" for j in range(i)))
        sha = snapshot_code(code, out / "cells" / cid / "code.git", f"submission {i}")
        score = None if improvement is None else BASELINE + improvement
        best = score if best is None or (score is not None and score > best) else best
        events.append({"t": t, "kind": "submission", "key": f"{cid}/{attempt}/sub/{i}", "payload": {
            "submission_id": i, "model_path": f"output/m{i}", "score": score, "baseline_score": BASELINE,
            "improvement": improvement, "best": best, "flags": flags,
            "error": None if improvement is not None else "not a loadable model", "elapsed_s": t,
            "code_commit": sha}})
    events.append({"t": 90.0, "kind": "outcome", "payload": {
        "status": status, "limit_hit": limit_hit, "exit_code": exit_code, "best_score": best,
        "baseline_score": BASELINE, "n_submissions": len(subs), "elapsed_s": 90.0, "error": None}})
    ledger.add_events(cid, attempt, events)
    ledger.update_scores(cid, BASELINE, best, len(subs))
    ledger.finish(cid, status, 1090.0, limit_hit=limit_hit, error="exit code 1" if status == "agent_error" else None)
    if stderr:
        attempt_dir = out / "cells" / cid / f"attempt-{attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        (attempt_dir / "agent.stderr").write_text(stderr)


def infra_error(ledger: Ledger, s: CellSpec):
    ledger.mark_running(s.cell_id, 1, 1000.0)
    ledger.add_events(s.cell_id, 1, [{"t": 1.0, "kind": "status", "payload": {"status": "infra_error"}}])
    ledger.finish(s.cell_id, "infra_error", 1001.0, error="node lost")


@pytest.fixture(scope="module")
def synthetic_sweep(tmp_path_factory):
    """Known answers (improvement per cell):
    t1/sft: 0.1, 0.3, 0 (no valid submission) -> mean 0.1333; t1/copy_base: 0, 0;
    t2/sft: 0.2, infra error, one pending cell; t2/copy_base: infra error only."""
    out = tmp_path_factory.mktemp("sweep")
    ledger = Ledger(out / "ledger.sqlite")
    specs = {key: spec(*key) for key in [("t1", "sft", 0), ("t1", "sft", 1), ("t1", "sft", 2), ("t1", "copy_base", 0),
                                         ("t1", "copy_base", 1), ("t2", "sft", 0), ("t2", "sft", 1),
                                         ("t2", "sft", 2), ("t2", "copy_base", 0)]}
    ledger.add_cells(list(specs.values()))
    # An earlier attempt of t1/sft/0 ended in an infra error; its submission must not count.
    ledger.mark_running(specs["t1", "sft", 0].cell_id, 1, 900.0)
    ledger.add_events(specs["t1", "sft", 0].cell_id, 1, [{"t": 5.0, "kind": "submission", "payload": {
        "submission_id": 1, "score": 0.99, "baseline_score": BASELINE, "improvement": 0.49, "flags": [],
        "error": None, "code_commit": None}}])
    record_cell(ledger, out, specs["t1", "sft", 0], [(10.0, -0.05, []), (30.0, 0.1, [])], "completed",
                usage=[(5.0, 100), (25.0, 200)], attempt=2)
    record_cell(ledger, out, specs["t1", "sft", 1], [(20.0, 0.3, []), (40.0, 0.2, [])], "budget_exhausted",
                limit_hit="wall_time", usage=[(5.0, 50, ESTIMATED)])
    record_cell(ledger, out, specs["t1", "sft", 2], [(20.0, None, [])], "agent_error", exit_code=1,
                stderr="Traceback (most recent call last):\nValueError: bad learning rate\n")
    for seed in (0, 1):
        record_cell(ledger, out, specs["t1", "copy_base", seed], [(5.0, 0.0, ["copy_of_base"])], "completed")
    record_cell(ledger, out, specs["t2", "sft", 0], [(50.0, 0.2, [])], "completed")
    infra_error(ledger, specs["t2", "sft", 1])
    infra_error(ledger, specs["t2", "copy_base", 0])
    ledger.close()
    report_dir = build_report(out, wandb_cfg={"kind": "wandb", "project": "a2rl-test", "mode": "offline"})
    return out, report_dir, specs


def group(frame: pd.DataFrame, task: str, agent: str, policy: str, **extra) -> pd.Series:
    mask = (frame["task"] == task) & (frame["agent"] == agent) & (frame["infra_errors"] == policy)
    for key, value in extra.items():
        mask &= frame[key] == value
    rows = frame[mask]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_report_tables_have_the_known_answers(synthetic_sweep):
    out, report_dir, _ = synthetic_sweep
    imp = pd.read_parquet(report_dir / "improvement.parquet")
    row = group(imp, "t1", "sft", "failure")
    assert row["n"] == 3 and row["mean"] == pytest.approx(0.4 / 3)
    assert row["se"] == pytest.approx(np.std([0.1, 0.3, 0.0], ddof=1) / np.sqrt(3))
    assert row["ci_lo"] <= row["mean"] <= row["ci_hi"]
    assert group(imp, "t2", "sft", "failure")["mean"] == pytest.approx(0.1)  # 0.2 and an infra error as 0
    assert group(imp, "t2", "sft", "exclude")["mean"] == pytest.approx(0.2)
    lost = group(imp, "t2", "copy_base", "exclude")
    assert lost["n"] == 0 and lost["note"] == "all runs lost to infra errors"

    best = pd.read_parquet(report_dir / "best_of_k.parquet")
    assert group(best, "t1", "sft", "exclude", k=2)["expected_best"] == pytest.approx((0.3 + 0.1 + 0.3) / 3)
    assert group(best, "t1", "sft", "exclude", k=3)["expected_best"] == pytest.approx(0.3)
    short = group(best, "t2", "sft", "exclude", k=2)
    assert np.isnan(short["expected_best"]) and short["note"] == "needs 2 runs, has 1"

    passk = pd.read_parquet(report_dir / "pass_at_k.parquet")
    assert group(passk, "t1", "sft", "exclude", k=1)["pass_at_k"] == pytest.approx(2 / 3)
    assert group(passk, "t1", "copy_base", "exclude", k=2)["pass_at_k"] == 0.0

    pooled = pd.read_parquet(report_dir / "pooled.parquet")
    sft = pooled[(pooled["agent"] == "sft") & (pooled["infra_errors"] == "failure")].iloc[0]
    assert sft["n"] == 5 and sft["n_clusters"] == 2 and sft["mean"] == pytest.approx(0.12)
    # By hand: residual sums per task 0.04 and -0.04, V = 2/1 * (0.04^2 + 0.04^2) / 5^2.
    assert sft["clustered_se"] == pytest.approx(np.sqrt(2 * 2 * 0.04 ** 2 / 25))


def test_report_markdown_figures_and_exports(synthetic_sweep):
    out, report_dir, specs = synthetic_sweep
    text = (report_dir / "report.md").read_text()
    assert "**8 of 9 cells finished; 1 missing**" in text
    assert "| t1 | sft | none | free | 3 | 0 | +0.133 |" in text
    assert "all runs lost to infra errors" in text
    assert "| t1 | sft | none | free | 3 | 0.133 | 0.233 | 0.300 |" in text  # expected best of k
    assert f"[{specs['t1', 'sft', 0].cell_id}](../cells/{specs['t1', 'sft', 0].cell_id}/report.md)" in text
    for name in ("best_vs_time", "best_vs_submission", "best_vs_tokens", "heatmap_task_agent", "best_of_k"):
        assert (report_dir / f"{name}.png").stat().st_size > 1000
        assert f"![{name}]({name}.png)" in text

    cells = pd.read_parquet(report_dir / "cells.parquet")
    assert len(cells) == 9 and set(cells["status"]) >= {"pending", "infra_error", "agent_error"}
    assert cells.set_index("cell_id").loc[specs["t1", "sft", 2].cell_id, "outcome_class"] == "code_error"
    events = pd.read_parquet(report_dir / "events.parquet")
    subs = events[events["kind"] == "submission"]
    assert subs["final_attempt"].sum() == 8 and (~subs["final_attempt"]).sum() == 1
    assert subs["code_commit"].dropna().str.len().eq(40).all()
    assert json.loads(subs.iloc[0]["payload"])["submission_id"] == 1

    # Curves end at each group's mean result and use only the final attempt.
    band = curves.curves(cells, events, "time")
    t1 = band[(band["task"] == "t1") & (band["agent"] == "sft")]
    assert t1["x"].max() == 100 and t1["mean"].iloc[-1] == pytest.approx(0.4 / 3) and t1["n"].iloc[0] == 3
    assert t1["mean"].max() < 0.49
    tokens = curves.curves(cells, events, "tokens")
    assert set(tokens["agent"]) == {"sft"} and tokens["n"].max() == 2  # only metered cells

    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_report_has_the_seeds_section_with_the_spread_and_the_seeds_needed(synthetic_sweep):
    """The seeds each group needs (orchestrator/analysis/seeds.py; tests/test_seeds.py checks its statistics by
    simulation): t1/sft's three runs give a spread and a plan, t2/sft's one run (and its pending cell) do not."""
    from scipy import stats as sps

    out, report_dir, _ = synthetic_sweep
    table = pd.read_parquet(report_dir / "seeds.parquet").set_index(["task", "agent"])
    sd = np.std([0.1, 0.3, 0.0], ddof=1)
    row = table.loc[("t1", "sft")]
    assert row["runs"] == 3 and row["sd"] == pytest.approx(sd)
    assert row["sd_up"] == pytest.approx(sd * np.sqrt(2 / sps.chi2.ppf(0.2, 2)))  # conf: analysis.seeds.assurance
    assert row["seeds_for_ci"] == 2 and row["extra_for_ci"] == 0  # ±5 points: these runs are well inside it
    assert row["gpu_hours_per_cell"] == 0.0  # the synthetic budgets reserve no GPU
    one = table.loc[("t2", "sft")]
    assert one["runs"] == 1 and one["unfinished"] == 1 and one["note"].startswith("one run")
    pairs = pd.read_parquet(report_dir / "seed_pairs.parquet")
    t1 = pairs[pairs["task"] == "t1"].iloc[0]
    assert (t1["agent_a"], t1["agent_b"]) == ("copy_base", "sft") and t1["difference"] == pytest.approx(0.4 / 3)
    md = (report_dir / "report.md").read_text()
    assert "## Seeds: the spread between them, and how many a claim needs (CI ±5, power 80%)" in md
    assert f"| t1 | sft | none | free | 3 | +0.133 | {sd:.3f} |" in md
    assert "python -m orchestrator plan output_dir=" in md


def test_cell_reports_written_beside_the_ledger(synthetic_sweep):
    out, _, specs = synthetic_sweep
    first = json.loads((out / "cells" / specs["t1", "sft", 0].cell_id / "report.json").read_text())
    assert first["attempt"] == 2 and first["outcome_class"] == "improved" and first["failure_class"] is None
    assert first["first_valid_submission"] == {"index": 1, "t": 10.0}
    assert first["time_to_first_improvement_s"] == 30.0 and first["time_to_best_s"] == 30.0
    assert first["valid_submission_rate"] == 1.0 and first["monotonic_ratio"] == 1.0
    assert first["gap_after_last_submission_s"] == 60.0 and first["tokens"] == 300
    assert first["budget_used"] == {"wall_time": 0.9, "submissions": 0.5, "tokens": 0.3, "cost": None}
    assert first["code_diff"]["files_changed"] == 1 and first["code_diff"]["insertions"] == 1

    second = json.loads((out / "cells" / specs["t1", "sft", 1].cell_id / "report.json").read_text())
    assert second["monotonic_ratio"] == 0.0 and second["time_to_best_s"] == 20.0
    assert second["code_diff"]["files_changed"] == 0  # best is the first submission

    crashed = (out / "cells" / specs["t1", "sft", 2].cell_id / "report.md").read_text()
    assert "**Outcome: code_error**" in crashed and "ValueError: bad learning rate" in crashed
    copy = json.loads((out / "cells" / specs["t1", "copy_base", 0].cell_id / "report.json").read_text())
    assert copy["outcome_class"] == "copy_model_fallback" and copy["copy_of_base_count"] == 1
    assert not (out / "cells" / specs["t2", "sft", 2].cell_id / "report.md").exists()  # pending: nothing yet
    assert set(write_cell_reports(out)) == {s.cell_id for k, s in specs.items() if k != ("t2", "sft", 2)}


def test_estimated_driver_tokens_are_shown_as_such(synthetic_sweep):
    """t1/sft/1's one driver call was cut before the server's usage: the sweep table flags it, the report lists it,
    its cell report says how many of its tokens are the proxy's estimate."""
    from orchestrator.summary import summary_rows

    out, report_dir, specs = synthetic_sweep
    cut = specs["t1", "sft", 1].cell_id
    text = (report_dir / "report.md").read_text()
    assert "## Estimated driver tokens" in text and f"[{cut}](../cells/{cut}/report.md) | t1 | sft | none | 1 | " \
        "1 of 1 | 50 of 50 |" in text
    assert pd.read_parquet(report_dir / "estimated_usage.parquet")["cell_id"].tolist() == [cut]
    report = json.loads((out / "cells" / cut / "report.json").read_text())
    assert (report["tokens"], report["estimated_calls"], report["estimated_tokens"]) == (50, 1, 50)
    assert "(50 tokens of 1 cut call(s) estimated by the proxy)" in (out / "cells" / cut / "report.md").read_text()
    ledger = Ledger(out / "ledger.sqlite")
    try:
        rows = {(r["task"], r["agent"]): r for r in summary_rows(ledger, [s.cell_id for s in specs.values()])}
    finally:
        ledger.close()
    assert "driver tokens estimated x1 calls" in rows["t1", "sft"]["flags"]
    assert not any("estimated" in f for f in rows["t2", "sft"]["flags"])


def test_report_filters(synthetic_sweep, tmp_path):
    out, _, _ = synthetic_sweep
    cells, _ = tables.load(out, {"task": "t1", "agent": ["sft"]})
    assert len(cells) == 3
    with pytest.raises(ConfigError, match="known tasks"):
        tables.load(out, {"task": "nope"})
    with pytest.raises(ConfigError, match="unknown report filter"):
        tables.load(out, {"colour": "red"})
    with pytest.raises(ConfigError, match="no ledger"):
        build_report(tmp_path)


def test_notebook_reproduces_the_figures(synthetic_sweep):
    _, report_dir, _ = synthetic_sweep
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ["A2RL_REPORT_DIR"] = str(report_dir)  # the kernel inherits the environment
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    finally:
        del os.environ["A2RL_REPORT_DIR"]
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 5  # 3 curves, best of k, heatmap
    assert any("8 of 9 cells finished, 1 missing" in o.get("text", "") for o in outputs)


# -- failure classes of single cells (no ledger needed) -----------------------------------------------------------

def classify(status, subs, limit_hit=None, exit_code=0):
    cell = {"cell_id": "c", "status": status, "attempts": 1, "limit_hit": limit_hit, "spec": "{}"}
    events = [{"attempt": 1, "t": float(i), "kind": "submission", "payload": {
        "submission_id": i, "score": None if imp is None else BASELINE + imp, "baseline_score": BASELINE,
        "improvement": imp, "flags": flags, "error": None if imp is not None else "failed"}}
        for i, (imp, flags) in enumerate(subs, 1)]
    events.append({"attempt": 1, "t": 99.0, "kind": "outcome", "payload": {"exit_code": exit_code}})
    return cell_report(cell, events)["outcome_class"]


@pytest.mark.parametrize("status, subs, limit_hit, exit_code, expected", [
    ("completed", [(0.1, [])], None, 0, "improved"),
    ("budget_exhausted", [(-0.1, []), (0.2, [])], "wall_time", None, "improved"),
    ("budget_exhausted", [], "wall_time", None, "timeout_no_submission"),
    ("agent_error", [], None, 1, "code_error"),
    ("completed", [(None, []), (None, [])], None, 0, "code_error"),
    ("completed", [], None, 0, "no_submission"),
    ("completed", [(0.0, ["copy_of_base"])], None, 0, "copy_model_fallback"),
    ("completed", [(0.01, ["copy_of_base"])], None, 0, "copy_model_fallback"),  # grader noise is no improvement
    ("completed", [(-0.3, []), (-0.1, [])], None, 0, "training_diverged"),
    ("budget_exhausted", [(0.0, [])], "submissions", None, "budget_exhausted"),
    ("completed", [(0.0, ["cached"])], None, 0, "no_improvement"),
    ("infra_error", [(0.3, [])], None, None, "infra_error"),
    ("running", [(0.3, [])], None, None, "in_progress"),
])
def test_failure_classes(status, subs, limit_hit, exit_code, expected):
    assert classify(status, subs, limit_hit, exit_code) == expected
