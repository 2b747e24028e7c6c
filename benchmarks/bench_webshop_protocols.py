"""WebShop grading time per submission under each protocol (a2rl's and the paper's), on this machine.

    .venv/bin/python benchmarks/bench_webshop_protocols.py [--model tiny-webshop] [--n-eval 100] [--products 2000]

One submission of the model, as the grader does it (evaluators.evaluate_loaded: greedy episodes on every hidden
instruction in lockstep), on the generated store of conf/task/webshop.yaml, once with `protocol: a2rl` (its prompt,
conf's max_new_tokens, the model's penalty, mean reward) and once with `protocol: paper` (RD-Agent's prompt, 100 tokens
to a newline, penalty 1.0, success rate). Prints seconds per submission, steps, prompt length and scores.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny-webshop")
    parser.add_argument("--n-eval", type=int, default=100)
    parser.add_argument("--products", type=int, default=2000)
    args = parser.parse_args()

    import torch
    import yaml

    import orchestrator  # noqa: F401 (the registry learns where task classes are)
    from contracts.task import load_task
    from evaluators.backends import make_backend
    from evaluators.base_models import resolve_base_model
    from evaluators.evaluate import evaluate_loaded

    torch.set_num_threads(1)
    cache = Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache" / "a2rl")
    model_dir = resolve_base_model(args.model, cache / "models")
    conf = yaml.safe_load((ROOT / "conf" / "task" / "webshop.yaml").read_text())
    print(f"model {args.model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'protocol':9} {'episodes':>8} {'steps':>6} {'prompt chars':>12} {'max_new':>7} {'grade s':>8} "
          f"{'s/step':>7} {'score':>6} {'success':>7} {'reward':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for protocol in ("a2rl", "paper"):
            task = load_task({**conf, "name": f"webshop_bench_{protocol}", "protocol": protocol, "data_path": None,
                              "n_products": args.products, "n_eval": args.n_eval, "final_size": 0,
                              "eval_salt": "bench", "base_model": args.model}, Path(tmp) / "cache")
            backend = make_backend(task.backend_settings(gpu=torch.cuda.is_available()))
            loaded = backend.load(model_dir)
            prompts: list[int] = []
            generate = backend.generate

            def counted(loaded_, batch, decoding, generate=generate, prompts=prompts):
                prompts.extend(len(p if isinstance(p, str) else "".join(m["content"] for m in p)) for p in batch)
                return generate(loaded_, batch, decoding)

            backend.generate = counted
            start = time.perf_counter()
            result = evaluate_loaded(task, backend, loaded)
            took = time.perf_counter() - start
            backend.unload(loaded)
            steps = sum(i["steps"] for i in result["items"])
            m = result["metrics"]
            print(f"{protocol:9} {result['n']:8d} {steps:6d} {sum(prompts) / len(prompts):12.0f} "
                  f"{task.decoding().max_new_tokens:7d} {took:8.1f} {took / max(steps, 1):7.3f} "
                  f"{result['score']:6.1f} {m['success_rate']:7.1f} {m['mean_reward']:6.1f}")


if __name__ == "__main__":
    main()
