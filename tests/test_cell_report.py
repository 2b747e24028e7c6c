"""What a cell hands Tune and writes to outcome.json: typed records, in the record formats the ledger reads."""
from __future__ import annotations

import json

from orchestrator.cell_report import CellReport, Outcome

# outcome.json's leading keys, in order (the record format that reconcile and the run reports read)
OUTCOME_KEYS = ["status", "limit_hit", "exit_code", "error", "best_score", "baseline_score", "n_submissions",
                "started_at", "ended_at", "elapsed_s"]


def test_an_outcome_writes_the_record_format_and_reads_back():
    outcome = Outcome(status="budget_exhausted", limit_hit="submissions", exit_code=None, error=None, best_score=74.5,
                      baseline_score=0.0, n_submissions=5, started_at=100.0, ended_at=190.5,
                      details={"workspace": "/w", "setup_s": 0.3})
    d = outcome.to_dict()
    assert list(d) == OUTCOME_KEYS + ["workspace", "setup_s"] and d["elapsed_s"] == 90.5
    assert Outcome.from_dict(json.loads(json.dumps(d))) == outcome


def test_a_report_survives_tunes_flat_metrics():
    outcome = Outcome("infra_error", None, None, "claude not found", None, None, 0, 1.0, 2.0, {"agent_started": False})
    events = [{"t": 0.0, "kind": "status", "payload": {"status": "running"}, "key": "c:1:status:running"}]
    for report in (CellReport("c", 1, events, started_at=1.0),
                   CellReport("c", 1, events, baseline_score=0.0, best_score=12.5, n_submissions=2),
                   CellReport("c", 1, [], outcome=outcome)):
        metrics = report.to_metrics()
        assert all(not isinstance(v, (dict, list)) for v in metrics.values())  # Tune would flatten them
        metrics.update(training_iteration=3, time_this_iter_s=0.1)  # Tune's own keys
        assert CellReport.from_metrics(metrics) == report
    assert "n_submissions" not in CellReport("c", 1, events).to_metrics()  # no scores yet: the ledger keeps its own
