"""GSM8K (level 1): grade-school math word problems, graded by the reply's final answer as a number.

The data is `openai/gsm8k`, config `main`: its train split (7,473) is the agent's, its test split (1,319) is graded.
It loads by dataset id through `datasets.load_dataset` (the Hugging Face cache, or the hub where there is network)
or from a local folder in the hub's layout (`main/train-*.parquet`, `main/test-*.parquet`, or .jsonl). An answer in
GSM8K is a worked solution ending in `#### <number>`; a reply is read the same way: the number after its last
`####`, else its last number, compared numerically with the solution's. `final_size` > 0 draws a held-out final split
out of the test split (contracts.task.split_off_final), which the feedback split then lacks; 0, the default, grades the
whole test split as the paper does.

Two protocols (the config's `protocol:`):
- paper (its variant class, evaluators/tasks/gsm8k_paper.py): as the original grades it (OpenCompass 0.5.1's
  gsm8k_gen_1d7fe4 through RD-Agent, evaluators/tasks/ opencompass_protocol.py): a 4-shot chat (the config's worked
  examples, read at run time from the installed opencompass package or `fewshot_file`), 512 new tokens, repetition
  penalty 1.0, the reply cut at `Question:`, its last number as written ("1,234" reads as 234), equal to the reference
  as a string or within 1e-6 as a number.
- a2rl (this module's class): zero-shot, the question inside `prompt_template` asking for `#### <number>`, 512 tokens
  (grader.max_new_tokens) with the model's own repetition penalty; the number after the last `####` (commas inside a
  number kept), else the last number, compared as a decimal. Why it differs: one user message is what every a2rl task
  sends and what a trained model answers without examples; GSM8K's own `####` convention is what its train split
  teaches, and reading "1,234" as 234 would mark right answers wrong.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path

from contracts.registry import register
from contracts.task import Task, split_off_final
from contracts.task_spec import TaskSpec
from evaluators.tasks.hub_dataset import HubDataset
from evaluators.tasks.reasoning_gym_task import NUMBER, final_number

ANSWER_MARK = "####"


def marked_answer(text: str) -> Decimal | None:
    """The reply's answer: the first number after its last `####` ("#### 1,234" is 1234), else its last number."""
    text = text or ""
    if ANSWER_MARK in text:
        found = NUMBER.search(text.rsplit(ANSWER_MARK, 1)[1])
        if found:
            try:
                return Decimal(found.group().replace(",", ""))
            except InvalidOperation:
                pass
    return final_number(text)


def gsm8k_score(completion: str, answer: str) -> float:
    """1.0 when the reply's answer equals the expected number (numerically: "18.00" equals "18"), else 0.0."""
    expected = marked_answer(answer)
    got = marked_answer(completion)
    return float(expected is not None and got is not None and got == expected)


@register("task", "gsm8k")
class Gsm8kTask(Task):
    item = "problem"
    train_fields = {  # protocol a2rl's rows
        "id": "the row's id", "prompt": "the message the grader sends, exactly (`question` inside the prompt template)",
        "question": "the problem",
        "completion": "GSM8K's worked solution (its `<<a*b=c>>` marks are the original's calculator annotations), "
                      "ending with `#### <answer>`",
        "answer": "the answer, a number"}
    scoring = ("The reply's answer is the first number after its last `####` (GSM8K's convention: `#### 1,234` reads "
               "as 1234), or, when it has no `####`, its last number. It scores 1 when that number equals the answer "
               "(`18.00` equals `18`), else 0. The score of a submission is the percentage of eval problems answered "
               "correctly.")

    def __init__(self, spec: TaskSpec, *, dataset: str, dataset_config: str, data_path: str | None,
                 train_size: int | None, eval_size: int | None, final_size: int, prompt_template: str,
                 fewshot_file: str | None = None):
        """dataset / dataset_config: the hub id and config (`openai/gsm8k`, `main`). data_path: a local folder in
        the hub's layout instead (`<dataset_config>/train-*.parquet` and `test-*`, or .jsonl). train_size /
        eval_size: the first n rows of each split (null: all; eval_size counts the feedback split's). final_size:
        test problems held out as the final split (0: none). prompt_template: the grader's message under the a2rl
        protocol, `{question}` being the problem. fewshot_file: the paper protocol's OpenCompass config
        gsm8k_gen_1d7fe4.py (null: the one the installed opencompass package ships)."""
        super().__init__(spec)
        self.fewshot_file = Path(fewshot_file).expanduser().resolve() if fewshot_file else None
        self.data = HubDataset(spec.name, dataset, dataset_config, data_path, columns=("question", "answer"),
                               label="GSM8K", offline="use the task gsm_symbolic (GSM8K-style problems that "
                                                      "reasoning-gym generates) instead")
        self.dataset, self.dataset_config, self.data_path = dataset, dataset_config, self.data.data_path
        self.train_size = None if train_size is None else int(train_size)
        self.eval_size = None if eval_size is None else int(eval_size)
        self.final_size = int(final_size)
        if "{question}" not in prompt_template:
            raise ValueError(f"task {spec.name}: prompt_template={prompt_template!r} must contain {{question}}")
        self.prompt_template = prompt_template

    def _row(self, split: str, index: int, item: dict, position: int) -> dict:
        """position: the item's place in its split of the dataset (OpenCompass's idx)."""
        number = marked_answer(item["answer"])
        return {"id": f"{self.name}-{split}-{index}", "prompt": self.prompt_template.format(question=item["question"]),
                "answer": "" if number is None else format(number, "f")}

    def make_train_rows(self) -> list[dict]:
        rows = self.data.splits["train"].to_list()[:self.train_size]
        out = [{**self._row("train", i, item, i), "question": item["question"], "completion": item["answer"]}
               for i, item in enumerate(rows)]
        return out

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        """(feedback split, final split) of the test split."""
        rest, final = split_off_final(list(enumerate(self.data.splits["test"].to_list())), self.final_size, self.name)
        return ([self._row("eval", i, item, p) for i, (p, item) in enumerate(rest[:self.eval_size])],
                [self._row("final", i, item, p) for i, (p, item) in enumerate(final)])

    def score(self, completion: str, row: dict) -> float:
        return gsm8k_score(completion, row["answer"])

    def missing_data(self) -> list[str]:
        return self.data.missing_data()

    def hidden_paths(self) -> list[Path]:
        return self.data.hidden_paths()

    def data_section(self, what: str = "", example: dict | None = None) -> str:
        return super().data_section(what or f"GSM8K's train split ({len(self.train_split)} problems)", example)
