"""A task: visible train rows, hidden eval rows, instructions, the chat the grader sends and its scorer.

A task class registers itself under a name (`@register("task", "reasoning_gym")`); a task's YAML names it in `cls:`
and gives its knobs, which are the class's constructor arguments after the spec. `build_task(spec)` builds one.

A task grades under a protocol (its config's `protocol:`, contracts/protocols.py). The class registered as the task
is its `a2rl` variant; every other protocol it grades by is a subclass registered with `@task_variant(task,
protocol)`, which carries that protocol's values as data (decoding, texts, metric, the release's artefacts, its
approximations, judge and search defaults, the release's benchmark name) and its code differences as overrides,
the way lm-eval's sibling YAML (`gsm8k-cot-llama.yaml`) is a variant of its task. `variant_class(spec)` chooses the
class once, where the task is built; a protocol the task has no variant for is a ConfigError naming the ones it has.
The grading service scores a submission (evaluators.evaluate): one greedy reply per eval row scored by `score`, or,
for an interactive task, one episode per eval instance of its environment.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import random
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path

from contracts import registry
from contracts.decoding import Decoding, Prompt
from contracts.environment import Demonstration, Environment
from contracts.errors import ConfigError
from contracts.layout import default_cache_dir
from contracts.protocols import protocol
from contracts.task_spec import GraderSettings, RolloutSettings, TaskSpec


# data_path's value for the paper's own data (ALFWorld's json_2.1.1, WebShop's files, DeepSearchQA's set), which
# `python -m orchestrator prepare` fetches into the cache: the paper protocol's default for the interactive tasks.
PAPER_DATA = "paper"


class Task:
    """Base class. Subclasses fill in the splits, the instructions and the scorer; the chat is one user message."""

    interactive = False  # an interactive task is an InteractiveTask: its items are episodes in an environment
    # The protocol this class grades by (its config's `protocol:`): the class registered as a task is its `a2rl`
    # variant (a2rl's own grading); a variant registered with task_variant() says its own (`paper`: exactly as the
    # original benchmark grades it: prompt, decoding, reply handling, scoring, metric).
    protocol_name = "a2rl"
    eval_salt: str | None = None  # the config's fixed salt, where the task takes one (null: the secret)
    # The original benchmark's agent side (issue 34): its benchmark id in RD-Agent's AutoRL-Bench (rdagent 1.0.0's
    # benchmarks registry; None: the task has no original agent side) and that registry's `expose_files` for it,
    # the files of the benchmark's folder a paper cell's workspace links beside description.md and instructions.md.
    original_benchmark: str | None = None
    original_exposed: tuple[str, ...] = ()
    bench_dir: Path | None = None  # the benchmark's folder, where not the release's benchmarks/<original_benchmark>

    @classmethod
    def release_name(cls, spec: TaskSpec) -> str | None:
        """The task's benchmark in the release for this config, read without building the task: by default the
        class's original_benchmark (a class whose benchmark depends on its config says so here)."""
        return cls.original_benchmark
    _data_path: str | None = None  # the config's data_path (see the data_path property)

    def __init__(self, spec: TaskSpec):
        if spec.protocol != self.protocol_name:
            raise ConfigError(f"task {spec.name}: protocol={spec.protocol!r}, but {type(self).__name__} is the "
                              f"{self.protocol_name!r} variant of {spec.cls}: build it with build_task(spec)")
        self.spec = spec
        self.name = spec.name
        self.protocol = spec.protocol
        self.cache_dir: Path = default_cache_dir()  # where a task keeps what it builds (build_task may say otherwise)

    @property
    def data_path(self) -> str | None:
        """Where the task reads its upstream data: the config's `data_path`, where `paper` (PAPER_DATA) names the
        paper's own data in this task's cache (paper_data_path(): `prepare` fetches it there), and null the task's
        generated stand-in, for tasks that have one."""
        return self.paper_data_path() if self._data_path == PAPER_DATA else self._data_path

    @data_path.setter
    def data_path(self, value: str | None) -> None:
        self._data_path = str(value) if value is not None else None

    def paper_data_path(self) -> str:
        """Where the paper's data of this task lives when its config says `data_path: paper`."""
        raise ConfigError(f"task {self.name}: data_path=paper names the paper's own data, which this task "
                          f"({self.spec.cls}) does not know: give a path, or null")

    def approximations(self) -> list[str]:
        """Where this task's grading under its protocol is not the original benchmark's (a generated stand-in for
        the paper's data, a substitute search, judge or model), one line each: every score it gives is flagged
        `approximate` with these lines (evaluators.evaluate), and a sweep says them before any cell starts
        (orchestrator.preflight.check_stand_ins). Cheap: it must not load the data."""
        return []

    @property
    def level(self) -> int:
        return self.spec.level

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def grader(self) -> GraderSettings:
        return self.spec.grader

    @property
    def rollout(self) -> RolloutSettings:
        return self.spec.rollout

    def salt(self) -> str:
        """The secret the hidden splits are drawn with: the config's eval_salt (fixed: for reproductions only), else
        a random one made once per cache on the grading side (contracts.grading_secrets)."""
        from contracts.grading_secrets import grading_secret

        return str(self.eval_salt) if self.eval_salt else grading_secret(self.cache_dir, self.salt_file())

    def salt_file(self) -> str:
        """CACHE_DIR/grading/<this>: where the secret is kept (single-turn tasks share one)."""
        return "eval-salt"

    # -- the rows: a task makes them once (make_train_rows, make_hidden_rows), callers get copies -----------------
    def make_train_rows(self) -> list[dict]:
        """The train rows, made once (train_rows() hands out copies)."""
        raise NotImplementedError

    def make_hidden_rows(self) -> tuple[list[dict], list[dict]]:
        """(feedback split, final split): the hidden rows, made once (eval_rows() and final_rows() hand out copies).
        The final split is [] when the task has none."""
        raise NotImplementedError

    @cached_property
    def train_split(self) -> list[dict]:
        return self.make_train_rows()

    @cached_property
    def hidden_splits(self) -> tuple[list[dict], list[dict]]:
        return self.make_hidden_rows()

    def train_rows(self) -> list[dict]:
        """Visible to the agent. Each row has at least id, prompt, answer and completion (what an SFT learns)."""
        return [dict(row) for row in self.train_split]

    def eval_rows(self) -> list[dict]:
        """Hidden: the feedback split, what /submit scores and answers with. Each row has at least id, prompt and
        answer."""
        return [dict(row) for row in self.hidden_splits[0]]

    def final_rows(self) -> list[dict]:
        """Hidden, and no score on it ever reaches the agent: the held-out final split, disjoint from the feedback
        split. The grader scores one submission per run on it when the run ends. [] when the task has none."""
        return [dict(row) for row in self.hidden_splits[1]]

    # -- the agent's instructions: sections the base class assembles -------------------------------------------
    summary = ""  # the task in a sentence, when its config gives no description
    item = "question"  # what one row is, in the instructions
    # data/train.jsonl's fields, as the instructions list them
    train_fields = {"id": "the row's id", "prompt": "the message the grader sends, exactly",
                    "answer": "the correct answer", "completion": "a reply that earns full marks"}
    scoring = ""  # how a reply scores and what the submission's score is, in the instructions

    def instructions(self) -> str:
        """Markdown for the agent: the task, the data format, the grader's prompt format, the answer format. By
        default: the description, data_section() and grader_section()."""
        return f"{self.description.strip() or self.summary}\n\n{self.data_section()}\n{self.grader_section()}"

    def data_section(self, what: str = "", example: dict | None = None) -> str:
        """The "Data" section: what data/train.jsonl holds, its fields (train_fields), an example row and the
        hidden splits' sizes."""
        train, (n_feedback, n_final) = self.train_split, self.hidden_sizes()
        fields = "\n".join(f"- `{name}`: {text}" for name, text in self.train_fields.items())
        example = train[0] if example is None else example
        held = f"; a held-out final split has {n_final} more" if n_final else ""
        return f"""## Data

`data/train.jsonl` holds {what or f"{len(train)} {self.item}s"}, one JSON object a line:

{fields}

Example:

```json
{json.dumps(example, ensure_ascii=False)}
```

The hidden eval split has {n_feedback} other {self.hidden_noun}{held}.
"""

    @property
    def hidden_noun(self) -> str:
        return f"{self.item}s"

    def grader_asks(self, what: str) -> str:
        """How the grader sends `what` (a chat, or raw text) and decodes the reply, from the task's decoding()."""
        decoding = self.decoding()
        if decoding.chat_template:
            asks = (f"renders {what} with the submitted model's own chat template (`apply_chat_template(..., "
                    "add_generation_prompt=True)`)")
        else:
            asks = f"feeds the submitted model {what} (no chat template)"
        return f"{asks} and {decoding.describe()}"

    def hidden_sizes(self) -> tuple[int, int]:
        """The feedback and final splits' sizes, for the instructions (by default counted, so the rows are made:
        a task whose hidden rows need the grading side's secret says its sizes instead)."""
        feedback, final = self.hidden_splits
        return len(feedback), len(final)

    def grader_section(self, scoring: str = "", heading: str = "") -> str:
        """The "How the grader asks and scores" section: how the grader sends a prompt and decodes (from the
        task's decoding() and grader settings), then `scoring` (the class's by default)."""
        chat = self.decoding().chat_template
        asks = self.grader_asks('one chat message `{"role": "user", "content": prompt}`' if chat else
                                "`prompt` as raw text")
        needs = " Your submission needs a tokenizer with a chat template and a correct `eos_token`." if chat else ""
        return f"""## How the grader asks and scores{heading}

For each eval {self.item} the grader {asks}.{needs}

{scoring or self.scoring}
"""

    # the variant's own decoding, a value (the release's: GSM8K's 512 tokens at repetition penalty 1.0); None:
    # greedy, grader.max_new_tokens
    variant_decoding: Decoding | None = None

    def decoding(self) -> Decoding:
        """How the grader decodes this task's prompts under its protocol (the same on every backend)."""
        return self.variant_decoding or Decoding(max_new_tokens=self.grader.max_new_tokens)

    def messages(self, row: dict) -> Prompt:
        """The prompt the grader feeds the model: a chat (rendered with the model's own chat template), or raw text
        where decoding() says chat_template=False."""
        return [{"role": "user", "content": row["prompt"]}]

    def score(self, completion: str, row: dict) -> float:
        """In [0, 1]."""
        raise NotImplementedError

    def evaluator_files(self) -> dict[str, str]:
        """The protocol's evaluator for the agent's workspace (its eval/ folder: name -> text), as the original
        benchmark gives agents its eval.py: code that renders, parses and scores train items, never hidden data."""
        return {}

    def given_texts(self) -> dict[str, str]:
        """What a2rl gives every agent of this task, by file name (orchestrator.workspace puts it in each workspace):
        the instructions, the train split one JSON object a line, the protocol's evaluator files under eval/. Its
        text is never evidence of contamination, wherever an agent's tools copy it."""
        texts = {"instructions.md": self.instructions(),
                 "train.jsonl": "".join(json.dumps(row) + "\n" for row in self.train_rows())}
        texts.update({f"eval/{name}": text for name, text in self.evaluator_files().items()})
        return texts

    def hidden_texts(self, rows: list[dict]) -> list[tuple[str, str]]:
        """(id, text) of hidden rows, looked for in what agents write (evaluators.contamination): their prompts.
        An interactive task's rows are instances of its environment, not texts: none."""
        return [(row["id"], row["prompt"]) for row in rows if row.get("prompt")]

    def original_data(self, target: Path) -> None:
        """Write `target` (a new or empty folder) as the original benchmark's data.py `download_train_data(target)`
        writes it, from the rows this task loads: a paper cell's workspace `data` links to it. The orchestrator
        builds it once per task config, so it may take seconds; nothing is downloaded that the task does not load
        anyway."""
        raise ConfigError(f"task {self.name} ({self.spec.cls}) has no original benchmark's data folder: the paper's "
                          f"agent side exists only for the tasks of RD-Agent's AutoRL-Bench (gsm8k, humaneval, "
                          f"alpacaeval, alfworld, webshop, deepsearchqa); run this task's cells with a2rl's own agent "
                          f"side")

    def missing_data(self) -> list[str]:
        """What this task needs that is not on this machine (data files, a dataset not in the local cache), one
        line each, checked cheaply for a dry run; [] when nothing is missing or the task needs no data."""
        return []

    # -- level 2: a judge scores the replies; the grader opens an LLM judge for tasks that name a driver ----------
    def judge_driver(self) -> dict | None:
        """The driver config of this task's LLM judge (its calls go through the driver proxy, metered as judge
        usage), or None: the task scores alone (rule-graded, or an offline judge of its own)."""
        return None

    def score_all(self, rows: list[dict], completions: list[str], judge=None) -> list[dict]:
        """One item per row: {id, completion, score in [0, 1], ...}. judge: what the grader opened for
        judge_driver()."""
        return [{"id": row["id"], "completion": c, "score": float(self.score(c, row))}
                for row, c in zip(rows, completions)]

    # the original's vLLM context for this task under the paper's protocol (its engine's max_model_len; None: the
    # model's own)
    original_max_model_len: int | None = None

    def backend_name(self, gpu: bool) -> str:
        """The backend the grader runs: `auto` is the original's engine where it can run, vLLM for a task graded as
        the paper on a GPU (gpu: the replica has one), else transformers."""
        if self.grader.backend != "auto":
            return self.grader.backend
        return protocol(self.protocol).auto_backend_on_gpu if self.grader.num_gpus > 0 and gpu else "transformers"

    def backend_settings(self, gpu: bool) -> GraderSettings:
        """The grader's settings as its backend gets them: `auto` resolved; a vLLM engine grading as the paper gets
        the original's context for the task, unless the config sets max_model_len."""
        grader = dataclasses.replace(self.grader, backend=self.backend_name(gpu))
        if protocol(self.protocol).release_context and grader.backend == "vllm" and grader.max_model_len is None:
            return dataclasses.replace(grader, max_model_len=self.original_max_model_len)
        return grader

    def summarize(self, items: list[dict], rows: list[dict]) -> dict:
        """The submission's score (a percentage, as in the paper) and any further metrics of the task."""
        return {"score": self.percent(sum(item["score"] for item in items), len(items))}

    def percent(self, hits: float, n: int) -> float:
        """hits of n as the score's percentage, in the protocol's arithmetic (contracts/protocols.py; OpenCompass's
        tasks override it)."""
        return protocol(self.protocol).percent(hits, n)

    def hidden_paths(self) -> list[Path]:
        """Where the hidden split lives outside the grading cache (a local copy of a dataset, a data file that ships
        in an installed package): the agent's sandbox hides these. Cheap: it must not load the data."""
        return []

    def data_files(self) -> list[Path]:
        """The files and folders this task reads its data from, hashed into the sweep's manifest (a task that makes
        its data in-process from its config reads none). Cheap: it must not load the data. Default: hidden_paths()."""
        return self.hidden_paths()


