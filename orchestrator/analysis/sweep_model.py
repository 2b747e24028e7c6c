"""One sweep's model, computed once from the ledger and the cells' run reports: what every view of the sweep shows.

The report (report.py: report.md, figures, Parquet, W&B) and the viewer (orchestrator.viewer: the pages) only render
a SweepModel; the `report` command builds one and hands it to both (orchestrator/report_command.py), and the live
viewer builds its own from the same ledger with the same function. Nothing here knows either view.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from orchestrator import manifest
from orchestrator.analysis import cost, curves, run_report, seeds, stats, tables

GROUP = tables.GROUP


@dataclass
class SweepModel:
    output_dir: Path
    cells: pd.DataFrame        # tables.load's cells, with each cell's outcome_class, mode_violation, judge_agreement
    events: pd.DataFrame       # tables.load's events (without the agents' traces when built with traces=False)
    reports: dict[str, dict]   # each started cell's run report, by cell id
    analyses: dict             # compute_tables: progress, curves, tables; the sweep's manifest summary; seed_targets


def build(output_dir: str | Path, filters: dict | None = None, *, traces: bool = True, write_reports: bool = False,
          success_threshold: float = 0.0, n_boot: int = 10_000, seed: int = 0,
          seed_targets: seeds.Targets | None = None) -> SweepModel:
    """The sweep's model. filters: tables.filter_cells'. traces: keep the agents' trace events (the report's Parquet
    and LLM analyses read them; no table does). write_reports: write each started cell's run report again (the
    report does); else each is read back when it is current, or computed without writing (a live viewer).
    seed_targets: what the seeds tables plan for (seeds.py; default conf's analysis.seeds)."""
    output_dir = Path(output_dir)
    cells, events = tables.load(output_dir, filters, traces)
    cells, reports = with_run_reports(output_dir, cells, tables.events_by_cell(events), write_reports)
    analyses = compute_tables(cells, events, success_threshold=success_threshold, n_boot=n_boot, seed=seed)
    analyses["manifest"] = manifest.summary(output_dir)
    analyses["seed_targets"] = seed_targets = seed_targets or seeds.Targets.configured()
    analyses["tables"]["seeds"] = seeds.seeds_table(cells, seed_targets)  # how many seeds a claim needs (seeds.py)
    analyses["tables"]["seed_pairs"] = seeds.pairs_table(analyses["tables"]["seeds"], seed_targets)
    return SweepModel(output_dir, cells, events, reports, analyses)


def with_run_reports(output_dir: Path, cells: pd.DataFrame, by_cell: dict[str, list[dict]],
                     write: bool) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Each started cell's run report (written again when write, else run_report.current_report) and, from it, the
    cells table's outcome class, mode violations and judge agreement; the reports by cell id."""
    classes, violations, agreements, reports = [], [], [], {}
    for row in cells.to_dict("records"):
        if row["status"] == "pending":
            classes.append("pending")
            violations.append(None)
            agreements.append(None)
            continue
        plain = tables.plain(row)
        events = by_cell.get(row["cell_id"], [])
        report = reports[row["cell_id"]] = (run_report.write_cell_report(output_dir, plain, events) if write
                                            else run_report.current_report(output_dir, plain, events))
        classes.append(report["outcome_class"])
        broken = report["mode_violations"]
        violations.append(None if broken is None else "; ".join(v["rule"] for v in broken) or "")
        agreements.append((report.get("judge_agreement") or {}).get("agreement"))
    cells = cells.copy()
    cells["judge_agreement"] = agreements  # the task's LLM judge asked twice on a sample (None: no LLM judge)
    cells["outcome_class"] = classes
    cells["mode_violation"] = violations  # None: no rule to check; "": kept to the mode; else the rules broken
    return cells, reports


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
