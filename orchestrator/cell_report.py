"""What a cell tells the orchestrator: its outcome (outcome.json) and the reports it hands Ray Tune.

A cell runs as a Tune trial in its own process; `tune.report` carries a flat dict of metrics to the Tune callbacks in
the orchestrator's process (orchestrator.callbacks), which write the ledger and W&B. CellReport is that dict, typed:
the cell builds one, the callbacks read one back, and neither side agrees on keys by convention.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from contracts.outcomes import Limit, Status


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended; written to outcome.json (the keys and their order are the record's format)."""
    status: Status                  # completed | budget_exhausted | agent_error | infra_error
    limit_hit: Limit | None         # the budget that ended it: wall_time, submissions, tokens, cost
    exit_code: int | None
    error: str | None
    best_score: float | None
    baseline_score: float | None
    n_submissions: int
    started_at: float
    ended_at: float
    details: dict = field(default_factory=dict)  # what else the attempt knows (workspace, overheads, usage)

    def to_dict(self) -> dict:
        return {"status": self.status, "limit_hit": self.limit_hit, "exit_code": self.exit_code, "error": self.error,
                "best_score": self.best_score, "baseline_score": self.baseline_score,
                "n_submissions": self.n_submissions, "started_at": self.started_at, "ended_at": self.ended_at,
                "elapsed_s": self.ended_at - self.started_at, **self.details}

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        named = ("status", "limit_hit", "exit_code", "error", "best_score", "baseline_score", "n_submissions",
                 "started_at", "ended_at")
        return cls(status=d["status"], limit_hit=d.get("limit_hit"), exit_code=d.get("exit_code"),
                   error=d.get("error"), best_score=d.get("best_score"), baseline_score=d.get("baseline_score"),
                   n_submissions=d["n_submissions"], started_at=d["started_at"], ended_at=d["ended_at"],
                   details={k: v for k, v in d.items() if k not in named and k != "elapsed_s"})


@dataclass(frozen=True)
class CellReport:
    """One `tune.report` of a cell: new ledger events, and what the cell knows so far."""
    cell_id: str
    attempt: int
    events: list[dict] = field(default_factory=list)
    started_at: float | None = None         # only in the first report: the attempt is running
    baseline_score: float | None = None
    best_score: float | None = None
    n_submissions: int | None = None        # set once the cell reads submissions: the ledger's scores follow it
    outcome: Outcome | None = None          # only in the last report

    def to_metrics(self) -> dict:
        """The flat dict Tune carries (events and outcome as JSON text: Tune would flatten nested values)."""
        out: dict = {"cell_id": self.cell_id, "attempt": self.attempt, "events": json.dumps(self.events)}
        if self.started_at is not None:
            out["started_at"] = self.started_at
        if self.n_submissions is not None:
            out.update(baseline_score=self.baseline_score, best_score=self.best_score,
                       n_submissions=self.n_submissions)
        if self.outcome is not None:
            out["done_outcome"] = json.dumps(self.outcome.to_dict())
        return out

    @classmethod
    def from_metrics(cls, result: dict) -> "CellReport":
        """Back from the dict a Tune callback gets (Tune adds keys of its own; they are ignored)."""
        return cls(cell_id=result["cell_id"], attempt=int(result["attempt"]),
                   events=json.loads(result.get("events") or "[]"), started_at=result.get("started_at"),
                   baseline_score=result.get("baseline_score"), best_score=result.get("best_score"),
                   n_submissions=None if result.get("n_submissions") is None else int(result["n_submissions"]),
                   outcome=(Outcome.from_dict(json.loads(result["done_outcome"])) if result.get("done_outcome")
                            else None))
