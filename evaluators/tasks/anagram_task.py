"""The task ``anagrams`` (level 1), the worked example of a new single-turn task: reply with another English word of
the same letters. Its data ships in a package (reasoning-gym's anagrams.jsonl: 30,177 groups of such words); the
eval and final words come from every HIDDEN_EVERY-th group, drawn with the grading side's secret salt."""
from __future__ import annotations

import json
import random
import re
from functools import cached_property
from importlib import resources
from pathlib import Path

from contracts.registry import register
from contracts.task import Task
from contracts.task_spec import TaskSpec

HIDDEN_EVERY = 4  # a quarter of the groups (7,545) can be hidden rows; none of them is ever a train row


@register("task", "anagrams")
class AnagramTask(Task):
    item = "word"
    train_fields = {"id": "the row's id", "prompt": "the message the grader sends, exactly", "word": "the given word",
                    "answers": "every right answer", "answer": "one of them", "completion": "a reply that scores 1"}
    scoring = ("The reply's first word (letters only, any case) scores 1 when it is one of the given word's anagrams, "
               "else 0. The score of a submission is the percentage of eval words answered right.")

    def __init__(self, spec: TaskSpec, *, n_train: int, n_eval: int, final_size: int, seed: int,
                 eval_salt: str | None, prompt_template: str):
        """prompt_template: the grader's message about `{word}`; eval_salt: null, the grading side's secret."""
        super().__init__(spec)
        self.n_train, self.n_eval, self.final_size, self.seed = int(n_train), int(n_eval), int(final_size), int(seed)
        self.eval_salt, self.prompt_template = eval_salt, prompt_template

    @cached_property
    def _groups(self) -> list[list[str]]:
        return [json.loads(line)["words"] for line in self.hidden_paths()[0].read_text().splitlines() if line]

    def _rows(self, split: str, groups: list[list[str]]) -> list[dict]:
        return [{"id": f"{self.name}-{split}-{i}", "prompt": self.prompt_template.format(word=word), "word": word,
                 "answers": others, "answer": others[0], "completion": others[0]}
                for i, (word, *others) in enumerate(groups)]

    def make_train_rows(self) -> list[dict]:
        pool = [g for i, g in enumerate(self._groups) if i % HIDDEN_EVERY]
        return self._rows("train", random.Random(self.seed).sample(pool, self.n_train))

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        drawn = random.Random(self.salt()).sample(self._groups[::HIDDEN_EVERY], self.n_eval + self.final_size)
        return self._rows("eval", drawn[:self.n_eval]), self._rows("final", drawn[self.n_eval:])

    def hidden_sizes(self) -> tuple[int, int]:
        return self.n_eval, self.final_size  # without drawing them (that needs the grading side's secret)

    def score(self, completion: str, row: dict) -> float:
        words = re.findall(r"[a-z]+", completion.lower())
        return float(bool(words) and words[0] in row["answers"])

    def hidden_paths(self) -> list[Path]:
        return [Path(str(resources.files("reasoning_gym.data").joinpath("anagrams.jsonl")))]
