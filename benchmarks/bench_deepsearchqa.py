"""DeepSearchQA environment steps per second: episodes in process vs. through the rollout service (HTTP, Serve
router, host actors), and the service's aggregate throughput with many concurrent sessions.

    python benchmarks/bench_deepsearchqa.py [--task deepsearchqa] [--steps 300] [--hosts 2] [--sessions 1,2,4,8,16]

Starts its own Ray on 127.0.0.1 and Serve on a free loopback port; the task's generated world is built in memory
(its eval salt fixed, so nothing is written but the grading secret's folder under $A2RL_CACHE_DIR, default a temp
dir). Every step is a `search[...]` with one of the train questions' expert queries (a BM25 search over the train
world, top 3): episodes never end by an answer, and max_steps is raised so they do not end by length. Prints one
JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the orchestrator runs it: agents cannot connect


def task_cfg(name: str, hosts: int, replicas: int, max_sessions: int) -> dict:
    from orchestrator.sweep import load_named

    return {**load_named("task", name, "bench"), "name": f"{name}_bench", "max_steps": 100_000, "eval_salt": "bench",
            "final_size": 0,  # the rollout service serves train questions only
            "rollout": {"num_hosts": hosts, "num_replicas": replicas, "max_sessions_per_run": max_sessions,
                        "idle_timeout_s": 600}}


def queries(task) -> list[str]:
    env = task.environment()
    return [f"search[{hop.query}]" for inst in env.instances("train") for hop in env.question(inst).hops]


def bench_in_process(task, steps: int) -> dict:
    env = task.environment()
    actions, rng = queries(task), random.Random(0)
    instances = env.instances("train")
    lat, resets = [], []
    episode = None
    for i in range(steps):
        if i % 50 == 0:  # a new question now and then, as sessions do
            episode = env.open(instances[(i // 50) % len(instances)])
            t = time.perf_counter()
            episode.reset()
            resets.append(time.perf_counter() - t)
        action = rng.choice(actions)
        t = time.perf_counter()
        episode.step(action)
        lat.append(time.perf_counter() - t)
    return {"steps_per_s": round(len(lat) / sum(lat), 1), "step_ms_p50": round(1000 * statistics.median(lat), 2),
            "reset_ms_mean": round(1000 * statistics.mean(resets), 3)}


def _client_loop(url: str, token: str, game: int, steps: int, actions: list[str], seed: int, out: list,
                 barrier) -> None:
    import httpx

    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=120) as http:
        s = http.post(url + "/reset", json={"game": game}, headers=headers).json()
        barrier.wait()
        lat = []
        t0 = time.perf_counter()
        for _ in range(steps):
            t = time.perf_counter()
            r = http.post(url + "/step", json={"session_id": s["session_id"], "command": rng.choice(actions)},
                          headers=headers)
            lat.append(time.perf_counter() - t)
            r.raise_for_status()
        out.append({"lat": lat, "wall": time.perf_counter() - t0})
        http.post(url + "/close", json={"session_id": s["session_id"]}, headers=headers)


def bench_service(url: str, token: str, n_games: int, sessions: int, steps: int, actions: list[str]) -> dict:
    out: list = []
    barrier = threading.Barrier(sessions)
    threads = [threading.Thread(target=_client_loop, args=(url, token, i % n_games, steps, actions, i, out, barrier))
               for i in range(sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    lat = sorted(x for o in out for x in o["lat"])
    wall = max(o["wall"] for o in out)
    return {"sessions": sessions, "steps_per_s": round(len(lat) / wall, 1),
            "step_ms_p50": round(1000 * lat[len(lat) // 2], 1),
            "step_ms_p95": round(1000 * lat[int(len(lat) * 0.95)], 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="deepsearchqa")
    ap.add_argument("--steps", type=int, default=300, help="steps per measurement (per session when concurrent)")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--sessions", default="1,2,4,8,16")
    a = ap.parse_args()
    levels = [int(x) for x in a.sessions.split(",")]
    cache = Path(os.environ.get("A2RL_CACHE_DIR") or tempfile.mkdtemp(prefix="a2rl-bench-"))
    os.environ["A2RL_CACHE_DIR"] = str(cache)

    import ray
    from ray import serve

    from contracts.runs import get_or_create_registry
    from contracts.task import load_task
    from contracts.task_spec import TaskSpec
    from envs import rollout_service

    cfg = task_cfg(a.task, a.hosts, a.replicas, max(levels))
    t = time.perf_counter()
    task = load_task(cfg, cache)
    task.environment()
    result = {"task": a.task, "questions": len(task.environment().instances("train")),
              "documents": len(task.environment().backend("train").documents),
              "build_s": round(time.perf_counter() - t, 1), "hosts": a.hosts, "replicas": a.replicas,
              "cpus": os.cpu_count()}
    result["in_process"] = bench_in_process(task, a.steps)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, namespace="a2rl",
             log_to_driver=False, logging_level="WARNING")
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"log_level": "WARNING"})
    registry = get_or_create_registry()
    route = rollout_service.deploy(TaskSpec.from_config(cfg), str(cache))
    url = f"http://127.0.0.1:{port}{route}"
    token = secrets.token_urlsafe(16)
    ray.get(registry.register.remote(token, {"deadline": time.time() + 3600, "max_submissions": 1}))
    actions, n_games = queries(task), result["questions"]
    bench_service(url, token, n_games, 1, 20, actions)  # warm up connections, host code paths and the host's index
    result["service"] = [bench_service(url, token, n_games, n, a.steps if n == 1 else max(20, a.steps // n * 2),
                                       actions) for n in levels]
    single = result["service"][0]["steps_per_s"]
    result["service_vs_in_process"] = round(single / result["in_process"]["steps_per_s"], 3)
    result["best_concurrent_vs_in_process"] = round(
        max(r["steps_per_s"] for r in result["service"]) / result["in_process"]["steps_per_s"], 3)
    print(json.dumps(result, indent=1))
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
