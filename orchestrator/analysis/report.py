"""The sweep report: `python -m orchestrator report output_dir=DIR [filters]` -> DIR/report/.

Writes report.md (the tables, rendered by report_markdown), PNG figures, Parquet exports (cells, events and every
table) for pandas and the notebook, the viewer's pages as static files (report/viewer/index.html: orchestrator.viewer),
refreshes each started cell's run report (and, with `analysis.summarize`, its
LLM-written summary: run_summary), and logs the same tables and figures to one W&B run.
It works on a partially finished sweep: the tables cover finished cells and the report says how many are
missing.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from contracts.records import read_jsonl
from orchestrator import manifest
from orchestrator.analysis import audit, cost, curves, figures, run_report, run_summary, stats, tables
from orchestrator.analysis.report_markdown import AUDIT_COLUMNS, SUMMARY_COLUMNS, render_markdown

GROUP = tables.GROUP
OUTPUT_PATTERNS = ("report.md", "*.png", "*.parquet")


def build_report(output_dir: str | Path, filters: dict | None = None, wandb_cfg: dict | None = None, *,
                 success_threshold: float = 0.0, n_boot: int = 10_000, seed: int = 0,
                 summarizer: run_summary.Summarizer | None = None,
                 auditor: run_summary.Summarizer | None = None) -> Path:
    """Write OUTPUT_DIR/report/ and return its path. filters: task, agent, driver, sweep, seed (one value or
    a list each). wandb_cfg: the logger config ({kind, project, entity, mode}); None or kind "none": no W&B.
    success_threshold: pass@k counts a run as a success when its improvement is strictly above it.
    summarizer: a driver writes each finished cell's run summary (None: none is asked; those written are shown).
    auditor: a driver audits each finished cell's trace for misuse beside the deterministic findings (audit.py;
    None: no audit is run; those written are shown)."""
    output_dir = Path(output_dir)
    cells, events = tables.load(output_dir, filters)
    report_dir = output_dir / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    for pattern in OUTPUT_PATTERNS:  # a figure from an earlier report (e.g. tokens) must not linger
        for old in report_dir.glob(pattern):
            old.unlink()

    by_cell = events_by_cell(events)
    cells, reports = _with_cell_reports(output_dir, cells, by_cell)
    out = compute_tables(cells, events, success_threshold=success_threshold, n_boot=n_boot, seed=seed)
    out["manifest"] = manifest.summary(output_dir)
    # After the run reports, which stay as they are whatever a driver answers.
    finished = {cid: r for cid, r in reports.items() if r["status"] in tables.FINISHED_STATUSES}
    asked = run_summary.summarize(output_dir, finished, by_cell, summarizer) if summarizer else []
    out["tables"]["summaries"] = _summaries_table(output_dir, cells, asked)
    if auditor:
        models = {row.cell_id: (json.loads(row.spec).get("driver") or {}).get("model") for row in cells.itertuples()}
        out["audit_calls"] = audit.audit(output_dir, finished, by_cell, auditor, models)
    out["audits"] = {cid: kept for cid in cells["cell_id"]
                     if (kept := audit.read_audit(output_dir / "cells" / cid)) is not None}
    out["tables"]["audit"] = audit_table(out["audits"])
    figure_paths = _write_figures(out, report_dir)

    cells.to_parquet(report_dir / "cells.parquet", index=False)
    events.to_parquet(report_dir / "events.parquet", index=False)
    for name, frame in out["tables"].items():
        frame.to_parquet(report_dir / f"{name}.parquet", index=False)
    (report_dir / "report.md").write_text(render_markdown(out, cells, filters, figure_paths, success_threshold,
                                                          _summary_texts(output_dir, out["tables"]["summaries"]),
                                                          summarizer))
    from orchestrator.viewer import data as viewer_data, static  # (here: the viewer imports this module)

    static.write_site(output_dir, report_dir / "viewer", n_boot=n_boot,
                      sweep=viewer_data.sweep_data(output_dir, cells, events, reports, out))

    if wandb_cfg and wandb_cfg.get("kind", "wandb") != "none":
        log_to_wandb(output_dir, cells, out, figure_paths, wandb_cfg, filters)
    return report_dir


def events_by_cell(events: pd.DataFrame) -> dict[str, list[dict]]:
    by_cell: dict[str, list[dict]] = {}
    for e in events[["cell_id", "attempt", "t", "kind", "payload"]].itertuples(index=False):
        by_cell.setdefault(e.cell_id, []).append({"attempt": int(e.attempt), "t": float(e.t), "kind": e.kind,
                                                  "payload": json.loads(e.payload)})
    return by_cell


def _with_cell_reports(output_dir: Path, cells: pd.DataFrame,
                       by_cell: dict[str, list[dict]]) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Refresh the run report of every started cell and add its outcome class to the cells table; the reports
    by cell id."""
    classes, violations, agreements, reports = [], [], [], {}
    for row in cells.to_dict("records"):
        if row["status"] == "pending":
            classes.append("pending")
            violations.append(None)
            agreements.append(None)
            continue
        plain = {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
        plain["seed"] = int(plain["seed"])
        report = reports[row["cell_id"]] = run_report.write_cell_report(output_dir, plain,
                                                                        by_cell.get(row["cell_id"], []))
        classes.append(report["outcome_class"])
        broken = report["mode_violations"]
        violations.append(None if broken is None else "; ".join(v["rule"] for v in broken) or "")
        agreements.append((report.get("judge_agreement") or {}).get("agreement"))
    cells = cells.copy()
    cells["judge_agreement"] = agreements  # the task's LLM judge asked twice on a sample (None: no LLM judge)
    cells["outcome_class"] = classes
    cells["mode_violation"] = violations  # None: no rule to check; "": kept to the mode; else the rules broken
    return cells, reports


def _summaries_table(output_dir: Path, cells: pd.DataFrame, asked: list[dict]) -> pd.DataFrame:
    """One row per cell that has a summary or was asked for one: what this report spent on it (status new, cached
    or failed; written earlier: present), what the summary shown cost when it was written, and every analysis call
    recorded for the cell so far (analysis_calls.jsonl)."""
    by_id = {row["cell_id"]: row for row in asked}
    rows = []
    for cid in cells["cell_id"]:
        cell_dir = output_dir / "cells" / cid
        kept, calls = run_summary.read_summary(cell_dir), read_jsonl(cell_dir / run_summary.ANALYSIS_CALLS)
        row = by_id.get(cid)
        if row is None and kept is None:
            continue
        row = row or {"cell_id": cid, "status": "present", "driver": kept["driver"], "model": kept["model"],
                      "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost_usd": 0.0, "error": None}
        rows.append({**row, "summary_input_tokens": (kept or {}).get("input_tokens"),
                     "summary_output_tokens": (kept or {}).get("output_tokens"),
                     "summary_cost_usd": (kept or {}).get("cost_usd"),
                     "recorded_input_tokens": sum(c["input_tokens"] for c in calls),
                     "recorded_output_tokens": sum(c["output_tokens"] for c in calls),
                     "recorded_cost_usd": sum(c["cost_usd"] for c in calls), "recorded_calls": len(calls)})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def audit_table(audits: dict[str, dict]) -> pd.DataFrame:
    """One row per audited cell (audits: cell id -> its audit.json) and checklist item: the deterministic findings
    (how many, from which records) and the LLM's verdict with its quotes (how many were found verbatim in what it
    read)."""
    rows = []
    for cid, kept in audits.items():
        for item in audit.CHECKLIST:
            found = kept["findings"].get(item) or []
            said = (kept.get("verdict") or {}).get(item) or {}
            quotes = said.get("evidence") or []
            rows.append({"cell_id": cid, "item": item, "findings": len(found),
                         "sources": ",".join(sorted({f["source"] for f in found})), "verdict": said.get("verdict"),
                         "quotes": len(quotes), "quotes_found": sum(q["quote_found"] for q in quotes),
                         "reason": said.get("reason"), "driver": kept.get("driver"), "model": kept.get("model"),
                         "error": kept.get("error")})
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


def _summary_texts(output_dir: Path, summaries: pd.DataFrame) -> dict[str, dict]:
    return {cid: kept for cid in summaries["cell_id"]
            if (kept := run_summary.read_summary(output_dir / "cells" / cid)) is not None}


def compute_tables(cells: pd.DataFrame, events: pd.DataFrame, success_threshold: float = 0.0,
                   n_boot: int = 10_000, seed: int = 0) -> dict:
    """Every table of the report as a frame (long format, an infra_errors column where both policies apply)."""
    runs = {policy: tables.results(cells, policy) for policy in tables.INFRA_POLICIES}
    all_groups = runs["failure"][GROUP]
    improvement, pooled, best_of_k, pass_k = [], [], [], []
    for policy, r in runs.items():
        improvement.append(stats.group_summary(r, GROUP, n_boot=n_boot, seed=seed, groups=all_groups)
                           .merge(cost.group_costs(r, GROUP), on=GROUP, how="left").assign(infra_errors=policy))
        pooled.append(pooled_with_anchored(r).merge(cost.group_costs(r, ["agent", "driver"]), on=["agent", "driver"],
                                                    how="left").assign(infra_errors=policy))
        best_of_k.append(stats.best_of_k_table(r, GROUP, groups=all_groups).assign(infra_errors=policy))
        pass_k.append(stats.pass_at_k_table(r, GROUP, success_threshold, groups=all_groups)
                      .assign(infra_errors=policy))
    improvement = pd.concat(improvement, ignore_index=True)
    infra_counts = runs["failure"].assign(infra=runs["failure"]["status"] == "infra_error") \
        .groupby(GROUP)["infra"].sum().rename("n_infra_errors").reset_index()
    improvement = improvement.merge(infra_counts, on=GROUP, how="left")
    lost = (improvement["infra_errors"] == "exclude") & (improvement["n"] == 0)
    improvement.loc[lost, "note"] = "all runs lost to infra errors"

    held = tables.held_out(cells)
    held_out = stats.group_summary(held, GROUP, "final", n_boot=n_boot, seed=seed).merge(
        stats.group_summary(held, GROUP, "gap", n_boot=n_boot, seed=seed).drop(columns=["n", "note"]),
        on=GROUP, suffixes=("", "_gap")).merge(held.groupby(GROUP)["feedback"].mean().rename("feedback_mean")
                                              .reset_index(), on=GROUP, how="left") \
        .merge(cost.group_costs(held, GROUP, "final"), on=GROUP, how="left")

    done = cells[cells["status"].isin(tables.FINISHED_STATUSES)]
    failure_classes = (done.groupby(["agent", "driver", "outcome_class"]).size().rename("n").reset_index()
                       if len(done) else pd.DataFrame(columns=["agent", "driver", "outcome_class", "n"]))

    tables_out = {"reprompting": reprompting_table(runs["exclude"])} if _reprompting(cells) else {}
    curve_frames = {axis: curves.curves(cells, events, axis) for axis in curves.AXES}
    curve_table = pd.concat([f.assign(axis=a) for a, f in curve_frames.items() if len(f)], ignore_index=True) \
        if any(len(f) for f in curve_frames.values()) else pd.DataFrame(columns=GROUP + ["x", "mean", "axis"])
    return {
        "progress": tables.progress(cells),
        "curves": curve_frames,
        "tables": {
            "held_out": held_out,
            "improvement": improvement,
            "pooled": pd.concat(pooled, ignore_index=True),
            "references": references_table(cells),
            "best_of_k": pd.concat(best_of_k, ignore_index=True),
            "pass_at_k": pd.concat(pass_k, ignore_index=True),
            "failure_classes": failure_classes,
            "curves": curve_table,
            "estimated_usage": tables.estimated_usage(events),
            **tables_out,
        },
    }


def pooled_with_anchored(runs: pd.DataFrame) -> pd.DataFrame:
    """Per agent x driver, pooled across tasks with SEs clustered by task: the raw improvement over every task, and
    beside it the anchored one (0 = baseline, 1 = the task's reference) over the tasks that have a reference."""
    raw = stats.pooled_summary(runs, ["agent", "driver"], cluster="task")
    anchorable = runs[runs["anchored_value"].notna()] if "anchored_value" in runs else runs.iloc[:0]
    if not len(anchorable):
        return raw.assign(anchored_n=0, anchored_n_clusters=0, anchored_mean=float("nan"),
                          anchored_clustered_se=float("nan"), anchored_note="no task has a reference_score")
    anchored = stats.pooled_summary(anchorable, ["agent", "driver"], cluster="task", value="anchored_value") \
        .rename(columns={"n": "anchored_n", "n_clusters": "anchored_n_clusters", "mean": "anchored_mean",
                         "clustered_se": "anchored_clustered_se", "note": "anchored_note"})
    out = raw.merge(anchored, on=["agent", "driver"], how="left")
    out["anchored_n"] = out["anchored_n"].fillna(0).astype(int)
    out["anchored_n_clusters"] = out["anchored_n_clusters"].fillna(0).astype(int)
    out["anchored_note"] = out["anchored_note"].fillna("no task of these runs has a reference_score")
    return out


def references_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per task: its baseline (feedback split), reference score and the reference's source; tasks without one too."""
    cols = ["task", "baseline", "reference_score", "reference_source"]
    if not len(cells):
        return pd.DataFrame(columns=cols)
    rows = []
    for task, g in cells.groupby("task", sort=True):
        baseline = g["baseline_score"].dropna()
        rows.append({"task": task, "baseline": float(baseline.iloc[0]) if len(baseline) else float("nan"),
                     "reference_score": g["reference_score"].iloc[0],
                     "reference_source": g["reference_source"].iloc[0]})
    return pd.DataFrame(rows, columns=cols)


def _reprompting(cells: pd.DataFrame) -> bool:
    return "budget_max_reprompts" in cells and bool((cells["budget_max_reprompts"].fillna(0) > 0).any())


def reprompting_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Results split by how often the agent was re-prompted (infra errors excluded): the improvement when it first
    stopped by itself (what a run without re-prompting would have scored) against the final one."""
    cols = GROUP + ["reprompts", "n", "mean_first_stop", "mean_final", "mean_gain"]
    if not len(runs):
        return pd.DataFrame(columns=cols)
    r = runs.assign(first=runs["improvement_first_stop"].fillna(0.0).astype(float))
    r["gain"] = r["value"] - r["first"]
    return (r.groupby(GROUP + ["reprompts"], sort=True)
            .agg(n=("value", "size"), mean_first_stop=("first", "mean"), mean_final=("value", "mean"),
                 mean_gain=("gain", "mean")).reset_index()[cols])


def _write_figures(out: dict, report_dir: Path) -> list[Path]:
    paths = []

    def save(fig, name):
        path = report_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")  # titles wider than one panel stay whole
        paths.append(path)

    for axis, band in out["curves"].items():
        if len(band):
            save(figures.plot_curves(band, axis), f"best_vs_{axis}")
    summary = out["tables"]["improvement"]
    summary = summary[(summary["infra_errors"] == "exclude") & (summary["n"] > 0)]
    if len(summary):
        save(figures.plot_heatmap(summary, "agent"), "heatmap_task_agent")
        if summary["driver"].nunique() > 1:
            save(figures.plot_heatmap(summary, "driver"), "heatmap_task_driver")
        if summary["mode"].nunique() > 1:  # the paper's free vs RL-only comparison
            save(figures.plot_heatmap(summary, "mode"), "heatmap_task_mode")
    best = out["tables"]["best_of_k"]
    best = best[best["infra_errors"] == "exclude"]
    if best["expected_best"].notna().any():
        save(figures.plot_best_of_k(best), "best_of_k")
    return paths


# -- W&B ---------------------------------------------------------------------------------------------------------

def log_to_wandb(output_dir: Path, cells: pd.DataFrame, out: dict, figure_paths: list[Path], cfg: dict,
                 filters: dict | None) -> None:
    """One W&B run (job_type report, grouped with the sweep) holding every table and figure. Offline unless
    a mode is given or WANDB_API_KEY is set, like the per-cell runs."""
    import wandb

    mode = cfg.get("mode") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    sweeps = sorted(set(cells["sweep"].dropna().astype(str))) or ["a2rl"]
    group = "+".join(sweeps)
    run = wandb.init(project=cfg.get("project") or "a2rl", entity=cfg.get("entity"), group=group,
                     job_type="report", name=f"report-{group}", dir=str(output_dir), mode=mode,
                     config={"filters": filters or {}, "output_dir": str(output_dir)}, reinit="create_new",
                     settings=wandb.Settings(silent=True, console="off"))
    try:
        logged = {f"table/{name}": wandb.Table(dataframe=frame.astype(object).where(frame.notna(), None))
                  for name, frame in out["tables"].items() if len(frame)}
        logged.update({f"figure/{path.stem}": wandb.Image(str(path)) for path in figure_paths})
        run.log(logged)
        run.summary.update({f"cells/{k}": v for k, v in out["progress"].items() if k != "by_status"})
        run.summary.update({f"cost/{k}": float(cells[k].sum()) for k in ("driver_tokens", "driver_cost_usd",
                                                                          "judge_cost_usd", "gpu_hours", "cost_usd")})
    finally:
        run.finish()
