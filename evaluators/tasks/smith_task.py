"""A task made from a benchmark folder alone, in the release's rl-smith layout (rdagent 1.0.0 `benchmarks/smith/`):

    FOLDER/config.yaml        name (required), eval_mode (per_sample, the default, or opencompass with
                              opencompass_dataset), description, expose_files
    FOLDER/eval.py            evaluate(question, model_answer, reference, **extra) -> a score in [0, 1]
    FOLDER/data/train.jsonl   one {"question", "answer", ...} a line (a dict question is sent JSON-dumped); or
    FOLDER/download_data.py   which writes data/train.jsonl, run with its folder as cwd
    FOLDER/description.md     the task, for the agent

`task=smith task.path=FOLDER` runs it; `smith_dir=DIR` (default $SMITH_BENCH_DIR) names every such folder under DIR
`smith-<name>`, as the release's discovery does (discover()). download_data.py runs at `prepare` (or at the first
use of the data on a sweep that reserves no GPU, like every task's data), in a copy of the folder under the cache, so
the folder itself is never written.

Two protocols (the config's `protocol:`), each a class (the paper's a variant: `@task_variant("smith", "paper")`):
- SmithPaperTask (paper), the release's PerSampleEvaluator: graded are the agent's own data/train.jsonl items sliced
  by `test_range`, the question as raw text (no chat template), greedy, 2048 new tokens, repetition penalty 1.0; then
  evaluate(question, reply, answer, **other keys) per item, an exception scoring 0; score = mean x 100.
- SmithTask (a2rl): graded items the agent never sees: `eval_file` (a file in the folder's data/), else a split
  of data/train.jsonl drawn with `split_seed` (eval_size + final_size items, any train item with a hidden item's
  question dropped); a held-out final split; the question as one chat message in the model's chat template; a score
  outside [0, 1] is that item's 0.
Under both, each evaluate call runs in a process of its own under `eval_timeout_s` (smith_runner.py): a raise, a
non-number, a hang or a crash is that item's 0 with the reason in its record, never a hung grader.
"""
from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import yaml

from contracts.decoding import Decoding, Prompt
from contracts.registry import register
from contracts.specs import ConfigError
from contracts.task import Task, split_off_final, task_variant, write_original_jsonl
from contracts.task_spec import TaskSpec
from evaluators.tasks import smith_runner

EVAL_MODES = ("per_sample", "opencompass")
# eval_mode opencompass: the OpenCompass dataset configs (config.yaml's opencompass_dataset, as the release's
# registry names them) a2rl grades through its own OpenCompass protocol, by the conf/task file that does
OPENCOMPASS_TASKS = {"opencompass.configs.datasets.gsm8k.gsm8k_gen_1d7fe4": "gsm8k",
                     "opencompass.configs.datasets.humaneval.humaneval_gen": "humaneval"}
PROBE_ITEMS = 3  # items whose own answer is scored before any cell starts: evaluate must give a number in [0, 1]
RANGE = re.compile(r"^\[(-?\d*):(-?\d*)\]$")


def refuse(folder: Path, what: str) -> ConfigError:
    return ConfigError(f"benchmark folder {folder}: {what}")


