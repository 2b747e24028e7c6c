"""What each cell cost: its driver's tokens and dollars, its LLM judge's dollars, and the GPU-hours it reserved; and
per group, the cost of a point of improvement.

Read from the records that meter them, nothing estimated here: the driver proxy's lines (the ledger's driver_usage
events, whose payloads are driver_calls.jsonl's lines), the judge's calls through the same proxy
(attempt-N/judge_calls.jsonl, every evaluation of the attempt, the held-out one included), and the cell's reservation
(budget.gpus) times its wall time. Every sum of metered calls goes through `metered_totals`, so a field a proxy line
gains (e.g. `estimated`: tokens of a stream cut before its usage arrived, counted from what passed) shows everywhere.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from contracts.records import read_jsonl

JUDGE_CALLS = "judge_calls.jsonl"  # evaluators.service.JUDGE_CALLS (the orchestrator does not import the grader)
TOKEN_KEYS = ("input_tokens", "output_tokens", "cached_tokens")
# a cell's cost columns (cells.parquet, the Cells table) and the per-group means over runs
COST_COLUMNS = ["driver_calls", "driver_input_tokens", "driver_output_tokens", "driver_tokens", "driver_cost_usd",
                "driver_estimated_calls", "driver_capped_calls", "driver_cap", "driver_limit_calls",
                "driver_last_at_limit", "judge_calls", "judge_cost_usd", "gpu_hours", "cost_usd"]
GROUP_COLUMNS = ["cost_runs", "driver_tokens_mean", "driver_cost_usd_mean", "judge_cost_usd_mean", "gpu_hours_mean",
                 "cost_usd_mean", "cost_usd_total", "gpu_hours_total", "usd_per_point", "gpu_hours_per_point"]


def metered_totals(lines: Iterable[dict]) -> dict:
    """Calls, tokens and dollars of metered calls (the driver proxy's record lines, for an agent or a judge):
    `estimated_calls` counts lines marked `estimated` (their tokens counted by the proxy, not the provider);
    `capped_calls` those whose output cap the proxy wrote into the request (`capped`: {field: [asked, sent]}), `cap`
    the largest it sent (None: none capped); `limit_calls` those whose reply stopped at its output-token limit
    (`at_output_limit`), `last_at_limit` whether the last call's did (by time: the agent's last reply was cut)."""
    out = {"calls": 0, **dict.fromkeys(TOKEN_KEYS, 0), "cost_usd": 0.0, "estimated_calls": 0, "capped_calls": 0,
           "cap": None, "limit_calls": 0, "last_at_limit": False}
    last_t = None
    for line in lines:
        out["calls"] += 1
        for key in TOKEN_KEYS:
            out[key] += int(line.get(key) or 0)
        out["cost_usd"] += float(line.get("cost_usd") or 0.0)
        out["estimated_calls"] += bool(line.get("estimated"))
        sent = [s for _, s in (line.get("capped") or {}).values() if s is not None]
        out["capped_calls"] += bool(sent)
        out["cap"] = max([*sent, *([out["cap"]] if out["cap"] is not None else [])], default=None)
        out["limit_calls"] += bool(line.get("at_output_limit"))
        if last_t is None or float(line.get("t") or 0.0) >= last_t:
            last_t, out["last_at_limit"] = float(line.get("t") or 0.0), bool(line.get("at_output_limit"))
    return out


def cell_cost(attempt_dir: Path | None, driver_lines: Iterable[dict], gpus: float | None,
              elapsed_s: float | None) -> dict:
    """One cell's cost (its final attempt): driver usage from its proxy lines, judge usage from the attempt's
    judge_calls.jsonl, GPU-hours = reserved GPUs x wall hours."""
    driver = metered_totals(driver_lines)
    judge = metered_totals(read_jsonl(attempt_dir / JUDGE_CALLS) if attempt_dir is not None else [])
    gpu_hours = float(gpus or 0.0) * float(elapsed_s or 0.0) / 3600
    return {"driver_calls": driver["calls"], "driver_input_tokens": driver["input_tokens"],
            "driver_output_tokens": driver["output_tokens"],
            "driver_tokens": driver["input_tokens"] + driver["output_tokens"], "driver_cost_usd": driver["cost_usd"],
            "driver_estimated_calls": driver["estimated_calls"], "driver_capped_calls": driver["capped_calls"],
            "driver_cap": driver["cap"], "driver_limit_calls": driver["limit_calls"],
            "driver_last_at_limit": driver["last_at_limit"], "judge_calls": judge["calls"],
            "judge_cost_usd": judge["cost_usd"], "gpu_hours": gpu_hours,
            "cost_usd": driver["cost_usd"] + judge["cost_usd"]}


def with_costs(output_dir: Path, cells: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The cells frame (tables.cells_frame) with each cell's cost columns (COST_COLUMNS); cells not started cost 0."""
    use = events[(events["kind"] == "driver_usage") & events["final_attempt"]] if len(events) else events
    lines: dict[str, list[dict]] = {}
    for cell_id, payload in zip(use["cell_id"], use["payload"]) if len(use) else ():
        lines.setdefault(cell_id, []).append(json.loads(payload) if isinstance(payload, str) else payload)
    rows = []
    for c in cells.itertuples(index=False):
        attempts = int(c.attempts) if c.attempts == c.attempts and c.attempts else 0
        elapsed = (c.ended_at - c.started_at) if c.ended_at == c.ended_at and c.started_at == c.started_at else 0.0
        attempt_dir = output_dir / "cells" / c.cell_id / f"attempt-{attempts}" if attempts else None
        rows.append(cell_cost(attempt_dir, lines.get(c.cell_id, []), c.budget_gpus, elapsed))
    costs = pd.DataFrame(rows, columns=COST_COLUMNS, index=cells.index)
    return pd.concat([cells.drop(columns=[c for c in COST_COLUMNS if c in cells]), costs], axis=1)


