"""GSM8K graded as the paper grades it (`protocol: paper`): OpenCompass 0.5.1's gsm8k_gen_1d7fe4 through RD-Agent
(evaluators/tasks/opencompass_protocol.py): a 4-shot chat (the config's worked examples, read at run time from the
installed opencompass package or `fewshot_file`), 512 new tokens, repetition penalty 1.0, the reply cut at
`Question:`, its last number as written ("1,234" reads as 234), equal to the reference as a string or within 1e-6 as
a number; the score as the summary CSV rounds it. The a2rl variant is gsm8k_task.py's class.
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from contracts.decoding import Decoding, Prompt
from contracts.errors import ConfigError
from contracts.task import task_variant, write_original_jsonl
from evaluators.tasks import opencompass_protocol as oc
from evaluators.tasks.gsm8k_task import Gsm8kTask


@task_variant("gsm8k", "paper")
class Gsm8kPaper(Gsm8kTask):
    variant_decoding = Decoding(max_new_tokens=512, repetition_penalty=1.0)  # GenInferencer's max_out_len
    original_max_model_len = 32768  # OpenCompass's VLLMwithChatTemplate as RD-Agent configures it (max_seq_len)
    original_benchmark = "gsm8k"

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
        return {"id": f"{self.name}-{split}-{index}",
                "prompt": oc.gsm8k_messages(item["question"], [], position)[-1]["content"],  # the last message
                "question": item["question"], "position": position, "answer": oc.gsm8k_reference(item["answer"])}

    def make_train_rows(self) -> list[dict]:
        rows = super().make_train_rows()
        for row in rows:  # the chat the grader sends, so what an agent trains on is what is graded
            row["messages"] = self.messages(row)
        return rows

    def original_data(self, target: Path) -> None:
        """The original's gsm8k/data.py: train.jsonl, each row of the train split (`openai/gsm8k`, `main`) as the
        dataset gives it (question, answer), one `json.dumps(item, ensure_ascii=False)` a line. train_size, where
        set, cuts it as it cuts the train rows (the original has no such knob: null, the default, is all of it)."""
        write_original_jsonl(target / "train.jsonl", self.data.splits["train"].to_list()[:self.train_size])

    def percent(self, hits: float, n: int) -> float:
        """Gsm8kEvaluator's `100 * correct / count`, as the summary CSV rounds it."""
        return oc.summary_score(100 * hits / n if n else 0.0)

    def messages(self, row: dict) -> Prompt:
        return oc.gsm8k_messages(row["question"], self.examples, row["position"])

    def evaluator_files(self) -> dict[str, str]:
        return {"opencompass_protocol.py": Path(oc.__file__).read_text(),
                "gsm8k_fewshot.json": json.dumps(self.examples, indent=1, ensure_ascii=False) + "\n"}

    def score(self, completion: str, row: dict) -> float:
        return oc.gsm8k_score(completion, row["answer"])

    def missing_data(self) -> list[str]:
        if self.fewshot_source() is None or not self.fewshot_source().is_file():
            return [self._no_fewshot()] + self.data.missing_data()
        return self.data.missing_data()

    def instructions(self) -> str:
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
