"""What the rollout service costs a step, for every interactive environment (ALFWorld, WebShop, DeepSearchQA): the
environment in this process against the service (HTTP, Serve router, host actors), side by side in one run.

    python benchmarks/bench_rollouts.py [--envs alfworld,webshop,deepsearchqa] [--steps 300] [--batches 16,64]
                                        [--hosts 2] [--episodes 64] [--horizon 20]

Per environment: one session stepped one request at a time (POST /env/step, a JSON body, and the same fields as query
parameters with no body) against one episode in process (steps/s, p50/p99 a step, the p50 overhead; the same through
the agent client with its kept connection and with a new connection a request; and the parts: Serve alone, GET
/env/health, and the host's actor call alone); batches of 16 and 64 sessions stepped with one POST /env/step_batch
each (steps/s, p50/p99 of a batch and per step) against the same sessions (games, policy, seeds) stepped in process
with Environment.step_many; and a GRPO-shaped round, `episodes` episodes in lockstep to completion (done, or
`horizon` steps) with a scripted policy, through the agent client (a2rl_client.Env: one reset batch, one step batch
per lockstep step) against the same round in process (step_many too).
Also counts the run registry's lookups: routers check tokens against their snapshot of open runs, not the registry.

Starts its own Ray on 127.0.0.1 and Serve on a free loopback port; tasks are built (or found) under $A2RL_CACHE_DIR
(default: a temp dir). The scripted policies never end an episode in the throughput phases (so no answer comes from a
finished episode) and may end it in the round. RAY_SERVE_THROUGHPUT_OPTIMIZED=1 in the environment measures Serve's
throughput settings (direct ingress, gRPC, user code on the replica's main loop; with it, a deployment handle called
from synchronous code, as the orchestrator's close_run is, fails unless RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=1).
Per batch size it also counts the hosts' CPU seconds: steps per host CPU second against steps per CPU second in
process is what the service costs per core, whatever else the machine runs. Prints a table and one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the orchestrator runs it: agents cannot connect

WORDS = ["shampoo", "wireless headphones", "black", "gluten free coffee", "slim fit jeans", "easy assemble", "usb c",
         "long lasting", "queen sheet set", "organic honey"]


def task_cfg(env: str, hosts: int, max_sessions: int) -> dict:
    from orchestrator.sweep import load_named

    # 64 sessions share 4 ALFWorld games (building one is slow); the a2rl protocol: the paper's plays 50 steps a game
    size = {"alfworld": {"n_train": 4, "n_eval": 1, "seed": 7, "protocol": "a2rl"},
            "webshop": {"n_products": 2000, "n_train": 64, "n_eval": 1, "eval_salt": "bench"},
            "deepsearchqa": {"eval_salt": "bench"}}[env]
    return {**load_named("task", env, "bench"), "name": f"{env}_bench", "data_path": None, **size, "final_size": 0,
            "max_steps": 100_000,  # episodes end by the policy (or the round's horizon), never by length
            "rollout": {"num_hosts": hosts, "num_replicas": 1, "max_sessions_per_run": max_sessions,
                        "idle_timeout_s": 600}}


class Scripted:
    """A scripted policy per environment, from what a step answers (observation, admissible commands)."""

    def __init__(self, env_name: str, environment):
        self.name = env_name
        if env_name == "deepsearchqa":
            self.queries = [f"search[{hop.query}]" for inst in environment.instances("train")
                            for hop in environment.question(inst).hops]

    def __call__(self, admissible: list[str], rng: random.Random, may_end: bool) -> str:
        if self.name == "alfworld":  # moving and looking never wins: episodes end by the horizon
            gos = [c for c in admissible if c.startswith("go to ")]
            return rng.choice(gos) if gos and rng.random() < 0.8 else "look"
        if self.name == "webshop":
            if may_end and "click[buy now]" in admissible and rng.random() < 0.5:
                return "click[buy now]"
            clicks = [a for a in admissible if a.startswith("click[") and a != "click[buy now]"]
            return rng.choice(clicks) if clicks and rng.random() >= 0.25 else f"search[{rng.choice(WORDS)}]"
        if may_end and rng.random() < 0.15:
            return "answer[unknown]"
        return rng.choice(self.queries)


def summary(lat: list[float], steps: int, wall: float, per: int = 1) -> dict:
    """steps/s over the wall time; p50/p99 of a request (and of a step: a request's time over its steps)."""
    lat = sorted(lat)
    p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    out = {"steps": steps, "steps_per_s": round(steps / wall, 1)}
    if per == 1:
        return {**out, "step_ms_p50": round(1000 * p50, 3), "step_ms_p99": round(1000 * p99, 3)}
    return {**out, "batch_ms_p50": round(1000 * p50, 1), "batch_ms_p99": round(1000 * p99, 1),
            "step_ms_p50": round(1000 * p50 / per, 3), "step_ms_p99": round(1000 * p99 / per, 3)}


def in_process_steps(environment, policy: Scripted, steps: int) -> dict:
    rng = random.Random(0)
    episode = environment.open(environment.instances("train")[0])
    step = episode.reset()
    lat = []
    cpu0 = time.process_time()
    for _ in range(steps):
        action = policy(list(step.actions or ()), rng, may_end=False)
        t = time.perf_counter()
        step = episode.step(action)
        lat.append(time.perf_counter() - t)
    cpu_s = time.process_time() - cpu0
    episode.close()
    return {**summary(lat, len(lat), sum(lat)), "steps_per_cpu_s": round(steps / cpu_s, 1)}


def in_process_batches(environment, policy: Scripted, n_games: int, size: int, rounds: int) -> dict:
    """The same sessions as a service batch (games, policy, seeds), stepped here with the environment's own
    step_many, as a host steps its part: what a batch costs without the service, per CPU second."""
    instances = environment.instances("train")
    rngs = [random.Random(i) for i in range(size)]
    eps = [environment.open(instances[i % n_games]) for i in range(size)]
    admissible = [list(e.reset().actions or ()) for e in eps]
    lat = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        actions = [policy(a, rng, False) for a, rng in zip(admissible, rngs)]
        t = time.perf_counter()
        steps = environment.step_many(eps, actions)
        lat.append(time.perf_counter() - t)
        admissible = [list(s.actions or ()) for s in steps]
    cpu_s, wall = time.process_time() - cpu0, time.perf_counter() - t0
    for e in eps:
        e.close()
    return {"sessions": size, **summary(lat, rounds * size, wall, per=size),
            "steps_per_cpu_s": round(rounds * size / cpu_s, 1)}


def service_steps(http, url: str, headers: dict, policy: Scripted, steps: int, query: bool = False) -> dict:
    """One session, one POST /step a step: the fields as a JSON body, or (query) as URL parameters and no body."""
    rng = random.Random(0)
    s = http.post(url + "/reset", json={"game": 0}, headers=headers).json()
    lat = []
    t0 = time.perf_counter()
    for _ in range(steps):
        body = {"session_id": s["session_id"], "command": policy(s["admissible_commands"], rng, may_end=False)}
        t = time.perf_counter()
        r = http.post(url + "/step", params=body, headers=headers) if query else \
            http.post(url + "/step", json=body, headers=headers)
        lat.append(time.perf_counter() - t)
        r.raise_for_status()
        s = {**s, **r.json()}
    wall = time.perf_counter() - t0
    http.post(url + "/close", json={"session_id": s["session_id"]}, headers=headers)
    return summary(lat, steps, wall)


def service_processes(task_name: str) -> dict:
    """The processes a request crosses, by part: Serve's HTTP proxy, the rollout routers, the hosts, and this one
    (the client), as psutil handles: their CPU seconds are what each part costs, however loaded the machine is."""
    import psutil
    import ray

    def pid(actor) -> int:
        return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))

    parts: dict[str, list] = {"proxy": [], "router": [], "hosts": []}
    for a in ray.util.list_named_actors(all_namespaces=True):
        name = a["name"]
        part = ("proxy" if name.startswith("SERVE_PROXY_ACTOR") else
                "router" if name.startswith("SERVE_REPLICA") and f"rollouts-{task_name}" in name else
                "hosts" if name.startswith(f"a2rl-env-{task_name}-") else None)
        if part:
            parts[part].append(psutil.Process(pid(ray.get_actor(name, namespace=a["namespace"]))))
    return {**parts, "client": [psutil.Process()]}


