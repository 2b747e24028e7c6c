"""GSM8K (level 1): grade-school math word problems, graded by the reply's final answer as a number.

The data is `openai/gsm8k`, config `main`: its train split (7,473) is the agent's, its test split (1,319) is graded.
It loads by dataset id through `datasets.load_dataset` (the Hugging Face cache, or the hub where there is network)
or from a local folder in the hub's layout (`main/train-*.parquet`, `main/test-*.parquet`, or .jsonl). An answer in
GSM8K is a worked solution ending in `#### <number>`; a reply is read the same way: the number after its last
`####`, else its last number, compared numerically with the solution's. `final_size` > 0 draws a held-out final split
out of the test split (contracts.task.split_off_final), which the feedback split then lacks; 0, the default, grades the
whole test split as the paper does.
"""
from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path

from contracts.registry import register
from contracts.specs import ConfigError
from contracts.task import Task, split_off_final
from contracts.task_spec import TaskSpec
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
    def __init__(self, spec: TaskSpec, *, dataset: str, dataset_config: str, data_path: str | None,
                 train_size: int | None, eval_size: int | None, final_size: int, prompt_template: str):
        """dataset / dataset_config: the hub id and config (`openai/gsm8k`, `main`). data_path: a local folder in
        the hub's layout instead (`<dataset_config>/train-*.parquet` and `test-*`, or .jsonl). train_size /
        eval_size: the first n rows of each split (null: all; eval_size counts the feedback split's). final_size:
        test problems held out as the final split (0: none). prompt_template: the grader's message, `{question}`
        being the problem."""
        super().__init__(spec)
        self.dataset, self.dataset_config = dataset, dataset_config
        self.data_path = Path(data_path).expanduser().resolve() if data_path else None
        if self.data_path is not None and not self.data_path.is_dir():
            raise ConfigError(self._missing(f"data_path={data_path!r} is not a folder"))
        self.train_size = None if train_size is None else int(train_size)
        self.eval_size = None if eval_size is None else int(eval_size)
        self.final_size = int(final_size)
        if "{question}" not in prompt_template:
            raise ValueError(f"task {spec.name}: prompt_template={prompt_template!r} must contain {{question}}")
        self.prompt_template = prompt_template

    def _missing(self, why: str) -> str:
        return (f"task {self.name}: no GSM8K data: {why}. Fetch {self.dataset} ({self.dataset_config}) once where "
                f"the hub is reachable (datasets.load_dataset({self.dataset!r}, {self.dataset_config!r}) fills the "
                f"Hugging Face cache), or set task.data_path=DIR holding {self.dataset_config}/train-*.parquet and "
                f"{self.dataset_config}/test-*.parquet; offline, use the task gsm_symbolic (GSM8K-style problems "
                f"that reasoning-gym generates) instead")

    @cached_property
    def _splits(self) -> dict:
        import datasets

        try:
            if self.data_path is None:
                loaded = datasets.load_dataset(self.dataset, self.dataset_config)
            elif (self.data_path / self.dataset_config).is_dir():
                loaded = datasets.load_dataset(str(self.data_path), data_dir=self.dataset_config)
            else:  # the split files at the folder's top
                loaded = datasets.load_dataset(str(self.data_path))
        except Exception as e:  # offline without a cached copy, no such folder, files of another layout
            raise ConfigError(self._missing(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")) \
                from None
        for split in ("train", "test"):
            if split not in loaded or not {"question", "answer"} <= set(loaded[split].column_names):
                raise ConfigError(self._missing(f"{self.data_path or self.dataset} has no {split} split with "
                                                f"`question` and `answer` columns (splits: {list(loaded)})"))
        return loaded

    def _row(self, split: str, index: int, item: dict) -> dict:
        number = marked_answer(item["answer"])
        return {"id": f"{self.name}-{split}-{index}", "prompt": self.prompt_template.format(question=item["question"]),
                "answer": "" if number is None else format(number, "f")}

    @cached_property
    def _train(self) -> list[dict]:
        rows = self._splits["train"].to_list()[:self.train_size]
        return [{**self._row("train", i, item), "question": item["question"], "completion": item["answer"]}
                for i, item in enumerate(rows)]

    @cached_property
    def _hidden(self) -> tuple[list[dict], list[dict]]:
        """(feedback split, final split) of the test split."""
        rest, final = split_off_final(self._splits["test"].to_list(), self.final_size, self.name)
        return ([self._row("eval", i, item) for i, item in enumerate(rest[:self.eval_size])],
                [self._row("final", i, item) for i, item in enumerate(final)])

    def train_rows(self) -> list[dict]:
        return [dict(row) for row in self._train]

    def eval_rows(self) -> list[dict]:
        return [dict(row) for row in self._hidden[0]]

    def final_rows(self) -> list[dict]:
        return [dict(row) for row in self._hidden[1]]

    def score(self, completion: str, row: dict) -> float:
        return gsm8k_score(completion, row["answer"])

    def missing_data(self) -> list[str]:
        """A local copy: both splits' files are there. A dataset id: the Hugging Face caches hold it (else it
        downloads at first use, which needs the network)."""
        if self.data_path is not None:
            folder = self.data_path / self.dataset_config
            folder = folder if folder.is_dir() else self.data_path
            absent = [split for split in ("train", "test") if not any(folder.rglob(f"{split}*"))]
            return [self._missing(f"{folder} has no {' and no '.join(absent)} files")] if absent else []
        if any(path.exists() for path in self.hidden_paths()):
            return []
        return [f"task {self.name}: {self.dataset} ({self.dataset_config}) is not in the Hugging Face cache: it "
                f"downloads at first use (needs the network); offline, set task.data_path=DIR or use the task "
                f"gsm_symbolic"]

    def hidden_paths(self) -> list[Path]:
        """The local copy, or this dataset's entries in the Hugging Face caches (the test split is in both)."""
        if self.data_path is not None:
            return [self.data_path]
        import datasets.config
        from huggingface_hub import constants

        return [Path(constants.HF_HUB_CACHE) / f"datasets--{self.dataset.replace('/', '--')}",
                Path(datasets.config.HF_DATASETS_CACHE) / self.dataset.replace("/", "___")]

    def instructions(self) -> str:
        example = self._train[0]
        final = f"; {len(self._hidden[1])} more are a held-out final split" if self.final_size else ""
        return f"""{self.description.strip()}

## Data

`data/train.jsonl` holds GSM8K's train split ({len(self._train)} problems), one JSON object a line:

- `id`: the row's id
- `prompt`: the message the grader sends, exactly (`question` inside the prompt template)
- `question`: the problem
- `completion`: GSM8K's worked solution (its `<<a*b=c>>` marks are the original's calculator annotations), ending
  with `#### <answer>`
- `answer`: the answer, a number

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The hidden eval split is GSM8K's test split ({len(self._hidden[0])} problems{final}).

## How the grader asks and scores

For each eval problem the grader renders one chat message `{{"role": "user", "content": prompt}}` with the
submitted model's own chat template (`apply_chat_template(..., add_generation_prompt=True)`), decodes greedily with
at most {self.grader.max_new_tokens} new tokens, and stops at the tokenizer's end-of-sequence token. Your submission
needs a tokenizer with a chat template and a correct `eos_token`.

The reply's answer is the first number after its last `####` (GSM8K's convention: `#### 1,234` reads as 1234), or,
when it has no `####`, its last number. It scores 1 when that number equals the answer (`18.00` equals `18`), else 0.
The score of a submission is the percentage of eval problems answered correctly.
"""
