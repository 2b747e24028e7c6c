"""What the viewer's pages show: the sweep's model (analysis.sweep_model), shaped for a page, and a cell's records.

The sweep page: the model's cells in the columns formats.CELL_TABLE names (values as they sort, and as formats shows
them), their flags, the model's tables (their views formatted here) and curves. A group page: its cells from the
sweep page's data. A cell page: its run report (run_report.current_report), its events from the ledger, its summary
and audit (run_summary.read_summary, audit.read_audit), its logs and its code snapshots (viewer.code). The viewer
computes nothing of its own: a number on a page is the model's, formatted by analysis.formats.

The agents' traces are most of a paper sweep's ledger (50,000 events a cell), so the sweep's model is built without
them and a cell page reads only its own cell's events.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd

from contracts.records import read_jsonl
from orchestrator.analysis import audit, cost, curves, formats, run_report, run_summary, sweep_model, tables
from orchestrator.analysis.sweep_model import SweepModel

TRACE_PAGE = 500          # transcript entries per page: a page renders at once, the next is loaded when asked for
LOG_TAIL_BYTES = 256_000  # the end of an agent's stdout/stderr says why it ended; the whole file stays on disk
GROUP_LABELS = ("task", "agent", "driver", "mode")  # a group page shows them once, above its cells
# The report's tables a sweep page shows, and their columns (None: all); infra errors excluded where both policies are
# given, as report.md's headline tables do
TABLE_VIEWS = {
    "improvement": ["task", "agent", "driver", "mode", "n", "mean", "se", "ci_lo", "ci_hi", "driver_tokens", "cost_usd",
                    "note"],
    "held_out": ["task", "agent", "driver", "mode", "n", "mean", "se", "mean_gap", "feedback_mean"],
    "pooled": ["agent", "driver", "n", "n_clusters", "mean", "clustered_se", "anchored_mean", "anchored_clustered_se"],
    "pass_at_k": None, "best_of_k": None, "failure_classes": None, "references": None,
    # how many seeds a claim needs (analysis/seeds.py: report.md's Seeds section)
    "seeds": ["task", "agent", "driver", "mode", "runs", "mean", "sd", "sd_up", "ci_lo", "ci_hi", "seeds_for_ci",
              "extra_for_ci", "gpu_hours_per_cell", "extra_gpu_hours", "note"],
    "seed_pairs": ["task", "driver", "mode", "agent_a", "agent_b", "runs_a", "runs_b", "difference", "delta",
                   "power_now", "seeds_per_arm", "extra_a", "extra_b", "extra_gpu_hours", "note"],
}
PLOTTED_TABLES = ("improvement", "best_of_k")  # the heatmap's and the best-of-k plot's numbers


def ledger_version(output_dir: Path) -> str:
    """Changes whenever the ledger is written (its WAL or the file itself): a running sweep's pages follow it."""
    parts = []
    for name in ("ledger.sqlite", "ledger.sqlite-wal"):
        path = output_dir / name
        if path.exists():
            st = path.stat()
            parts.append(f"{st.st_mtime_ns}:{st.st_size}")
    return "/".join(parts)


def cell_version(output_dir: Path, cell_id: str) -> str:
    """Changes whenever the cell's row or its events change."""
    db = sqlite3.connect(tables.ledger_path(output_dir), timeout=30)
    try:
        row = db.execute("SELECT status, attempts, n_submissions, ended_at FROM cells WHERE cell_id=?",
                         (cell_id,)).fetchone()
        n, last = db.execute("SELECT COUNT(*), MAX(id) FROM events WHERE cell_id=?", (cell_id,)).fetchone()
    finally:
        db.close()
    return f"{row}/{n}/{last}"


def query(output_dir: Path, sql: str, args: tuple = ()) -> pd.DataFrame:
    db = sqlite3.connect(tables.ledger_path(output_dir), timeout=30)  # plain sqlite, as tables.read_ledger reads
    try:
        return pd.read_sql_query(sql, db, params=args)
    finally:
        db.close()


def cell_events(output_dir: Path, cell_id: str) -> list[tuple[int, float, str, str]]:
    """One cell's ledger events (every attempt) as (attempt, t, kind, payload JSON text), in the ledger's order."""
    db = sqlite3.connect(tables.ledger_path(output_dir), timeout=30)
    try:
        return db.execute("SELECT attempt, t, kind, payload FROM events WHERE cell_id=? ORDER BY attempt, t, id",
                          (cell_id,)).fetchall()
    finally:
        db.close()


def cell_row(output_dir: Path, cell_id: str) -> dict | None:
    rows = query(output_dir, "SELECT * FROM cells WHERE cell_id=?", (cell_id,)).to_dict("records")
    return tables.plain(rows[0]) if rows else None


