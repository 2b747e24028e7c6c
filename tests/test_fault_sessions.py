"""Faults in the middle of a cell, each in a real one-cell sweep: a rollout host actor killed mid-episode, the driver
proxy's replica killed mid-stream, the output dir's disk filling up. Each checks what the agent saw, that the sweep
finished, and the ledger against the durable record files afterwards."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from contracts.layout import Layout
from orchestrator.ledger import Ledger
from orchestrator.records import reconcile

# An agent (the `command` kind: the user's own script, sandboxed) that plays one session until it is lost, then
# resets a new one, steps it and closes it. It writes what it was answered to code/answers.json.
LOSES_A_SESSION = '''
import json, time, urllib.error, urllib.request

run = json.load(open("run.json"))

def post(path, body):
    req = urllib.request.Request(run["rollout_url"] + path, json.dumps(body).encode(), method="POST", headers={
        "Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text

answers = {"first": post("/reset", {"game": 0})}
session, deadline = answers["first"][1]["session_id"], time.time() + 40
while time.time() < deadline:  # the test kills the session's host meanwhile
    status, body = post("/step", {"session_id": session, "command": "look"})
    if status != 200:
        answers["lost"] = [status, body]
        break
    time.sleep(0.05)
answers["again"] = post("/reset", {"game": 0})
if answers["again"][0] == 200:
    again = answers["again"][1]["session_id"]
    answers["step"] = post("/step", {"session_id": again, "command": "look"})
    answers["close"] = post("/close", {"session_id": again})
json.dump(answers, open("code/answers.json", "w"))
'''

ALFWORLD = ["sweep=alfworld_small", "task=alfworld", "task.n_train=3", "task.n_eval=2",
            "task.task_types=[pick,clean,look]", "task.expert_episodes=2", "task.grader.batch_size=8",
            "task.grader.max_new_tokens=12", "task.rollout.num_hosts=1", "task.rollout.max_sessions_per_run=1"]


def one_cell(out: Path, cache_dir: Path) -> tuple[dict, Path]:
    """The sweep's one cell as the ledger has it, and its attempt's records folder; the ledger agrees with the
    record files (a resume's reconcile finds nothing to add, adopt or requeue)."""
    ledger = Ledger(out / "ledger.sqlite")
    try:
        (row,) = ledger.cells().values()
        assert reconcile(ledger, Layout.make(out, cache_dir)) == {"events_added": 0, "adopted": 0, "requeued": 0}
        adir = out / "cells" / row["cell_id"] / f"attempt-{row['attempts']}"
        (outcome,) = [e["payload"] for e in ledger.events(row["cell_id"], kind="outcome")]
        assert outcome == json.loads((adir / "outcome.json").read_text())
    finally:
        ledger.close()
    return row, adir


def kill_process_of(actor) -> int:
    """SIGKILL an actor's process, as the kernel's OOM killer would; returns its pid."""
    import ray

    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    return pid


def test_a_rollout_host_killed_mid_episode_loses_only_its_sessions(run_sweep, cache_dir, tmp_path):
    pytest.importorskip("alfworld")
    import ray

    script = tmp_path / "loses_a_session.py"
    script.write_text(LOSES_A_SESSION)
    killed: list[int] = []

    def kill_the_host_mid_episode():
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("a2rl-env-alfworld-")]
            for name in names:
                host = ray.get_actor(name, namespace="a2rl")
                if ray.get(host.stats.remote())["steps"] >= 3:  # the agent is stepping its session
                    killed.append(kill_process_of(host))
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_host_mid_episode, daemon=True)
    killer.start()
    _, _, out = run_sweep([*ALFWORLD, "agent=command", f"agent.files=[{script}]",
                           f"agent.command=python code/{script.name}", "sweep.budget.wall_time_s=90"])
    killer.join(5)
    assert killed, "the host was never seen stepping a session"
    row, adir = one_cell(out, cache_dir)
    assert row["status"] == "completed", (row, (adir / "agent.stderr").read_text()[-2000:])
    workspace = Path(json.loads((adir / "outcome.json").read_text())["workspace"])
    answers = json.loads((workspace / "code" / "answers.json").read_text())
    status, lost = answers["lost"]
    # Not a 500 with a traceback: a refusal the agent can act on (its session is gone, reset a new one).
    assert status == 410 and lost["code"] == "session_lost" and "POST /env/reset" in lost["error"], answers
    assert answers["again"][0] == 200, answers  # the host came back: a new session opens...
    assert answers["step"][0] == 200, answers  # ...and steps
    # The lost session no longer counts against the run (limit 1: the reset above would have been refused).
    assert answers["close"] == [200, {"closed": answers["again"][1]["session_id"], "open_sessions": 0}], answers
