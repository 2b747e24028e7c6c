"""The ledger as two pandas frames, cells and events: the frames the analyses take and the Parquet exports hold.

Reading goes through plain sqlite (never the Ledger class) so a report can run beside a sweep that is still
writing: WAL mode lets a reader see the last committed state without blocking the writer.

Conventions every analysis shares (said once here, repeated in the report):
- Only a cell's final attempt counts: earlier attempts ended in infra errors and were retried.
- A finished cell's result is the improvement of its best valid submission over the baseline; a cell without
  a valid submission scores 0 (the base model stands, nothing was gained).
- Infra errors are the system's fault, so results are given both counting them as failures (0) and
  excluding them.
"""
from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from contracts.specs import ConfigError
from orchestrator.analysis import cost

FINISHED_STATUSES = ("completed", "budget_exhausted", "agent_error", "infra_error")
MISSING_STATUSES = ("pending", "running")
GROUP = ["task", "agent", "driver", "mode"]
FILTER_KEYS = ("task", "agent", "driver", "sweep", "seed", "mode")
INFRA_POLICIES = ("failure", "exclude")
# Flags that put a cell's result in doubt: a submission that is not the agent's training (a known public checkpoint,
# evaluators/identity.py), a final model that lost the general ability its task keeps (task.retention), judged
# answers that barely depend on the instruction or address the judge (contracts/screening.py). Tables give
# the results without such cells beside the results with them.
DOUBTFUL_FLAGS = ("known_checkpoint", "retention_drop", "null_model", "judge_injection")

# the ledger's cell columns the cells frame keeps (what a page or table shows of them: formats.CELL_TABLE)
LEDGER_COLUMNS = ["cell_id", "sweep", "agent", "driver", "task", "seed", "status", "attempts", "baseline_score",
                  "best_score", "improvement", "n_submissions", "limit_hit", "started_at", "ended_at", "error", "spec",
                  "final_score", "final_baseline_score", "final_improvement", "contaminated"]
BUDGET_KEYS = ("wall_time_s", "max_submissions", "max_tokens", "max_cost_usd", "cpus", "gpus", "max_reprompts")
SUBMISSION_KEYS = ("submission_id", "score", "baseline_score", "improvement", "best", "error", "elapsed_s",
                   "code_commit")
USAGE_KEYS = ("input_tokens", "output_tokens", "cached_tokens", "cost_usd")


def ledger_path(output_dir: str | Path) -> Path:
    path = Path(output_dir) / "ledger.sqlite"
    if not path.exists():
        raise ConfigError(f"no ledger at {path}; output_dir={output_dir!s} must be the directory a sweep wrote "
                          f"(it holds ledger.sqlite and cells/)")
    return path


def read_ledger(output_dir: str | Path, traces: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, events) with the raw columns of the ledger's tables; payload and spec stay JSON strings.
    traces=False leaves out the agents' trace events: most of a paper sweep's ledger (50,000 events a cell), which
    no table and no page of the whole sweep reads."""
    db = sqlite3.connect(ledger_path(output_dir), timeout=30)
    try:
        cells = pd.read_sql_query("SELECT * FROM cells ORDER BY task, agent, driver, seed, cell_id", db)
        events = pd.read_sql_query("SELECT cell_id, attempt, t, kind, payload FROM events "
                                   + ("" if traces else "WHERE kind != 'agent_trace' ")
                                   + "ORDER BY cell_id, attempt, t, id", db)
    finally:
        db.close()
    return cells, events


def load(output_dir: str | Path, filters: dict | None = None,
         traces: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The export-ready frames: cells (with budget and cost columns, doubts, re-prompts) and events (flattened,
    with cell labels; traces: as read_ledger)."""
    cells, events = read_ledger(output_dir, traces)
    cells = filter_cells(cells, filters)
    events = events_frame(cells, events[events["cell_id"].isin(cells["cell_id"])])
    return with_doubts(cost.with_costs(Path(output_dir), with_reprompts(cells_frame(cells), events), events),
                       events), events


