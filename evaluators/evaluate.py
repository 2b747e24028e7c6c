"""Score one model directory on a task: load, fingerprint, generate, score, unload."""
from __future__ import annotations

import time

from contracts.task import Task
from evaluators.backends.base import EvaluatorBackend


def evaluate(task: Task, backend: EvaluatorBackend, model_dir, rows: list[dict] | None = None,
             max_new_tokens: int | None = None) -> dict:
    """{score, n, items: [{id, completion, score}], digest, load_s, generate_s}. Raises ModelLoadError.

    rows default to the task's hidden eval split; max_new_tokens to the task's grader setting."""
    t0 = time.monotonic()
    loaded = backend.load(model_dir)
    try:
        t1 = time.monotonic()
        digest = backend.weights_digest(loaded)
        result = evaluate_loaded(task, backend, loaded, rows, max_new_tokens)
        t2 = time.monotonic()
    finally:
        backend.unload(loaded)
    return {**result, "digest": digest, "load_s": round(t1 - t0, 3), "generate_s": round(t2 - t1, 3)}


def evaluate_loaded(task: Task, backend: EvaluatorBackend, loaded, rows: list[dict] | None = None,
                    max_new_tokens: int | None = None) -> dict:
    """Score an already loaded model: {score, n, items}. The grading service loads once to fingerprint too."""
    rows = task.eval_rows() if rows is None else rows
    max_new_tokens = max_new_tokens or task.grader.max_new_tokens
    return task.evaluate(backend, loaded, rows, max_new_tokens)
