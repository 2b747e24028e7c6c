"""Grading time per submission of the judged paper tasks, alpacaeval and deepsearchqa, under each protocol (a2rl's
own and the paper's), with a base model on this machine and a scripted judge on loopback (no judge latency).

    .venv/bin/python benchmarks/bench_judged_protocols.py [--model tiny] [--alpaca-items 32] [--dsqa-items 20]

alpacaeval: a stand-in eval file of `--alpaca-items` instructions in the hub's layout (the real 805 cannot be
downloaded here; generation time depends on the item count and the decoding, not on the wording) and the fixture's
df_gamed.csv; the judge answers a2rl's prompt with "Output (a)" and alpaca_eval's with a ranking tool call.
deepsearchqa: the generated world of conf/task/deepsearchqa.yaml, `--dsqa-items` eval questions, the judge answers
"correct". Each submission runs as the grader runs it (evaluators.evaluate: load, generate, judge, metric).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
KEY = "sk-bench"


def judge_script(req):
    from tests.support.fake_upstream import Reply, ToolCall

    if req.tools:  # alpaca_eval's annotator: a forced tool call
        return Reply(tool_calls=[ToolCall("make_partial_leaderboard", {"ordered_models": [
            {"model": "m", "rank": 1}, {"model": "M", "rank": 2}]})])
    return Reply(text="correct" if "strict answer evaluator" in req.system else "Output (a)")


def alpaca_data(folder: Path, n: int) -> Path:
    import pandas as pd

    (folder / "alpaca" / "data").mkdir(parents=True)
    pd.DataFrame({"instruction": [f"Name a colour number {i}." for i in range(30)], "input": [""] * 30,
                  "output": [f"Colour {i} is blue." for i in range(30)], "text": ["..."] * 30}
                 ).to_parquet(folder / "alpaca" / "data" / "train-00000-of-00001.parquet")
    rows = [{"instruction": f"Write a short note {i} about a city you like.", "output": f"Reference note {i}. " * 8,
             "generator": "gpt4_1106_preview", "dataset": "helpful_base"} for i in range(n)]
    (folder / "alpaca_eval").mkdir()
    for name in ("alpaca_eval.json", "alpaca_eval_gpt4_baseline.json"):
        (folder / "alpaca_eval" / name).write_text(json.dumps(rows))
    gamed = (ROOT / "tests/fixtures/parity/alpacaeval_df_gamed.csv").read_text()
    (folder / "alpaca_eval" / "df_gamed.csv").write_text(gamed)  # 50 instructions: n <= 50
    return folder


def one_submission(task, model_dir, judge) -> dict:
    import torch

    from evaluators.backends import make_backend
    from evaluators.evaluate import evaluate

    backend = make_backend(task.backend_settings(gpu=torch.cuda.is_available()))
    t0 = time.perf_counter()
    result = evaluate(task, backend, model_dir, judge=judge)
    return {"items": result["n"], "total_s": round(time.perf_counter() - t0, 1),
            "per_item_s": round((time.perf_counter() - t0) / result["n"], 3), "score": round(result["score"], 2),
            "load_s": round(result.get("load_s", 0), 1), "generate_s": round(result.get("generate_s", 0), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--alpaca-items", type=int, default=32)
    parser.add_argument("--dsqa-items", type=int, default=20)
    args = parser.parse_args()

    from contracts.task import load_task
    from evaluators.base_models import resolve_base_model
    from evaluators.judging.pairwise import LLMJudge
    from orchestrator.sweep import load_named
    from tests.support.fake_upstream import FakeUpstream

    work = Path(tempfile.mkdtemp(prefix="a2rl-bench-judged-"))
    cache = work / "cache"
    fake = FakeUpstream(script=judge_script, expect_key=KEY).start()
    driver = {"name": "scripted", "provider": "openai-compatible", "model": "gpt-5.2", "base_url": fake.url + "/v1"}
    out = {}
    try:
        data = alpaca_data(work, args.alpaca_items)
        for protocol in ("a2rl", "paper"):
            config = {**load_named("task", "alpacaeval", "bench"), "protocol": protocol, "judge": driver,
                      "eval_data": str(data / "alpaca_eval"), "train_data": str(data / "alpaca"), "n_train": 20,
                      "base_model": args.model}
            task = load_task(config, cache)
            model = resolve_base_model(task.spec.base_model, cache / "models")
            judge = LLMJudge(task.judge_driver(), fake.url, KEY)
            out[f"alpacaeval/{protocol}"] = {**one_submission(task, model, judge),
                                             "max_new_tokens": task.decoding().max_new_tokens}
            judge.close()
            print(json.dumps({f"alpacaeval/{protocol}": out[f"alpacaeval/{protocol}"]}), flush=True)
        for protocol in ("a2rl", "paper"):
            config = {**load_named("task", "deepsearchqa", "bench"), "protocol": protocol, "judge": driver,
                      "data_path": None, "n_eval": args.dsqa_items, "final_size": 0}
            task = load_task(config, cache)
            model = resolve_base_model(task.spec.base_model, cache / "models")
            judge = LLMJudge(driver, fake.url, KEY)
            out[f"deepsearchqa/{protocol}"] = {**one_submission(task, model, judge),
                                               "max_new_tokens": task.decoding().max_new_tokens,
                                               "judge_calls": fake.calls}
            judge.close()
            print(json.dumps({f"deepsearchqa/{protocol}": out[f"deepsearchqa/{protocol}"]}), flush=True)
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
