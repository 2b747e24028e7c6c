"""The one place that defines how an ALFWorld step is shown to a model and how its reply becomes a command.

ALFWorld's ``render`` and ``parse`` (contracts.environment): the expert rows, the grader's rollouts and, copied into
their code/ as task_prompt.py, the built-in agents all use this file, so all of them see the same text. It imports
the standard library only.

One step is one chat turn, independent of the previous turns (the prompt carries the history itself, so its length
stays bounded over a 50-step episode and a tiny model can learn it)::

    system:    SYSTEM_PROMPT
    user:      Task: <task sentence>
               Previous commands: <c1>; <c2>; ... (or "none")
               Observation: <the game's last answer>
               Admissible commands:
               <one command per line>
               Reply with the next command.
    assistant: <one admissible command, nothing else>

``parse`` reads a reply leniently (first non-empty line, drops "Action:"/"> " prefixes, quotes, a trailing
period, case), maps it to an admissible command when it is one, and otherwise returns the cleaned text: the game
answers "Nothing happens." to it, it is never an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SYSTEM_PROMPT = (
    "You are playing a text household game. Reach the task's goal. "
    "Each turn, reply with exactly one command from the admissible commands, and nothing else."
)
MAX_HISTORY = 50  # previous commands shown (an episode has at most 50 steps)
_BANNER_RE = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*", re.S)
_TASK_RE = re.compile(r"\s*Your task is to: .*?$", re.S)
_PREFIX_RE = re.compile(r"^(?:>\s*|(?:action|command|next command|act)\s*[:：]\s*)", re.I)


def clean_observation(obs: str) -> str:
    """The observation without the welcome banner and the task line (the task has its own line)."""
    obs = _BANNER_RE.sub("", obs or "")
    obs = _TASK_RE.sub("", obs)
    return " ".join(obs.split())


def format_prompt(task: str, observation: str, admissible_commands: Sequence[str],
                  history: Sequence[str] = ()) -> str:
    """The user message for one step. ``history``: the commands sent so far in this episode, oldest first."""
    task = task.strip().rstrip(".")
    hist = [h.strip() for h in history][-MAX_HISTORY:]
    lines = [
        f"Task: {task}.",
        "Previous commands: " + ("; ".join(hist) if hist else "none"),
        "Observation: " + clean_observation(observation),
        "Admissible commands:",
        *admissible_commands,
        "Reply with the next command.",
    ]
    return "\n".join(lines)


def render(task: str, observation: str, admissible_commands: Sequence[str],
           history: Sequence[str] = ()) -> list[dict[str, str]]:
    """The chat messages a model answers for one step (system + user)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": format_prompt(task, observation, admissible_commands, history)},
    ]


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def parse(reply: str, admissible_commands: Sequence[str] | None = None) -> str:
    """A model's reply -> the command to send to the game."""
    text = (reply or "").replace("<|im_end|>", "\n")
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    for _ in range(2):
        line = _PREFIX_RE.sub("", line).strip()
        line = line.strip("`\"' ").rstrip(".!").strip()
    cmd = _norm(line)
    if admissible_commands:
        by_norm = {_norm(c): c for c in admissible_commands}
        if cmd in by_norm:
            return by_norm[cmd]
        # A reply that starts with an admissible command followed by chatter.
        for c in sorted(admissible_commands, key=len, reverse=True):
            if cmd.startswith(_norm(c) + " "):
                return c
    return cmd
