"""The rollout service over real HTTP on loopback: sessions on train games, bad inputs, isolation, limits, reaping."""
from __future__ import annotations

import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from contracts.rollout_api import GAMES_KEYS, RESET_KEYS, ROUTES, STEP_KEYS
from tests.support.runs import bare_run

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
    "rollout": {"num_hosts": 2, "num_replicas": 2, "max_sessions_per_run": 3, "idle_timeout_s": 120},
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

            ray.get(service["registry"].register.remote(self.token, bare_run()))

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
    assert tuple(body) == GAMES_KEYS and tuple(body["games"][0]) == ("index", "name", "task_type")


def test_the_routes_agents_read_about_are_the_routes_served():
    """The instructions' rollout section comes from contracts.rollout_api.ROUTES: the service serves exactly those."""
    from envs.rollout_service import api

    served = {(method.upper(), path) for path, methods in api.openapi()["paths"].items() for method in methods}
    assert served == {(r.method, r.path) for r in ROUTES}


def test_an_episode_through_the_service_wins_with_the_walkthrough(service):
    client = Client(service)
    start = client.reset(game=0)
    assert sorted(start) == sorted(RESET_KEYS)  # the answer's keys are those the instructions list
    assert start["game"]["index"] == 0 and start["task"] and not start["won"] and not start["done"]
    assert start["admissible_commands"] and "Your task is to" in start["observation"]
    plan = walkthrough(service["task"], 0)
    for cmd in plan:
        assert cmd in start["admissible_commands"] or start["steps"] > 0
        start = client.step(start["session_id"], cmd)
    assert start["won"] and start["done"] and start["reward"] == 1.0 and start["steps"] == len(plan)
    again = client.step(start["session_id"], "look")  # after the end: the same answer, nothing changes
    assert again == start and sorted(again) == sorted(STEP_KEYS)
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


# ~2 min waiting for the reaper's timeout to pass
@pytest.mark.slow
def test_idle_sessions_are_reclaimed(service):
    client = Client(service)
    sids = [client.reset(game=i)["session_id"] for i in range(3)]
    # idle_timeout_s=120: at 30, sessions of the concurrency test expired while their steps waited on a loaded
    # machine; hosts look every 5 s
    time.sleep(120 + 6)
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


def test_hosts_are_sized_to_the_cluster(ray_cluster):
    """rollout.num_hosts null: one host per CPU Ray sees, never more than a run's sessions."""
    import ray

    from contracts.task_spec import TaskSpec
    from envs.rollout_service import host_count

    def rollout(**given):
        return TaskSpec.from_config({**SMALL_TASK, "rollout": {**SMALL_TASK["rollout"], **given}}).rollout

    cpus = int(ray.cluster_resources()["CPU"])
    assert host_count(rollout(num_hosts=None, max_sessions_per_run=cpus + 8)) == cpus
    assert host_count(rollout(num_hosts=None, max_sessions_per_run=1)) == 1
    assert host_count(rollout(num_hosts=cpus + 3)) == cpus + 3


# -- batches, and what the routers know without asking the registry ---------------------------------------------------

def batch(client: Client, path: str, key: str, entries: list, token: str | None = None) -> list[dict]:
    r = client.post(path, {key: entries}, token=token)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == len(entries)
    return results


def host_of(session_id: str) -> int:
    return int(session_id.split(".")[0])


