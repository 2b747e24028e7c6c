"""A run registered straight in the RunRegistry, as the grader registers a cell's (for tests that only need a token
the rollout service or the registry accepts: no workspace, no records)."""
from __future__ import annotations

import time

from contracts.runs import RunRegistration


def bare_run(deadline_s: float = 600, max_submissions: int = 1, cell_id: str = "test") -> RunRegistration:
    """deadline_s: seconds from now (negative: already past)."""
    return RunRegistration(cell_id=cell_id, workspace="/nonexistent", records_dir="/nonexistent",
                           code_repo="/nonexistent", started_at=time.time(), deadline=time.time() + deadline_s,
                           max_submissions=max_submissions)
