"""Number guessing as an Environment: each instance hides a number from 1 to `high`; a guess is answered "higher" or
"lower" with the range the answers so far leave ("higher: it is from 51 to 100"), or "correct"; anything else is
"not a number". An episode is won by the right guess within max_steps."""
from __future__ import annotations

from contracts.environment import Environment, Episode, Instance, Step
from envs.number_guess import prompt


class GuessEpisode(Episode):
    def __init__(self, secret: int, high: int, max_steps: int):
        self.secret, self.top, self.max_steps = secret, high, max_steps
        self.goal = f"Find the secret number from 1 to {high}."

    def reset(self) -> Step:
        self.steps, self.low, self.high = 0, 1, self.top
        return Step(f"it is from 1 to {self.top}", None, 0.0, False)

    def step(self, action: str) -> Step:
        self.steps += 1
        guess = int(action) if action.lstrip("-").isdigit() else None
        if guess is None:
            answer = "not a number"
        elif guess == self.secret:
            answer = "correct"
        else:  # the range that every answer so far leaves
            if guess < self.secret:
                self.low = max(self.low, guess + 1)
            else:
                self.high = min(self.high, guess - 1)
            answer = f"{'higher' if guess < self.secret else 'lower'}: it is from {self.low} to {self.high}"
        won = answer == "correct"
        return Step(answer, None, float(won), won or self.steps >= self.max_steps, won)


class GuessEnvironment(Environment):
    prompt = prompt

    def __init__(self, secrets: dict[str, list[int]], high: int, max_steps: int):
        """secrets: split -> the instances' secret numbers (an instance's name is its index only)."""
        self.secrets, self.high, self.max_steps = secrets, high, max_steps

    def instances(self, split: str) -> list[Instance]:
        return [Instance(split, f"game-{i}", {"high": self.high}) for i in range(len(self.secrets[split]))]

    def open(self, instance: Instance) -> GuessEpisode:
        index = int(instance.name.rsplit("-", 1)[1])
        return GuessEpisode(self.secrets[instance.split][index], self.high, self.max_steps)
