"""Scores keyed by a model's weight digest, per (task, eval split): baselines and resubmissions cost nothing twice.

Lives under CACHE_DIR/grading, which agents never see (it holds per-item results on the hidden split).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from orchestrator.records import write_json_durably
from orchestrator.specs import task_identity


def split_key(task_cfg: dict) -> str:
    """What decides a score besides the weights: the task's data and grading settings, not its resources."""
    blob = json.dumps(task_identity(task_cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


class ScoreCache:
    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, digest: str) -> dict | None:
        path = self.root / f"{digest}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def put(self, digest: str, entry: dict, details: list | None = None) -> None:
        if details is not None:
            write_json_durably(self.root / f"{digest}.items.json", {"items": details})
        write_json_durably(self.root / f"{digest}.json", entry)
