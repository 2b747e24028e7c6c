"""Re-prompting: an agent that stops early is started again in its workspace, told what it has left.

Agents often end their session with most of their budget unspent (PostTrainBench re-prompts them by hand). With
`budget.max_reprompts: N` (0 by default, as in the paper) a cell whose agent exits by itself, with exit code 0 (a
crash is a result, not a pause), with more than `budget.reprompt_min_left` of its wall time left, submissions to spare
and its token and cost budgets unspent, starts it again in the same workspace, up to N times. A CLI gets the
continuation below, then its task prompt again, as a new conversation; every agent finds the continuation in
`reprompt.md` and the count in `$A2RL_REPROMPT`. The wall-time deadline does not move. Each re-prompt is a record
line (reprompts.jsonl, a `reprompt` event in the ledger) and the outcome counts them (`reprompts`).
"""
from __future__ import annotations

import time
from typing import Callable

from contracts.specs import Budget

PROMPT_FILE = "reprompt.md"

CONTINUATION = """## You stopped early: continue the task

Your previous session ended with {left_s:.0f} s of your {wall_s:.0f} s wall-time budget left, so you are started
again (re-prompt {n} of at most {max_n}). Your workspace is as you left it: your code, models and notes are still
there. The task and its rules are unchanged; they follow again below.

- time left: {left_s:.0f} s (the deadline in run.json has not moved)
- submissions left: {subs_left} of {max_subs}
- best score so far: {best}
{tokens}
Keep improving the model: look at what you did, try what is most likely to raise the score, and submit whenever you
have a better model. Stop only when you cannot improve it further.
"""


def due(budget: Budget, exit_code: int | None, limit: str | None, resource: str | None, *, deadline: float,
        reprompts: int, submissions: int, driver_spent: Callable[[], bool], now: float | None = None) -> bool:
    """Whether the agent that just exited gets started again. driver_spent: whether its token or cost budget is
    spent (asked last: it asks the driver proxy)."""
    if budget.max_reprompts <= reprompts or exit_code != 0 or limit or resource:
        return False
    left = deadline - (time.time() if now is None else now)
    return (submissions < budget.max_submissions and left > budget.reprompt_min_left * budget.wall_time_s
            and not driver_spent())


def continuation(budget: Budget, n: int, left_s: float, submissions: int, best: float | None,
                 baseline: float | None, usage: dict | None) -> str:
    """The note a re-prompted agent starts with."""
    if best is None:
        best_text = "none yet (no valid submission)" + (f"; the base model scores {baseline:g}"
                                                         if baseline is not None else "")
    else:
        best_text = f"{best:g}" + (f" (the base model scores {baseline:g})" if baseline is not None else "")
    tokens = ""
    if usage is not None and budget.max_tokens:
        tokens += f"- driver tokens left: {max(0, budget.max_tokens - usage.get('total_tokens', 0))}\n"
    if usage is not None and budget.max_cost_usd:
        tokens += f"- driver cost left: ${max(0.0, budget.max_cost_usd - (usage.get('cost_usd') or 0)):.2f}\n"
    return CONTINUATION.format(left_s=left_s, wall_s=budget.wall_time_s, n=n, max_n=budget.max_reprompts,
                               subs_left=budget.max_submissions - submissions, max_subs=budget.max_submissions,
                               best=best_text, tokens=tokens)