def group_slug(task: str, agent: str, driver: str, mode: str) -> str:
    """A group's file name: its labels, with anything a file name should not hold replaced."""
    return "__".join("".join(c if c.isalnum() or c in "-_." else "-" for c in str(v))
                     for v in (task, agent, driver, mode))


# -- the sweep ---------------------------------------------------------------------------------------------------

def build_sweep(output_dir: Path, n_boot: int = 10_000) -> dict:
    """The sweep page's data from the ledger: its model built as `report` builds it (the same tables, the same
    bootstrap), without the agents' traces and without writing a run report."""
    return sweep_data(sweep_model.build(output_dir, traces=False, n_boot=n_boot))


def sweep_data(model: SweepModel) -> dict:
    """The sweep page: its cells with outcome and flags, the report's tables, and the curves' data (averaged bands
    per group, and each cell's own best-so-far steps, so hovering a curve names the cell)."""
    cells, events, analyses = model.cells, model.events, model.analyses
    subs = tables.submissions(events) if len(events) else None
    flags_of: dict[str, set[str]] = {}
    if subs is not None:
        for cid, flags in zip(subs["cell_id"], subs["flags"]):
            flags_of.setdefault(cid, set()).update(f for f in (flags or "").split(",") if f)
    rows = []
    for row in cells.to_dict("records"):
        cid = row["cell_id"]
        report = model.reports.get(cid) or {}
        flags = set(flags_of.get(cid, set())) | {f for f in (row.get("doubts") or "").split(",") if f}
        if row.get("contaminated") == 1:
            flags.add("contaminated")
        if report.get("mode_violations"):
            flags.add("mode_violation")
        if row.get("reprompts"):
            flags.add("reprompted")
        values = tables.plain({**row, "elapsed_s": report.get("elapsed_s"), "flags": sorted(flags)})
        rows.append({**{c.key: values.get(c.key) for c in formats.CELL_TABLE}, "sweep": values["sweep"],
                     "group": group_slug(*(row[k] for k in GROUP_LABELS)),
                     "shown": {c.key: formats.show(values.get(c.key), c.format) for c in formats.CELL_TABLE
                               if c.key != "flags"}})
    finished = tables.results(cells, infra_errors="exclude")
    cell_curves = {}
    for axis in curves.AXES:
        points = curves.best_so_far(events, axis, finished["cell_id"]) if len(events) else None
        cell_curves[axis] = {} if points is None else {
            cid: [p["x"].tolist(), p["value"].tolist()] for cid, p in points.groupby("cell_id")}
    bands = {axis: frame_records(band) for axis, band in analyses["curves"].items()}
    made = analyses["tables"]
    return {"cells": rows, "columns": formats.columns_data(), "formats": formats.FORMATS,
            "progress": tables.plain(analyses["progress"]), "bands": bands, "cell_curves": cell_curves,
            "axis_labels": curves.AXIS_LABELS,
            "tables": {name: frame_records(made[name]) for name in PLOTTED_TABLES if name in made},
            "shown_tables": {name: shown_table(made[name], columns) for name, columns in TABLE_VIEWS.items()
                             if name in made and len(made[name])},
            "manifest": tables.plain(analyses.get("manifest")), "failure_classes": run_report.FAILURE_CLASSES}


def frame_records(frame: pd.DataFrame) -> dict:
    """A frame as {columns, rows} (rows as lists: a third of the size of records at 270 cells)."""
    return {"columns": [str(c) for c in frame.columns], "rows": tables.plain(frame.to_numpy().tolist())}


def shown_table(frame: pd.DataFrame, columns: list[str] | None) -> dict:
    """A table as a page shows it: its view's columns, the infra-errors-excluded rows where both are given, each
    value formatted (formats.table_value)."""
    if "infra_errors" in frame:
        frame = frame[frame["infra_errors"] == "exclude"]
    columns = [c for c in (columns or frame.columns) if c in frame.columns and c != "infra_errors"]
    rows = [[formats.table_value(v) for v in row] for row in tables.plain(frame[columns].to_numpy().tolist())]
    return {"columns": columns, "rows": rows}


# -- a cell ------------------------------------------------------------------------------------------------------

TRANSCRIBED = ("agent_trace", "driver_usage", "submission", "reprompt", "status", "outcome")


def transcript(rows: list[tuple[int, float, str, str]], attempt: int | None) -> list[str]:
    """The final attempt's trace, driver calls, submissions, re-prompts and status in time order (the ledger's), each
    as the JSON text of {n, t, kind, payload}: n is its place (what audit evidence links to); the payload's text is
    the ledger's own, passed through unparsed."""
    mine = [(t, k, p) for a, t, k, p in rows if a == attempt and k in TRANSCRIBED]
    return [f'{{"n":{n},"t":{t!r},"kind":"{k}","payload":{p}}}' for n, (t, k, p) in enumerate(mine)]