def event_records(rows) -> list[dict]:
    """Events as the run reports and the LLM analyses take them: {attempt, t, kind, payload (parsed)}, from
    (attempt, t, kind, payload) rows."""
    return [{"attempt": int(a), "t": float(t), "kind": k, "payload": json.loads(p) if isinstance(p, str) else p}
            for a, t, k, p in rows]


def events_by_cell(events: pd.DataFrame) -> dict[str, list[dict]]:
    """The events frame (events_frame's or read_ledger's) as event_records by cell id, in the frame's order."""
    rows: dict[str, list[tuple]] = {}
    for e in events[["cell_id", "attempt", "t", "kind", "payload"]].itertuples(index=False):
        rows.setdefault(e.cell_id, []).append((e.attempt, e.t, e.kind, e.payload))
    return {cell_id: event_records(r) for cell_id, r in rows.items()}


def plain(value):
    """NaN, pandas' missing values and numpy scalars to what JSON and the ledger's rows hold (None, int, float),
    recursively: a frame's row as a run report or a page takes it."""
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


def plain_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with plain's values (object columns: a float column's NaN cannot be None otherwise)."""
    return frame.astype(object).map(plain) if len(frame.columns) else frame


def filter_cells(cells: pd.DataFrame, filters: dict | None) -> pd.DataFrame:
    """Keep cells matching every filter (task, agent, driver, sweep, seed, mode: one value or a list)."""
    for key, wanted in (filters or {}).items():
        if wanted is None:
            continue
        if key not in FILTER_KEYS:
            raise ConfigError(f"unknown report filter {key!r}; filter by one of {', '.join(FILTER_KEYS)}")
        wanted = list(wanted) if isinstance(wanted, (list, tuple, set)) else [wanted]
        column = cells[key].astype(int) if key == "seed" else \
            cells["spec"].map(mode_of) if key == "mode" else cells[key]
        wanted = [int(w) for w in wanted] if key == "seed" else [str(w) for w in wanted]
        unknown = sorted(set(wanted) - set(column), key=str)
        if unknown:
            known = sorted(set(column), key=str)
            raise ConfigError(f"report filter {key}={unknown} matches no cell in the ledger; known {key}s: {known}")
        cells = cells[column.isin(wanted)]
    return cells.reset_index(drop=True)


def mode_of(spec: str | dict) -> str:
    """A cell's training mode from its spec (JSON or parsed): free unless the sweep set one."""
    spec = json.loads(spec) if isinstance(spec, str) else (spec or {})
    return (spec.get("mode") or {}).get("name") or "free"


def cells_frame(cells: pd.DataFrame) -> pd.DataFrame:
    out = cells[[c for c in LEDGER_COLUMNS if c in cells.columns]].copy()
    specs = [json.loads(s) if isinstance(s, str) else {} for s in out["spec"]]
    budgets = [spec.get("budget", {}) for spec in specs]
    out["mode"] = [mode_of(spec) for spec in specs]
    for key in BUDGET_KEYS:
        out[f"budget_{key}"] = pd.array([b.get(key) for b in budgets], dtype="Float64").astype(float)
    out["seed"] = out["seed"].astype(int)
    for col in ("baseline_score", "best_score", "improvement", "started_at", "ended_at", "final_score",
                "final_baseline_score", "final_improvement", "contaminated"):
        out[col] = out[col].astype(float) if col in out else float("nan")  # (a ledger from before held-out scores)
    tasks = [spec.get("task") or {} for spec in specs]
    out["reference_score"] = pd.array([t.get("reference_score") for t in tasks], dtype="Float64").astype(float)
    out["reference_source"] = [t.get("reference_source") for t in tasks]
    out["anchored"] = anchored(out["improvement"], out["baseline_score"], out["reference_score"])
    out["final_anchored"] = anchored(out["final_improvement"], out["final_baseline_score"], out["reference_score"])
    return out.reset_index(drop=True)


def anchored(improvement: pd.Series, baseline: pd.Series, reference: pd.Series) -> pd.Series:
    """(score - baseline) / (reference - baseline): 0 at the base model, 1 at the task's reference score (AutoLab's
    and RE-Bench's normalisation), so tasks of different difficulty pool. NaN where the task has no reference, the
    reference is not above the baseline, or there is no improvement to anchor (no valid submission: see results)."""
    span = reference - baseline
    return (improvement / span.where(span > 0)).astype(float)