def cpu_seconds(processes: dict) -> dict:
    return {part: sum(sum(p.cpu_times()[:2]) for p in procs) for part, procs in processes.items()}


def cpu_ms_per_step(processes: dict, before: dict, steps: int) -> dict:
    after = cpu_seconds(processes)
    return {part: round(1000 * (after[part] - before[part]) / steps, 3) for part in before}


def client_steps(url: str, token: str, policy: Scripted, steps: int, keep_alive: bool) -> dict:
    """One session through the agent client's HTTP: a kept-open connection (a2rl_client.KeepAlive, what Env uses,
    with the step in the query as Env sends one session's step) or a new connection a request (a2rl_client.http,
    urllib, a JSON body)."""
    from agents.builtin import a2rl_client

    keep = a2rl_client.KeepAlive(url, token)

    def post(path: str, body: dict) -> dict:
        if not keep_alive:
            code, answer = a2rl_client.http(url + path, token, body)
        elif path == "/step":
            code, answer = keep(path, query=body)
        else:
            code, answer = keep(path, body)
        assert code == 200, (code, answer)
        return answer

    rng = random.Random(0)
    s = post("/reset", {"game": 0})
    lat = []
    t0 = time.perf_counter()
    for _ in range(steps):
        body = {"session_id": s["session_id"], "command": policy(s["admissible_commands"], rng, may_end=False)}
        t = time.perf_counter()
        s = {**s, **post("/step", body)}
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    post("/close", {"session_id": s["session_id"]})
    return summary(lat, steps, wall)