def trace_pages(rows: list[tuple[int, float, str, str]], attempt: int | None) -> list[dict]:
    """The transcript's pages: where each starts and ends in time."""
    times = [t for a, t, k, _ in rows if a == attempt and k in TRANSCRIBED]
    return [{"first": start, "t0": times[start], "t1": times[min(start + TRACE_PAGE, len(times)) - 1]}
            for start in range(0, len(times), TRACE_PAGE)]


def log_tail(path: Path) -> dict | None:
    if not path.is_file():
        return None
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - LOG_TAIL_BYTES))
        text = f.read().decode(errors="replace")
    return {"name": path.name, "size": size, "text": text, "cut": size > LOG_TAIL_BYTES}


def cell_data(output_dir: Path, cell_id: str) -> tuple[dict, list[str]] | None:
    """A cell page's data, and its transcript's entries as JSON texts (paged apart: viewer.site). None: no such cell
    in the ledger."""
    row = cell_row(output_dir, cell_id)
    if row is None:
        return None
    rows = cell_events(output_dir, cell_id)
    # the run report reads no trace line, and parsing 50,000 of them is most of a big cell's page
    events = tables.event_records(r for r in rows if r[2] != "agent_trace")
    report = run_report.current_report(output_dir, row, events) if row["status"] != "pending" else None
    cell_dir = output_dir / "cells" / cell_id
    attempt = (report or {}).get("attempt")
    entries = transcript(rows, attempt)
    summary = run_summary.read_summary(cell_dir)
    kept_audit = audit.read_audit(cell_dir)
    logs = []
    for a in sorted({r[0] for r in rows} | set(_attempts(cell_dir))):
        for name in ("agent.stdout", "agent.stderr"):
            tail = log_tail(cell_dir / f"attempt-{a}" / name)
            if tail:
                logs.append({"attempt": a, **tail})
    spec = json.loads(row["spec"]) if isinstance(row.get("spec"), str) else {}
    final = (report or {}).get("final") or {}
    data = {
        "cell": {k: v for k, v in row.items() if k != "spec"},
        "mode": tables.mode_of(spec), "budget": spec.get("budget") or {},
        "driver": {k: v for k, v in (spec.get("driver") or {}).items() if k in ("name", "provider", "model")},
        "report": report, "final": final or None,
        "failure_classes": run_report.FAILURE_CLASSES,
        "summary": summary, "summary_html": markdown_html(summary["text"]) if summary else None,
        "audit": kept_audit, "checklist": audit.CHECKLIST,
        "logs": logs, "attempts": sorted({r[0] for r in rows}),
        "trace_pages": trace_pages(rows, attempt), "trace_total": len(entries), "page_size": TRACE_PAGE,
        "driver_calls": _driver_totals(cell_dir, attempt),
        "group": group_slug(row["task"], row["agent"], row["driver"], tables.mode_of(spec)),
        "has_code": (cell_dir / "code.git").exists(),
    }
    return tables.plain(data), entries


def markdown_html(text: str) -> str:
    """A summary's markdown as HTML; raw HTML in it is shown as text, never run (an LLM wrote it from a trace)."""
    from markdown_it import MarkdownIt  # (markdown-it-py: rich's dependency)

    return MarkdownIt("commonmark", {"html": False}).render(text)


def _attempts(cell_dir: Path) -> list[int]:
    return [int(p.name.split("-")[1]) for p in cell_dir.glob("attempt-*") if p.name.split("-")[1].isdigit()]


def _driver_totals(cell_dir: Path, attempt: int | None) -> dict | None:
    if attempt is None:
        return None
    lines = read_jsonl(cell_dir / f"attempt-{attempt}" / "driver_calls.jsonl")
    return cost.metered_totals(lines) if lines else None


# -- a group -----------------------------------------------------------------------------------------------------

def group_data(sweep: dict, slug: str) -> dict | None:
    """A group's seeds side by side, from the sweep page's data: each cell's outcome and best-so-far curves."""
    cells = [c for c in sweep["cells"] if c["group"] == slug]
    if not cells:
        return None
    ids = {c["cell_id"] for c in cells}
    first = cells[0]
    return {"labels": {k: first[k] for k in GROUP_LABELS}, "cells": cells,
            "columns": [c for c in sweep["columns"] if c["key"] not in GROUP_LABELS], "formats": sweep["formats"],
            "cell_curves": {axis: {cid: pts for cid, pts in by.items() if cid in ids}
                            for axis, by in sweep["cell_curves"].items()},
            "axis_labels": sweep["axis_labels"], "failure_classes": sweep["failure_classes"]}
