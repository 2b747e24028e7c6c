"""Where everything lives on disk, in one place.

OUTPUT_DIR/ledger.sqlite                the ledger (orchestrator only)
OUTPUT_DIR/cells/<cell>/spec.json       per-cell records, outside every workspace:
OUTPUT_DIR/cells/<cell>/attempt-N/      agent.stdout, agent.stderr, submissions.jsonl, outcome.json
OUTPUT_DIR/cells/<cell>/code.git        code snapshots taken at each submission
WORKSPACE_ROOT/<cell>-aN/               the agent's workspace (default OUTPUT_DIR/workspaces)
CACHE_DIR/models/                       base models (visible read-only to agents)
CACHE_DIR/grading/                      eval splits, scores, baselines (hidden from agents)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def default_cache_dir() -> Path:
    """The same default as conf/config.yaml's cache_dir (the orchestrator exports A2RL_CACHE_DIR to Ray's workers)."""
    return Path(os.environ.get("A2RL_CACHE_DIR") or Path.home() / ".cache" / "a2rl").expanduser().resolve()


@dataclass(frozen=True)
class Layout:
    output_dir: Path
    workspace_root: Path
    cache_dir: Path

    @classmethod
    def make(cls, output_dir, cache_dir, workspace_root=None) -> "Layout":
        output_dir = Path(output_dir).expanduser().resolve()
        root = Path(workspace_root).expanduser().resolve() if workspace_root else output_dir / "workspaces"
        return cls(output_dir=output_dir, workspace_root=root, cache_dir=Path(cache_dir).expanduser().resolve())

    def to_dict(self) -> dict:
        return {k: str(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Layout":
        return cls(**{k: Path(v) for k, v in d.items()})

    @property
    def ledger(self) -> Path:
        return self.output_dir / "ledger.sqlite"

    def cell_dir(self, cell_id: str) -> Path:
        return self.output_dir / "cells" / cell_id

    def attempt_dir(self, cell_id: str, attempt: int) -> Path:
        return self.cell_dir(cell_id) / f"attempt-{attempt}"

    def code_repo(self, cell_id: str) -> Path:
        return self.cell_dir(cell_id) / "code.git"

    def workspace(self, cell_id: str, attempt: int) -> Path:
        return self.workspace_root / f"{cell_id}-a{attempt}"

    @property
    def models_cache(self) -> Path:
        return self.cache_dir / "models"

    @property
    def grading_cache(self) -> Path:
        return self.cache_dir / "grading"

    def attempts(self, cell_id: str) -> list[int]:
        d = self.cell_dir(cell_id)
        if not d.exists():
            return []
        return sorted(int(p.name.split("-")[1]) for p in d.glob("attempt-*") if p.name.split("-")[1].isdigit())

    def new_attempt(self, cell_id: str) -> int:
        """Claim the next attempt number; mkdir is atomic, so two claimants never share one."""
        self.cell_dir(cell_id).mkdir(parents=True, exist_ok=True)
        n = (self.attempts(cell_id) or [0])[-1] + 1
        while True:
            try:
                self.attempt_dir(cell_id, n).mkdir()
                return n
            except FileExistsError:
                n += 1

    def hidden_from_agents(self) -> list[Path]:
        """What the sandbox replaces with empty mounts (a2rl's source tree is added by the caller)."""
        return [self.output_dir, self.workspace_root, self.grading_cache]
