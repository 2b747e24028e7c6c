"""The words a cell's end is told in: its status (the ledger, outcome.json) and the budget limit that ended it."""
from __future__ import annotations

from typing import Literal, get_args

# pending and running while it lasts; then finished (completed, budget_exhausted) or errored (the agent's, a2rl's)
Status = Literal["pending", "running", "completed", "budget_exhausted", "agent_error", "infra_error"]
# the budget that ended a run: its wall time, its submissions, its driver's tokens or cost
Limit = Literal["wall_time", "submissions", "tokens", "cost"]

STATUSES: tuple[Status, ...] = get_args(Status)
LIMITS: tuple[Limit, ...] = get_args(Limit)
