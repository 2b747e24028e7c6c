"""GSM8K (level 1): grade-school math word problems, graded by the reply's final answer as a number.

The data is `openai/gsm8k`, config `main`: its train split (7,473) is the agent's, its test split (1,319) is graded.
It loads by dataset id through `datasets.load_dataset` (the Hugging Face cache, or the hub where there is network)
or from a local folder in the hub's layout (`main/train-*.parquet`, `main/test-*.parquet`, or .jsonl). An answer in
GSM8K is a worked solution ending in `#### <number>`; a reply is read the same way: the number after its last
`####`, else its last number, compared numerically with the solution's. `final_size` > 0 draws a held-out final split
out of the test split (contracts.task.split_off_final), which the feedback split then lacks; 0, the default, grades the
whole test split as the paper does.

Two protocols (the config's `protocol:`):
- paper: as the original grades it (OpenCompass 0.5.1's gsm8k_gen_1d7fe4 through RD-Agent, evaluators/tasks/
  opencompass_protocol.py): a 4-shot chat (the config's worked examples, read at run time from the installed
  opencompass package or `fewshot_file`), 512 new tokens, repetition penalty 1.0, the reply cut at `Question:`, its
  last number as written ("1,234" reads as 234), equal to the reference as a string or within 1e-6 as a number.
- a2rl: zero-shot, the question inside `prompt_template` asking for `#### <number>`, 512 tokens (grader.max_new_tokens)
  with the model's own repetition penalty; the number after the last `####` (commas inside a number kept), else the
  last number, compared as a decimal. Why it differs: one user message is what every a2rl task sends and what a
  trained model answers without examples; GSM8K's own `####` convention is what its train split teaches, and reading
  "1,234" as 234 would mark right answers wrong.
"""
from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from functools import cached_property
from pathlib import Path

from contracts.decoding import Decoding, Prompt
from contracts.registry import register
from contracts.specs import ConfigError
from contracts.task import Task, split_off_final, write_original_jsonl
from contracts.task_spec import TaskSpec
from evaluators.tasks import opencompass_protocol as oc
from evaluators.tasks.hub_dataset import HubDataset
from evaluators.tasks.reasoning_gym_task import NUMBER, final_number

