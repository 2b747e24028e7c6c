"""The sweep report: OUTPUT_DIR/report/ rendered from the sweep's model (sweep_model.py).

Writes report.md (the tables, rendered by report_markdown), PNG figures, Parquet exports (cells, events and every
table) for pandas and the notebook, and, with `analysis.summarize`, each cell's LLM-written summary (run_summary)
and, with `analysis.audit`, its trace audit; logs the same tables and figures to one W&B run. The `report` command
also writes the viewer's pages from the same model (orchestrator/report_command.py). It works on a partially finished
sweep: the tables cover finished cells and the report says how many are missing.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from contracts.records import read_jsonl
from orchestrator.analysis import audit, figures, run_summary, sweep_model, tables
from orchestrator.analysis.report_markdown import AUDIT_COLUMNS, SUMMARY_COLUMNS, render_markdown
from orchestrator.analysis.sweep_model import SweepModel

OUTPUT_PATTERNS = ("report.md", "*.png", "*.parquet")


def build_report(output_dir: str | Path, filters: dict | None = None, wandb_cfg: dict | None = None, *,
                 success_threshold: float = 0.0, n_boot: int = 10_000, seed: int = 0,
                 summarizer: run_summary.Summarizer | None = None,
                 auditor: run_summary.Summarizer | None = None) -> Path:
    """Build the sweep's model (every started cell's run report written again) and write OUTPUT_DIR/report/ from
    it; return its path. filters: task, agent, driver, sweep, seed, mode (one value or a list each). The rest:
    write_report's."""
    model = sweep_model.build(output_dir, filters, write_reports=True, success_threshold=success_threshold,
                              n_boot=n_boot, seed=seed)
    return write_report(model, filters, wandb_cfg, success_threshold=success_threshold, summarizer=summarizer,
                        auditor=auditor)


def write_report(model: SweepModel, filters: dict | None = None, wandb_cfg: dict | None = None, *,
                 success_threshold: float = 0.0, summarizer: run_summary.Summarizer | None = None,
                 auditor: run_summary.Summarizer | None = None) -> Path:
    """Write the model's report to OUTPUT_DIR/report/ and return its path. wandb_cfg: the logger config ({kind,
    project, entity, mode}); None or kind "none": no W&B. success_threshold: the one the model's pass@k used
    (report.md states it). summarizer: a driver writes each finished cell's run summary (None: none is asked; those
    written are shown). auditor: a driver audits each finished cell's trace for misuse beside the deterministic
    findings (audit.py; None: no audit is run; those written are shown)."""
    output_dir, cells, events = model.output_dir, model.cells, model.events
    report_dir = output_dir / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    for pattern in OUTPUT_PATTERNS:  # a figure from an earlier report (e.g. tokens) must not linger
        for old in report_dir.glob(pattern):
            old.unlink()

    out = {**model.analyses, "tables": dict(model.analyses["tables"])}  # the report's own tables join a copy
    # After the run reports, which stay as they are whatever a driver answers.
    finished = {cid: r for cid, r in model.reports.items() if r["status"] in tables.FINISHED_STATUSES}
    by_cell = tables.events_by_cell(events) if summarizer or auditor else {}
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
        logged = {f"table/{name}": wandb.Table(dataframe=tables.plain_frame(frame))
                  for name, frame in out["tables"].items() if len(frame)}
        logged.update({f"figure/{path.stem}": wandb.Image(str(path)) for path in figure_paths})
        run.log(logged)
        run.summary.update({f"cells/{k}": v for k, v in out["progress"].items() if k != "by_status"})
        run.summary.update({f"cost/{k}": float(cells[k].sum()) for k in ("driver_tokens", "driver_cost_usd",
                                                                          "judge_cost_usd", "gpu_hours", "cost_usd")})
    finally:
        run.finish()