class InteractiveTask(Task):
    """A task whose items are episodes in an environment (level 3). The grader plays every eval instance with the
    submitted model (evaluators.lockstep), the rollout service serves the train instances, and the train rows are
    an expert's steps rendered the way the grader renders them."""

    interactive = True
    environment_class: type[Environment]  # its render/parse module is what built-in agents get beside them
    prompt_module = None  # the render/parse module agents get under this variant's protocol (None: the environment's)
    eval_workers = 0  # processes stepping eval episodes while the model generates (0: in the grader's process)
    n_train = n_eval = n_final = 0  # split sizes (set_splits)
    # What the instructions call the instances and actions (the rollout API calls them games and commands), and
    # what a step's reward is
    instance_noun, action_noun = "games", "commands"
    reward_text = "1 when the episode is won, else 0"
    # How many eval items the original benchmark grades and what it calls them (e.g. (134, "games")): under protocol
    # paper an eval split of another size is named among the task's approximations (paper_size_notes)
    paper_eval: tuple[int, str] | None = None

    def salt_file(self) -> str:
        """One secret per environment: CACHE_DIR/grading/<task class>-eval-salt."""
        return f"{self.spec.cls}-eval-salt"

    def set_splits(self, n_train: int, n_eval: int, final_size: int | None, eval_salt: str | None = None,
                   caps: bool = False) -> None:
        """The split sizes and the salt knob, checked: n_train and n_eval >= 1 (with `caps`, as for upstream data,
        0 means all), final_size >= 0 (None: as many as n_eval)."""
        self.n_train, self.n_eval = int(n_train), int(n_eval)
        self.n_final = self.n_eval if final_size is None else int(final_size)
        self.eval_salt = eval_salt
        least = 0 if caps else 1
        if self.n_train < least or self.n_eval < least or self.n_final < 0:
            raise ValueError(f"task {self.name}: n_train={n_train} and n_eval={n_eval} must be >= {least}, "
                             f"final_size={final_size} >= 0 (or null: as many as n_eval)")

    def paper_size_notes(self, graded: int | None = None) -> list[str]:
        """For a variant that sets paper_eval (the paper's eval size), one line when the eval split is not the
        paper's size (`graded`: how many items it holds, where n_eval is not that count: a cap, 0 for all): its scores
        are then not comparable with the paper's, so approximations() names it and every score is flagged
        `approximate`. Cheap: a count, no data."""
        if self.paper_eval is None:  # a value only a variant graded as the paper sets
            return []
        size, noun = self.paper_eval
        graded = self.n_eval if graded is None else graded
        if graded == size:
            return []
        told = f"{graded} of {size} {noun}, where the paper grades all {size}" if graded < size else \
            f"{graded} {noun}, where the paper grades {size}"
        return [f"eval: {told} (task.n_eval={self.n_eval}; task.n_eval={size} grades the paper's)"]

    def cached_rows(self, path: Path, make_rows) -> list[dict]:
        """Rows kept as JSONL at `path` (under the grading cache), made by make_rows() once across processes."""
        from contracts.file_lock import build_once

        def write(tmp: Path) -> None:
            tmp.write_text("".join(json.dumps(row) + "\n" for row in make_rows()))

        build_once(path, write)
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def environment(self) -> Environment:
        raise NotImplementedError

    # -- the agent's instructions: description, data, how the grader plays, the rollout service ------------------
    train_fields = {
        "messages": "the exact prompt the grader sends at that step",
        "prompt": "its last message alone; `completion` (= `answer`): the expert's action",
        "game": "the train instance it comes from; `step`, `episode`: where in the expert's episodes"}
    scoring = "The score is **100 x the fraction of eval episodes won**."

    @property
    def hidden_noun(self) -> str:
        return self.instance_noun

    def hidden_sizes(self) -> tuple[int, int]:
        return len(self.eval_rows()), len(self.final_rows())

    def instructions(self) -> str:
        """The description, data_section(), grader_section() and rollout_section()."""
        n_train = len(self.environment().instances("train"))
        what = f"{len(self.train_split)} steps of an expert on the {n_train} train {self.instance_noun}"
        return f"""{self.description.strip() or self.summary}

{self.data_section(what)}
{self.grader_section()}
{self.rollout_section()}"""

    def grader_section(self, scoring: str = "", heading: str = "") -> str:
        """How the grader plays: every step the environment's prompt, the task's decoding, the reply parsed into an
        action by the environment; then `scoring` (the class's by default)."""
        asks = self.grader_asks("the environment's prompt for that step (the train rows' `messages`)")
        return f"""## How the grader plays and scores{heading}

For each of the eval {self.instance_noun} the grader starts an episode and, every step, {asks}; the environment's
`parse` reads the reply as an action (built-in agents get it beside them as `task_prompt.py`). All eval episodes are
played in lockstep, in batches, at most {self.environment().max_steps} actions each.

{scoring or self.scoring}
"""

    def rollout_section(self) -> str:
        """The instructions' "Rollout service" section, rendered from the service's route table."""
        from contracts.rollout_api import instructions_section

        env = self.environment()
        train = env.instances("train")
        return instructions_section(n_train=len(train), instances=self.instance_noun, actions=self.action_noun,
                                    info_keys=list(train[0].info) if train else [], reward=self.reward_text,
                                    max_steps=env.max_steps, settings=self.rollout)

    def eval_rows(self) -> list[dict]:
        """One row per eval instance: its id, the instance's name and what the environment says about it."""
        return [{"id": f"{self.name}-eval-{i}", "instance": inst.name, **inst.info}
                for i, inst in enumerate(self.environment().instances("eval"))]

    def final_rows(self) -> list[dict]:
        """One row per instance of the environment's `final` split, when it has one (instances() raises KeyError
        for a split an environment does not have)."""
        try:
            instances = self.environment().instances("final")
        except KeyError:
            return []
        return [{"id": f"{self.name}-final-{i}", "instance": inst.name, "split": "final", **inst.info}
                for i, inst in enumerate(instances)]

    def messages(self, row: dict) -> Prompt:
        """A train row's prompt as the grader sends it at that step (the environment rendered it into the row)."""
        prompt = row["messages"]
        return prompt if isinstance(prompt, str) else [dict(m) for m in prompt]

    def score(self, completion: str, row: dict) -> float:
        """One step's reply against the expert's action (not the grade: the grader plays whole episodes)."""
        parse = self.environment_class.prompt.parse
        return float(parse(completion, None) == parse(row.get("answer", ""), None))  # no action list known here

    def play(self, rows: list[dict], generate, judge=None) -> dict | None:
        """A protocol that plays its episodes its own way (DeepSearchQA's paper ReAct loop, with two decodings)
        returns the grader's result here; `generate(prompts, decoding=None)` decodes a batch (None: the task's
        decoding()); `judge`: the task's LLM judge when it has one. None (the default): the grader plays the
        environment's episodes in lockstep."""
        return None

    def judge_episodes(self, result: dict, rows: list[dict], judge) -> dict:
        """The lockstep grader's result, its episodes re-graded by the task's LLM judge (judge_driver()); a task
        whose environment grades alone returns it unchanged."""
        return result

    def expert_rows(self, demonstrations: Iterable[Demonstration]) -> list[dict]:
        """SFT rows from an expert's steps: `messages`, the prompt the grader sends in that state (a chat, or raw
        text under a raw-text protocol), and `completion` (= `answer`), the expert's action; `prompt` is the chat's
        last message alone (the raw text itself)."""
        env = self.environment()
        rows = []
        for d in demonstrations:
            messages = env.render(d.goal, d.step, d.history, d.observations, d.info)
            prompt = messages if isinstance(messages, str) else messages[-1]["content"]
            rows.append({"id": f"{self.name}-train-{d.instance}-{d.episode}-{d.index}",
                         "prompt": prompt, "completion": d.action, "answer": d.action,
                         "messages": messages, "game": d.instance, "task": d.goal, **d.info, "step": d.index,
                         "episode": d.episode, "expert": d.expert})
        return rows


