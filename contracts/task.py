"""A task: visible train rows, hidden eval rows, instructions, the chat the grader sends and its scorer.

A task class registers itself under a name (`@register("task", "reasoning_gym")`); a task's YAML names it in `cls:`
and gives its knobs, which are the class's constructor arguments after the spec. `build_task(spec)` builds one.
The grading service scores a submission (evaluators.evaluate): one greedy reply per eval row scored by `score`, or,
for an interactive task, one episode per eval instance of its environment.
"""
from __future__ import annotations

import inspect
import json
import random
from collections.abc import Iterable
from pathlib import Path

from contracts import registry
from contracts.decoding import Decoding, Prompt
from contracts.environment import Demonstration, Environment
from contracts.layout import default_cache_dir
from contracts.specs import ConfigError
from contracts.task_spec import GraderSettings, RolloutSettings, TaskSpec


class Task:
    """Base class. Subclasses fill in the splits, the instructions and the scorer; the chat is one user message."""

    interactive = False  # an interactive task is an InteractiveTask: its items are episodes in an environment
    # How the task can be graded (its config's `protocol:`): `a2rl`, a2rl's own; `paper`, exactly as the original
    # benchmark grades it (prompt, decoding, reply handling, scoring, metric), for tasks that have one.
    protocols: tuple[str, ...] = ("a2rl",)

    def __init__(self, spec: TaskSpec):
        self.spec = spec
        self.name = spec.name
        self.protocol = spec.protocol
        self.cache_dir: Path = default_cache_dir()  # where a task keeps what it builds (build_task may say otherwise)

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

    def train_rows(self) -> list[dict]:
        """Visible to the agent. Each row has at least id, prompt, answer and completion (what an SFT learns)."""
        raise NotImplementedError

    def eval_rows(self) -> list[dict]:
        """Hidden: the feedback split, what /submit scores and answers with. Each row has at least id, prompt and
        answer."""
        raise NotImplementedError

    def final_rows(self) -> list[dict]:
        """Hidden, and no score on it ever reaches the agent: the held-out final split, disjoint from the feedback
        split. The grader scores one submission per run on it when the run ends. [] when the task has none."""
        return []

    def instructions(self) -> str:
        """Markdown for the agent: the task, the data format, the grader's prompt format, the answer format."""
        raise NotImplementedError

    def decoding(self) -> Decoding:
        """How the grader decodes this task's prompts under its protocol (the same on every backend)."""
        return Decoding(max_new_tokens=self.grader.max_new_tokens)

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

    def summarize(self, items: list[dict], rows: list[dict]) -> dict:
        """The submission's score (a percentage, as in the paper) and any further metrics of the task."""
        return {"score": 100.0 * sum(item["score"] for item in items) / len(items) if items else 0.0}

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
    prompt_modules: dict = {}  # protocol -> the render/parse module agents get under it, where not the class's
    eval_workers = 0  # processes stepping eval episodes while the model generates (0: in the grader's process)

    def environment(self) -> Environment:
        raise NotImplementedError

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
        return float(parse(completion) == parse(row.get("answer", "")))

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
    cls = registry.lookup("task", name)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ConfigError(f"task class {name!r} is registered as {cls!r}, which is not a Task")
    return cls


def is_interactive(spec: TaskSpec) -> bool:
    """Whether the task's class plays episodes (it then has a rollout service): a property of the class."""
    return task_class(spec.cls).interactive


def prompt_file(spec: TaskSpec) -> Path | None:
    """The file of the task's render/parse module (stdlib only) under its protocol, for an interactive task."""
    cls = task_class(spec.cls)
    if not issubclass(cls, InteractiveTask):
        return None
    module = cls.prompt_modules.get(spec.protocol, cls.environment_class.prompt)
    if module.__file__ is None:
        raise ValueError(f"task {spec.name}: its render/parse module {module.__name__} has no file to copy")
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
    """The task a spec describes. Its knobs must be the class's constructor arguments: an unknown one is a
    ConfigError naming the task and the arguments it takes. `cls`: the class itself, for a process whose registry
    does not know the name (a Serve replica gets the class from the process that deployed it)."""
    cls = cls or task_class(spec.cls)
    if spec.protocol not in cls.protocols:
        raise ConfigError(f"task {spec.name}: protocol={spec.protocol!r} is not one {spec.cls} grades by; it has "
                          f"{list(cls.protocols)}")
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