def host_alone(host, token: str, session_id: str, policy: Scripted, admissible: list[str], steps: int) -> dict:
    """The host actor's call for one step, from this process: the actor round trip and the step, no HTTP, no Serve."""
    import ray

    rng = random.Random(0)
    lat = []
    for _ in range(steps):
        t = time.perf_counter()
        (answer,) = ray.get(host.batch.remote("step", token, [(session_id, policy(admissible, rng, False))]))
        lat.append(time.perf_counter() - t)
        admissible = answer["admissible_commands"]
    return {k: v for k, v in summary(lat, steps, sum(lat)).items() if k.startswith("step_ms")}


def serve_alone(http, url: str, requests: int) -> dict:
    """GET /env/health: HTTP, Serve's proxy and the router, no host and no registry: Serve's own part of a step."""
    lat = []
    for _ in range(requests):
        t = time.perf_counter()
        http.get(url + "/health").raise_for_status()
        lat.append(time.perf_counter() - t)
    return {k: v for k, v in summary(lat, requests, sum(lat)).items() if k.startswith("step_ms")}


def service_batches(http, url: str, headers: dict, policy: Scripted, n_games: int, size: int, rounds: int,
                    hosts: list, processes: dict) -> dict:
    import ray

    rngs = [random.Random(i) for i in range(size)]
    r = http.post(url + "/reset_batch", json={"resets": [{"game": i % n_games} for i in range(size)]},
                  headers=headers)
    r.raise_for_status()
    sessions = r.json()["results"]
    assert all(s["status"] == 200 for s in sessions), sessions
    lat = []
    cpu0 = sum(h["cpu_s"] for h in ray.get([h.stats.remote() for h in hosts]))
    before = cpu_seconds(processes)
    t0 = time.perf_counter()
    for _ in range(rounds):
        body = {"steps": [{"session_id": s["session_id"], "command": policy(s["admissible_commands"], rng, False)}
                          for s, rng in zip(sessions, rngs)]}
        t = time.perf_counter()
        r = http.post(url + "/step_batch", json=body, headers=headers)
        lat.append(time.perf_counter() - t)
        r.raise_for_status()
        sessions = [{**s, **a} for s, a in zip(sessions, r.json()["results"])]
        assert all(s["status"] == 200 for s in sessions), sessions
    wall = time.perf_counter() - t0
    cpu_ms = cpu_ms_per_step(processes, before, rounds * size)
    stats = ray.get([h.stats.remote() for h in hosts])
    host_cpu_s = sum(h["cpu_s"] for h in stats) - cpu0
    for s in sessions:
        http.post(url + "/close", json={"session_id": s["session_id"]}, headers=headers)
    return {"sessions": size, **summary(lat, rounds * size, wall, per=size),
            "steps_per_host_cpu_s": round(rounds * size / host_cpu_s, 1),
            "host_peak_rss_mb": [h["peak_rss_mb"] for h in stats], "cpu_ms_per_step": cpu_ms}