def test_a_batch_goes_across_hosts_and_answers_each_session_as_alone(service):
    """One reset batch and one step batch over both hosts: every session's answer is the one its own /step gives
    (the same commands on a session of its own), bad entries are refused alone, and both hosts stepped."""
    client, alone = Client(service), Client(service)
    plan = walkthrough(service["task"], 0)
    starts = batch(client, "/reset_batch", "resets", [{"game": 0}, {"game": 0, "actions": plan[:2]}, {"game": 1}])
    sids = [r["session_id"] for r in starts]
    assert [r["status"] for r in starts] == [200] * 3 and starts[1]["steps"] == 2
    assert {host_of(sid) for sid in sids} == {0, 1}
    bad = batch(client, "/reset_batch", "resets", [{"game": 99}, "look", {"game": 0, "actions": "look"}])
    assert [(r["status"], r["code"]) for r in bad] == [(422, "unknown_game"), (422, "invalid_field"),
                                                       (422, "invalid_field")]
    (full,) = batch(client, "/reset_batch", "resets", [{}])  # the three above count against the run's limit
    assert (full["status"], full["code"]) == (429, "too_many_sessions")
    before = [h["steps"] for h in service["handle"].stats.remote().result()]
    moves = [(sids[0], plan[0]), (sids[1], plan[2]), (sids[0], plan[1])]
    results = batch(client, "/step_batch", "steps", [{"session_id": s, "command": c} for s, c in moves])
    assert [(r["status"], r["session_id"], r["steps"]) for r in results] == \
        [(200, sids[0], 1), (200, sids[1], 3), (200, sids[0], 2)]  # a session twice in a batch: stepped in order
    more = batch(client, "/step_batch", "steps", [{"session_id": s, "command": c} for s, c in
                                                  [(sids[2], "look"), ("7.nope", "look"), (sids[2], "x" * 501)]])
    assert [(r["status"], r["session_id"]) for r in more] == [(200, sids[2]), (404, "7.nope"), (422, sids[2])]
    assert more[0]["steps"] == 1 and more[1]["code"] == "unknown_session" and more[2]["code"] == "invalid_field"
    results = [results[0], results[1], more[0], results[2]]
    after = [h["steps"] for h in service["handle"].stats.remote().result()]
    assert all(a > b for a, b in zip(after, before)), (before, after)
    # The same commands, one request each, on sessions of another run: the same answers
    for (game, replay), steps, answers in [((0, []), [plan[0], plan[1]], [results[0], results[3]]),
                                           ((0, plan[:2]), [plan[2]], [results[1]]),
                                           ((1, []), ["look"], [results[2]])]:
        s = alone.reset(game=game, actions=replay)
        for cmd, answer in zip(steps, answers):
            own = alone.step(s["session_id"], cmd)
            assert {k: v for k, v in own.items() if k != "session_id"} == \
                {k: v for k, v in answer.items() if k not in ("session_id", "status")}
    for c in (client, alone):
        service["handle"].close_run.remote(c.token).result()


def test_a_batch_keeps_runs_apart(service):
    """A session id of another run inside a batch is refused for that entry only, and the other run's session is
    untouched; a batch with another run's token is refused whole."""
    a, b = Client(service), Client(service)
    (sa,) = [r["session_id"] for r in batch(a, "/reset_batch", "resets", [{"game": 0}])]
    (sb,) = [r["session_id"] for r in batch(b, "/reset_batch", "resets", [{"game": 0}])]
    results = batch(b, "/step_batch", "steps", [{"session_id": sb, "command": "look"},
                                                {"session_id": sa, "command": "look"}])
    assert [(r["status"], r.get("code")) for r in results] == [(200, None), (404, "unknown_session")]
    results = batch(b, "/reset_batch", "resets", [{"session_id": sa, "game": 1}])
    assert (results[0]["status"], results[0]["code"]) == (404, "unknown_session")
    assert a.step(sa, "look")["steps"] == 1  # b's batches did not step, reset or release it
    assert [s["session_id"] for s in a.get("/sessions").json()["sessions"]] == [sa]
    r = a.post("/step_batch", {"steps": [{"session_id": sa, "command": "look"}]}, token="not-a-token")
    assert r.status_code == 401 and r.json()["code"] == "invalid_token"
    for body in ({"steps": "look"}, {"steps": [{}] * 4}, {}):  # not a list, more entries than sessions, missing
        r = a.post("/step_batch", body)
        assert r.status_code == 422 and r.json()["code"] == "invalid_field", (body, r.text)
    for c in (a, b):
        service["handle"].close_run.remote(c.token).result()


