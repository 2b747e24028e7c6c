"""The sweep report: `python -m orchestrator report output_dir=DIR [filters]` -> DIR/report/.

Writes report.md (the tables), PNG figures, Parquet exports (cells, events and every table) for pandas and
the notebook, refreshes each started cell's run report (and, with `analysis.summarize`, its LLM-written summary:
run_summary), and logs the same tables and figures to one W&B run.
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
from orchestrator.analysis.markdown import MISSING, fmt, md_table

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

    by_cell = _events_by_cell(events)
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

    if wandb_cfg and wandb_cfg.get("kind", "wandb") != "none":
        log_to_wandb(output_dir, cells, out, figure_paths, wandb_cfg, filters)
    return report_dir


def _events_by_cell(events: pd.DataFrame) -> dict[str, list[dict]]:
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


SUMMARY_COLUMNS = ["cell_id", "status", "driver", "model", "input_tokens", "output_tokens", "cached_tokens",
                   "cost_usd", "error", "summary_input_tokens", "summary_output_tokens", "summary_cost_usd",
                   "recorded_input_tokens", "recorded_output_tokens", "recorded_cost_usd", "recorded_calls"]


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


AUDIT_COLUMNS = ["cell_id", "item", "findings", "sources", "verdict", "quotes", "quotes_found", "reason", "driver",
                 "model", "error"]


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


def _misuse_section(cells: pd.DataFrame, table: pd.DataFrame, audits: dict[str, dict]) -> list[str]:
    """Per audited cell with a finding or a "yes": each checklist item's deterministic evidence (quoted, with where
    it was seen) and the LLM's verdict beside it (its quotes marked when they are not in what it read)."""
    if not len(table):
        return []
    lines = ["## Misuse (trace audit)", "",
             "Each finished cell's records checked against a fixed checklist: "
             + "; ".join(f"**{k}**: {v}" for k, v in audit.CHECKLIST.items()) + ". Deterministic evidence first "
             "(patterns in the agent's trace and code snapshots, the sandbox's HTTP proxy log of reached and refused "
             "hosts, the driver proxy's log, the grader's flags), then an LLM's verdict with its quotes beside it, "
             "never instead (a quote not found verbatim in what it read is marked).", ""]
    audited = table["cell_id"].nunique()
    suspect = table[(table["findings"] > 0) | (table["verdict"] == "yes")]
    labels = cells.set_index("cell_id")
    if not len(suspect):
        return lines + [f"Nothing found in the {audited} audited cells, by either layer.", ""]
    lines += [f"{suspect['cell_id'].nunique()} of {audited} audited cells have a finding or a \"yes\":", ""]
    for cid, g in suspect.groupby("cell_id", sort=True):
        c, kept = labels.loc[cid], audits[cid]
        lines += [f"### {c.task} / {c.agent} / {c.driver}, seed {c.seed}: cell {cid}", ""]
        if kept.get("error"):
            lines += [f"The LLM's verdict failed ({kept['error']})"
                      + ("; the verdict shown is an earlier one." if kept.get("verdict_is_earlier") else "."), ""]
        rows = []
        for r in g.itertuples(index=False):
            found = kept["findings"][r.item]
            said = (kept.get("verdict") or {}).get(r.item) or {}
            shown = [f for i, f in enumerate(found) if sum(g["source"] == f["source"] for g in found[:i]) < 2]
            evidence = "<br>".join(f"[{f['source']}, {f['where']}] `{f['quote'][:160]}`" for f in shown) or "none"
            quotes = "<br>".join(f"`{q['quote'][:160]}`" + ("" if q["quote_found"] else " (**not in the materials**)")
                                 for q in (said.get("evidence") or [])[:3])
            verdict = f"**{said['verdict']}**" if said.get("verdict") == "yes" else (said.get("verdict") or "-")
            rows.append([r.item, evidence, verdict, quotes or "-", (said.get("reason") or "").replace("|", "/")])
        lines += [md_table(["item", "deterministic evidence", "LLM verdict", "LLM's quotes", "LLM's reason"], rows),
                  "", f"The LLM: {kept.get('driver')} ({kept.get('model')}); cells/{cid}/audit.json has every finding.",
                  ""]
    return lines


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


