"""Per-cell overhead of the whole a2rl path versus bare Tune trials, and workspace set-up versus a model copy.

    .venv/bin/python benchmarks/bench_scheduling.py [--cells 8] [--model-gb 1.0]

1. The same N trivial cells (the noop agent) through a2rl (workspace, run registration, sandbox, ledger) and as
   bare Tune trials that do nothing, on one Ray cluster, side by side in one run. Prints seconds per cell and the
   ratio. The grader is deployed before timing starts (a once-per-sweep cost, reported separately).
2. Materialising a workspace around a model directory of the given size (linked) versus copying it.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the orchestrator runs it: agents cannot connect
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def bare_trials(n: int, storage: Path) -> float:
    from ray import tune

    def nothing(config):
        tune.report({"done": 1})

    trainable = tune.with_resources(nothing, {"cpu": 1})
    start = time.perf_counter()
    tune.Tuner(trainable, param_space={"i": tune.grid_search(list(range(n)))},
               run_config=tune.RunConfig(storage_path=str(storage), name="bare", verbose=0)).fit()
    return time.perf_counter() - start


def a2rl_cells(n: int, out: Path, cache: Path, port: int) -> tuple[float, float]:
    from hydra import compose, initialize_config_dir

    from orchestrator.runner import run_sweep

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "sweep=smoke", "sweep.agents=[noop]", f"sweep.seeds={n}", f"output_dir={out}", f"cache_dir={cache}",
            "logger=none", f"grading.port={port}", "grading.keep_running=true", "grading.scope="])  # the warm grader
    from contracts.task_spec import TaskSpec
    from evaluators.service import deploy

    t0 = time.perf_counter()
    deploy(TaskSpec.from_config(_task(cfg)), str(cache))  # warm: the grader is a once-per-sweep cost
    deploy_s = time.perf_counter() - t0
    start = time.perf_counter()
    run_sweep(cfg, out=io.StringIO())
    total = time.perf_counter() - start
    from orchestrator.ledger import Ledger

    outcomes = [e["payload"] for e in Ledger(out / "ledger.sqlite").events(kind="outcome")]
    phases = {k: sum(o[k] for o in outcomes) / len(outcomes) for k in ("setup_s", "elapsed_s", "teardown_s")}
    return total, deploy_s, phases


def _task(cfg) -> dict:
    from orchestrator.sweep import load_named

    return load_named("task", cfg.sweep.tasks[0], "sweep.tasks")


def workspace_setup(model_gb: float, root: Path) -> tuple[float, float]:
    from contracts.specs import AgentSpec, Budget, CellSpec, DriverSpec
    from contracts.task_spec import TaskSpec
    from orchestrator.workspace import materialise

    model = root / "model"
    model.mkdir(parents=True)
    chunk = os.urandom(64 * 1024 * 1024)
    with open(model / "model.safetensors", "wb") as f:
        for _ in range(max(1, int(model_gb * 1024 / 64))):
            f.write(chunk)
    (model / "config.json").write_text("{}")
    os.sync()
    cell = CellSpec(agent=AgentSpec(name="noop", kind="builtin", script="noop"), driver=DriverSpec(name="none"),
                    task=TaskSpec.from_config({"name": "bench", "cls": "x:y", "base_model": str(model)}), seed=0,
                    budget=Budget(wall_time_s=60, max_submissions=1))
    material = root / "material"
    material.mkdir()
    (material / "instructions.md").write_text("bench")
    (material / "train.jsonl").write_text('{"prompt": "1+1", "completion": "2"}\n' * 2000)
    t0 = time.perf_counter()
    materialise(root / "ws", cell, material=material, base_model_dir=model,
                run_info={"grading_url": "http://127.0.0.1:1/x", "run_token": "t", "started_at": 0, "deadline": 1})
    linked = time.perf_counter() - t0
    t0 = time.perf_counter()
    shutil.copytree(model, root / "copy")
    os.sync()
    copied = time.perf_counter() - t0
    return linked, copied


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--model-gb", type=float, default=1.0)
    args = parser.parse_args()

    import ray
    from ray import serve

    from contracts.runs import get_or_create_registry
    from orchestrator.services import free_port

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        port = free_port("127.0.0.1")
        ray.init(address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, namespace="a2rl",
                 log_to_driver=False, logging_level="ERROR")
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        get_or_create_registry()
        cache = Path(os.environ.get("A2RL_CACHE_DIR", Path.home() / ".cache" / "a2rl"))
        bare = bare_trials(args.cells, tmp / "tune")
        full, deploy_s, phases = a2rl_cells(args.cells, tmp / "a2rl", cache, port)
        ray.shutdown()
        linked, copied = workspace_setup(args.model_gb, tmp / "ws")

    n = args.cells
    print(f"\n{'':<44}{'total s':>10}{'s / cell':>10}")
    print(f"{'bare Tune trials (do nothing)':<44}{bare:>10.2f}{bare / n:>10.2f}")
    print(f"{'a2rl cells (noop agent, sandbox, ledger)':<44}{full:>10.2f}{full / n:>10.2f}")
    print(f"a2rl overhead per cell over bare Tune: {(full - bare) / n:.2f} s; ratio a2rl/bare = {full / bare:.2f}x "
          f"(2 CPUs, 1 CPU per cell; grader deploy once per sweep: {deploy_s:.1f} s, not included)")
    print(f"inside a cell (mean): setup {phases['setup_s']:.2f} s (task files, workspace, registration, sandbox "
          f"start), whole cell {phases['elapsed_s']:.2f} s, teardown {phases['teardown_s']:.2f} s")
    print(f"\nworkspace for a {args.model_gb:g} GB model: linked {linked * 1000:.1f} ms, plain copy "
          f"{copied * 1000:.0f} ms; copy/link = {copied / linked:.0f}x")


if __name__ == "__main__":
    main()