def read_config(folder: Path) -> dict:
    """config.yaml, checked: a mapping with a name and a known eval_mode (opencompass with its dataset)."""
    path = folder / "config.yaml"
    if not folder.is_dir():
        raise refuse(folder, "not a folder (task.path / smith_dir names benchmark folders in the rl-smith layout)")
    if not path.is_file():
        raise refuse(folder, "no config.yaml (it needs at least `name:`)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise refuse(folder, f"config.yaml is not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not raw.get("name"):
        raise refuse(folder, "config.yaml has no `name:`")
    mode = raw.get("eval_mode", "per_sample")
    if mode not in EVAL_MODES:
        raise refuse(folder, f"eval_mode={mode!r} is unknown; use one of {', '.join(EVAL_MODES)}")
    if mode == "opencompass" and raw.get("opencompass_dataset") not in OPENCOMPASS_TASKS:
        raise refuse(folder, f"eval_mode=opencompass with opencompass_dataset={raw.get('opencompass_dataset')!r}, "
                             f"which a2rl does not grade; it grades {', '.join(OPENCOMPASS_TASKS)}")
    if not isinstance(raw.get("expose_files", []), list):
        raise refuse(folder, f"expose_files={raw['expose_files']!r} must be a list of file names")
    return raw


def evaluate_signature(folder: Path) -> tuple[set[str], set[str], bool]:
    """(keyword names evaluate takes after its three, those without a default, whether it takes **extra), read from
    eval.py without running it."""
    path = folder / "eval.py"
    if not path.is_file():
        raise refuse(folder, "no eval.py (it defines evaluate(question, model_answer, reference, **extra))")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError as e:
        raise refuse(folder, f"eval.py does not parse (line {e.lineno}: {e.msg})") from None
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "evaluate"]
    if not found:
        raise refuse(folder, "eval.py has no function evaluate(question, model_answer, reference, **extra)")
    fn = found[-1]
    if isinstance(fn, ast.AsyncFunctionDef):
        raise refuse(folder, "eval.py's evaluate is async; the grader calls it as a plain function")
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    if len(positional) < 3 and args.vararg is None:
        raise refuse(folder, f"eval.py's evaluate({', '.join(a.arg for a in positional)}) takes fewer than three "
                             "arguments; it is called as evaluate(question, model_answer, reference, **extra)")
    named = positional[3:]
    defaulted = {a.arg for a in named[len(named) - len(args.defaults):]} if args.defaults else set()
    keywords = {a.arg for a in named} | {a.arg for a in args.kwonlyargs}
    required = ({a.arg for a in named} - defaulted) | {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults)
                                                       if d is None}
    return keywords, required, args.kwarg is not None


def read_items(folder: Path, path: Path, signature: tuple[set[str], set[str], bool]) -> list[dict]:
    """A JSONL file of items, each an object with `question` and `answer` whose other keys evaluate takes."""
    keywords, required, any_extra = signature
    if not path.is_file():
        raise refuse(folder, f"no data: {path} does not exist")
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise refuse(folder, f"{path.name} line {n} is not JSON ({e.msg})") from None
        if not isinstance(item, dict) or "question" not in item or "answer" not in item:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise refuse(folder, f"{path.name} line {n} has no `question` and `answer` (it has {keys})")
        extra = set(item) - {"question", "answer"}
        if not any_extra and extra - keywords or required - extra:
            raise refuse(folder, f"{path.name} line {n}: evaluate cannot take its other keys {sorted(extra)} "
                                 f"(it takes {sorted(keywords)}{' and **extra' if any_extra else ''}, needs "
                                 f"{sorted(required)})")
        items.append(item)
    if not items:
        raise refuse(folder, f"no data: {path} holds no items")
    return items


def prompt_text(question) -> str:
    """The release's prompt: the question as it is, a dict JSON-dumped (json.dumps' defaults)."""
    return json.dumps(question) if isinstance(question, dict) else question


def answer_text(answer) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def job(item: dict, reply: str) -> dict:
    """What one evaluate call gets: the item's question, the reply, its answer, its other keys."""
    return {"question": item["question"], "model_answer": reply, "reference": item["answer"],
            "extra": {k: v for k, v in item.items() if k not in ("question", "answer")}}


@lru_cache(maxsize=64)
def _probe(eval_py: str, items_json: str, timeout_s: float) -> str | None:
    items = json.loads(items_json)
    jobs = [job(item, answer_text(item["answer"])) for item in items]
    for n, result in enumerate(smith_runner.score_items(Path(eval_py), jobs, timeout_s, Path(eval_py).parent)):
        if "score" in result and not 0.0 <= result["score"] <= 1.0:
            return f"evaluate scored item {n} (given its own answer) {result['score']:g}, outside [0, 1]"
        if result.get("kind") in ("not_a_number", "import"):
            return f"{result['error']} (item {n}, given its own answer)"
    return None