def kill_host(host_index: int) -> None:
    """SIGKILL a host actor's process of the test's service, as the kernel's OOM killer would (Ray restarts it)."""
    import os
    import signal

    import ray

    (name,) = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
               if a["name"].startswith(f"a2rl-env-{SMALL_TASK['name']}-") and a["name"].endswith(f"-{host_index}")]
    host = ray.get_actor(name, namespace="a2rl")
    os.kill(ray.get(host.__ray_call__.remote(lambda self: os.getpid())), signal.SIGKILL)


def test_a_lost_session_is_its_own_410_inside_a_batch(service):
    client = Client(service)
    sids = [r["session_id"] for r in batch(client, "/reset_batch", "resets", [{"game": i} for i in range(3)])]
    dead = host_of(sids[0])
    kill_host(dead)
    results = batch(client, "/step_batch", "steps", [{"session_id": s, "command": "look"} for s in sids])
    for sid, r in zip(sids, results):
        if host_of(sid) == dead:
            assert (r["status"], r["code"], r["session_id"]) == (410, "session_lost", sid), r
            assert "POST /env/reset" in r["error"]
        else:
            assert r["status"] == 200 and r["steps"] == 1, r
    # The lost sessions no longer count: as many new ones open (the limit is 3), and the survivors step on.
    lost = [s for s in sids if host_of(s) == dead]
    survivors = [s for s in sids if host_of(s) != dead]
    new = batch(client, "/reset_batch", "resets", [{"game": 0}] * len(lost))
    assert [r["status"] for r in new] == [200] * len(lost), new
    assert sorted(s["session_id"] for s in client.get("/sessions").json()["sessions"]) == \
        sorted(survivors + [r["session_id"] for r in new])
    stepped = batch(client, "/step_batch", "steps", [{"session_id": s, "command": "look"} for s in survivors])
    assert [r["steps"] for r in stepped] == [2] * len(survivors)
    service["handle"].close_run.remote(client.token).result()


def test_steps_do_not_ask_the_registry_and_a_closed_run_is_refused_within_a_second(service):
    import ray

    registry = service["registry"]
    client = Client(service)
    sid = client.reset(game=0)["session_id"]
    before = ray.get(registry.lookup_counts.remote())["get"]
    for _ in range(20):  # both router replicas serve these
        client.step(sid, "look")
        batch(client, "/step_batch", "steps", [{"session_id": sid, "command": "look"}])
    asked = ray.get(registry.lookup_counts.remote())["get"] - before
    # 40 steps: each replica asks for this token at most twice (before its snapshot of open runs holds it)
    assert asked <= 2 * SMALL_TASK["rollout"]["num_replicas"], asked
    ray.get(registry.close.remote(client.token))
    time.sleep(1.0)  # OpenRuns.fresh_s: no snapshot asked for before the close is trusted any longer
    for _ in range(10):
        r = client.post("/step", {"session_id": sid, "command": "look"})
        assert r.status_code == 401 and r.json()["code"] == "invalid_token", r.text
        r = client.post("/step_batch", {"steps": [{"session_id": sid, "command": "look"}]})
        assert r.status_code == 401 and r.json()["code"] == "invalid_token", r.text
    service["handle"].close_run.remote(client.token).result()


def test_session_accounting_survives_a_registry_restart(service):
    """The registry killed (Ray restarts it, its journal brings the runs back): the run's sessions still count
    against its limit and step on, and closing one frees exactly one."""
    import ray

    client = Client(service)
    sids = [r["session_id"] for r in batch(client, "/reset_batch", "resets", [{"game": i} for i in range(3)])]
    ray.kill(service["registry"], no_restart=False)
    results = batch(client, "/step_batch", "steps", [{"session_id": s, "command": "look"} for s in sids])
    assert [r["status"] for r in results] == [200] * 3, results
    (refused,) = batch(client, "/reset_batch", "resets", [{}])
    assert refused["code"] == "too_many_sessions", refused
    assert client.post("/close", {"session_id": sids[0]}).json()["open_sessions"] == 2
    assert [r["status"] for r in batch(client, "/reset_batch", "resets", [{}, {}])] == [200, 429]
    service["handle"].close_run.remote(client.token).result()


