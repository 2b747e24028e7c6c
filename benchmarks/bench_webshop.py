"""WebShop steps per second: the store in process vs. through the rollout service (HTTP, Serve router, host actors),
and the service's aggregate throughput with many concurrent sessions.

    python benchmarks/bench_webshop.py [--products 2000] [--steps 300] [--hosts 2] [--sessions 1,2,4,8,16]

Starts its own Ray on 127.0.0.1 and Serve on a free loopback port. Every step is a search (one in four) or a click
on one of the page's buttons other than ``buy now`` (so episodes never end and every answer is a fresh page).
Prints one JSON object.
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

WORDS = ["shampoo", "wireless headphones", "black", "gluten free coffee", "slim fit jeans", "easy assemble",
         "usb c", "long lasting", "queen sheet set", "organic honey"]


def task_cfg(n_products: int, hosts: int, max_sessions: int) -> dict:
    from orchestrator.sweep import load_named

    return {**load_named("task", "webshop", "bench"), "name": "webshop_bench", "n_products": n_products,
            "n_train": 50, "n_eval": 1, "final_size": 0, "eval_salt": "bench", "max_steps": 100_000,
            "rollout": {"num_hosts": hosts, "num_replicas": 1, "max_sessions_per_run": max_sessions,
                        "idle_timeout_s": 600}}


def next_action(actions: list[str], rng: random.Random) -> str:
    clicks = [a for a in actions if a.startswith("click[") and a != "click[buy now]"]
    if not clicks or rng.random() < 0.25:
        return f"search[{rng.choice(WORDS)}]"
    return rng.choice(clicks)


def bench_in_process(env, steps: int) -> dict:
    rng = random.Random(0)
    episode = env.open(env.instances("train")[0])
    step = episode.reset()
    lat = []
    for _ in range(steps):
        action = next_action(list(step.actions), rng)
        t = time.perf_counter()
        step = episode.step(action)
        lat.append(time.perf_counter() - t)
    return {"steps_per_s": round(len(lat) / sum(lat), 1), "step_ms_p50": round(1000 * statistics.median(lat), 2)}


def _client_loop(url: str, token: str, game: int, steps: int, seed: int, out: list, barrier) -> None:
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
            r = http.post(url + "/step", json={"session_id": s["session_id"],
                                               "command": next_action(s["admissible_commands"], rng)},
                          headers=headers)
            lat.append(time.perf_counter() - t)
            r.raise_for_status()
            s = {**s, **r.json()}
        out.append({"lat": lat, "wall": time.perf_counter() - t0})
        http.post(url + "/close", json={"session_id": s["session_id"]}, headers=headers)


def bench_service(url: str, token: str, sessions: int, steps: int) -> dict:
    out: list = []
    barrier = threading.Barrier(sessions)
    threads = [threading.Thread(target=_client_loop, args=(url, token, i % 50, steps, i, out, barrier))
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
    ap.add_argument("--products", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=300, help="steps per measurement (per session when concurrent)")
    ap.add_argument("--hosts", type=int, default=2)
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

    cfg = task_cfg(a.products, a.hosts, max(levels))
    t = time.perf_counter()
    env = load_task(cfg, cache).environment()
    env.build()
    result = {"products": a.products, "build_s": round(time.perf_counter() - t, 2), "hosts": a.hosts,
              "cpus": os.cpu_count(), "in_process": bench_in_process(env, a.steps)}

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
    bench_service(url, token, 1, 20)  # warm up connections and host code paths
    result["service"] = [bench_service(url, token, n, a.steps if n == 1 else max(20, a.steps // n * 2))
                         for n in levels]
    single = result["service"][0]["steps_per_s"]
    result["service_vs_in_process"] = round(single / result["in_process"]["steps_per_s"], 3)
    result["best_concurrent_vs_in_process"] = round(
        max(r["steps_per_s"] for r in result["service"]) / result["in_process"]["steps_per_s"], 3)
    print(json.dumps(result, indent=1))
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