def events_frame(cells: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Events with the cell's labels, a final_attempt flag and the common payload fields as columns."""
    out = events.copy()
    payloads = [json.loads(p) if isinstance(p, str) else (p or {}) for p in out["payload"]]
    out["payload"] = [json.dumps(p, sort_keys=True) for p in payloads]
    labels = cells.set_index("cell_id")[["sweep", "task", "agent", "driver", "seed", "attempts"]]
    out = out.join(labels, on="cell_id")
    # The final attempt is the cell's recorded attempt count, or the last attempt that left events.
    last_seen = out.groupby("cell_id")["attempt"].transform("max") if len(out) else out["attempt"]
    final = out["attempts"].where(out["attempts"].fillna(0) > 0, last_seen)
    out["final_attempt"] = out["attempt"] == final
    out = out.drop(columns="attempts")
    sub = out["kind"] == "submission"
    for key in SUBMISSION_KEYS:
        out[key] = [p.get(key) if s else None for p, s in zip(payloads, sub)]
    out["flags"] = [",".join(p.get("flags") or []) if s else None for p, s in zip(payloads, sub)]
    usage = out["kind"] == "driver_usage"
    for key in USAGE_KEYS:
        out[key] = [p.get(key) if u else None for p, u in zip(payloads, usage)]
    # the proxy counted this call's tokens itself (a stream cut before the server's usage): agents.proxy.estimate
    out["estimated"] = [bool(p.get("estimated")) if u else None for p, u in zip(payloads, usage)]
    for col in ("score", "baseline_score", "improvement", "best", "elapsed_s") + USAGE_KEYS:
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    out["submission_id"] = pd.to_numeric(out["submission_id"], errors="coerce").astype("Int64")
    out["seed"] = out["seed"].astype("Int64")
    out["error"] = out["error"].astype(object)
    return out.reset_index(drop=True)


def with_reprompts(cells: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Adds `reprompts` (how often the final attempt's agent was started again, orchestrator/reprompt.py) and
    `improvement_first_stop` (the improvement it had when it first stopped by itself: what a run without
    re-prompting would have scored; the final improvement when it was never re-prompted)."""
    final = events[events["final_attempt"]] if len(events) else events
    first_stop: dict[str, float] = {}
    counts: dict[str, int] = {}
    for cell_id, ev in final.groupby("cell_id") if len(final) else ():
        restarts = ev[ev["kind"] == "reprompt"]
        counts[cell_id] = len(restarts)
        if len(restarts):
            subs = ev[(ev["kind"] == "submission") & (ev["t"] < restarts["t"].min())]
            valid = subs[subs["score"].notna() & subs["error"].isna()]
            first_stop[cell_id] = float(valid["improvement"].max()) if len(valid) else np.nan
    out = cells.copy()
    out["reprompts"] = [counts.get(c, 0) for c in out["cell_id"]]
    out["improvement_first_stop"] = [first_stop.get(c, imp) for c, imp in zip(out["cell_id"], out["improvement"])]
    return out


def with_doubts(cells: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Adds `doubts`: the DOUBTFUL_FLAGS of the final attempt's submissions and held-out record, comma-joined (""
    when none)."""
    found: dict[str, set[str]] = {}
    final = events[events["final_attempt"]] if len(events) else events
    for cell_id, kind, payload in zip(final["cell_id"], final["kind"], final["payload"]):
        if kind not in ("submission", "outcome"):
            continue
        p = json.loads(payload) if isinstance(payload, str) else (payload or {})
        flags = p.get("flags") if kind == "submission" else (p.get("final") or {}).get("flags")
        found.setdefault(cell_id, set()).update(set(flags or []) & set(DOUBTFUL_FLAGS))
    out = cells.copy()
    out["doubts"] = [",".join(sorted(found.get(c, ()))) for c in out["cell_id"]]
    return out


def submissions(events: pd.DataFrame) -> pd.DataFrame:
    """Submission events of final attempts, in order, with valid = scored without error."""
    subs = events[(events["kind"] == "submission") & events["final_attempt"]].copy()
    subs["valid"] = subs["score"].notna() & subs["error"].isna()
    return subs.sort_values(["cell_id", "t", "submission_id"]).reset_index(drop=True)


def usage(events: pd.DataFrame) -> pd.DataFrame:
    """Driver usage events of final attempts, with tokens = input + output tokens."""
    use = events[(events["kind"] == "driver_usage") & events["final_attempt"]].copy()
    use["tokens"] = use["input_tokens"].fillna(0) + use["output_tokens"].fillna(0)
    return use.sort_values(["cell_id", "t"]).reset_index(drop=True)


def estimated_usage(events: pd.DataFrame) -> pd.DataFrame:
    """Per cell (final attempts) whose driver tokens are partly the proxy's own count (streams cut before the server
    sent its usage): calls and tokens in all, and how many of them are estimated."""
    cols = ["cell_id", "task", "agent", "driver", "seed", "calls", "tokens", "estimated_calls", "estimated_tokens"]
    use = usage(events)
    if not len(use) or "estimated" not in use:
        return pd.DataFrame(columns=cols)
    use["estimated_tokens"] = use["tokens"].where(use["estimated"].fillna(False).astype(bool), 0.0)
    per_cell = (use.groupby(["cell_id", "task", "agent", "driver", "seed"], sort=True)
                .agg(calls=("tokens", "size"), tokens=("tokens", "sum"),
                     estimated_calls=("estimated", lambda e: int(e.fillna(False).astype(bool).sum())),
                     estimated_tokens=("estimated_tokens", "sum")).reset_index())
    return per_cell[per_cell["estimated_calls"] > 0][cols].reset_index(drop=True)


def results(cells: pd.DataFrame, infra_errors: str = "failure") -> pd.DataFrame:
    """Finished cells with value = the cell's result under an infra-error policy.

    infra_errors="failure": an infra error scores 0 like a failed run; "exclude": infra errors are dropped.
    """
    if infra_errors not in INFRA_POLICIES:
        raise ConfigError(f"infra_errors={infra_errors!r}; use one of {INFRA_POLICIES}")
    done = cells[cells["status"].isin(FINISHED_STATUSES)].copy()
    infra = done["status"] == "infra_error"
    done["value"] = np.where(infra, 0.0, done["improvement"].fillna(0.0).astype(float))
    # the same on the anchored scale, for cells whose task has a reference above its baseline (a run without a
    # valid submission, or an infra error counted as a failure, is 0 there too); NaN: not anchorable
    if "anchored" in done:
        anchorable = (done["reference_score"].notna() & (done["anchored"].notna() | (done["value"] == 0))
                      & ~(done["reference_score"] <= done["baseline_score"]))
        done["anchored_value"] = np.where(anchorable, np.where(done["value"] == 0, 0.0, done["anchored"]), np.nan)
    if infra_errors == "exclude":
        done = done[~infra]
    return done.reset_index(drop=True)


def held_out(cells: pd.DataFrame) -> pd.DataFrame:
    """Finished cells with a held-out score: `final` is the held-out improvement of the final submission,
    `feedback` the best feedback improvement (0 without a valid submission: the base model stands), `gap` their
    difference: how optimistic the best feedback score is (what the original benchmark reports)."""
    done = cells[cells["status"].isin(FINISHED_STATUSES) & cells["final_improvement"].notna()].copy()
    done["final"] = done["final_improvement"].astype(float)
    done["feedback"] = done["improvement"].fillna(0.0).astype(float)
    done["gap"] = done["feedback"] - done["final"]
    return done.reset_index(drop=True)


def progress(cells: pd.DataFrame) -> dict:
    """Counts by status, and how many cells are not finished yet."""
    counts = {s: int((cells["status"] == s).sum()) for s in MISSING_STATUSES + FINISHED_STATUSES}
    return {"total": int(len(cells)), "finished": sum(counts[s] for s in FINISHED_STATUSES),
            "missing": sum(counts[s] for s in MISSING_STATUSES), "by_status": counts}