def write_original_jsonl(path: Path, items: Iterable[dict]) -> None:
    """One JSON object a line as the original benchmark's data.py files write train.jsonl: `json.dumps(item,
    ensure_ascii=False)`, UTF-8, a newline after each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")


FINAL_SEED = 0  # draws the held-out final split out of a fixed eval set (split_off_final): the same on every machine


def split_off_final(items: list, final_size: int, task: str) -> tuple[list, list]:
    """(feedback, final) of a task's fixed hidden set (GSM8K's test split, HumanEval's graded problems, AlpacaEval's
    instructions): `final_size` items drawn with FINAL_SEED (a sample of the whole set: AlpacaEval's comes grouped
    by source), the rest in their order. 0 keeps the set whole, the paper's feedback set."""
    if final_size < 0 or (final_size and final_size >= len(items)):
        raise ConfigError(f"task {task}: final_size={final_size} must be from 0 to {len(items) - 1}: its hidden set "
                          f"has {len(items)} items and the feedback split keeps at least one")
    chosen = set(random.Random(FINAL_SEED).sample(range(len(items)), final_size))
    return [x for i, x in enumerate(items) if i not in chosen], [x for i, x in enumerate(items) if i in chosen]


def task_class(name: str) -> type[Task]:
    """The class registered as task `name`: its a2rl variant."""
    cls = registry.lookup("task", name)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"task class {name!r} is registered as {cls!r}, which is not a Task")
    return cls


