"""Level 2 offline: AlpacaEval's shape (instructions, a reference output, a pairwise judge, win rates) with no data
to download and no key. Instructions come from seeded templates (repeat, capitalise, count, reverse, sort, add);
each has a hidden gold answer, and its reference output is the gold answer with one realistic mistake. The rubric
judge (evaluators.judging.pairwise.RubricJudge) prefers the output closer to the gold answer, so a model beats the
reference only by answering better than it. Train rows pair instructions with their gold answers.

Eval instructions are drawn from a seed derived from `eval_seed` and the grading side's secret (as reasoning-gym
tasks), and any that also occur in train are dropped.
"""
from __future__ import annotations

import hashlib
import json
import random

from contracts.registry import register
from contracts.task_spec import TaskSpec
from evaluators.judging.pairwise import RubricJudge
from evaluators.tasks.alpacaeval_task import PairwiseTask

WORDS = ("apple", "river", "garden", "silver", "pencil", "window", "rocket", "candle", "forest", "button", "planet",
         "yellow", "marble", "tiger", "castle", "ocean", "violin", "meadow", "copper", "lantern")


def make_item(rng: random.Random) -> dict:
    """One instruction, its gold answer, and a reference answer with one mistake."""
    kind = rng.choice(("repeat", "upper", "count", "reverse", "sort", "add"))
    w = rng.choice(WORDS)
    if kind == "repeat":
        n = rng.randint(2, 5)
        return {"instruction": f"Repeat the word '{w}' {n} times, separated by spaces.", "gold": " ".join([w] * n),
                "reference": " ".join([w] * (n - 1))}
    if kind == "upper":
        return {"instruction": f"Write the word '{w}' in capital letters.", "gold": w.upper(),
                "reference": w.capitalize()}
    if kind == "count":
        a = rng.randint(1, 20)
        b = a + rng.randint(3, 6)
        numbers = [str(i) for i in range(a, b + 1)]
        return {"instruction": f"Count from {a} to {b}, separated by commas.", "gold": ", ".join(numbers),
                "reference": ", ".join(numbers[:-1])}
    if kind == "reverse":
        return {"instruction": f"Spell the word '{w}' backwards.", "gold": w[::-1], "reference": w[::-1][:-1]}
    if kind == "sort":
        words = rng.sample(WORDS, 4)
        return {"instruction": f"Sort these words alphabetically: {', '.join(words)}.",
                "gold": ", ".join(sorted(words)), "reference": ", ".join(sorted(words)[::-1])}
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return {"instruction": f"What is {a} plus {b}?", "gold": f"{a} plus {b} is {a + b}.",
            "reference": f"{a} plus {b} is {a + b + 1}."}


@register("task", "instruct_offline")
class InstructOfflineTask(PairwiseTask):
    def __init__(self, spec: TaskSpec, *, train_size: int, eval_size: int, train_seed: int, eval_seed: int,
                 eval_salt: str | None, judge_seed: int = 0, metric: str = "win_rate", screen: dict | None = None):
        """eval_salt: null keeps a random secret in CACHE_DIR/grading/eval-salt (a fixed string: reproductions).
        screen: the screen of null-model and judge-addressing answers (contracts/screening.py), its
        markers read off the pairwise judge's prompt (what an LLM judge of this shape is asked; the rubric judge
        reads none)."""
        super().__init__(spec, judge_seed, metric, screen)
        self.train_size, self.eval_size = int(train_size), int(eval_size)
        self.train_seed, self.eval_seed, self.eval_salt = int(train_seed), int(eval_seed), eval_salt

    def offline_judge(self):
        return RubricJudge("gold")

    def make_train_rows(self) -> list[dict]:
        rng = random.Random(self.train_seed)
        rows = []
        for i in range(self.train_size):
            item = make_item(rng)
            rows.append({"id": f"{self.name}-train-{i}", "prompt": item["instruction"], "completion": item["gold"],
                         "answer": item["gold"]})
        return rows

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        digest = hashlib.sha256(f"{self.salt()}:{self.name}:{self.eval_seed}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        seen, rows = {row["prompt"] for row in self.train_split}, []
        for _ in range(self.eval_size * 50):
            item = make_item(rng)
            if item["instruction"] in seen:
                continue
            seen.add(item["instruction"])
            rows.append({"id": f"{self.name}-eval-{len(rows)}", "prompt": item["instruction"], **item,
                         "answer": item["gold"]})
            if len(rows) == self.eval_size:
                return rows, []  # no final split
        raise ValueError(f"task {self.name}: only {len(rows)} eval instructions not in train; ask for fewer")

    def instructions(self) -> str:
        return f"""{self.description.strip() or "Follow short instructions exactly."}

## Data

`data/train.jsonl` holds {len(self.train_split)} examples, one JSON object a line: `id`, `prompt` (the instruction),
`completion` (the answer the judge prefers). Example:

```json
{json.dumps(self.train_split[0], ensure_ascii=False)}
```

The hidden eval set has {self.eval_size} different instructions of the same kinds.

{self.judging_instructions()}"""