def folder_key(folder: Path) -> str:
    """The folder's files (data/ aside) hashed: a changed download_data.py or eval.py makes its data again."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "data" not in p.relative_to(folder).parts[:1]
                       and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@register("task", "smith")
class SmithTask(Task):
    """A benchmark folder graded by a2rl's protocol (the module's docstring)."""

    original_benchmark = "smith"  # each folder is its own benchmark in the release, `smith-<name>` (__init__)
    unit_scores_only = True   # a score outside [0, 1] is that item's 0, with the reason
    train_fields = {"id": "the row's id", "prompt": "the message the grader sends, exactly (the item's question)",
                    "answer": "the item's answer (JSON when it is not text)",
                    "completion": "the same, as a reply to learn", "item": "the folder's item as it is"}

    @classmethod
    def release_name(cls, spec: TaskSpec) -> str | None:
        """`smith-<name>`, the folder's config.yaml's name (the release's discovery names it so)."""
        path = spec.params.get("path")
        return f"smith-{read_config(Path(path).expanduser().resolve())['name']}" if path else cls.original_benchmark

    def __init__(self, spec: TaskSpec, *, path: str | None, test_range: str = "[:]", eval_file: str | None = None,
                 eval_size: int = 200, final_size: int = 0, split_seed: int = 0, eval_timeout_s: float = 10.0):
        """path: the benchmark folder. test_range: paper only, the slice of data/train.jsonl graded (the release's
        run_eval argument, `[:]` as its server passes it). a2rl only: eval_file, a file of the folder holding the
        graded items, in its data/ (e.g. test.jsonl; null: drawn out of data/train.jsonl with split_seed); eval_size and
        final_size, the feedback and held-out final splits' sizes (eval_size: at most, with an eval_file).
        eval_timeout_s: the limit of one evaluate call."""
        super().__init__(spec)
        if not path:
            raise ConfigError(f"task {spec.name}: task.path is required: a benchmark folder in the rl-smith layout "
                              "(e.g. task.path=evaluators/tasks/smith_benchmarks/arith, a2rl's offline twin)")
        self.folder = Path(path).expanduser().resolve()
        self.config = read_config(self.folder)
        if self.config.get("eval_mode", "per_sample") != "per_sample":
            task = OPENCOMPASS_TASKS[self.config["opencompass_dataset"]]
            raise refuse(self.folder, f"eval_mode=opencompass ({self.config['opencompass_dataset']}) is graded by "
                                      f"a2rl's {task} task: run it as task={task} task.protocol=paper, or as "
                                      f"smith-{self.config['name']} in sweep.tasks with smith_dir={self.folder.parent}")
        self.signature = evaluate_signature(self.folder)
        if not RANGE.match(str(test_range).strip()):
            raise refuse(self.folder, f"test_range={test_range!r} must be a slice such as [:], [:100] or [82:] (on "
                                      "the command line quoted, or Hydra reads a list: task.test_range='[:100]')")
        self.test_range, self.eval_file = str(test_range).strip(), eval_file
        self.eval_size, self.final_size, self.split_seed = int(eval_size), int(final_size), int(split_seed)
        self.eval_timeout_s = float(eval_timeout_s)
        if self.eval_size < 1 or self.final_size < 0 or self.eval_timeout_s <= 0:
            raise refuse(self.folder, f"eval_size={eval_size} must be >= 1, final_size={final_size} >= 0 and "
                                      f"eval_timeout_s={eval_timeout_s} > 0")
        # the release's agent side (orchestrator/agent_sides/release.py): the folder is the benchmark's bench_dir
        self.original_benchmark = f"smith-{self.config['name']}"
        self.original_exposed = tuple(str(f) for f in self.config.get("expose_files", []))
        self.bench_dir = self.folder
        if not (self.folder / "download_data.py").is_file():
            self.check_data()  # shipped data is checked now; made data when it is made (fetch_data)

    # -- the folder's data: shipped in data/, or made by download_data.py in a copy under the cache ----------------
    def data_dir(self) -> Path:
        if not (self.folder / "download_data.py").is_file():
            return self.folder / "data"
        return self.cache_dir / "smith" / f"{self.config['name']}-{folder_key(self.folder)}" / "data"

    def missing_data(self) -> list[str]:
        if (self.data_dir() / "train.jsonl").is_file() or not (self.folder / "download_data.py").is_file():
            return []
        return [f"task {self.name}: {self.folder}/download_data.py has not made its data yet (into "
                f"{self.data_dir()}): `python -m orchestrator prepare` runs it"]

    def fetch_data(self, sources: dict | None = None) -> None:
        """Run download_data.py (prepare): in a copy of the folder, cwd the copy, as the release runs it in the
        folder; the copy's data/ is kept. Then the data is checked."""
        from contracts.file_lock import build_once

        def make(tmp: Path) -> None:
            shutil.copytree(self.folder, tmp, ignore=shutil.ignore_patterns("data", "__pycache__"))
            proc = subprocess.run([sys.executable, "download_data.py"], cwd=tmp, capture_output=True, text=True)
            if proc.returncode != 0:
                raise refuse(self.folder, f"download_data.py failed (exit {proc.returncode}): "
                                          f"{(proc.stderr or proc.stdout).strip()[-300:]}")
            if not (tmp / "data" / "train.jsonl").is_file():
                raise refuse(self.folder, "no data: download_data.py ran but wrote no data/train.jsonl")

        build_once(self.data_dir().parent, make)
        self.check_data()

    def items(self, name: str = "train.jsonl") -> list[dict]:
        if self.missing_data():
            self.fetch_data()  # a sweep reserving GPUs refuses to start before prepare made it (preflight)
        return read_items(self.folder, self.data_dir() / name, self.signature)

    def check_data(self) -> None:
        """Every item well-formed, and evaluate on the first few given their own answers a number in [0, 1]: one
        line naming the folder and what is wrong, before any cell starts."""
        items = self.items()
        self._split()  # the splits' sizes fit the data
        problem = _probe(str(self.folder / "eval.py"), json.dumps(items[:PROBE_ITEMS]), self.eval_timeout_s)
        if problem:
            raise refuse(self.folder, problem)

    # -- rows -------------------------------------------------------------------------------------------------
    def row(self, split: str, index: int, item: dict) -> dict:
        answer = answer_text(item["answer"])
        return {"id": f"{self.name}-{split}-{index}", "prompt": prompt_text(item["question"]), "answer": answer,
                "completion": answer, "item": item}

    def make_train_rows(self) -> list[dict]:
        hidden = {json.dumps(r["item"]["question"], sort_keys=True) for rows in self.hidden_splits for r in rows}
        return [self.row("train", i, item) for i, item in enumerate(self._split()[0])
                if json.dumps(item["question"], sort_keys=True) not in hidden]

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        _, feedback, final = self._split()
        return ([self.row("eval", i, item) for i, item in enumerate(feedback)],
                [self.row("final", i, item) for i, item in enumerate(final)])

    def _split(self) -> tuple[list[dict], list[dict], list[dict]]:
        """(train, feedback, final) items: the eval file's items (a seeded final split out of them), or a split of
        data/train.jsonl drawn with split_seed."""
        items = self.items()
        if self.eval_file:
            hidden = self.items(self.eval_file)
            feedback, final = split_off_final(hidden, self.final_size, self.name)
            return items, feedback[:self.eval_size], final
        wanted = self.eval_size + self.final_size
        if wanted >= len(items):
            raise refuse(self.folder, f"eval_size + final_size = {wanted} of its {len(items)} items leaves no "
                                      "train data: ask for fewer, or give an eval_file")
        order = random.Random(self.split_seed).sample(range(len(items)), len(items))
        hidden = set(order[:wanted])
        return ([x for i, x in enumerate(items) if i not in hidden], [items[i] for i in order[:self.eval_size]],
                [items[i] for i in order[self.eval_size:wanted]])

    def hidden_paths(self) -> list[Path]:
        """The folder and its made data: what holds the graded items, hidden from the agent's sandbox."""
        return [self.folder, self.data_dir().parent]

    def data_files(self) -> list[Path]:
        return [self.folder]

    # -- grading ----------------------------------------------------------------------------------------------
    def score_all(self, rows: list[dict], completions: list[str], judge=None) -> list[dict]:
        results = smith_runner.score_items(self.folder / "eval.py", [job(r["item"], c) for r, c in
                                                                     zip(rows, completions)],
                                           self.eval_timeout_s, self.folder)
        items = []
        for row, reply, result in zip(rows, completions, results):
            score, error = result.get("score", 0.0), result.get("error")
            if self.unit_scores_only and not 0.0 <= score <= 1.0:
                score, error = 0.0, f"evaluate scored {score:g}, outside [0, 1]"
            items.append({"id": row["id"], "completion": reply, "score": score, **({"error": error} if error else {})})
        return items

    def score(self, completion: str, row: dict) -> float:
        return self.score_all([row], [completion])[0]["score"]

    @property
    def summary(self) -> str:
        return f"The benchmark folder {self.config['name']} ({self.folder.name}): {self.config.get('description', '')}"

    @property
    def description(self) -> str:
        text = self.spec.description.strip()
        if not text and (self.folder / "description.md").is_file():
            text = (self.folder / "description.md").read_text(encoding="utf-8")
        return text or self.summary

    scoring = ("Each reply is scored by the benchmark's own `evaluate(question, reply, answer, **other keys)` (its "
               "eval.py), a number from 0 to 1; an evaluate that raises, runs past its time limit or returns anything "
               "else scores that reply 0. The score of a submission is the mean over the eval split, as a percentage.")

    # -- the release's agent side (orchestrator/agent_sides/release.py) -----------------------------------------
    def original_data(self, target: Path) -> None:
        """download_data's result: data/train.jsonl, copied (the release's copy2)."""
        write_original_jsonl(target / "train.jsonl", self.items())


@task_variant("smith", "paper")
class SmithPaperTask(SmithTask):
    """A benchmark folder graded as the release grades it (PerSampleEvaluator, the module's docstring)."""

    unit_scores_only = False  # the release adds up whatever evaluate returns
    variant_decoding = Decoding(max_new_tokens=2048, repetition_penalty=1.0, chat_template=False)
    train_fields = {**SmithTask.train_fields, "messages": "the raw text the grader feeds the model (no chat template)"}

    def messages(self, row: dict) -> Prompt:
        return row["prompt"]

    def row(self, split: str, index: int, item: dict) -> dict:
        return {**super().row(split, index, item), "messages": prompt_text(item["question"])}

    def make_train_rows(self) -> list[dict]:
        return [self.row("train", i, item) for i, item in enumerate(self.items())]

    def _split(self) -> tuple[list[dict], list[dict], list[dict]]:
        """(train, graded, []): all of data/train.jsonl, and its test_range slice."""
        items = self.items()
        start, stop = (int(x) if x else None for x in RANGE.match(self.test_range).groups())
        if not items[start:stop]:
            raise refuse(self.folder, f"test_range={self.test_range} of its {len(items)} items is empty")
        return items, items[start:stop], []

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        """The agent's own train.jsonl sliced by test_range (the release grades the workspace's data)."""
        start, stop = (int(x) if x else None for x in RANGE.match(self.test_range).groups())
        return [dict(r, id=f"{self.name}-eval-{i}") for i, r in enumerate(self.train_split[start:stop])], []

    def hidden_paths(self) -> list[Path]:
        return []  # the graded items are the agent's own data

    def data_section(self, what: str = "", example: dict | None = None) -> str:
        shown = super().data_section(what, example).rsplit("The hidden eval split", 1)[0]
        return shown + (f"The graded items are these rows themselves, `{self.test_range}` of them "
                        f"({len(self.hidden_splits[0])} items), as the release grades a benchmark folder.\n")

    scoring = ("Graded as the release grades a benchmark folder: the items of data/train.jsonl (sliced by the task's "
               "test_range), each reply scored by the benchmark's `evaluate(question, reply, answer, **other keys)`; "
               "an exception scores 0. The score is the mean x 100.")


def discover(smith_dir: str | Path | None, base: dict) -> tuple[dict[str, dict], dict[str, str]]:
    """({`smith-<name>`: task config}, {folder: why it is left out}) for the folders SMITH_DIR/*/config.yaml
    (folders starting with `_` skipped), as the release's discovery: a per_sample folder is `base`
    (conf/task/smith.yaml) with its path; an opencompass one names a2rl's task grading that dataset
    ({"opencompass": task}). A folder whose config.yaml has no name or a mode a2rl does not grade is left out."""
    if not smith_dir:
        return {}, {}
    root = Path(smith_dir).expanduser().resolve()
    if not root.is_dir():
        raise ConfigError(f"smith_dir={smith_dir}: not a folder (it holds benchmark folders, each with a config.yaml)")
    found, left_out = {}, {}
    for config_file in sorted(root.glob("*/config.yaml")):
        if config_file.parent.name.startswith("_"):
            continue
        try:
            raw = read_config(config_file.parent)
        except ConfigError as e:
            left_out[str(config_file.parent)] = str(e).split(": ", 1)[1]
            continue
        name = f"smith-{raw['name']}"
        if raw.get("eval_mode", "per_sample") == "opencompass":
            found[name] = {"opencompass": OPENCOMPASS_TASKS[raw["opencompass_dataset"]], "name": name}
        else:
            found[name] = {**base, "name": name, "path": str(config_file.parent)}
    return found, left_out
