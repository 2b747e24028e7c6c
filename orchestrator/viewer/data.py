"""What the viewer's pages show, read from a sweep's records with the analysis code's own loaders.

The sweep page: the cells (tables.cells_frame and its columns: costs, doubts, modes), each cell's outcome class (its
run report), the report's tables and curves (report.compute_tables, curves.best_so_far). A cell page: its run report
(run_report.cell_report, or the report.json written when it ended), its events from the ledger, its summary and
audit (run_summary.read_summary, audit.read_audit), its logs and its code snapshots (viewer.code). Nothing here is
parsed a second way: the viewer shapes for a page what those modules already read.

The agents' traces are most of a paper sweep's ledger (50,000 events a cell), so the sweep page reads the ledger
without them and a cell page reads only its own cell's events.
"""
from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from contracts.records import read_jsonl
from orchestrator.analysis import audit, cost, curves, run_report, run_summary, tables
from orchestrator.analysis.report import compute_tables, events_by_cell

TRACE_PAGE = 500          # transcript entries per page: a page renders at once, the next is loaded when asked for
LOG_TAIL_BYTES = 256_000  # the end of an agent's stdout/stderr says why it ended; the whole file stays on disk
CELL_COLUMNS = ["cell_id", "sweep", "task", "agent", "driver", "mode", "seed", "status", "attempts", "baseline_score",
                "best_score", "improvement", "final_score", "final_improvement", "n_submissions", "limit_hit",
                "driver_tokens", "cost_usd", "elapsed_s", "doubts", "reprompts"]


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


