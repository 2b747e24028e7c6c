"""The ledger: one SQLite file per output root, written only by the orchestrator process.

Every write is one transaction in WAL mode with synchronous=FULL, so a SIGKILL at any moment leaves either the
whole write or none of it. Events carry a dedup key, so reconciling from the per-cell record files on resume
(see orchestrator.records) can insert the same event twice without duplicating it.
"""
from __future__ import annotations

import errno
import json
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from typing import Final

from contracts.outcomes import STATUSES, Status
from contracts.specs import CellSpec

PENDING: Final = "pending"
RUNNING: Final = "running"
COMPLETED: Final = "completed"
BUDGET_EXHAUSTED: Final = "budget_exhausted"
AGENT_ERROR: Final = "agent_error"
INFRA_ERROR: Final = "infra_error"
FINISHED: tuple[Status, ...] = (COMPLETED, BUDGET_EXHAUSTED)
ERRORED: tuple[Status, ...] = (AGENT_ERROR, INFRA_ERROR)
# (contracts.outcomes.STATUSES lists them all, in this order: pending, running, FINISHED, ERRORED)

SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (
    cell_id TEXT PRIMARY KEY,
    sweep TEXT, agent TEXT, driver TEXT, task TEXT, seed INTEGER,
    spec TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    baseline_score REAL, best_score REAL, improvement REAL,
    n_submissions INTEGER NOT NULL DEFAULT 0,
    final_score REAL, final_baseline_score REAL, final_improvement REAL, contaminated INTEGER,
    limit_hit TEXT,
    started_at REAL, ended_at REAL,
    error TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    attempt INTEGER NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    dedup_key TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS events_by_cell ON events(cell_id, attempt, t);
"""
# Columns added since the first ledgers were written: an older ledger gets them when it is opened.
ADDED_COLUMNS = {"final_score": "REAL", "final_baseline_score": "REAL", "final_improvement": "REAL",
                 "contaminated": "INTEGER"}


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        have = {row["name"] for row in self.db.execute("PRAGMA table_info(cells)")}
        for name, kind in ADDED_COLUMNS.items():
            if name not in have:
                self.db.execute(f"ALTER TABLE cells ADD COLUMN {name} {kind}")
        self.failure: OSError | None = None  # the disk refused a write (Tune's callbacks cannot raise it through)

    def close(self) -> None:
        self.db.close()

    # Pickled as its path (Tune pickles its callbacks): the copy reopens the same file.
    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        Ledger.__init__(self, state["path"])

    @contextmanager
    def transaction(self):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException as e:
            if self.db.in_transaction:  # also when COMMIT itself failed (a full disk): else the next BEGIN fails
                self.db.execute("ROLLBACK")
            if (isinstance(e, sqlite3.OperationalError)  # (sqlite_errorcode: Python 3.11+, what setup installs)
                    and e.sqlite_errorcode == sqlite3.SQLITE_FULL):  # type: ignore[attr-defined]
                # As the OSError any other write there would raise: the sweep stops with one line naming the file.
                self.failure = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                raise self.failure from None
            raise

    # -- cells ---------------------------------------------------------------------------------------------------
    def add_cells(self, specs: list[CellSpec]) -> int:
        """Insert cells not yet known (pending); returns how many were new."""
        with self.transaction() as db:
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO cells (cell_id, sweep, agent, driver, task, seed, spec) VALUES (?,?,?,?,?,?,?)",
                [(s.cell_id, s.sweep, s.agent.name, s.driver.name, s.task_name, s.seed, json.dumps(s.to_dict()))
                 for s in specs],
            )
            return db.total_changes - before

    def cells(self, cell_ids: list[str] | None = None) -> dict[str, dict]:
        rows = self.db.execute("SELECT * FROM cells").fetchall()
        out = {r["cell_id"]: dict(r) for r in rows}
        return out if cell_ids is None else {c: out[c] for c in cell_ids if c in out}

    def mark_running(self, cell_id: str, attempt: int, started_at: float) -> None:
        with self.transaction() as db:
            db.execute("UPDATE cells SET status=?, attempts=MAX(attempts, ?), started_at=?, ended_at=NULL, error=NULL "
                       "WHERE cell_id=?", (RUNNING, attempt, started_at, cell_id))

    def set_pending(self, cell_ids: list[str]) -> None:
        with self.transaction() as db:
            db.executemany("UPDATE cells SET status=? WHERE cell_id=?", [(PENDING, c) for c in cell_ids])

    def update_scores(self, cell_id: str, baseline: float | None, best: float | None, n_submissions: int) -> None:
        improvement = None if best is None or baseline is None else best - baseline
        with self.transaction() as db:
            db.execute("UPDATE cells SET baseline_score=COALESCE(?, baseline_score), best_score=?, improvement=?, "
                       "n_submissions=? WHERE cell_id=?", (baseline, best, improvement, n_submissions, cell_id))

    def finish(self, cell_id: str, status: str, ended_at: float, error: str | None = None,
               limit_hit: str | None = None, details: dict | None = None) -> None:
        """details: the outcome's (the held-out record of the final submission, whether hidden eval items were
        found in what the agent wrote)."""
        assert status in FINISHED + ERRORED, status
        details = details or {}
        final = details.get("final") or {}
        contaminated = None if "contaminated" not in details else int(bool(details["contaminated"]))
        with self.transaction() as db:
            db.execute("UPDATE cells SET status=?, ended_at=?, error=?, limit_hit=?, final_score=?, "
                       "final_baseline_score=?, final_improvement=?, contaminated=? WHERE cell_id=?",
                       (status, ended_at, error, limit_hit, final.get("score"), final.get("baseline_score"),
                        final.get("improvement"), contaminated, cell_id))

    # -- events --------------------------------------------------------------------------------------------------
    def add_events(self, cell_id: str, attempt: int, events: list[dict]) -> int:
        """events: {t, kind, payload, key?}. Returns how many were new (keyed events are inserted once)."""
        with self.transaction() as db:
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO events (cell_id, attempt, t, kind, payload, dedup_key) VALUES (?,?,?,?,?,?)",
                [(cell_id, attempt, float(e["t"]), e["kind"], json.dumps(e.get("payload", {})), e.get("key"))
                 for e in events],
            )
            return db.total_changes - before

    def events(self, cell_id: str | None = None, kind: str | None = None) -> list[dict]:
        sql, args = "SELECT * FROM events WHERE 1=1", list[str]()
        if cell_id:
            sql, args = sql + " AND cell_id=?", args + [cell_id]
        if kind:
            sql, args = sql + " AND kind=?", args + [kind]
        rows = self.db.execute(sql + " ORDER BY cell_id, attempt, t, id", args).fetchall()
        return [dict(r, payload=json.loads(r["payload"])) for r in rows]

    def summary_counts(self, cell_ids: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {s: 0 for s in STATUSES}
        for row in self.cells(cell_ids).values():
            counts[row["status"]] += 1
        return counts