def test_the_agent_client_plays_batches_and_reopens_lost_sessions(service):
    """a2rl_client.Env (what the built-in agents and CLI agents' scripts use): one request per lockstep step; a session
    lost with its host ends its episode, the others go on, and the pool opens it anew at the next start."""
    from agents.builtin.a2rl_client import Env

    client = Client(service)
    env = Env({"rollout_url": service["url"], "run_token": client.token})
    names = [g["name"] for g in env.games]
    plan = walkthrough(service["task"], 0)
    starts = env.starts([(names[0], plan[:-1]), (names[1], []), (names[2], [])])
    sids = [s["session_id"] for s in starts]
    assert starts[0]["steps"] == len(plan) - 1 and {host_of(s) for s in sids} == {0, 1}
    won = env.steps([(sids[0], plan[-1]), (sids[1], "look"), (sids[2], "look")])
    assert won[0]["won"] and won[0]["done"] and [w["steps"] for w in won[1:]] == [1, 1]
    dead = host_of(sids[1])
    kill_host(dead)
    after = env.steps([(sid, "look") for sid in sids])
    for sid, answer in zip(sids, after):
        if host_of(sid) == dead:
            assert answer["lost"] and answer["done"] and not answer["won"], answer
        else:
            assert answer["status"] == 200 and not answer.get("lost"), answer
    env.release(sids)
    again = env.starts([(names[0], []), (names[1], []), (names[2], [])])  # reuses the pool: lost ones are reopened
    assert [a["steps"] for a in again] == [0, 0, 0] and len({a["session_id"] for a in again}) == 3
    assert len(client.get("/sessions").json()["sessions"]) == 3  # within the limit: the lost ones were released
    service["handle"].close_run.remote(client.token).result()


def test_a_step_in_the_query_is_the_step_in_the_body(service):
    """POST /env/step?session_id=..&command=.. (no body: Serve's replica has none to fetch from its proxy) answers as
    the JSON body does, refuses the same bad fields and tokens, and the agent client uses it for one session."""
    from agents.builtin.a2rl_client import Env

    client = Client(service)
    by_body, by_query = client.reset(game=2), client.reset(game=2)
    plan = walkthrough(service["task"], 2)
    for cmd in plan[:3]:
        a = client.step(by_body["session_id"], cmd)
        r = httpx.post(client.url + "/step", params={"session_id": by_query["session_id"], "command": cmd},
                       headers={"Authorization": f"Bearer {client.token}"}, timeout=60)
        assert r.status_code == 200, r.text
        assert {**r.json(), "session_id": None} == {**a, "session_id": None}
    headers = {"Authorization": f"Bearer {client.token}"}
    for params, status, code in [({"session_id": by_query["session_id"]}, 422, "invalid_field"),
                                 ({"session_id": by_query["session_id"], "command": "x" * 501}, 422, "invalid_field"),
                                 ({"session_id": "9.nope", "command": "look"}, 404, "unknown_session")]:
        r = httpx.post(client.url + "/step", params=params, headers=headers, timeout=60)
        assert (r.status_code, r.json()["code"]) == (status, code), r.text
    other = Client(service)  # another run's token cannot step this run's session through the query either
    r = httpx.post(client.url + "/step", params={"session_id": by_query["session_id"], "command": "look"},
                   headers={"Authorization": f"Bearer {other.token}"}, timeout=60)
    assert r.status_code == 404 and r.json()["code"] == "unknown_session"
    env = Env({"rollout_url": service["url"], "run_token": client.token})
    (answer,) = env.steps([(by_query["session_id"], plan[3])])
    assert answer["status"] == 200 and answer["steps"] == 4
    assert client.get("/sessions").json()["sessions"] and client.step(by_body["session_id"], plan[3])["steps"] == 4
    service["handle"].close_run.remote(client.token).result()
    service["handle"].close_run.remote(other.token).result()