def task_variant(task: str, protocol_name: str):
    """Class decorator: the class is task `task`'s variant under protocol `protocol_name` (a subclass of the task's
    class that says how that protocol grades it). The protocol itself must be registered (contracts/protocols.py)."""

    def add(cls: type[Task]) -> type[Task]:
        cls.protocol_name = protocol_name  # what its instances check their spec's protocol against
        return registry.register("task_variant", f"{task}:{protocol_name}")(cls)

    return add


def protocols(task: str) -> list[str]:
    """The protocols task `task` grades by: a2rl (its registered class), then those of its variants."""
    prefix = f"{task}:"
    return [task_class(task).protocol_name, *(name.removeprefix(prefix) for name in registry.names("task_variant")
                      if name.startswith(prefix))]


def variant_class(spec: TaskSpec) -> type[Task]:
    """The class that grades task spec.cls under spec.protocol, chosen once: the registered task class for a2rl,
    else its variant registered under the protocol; any other protocol is refused by name."""
    base = task_class(spec.cls)
    if spec.protocol == base.protocol_name:
        return base
    try:
        cls = registry.lookup("task_variant", f"{spec.cls}:{spec.protocol}")
    except ConfigError:
        protocol(spec.protocol)  # a protocol nobody registered is refused by its own name first
        raise ConfigError(f"task {spec.name}: protocol={spec.protocol!r} is not one {spec.cls} grades by; it has "
                          f"{protocols(spec.cls)}; a task grades by a new protocol through a class registered with "
                          f"@task_variant({spec.cls!r}, {spec.protocol!r}) (docs/extending.md)") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"task variant {spec.cls}:{spec.protocol} is {cls!r}, which is not a subclass of "
                          f"{base.__qualname__}")
    return cls


