"""Per-cell record files: durable first, then the ledger.

The grader (and later the driver proxy) appends one JSON line per submission (per call) and fsyncs it before it
answers; the trial writes attempt.json when it starts and outcome.json when it ends. The ledger is derived from
these files: live through the trial's reports, and again by `reconcile` when a sweep resumes after a crash.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.ledger import ERRORED, FINISHED, PENDING, RUNNING, Ledger
from orchestrator.layout import Layout


def append_jsonl(path: Path, record: dict) -> None:
    """Append one line and fsync it: once this returns, the record survives any crash."""
    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write with O_APPEND: concurrent writers never interleave within a line
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_durably(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_jsonl(path: Path) -> list[dict]:
    """Complete lines only: a line torn by a crash mid-write is ignored."""
    if not path.exists():
        return []
    out = []
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                continue
    return out


class JsonlTail:
    """Reads the lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def read_new(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # the writer is mid-line; take it next time
                self.offset += len(raw)
                try:
                    out.append(json.loads(raw))
                except json.JSONDecodeError:
                    continue
        return out


# -- records -> ledger events --------------------------------------------------------------------------------------
SUBMISSIONS = "submissions.jsonl"
DRIVER_CALLS = "driver_calls.jsonl"
TRACE = "trace.jsonl"  # a CLI agent's own trace, parsed into events (agents/cli/base.py lists their types)
ATTEMPT = "attempt.json"
OUTCOME = "outcome.json"


def submission_event(cell_id: str, attempt: int, started_at: float, rec: dict) -> dict:
    return {"t": rec["t"] - started_at, "kind": "submission", "payload": rec,
            "key": f"{cell_id}:{attempt}:submission:{rec['submission_id']}"}


def driver_event(cell_id: str, attempt: int, started_at: float, rec: dict, index: int) -> dict:
    return {"t": rec["t"] - started_at, "kind": "driver_usage", "payload": rec,
            "key": f"{cell_id}:{attempt}:driver:{index}"}


def trace_event(cell_id: str, attempt: int, started_at: float, rec: dict, index: int) -> dict:
    return {"t": rec["t"] - started_at, "kind": "agent_trace", "payload": rec,
            "key": f"{cell_id}:{attempt}:trace:{index}"}


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
    outcome = json.loads((adir / OUTCOME).read_text()) if (adir / OUTCOME).exists() else None
    if outcome:
        events.append(outcome_event(cell_id, attempt, outcome))
    return events, outcome


def scores_of(events: list[dict]) -> tuple[float | None, float | None, int]:
    subs = [e["payload"] for e in events if e["kind"] == "submission"]
    baseline = next((s.get("baseline_score") for s in subs if s.get("baseline_score") is not None), None)
    valid = [s["score"] for s in subs if s.get("score") is not None]
    return baseline, (max(valid) if valid else None), len(subs)


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
                              outcome.get("limit_hit"))
                stats["adopted"] += 1
            elif row["status"] == RUNNING:
                ledger.set_pending([cell_id])
                stats["requeued"] += 1
    return stats
