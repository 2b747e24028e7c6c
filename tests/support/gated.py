"""The demo task with a gate in its evaluation, so a test can fault a grader at a known point: every evaluation
writes `<gate_dir>/eval-<uuid>` (its process id) and waits until the test writes `eval-<uuid>.go` beside it (or
kills the process). Registered as the task class `gated`; a sweep names this module in `imports`."""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from contracts.registry import register
from evaluators.tasks.reasoning_gym_task import ReasoningGymTask

GATE_WAIT_S = 300  # bounded: a test that never opens the gate must not leave a replica waiting for ever


@register("task", "gated")
class GatedTask(ReasoningGymTask):
    def __init__(self, spec, *, gate_dir: str, **knobs):
        super().__init__(spec, **knobs)
        self.gate_dir = Path(gate_dir)

    def score_all(self, rows: list[dict], completions: list[str], judge=None) -> list[dict]:
        gate = self.gate_dir / f"eval-{uuid.uuid4().hex}"
        gate.write_text(str(os.getpid()))
        until = time.monotonic() + GATE_WAIT_S
        while not gate.with_suffix(".go").exists() and time.monotonic() < until:
            time.sleep(0.05)
        return super().score_all(rows, completions, judge)


def evaluations(gate_dir: Path) -> list[Path]:
    """The gates evaluations have reached so far, oldest first."""
    return sorted((p for p in gate_dir.glob("eval-*") if p.suffix != ".go"), key=lambda p: p.stat().st_mtime_ns)


def open_gate(gate: Path) -> None:
    gate.with_suffix(".go").write_text("")