@dataclasses.dataclass(frozen=True)
class CellTask:
    """What a cell needs of its task, read once from the task its protocol's variant builds (orchestrator/cell.py
    start_agent reads it, and hands it to the agent side in its CellStart)."""
    task: Task                          # the task as its variant builds it (its release data, its texts)
    interactive: bool                   # level 3: the task has a rollout service
    prompt_file: Path | None            # the render/parse module agents get beside them (interactive tasks)
    release_benchmark: str | None       # the task's benchmark in the release (None: its variant has none)
    release_exposed: tuple[str, ...]    # the release's benchmark folder's files linked into a paper workspace
    bench_dir: Path | None              # the benchmark's folder, where not the release's benchmarks/<its name>
    hidden_paths: tuple[Path, ...]      # where its hidden split lives outside the grading cache: the sandbox hides it


def cell_task(spec: TaskSpec, cache_dir: str | Path) -> CellTask:
    """The task of a cell's spec and what the cell reads of it, built once."""
    task = load_task(spec, cache_dir)
    cls = type(task)
    return CellTask(task=task, interactive=cls.interactive, prompt_file=module_file(cls, spec.name),
                    release_benchmark=task.original_benchmark, release_exposed=tuple(task.original_exposed),
                    bench_dir=task.bench_dir, hidden_paths=tuple(task.hidden_paths()))