# -- report.md ---------------------------------------------------------------------------------------------------

def _ci(lo, hi) -> str:
    return MISSING if pd.isna(lo) else f"[{lo:+.3f}, {hi:+.3f}]"


def _wide_per_k(frame: pd.DataFrame, value: str) -> tuple[list[str], list[list]]:
    ks = sorted(frame["k"].unique())
    rows = []
    for key, g in frame.groupby(GROUP, sort=True):
        by_k = dict(zip(g["k"], g[value]))
        rows.append(list(key) + [int(g["n"].iloc[0])] + [fmt(by_k.get(k)) for k in ks])
    return GROUP + ["n"] + [f"k={k}" for k in ks], rows


def _contamination_section(cells: pd.DataFrame) -> list[str]:
    """Flagged cells (hidden eval items in what the agent wrote) per group, and the results with and without them."""
    done = cells[cells["status"].isin(tables.FINISHED_STATUSES)]
    checked = done[done["contaminated"].notna()]
    lines = ["## Contamination", ""]
    if not len(checked):
        return lines + ["No finished cell was checked.", ""]
    flagged = checked[checked["contaminated"] == 1]
    if not len(flagged):
        return lines + [f"No cell flagged: no hidden eval item was found in what any of the {len(checked)} checked "
                        "runs wrote (n-gram overlap; the task's `contamination` settings).", ""]
    rows = []
    for key, g in checked.groupby(GROUP, sort=True):
        clean = g[g["contaminated"] != 1]
        rows.append(list(key) + [len(g), int((g["contaminated"] == 1).sum()),
                                 fmt(g["final_improvement"].mean(), signed=True),
                                 fmt(clean["final_improvement"].mean(), signed=True),
                                 fmt(g["improvement"].fillna(0.0).mean(), signed=True),
                                 fmt(clean["improvement"].fillna(0.0).mean(), signed=True)])
    return lines + [md_table(GROUP + ["runs", "flagged", "held-out", "held-out (unflagged)", "best feedback",
                                      "best feedback (unflagged)"], rows), "",
                    f"{len(flagged)} of {len(checked)} runs flagged: hidden eval items were found in what they wrote "
                    "(each cell's outcome names the file, item and overlap).", ""]


def _usd(value) -> str:
    return MISSING if value is None or pd.isna(value) else f"${value:.4f}"


def _cost_section(improvement: pd.DataFrame) -> list[str]:
    """Per group, what a run cost on average and what a point of improvement cost (all runs: infra errors cost too)."""
    lines = ["## Cost (per task x agent x driver x training mode)", ""]
    every = improvement[(improvement["infra_errors"] == "failure") & (improvement["cost_runs"].fillna(0) > 0)] \
        if len(improvement) else improvement
    if not len(every):
        return lines + ["No finished cells yet.", ""]
    rows = [list(r[:len(GROUP)]) + [int(r.cost_runs), fmt(r.driver_tokens_mean, 0), _usd(r.driver_cost_usd_mean),
                                    _usd(r.judge_cost_usd_mean), fmt(r.gpu_hours_mean, 3), _usd(r.cost_usd_total),
                                    _usd(r.usd_per_point), fmt(r.gpu_hours_per_point, 4)]
            for r in every.itertuples(index=False)]
    return lines + [md_table(GROUP + ["runs", "driver tokens / run", "driver $ / run", "judge $ / run",
                                      "GPU-h / run", "$ in all", "$ per point", "GPU-h per point"], rows), "",
                    "Driver tokens and dollars as the driver proxy metered them, the LLM judge's dollars (its calls "
                    "through the same proxy, never charged to the agent), and GPU-hours reserved (budget.gpus x the "
                    "cell's wall time). Per point: all of the group's dollars (GPU-hours) over all of its best "
                    f"feedback improvement, where that is positive ({MISSING}: nothing gained). Infra errors "
                    "counted.", ""]


