"""Typed specs that cross process boundaries: budget, agent, driver, task, cell.

They are frozen and built only from validated plain dicts, so a trial on another node sees exactly
what the orchestrator resolved. A cell's id is a hash of its resolved spec: same spec, same id.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from contracts.errors import ConfigError, reject_unknown  # noqa: F401  (where most modules import them from)
from contracts.identity import task_identity
from contracts.task_spec import TaskSpec


@dataclass(frozen=True)
class Budget:
    wall_time_s: float
    max_submissions: int
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    cpus: float = 1
    gpus: float = 0
    memory_gb: float | None = None
    # True: the wall-time budget counts working time only: what the agent's driver calls spent waiting on the
    # provider's rate limits (the proxy's backoff after a 429/5xx) moves its deadline back (Inspect's working limit)
    working_time: bool = False
    # Re-prompting (off at 0, as in the paper): an agent that exits by itself with more than reprompt_min_left of its
    # wall time left is started again in its workspace with a continuation prompt, at most max_reprompts times.
    max_reprompts: int = 0
    reprompt_min_left: float = 0.25

    @classmethod
    def from_dict(cls, d: dict, where: str = "budget") -> "Budget":
        reject_unknown(d, {f.name for f in dataclasses.fields(cls)}, where)
        for key in ("wall_time_s", "max_submissions"):
            if d.get(key) is None:
                raise ConfigError(f"{where}.{key} is missing; set it to a positive number")
        for key in ("wall_time_s", "max_submissions", "max_tokens", "max_cost_usd", "memory_gb"):
            value = d.get(key)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ConfigError(f"{where}.{key}={value!r} must be a positive number")
        for key in ("cpus", "gpus"):
            value = d.get(key, 0)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{where}.{key}={value!r} must be a number >= 0")
        if not isinstance(d.get("working_time", False), bool):
            raise ConfigError(f"{where}.working_time={d['working_time']!r} must be true or false")
        if d.get("cpus", 1) == 0:
            raise ConfigError(f"{where}.cpus=0: a cell needs some CPU to run its agent; use e.g. 0.5")
        reprompts = d.get("max_reprompts", 0)
        if not isinstance(reprompts, int) or isinstance(reprompts, bool) or reprompts < 0:
            raise ConfigError(f"{where}.max_reprompts={reprompts!r} must be a whole number >= 0 (0: no re-prompting)")
        share = d.get("reprompt_min_left", 0.25)
        if not isinstance(share, (int, float)) or not 0 <= share < 1:
            raise ConfigError(f"{where}.reprompt_min_left={share!r} must be a share of the wall time in [0, 1), "
                              "e.g. 0.25: re-prompt only with more than a quarter of it left")
        return cls(**d)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.wall_time_s / 3600


@dataclass(frozen=True)
class AgentSpec:
    name: str
    kind: str                       # builtin | command | cli
    script: str | None = None       # builtin: agents/builtin/<script>.py, copied into the workspace's code/
    command: str | None = None      # command: a shell command line run in the workspace
    files: list = field(default_factory=list)  # your agent's files, copied into the workspace's code/
    files_sha: str | None = None    # their content hash: changed agent code is a new cell
    args: dict = field(default_factory=dict)
    needs_driver: bool = False
    adapter: str | None = None      # cli: agents/cli/<adapter>.py (claude_code, codex, gemini_cli, opencode)
    version: str | None = None      # cli: the pinned CLI version (another version is another cell)


# AgentSpec fields added after ledgers existed: left out of a cell's identity while unset, so older cells keep ids.
_LATER_AGENT_FIELDS = ("adapter", "version")
_REPROMPT_FIELDS = ("max_reprompts", "reprompt_min_left")
# Driver keys added later: context_window is left out while unset (older cells keep ids); tokenizer always, as it only
# counts the tokens of cut calls and never changes what the agent does.
_LATER_DRIVER_FIELDS = ("context_window",)
_METERING_DRIVER_FIELDS = ("tokenizer",)


@dataclass(frozen=True)
class DriverSpec:
    name: str
    provider: str = "none"
    model: str | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CellSpec:
    agent: AgentSpec
    driver: DriverSpec
    task: TaskSpec                  # its config as written is task.config (what the cell's id hashes)
    seed: int
    budget: Budget
    sweep: str = ""
    mode: dict | None = None        # a training mode's config (conf/mode/*.yaml); None: free, any route

    @property
    def cell_id(self) -> str:
        return cell_id(self)

    @property
    def task_name(self) -> str:
        return self.task.name

    @property
    def mode_name(self) -> str:
        return (self.mode or {}).get("name") or "free"

    @property
    def label(self) -> str:
        """How progress lines and logs name the cell: agent[/driver]/task[/mode]/seedN."""
        driver = "" if self.driver.name == "none" else f"/{self.driver.name}"
        mode = "" if self.mode is None else f"/{self.mode_name}"
        return f"{self.agent.name}{driver}/{self.task_name}{mode}/seed{self.seed}"

    def to_dict(self) -> dict:
        """Plain JSON (the ledger's spec, a Tune trial's config), the task as its config was written."""
        return {"agent": dataclasses.asdict(self.agent), "driver": dataclasses.asdict(self.driver),
                "task": copy.deepcopy(self.task.config), "seed": self.seed, "budget": dataclasses.asdict(self.budget),
                "sweep": self.sweep, "mode": copy.deepcopy(self.mode)}

    @classmethod
    def from_dict(cls, d: dict) -> "CellSpec":
        return cls(
            agent=AgentSpec(**d["agent"]),
            driver=DriverSpec(**d["driver"]),
            task=TaskSpec.from_config(d["task"]),
            seed=int(d["seed"]),
            budget=Budget(**d["budget"]),
            sweep=d.get("sweep", ""),
            mode=d.get("mode"),
        )


@dataclass(frozen=True)
class CellOptions:
    """The sweep's settings every cell runs with (orchestrator.runner -> each Tune trial, orchestrator.cell)."""
    sandboxed: bool                 # False: bubblewrap is missing and sandbox.required=false
    kill_grace_s: float             # sandbox.kill_grace_s: SIGTERM to SIGKILL of an agent's process group
    service_timeout_s: float        # grading.service_timeout_s: the most a call to a sweep's service may take
    eval_timeout_s: float           # grading.eval_timeout_s: the most an evaluation may take
    imports: list[str]              # the user's modules that register task classes and agent kinds
    sandbox: dict                   # the sandbox config (orchestrator.sandbox.Settings.from_cfg reads it)
    emulated: bool                  # GPUs are emulated (cluster.emulated_gpus): no CUDA check in the preflight
    grading_url: str                # http://host:port/<scope>: a task's grader at /<task>
    driver_url: str | None          # the driver proxy (None: no cell has a driver)
    scope: str                      # what the sweep's services are named in
    cli_path: list[str]             # where agent CLIs are looked up first

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CellOptions":
        return cls(**d)


def _identity(spec: CellSpec) -> dict:
    """What decides a cell's result: not the grader's resources or batching, nor the sweep's name."""
    d = spec.to_dict()
    d.pop("sweep")
    if d["mode"] is None:  # free cells keep the ids they had before modes existed
        d.pop("mode")
    d["task"] = task_identity(d["task"])
    for key in _LATER_AGENT_FIELDS:
        if d["agent"].get(key) is None:
            d["agent"].pop(key, None)
    extra = d["driver"].get("extra") or {}
    for key in _METERING_DRIVER_FIELDS + tuple(k for k in _LATER_DRIVER_FIELDS if extra.get(k) is None):
        extra.pop(key, None)
    if not d["budget"].get("working_time"):  # added later: cells without it keep their ids
        d["budget"].pop("working_time", None)
    if not d["budget"].get("max_reprompts"):  # cells without re-prompting keep the ids they had before it existed
        for key in _REPROMPT_FIELDS:
            d["budget"].pop(key, None)
    return d


def cell_id(spec: CellSpec) -> str:
    blob = json.dumps(_identity(spec), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def to_plain(obj: Any) -> Any:
    """OmegaConf containers and tuples to plain JSON-able python."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True, throw_on_missing=True)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
