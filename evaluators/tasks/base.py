"""A task: visible train rows, hidden eval rows, instructions, the grader's prompt and its scorer.

A task config (conf/task/*.yaml) names its class in `cls: "module.path:ClassName"`; `load_task` builds it.
"""
from __future__ import annotations

import importlib
import inspect

# Keys of a task config that belong to the orchestrator and the grading service, not to the task's constructor.
SERVICE_KEYS = ("cls", "base_model", "grader", "budget")


class Task:
    """Base class. Subclasses fill in the splits and the scorer; the default prompt is one user message."""

    def __init__(self, name: str, level: int = 1):
        self.name = name
        self.level = int(level)
        self.grader: dict = {}  # the grader's settings (max_new_tokens, ...), set by load_task for the instructions

    def train_rows(self) -> list[dict]:
        """Visible to the agent. Each row has at least id, prompt, answer and completion (what an SFT learns)."""
        raise NotImplementedError

    def eval_rows(self) -> list[dict]:
        """Hidden. Each row has at least id, prompt and answer."""
        raise NotImplementedError

    def instructions(self) -> str:
        """Markdown for the agent: the task, the data format, the grader's prompt format, the answer format."""
        raise NotImplementedError

    def messages(self, row: dict) -> list[dict]:
        """The chat the grader feeds the model (rendered with the model's own chat template)."""
        return [{"role": "user", "content": row["prompt"]}]

    def score(self, completion: str, row: dict) -> float:
        """In [0, 1]."""
        raise NotImplementedError

    def evaluate(self, backend, loaded, rows: list[dict], max_new_tokens: int) -> dict:
        """Score a loaded model on ``rows``: ``{score, n, items: [{id, completion, score}, ...]}``.

        The score is a percentage (0-100) for every task, as in the paper, so improvements pool across tasks.
        The default is single-turn: one greedy reply per row (batched by the backend), scored by :meth:`score`
        (0-1 per item), averaged. Interactive tasks (level 3) override it with multi-turn rollouts."""
        completions = backend.generate(loaded, [self.messages(row) for row in rows], max_new_tokens)
        items = [{"id": row["id"], "completion": completion, "score": float(self.score(completion, row))}
                 for row, completion in zip(rows, completions)]
        score = 100.0 * sum(item["score"] for item in items) / len(items) if items else 0.0
        return {"score": score, "n": len(items), "items": items}


def load_task(task_cfg: dict) -> Task:
    """Build the task a config describes. Every key except SERVICE_KEYS goes to the constructor."""
    try:  # a Hydra node: plain containers, so generators get lists and dicts they can check
        from omegaconf import DictConfig, OmegaConf

        if isinstance(task_cfg, DictConfig):
            task_cfg = OmegaConf.to_container(task_cfg, resolve=True)
    except ImportError:
        pass
    cfg = dict(task_cfg)
    target = cfg.get("cls")
    if not target or ":" not in str(target):
        raise ValueError(f"task config {cfg.get('name')!r}: cls={target!r} must look like 'module.path:ClassName'")
    module_name, _, class_name = str(target).partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"task config {cfg.get('name')!r}: cannot import cls={target!r}: {e}") from e
    kwargs = {k: v for k, v in cfg.items() if k not in SERVICE_KEYS}
    accepted = inspect.signature(cls).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise ValueError(f"task config {cfg.get('name')!r}: {class_name} does not take {unknown}; "
                             f"it takes {sorted(k for k in accepted if k != 'self')}")
    task = cls(**kwargs)
    task.grader = dict(cfg.get("grader") or {})
    return task
