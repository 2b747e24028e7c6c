"""A cell's agent side is chosen once from its task's protocol and agent kind (orchestrator/agent_sides), and a third
protocol's is one registered class: tests/support/third_side.py, run here in a real sweep (Ray, the Serve grader over
loopback HTTP) through the cell's own path."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from contracts.records import SUBMISSIONS, read_jsonl
from orchestrator.ledger import Ledger

AGENT = '''import json, os, shutil, urllib.request
seen = {"files": sorted(os.listdir(".")), "env": {k: os.environ.get(k) for k in ("TASK", "BASE_MODEL", "MODEL_PATH",
        "A2RL_RUN_TOKEN")}, "token_given": bool(os.environ.get("THIRD_TOKEN"))}
shutil.copytree(os.environ["MODEL_PATH"], "output/m")
request = urllib.request.Request(os.environ["GRADING_SERVER_URL"] + "/submit", json.dumps({"model_path": "output/m"}
    ).encode(), {"Authorization": "Bearer " + os.environ["THIRD_TOKEN"], "Content-Type": "application/json"})
seen["answer"] = json.loads(urllib.request.urlopen(request, timeout=300).read())
print("SEEN " + json.dumps(seen))
'''


def test_a_third_protocols_agent_side_runs_a_cell(run_sweep, tmp_path):
    from orchestrator.agent_sides import agent_side

    (tmp_path / "agent.py").write_text(AGENT)
    plan, _, out = run_sweep([
        "sweep=smoke", "sweep.agents=[command]", "agent=command", f"agent.files=[{tmp_path / 'agent.py'}]",
        "agent.command=python code/agent.py", "task=arithmetic", "task.name=arithmetic_third",
        "task.cls=reasoning_gym_third", "+task.protocol=third", "imports=[tests.support.third_side]",
        "sweep.budget.wall_time_s=300", "sandbox.kill_grace_s=1"])
    (cell,) = plan.to_run
    assert type(agent_side(cell)).__name__ == "ThirdSide"
    builtin = dataclasses.replace(cell, agent=dataclasses.replace(cell.agent, kind="builtin"))
    assert agent_side(builtin).name == "a2rl"  # the side serves command agents only: others get a2rl's

    (row,) = Ledger(out / "ledger.sqlite").cells().values()
    attempt = out / "cells" / row["cell_id"] / "attempt-1"
    assert row["status"] == "completed", (row, (attempt / "agent.stderr").read_text()[-2000:])
    seen = json.loads((attempt / "agent.stdout").read_text().split("SEEN ", 1)[1])
    # the third side's workspace and variables, none of a2rl's
    assert seen["files"] == [".home", "base", "code", "data", "output", "task.md"], seen["files"]
    workspace = Path(json.loads((attempt / "outcome.json").read_text())["workspace"])
    assert seen["env"] == {"TASK": "arithmetic_third", "BASE_MODEL": "base", "MODEL_PATH": str(workspace / "base"),
                           "A2RL_RUN_TOKEN": None} and seen["token_given"]
    # the grader answered over HTTP in a2rl's API (the side's), and recorded the submission first
    (record,) = read_jsonl(attempt / SUBMISSIONS)
    assert seen["answer"]["submission_id"] == record["submission_id"] == 1
    assert seen["answer"]["score"] == record["score"] is not None and "copy_of_base" in record["flags"]
    assert row["n_submissions"] == 1