def _manifest_section(info: dict | None) -> list[str]:
    """Where the sweep's configuration was written down before it ran, what it says in brief, and how a resumed
    run's configuration differed (orchestrator/manifest.py)."""
    lines = ["## Configuration", ""]
    if info is None:
        return lines + ["This sweep wrote no manifest (it ran before a2rl wrote them): its configuration is not on "
                        "record beyond each cell's spec.", ""]
    m = info["manifest"]
    a2rl, hw = m.get("a2rl") or {}, m.get("hardware") or {}
    commit = (a2rl.get("commit") or "unknown")[:12]
    tree = {True: " (uncommitted changes in the tree)", False: " (clean tree)"}.get(a2rl.get("dirty"), "")
    gpus = ", ".join(g["name"] for g in hw.get("gpus") or []) or "no GPU"
    hashed = sum(len(t.get("data_files") or {}) for t in (m.get("tasks") or {}).values())
    sandbox = m.get("sandbox") or {}
    drivers = ", ".join(f"{name} ({d.get('model')})" for name, d in (m.get("drivers") or {}).items())
    lines += [f"Written before the first cell started: [{info['file']}](../{info['file']}) ({m.get('written_at')}): "
              f"a2rl {commit}{tree}; {len(m.get('cells') or [])} cells, seeds {m.get('seeds')}; "
              f"{len(m.get('tasks') or {})} tasks ({hashed} data sources hashed); "
              f"drivers {drivers or 'none'}; "
              f"sandbox network {sandbox.get('network')}, allowlist {sandbox.get('allow') or 'empty'}; "
              f"{hw.get('cpus')} x {hw.get('cpu')}, {hw.get('memory_gb')} GB, {gpus}.", ""]
    for later in info["later"]:
        keys = later["differences"]
        lines += [f"**A resumed run was configured differently**: [{later['file']}](../{later['file']}) "
                  f"({later['written_at']}) differs from {info['file']} in {len(keys)} keys: "
                  + ", ".join(f"`{k}`" for k in keys[:30]) + (" ..." if len(keys) > 30 else "") + ".", ""]
    return lines


def _summaries_section(cells: pd.DataFrame, table: pd.DataFrame, texts: dict[str, dict],
                       summarizer: run_summary.Summarizer | None) -> list[str]:
    """Each cell's LLM-written run summary where there is one, what this report spent on them, and the failures."""
    if not len(table):
        return []
    lines = ["## Run summaries (LLM-written)", ""]
    by_status = table["status"].value_counts()
    if summarizer is not None:
        d = summarizer.driver
        lines.append(f"Written by {d['name']} ({d.get('model')}) from each finished cell's run report, the code diffs "
                     "between its submissions and the agent's trace. The run reports are the source of truth; a "
                     "summary is a reading of them. This report asked for "
                     f"{int(by_status.get('new', 0) + by_status.get('failed', 0))}: "
                     f"{int(table['input_tokens'].sum())} input and {int(table['output_tokens'].sum())} output tokens, "
                     f"${table['cost_usd'].sum():.4f} (analysis usage, never an agent's); "
                     f"{int(by_status.get('cached', 0))} came from the cache; {int(by_status.get('failed', 0))} "
                     "failed.")
    else:
        lines.append("Written by a driver in an earlier report (`analysis.summarize=...`; this one asked none). The "
                     "run reports are the source of truth; a summary is a reading of them.")
    lines += [f"Recorded analysis usage for these cells in all: {int(table['recorded_calls'].sum())} calls, "
              f"{int(table['recorded_input_tokens'].sum())} input and {int(table['recorded_output_tokens'].sum())} "
              f"output tokens, ${table['recorded_cost_usd'].sum():.4f} (cells/<id>/analysis_calls.jsonl).", ""]
    labels = cells.set_index("cell_id")
    for r in table.itertuples(index=False):
        c = labels.loc[r.cell_id]
        lines += [f"### {c.task} / {c.agent} / {c.driver}, seed {c.seed}: cell {r.cell_id}", ""]
        if r.status == "failed":
            lines += [f"**No new summary: the driver failed** ({r.error}). The run report "
                      f"([report.md](../cells/{r.cell_id}/report.md)) is complete without it.", ""]
        kept = texts.get(r.cell_id)
        if kept is not None:
            lines += [f"[summary.md](../cells/{r.cell_id}/summary.md), by {kept['driver']} ({kept['model']}), "
                      f"{kept['input_tokens']} input and {kept['output_tokens']} output tokens, "
                      f"${kept['cost_usd']:.4f}" + (" (earlier than this failure)" if r.status == "failed" else "")
                      + ":", ""]
            lines += ["> " + line if line else ">" for line in kept["text"].splitlines()] + [""]
    return lines