def release_benchmark(spec: TaskSpec) -> str | None:
    """The task's benchmark in the release under its protocol (the agent's $TASK and the release's server's answer,
    e.g. alfworld for alfworld_small): its variant's original_benchmark; None where its variant has none. A task
    may name it by its config (a benchmark folder is `smith-<name>`: Task.release_name), without being built."""
    return variant_class(spec).release_name(spec)


def is_interactive(spec: TaskSpec) -> bool:
    """Whether the task's class plays episodes (it then has a rollout service): a property of the class."""
    return task_class(spec.cls).interactive


def prompt_file(spec: TaskSpec) -> Path | None:
    """The file of the task's render/parse module (stdlib only) under its protocol, for an interactive task."""
    return module_file(variant_class(spec), spec.name)


def module_file(cls: type[Task], name: str) -> Path | None:
    """The file of a task class's render/parse module, for an interactive task (None for another)."""
    if not issubclass(cls, InteractiveTask):
        return None
    module = cls.prompt_module or cls.environment_class.prompt
    if module.__file__ is None:
        raise ValueError(f"task {name}: its render/parse module {module.__name__} has no file to copy")
    return Path(module.__file__)


def knobs(cls: type) -> dict[str, inspect.Parameter]:
    """A task class's constructor arguments; a subclass that passes **knobs on takes its base class's too."""
    params = {k: p for k, p in inspect.signature(cls).parameters.items() if k != "spec"}
    rest = [k for k, p in params.items() if p.kind is inspect.Parameter.VAR_KEYWORD]
    if rest:
        base = next(b for b in cls.__mro__[1:] if "__init__" in vars(b))
        params = {**knobs(base), **{k: p for k, p in params.items() if k not in rest}}
    return params