def round_in_process(environment, policy: Scripted, episodes: int, horizon: int) -> dict:
    """`episodes` episodes in lockstep to completion, as a trainer plays a GRPO round (no model: the policy is
    scripted, so what is timed is the environment and what carries its steps)."""
    instances = environment.instances("train")
    rngs = [random.Random(i) for i in range(episodes)]
    t0 = time.perf_counter()
    eps = [environment.open(instances[i % len(instances)]) for i in range(episodes)]
    last = [{"admissible_commands": list(s.actions or ()), "done": False} for s in (e.reset() for e in eps)]
    steps = 0
    for _ in range(horizon):
        active = [i for i in range(episodes) if not last[i]["done"]]
        if not active:
            break
        actions = [policy(last[i]["admissible_commands"], rngs[i], may_end=True) for i in active]
        for i, step in zip(active, environment.step_many([eps[i] for i in active], actions)):  # as a host steps
            last[i] = {"admissible_commands": list(step.actions or ()), "done": step.done or step.won}
        steps += len(active)
    wall = time.perf_counter() - t0
    for e in eps:
        e.close()
    return {"episodes": episodes, "steps": steps, "wall_s": round(wall, 3)}


def round_through_service(client_env, policy: Scripted, n_games: int, episodes: int, horizon: int) -> dict:
    """The same round through the agent client: one reset batch, then one step batch per lockstep step."""
    rngs = [random.Random(i) for i in range(episodes)]
    names = [g["name"] for g in client_env.games]
    t0 = time.perf_counter()
    last = client_env.starts([(names[i % n_games], []) for i in range(episodes)])
    steps = 0
    for _ in range(horizon):
        active = [i for i in range(episodes) if not last[i]["done"]]
        if not active:
            break
        answers = client_env.steps([(last[i]["session_id"], policy(last[i]["admissible_commands"], rngs[i], True))
                                    for i in active])
        for i, answer in zip(active, answers):
            last[i] = answer
        steps += len(active)
    wall = time.perf_counter() - t0
    client_env.release([a["session_id"] for a in last])
    return {"episodes": episodes, "steps": steps, "wall_s": round(wall, 3)}


