"""Per-cell record files (contracts.records) as ledger events, and the ledger reconciled from them.

The grader appends one JSON line per submission, the driver proxy one per call, and both fsync before they answer;
the trial writes attempt.json when it starts and outcome.json when it ends. The ledger is derived from these files:
live through the trial's reports, and again by `reconcile` when a sweep resumes after a crash.
"""
from __future__ import annotations

import json

from contracts.layout import Layout
from contracts.records import ATTEMPT, DRIVER_CALLS, OUTCOME, REPROMPTS, SUBMISSIONS, TRACE, read_jsonl
from orchestrator.ledger import ERRORED, FINISHED, PENDING, RUNNING, Ledger


def submission_event(cell_id: str, attempt: int, started_at: float, rec: dict) -> dict:
    return {"t": rec["t"] - started_at, "kind": "submission", "payload": rec,
            "key": f"{cell_id}:{attempt}:submission:{rec['submission_id']}"}


def driver_event(cell_id: str, attempt: int, started_at: float, rec: dict, index: int) -> dict:
    return {"t": rec["t"] - started_at, "kind": "driver_usage", "payload": rec,
            "key": f"{cell_id}:{attempt}:driver:{index}"}


def trace_event(cell_id: str, attempt: int, started_at: float, rec: dict, index: int) -> dict:
    return {"t": rec["t"] - started_at, "kind": "agent_trace", "payload": rec,
            "key": f"{cell_id}:{attempt}:trace:{index}"}


def reprompt_event(cell_id: str, attempt: int, started_at: float, rec: dict) -> dict:
    return {"t": rec["t"] - started_at, "kind": "reprompt", "payload": rec,
            "key": f"{cell_id}:{attempt}:reprompt:{rec['n']}"}


def outcome_event(cell_id: str, attempt: int, outcome: dict) -> dict:
    return {"t": outcome["elapsed_s"], "kind": "outcome", "payload": outcome, "key": f"{cell_id}:{attempt}:outcome"}


def status_event(cell_id: str, attempt: int, t: float, status: str, **detail) -> dict:
    return {"t": t, "kind": "status", "payload": {"status": status, **detail},
            "key": f"{cell_id}:{attempt}:status:{status}"}


def attempt_events(layout: Layout, cell_id: str, attempt: int) -> tuple[list[dict], dict | None]:
    """All events an attempt's record files hold, and its outcome if it finished."""
    adir = layout.attempt_dir(cell_id, attempt)
    meta_path = adir / ATTEMPT
    if not meta_path.exists():
        return [], None
    started_at = json.loads(meta_path.read_text())["started_at"]
    events = [status_event(cell_id, attempt, 0.0, RUNNING)]
    events += [submission_event(cell_id, attempt, started_at, r) for r in read_jsonl(adir / SUBMISSIONS)]
    events += [driver_event(cell_id, attempt, started_at, r, i) for i, r in enumerate(read_jsonl(adir / DRIVER_CALLS))]
    events += [trace_event(cell_id, attempt, started_at, r, i) for i, r in enumerate(read_jsonl(adir / TRACE))]
    events += [reprompt_event(cell_id, attempt, started_at, r) for r in read_jsonl(adir / REPROMPTS)]
    outcome = json.loads((adir / OUTCOME).read_text()) if (adir / OUTCOME).exists() else None
    if outcome:
        events.append(outcome_event(cell_id, attempt, outcome))
    return events, outcome


def scores_of(events: list[dict]) -> tuple[float | None, float | None, int]:
    subs = [e["payload"] for e in events if e["kind"] == "submission"]
    baseline = next((s.get("baseline_score") for s in subs if s.get("baseline_score") is not None), None)
    valid = [s["score"] for s in subs if s.get("score") is not None]
    return baseline, (max(valid) if valid else None), sum(not s.get("refunded") for s in subs)


def reconcile(ledger: Ledger, layout: Layout) -> dict:
    """Bring the ledger up to date with the record files after a crash.

    Events missing from the ledger are inserted (keys make this idempotent). A cell the ledger thinks is still
    running either finished (its outcome.json exists: adopt it, never re-run it) or was cut off (back to pending).
    """
    stats = {"events_added": 0, "adopted": 0, "requeued": 0}
    for cell_id, row in ledger.cells().items():
        attempts = layout.attempts(cell_id)
        if not attempts:
            if row["status"] == RUNNING:
                ledger.set_pending([cell_id])
                stats["requeued"] += 1
            continue
        for attempt in attempts:
            events, outcome = attempt_events(layout, cell_id, attempt)
            if events:
                stats["events_added"] += ledger.add_events(cell_id, attempt, events)
        last = attempts[-1]
        events, outcome = attempt_events(layout, cell_id, last)
        if row["status"] in (RUNNING, PENDING):
            if outcome and outcome["status"] in FINISHED + ERRORED:
                baseline, best, n = scores_of(events)
                ledger.update_scores(cell_id, baseline, best, n)
                ledger.mark_running(cell_id, last, outcome["started_at"])
                ledger.finish(cell_id, outcome["status"], outcome["ended_at"], outcome.get("error"),
                              outcome.get("limit_hit"), outcome)
                stats["adopted"] += 1
            elif row["status"] == RUNNING:
                ledger.set_pending([cell_id])
                stats["requeued"] += 1
    return stats
