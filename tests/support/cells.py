"""How a test that ran cells checks how each ended: its status, and the reason its outcome gives."""
from __future__ import annotations

from collections.abc import Iterable

# a cell that ran and stopped on its own or at its budget; anything else (agent_error, infra_error) failed
RAN = ("completed", "budget_exhausted")


def cells_ended(rows: Iterable[dict], allowed: Iterable[str] = RAN) -> None:
    """Every ledger row's status is one of `allowed`: a completed cell has no error, one that exhausted its budget
    names the limit. Fails naming each cell that did not, with its error (the outcome's reason)."""
    allowed = tuple(allowed)
    wrong = []
    for row in rows:
        status, limit, error = row["status"], row.get("limit_hit"), row.get("error")
        ok = status in allowed and not (status == "completed" and error) and not (
            status == "budget_exhausted" and not limit)
        if not ok:
            wrong.append(f"{row.get('agent')} x {row.get('driver')} ({row.get('cell_id')}): {status}, "
                         f"limit {limit}, error {error!r}")
    assert not wrong, f"cells that did not end as {' or '.join(allowed)}:\n  " + "\n  ".join(wrong)