def bench_env(name: str, a, cache: Path, port: int, registry) -> dict:
    import httpx
    import ray

    from agents.builtin.a2rl_client import Env
    from contracts.task import load_task
    from contracts.runs import RunRegistration
    from contracts.task_spec import TaskSpec
    from envs import rollout_service

    cfg = task_cfg(name, a.hosts, max(a.batches + [a.episodes]))
    t = time.perf_counter()
    environment = load_task(cfg, cache).environment()
    environment.instances("train")
    n_games = len(environment.instances("train"))
    policy = Scripted(name, environment)
    route = rollout_service.deploy(TaskSpec.from_config(cfg), str(cache))
    out = {"env": name, "train_instances": n_games, "setup_s": round(time.perf_counter() - t, 1)}
    url = f"http://127.0.0.1:{port}{route}"
    token = secrets.token_urlsafe(16)
    ray.get(registry.register.remote(token, RunRegistration(
        cell_id="bench", workspace="/nonexistent", records_dir="/nonexistent", code_repo="/nonexistent",
        started_at=time.time(), deadline=time.time() + 7200, max_submissions=1)))
    headers = {"Authorization": f"Bearer {token}"}
    hosts = [ray.get_actor(h["name"], namespace="a2rl") for h in sorted(
        ray.util.list_named_actors(all_namespaces=True), key=lambda h: h["name"])
        if h["name"].startswith(f"a2rl-env-{cfg['name']}-")]  # "...-<index>": host 0 first (fewer than 10 hosts)
    with httpx.Client(timeout=600) as http:
        service_steps(http, url, headers, policy, 20)  # warm up connections, host code paths, caches
        looked_up = ray.get(registry.lookup_counts.remote())["get"]
        out["in_process"] = in_process_steps(environment, policy, a.steps)
        processes = service_processes(cfg["name"])
        before = cpu_seconds(processes)
        out["service_one_session"] = service_steps(http, url, headers, policy, a.steps)
        out["service_one_session"]["cpu_ms_per_step"] = cpu_ms_per_step(processes, before, a.steps)
        out["service_one_session_query"] = service_steps(http, url, headers, policy, a.steps, query=True)
        out["client_keep_alive"] = client_steps(url, token, policy, a.steps, keep_alive=True)
        out["client_new_connections"] = client_steps(url, token, policy, a.steps, keep_alive=False)
        out["serve_alone"] = serve_alone(http, url, a.steps)
        # The host's actor call alone, on a session of host 0 (a session id names its host: "<index>.<random>")
        opened = http.post(url + "/reset_batch", json={"resets": [{"game": 0}] * a.hosts}, headers=headers)
        (own,) = [r for r in opened.json()["results"] if r["session_id"].startswith("0.")]
        out["host_alone"] = host_alone(hosts[0], token, own["session_id"], policy, own["admissible_commands"], a.steps)
        for r in opened.json()["results"]:
            http.post(url + "/close", json={"session_id": r["session_id"]}, headers=headers)
        rounds = {size: max(3, 2 * a.steps // size) for size in a.batches}
        out["in_process_batches"] = [in_process_batches(environment, policy, n_games, size, rounds[size])
                                     for size in a.batches]
        out["service_batches"] = [service_batches(http, url, headers, policy, n_games, size, rounds[size], hosts,
                                                  processes) for size in a.batches]
        stepped = out["service_one_session"]["steps"] + sum(b["steps"] for b in out["service_batches"])
        out["registry_gets_per_1000_steps"] = round(
            1000 * (ray.get(registry.lookup_counts.remote())["get"] - looked_up) / stepped, 2)
    client_env = Env({"rollout_url": url, "run_token": token})
    out["round_in_process"] = round_in_process(environment, policy, a.episodes, a.horizon)
    out["round_service"] = round_through_service(client_env, policy, n_games, a.episodes, a.horizon)
    ip, one = out["in_process"], out["service_one_session"]
    out["ratios"] = {
        "one_session_vs_in_process": round(one["steps_per_s"] / ip["steps_per_s"], 3),
        "one_session_p50_overhead_ms": round(one["step_ms_p50"] - ip["step_ms_p50"], 2),
        "query_form_p50_overhead_ms": round(out["service_one_session_query"]["step_ms_p50"] - ip["step_ms_p50"], 2),
        "of_which_serve_alone_p50_ms": out["serve_alone"]["step_ms_p50"],
        "of_which_host_call_p50_ms": round(out["host_alone"]["step_ms_p50"] - ip["step_ms_p50"], 2),
        "client_keep_alive_p50_overhead_ms": round(out["client_keep_alive"]["step_ms_p50"] - ip["step_ms_p50"], 2),
        "client_new_connections_p50_overhead_ms": round(
            out["client_new_connections"]["step_ms_p50"] - ip["step_ms_p50"], 2),
        # per core: the hosts' CPU against the same sessions stepped here (one episode alone differs: another game)
        **{f"batch{b['sessions']}_per_host_cpu_vs_in_process":
           round(b["steps_per_host_cpu_s"] / ib["steps_per_cpu_s"], 3)
           for b, ib in zip(out["service_batches"], out["in_process_batches"])},
        **{f"batch{b['sessions']}_vs_in_process": round(b["steps_per_s"] / ib["steps_per_s"], 3)
           for b, ib in zip(out["service_batches"], out["in_process_batches"])},
        "round_service_over_in_process": round(out["round_service"]["wall_s"] / out["round_in_process"]["wall_s"],
                                               2)}
    return out


def worker_niceness() -> int:
    return os.nice(0)


def table(results: list[dict]) -> str:
    rows = [("env", "what", "steps/s", "p50 ms/step", "p99 ms/step", "p50 ms/request", "vs in process")]
    for r in results:
        ip = r["in_process"]
        rows.append((r["env"], "in process", ip["steps_per_s"], ip["step_ms_p50"], ip["step_ms_p99"], "", "1"))
        rows.append(("", f"  CPU ms/step: {round(1000 / ip['steps_per_cpu_s'], 3)}", "", "", "", "", ""))
        for what, key in [("service, 1 session (httpx, JSON body)", "service_one_session"),
                          ("  the same, fields in the query, no body", "service_one_session_query"),
                          ("  a2rl_client, kept connection, query", "client_keep_alive"),
                          ("  a2rl_client, new connections", "client_new_connections")]:
            one = r[key]
            rows.append(("", what, one["steps_per_s"], one["step_ms_p50"], one["step_ms_p99"], one["step_ms_p50"],
                         round(one["steps_per_s"] / ip["steps_per_s"], 3)))
        rows.append(("", "  CPU ms/step: " + ", ".join(f"{k} {v}" for k, v in
                                                      r["service_one_session"]["cpu_ms_per_step"].items()),
                     "", "", "", "", ""))
        for what, key in [("  of which Serve alone (GET /health)", "serve_alone"),
                          ("  of which the host's actor call", "host_alone")]:
            rows.append(("", what, "", r[key]["step_ms_p50"], r[key]["step_ms_p99"], "", ""))
        for b, ib in zip(r["service_batches"], r["in_process_batches"]):
            rows.append(("", f"in process, batch of {ib['sessions']} (step_many)", ib["steps_per_s"],
                         ib["step_ms_p50"], ib["step_ms_p99"], ib["batch_ms_p50"], ""))
            rows.append(("", f"  CPU ms/step: {round(1000 / ib['steps_per_cpu_s'], 3)}", "", "", "", "", ""))
            rows.append(("", f"service, batch of {b['sessions']}", b["steps_per_s"], b["step_ms_p50"],
                         b["step_ms_p99"], b["batch_ms_p50"], r["ratios"][f"batch{b['sessions']}_vs_in_process"]))
            rows.append(("", "  per host CPU second", b["steps_per_host_cpu_s"], "", "", "",
                         r["ratios"][f"batch{b['sessions']}_per_host_cpu_vs_in_process"]))
            rows.append(("", "  CPU ms/step: " + ", ".join(f"{k} {v}" for k, v in b["cpu_ms_per_step"].items()),
                         "", "", "", "", ""))
        rows.append(("", f"GRPO round ({r['round_service']['episodes']} episodes, {r['round_service']['steps']} "
                         "steps)", "", "", "", "", f"{r['round_service']['wall_s']} s vs "
                     f"{r['round_in_process']['wall_s']} s: {r['ratios']['round_service_over_in_process']}x"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", default="alfworld,webshop,deepsearchqa")
    ap.add_argument("--steps", type=int, default=300, help="steps of the one-session measurements")
    ap.add_argument("--batches", default="16,64", help="sessions per step batch")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=64, help="episodes of the GRPO-shaped round")
    ap.add_argument("--horizon", type=int, default=20, help="steps at most per episode of the round")
    a = ap.parse_args()
    a.batches = [int(x) for x in a.batches.split(",")]
    cache = Path(os.environ.get("A2RL_CACHE_DIR") or tempfile.mkdtemp(prefix="a2rl-bench-"))
    os.environ["A2RL_CACHE_DIR"] = str(cache)

    import ray
    from ray import serve

    import orchestrator  # noqa: F401  (registers the task classes, as a sweep does)
    from contracts.runs import get_or_create_registry

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, namespace="a2rl",
             log_to_driver=False, logging_level="WARNING")
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"log_level": "WARNING"})
    registry = get_or_create_registry()
    # Ray runs its workers (hosts, routers, and in a sweep the agents) at a niceness of their own (15): this process,
    # the in-process side and the client, takes the same, so a machine loaded by others weighs on both sides alike.
    niceness = ray.get(ray.remote(num_cpus=0)(worker_niceness).remote())
    os.nice(niceness - os.nice(0))
    results = []
    try:
        for name in a.envs.split(","):
            results.append(bench_env(name, a, cache, port, registry))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(table(results))
    print(json.dumps({"cpus": os.cpu_count(), "hosts": a.hosts, "niceness": niceness,
                      "throughput_optimized": os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED", "0") == "1",
                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
