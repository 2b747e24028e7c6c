"""A grading protocol's values: what a task reads of its protocol instead of testing the protocol's name, the way
lm-eval keeps a task's protocol in a sibling config. A task's own per-protocol values (its prompt modules, evaluator
files) are tables on its class keyed by the protocol's name (Task.prompt_modules, AlpacaEvalTask's EVAL_FILES).

  a2rl    a2rl's own grading
  paper   as the release grades (RD-Agent's AutoRL-Bench, rdagent 1.0.0: contracts/release.py)

A protocol not listed (a user's, e.g. tests/support/third_side.py's `third`) has a2rl's values.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Protocol:
    name: str
    auto_backend_on_gpu: str        # what grader.backend=auto runs on a GPU replica (the release grades with vLLM)
    release_context: bool           # a vLLM engine gets the release's context for the task (its max_model_len)
    counts_flagged: bool            # a judged submission the screen flags still counts (screen.count_flagged null)
    percent_after_division: bool    # the score as (hits / n) * 100, the release's arithmetic (else 100.0 * hits / n)

    def percent(self, hits: float, n: int) -> float:
        """hits of n as a percentage, in the protocol's own arithmetic: 100.0 * 5 / 6 and (5 / 6) * 100 differ in
        the last bit, and a paper score must be bit-equal to the release's."""
        if not n:
            return 0.0
        return (hits / n) * 100 if self.percent_after_division else 100.0 * hits / n


PROTOCOLS = {p.name: p for p in (
    Protocol("a2rl", auto_backend_on_gpu="transformers", release_context=False, counts_flagged=False,
             percent_after_division=False),
    Protocol("paper", auto_backend_on_gpu="vllm", release_context=True, counts_flagged=True,
             percent_after_division=True),
)}


def protocol(name: str) -> Protocol:
    return PROTOCOLS.get(name, PROTOCOLS["a2rl"])
