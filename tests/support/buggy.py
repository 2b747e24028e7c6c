"""An agent kind with a bug planted in a2rl-side code that runs in the cell: its command line raises KeyError. A sweep
names this module in `imports` and `agent.kind=buggy` (a command agent otherwise)."""
from __future__ import annotations

from contracts.registry import register
from agents.kinds import CommandAgent


@register("agent_kind", "buggy")
class BuggyAgent(CommandAgent):
    def command(self, spec, task_prompt=None):
        raise KeyError("a planted bug in a2rl's own code")