def render_markdown(out: dict, cells: pd.DataFrame, filters: dict | None, figure_paths: list[Path],
                    success_threshold: float, summaries: dict[str, dict] | None = None,
                    summarizer: run_summary.Summarizer | None = None) -> str:
    """summaries: each cell's run summary (summary.json) where one exists."""
    summaries = summaries or {}
    t, p = out["tables"], out["progress"]
    sweeps = ", ".join(sorted(set(cells["sweep"].dropna().astype(str)))) or MISSING
    by_status = ", ".join(f"{n} {s}" for s, n in p["by_status"].items() if n)
    lines = [f"# a2rl report: {sweeps}", ""]
    if filters:
        lines.append("Filters: " + ", ".join(f"{k}={v}" for k, v in filters.items() if v is not None) + ".")
    lines += [
        f"**{p['finished']} of {p['total']} cells finished; {p['missing']} missing** (pending or running). "
        f"By status: {by_status or 'none'}." + (" The tables cover finished cells only." if p["missing"] else ""),
        "",
        "A cell's result is the improvement of its best valid submission over the baseline; a cell without a valid "
        "submission counts 0 (the base model stands). Only a cell's final attempt counts. Infra errors are the "
        "system's fault: results are given counting them as failures (0) and excluding them.",
        "",
        *_manifest_section(out.get("manifest")),
        "## Held-out final score (per task x agent x driver x training mode, over seeds)",
        "",
    ]
    held = t["held_out"]
    if len(held):
        rows = [list(r[:len(GROUP)]) + [r.n, fmt(r.mean, signed=True), fmt(r.se), _ci(r.ci_lo, r.ci_hi),
                                        fmt(r.feedback_mean, signed=True), fmt(r.mean_gap, signed=True),
                                        fmt(r.se_gap), _ci(r.ci_lo_gap, r.ci_hi_gap)]
                for r in held.itertuples(index=False)]
        lines += [md_table(GROUP + ["runs", "held-out", "SE", "95% CI", "best feedback", "optimism gap", "gap SE",
                                    "gap 95% CI"], rows), "",
                  "Each run's final submission (the one it marked final, else its best) scored once, when the run "
                  "ended, on a held-out split it never got a score from: its improvement over the base model on that "
                  "split. The optimism gap is the best feedback improvement (what the original benchmark reports) "
                  "minus the held-out one, per run. Runs of tasks without a final split are not in this table.", ""]
    else:
        lines += ["No finished cell has a held-out score (its task has no final split, or none finished).", ""]
    lines += _contamination_section(cells)
    judged = cells[cells["judge_agreement"].notna()] if "judge_agreement" in cells else cells.iloc[:0]
    if len(judged):
        lines += ["## LLM judges", "",
                  "Scores of these tasks are not deterministic: their LLM judge, asked at temperature 0 through a "
                  "provider, need not give the same verdict twice (its verdicts are cached, so one sweep's are "
                  "stable). Its repeat agreement, measured on a sample of the baseline's judge prompts asked twice: "
                  + ", ".join(f"{task} {100 * a:.0f}%" for task, a in judged.groupby("task")["judge_agreement"]
                              .first().items()) + ".", ""]
    lines += ["## Improvement over baseline: the best feedback score (per task x agent x driver x training mode, "
              "over seeds)", ""]
    imp = t["improvement"]
    if len(imp):
        fail = imp[imp["infra_errors"] == "failure"].set_index(GROUP)
        excl = imp[imp["infra_errors"] == "exclude"].set_index(GROUP)
        rows = []
        for key, f in fail.iterrows():
            e = excl.loc[key]
            rows.append(list(key) + [f["n"], int(f["n_infra_errors"]), fmt(f["mean"], signed=True), fmt(f["se"]),
                                     _ci(f["ci_lo"], f["ci_hi"]), e["n"], fmt(e["mean"], signed=True), fmt(e["se"]),
                                     _ci(e["ci_lo"], e["ci_hi"]), e["note"] or f["note"]])
        lines.append(md_table(GROUP + ["runs", "infra errors", "mean", "SE", "95% CI", "runs (excl.)",
                                       "mean (excl.)", "SE (excl.)", "95% CI (excl.)", "note"], rows))
        lines += ["", "Means with SE (ddof=1) and percentile bootstrap CI over seeds; \"excl.\" drops infra errors.",
                  ""]
    else:
        lines += ["No finished cells yet.", ""]

    lines += _cost_section(imp)
    lines += ["## Pooled across tasks (SE clustered by task)", ""]
    pooled = t["pooled"]
    if len(pooled):
        rows = [[r.agent, r.driver, r.infra_errors, r.n_clusters, r.n, fmt(r.mean, signed=True),
                 fmt(r.clustered_se), r.anchored_n_clusters, r.anchored_n, fmt(r.anchored_mean, signed=True),
                 fmt(r.anchored_clustered_se), _usd(r.cost_usd_mean), _usd(r.usd_per_point),
                 fmt(r.gpu_hours_per_point), "; ".join(n for n in (r.note, r.anchored_note) if n)]
                for r in pooled.itertuples()]
        lines += [md_table(["agent", "driver", "infra errors", "tasks", "runs", "mean", "clustered SE",
                            "anchored tasks", "anchored runs", "anchored mean", "anchored clustered SE", "$ per run",
                            "$ per point", "GPU-h per point", "note"], rows), "",
                  "Raw: improvements in each task's own points, pooled over every task. Anchored: each run's "
                  "improvement over (reference - baseline), 0 at the base model and 1 at the task's reference score, "
                  "pooled over the tasks that have one, so an easy task's points do not outweigh a hard task's.", ""]
        refs = t["references"]
        rows = [[r.task, fmt(r.baseline), fmt(r.reference_score),
                 r.reference_source if isinstance(r.reference_source, str) else "none: not anchored"]
                for r in refs.itertuples()]
        lines += [md_table(["task", "baseline", "reference", "source"], rows), ""]
    else:
        lines += ["No finished cells yet.", ""]

    for title, name, value, extra in (
            ("Expected best of k runs", "best_of_k", "expected_best",
             "Unbiased: the average over all k-subsets of runs of their best result."),
            (f"pass@k (success: improvement > {success_threshold:g})", "pass_at_k", "pass_at_k",
             "Chen et al.'s unbiased estimator over the group's runs.")):
        lines += [f"## {title}", ""]
        frame = t[name]
        frame = frame[frame["infra_errors"] == "exclude"]
        if len(frame):
            header, rows = _wide_per_k(frame, value)
            lines += [md_table(header, rows), "",
                      f"{extra} Infra errors excluded (both policies are in {name}.parquet). "
                      f"{MISSING}: the group has fewer than k runs, so no estimate.", ""]
        else:
            lines += ["No finished cells yet.", ""]

    if "reprompting" in t:
        lines += ["## Re-prompting", "",
                  "Cells whose budget re-prompts an agent that stops early (budget.max_reprompts), split by how often "
                  "it was started again. \"first stop\": the improvement it had when it first stopped by itself, what "
                  "a run without re-prompting would have scored; \"final\": with the re-prompts. Infra errors "
                  "excluded.", ""]
        rows = [list(r[:len(GROUP)]) + [r.reprompts, r.n, fmt(r.mean_first_stop, signed=True),
                                        fmt(r.mean_final, signed=True), fmt(r.mean_gain, signed=True)]
                for r in t["reprompting"].itertuples(index=False)]
        lines += [md_table(GROUP + ["re-prompts", "runs", "mean at first stop", "mean final", "mean gain"], rows)
                  if rows else "No finished cells yet.", ""]

    lines += ["## Outcomes", ""]
    fc = t["failure_classes"]
    if len(fc):
        wide = fc.pivot_table(index=["agent", "driver"], columns="outcome_class", values="n", fill_value=0)
        classes = [c for c in ["improved", *run_report.FAILURE_CLASSES] if c in wide.columns]
        rows = [list(key) + [int(wide.loc[key, c]) for c in classes] for key in wide.index]
        lines += [md_table(["agent", "driver"] + classes, rows), ""]
        lines += [f"- {c}: {run_report.FAILURE_CLASSES[c]}" for c in classes if c != "improved"] + [""]
    else:
        lines += ["No finished cells yet.", ""]

    checked = cells[cells["mode_violation"].notna()] if "mode_violation" in cells else cells.iloc[:0]
    if len(checked):
        lines += ["## Training-mode compliance", "",
                  "Each cell's code snapshots checked against its mode's rules (conf/mode): a forbidden pattern in "
                  "any snapshot, or a required one missing from the best submission's, breaks the mode.", ""]
        rows = [[f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task, r.agent, r.driver, r.mode, r.seed,
                 "kept" if not r.mode_violation else f"**broken**: {r.mode_violation}"] for r in checked.itertuples()]
        lines += [md_table(["cell", "task", "agent", "driver", "mode", "seed", "rules"], rows), ""]

    estimated = t.get("estimated_usage")
    if estimated is not None and len(estimated):
        lines += ["## Estimated driver tokens", "",
                  "Calls whose stream was cut before the server sent its usage (the agent hung up, or its deadline "
                  "ended it) are counted by the driver proxy itself: prompt tokens with the model's tokenizer or the "
                  "provider's count endpoint, else from characters, and generated tokens from what was streamed "
                  "(each record's `estimated` says how). They are in every token and cost figure here; these cells "
                  "hold such counts.", ""]
        rows = [[f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task, r.agent, r.driver, r.seed,
                 f"{r.estimated_calls} of {r.calls}", f"{int(r.estimated_tokens)} of {int(r.tokens)}"]
                for r in estimated.itertuples()]
        lines += [md_table(["cell", "task", "agent", "driver", "seed", "estimated calls", "estimated tokens"], rows),
                  ""]

    lines += ["## Cells", ""]
    rows = [[r.cell_id if r.status == "pending" else f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task,
             r.agent, r.driver, r.seed, r.status, fmt(r.improvement, signed=True), fmt(r.anchored, signed=True),
             r.n_submissions, r.outcome_class, r.driver_tokens, _usd(r.driver_cost_usd), _usd(r.judge_cost_usd),
             fmt(r.gpu_hours, 3)]
            + ([f"[summary](../cells/{r.cell_id}/summary.md)" if r.cell_id in summaries else ""] if summaries else [])
            for r in cells.itertuples()]
    lines += [md_table(["cell", "task", "agent", "driver", "seed", "status", "improvement", "anchored", "submissions",
                        "outcome", "driver tokens", "driver $", "judge $", "GPU-h"]
                       + (["LLM summary"] if summaries else []), rows), ""]
    lines += _summaries_section(cells, t.get("summaries", pd.DataFrame(columns=SUMMARY_COLUMNS)), summaries,
                                summarizer)
    lines += _misuse_section(cells, t.get("audit", pd.DataFrame(columns=AUDIT_COLUMNS)), out.get("audits") or {})

    if figure_paths:
        lines += ["## Figures", ""] + [f"![{path.stem}]({path.name})" for path in figure_paths] + [""]
        if "tokens" not in out["curves"] or not len(out["curves"]["tokens"]):
            lines += ["No driver is metered in these cells, so there is no curve over tokens.", ""]
    lines += ["Exports: cells.parquet, events.parquet and one Parquet file per table, for pandas and "
              "notebooks/analysis.ipynb.", ""]
    return "\n".join(lines)


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
