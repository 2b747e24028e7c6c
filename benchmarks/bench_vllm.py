"""The vLLM backend against the transformers backend, on the same model and eval items, side by side in one run.

    .venv/bin/python benchmarks/bench_vllm.py [--model tiny|smollm2-135m] [--items 200] [--max-new-tokens N]

Needs the vLLM environment (scripts/setup --vllm). Measures, as the grader's Evaluator does a submission
(load, weight digest, generate over the items, unload):
1. per-submission grading time: transformers (loads from disk every time), vLLM with a cold engine (a fresh engine
   process), vLLM with the resident engine (weights reloaded in place: a submission of the base's architecture);
2. engine start against weight reload;
3. throughput of generation alone, items/s, and whether both backends gave identical replies.
The submissions are the base model and a copy with its weights moved by noise (so a reload really changes them).
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
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def moved_copy(base: Path, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def submission(backend, path: Path, chats: list, max_new_tokens: int) -> dict:
    """One submission as the Evaluator grades it; the seconds of each part and the replies."""
    t0 = time.perf_counter()
    loaded = backend.load(path)
    t1 = time.perf_counter()
    backend.weights_digest(loaded)
    t2 = time.perf_counter()
    from contracts.decoding import Decoding

    replies = backend.generate(loaded, chats, Decoding(max_new_tokens=max_new_tokens))
    t3 = time.perf_counter()
    backend.unload(loaded)
    return {"load": t1 - t0, "digest": t2 - t1, "generate": t3 - t2, "total": time.perf_counter() - t0,
            "replies": replies}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the task's grader setting")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kv-cache-gb", type=float, default=1.0, help="the vLLM engine's KV cache (CPU)")
    args = parser.parse_args()

    from contracts.task import load_task
    from evaluators.backends.transformers_backend import TransformersBackend
    from evaluators.backends.vllm_backend import VLLMBackend, vllm_python
    from evaluators.base_models import resolve_base_model
    from orchestrator.sweep import load_named

    if not vllm_python().exists():
        sys.exit(f"no vLLM environment at {vllm_python()}: make it with scripts/setup --vllm")
    cache = Path(os.environ.get("A2RL_CACHE_DIR", Path.home() / ".cache" / "a2rl"))
    cfg = load_named("task", "arithmetic", "bench")
    cfg["base_model"] = args.model
    task = load_task(cfg)
    rows = task.eval_rows()[:args.items]
    chats = [task.messages(row) for row in rows]
    tokens = args.max_new_tokens or task.grader.max_new_tokens
    base = resolve_base_model(args.model, cache / "models")

    with tempfile.TemporaryDirectory() as tmp:
        moved = moved_copy(base, Path(tmp) / "moved")
        hf = TransformersBackend(batch_size=32, device="cpu", torch_threads=args.threads)
        hf_runs = [submission(hf, path, chats, tokens) for path in (base, moved)]
        vllm = VLLMBackend(device="auto", torch_threads=args.threads, kv_cache_gb=args.kv_cache_gb)
        try:
            cold = submission(vllm, base, chats, tokens)
            start_s = vllm.stats["start_s"]
            warm = [submission(vllm, path, chats, tokens) for path in (moved, base)]
            reload_s = vllm.stats["reload_s"] / vllm.stats["reloads"]
            device = vllm.device
        finally:
            vllm.close()
    identical = hf_runs[0]["replies"] == cold["replies"] and hf_runs[1]["replies"] == warm[0]["replies"]
    hf_total = hf_runs[1]["total"]  # the first pays for transformers' imports
    warm_total = sum(r["total"] for r in warm) / 2
    hf_rate = len(chats) / (sum(r["generate"] for r in hf_runs) / 2)
    vllm_rate = len(chats) / (sum(r["generate"] for r in [cold, *warm]) / 3)

    print(f"\nvLLM vs transformers ({args.model}, {len(chats)} arithmetic eval items, {tokens} new tokens, greedy, "
          f"{args.threads} thread(s), vLLM on {device}):")
    print("\nper-submission grading time (load + weight digest + generate + unload):")
    print(f"  transformers                    {hf_total:8.2f} s  (load {hf_runs[1]['load']:.2f} s)")
    print(f"  vLLM, cold engine               {cold['total']:8.2f} s  (engine start {start_s:.2f} s)")
    warm_load = sum(r["load"] for r in warm) / 2
    print(f"  vLLM, resident engine (reload)  {warm_total:8.2f} s  (load {warm_load:.2f} s, of which the engine's "
          f"weight reload {reload_s:.3f} s; digest {warm[0]['digest']:.2f} s)")
    print(f"  cold / resident = {cold['total'] / warm_total:.1f}x; engine start / weight reload = "
          f"{start_s / reload_s:.0f}x; transformers / vLLM resident = {hf_total / warm_total:.2f}x")
    print("\ngeneration throughput (generate only, same items):")
    print(f"  transformers (batch 32)  {hf_rate:8.1f} items/s")
    print(f"  vLLM                     {vllm_rate:8.1f} items/s")
    print(f"  vLLM / transformers = {vllm_rate / hf_rate:.2f}x; identical replies: {identical}")


if __name__ == "__main__":
    main()
