"""The check a test that runs cells makes on how each ended (tests/support/cells.py): a failed cell fails it."""
from __future__ import annotations

import pytest

from tests.support.cells import cells_ended


def row(status, limit=None, error=None, agent="claude_code"):
    return {"cell_id": "c1", "agent": agent, "driver": "vllm-anthropic", "status": status, "limit_hit": limit,
            "error": error}


def test_cells_that_ran_pass_and_a_failed_one_is_named_with_its_reason():
    cells_ended([row("completed"), row("budget_exhausted", "wall_time")])
    failed = row("agent_error", error='agent exited with code 1: [claude-code:unrecognized_model] {"model":"smollm2"}')
    with pytest.raises(AssertionError) as e:
        cells_ended([row("completed", agent="codex"), failed])
    assert "claude_code x vllm-anthropic (c1): agent_error" in str(e.value) and "unrecognized_model" in str(e.value)
    assert "codex" not in str(e.value)
    for odd in (row("budget_exhausted"), row("completed", error="but it says it failed"), row("infra_error")):
        with pytest.raises(AssertionError):
            cells_ended([odd])
    cells_ended([row("agent_error", error="expected")], allowed=["agent_error"])  # a test that means a failure
