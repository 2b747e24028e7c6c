"""The rollout service over real HTTP on loopback: sessions on train games, bad inputs, isolation, limits, reaping."""
from __future__ import annotations

import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

# A small level-3 task shared with tests/test_alfworld_task.py: the same config builds the same games once per
# session cache. Its own name, so sweeps of the real `alfworld` task elsewhere never collide with it.
SMALL_TASK = {
    "name": "alfworld_t", "cls": "alfworld", "level": 3,
    "base_model": "tiny-alfworld", "n_train": 3, "n_eval": 2, "final_size": 0, "seed": 0,
    "task_types": ["pick", "clean", "look"], "max_steps": 50, "expert": "ordered", "expert_episodes": 2,
    "expert_noise": 0.3, "max_receptacles_per_type": None, "max_receptacles": None, "eval_salt": None,
    "data_path": None, "build_workers": 1, "eval_workers": 0,
    "rollout": {"num_hosts": 2, "num_replicas": 2, "max_sessions_per_run": 3, "idle_timeout_s": 30},
    "grader": {"backend": "transformers", "batch_size": 8, "max_new_tokens": 12, "num_cpus": 1, "num_gpus": 0},
}


@pytest.fixture(scope="module")
def service(ray_cluster, cache_dir, grading_port):
    from ray import serve

    from contracts.runs import registry
    from contracts.task import load_task
    from contracts.task_spec import TaskSpec
    from envs import rollout_service

    task = load_task(SMALL_TASK, cache_dir)
    route = rollout_service.deploy(TaskSpec.from_config(SMALL_TASK), str(cache_dir))
    return {"url": f"http://127.0.0.1:{grading_port}{route}", "task": task, "registry": registry(),
            "handle": serve.get_app_handle(rollout_service.app_name(SMALL_TASK["name"]))}


