"""Grading throughput, batched versus one example at a time, and /status latency while an evaluation runs.

    .venv/bin/python benchmarks/bench_grading.py [--model tiny|smollm2-135m] [--items 64]

1. The same eval items through the transformers backend with batch_size=B and batch_size=1 (greedy, same
   outputs): items/s and the ratio.
2. The grading service on Ray Serve (loopback): /status latency idle, then while a submission of a fresh model is
   being evaluated (the evaluation runs in a worker thread; /status must not wait on it). p50/p95 and the ratio.
"""
from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the orchestrator runs it: agents cannot connect
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def task_cfg(model: str) -> dict:
    from orchestrator.sweep import load_named

    cfg = load_named("task", "arithmetic", "bench")
    cfg["base_model"] = model
    return cfg


def throughput(cfg: dict, cache: Path, n: int, batch: int) -> tuple[float, float, bool]:
    import torch

    from contracts.task import load_task
    from evaluators.backends.transformers_backend import TransformersBackend
    from evaluators.base_models import resolve_base_model

    torch.set_num_threads(1)
    task = load_task(cfg)
    rows = task.eval_rows()[:n]
    conversations = [task.messages(r) for r in rows]
    model_dir = resolve_base_model(cfg["base_model"], cache / "models")
    results = {}
    for size in (batch, 1):
        backend = TransformersBackend(batch_size=size, torch_threads=1)
        loaded = backend.load(model_dir)
        start = time.perf_counter()
        results[size] = (backend.generate(loaded, conversations, task.decoding()),
                         time.perf_counter() - start)
        backend.unload(loaded)
    same = results[batch][0] == results[1][0]
    return n / results[batch][1], n / results[1][1], same


def status_latency(cfg: dict, cache: Path, tmp: Path, samples: int = 60) -> tuple[list[float], list[float], float]:
    import httpx
    import ray
    import torch
    from ray import serve

    from contracts.runs import get_or_create_registry
    from contracts.task_spec import TaskSpec
    from evaluators.base_models import resolve_base_model
    from contracts.runs import RunRegistration
    from evaluators.service import app_name, deploy
    from orchestrator.services import free_port

    port = free_port("127.0.0.1")
    ray.init(address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, namespace="a2rl",
             log_to_driver=False, logging_level="ERROR")
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    get_or_create_registry()
    deploy(TaskSpec.from_config(cfg), str(cache))
    handle = serve.get_app_handle(app_name(cfg["name"]))
    url = f"http://127.0.0.1:{port}/{cfg['name']}"
    ws = tmp / "ws"
    (ws / "output").mkdir(parents=True)
    (ws / "code").mkdir()
    token = secrets.token_urlsafe(16)
    now = time.time()
    handle.register_run.remote(token, RunRegistration(
        cell_id="bench", workspace=str(ws), records_dir=str(tmp), code_repo=str(tmp / "code.git"), started_at=now,
        deadline=now + 3600, max_submissions=100)).result()
    headers = {"Authorization": f"Bearer {token}"}
    client = httpx.Client(headers=headers, timeout=60)

    def sample(k: int) -> list[float]:
        out = []
        for _ in range(k):
            t0 = time.perf_counter()
            client.get(f"{url}/status").raise_for_status()
            out.append(time.perf_counter() - t0)
            time.sleep(0.02)
        return out

    idle = sample(samples)
    # a fresh model (perturbed weights) so the grader really evaluates instead of answering from its cache
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = resolve_base_model(cfg["base_model"], cache / "models")
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    model.save_pretrained(ws / "output" / "fresh")
    AutoTokenizer.from_pretrained(base).save_pretrained(ws / "output" / "fresh")
    busy, done = [], threading.Event()
    eval_s = {}

    def submit():
        t0 = time.perf_counter()
        httpx.post(f"{url}/submit", json={"model_path": "output/fresh"}, headers=headers, timeout=600)
        eval_s["s"] = time.perf_counter() - t0
        done.set()

    thread = threading.Thread(target=submit)
    thread.start()
    time.sleep(0.5)
    while not done.is_set():
        if client.get(f"{url}/status").json().get("evaluating"):
            busy += sample(1)
        else:
            time.sleep(0.02)
    thread.join()
    ray.shutdown()
    return idle, busy, eval_s["s"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    cache = Path(os.environ.get("A2RL_CACHE_DIR", Path.home() / ".cache" / "a2rl"))
    cfg = task_cfg(args.model)
    batched, single, same = throughput(cfg, cache, args.items, args.batch)
    print(f"\ngrading throughput ({args.model}, {args.items} items, 1 thread, greedy):")
    print(f"  batch_size={args.batch:<4} {batched:8.1f} items/s")
    print(f"  batch_size=1    {single:8.1f} items/s")
    print(f"  batched / one-at-a-time = {batched / single:.1f}x; identical outputs: {same}")
    with tempfile.TemporaryDirectory() as tmp:
        idle, busy, eval_s = status_latency(cfg, cache, Path(tmp))
    print(f"\n/status latency over HTTP (loopback), evaluation of {eval_s:.1f} s in flight:")
    print(f"  idle:   p50 {pct(idle, .5):6.1f} ms  p95 {pct(idle, .95):6.1f} ms  (n={len(idle)})")
    if busy:
        print(f"  busy:   p50 {pct(busy, .5):6.1f} ms  p95 {pct(busy, .95):6.1f} ms  (n={len(busy)})")
        print(f"  busy / idle p50 = {statistics.median(busy) / statistics.median(idle):.1f}x")
    else:
        print("  the evaluation finished before /status could be sampled; use --model smollm2-135m")


if __name__ == "__main__":
    main()