ANSWER_MARK = "####"
PAPER_MAX_NEW_TOKENS = 512  # the config's GenInferencer max_out_len


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
    original_max_model_len = 32768  # OpenCompass's VLLMwithChatTemplate as RD-Agent configures it (max_seq_len)
    protocols = ("a2rl", "paper")
    original_benchmark = "gsm8k"
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

    @property
    def paper(self) -> bool:
        # protocol branch (stays): the one switch of OpenCompass's protocol module (opencompass_protocol), read where
        # its prompts and parsing differ
        return self.protocol == "paper"

    def fewshot_source(self) -> Path | None:
        """The OpenCompass config the paper protocol's examples come from: fewshot_file, or the installed
        opencompass package's (found, never imported), or None."""
        if self.fewshot_file is not None:
            return self.fewshot_file
        import importlib.util

        spec = importlib.util.find_spec("opencompass")
        found = [Path(p) / oc.GSM8K_CONFIG for p in (spec.submodule_search_locations or [])] if spec else []
        return next((p for p in found if p.is_file()), None)

    @cached_property
    def examples(self) -> list[tuple[str, str]]:
        """The paper protocol's four worked examples, as (role, text) turns."""
        source = self.fewshot_source()
        if source is None or not source.is_file():
            raise ConfigError(self._no_fewshot())
        try:
            return oc.gsm8k_examples(source)
        except ValueError as e:
            raise ConfigError(f"task {self.name}: {e}") from None

    def _no_fewshot(self) -> str:
        where = f"fewshot_file={self.fewshot_file} is not a file" if self.fewshot_file else \
            "the opencompass package is not installed"
        return (f"task {self.name}: protocol=paper needs OpenCompass 0.5.1's {oc.GSM8K_CONFIG} (its four worked "
                f"examples): {where}; `pip install --no-deps opencompass==0.5.1` (scripts/setup does; nothing of it "
                f"is imported) or set task.fewshot_file=PATH")

    def _row(self, split: str, index: int, item: dict, position: int) -> dict:
        """position: the item's place in its split of the dataset (OpenCompass's idx)."""
        if self.paper:
            return {"id": f"{self.name}-{split}-{index}",
                    "prompt": oc.gsm8k_messages(item["question"], [], position)[-1]["content"],  # the last message
                    "question": item["question"], "position": position, "answer": oc.gsm8k_reference(item["answer"])}
        number = marked_answer(item["answer"])
        return {"id": f"{self.name}-{split}-{index}", "prompt": self.prompt_template.format(question=item["question"]),
                "answer": "" if number is None else format(number, "f")}

    def make_train_rows(self) -> list[dict]:
        rows = self.data.splits["train"].to_list()[:self.train_size]
        out = [{**self._row("train", i, item, i), "question": item["question"], "completion": item["answer"]}
               for i, item in enumerate(rows)]
        if self.paper:  # the chat the grader sends, so what an agent trains on is what is graded
            for row in out:
                row["messages"] = self.messages(row)
        return out

    def original_data(self, target: Path) -> None:
        """The original's gsm8k/data.py: train.jsonl, each row of the train split (`openai/gsm8k`, `main`) as the
        dataset gives it (question, answer), one `json.dumps(item, ensure_ascii=False)` a line. train_size, where
        set, cuts it as it cuts the train rows (the original has no such knob: null, the default, is all of it)."""
        write_original_jsonl(target / "train.jsonl", self.data.splits["train"].to_list()[:self.train_size])

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        """(feedback split, final split) of the test split."""
        rest, final = split_off_final(list(enumerate(self.data.splits["test"].to_list())), self.final_size, self.name)
        return ([self._row("eval", i, item, p) for i, (p, item) in enumerate(rest[:self.eval_size])],
                [self._row("final", i, item, p) for i, (p, item) in enumerate(final)])

    def percent(self, hits: float, n: int) -> float:
        """paper: Gsm8kEvaluator's `100 * correct / count`, as the summary CSV rounds it."""
        return oc.summary_score(100 * hits / n if n else 0.0) if self.paper else super().percent(hits, n)

    def decoding(self) -> Decoding:
        if self.paper:
            return Decoding(max_new_tokens=PAPER_MAX_NEW_TOKENS, repetition_penalty=1.0)
        return super().decoding()

    def messages(self, row: dict) -> Prompt:
        if self.paper:
            return oc.gsm8k_messages(row["question"], self.examples, row["position"])
        return super().messages(row)

    def evaluator_files(self) -> dict[str, str]:
        if not self.paper:
            return {}
        return {"opencompass_protocol.py": Path(oc.__file__).read_text(),
                "gsm8k_fewshot.json": json.dumps(self.examples, indent=1, ensure_ascii=False) + "\n"}

    def score(self, completion: str, row: dict) -> float:
        if self.paper:
            return oc.gsm8k_score(completion, row["answer"])
        return gsm8k_score(completion, row["answer"])

    def missing_data(self) -> list[str]:
        if self.paper and (self.fewshot_source() is None or not self.fewshot_source().is_file()):
            return [self._no_fewshot()] + self.data.missing_data()
        return self.data.missing_data()

    def hidden_paths(self) -> list[Path]:
        return self.data.hidden_paths()

    def data_section(self, what: str = "", example: dict | None = None) -> str:
        return super().data_section(what or f"GSM8K's train split ({len(self.train_split)} problems)", example)

    def instructions(self) -> str:
        return self._paper_instructions() if self.paper else super().instructions()

    def _paper_instructions(self) -> str:
        example = {k: v for k, v in self.train_split[0].items() if k != "messages"}
        final = f"; {len(self.hidden_splits[1])} more are a held-out final split" if self.final_size else ""
        return f"""{self.description.strip()}

## Data

`data/train.jsonl` holds GSM8K's train split ({len(self.train_split)} problems), one JSON object a line:

- `id`: the row's id; `position`: its place in the split
- `messages`: the chat the grader sends for this problem, exactly (four worked examples, then the question)
- `prompt`: that chat's last message (`Question: <question>\\nLet's think step by step\\nAnswer:\\n`)
- `question`: the problem
- `completion`: GSM8K's worked solution (its `<<a*b=c>>` marks are the original's calculator annotations), ending
  with `#### <answer>`
- `answer`: the answer as the grader reads it from the solution (the text after `#### `, commas removed)

Example (without `messages`):

```json
{json.dumps(example, ensure_ascii=False)}
```

The hidden eval split is GSM8K's test split ({len(self.hidden_splits[0])} problems{final}).

## How the grader asks and scores (the paper's protocol: OpenCompass 0.5.1, gsm8k_gen_1d7fe4)

For each eval problem the grader sends the chat of `messages`: four user/assistant pairs (OpenCompass's worked
examples, each answer ending `The answer is N`), then the question as a user message; every user message ends with
a newline. It renders the chat with the submitted model's own chat template (`apply_chat_template(...,
add_generation_prompt=True)`) and {self.decoding().describe()}.

The reply is read as OpenCompass does: `<think>...</think>` blocks removed (with only a closing tag, what follows
it), the text cut at the first `Question:`, and the LAST number in what is left (`-?\\d+\\.\\d+|-?\\d+`: commas
split numbers, so `1,234` reads as 234) is the answer; no number scores 0. It scores 1 when it equals `answer` as a
string or as a number (within 1e-6), else 0. The score is the percentage answered correctly.

`eval/opencompass_protocol.py` is this protocol's code (the grader's own, standard library only), with the examples
in `eval/gsm8k_fewshot.json`: `python eval/opencompass_protocol.py render gsm8k data/train.jsonl --fewshot
eval/gsm8k_fewshot.json --row 0` prints a train problem's chat; `... score gsm8k data/train.jsonl replies.jsonl
--fewshot eval/gsm8k_fewshot.json` scores your replies ({{"id", "reply"}} a line) as the grader would.
"""
