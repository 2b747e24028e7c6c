"""How a model sees a number-guessing step and how its reply becomes a guess (stdlib only: copied beside agents)."""
from __future__ import annotations

import re

SYSTEM_PROMPT = "You play a guessing game. Reply with one whole number, your next guess."


def render(goal: str, observation: str, actions: list[str], history: list[str]) -> list[dict]:
    """The chat for one step: the goal, the guesses so far and the last answer (with the range still open)."""
    guesses = ", ".join(history) or "none"
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{goal}\nGuesses so far: {guesses}\nLast answer: {observation}\nYour guess:"}]


def parse(reply: str, actions: list[str] | None = None) -> str:
    """The first whole number in the reply (an answer of the game's when there is none)."""
    found = re.search(r"-?\d+", reply or "")
    return found.group() if found else (reply or "").strip()[:40]
