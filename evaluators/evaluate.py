"""Score one model directory on a task: load, fingerprint, generate, score, unload."""
from __future__ import annotations

import dataclasses
import time

from contracts.decoding import Prompt
from contracts.task import InteractiveTask, Task
from evaluators import lockstep
from evaluators.backends.base import EvaluatorBackend


def evaluate(task: Task, backend: EvaluatorBackend, model_dir, rows: list[dict] | None = None,
             max_new_tokens: int | None = None, judge=None) -> dict:
    """{score, n, items: [{id, completion, score}], digest, load_s, generate_s}. Raises ModelLoadError.

    rows default to the task's hidden eval split; max_new_tokens to the task's decoding (its protocol's)."""
    t0 = time.monotonic()
    loaded = backend.load(model_dir)
    try:
        t1 = time.monotonic()
        digest = backend.weights_digest(loaded)
        result = evaluate_loaded(task, backend, loaded, rows, max_new_tokens, judge)
        t2 = time.monotonic()
    finally:
        backend.unload(loaded)
    return {**result, "digest": digest, "load_s": round(t1 - t0, 3), "generate_s": round(t2 - t1, 3)}


def evaluate_loaded(task: Task, backend: EvaluatorBackend, loaded, rows: list[dict] | None = None,
                    max_new_tokens: int | None = None, judge=None) -> dict:
    """Score an already loaded model: {score, n, items, ...the task's metrics}, the score a percentage (0-100) for
    every task, as in the paper, so improvements pool across tasks. The grading service loads once to fingerprint too.

    Single-turn: one greedy reply per row (batched by the backend), scored by the task (0-1 per item; a judged
    task asks `judge`, or its own offline one), summarised by the task (the mean, or e.g. a length-controlled win
    rate).
    Interactive: one greedy episode per row's instance, all in lockstep (evaluators.lockstep)."""
    rows = task.eval_rows() if rows is None else rows
    decoding = task.decoding()  # the task's protocol decides it; max_new_tokens only for a shorter test
    if max_new_tokens:
        decoding = dataclasses.replace(decoding, max_new_tokens=int(max_new_tokens))

    def generate(prompts: list[Prompt], how=None) -> list[str]:
        return backend.generate(loaded, prompts, how or decoding)

    if isinstance(task, InteractiveTask):
        result = task.play(rows, generate, judge)  # a protocol with an episode loop of its own
        if result is None:
            result = lockstep.evaluate(task.environment(), rows, generate, workers=task.eval_workers,
                                       percent=task.percent)
            result = task.judge_episodes(result, rows, judge) if judge is not None else result
    else:
        items = task.score_all(rows, generate([task.messages(row) for row in rows]), judge)
        result = {**task.summarize(items, rows), "n": len(items), "items": items}
    notes = task.approximations()  # where the protocol is only approximately the original's (a stand-in, ...)
    if notes:
        flags = result.get("flags", [])
        result = {**result, "flags": [*flags, *(["approximate"] if "approximate" not in flags else [])],
                  "approximations": notes}
    return result
