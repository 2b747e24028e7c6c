"""Number guessing as an Environment: each instance hides a number from 1 to `high`; a guess is answered "higher",
"lower" or "correct", anything else "not a number"; an episode is won by the right guess within max_steps."""
from __future__ import annotations

from contracts.environment import Environment, Episode, Instance, Step
from envs.number_guess import prompt


class GuessEpisode(Episode):
    def __init__(self, secret: int, high: int, max_steps: int):
        self.secret, self.high, self.max_steps = secret, high, max_steps
        self.goal = f"Find the secret number from 1 to {high}."

    def reset(self) -> Step:
        self.steps = 0
        return Step("none yet", None, 0.0, False)

    def step(self, action: str) -> Step:
        self.steps += 1
        guess = int(action) if action.lstrip("-").isdigit() else None
        answer = "not a number" if guess is None else "correct" if guess == self.secret else \
            "higher" if guess < self.secret else "lower"
        won = answer == "correct"
        return Step(answer, None, float(won), won or self.steps >= self.max_steps, won)


class GuessEnvironment(Environment):
    prompt = prompt

    def __init__(self, secrets: dict[str, list[int]], high: int, max_steps: int):
        """secrets: split -> the instances' secret numbers (an instance's name is its split and index only)."""
        self.secrets, self.high, self.max_steps = secrets, high, max_steps

    def instances(self, split: str) -> list[Instance]:
        return [Instance(split, f"{split}-{i}", {"high": self.high}) for i in range(len(self.secrets[split]))]

    def open(self, instance: Instance) -> GuessEpisode:
        index = int(instance.name.rsplit("-", 1)[1])
        return GuessEpisode(self.secrets[instance.split][index], self.high, self.max_steps)
