"""The Environment contract holds for an environment other than ALFWorld: a counter (tests/support/counter.py, one
module and a config). Its train rows, its grading by lockstep episodes, its rollout service and the agents' copy of
its render/parse come from the shared machinery, which names no environment."""
from __future__ import annotations

import secrets

import httpx
import pytest

from contracts.task import load_task
from contracts.task_spec import TaskSpec
from evaluators.evaluate import evaluate_loaded
from tests.support import counter  # noqa: F401  (registers the task "counter")
from tests.support.runs import bare_run
from tests.support.scripted_backend import ScriptedBackend

COUNTER = {"name": "counter_t", "cls": "counter", "base_model": "tiny", "level": 3, "train_starts": [0, 5],
           "eval_starts": [1, 2, 9], "target": 3, "max_steps": 4, "rollout": {"num_hosts": 1, "idle_timeout_s": 30}}


def test_train_rows_are_the_experts_steps_as_the_environment_renders_them():
    task = load_task(COUNTER)
    rows = task.train_rows()
    assert [r["completion"] for r in rows] == ["up"] * 3 + ["down"] * 2
    first = rows[0]
    assert first["messages"] == [{"role": "user", "content": "Goal: reach 3. So far: nothing. the counter shows 0. "
                                                             "Reply with one of: up, down."}]
    assert (first["game"], first["distance"], first["step"], first["expert"]) == ("from-0", 3, 0, "walk")
    assert rows[1]["prompt"].startswith("Goal: reach 3. So far: up.") and task.messages(rows[1]) == rows[1]["messages"]


def test_the_grader_plays_every_eval_instance_in_lockstep():
    task = load_task(COUNTER)
    rows = task.eval_rows()
    assert rows == [{"id": "counter_t-eval-0", "instance": "from-1", "distance": 2},
                    {"id": "counter_t-eval-1", "instance": "from-2", "distance": 1},
                    {"id": "counter_t-eval-2", "instance": "from-9", "distance": 6}]
    backend = ScriptedBackend("I say UP")
    result = evaluate_loaded(task, backend, None, rows, 8)
    # from 1 and 2 "up" reaches 3; from 9 it never does within 4 steps
    assert [(i["score"], i["steps"], i["commands"]) for i in result["items"]] == [
        (1.0, 2, ["up"] * 2), (1.0, 1, ["up"]), (0.0, 4, ["up"] * 4)]
    assert result["score"] == pytest.approx(200 / 3) and result["items"][0]["distance"] == 2
    assert len(backend.prompts) == 3 + 2 + 1 + 1  # one batch per step over the episodes still running


def test_its_rollout_service(ray_cluster, cache_dir, grading_port):
    from ray import serve

    from contracts.runs import registry
    from envs import rollout_service

    route = rollout_service.deploy(TaskSpec.from_config(COUNTER), str(cache_dir))
    url, token = f"http://127.0.0.1:{grading_port}{route}", secrets.token_urlsafe(16)
    ray_cluster.get(registry().register.remote(token, bare_run(60)))
    headers = {"Authorization": f"Bearer {token}"}
    games = httpx.get(url + "/games", headers=headers, timeout=30).json()
    assert games["games"] == [{"index": 0, "name": "from-0", "distance": 3},
                              {"index": 1, "name": "from-5", "distance": 2}]
    start = httpx.post(url + "/reset", json={"game": "from-5", "actions": ["down"]}, headers=headers, timeout=30).json()
    assert (start["task"], start["observation"], start["steps"]) == ("reach 3", "the counter shows 4", 1)
    won = httpx.post(url + "/step", json={"session_id": start["session_id"], "command": "down"}, headers=headers,
                     timeout=30).json()
    assert (won["won"], won["done"], won["reward"]) == (True, True, 1.0)
    usage = serve.get_app_handle(rollout_service.app_name("counter_t")).close_run.remote(token).result()
    assert usage == {"closed": 1, "resets": 1, "steps": 2, "wins": 1}
