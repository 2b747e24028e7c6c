"""Re-prompting (orchestrator/reprompt.py): an agent that exits early is started again in its workspace."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from contracts.specs import Budget, ConfigError
from orchestrator.ledger import Ledger
from orchestrator.reprompt import continuation, due
from orchestrator.sweep import expand
from tests.conftest import compose

# Each session notes its re-prompt number and the continuation it was given; the first submits a copy of the base
# model and leaves a child running (it must be gone before the next session starts), then every session exits 0.
AGENT = r'''
n=${A2RL_REPROMPT:-0}
echo "$n" >> code/sessions.txt
[ -f reprompt.md ] && cp reprompt.md "code/reprompt-$n.md"
if [ "$n" = 0 ]; then
  mkdir -p output && cp -r model/. output/m
  curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer $A2RL_RUN_TOKEN" \
       -H 'Content-Type: application/json' -d '{"model_path": "output/m"}' > code/submission.json
  sleep 300 &
fi
exit 0
'''


def test_an_agent_that_exits_early_is_started_again_until_its_reprompts_are_spent(run_sweep, tmp_path):
    script = tmp_path / "stops_early.sh"
    script.write_text(AGENT)
    _, _, out = run_sweep(["sweep=smoke", "agent=command", f"agent.files=[{script}]",
                           f"agent.command=bash code/{script.name}", "sweep.budget.wall_time_s=60",
                           "sweep.budget.max_submissions=3", "budget.max_reprompts=2"])
    ledger = Ledger(out / "ledger.sqlite")
    (row,) = ledger.cells().values()
    events = ledger.events(row["cell_id"])
    ledger.close()
    assert row["status"] == "completed", row  # the third session exited 0 with its re-prompts spent
    restarts = [e["payload"] for e in events if e["kind"] == "reprompt"]
    assert [r["n"] for r in restarts] == [1, 2]
    outcome = json.loads((out / "cells" / row["cell_id"] / "attempt-1" / "outcome.json").read_text())
    assert outcome["reprompts"] == 2 and outcome["exit_code"] == 0
    code = Path(outcome["workspace"]) / "code"
    assert (code / "sessions.txt").read_text().split() == ["0", "1", "2"]  # same workspace, three sessions
    note = (code / "reprompt-1.md").read_text()
    score = json.loads((code / "submission.json").read_text())["score"]
    assert "re-prompt 1 of at most 2" in note and "submissions left: 2 of 3" in note
    assert f"best score so far: {score:g}" in note
    assert restarts[0]["best_score"] == score and 0.25 * 60 < restarts[0]["time_left_s"] < 60

    from orchestrator.analysis.report import build_report

    report = build_report(out, n_boot=100)
    text = (report / "report.md").read_text()
    assert "## Re-prompting" in text
    cell_report = json.loads((out / "cells" / row["cell_id"] / "report.json").read_text())
    assert len(cell_report["reprompts"]) == 2
    split = pd.read_parquet(report / "reprompting.parquet")
    assert split[["reprompts", "n"]].values.tolist() == [[2, 1]]


BUDGET = Budget(wall_time_s=100, max_submissions=5, max_reprompts=2, reprompt_min_left=0.25)


@pytest.mark.parametrize("change, expected", [
    ({}, True),
    ({"exit_code": 1}, False),           # a crash is a result
    ({"limit": "wall_time"}, False),     # a budget ended it
    ({"resource": "memory limit hit"}, False),
    ({"now": 80.0}, False),              # 20 s of 100 left: not more than a quarter
    ({"reprompts": 2}, False),           # re-prompts spent
    ({"submissions": 5}, False),         # submissions spent
    ({"driver_spent": lambda: True}, False),
])
def test_when_an_agent_is_reprompted(change, expected):
    args = {"exit_code": 0, "limit": None, "resource": None, "deadline": 100.0, "reprompts": 0, "submissions": 1,
            "driver_spent": lambda: False, "now": 10.0, **change}
    assert due(BUDGET, args.pop("exit_code"), args.pop("limit"), args.pop("resource"), **args) is expected
    assert due(Budget(wall_time_s=100, max_submissions=5), 0, None, None, deadline=100.0, reprompts=0,
               submissions=0, driver_spent=lambda: False, now=0.0) is False  # off by default


def test_the_continuation_says_what_is_left():
    text = continuation(Budget(wall_time_s=600, max_submissions=5, max_tokens=10_000, max_reprompts=3), 1, 420.0,
                        2, None, 12.5, {"total_tokens": 2500, "cost_usd": 0.1})
    assert "420 s of your 600 s" in text and "submissions left: 3 of 5" in text
    assert "none yet (no valid submission); the base model scores 12.5" in text
    assert "driver tokens left: 7500" in text and "cost" not in text.split("driver tokens")[1]


def test_reprompting_is_off_by_default_and_keeps_cell_ids():
    (plain,) = expand(compose(["sweep=smoke", "sweep.agents=[noop]"]))
    assert plain.budget.max_reprompts == 0
    (on,) = expand(compose(["sweep=smoke", "sweep.agents=[noop]", "budget=reprompt"]))
    assert on.budget.max_reprompts == 3 and on.cell_id != plain.cell_id
    # a share changed while re-prompting is off changes nothing
    (off,) = expand(compose(["sweep=smoke", "sweep.agents=[noop]", "budget.reprompt_min_left=0.5"]))
    assert off.cell_id == plain.cell_id
    with pytest.raises(ConfigError, match=r"reprompt_min_left=1.5 must be a share"):
        expand(compose(["sweep=smoke", "budget.reprompt_min_left=1.5"]))
    with pytest.raises(ConfigError, match=r"max_reprompts=-1 must be a whole number"):
        expand(compose(["sweep=smoke", "budget.max_reprompts=-1"]))