def load_sweep(output_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """tables.load's frames, without the agents' trace events (the sweep page needs none of them)."""
    cells = query(output_dir, "SELECT * FROM cells ORDER BY task, agent, driver, seed, cell_id")
    events = query(output_dir, "SELECT cell_id, attempt, t, kind, payload FROM events WHERE kind != 'agent_trace' "
                                "ORDER BY cell_id, attempt, t, id")
    events = tables.events_frame(cells, events)
    cells = tables.with_reprompts(tables.cells_frame(cells), events)
    return tables.with_doubts(cost.with_costs(output_dir, cells, events), events), events


def cell_events(output_dir: Path, cell_id: str) -> list[tuple[int, float, str, str]]:
    """One cell's ledger events (every attempt) as (attempt, t, kind, payload JSON text), in the ledger's order."""
    db = sqlite3.connect(tables.ledger_path(output_dir), timeout=30)
    try:
        return db.execute("SELECT attempt, t, kind, payload FROM events WHERE cell_id=? ORDER BY attempt, t, id",
                          (cell_id,)).fetchall()
    finally:
        db.close()


def parsed(rows: list[tuple[int, float, str, str]], skip: tuple[str, ...] = ("agent_trace",)) -> list[dict]:
    """Events as the analyses take them (payloads parsed), without the kinds in skip: the run report reads no trace
    line, and parsing 50,000 of them is most of a big cell's page."""
    return [{"attempt": int(a), "t": float(t), "kind": k, "payload": json.loads(p)} for a, t, k, p in rows
            if k not in skip]


def cell_row(output_dir: Path, cell_id: str) -> dict | None:
    rows = query(output_dir, "SELECT * FROM cells WHERE cell_id=?", (cell_id,)).to_dict("records")
    return plain(rows[0]) if rows else None


def plain(value):
    """NaN and numpy scalars to what JSON holds (None, int, float), recursively."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def report_of(output_dir: Path, row: dict, events: list[dict] | None = None) -> dict:
    """A cell's run report: the one written when it ended (report.json) when it is not older than the cell's end,
    else computed now from its records (a running cell), without writing anything."""
    cell_dir = output_dir / "cells" / row["cell_id"]
    written = cell_dir / "report.json"
    if row["status"] in tables.FINISHED_STATUSES and written.exists() and row.get("ended_at") \
            and written.stat().st_mtime >= row["ended_at"]:
        try:
            return json.loads(written.read_text())
        except ValueError:
            pass  # a report being rewritten: compute it
    if events is None:
        events = parsed(cell_events(output_dir, row["cell_id"]))
    return run_report.cell_report(plain(row), events, cell_dir)


def group_slug(task: str, agent: str, driver: str, mode: str) -> str:
    """A group's file name: its labels, with anything a file name should not hold replaced."""
    return "__".join("".join(c if c.isalnum() or c in "-_." else "-" for c in str(v))
                     for v in (task, agent, driver, mode))


# -- the sweep ---------------------------------------------------------------------------------------------------

def sweep_data(output_dir: Path, cells: pd.DataFrame, events: pd.DataFrame, reports: dict[str, dict],
               out: dict) -> dict:
    """The sweep page: its cells with outcome and flags, the report's tables, and the curves' data (averaged bands
    per group, and each cell's own best-so-far steps, so hovering a curve names the cell)."""
    subs = tables.submissions(events) if len(events) else None
    flags_of: dict[str, set[str]] = {}
    if subs is not None:
        for cid, flags in zip(subs["cell_id"], subs["flags"]):
            flags_of.setdefault(cid, set()).update(f for f in (flags or "").split(",") if f)
    rows = []
    for row in cells.to_dict("records"):
        cid = row["cell_id"]
        report = reports.get(cid) or {}
        flags = set(flags_of.get(cid, set())) | {f for f in (row.get("doubts") or "").split(",") if f}
        if row.get("contaminated") == 1:
            flags.add("contaminated")
        if report.get("mode_violations"):
            flags.add("mode_violation")
        if row.get("reprompts"):
            flags.add("reprompted")
        elapsed = report.get("elapsed_s")
        rows.append(plain({**{k: row.get(k) for k in CELL_COLUMNS}, "elapsed_s": elapsed,
                           "outcome_class": row.get("outcome_class"), "flags": sorted(flags),
                           "group": group_slug(row["task"], row["agent"], row["driver"], row["mode"])}))
    finished = tables.results(cells, infra_errors="exclude")
    cell_curves = {}
    for axis in curves.AXES:
        points = curves.best_so_far(events, axis, finished["cell_id"]) if len(events) else None
        cell_curves[axis] = {} if points is None else {
            cid: [p["x"].tolist(), p["value"].tolist()] for cid, p in points.groupby("cell_id")}
    bands = {axis: frame_records(band) for axis, band in out["curves"].items()}
    shown = {name: frame_records(out["tables"][name]) for name in
             ("improvement", "held_out", "pooled", "best_of_k", "pass_at_k", "failure_classes", "references")
             if name in out["tables"]}
    return {"cells": rows, "progress": plain(out["progress"]), "bands": bands, "cell_curves": cell_curves,
            "axis_labels": curves.AXIS_LABELS, "tables": shown, "manifest": plain(out.get("manifest")),
            "failure_classes": run_report.FAILURE_CLASSES}


def frame_records(frame: pd.DataFrame) -> dict:
    """A frame as {columns, rows} (rows as lists: a third of the size of records at 270 cells)."""
    frame = frame.astype(object).where(frame.notna(), None)
    return {"columns": [str(c) for c in frame.columns], "rows": plain(frame.to_numpy().tolist())}


def sweep_reports(output_dir: Path, cells: pd.DataFrame, events: pd.DataFrame) -> dict[str, dict]:
    """Every started cell's run report (written ones read back; running ones computed from the events at hand)."""
    by_cell = events_by_cell(events)
    return {row["cell_id"]: report_of(output_dir, plain(row), by_cell.get(row["cell_id"], []))
            for row in cells.to_dict("records") if row["status"] != "pending"}


def with_outcomes(cells: pd.DataFrame, reports: dict[str, dict]) -> pd.DataFrame:
    """The cells table with the outcome class of each cell's run report (pending: not started)."""
    cells = cells.copy()
    cells["outcome_class"] = [(reports.get(c) or {}).get("outcome_class", "pending") for c in cells["cell_id"]]
    return cells


def build_sweep(output_dir: Path, n_boot: int = 10_000) -> dict:
    """The sweep page's data from the ledger, as `report` computes it (its tables with the same bootstrap)."""
    cells, events = load_sweep(output_dir)
    reports = sweep_reports(output_dir, cells, events)
    cells = with_outcomes(cells, reports)
    out = compute_tables(cells, events, n_boot=n_boot)
    from orchestrator import manifest

    out["manifest"] = manifest.summary(output_dir)
    return sweep_data(output_dir, cells, events, reports, out)


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
    events = parsed(rows)
    report = report_of(output_dir, row, events) if row["status"] != "pending" else None
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
    return plain(data), entries


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
    return {"labels": {k: first[k] for k in ("task", "agent", "driver", "mode")}, "cells": cells,
            "cell_curves": {axis: {cid: pts for cid, pts in by.items() if cid in ids}
                            for axis, by in sweep["cell_curves"].items()},
            "axis_labels": sweep["axis_labels"], "failure_classes": sweep["failure_classes"]}
