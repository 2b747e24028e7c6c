"""Level-1 tasks from the `reasoning-gym` generators, graded by the final number of the reply.

reasoning-gym item i of a dataset with seed S is drawn from Random(S + i), so train and eval come from disjoint
seed ranges; any eval question that also occurs in train is dropped as well (small generators repeat questions).
The eval seeds are derived from `eval_seed` and a secret kept on the grading side (contracts/grading_secrets.py), far
above every train seed: an agent that knows the config and the generator still cannot rebuild the eval split.
"""
from __future__ import annotations

import hashlib
import re
from decimal import Decimal, InvalidOperation

from contracts.registry import register
from contracts.task import Task
from contracts.task_spec import TaskSpec

# A number: optional minus (not a hyphen between two numbers), thousands groups with commas, decimals.
NUMBER = re.compile(r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# Eval questions are drawn from at most this many seeds per requested item (duplicates are skipped).
EVAL_DRAWS_PER_ITEM = 10
# Secret eval seeds start here (train seeds must stay below) and spread over 2**40 values.
SECRET_SEEDS_FROM = 1 << 40


def final_number(text: str) -> Decimal | None:
    """The last number in the text: "1,234", "-5", "2.50" and "is 7." read as 1234, -5, 2.5 and 7."""
    matches = NUMBER.findall(text or "")
    if not matches:
        return None
    try:
        return Decimal(matches[-1].replace(",", ""))
    except InvalidOperation:
        return None


def numeric_score(completion: str, answer: str) -> float:
    """1.0 when the reply's final number equals the answer's value, else 0.0.

    Non-numeric answers fall back to an exact match of the stripped reply."""
    try:
        expected = Decimal(str(answer).strip().replace(",", ""))
    except InvalidOperation:
        return float(completion.strip() == str(answer).strip())
    got = final_number(completion)
    return float(got is not None and got == expected)


@register("task", "reasoning_gym")
class ReasoningGymTask(Task):
    def __init__(self, spec: TaskSpec, *, dataset: str, dataset_config: dict, train_size: int, eval_size: int,
                 train_seed: int, eval_seed: int, completion: str, eval_salt: str | None,
                 prompt_template: str = "{question}", final_size: int = 0):
        """completion: "answer_cot" trains on the generator's worked solution where it has one (it ends with the
        answer), "answer" on the bare answer. prompt_template formats the generator's question into the prompt
        (the question alone unless a task's YAML says otherwise). eval_salt: null keeps a random secret in
        CACHE_DIR/grading/eval-salt (a fixed string makes the eval split the same on every machine, and public:
        for reproductions only). final_size: questions in the held-out final split, drawn after the feedback split's
        (which stays as it was)."""
        super().__init__(spec)
        name = spec.name
        self.dataset = dataset
        self.dataset_config = dict(dataset_config or {})
        self.train_size, self.eval_size, self.final_size = int(train_size), int(eval_size), int(final_size)
        self.train_seed, self.eval_seed = int(train_seed), int(eval_seed)
        self.prompt_template = prompt_template
        self.completion = completion
        if completion not in ("answer", "answer_cot"):
            raise ValueError(f"task {name}: completion={completion!r} must be 'answer' or 'answer_cot'")
        self.eval_salt = eval_salt
        if self.train_seed < 0 or self.train_seed + self.train_size > SECRET_SEEDS_FROM:
            raise ValueError(f"task {name}: train seeds {self.train_seed}..{self.train_seed + self.train_size - 1} "
                             f"must lie in 0..{SECRET_SEEDS_FROM - 1} (eval seeds are drawn above them)")

    def secret_eval_seed(self) -> int:
        """The first eval seed: eval_seed hashed with the grading side's secret. Only the grader calls this."""
        digest = hashlib.sha256(f"{self.salt()}:{self.dataset}:{self.eval_seed}".encode()).digest()
        return SECRET_SEEDS_FROM + int.from_bytes(digest[:5], "big")

    def _generate(self, seed: int, size: int) -> list[dict]:
        import reasoning_gym

        return list(reasoning_gym.create_dataset(self.dataset, size=size, seed=seed, **self.dataset_config))

    def _row(self, split: str, index: int, item: dict) -> dict:
        return {"id": f"{self.name}-{split}-{index}", "prompt": self.prompt_template.format(question=item["question"]),
                "answer": str(item["answer"])}

    def make_train_rows(self) -> list[dict]:
        rows = []
        for i, item in enumerate(self._generate(self.train_seed, self.train_size)):
            row = self._row("train", i, item)
            cot = (item.get("metadata") or {}).get("answer_cot") if self.completion == "answer_cot" else None
            row["completion"] = cot or row["answer"]
            rows.append(row)
        return rows

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        """(feedback split, final split): drawn from the secret seeds, the final questions after the feedback ones
        (so a final split leaves the feedback split as it was), none of them in train, in the instructions (the
        description's examples, e.g. arithmetic's "What is 7 * 3?", are shown to every agent) or twice."""
        from evaluators.contamination import phrase

        seen = {row["prompt"] for row in self.train_split}
        shown = phrase(self.instructions())  # hidden_sizes() says the sizes without drawing: no recursion
        wanted, rows = self.eval_size + self.final_size, []
        for item in self._generate(self.secret_eval_seed(), wanted * EVAL_DRAWS_PER_ITEM):
            split, index = ("eval", len(rows)) if len(rows) < self.eval_size else ("final", len(rows) - self.eval_size)
            row = self._row(split, index, item)
            if row["prompt"] in seen or phrase(row["prompt"]) in shown:
                continue
            seen.add(row["prompt"])
            rows.append(row)
            if len(rows) == wanted:
                return rows[:self.eval_size], rows[self.eval_size:]
        raise ValueError(f"task {self.name}: {self.dataset} with {self.dataset_config} yields only {len(rows)} hidden "
                         f"questions that are not in train; ask for fewer than {wanted} (eval_size + final_size) or "
                         "widen the config")

    def score(self, completion: str, row: dict) -> float:
        return numeric_score(completion, row["answer"])

    def hidden_sizes(self) -> tuple[int, int]:
        return self.eval_size, self.final_size  # without drawing them (that needs the grading side's secret)

    @property
    def summary(self) -> str:
        return f"Questions from the reasoning-gym generator `{self.dataset}`."

    train_fields = {"id": "the example's id", "prompt": "the question, exactly as the grader will send it",
                    "answer": "the correct final answer (a number)",
                    "completion": "a reply that earns full marks (a worked solution ending with the answer, or the "
                                  "bare answer)"}
    scoring = ("The reply scores 1 when its **last number** equals the answer (`1,234`, `-5` and `2.50` are read as "
               "numbers; text around it does not matter), else 0. The score of a submission is the mean over the eval "
               "split.")
