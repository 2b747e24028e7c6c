"""The task ``number_guess`` (level 3): find a secret number by guessing; score = 100 x the share of eval games won.

Train secrets come from ``seed``; the eval and final ones from ``seed`` and the grading side's secret salt, so the
public config does not give them away. The expert halves the interval it knows (binary search): its steps are the
train rows.
"""
from __future__ import annotations

import random
from functools import cached_property

from contracts.environment import Demonstration
from contracts.registry import register
from contracts.task import InteractiveTask
from contracts.task_spec import TaskSpec
from envs.number_guess.environment import GuessEnvironment


@register("task", "number_guess")
class NumberGuessTask(InteractiveTask):
    environment_class = GuessEnvironment
    summary = "Find a secret number from higher / lower answers, in as few guesses as the limit allows."

    def __init__(self, spec: TaskSpec, *, n_train: int, n_eval: int, final_size: int | None, high: int,
                 max_steps: int, seed: int, eval_salt: str | None):
        """high: secrets are from 1 to high; max_steps: guesses per game; eval_salt: null keeps a random secret
        in CACHE_DIR/grading/number_guess-eval-salt (a fixed string: reproductions only)."""
        super().__init__(spec)
        self.set_splits(n_train, n_eval, final_size, eval_salt)
        self.high, self.max_steps, self.seed = int(high), int(max_steps), int(seed)
        if self.high < 2 or 2 ** self.max_steps <= self.high:
            raise ValueError(f"task {self.name}: high={high} must be >= 2 and max_steps={max_steps} enough to find "
                             f"any number by halving (2**max_steps > high)")

    def _secrets(self, seed: str, n: int) -> list[int]:
        rng = random.Random(seed)
        return [rng.randint(1, self.high) for _ in range(n)]

    @cached_property
    def _environment(self) -> GuessEnvironment:
        hidden = f"{self.seed}:{self.salt()}"
        return GuessEnvironment({"train": self._secrets(f"train:{self.seed}", self.n_train),
                                 "eval": self._secrets(f"eval:{hidden}", self.n_eval),
                                 "final": self._secrets(f"final:{hidden}", self.n_final)}, self.high, self.max_steps)

    def environment(self) -> GuessEnvironment:
        return self._environment

    def make_train_rows(self) -> list[dict]:
        env, demos = self.environment(), []
        for inst in env.instances("train"):
            episode, history = env.open(inst), []
            step = episode.reset()
            while not step.done:
                guess = str((episode.low + episode.high) // 2)  # the middle of the range the last answer says
                demos.append(Demonstration(inst.name, episode.goal, step, tuple(history), guess, index=len(history),
                                           expert="halving", info=inst.info))
                step = episode.step(guess)
                history.append(guess)
        return self.expert_rows(demos)