def build_task(spec: TaskSpec, cache_dir: str | Path | None = None, cls: type[Task] | None = None) -> Task:
    """The task a spec describes, as its protocol's variant grades it (variant_class). Its knobs must be the class's
    constructor arguments: an unknown one is a ConfigError naming the task and the arguments it takes. `cls`: the
    variant class itself, for a process whose registry does not know the name (a Serve replica gets the class from
    the process that deployed it)."""
    cls = cls or variant_class(spec)
    if cls.interactive != (spec.level == 3):
        raise ConfigError(f"task {spec.name}: level={spec.level}, but {spec.cls} is "
                          f"{'an interactive task (level 3)' if cls.interactive else 'not interactive (level 1 or 2)'}")
    accepted = knobs(cls)
    unknown = sorted(set(spec.params) - set(accepted))
    if unknown:
        raise ConfigError(f"task {spec.name}: {spec.cls} does not take {unknown}; it takes {sorted(accepted)}")
    missing = sorted(k for k, p in accepted.items() if p.default is inspect.Parameter.empty and k not in spec.params)
    if missing:
        raise ConfigError(f"task {spec.name}: {missing} missing; set them in conf/task/{spec.name}.yaml")
    task = cls(spec, **spec.params)
    if cache_dir is not None:
        task.cache_dir = Path(cache_dir).expanduser().resolve()
    return task


def load_task(config: dict | TaskSpec, cache_dir: str | Path | None = None) -> Task:
    """A task straight from its config (a YAML's contents), or from its spec when it has been read already."""
    return build_task(config if isinstance(config, TaskSpec) else TaskSpec.from_config(config), cache_dir)
