"""What grading a paper task decodes against what it keeps, vLLM and transformers side by side in one run.

    .venv/bin/python benchmarks/bench_paper_decoding.py [--model smollm2-135m] [--items 4] [--max-new-tokens 512]

Needs the vLLM environment (scripts/setup --vllm). Each paper task is graded as its grader does (evaluate(): the
task's own prompts, episodes and decoding) on a few eval items, once per backend; vLLM as it was before it stopped
at stop strings in the engine is replayed on the same prompts (decoded to max_new_tokens, cut after). Per task and
backend it prints:
- kept: the tokens a reply needs (up to and including the token that completes its first stop string or its eos),
  counted on the uncut replies;
- generated: what the backend decoded (transformers: a batch's finished rows go on until the batch ends);
- generated / kept, items/s and seconds per submission (model load included).
The goal is generated / kept <= 1.05 for vLLM on every task. AlpacaEval needs its data from the hub (not here); its
decoding, like GSM8K's and HumanEval's, has no stop string (a reply ends at eos). HumanEval and GSM8K are capped at
--max-new-tokens (a small model rambles to 8,192 on a CPU for hours).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def needed(ids: list[int], tokenizer, decoding, eos_ids: list[int]) -> int:
    """Tokens of an uncut reply up to the one that ends it: its first eos, or the one completing a stop string."""
    for k, token in enumerate(ids, 1):
        if token in eos_ids:
            return k
        if decoding.stop and any(s in tokenizer.decode(ids[:k], skip_special_tokens=True) for s in decoding.stop):
            return k
    return len(ids)


def recorded(backend):
    """The backend with every generate call's prompts and decoding kept (the same calls, the same replies)."""
    calls = []
    generate = backend.generate

    def recording(loaded, prompts, decoding):
        calls.append((prompts, decoding))
        return generate(loaded, prompts, decoding)

    backend.generate = recording
    return calls


def replay_uncut(backend, model_dir: Path, calls) -> tuple[int, int]:
    """(generated, kept) of the recorded calls decoded as the vLLM backend did before: to max_new_tokens, no stop."""
    from evaluators.backends.transformers_backend import prompt_ids, repetition_penalty

    loaded = backend.load(model_dir)
    generated = kept = 0
    try:
        for prompts, decoding in calls:
            ids = [prompt_ids(loaded.tokenizer, p, decoding) for p in prompts]
            answer = backend.engine.ask(op="generate", prompts=ids, max_tokens=int(decoding.max_new_tokens),
                                        stop_token_ids=loaded.eos_ids, stop=[],
                                        repetition_penalty=repetition_penalty(decoding, loaded.generation))
            generated += sum(len(out) for out in answer["outputs"])
            kept += sum(needed(out, loaded.tokenizer, decoding, loaded.eos_ids) for out in answer["outputs"])
    finally:
        backend.unload(loaded)
    return generated, kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--items", type=int, default=4, help="eval items (episodes) per task")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="cap of GSM8K's and HumanEval's replies")
    parser.add_argument("--kv-cache-gb", type=float, default=0.5, help="vLLM's KV cache on a CPU")
    parser.add_argument("--tasks", default="gsm8k,humaneval,alfworld,webshop,deepsearchqa")
    args = parser.parse_args()

    import torch
    import yaml

    import orchestrator  # noqa: F401 (the registry learns where task classes are)
    from benchmarks.bench_paper_tasks import gsm8k_stand_in
    from contracts.task import load_task
    from evaluators.backends import make_backend
    from evaluators.base_models import resolve_base_model
    from evaluators.evaluate import evaluate
    from tests.test_rollout_service import SMALL_TASK

    torch.set_num_threads(1)
    gpu = torch.cuda.is_available()
    cache = Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache" / "a2rl")
    model_dir = resolve_base_model(args.model, cache / "models")
    conf = {name: yaml.safe_load((ROOT / "conf" / "task" / f"{name}.yaml").read_text())
            for name in ("gsm8k", "humaneval", "webshop", "deepsearchqa")}
    print(f"model {args.model}, {'GPU' if gpu else 'CPU'}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, {args.items} items a task")
    print(f"{'task':13} {'backend':22} {'replies':>7} {'kept':>6} {'generated':>9} {'gen/kept':>8} "
          f"{'items/s':>8} {'s/submission':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        tasks = {
            "gsm8k": {**conf["gsm8k"], "data_path": str(gsm8k_stand_in(Path(tmp) / "gsm8k", 100, args.items))},
            "humaneval": conf["humaneval"],
            "alfworld": {**SMALL_TASK, "name": "alfworld", "max_steps": 50, "eval_salt": "bench"},  # the paper's
            "webshop": {**conf["webshop"], "data_path": None, "n_products": 300, "n_train": 8, "n_eval": args.items,
                        "eval_salt": "bench"},
            "deepsearchqa": {**conf["deepsearchqa"], "data_path": None, "n_eval": args.items, "eval_salt": "bench"},
        }
        for name in args.tasks.split(","):
            config = tasks[name]
            task = load_task({**config, "protocol": "paper", "base_model": args.model, "final_size": 0},
                             Path(tmp) / "cache")
            rows = task.eval_rows()[:args.items]
            cap = args.max_new_tokens if name in ("gsm8k", "humaneval") else None
            replies, lines, kept = {}, [], 0
            for backend_name in ("transformers", "vllm"):
                settings = dataclasses.replace(task.backend_settings(gpu=gpu), backend=backend_name)
                if backend_name == "vllm" and not gpu:
                    settings = dataclasses.replace(settings, kv_cache_gb=args.kv_cache_gb,
                                                   max_model_len=settings.max_model_len or 4096)
                backend = make_backend(settings)
                calls = recorded(backend)
                started = time.perf_counter()
                result = evaluate(task, backend, model_dir, rows, max_new_tokens=cap)
                seconds = time.perf_counter() - started
                n_replies = sum(len(prompts) for prompts, _ in calls)
                replies[backend_name] = [i.get("completion") for i in result["items"]]
                lines.append((backend_name, n_replies, backend.generated_tokens, seconds))
                if backend_name == "vllm":
                    old, kept = replay_uncut(backend, model_dir, calls)
                    lines.append(("vllm, decoded then cut", n_replies, old, None))
                    backend.close()
            for label, n_replies, generated, s in lines:
                timing = f"{len(rows) / s:8.2f} {s:12.1f}" if s else ""
                print(f"{name:13} {label:22} {n_replies:7d} {kept:6d} {generated:9d} {generated / max(kept, 1):8.3f} "
                      f"{timing}", flush=True)
            same = replies["transformers"] == replies["vllm"]
            print(f"{name:13} {'same replies on both':22} {same}")


if __name__ == "__main__":
    main()