class Client:
    """One run (token registered in the RunRegistry, as the grader does for a cell) talking to the service."""

    def __init__(self, service, token: str | None = None, register: bool = True):
        self.url = service["url"]
        self.token = token or secrets.token_urlsafe(16)
        if register:
            import ray

            ray.get(service["registry"].register.remote(self.token, {
                "cell_id": "test", "workspace": "/nonexistent", "started_at": time.time(),
                "deadline": time.time() + 600, "max_submissions": 1}))

    def post(self, path: str, body=None, token: str | None = None, raw: bytes | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        if raw is not None:
            return httpx.post(self.url + path, content=raw, headers=headers, timeout=60)
        return httpx.post(self.url + path, json=body, headers=headers, timeout=60)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def reset(self, **body) -> dict:
        r = self.post("/reset", body)
        assert r.status_code == 200, r.text
        return r.json()

    def step(self, session_id: str, command: str) -> dict:
        r = self.post("/step", {"session_id": session_id, "command": command})
        assert r.status_code == 200, r.text
        return r.json()


def walkthrough(task, index: int) -> list[str]:
    return json.loads(task.train_games()[index].read_text())["walkthrough"]


def test_games_are_the_train_split_only(service):
    client = Client(service)
    r = client.get("/games")
    assert r.status_code == 200
    body = r.json()
    task = service["task"]
    names = [g["name"] for g in body["games"]]
    assert names == [p.parent.name for p in task.train_games()]
    assert not set(names) & {p.parent.name for p in task.eval_games()}
    assert body["max_steps"] == 50 and body["max_sessions"] == 3
    assert httpx.get(service["url"] + "/games", timeout=10).status_code == 401
    assert httpx.get(service["url"] + "/health", timeout=10).json()["games"] == 3


def test_an_episode_through_the_service_wins_with_the_walkthrough(service):
    client = Client(service)
    start = client.reset(game=0)
    assert start["game"]["index"] == 0 and start["task"] and not start["won"] and not start["done"]
    assert start["admissible_commands"] and "Your task is to" in start["observation"]
    plan = walkthrough(service["task"], 0)
    for cmd in plan:
        assert cmd in start["admissible_commands"] or start["steps"] > 0
        start = client.step(start["session_id"], cmd)
    assert start["won"] and start["done"] and start["reward"] == 1.0 and start["steps"] == len(plan)
    again = client.step(start["session_id"], "look")  # after the end: the same answer, nothing changes
    assert again == start
    # Reset the same session by name, replaying all but the last command on the service: one step from winning.
    name = client.get("/games").json()["games"][0]["name"]
    replayed = client.reset(session_id=start["session_id"], game=name, actions=plan[:-1])
    assert replayed["session_id"] == start["session_id"] and replayed["steps"] == len(plan) - 1
    assert not replayed["won"] and plan[-1] in replayed["admissible_commands"]
    assert client.step(replayed["session_id"], plan[-1])["won"]
    client.post("/close", {"session_id": start["session_id"]})
    # What the run did is what its cell records when it ends (replayed commands are steps; "look" after the end is not)
    usage = service["handle"].close_run.remote(client.token).result()
    assert usage == {"closed": 0, "resets": 2, "steps": 2 * len(plan), "wins": 2}


def test_bad_actions_are_answered_by_the_game(service):
    client = Client(service)
    s = client.reset(game=1)
    for i, bad in enumerate(["fly to the moon", "", "go to cabinet 999", "take everything"], start=1):
        out = client.step(s["session_id"], bad)
        assert out["observation"] == "Nothing happens." and not out["won"] and out["steps"] == i
        assert out["admissible_commands"] == s["admissible_commands"]
    client.post("/close", {"session_id": s["session_id"]})


def test_malformed_requests_get_4xx_json_and_change_nothing(service):
    client = Client(service)
    s = client.reset(game=2)
    sid = s["session_id"]
    cases = [
        ("/step", None, b"not json", 400, "bad_request"),
        ("/step", [sid, "look"], None, 400, "bad_request"),
        ("/step", {"command": "look"}, None, 422, "invalid_field"),
        ("/step", {"session_id": sid}, None, 422, "invalid_field"),
        ("/step", {"session_id": sid, "command": 7}, None, 422, "invalid_field"),
        ("/step", {"session_id": sid, "command": "x" * 501}, None, 422, "invalid_field"),
        ("/step", {"session_id": "9.nope", "command": "look"}, None, 404, "unknown_session"),
        ("/step", {"session_id": "garbage", "command": "look"}, None, 404, "unknown_session"),
        ("/reset", {"game": 99}, None, 422, "unknown_game"),
        ("/reset", {"game": -1}, None, 422, "unknown_game"),
        ("/reset", {"game": True}, None, 422, "unknown_game"),
        ("/reset", {"game": "../eval/00000"}, None, 422, "unknown_game"),
        ("/reset", {"game": 0, "actions": "look"}, None, 422, "invalid_field"),
        ("/reset", {"game": 0, "actions": ["look"] * 51}, None, 422, "invalid_field"),
        ("/close", {}, None, 422, "invalid_field"),
    ]
    for path, body, raw, status, code in cases:
        r = client.post(path, body, raw=raw)
        assert r.status_code == status, (path, body, r.text)
        assert r.json()["code"] == code and r.json()["error"], (path, body, r.json())
    r = client.post("/step", {"session_id": sid, "command": "look"}, token="not-a-token")
    assert r.status_code == 401 and r.json()["code"] == "invalid_token"
    r = httpx.post(service["url"] + "/step", json={"session_id": sid, "command": "look"}, timeout=10)
    assert r.status_code == 401 and r.json()["code"] == "missing_token"
    assert client.step(sid, "look")["steps"] == 1  # none of the above took a step
    assert len(client.get("/sessions").json()["sessions"]) == 1
    client.post("/close", {"session_id": sid})


def test_sessions_are_isolated_between_runs(service):
    a, b = Client(service), Client(service)
    s = a.reset(game=0)
    sid = s["session_id"]
    for path, body in [("/step", {"session_id": sid, "command": "look"}), ("/close", {"session_id": sid}),
                       ("/reset", {"session_id": sid})]:
        r = b.post(path, body)
        assert r.status_code == 404 and r.json()["code"] == "unknown_session", (path, r.text)
    assert b.get("/sessions").json()["sessions"] == []
    assert [x["session_id"] for x in a.get("/sessions").json()["sessions"]] == [sid]
    assert a.step(sid, "look")["steps"] == 1  # B's attempts did not touch it
    a.post("/close", {"session_id": sid})


def test_session_limit_close_and_close_run(service):
    client = Client(service)
    sids = [client.reset()["session_id"] for _ in range(3)]
    assert len({sid.split(".")[0] for sid in sids}) == 2  # spread over both hosts
    r = client.post("/reset", {})
    assert r.status_code == 429 and r.json()["code"] == "too_many_sessions"
    r = client.post("/close", {"session_id": sids[0]})
    assert r.status_code == 200 and r.json()["open_sessions"] == 2
    sids[0] = client.reset(game=1)["session_id"]
    # The orchestrator ends the run: its sessions go, and the closed token is refused.
    usage = service["handle"].close_run.remote(client.token).result()
    assert usage == {"closed": 3, "resets": 4, "steps": 0, "wins": 0}
    assert client.get("/sessions").json()["sessions"] == []
    import ray

    ray.get(service["registry"].close.remote(client.token))
    r = client.post("/reset", {})
    assert r.status_code == 401 and r.json()["code"] == "invalid_token"


def test_idle_sessions_are_reclaimed(service):
    client = Client(service)
    sids = [client.reset(game=i)["session_id"] for i in range(3)]
    # idle_timeout_s=30 (10 expired sessions of the concurrency test whose steps waited on a loaded machine);
    # hosts look every 5 s
    time.sleep(30 + 6)
    r = client.post("/step", {"session_id": sids[0], "command": "look"})
    assert r.status_code == 404 and r.json()["code"] == "unknown_session"
    assert client.get("/sessions").json()["sessions"] == []
    # Their slots were released: the run can open its full quota again.
    new = [client.reset()["session_id"] for _ in range(3)]
    assert len(new) == 3
    service["handle"].close_run.remote(client.token).result()


def test_concurrent_sessions_across_replicas(service):
    """Two runs, three sessions each, stepped from six threads; requests land on both router replicas."""
    replicas = {httpx.get(service["url"] + "/health", timeout=10).json()["replica"] for _ in range(40)}
    assert len(replicas) == 2, replicas
    runs = [Client(service), Client(service)]
    plan = walkthrough(service["task"], 0)

    def play(args):
        client, k = args
        s = client.reset(game=0)
        for cmd in plan:
            s = client.step(s["session_id"], cmd)
        client.post("/close", {"session_id": s["session_id"]})
        return s["won"], s["steps"]

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(play, [(c, k) for c in runs for k in range(3)]))
    assert results == [(True, len(plan))] * 6
    stats = service["handle"].stats.remote().result()
    assert all(h["opened"] > 0 for h in stats)