def group_costs(runs: pd.DataFrame, by: list[str], value: str = "value") -> pd.DataFrame:
    """Per group: mean cost per run (driver tokens and dollars, judge dollars, GPU-hours, all dollars), totals, and
    the cost of a point of improvement: total dollars (GPU-hours) over the total improvement of `value`, where that
    is positive (NaN: nothing was gained, so no price per point)."""
    if not len(runs):
        return pd.DataFrame(columns=by + GROUP_COLUMNS)
    rows = []
    for key, g in runs.groupby(by, sort=True, dropna=False):
        gained = float(g[value].fillna(0.0).sum())
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), "cost_runs": len(g),
                     "driver_tokens_mean": g["driver_tokens"].mean(),
                     "driver_cost_usd_mean": g["driver_cost_usd"].mean(),
                     "judge_cost_usd_mean": g["judge_cost_usd"].mean(), "gpu_hours_mean": g["gpu_hours"].mean(),
                     "cost_usd_mean": g["cost_usd"].mean(), "cost_usd_total": g["cost_usd"].sum(),
                     "gpu_hours_total": g["gpu_hours"].sum(),
                     "usd_per_point": g["cost_usd"].sum() / gained if gained > 0 else np.nan,
                     "gpu_hours_per_point": g["gpu_hours"].sum() / gained if gained > 0 else np.nan})
    return pd.DataFrame(rows, columns=by + GROUP_COLUMNS)


def ledger_costs(ledger, cell_ids: list[str]) -> dict[str, dict]:
    """cell_cost of each cell, straight from the ledger (orchestrator.ledger.Ledger) and its attempts' records."""
    rows = ledger.cells(cell_ids)
    lines: dict[str, list[dict]] = {}
    for e in ledger.events(kind="driver_usage"):
        row = rows.get(e["cell_id"])
        if row is not None and e["attempt"] == row["attempts"]:
            lines.setdefault(e["cell_id"], []).append(e["payload"])
    out = {}
    for cell_id, row in rows.items():
        spec = json.loads(row["spec"]) if isinstance(row.get("spec"), str) else (row.get("spec") or {})
        started, ended = row.get("started_at"), row.get("ended_at")
        elapsed = ended - started if started is not None and ended is not None else 0.0
        attempt_dir = ledger.path.parent / "cells" / cell_id / f"attempt-{row['attempts']}" if row["attempts"] else None
        out[cell_id] = cell_cost(attempt_dir, lines.get(cell_id, []), (spec.get("budget") or {}).get("gpus"), elapsed)
    return out
