"""Grading time per submission for the paper's level-1 tasks, gsm8k and humaneval, with a base model on this machine.

    .venv/bin/python benchmarks/bench_paper_tasks.py [--model tiny] [--gsm8k-items 1319] [--humaneval-items 82]
        [--protocols a2rl,paper] [--workers 2] [--backend transformers]

1. One submission of the model, as the grader does it (evaluators.evaluate: load, greedy generation of every
   hidden item, scoring): seconds per stage and per submission, for each task at its conf/task settings, under each
   protocol (a2rl's own, the paper's: 4-shot GSM8K chats, HumanEval's 8192 new tokens).
   GSM8K's data cannot be downloaded here: a stand-in of the real size is written in the hub's layout from
   reasoning-gym's gsm_symbolic (GSM8K-derived problems, `#### n` answers), so the loader and grader run as on
   the real files; generation time depends on the item count and max_new_tokens, not on the wording.
2. HumanEval's scoring alone on the 82 hidden problems with their canonical solutions: sandboxes one at a time
   vs `--workers` at a time (the grader's num_cpus), and the sandbox's cost against the same programs run by a
   bare `python` subprocess (no isolation). Problems/s and the ratios.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def gsm8k_stand_in(folder: Path, n_train: int, n_test: int) -> Path:
    import pandas as pd
    import reasoning_gym

    (folder / "main").mkdir(parents=True)
    items = [{"question": x["question"], "answer": f"{x['metadata'].get('answer_cot', '')}\n#### {x['answer']}"}
             for x in reasoning_gym.create_dataset("gsm_symbolic", size=n_train + n_test, seed=7)]
    pd.DataFrame(items[:n_train]).to_parquet(folder / "main" / "train-00000-of-00001.parquet")
    pd.DataFrame(items[n_train:]).to_parquet(folder / "main" / "test-00000-of-00001.parquet")
    return folder


def submission(task, model_dir: Path) -> dict:
    """evaluate() split into its stages (the same calls evaluate_loaded makes)."""
    import torch

    from evaluators.backends import make_backend

    backend = make_backend(task.backend_settings(gpu=torch.cuda.is_available()))
    rows = task.eval_rows()
    t0 = time.perf_counter()
    loaded = backend.load(model_dir)
    t1 = time.perf_counter()
    replies = backend.generate(loaded, [task.messages(r) for r in rows], task.decoding())
    t2 = time.perf_counter()
    scores = [item["score"] for item in task.score_all(rows, replies)]
    t3 = time.perf_counter()
    backend.unload(loaded)
    return {"items": len(rows), "load_s": t1 - t0, "generate_s": t2 - t1, "score_s": t3 - t2, "total_s": t3 - t0,
            "score": 100 * sum(scores) / len(scores), "reply_chars": sum(map(len, replies)) / len(replies)}


def bare_run(source: str) -> bool:
    """The same program without any isolation: the cost the sandbox adds is measured against this. `tests` holds
    the problem's prompt (its helpers, and the function's bare signature), so it goes first and the model's source
    then defines the function."""
    return subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=30).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--gsm8k-items", type=int, default=1319)
    parser.add_argument("--humaneval-items", type=int, default=82, help="the first n hidden problems")
    parser.add_argument("--protocols", default="a2rl,paper")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default=None,
                        help="the grader's backend (default: the task's; on a GPU a paper task's auto is vLLM)")
    args = parser.parse_args()

    import torch
    import yaml

    import orchestrator  # noqa: F401 (the registry learns where task classes are)
    from contracts.task import load_task
    from evaluators.base_models import resolve_base_model
    from evaluators.code_execution import run_programs

    torch.set_num_threads(1)
    cache = Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache" / "a2rl")
    model_dir = resolve_base_model(args.model, cache / "models")
    conf = {name: yaml.safe_load((ROOT / "conf" / "task" / f"{name}.yaml").read_text())
            for name in ("gsm8k", "humaneval")}
    if args.backend:
        for task_conf in conf.values():
            task_conf["grader"] = {**task_conf.get("grader", {}), "backend": args.backend}
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"model {args.model}, {os.cpu_count()} CPUs, {gpu}, load average {os.getloadavg()[0]:.1f}")

    with tempfile.TemporaryDirectory() as tmp:
        data = str(gsm8k_stand_in(Path(tmp) / "gsm8k", 7473, args.gsm8k_items))
        backend = args.backend or "as conf/task says"
        print(f"\n1. one submission (load, generate, score), conf/task settings, one torch thread, backend {backend}")
        print(f"{'task':10} {'protocol':8} {'items':>5} {'max_new':>7} {'load s':>7} {'generate s':>10} "
              f"{'score s':>8} {'total s':>8} {'s/item':>7} {'score':>6}")
        for protocol in args.protocols.split(","):
            gsm8k = load_task({**conf["gsm8k"], "base_model": args.model, "data_path": data, "protocol": protocol})
            humaneval = load_task({**conf["humaneval"], "base_model": args.model, "protocol": protocol})
            humaneval.eval_rows = lambda task=humaneval, rows=humaneval.eval_rows(): rows[:args.humaneval_items]
            for task in (gsm8k, humaneval):
                r = submission(task, model_dir)
                print(f"{task.name:10} {protocol:8} {r['items']:5d} {task.decoding().max_new_tokens:7d} "
                      f"{r['load_s']:7.2f} {r['generate_s']:10.1f} {r['score_s']:8.2f} {r['total_s']:8.1f} "
                      f"{r['total_s'] / r['items']:7.3f} {r['score']:6.1f}", flush=True)

    humaneval = load_task({**conf["humaneval"], "base_model": args.model, "protocol": "a2rl"})
    rows = humaneval.eval_rows()
    programs = humaneval.programs([r["answer"] for r in rows], rows)
    print(f"\n2. HumanEval scoring: the {len(rows)} hidden problems with their canonical solutions")
    timings = {}
    for label, run in (("sandbox, 1 at a time", lambda: run_programs(programs, humaneval.limits, workers=1)),
                       (f"sandbox, {args.workers} at a time",
                        lambda: run_programs(programs, humaneval.limits, workers=args.workers)),
                       ("bare python, 1 at a time",
                        lambda: [bare_run(f"{p.tests}\n{p.source}\ncheck({p.entry_point})\n") for p in programs])):
        start = time.perf_counter()
        results = run()
        timings[label] = time.perf_counter() - start
        passed = sum(bool(getattr(x, "passed", x)) for x in results)
        print(f"  {label:26} {timings[label]:6.1f} s  {len(rows) / timings[label]:5.1f} problems/s  "
              f"passed {passed}/{len(rows)}")
    one, many, bare = timings.values()
    print(f"  {args.workers} at a time vs 1: {one / many:.2f}x faster; the sandbox vs bare python: {one / bare:.2f}x "
          f"the time ({(one - bare) / len(rows) * 1000:+.0f} ms a problem)")


if __name__ == "__main__":
    main()
