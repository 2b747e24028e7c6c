"""A grading protocol's values, the same for every task graded by it: what code reads of a protocol instead of
testing its name. A task's own values and code under a protocol are its variant class (contracts/task.py
task_variant), the way lm-eval keeps a task's protocol in a sibling config.

  a2rl    a2rl's own grading
  paper   as the release grades (RD-Agent's AutoRL-Bench, rdagent 1.0.0: contracts/release.py)

A protocol is registered by name (`register("protocol", name)(Protocol(...))`); a name nobody registered is a
ConfigError that lists the known ones, never a2rl's values by default. A third protocol (a user's, e.g.
tests/support/third_gsm8k.py's `third`) registers its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from contracts import registry
from contracts.errors import ConfigError


@dataclass(frozen=True)
class Protocol:
    name: str
    auto_backend_on_gpu: str        # what grader.backend=auto runs on a GPU replica (the release grades with vLLM)
    release_context: bool           # a vLLM engine gets the release's context for the task (its max_model_len)
    counts_flagged: bool            # a judged submission the screen flags still counts (screen.count_flagged null)
    percent_after_division: bool    # the score as (hits / n) * 100, the release's arithmetic (else 100.0 * hits / n)
    # its cells need the release's files checked before any starts (orchestrator.preflight: the tasks' stand-ins
    # refused or said, the release's artefacts present)
    checks_release: bool = False

    def percent(self, hits: float, n: int) -> float:
        """hits of n as a percentage, in the protocol's own arithmetic: 100.0 * 5 / 6 and (5 / 6) * 100 differ in
        the last bit, and a paper score must be bit-equal to the release's."""
        if not n:
            return 0.0
        return (hits / n) * 100 if self.percent_after_division else 100.0 * hits / n


A2RL = registry.register("protocol", "a2rl")(Protocol(
    "a2rl", auto_backend_on_gpu="transformers", release_context=False, counts_flagged=False,
    percent_after_division=False))
PAPER = registry.register("protocol", "paper")(Protocol(
    "paper", auto_backend_on_gpu="vllm", release_context=True, counts_flagged=True, percent_after_division=True,
    checks_release=True))


def protocol(name: str) -> Protocol:
    """The registered protocol `name`; a ConfigError naming the known ones for any other."""
    found = registry.lookup("protocol", name)
    if not isinstance(found, Protocol):
        raise ConfigError(f"protocol {name!r} is registered as {found!r}, which is not a Protocol")
    return found
