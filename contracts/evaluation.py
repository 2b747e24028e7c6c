"""What a grader's Evaluator answers for one submission on one split (evaluators/evaluator.py -> grader.py).

A submission that does not load is answered with a Refusal instead (contracts.refusals), and the agent hears it;
everything else is an Evaluation, which the Grader turns into the submission's record (submissions.jsonl) or the
run's held-out final score (final.json).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Evaluation:
    score: float | None = None      # None: no score (see error)
    eval_s: float = 0.0             # the evaluation's time (0 when the score came from the cache)
    metrics: dict | None = None     # the task's other numbers (e.g. a win rate beside the LC one)
    flags: list[str] = field(default_factory=list)  # e.g. cached, copy_of_base, eval_failed, infra_error
    approximations: list[str] | None = None  # where its grading is not the original's (flag approximate): each line
    error: str | None = None
    digest: str | None = None       # the weights' digest (a kept copy is checked against it)
    judge_usage: dict | None = None  # tokens and cost of its LLM judge's calls (None: no judge)
    refunded: bool = False          # not the agent's fault (its judge was down, the grader died): not counted
    contamination: list[dict] | None = None  # where hidden items were found in the workspace (never told the agent)
    contamination_scan: dict | None = None   # the scan's limits when it was cut short (files, bytes read)
    identity: dict | None = None    # its distances to the base and the known models (evaluators/identity.py)
    known_checkpoint: dict | None = None  # the known public sibling it is flagged as (None: none)
    retention: dict | None = None   # the final split: its score on the retention task beside the base's there
    backend: str | None = None      # the evaluator backend that scored it (transformers, vllm): replies differ by it

    @classmethod
    def lost(cls, cause: str) -> Evaluation:
        """An evaluation the infrastructure lost: no score, not counted."""
        return cls(flags=["eval_failed", "infra_error"], refunded=True,
                   error=f"infrastructure error (not counted against the budget): {cause}")
