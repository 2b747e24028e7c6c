"""How the counter environment's model sees a step and how its reply becomes an action (stdlib only)."""
from __future__ import annotations


def render(goal: str, observation: str, actions: list[str], history: list[str]) -> list[dict]:
    return [{"role": "user", "content": f"Goal: {goal}. So far: {' '.join(history) or 'nothing'}. {observation}. "
                                        f"Reply with one of: {', '.join(actions)}."}]


def parse(reply: str, actions: list[str] | None) -> str:
    words = (reply or "").lower().split()
    return next((w for w in words if actions and w in actions), words[0] if words else "")
