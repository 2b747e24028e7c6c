"""A task's config, typed and checked: its class, base model, own knobs, and grading and rollout settings.

A task's YAML (conf/task/<name>.yaml) holds its name, its registered class (`cls`), its base model, the class's own
knobs (constructor arguments, checked by contracts.task.build_task) and two blocks of service settings, `grader:`
and `rollout:`. Every service setting has one default, in conf/task_defaults.yaml; a key nobody knows is a
ConfigError that names the task. The cell's identity hashes the YAML as written (`config`), so a default added there
changes no cell id.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from contracts.errors import ConfigError
from contracts.identity import task_identity

DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "conf" / "task_defaults.yaml"

# Keys of a task config that are not the class's own knobs.
SPEC_KEYS = ("name", "cls", "base_model", "level", "description", "protocol", "grader", "rollout", "contamination",
             "known_models", "retention", "reference_score", "reference_source")


@dataclass(frozen=True)
class GraderSettings:
    backend: str
    device: str
    batch_size: int
    max_new_tokens: int
    num_cpus: float
    num_gpus: float
    threads: int | None
    num_replicas: int
    max_concurrent: int
    infra_retries: int
    memory_gb: float | None         # the replica's memory: reserved in Ray and enforced (null: half the node's)
    submission_max_files: int       # a submitted folder's limits (its private copy is refused past them)
    submission_max_gb: float
    gpu_memory_utilization: float   # the vLLM backend's engine settings (the transformers backend ignores them)
    tensor_parallel_size: int
    max_model_len: int | None
    kv_cache_gb: float | None


@dataclass(frozen=True)
class RolloutSettings:
    num_hosts: int | None           # host actors (null: one per CPU of the cluster, at most max_sessions_per_run)
    num_replicas: int
    max_sessions_per_run: int
    idle_timeout_s: float
    host_cpus: float
    router_cpus: float


@dataclass(frozen=True)
class ContaminationSettings:
    ngram: int                      # words per n-gram; an item shorter than that must occur whole
    threshold: float                # share of an item's n-grams found in one file that flags it
    max_file_mb: float              # larger files are not read (weights and archives are skipped anyway)
    near_copy_tol: float            # a model within this relative L2 distance of the base's is a copy of it
    known_closer_ratio: float       # known_checkpoint: at most this share of its distance to the base from a
                                    # known model (evaluators/identity.py)
    max_files: int                  # a scan reads at most this many files, this many MB in all, for this long;
    max_total_mb: float             # past a limit it stops and its record says "scan truncated"
    max_s: float


# key -> (type, least value); None: the setting may be null
_RULES: dict[str, tuple[type, float | None]] = {
    "backend": (str, None), "device": (str, None), "batch_size": (int, 1), "max_new_tokens": (int, 1),
    "num_cpus": (float, 0), "num_gpus": (float, 0), "threads": (int, 1), "num_replicas": (int, 1),
    "max_concurrent": (int, 1), "infra_retries": (int, 0), "memory_gb": (float, 0),
    "submission_max_files": (int, 1), "submission_max_gb": (float, 0), "gpu_memory_utilization": (float, 0),
    "tensor_parallel_size": (int, 1), "max_model_len": (int, 1), "kv_cache_gb": (float, 0), "num_hosts": (int, 1),
    "max_sessions_per_run": (int, 1), "idle_timeout_s": (float, 0), "host_cpus": (float, 0), "router_cpus": (float, 0),
    "ngram": (int, 1), "threshold": (float, 0), "max_file_mb": (float, 0), "near_copy_tol": (float, 0),
    "known_closer_ratio": (float, 0),
    "max_files": (int, 1), "max_total_mb": (float, 0), "max_s": (float, 0),
}
_NULLABLE = {"threads", "max_model_len", "kv_cache_gb", "memory_gb", "num_hosts"}


@cache
def defaults() -> dict:
    return yaml.safe_load(DEFAULTS_FILE.read_text())


def _number(where: str, key: str, value: Any) -> Any:
    kind, least = _RULES[key]
    if value is None and key in _NULLABLE:
        return None
    if kind is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}.{key}={value!r} must be a non-empty string")
        return value
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or (kind is int and value != int(value)) or (least is not None and value < least):
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{where}.{key}={value!r} must be {what} >= {least:g}"
                          + (" (or null)" if key in _NULLABLE else ""))
    return int(value) if kind is int else float(value)


def _settings(settings_cls: type, block: str, given: Any, task_where: str) -> Any:
    base = defaults()[block]
    where = f"{task_where}: {block}"
    if given is not None and not isinstance(given, dict):
        raise ConfigError(f"{where} must be a mapping of settings, got {given!r}")
    given = dict(given or {})
    unknown = sorted(set(given) - set(base))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(base)} "
                          f"(defaults in conf/task_defaults.yaml)")
    merged = {**base, **given}
    return settings_cls(**{f.name: _number(where, f.name, merged[f.name]) for f in dataclasses.fields(settings_cls)})


def reference_of(config: dict, where: str) -> tuple[float | None, str | None]:
    """A task's reference score and its documented source, checked: a score needs its source."""
    score = config.get("reference_score", defaults()["reference_score"])
    source = config.get("reference_source", defaults()["reference_source"])
    if score is None:
        return None, source
    if isinstance(score, bool) or not isinstance(score, (int, float)) or score != score:
        raise ConfigError(f"{where}: reference_score={score!r} must be a number on the task's score scale (0-100)")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}: reference_score={score} needs reference_source: where the number comes from (a "
                          "reference run of a2rl's agents: sweep, agent, seeds, commit; or a publication with its "
                          "table), so a reader can check it")
    return float(score), source.strip()


@dataclass(frozen=True)
class RetentionSettings:
    """Another task's hidden items the final submission is also scored on, and the drop from the base's score there
    that is allowed before the cell is flagged `retention_drop`."""
    task: dict                      # that task's config (orchestrator.sweep.check_task reads it from conf/task)
    max_drop: float                 # points (scores are percentages)


def _known_models(given: Any, where: str) -> tuple[str, ...]:
    if given is None:
        return ()
    if not isinstance(given, (list, tuple)) or not all(isinstance(m, str) and m for m in given):
        raise ConfigError(f"{where}: known_models={given!r} must be a list of hub ids or model directories, e.g. "
                          "[Qwen/Qwen2.5-1.5B-Instruct]")
    return tuple(given)


def _retention(given: Any, where: str) -> RetentionSettings | None:
    if given is None:
        return None
    if not isinstance(given, dict) or set(given) != {"task", "max_drop"}:
        raise ConfigError(f"{where}: retention={given!r} must be {{task: <a conf/task name>, max_drop: <points>}} "
                          "(or null: off)")
    task = given["task"]
    if isinstance(task, str):
        raise ConfigError(f"{where}: retention.task={task!r} is a name not yet read from conf/task (the sweep reads "
                          "it; a TaskSpec built by hand needs the task's config)")
    if not isinstance(task, dict):
        raise ConfigError(f"{where}: retention.task must name a task in conf/task, got {task!r}")
    if task.get("retention") is not None:
        raise ConfigError(f"{where}: retention.task {task.get('name')!r} has a retention of its own; one level only")
    max_drop = given["max_drop"]
    if isinstance(max_drop, bool) or not isinstance(max_drop, (int, float)) or max_drop < 0:
        raise ConfigError(f"{where}: retention.max_drop={max_drop!r} must be a number of points >= 0")
    TaskSpec.from_config(task)  # its own config errors, named
    return RetentionSettings(task=task, max_drop=float(max_drop))


@dataclass(frozen=True)
class TaskSpec:
    name: str
    cls: str                        # the registered task class (contracts.registry, kind "task")
    base_model: str
    level: int
    description: str
    protocol: str                   # how the task is graded (the task class grades by it: contracts.task.protocols)
    grader: GraderSettings
    rollout: RolloutSettings
    contamination: ContaminationSettings
    known_models: tuple[str, ...]   # public siblings of the base model (hub ids or directories): known_checkpoint
    retention: RetentionSettings | None  # another task's items the final submission is also scored on (None: off)
    params: dict                    # the class's own knobs
    config: dict                    # the YAML as written
    # What a good run scores on this task under its protocol and base model, and where that number comes from (a
    # reference run of a2rl's own agents, or a published result with its citation): scores are anchored between the
    # baseline (0) and it (1), so tasks of different difficulty pool (orchestrator/analysis/tables.py). None: no
    # reference, the task's cells have no anchored score.
    reference_score: float | None = None
    reference_source: str | None = None

    @classmethod
    def from_config(cls, config: dict) -> "TaskSpec":
        config = dict(config)
        name = config.get("name")
        if not name or not isinstance(name, str):
            raise ConfigError(f"a task config needs a name, got {config}")
        where = f"task {name}"
        for key in ("cls", "base_model"):
            if not config.get(key) or not isinstance(config[key], str):
                raise ConfigError(f"{where}: {key} is missing")
        level = config.get("level", defaults()["level"])
        if level not in (1, 2, 3):
            raise ConfigError(f"{where}: level={level!r} must be 1 (rule-graded), 2 (judge-graded) or 3 (interactive)")
        description = config.get("description", defaults()["description"])
        if not isinstance(description, str):
            raise ConfigError(f"{where}: description must be text, got {description!r}")
        protocol = config.get("protocol", defaults()["protocol"])
        if not isinstance(protocol, str) or not protocol:
            raise ConfigError(f"{where}: protocol={protocol!r} must be a protocol's name (e.g. paper or a2rl)")
        reference, source = reference_of(config, where)
        rollout = _settings(RolloutSettings, "rollout", config.get("rollout"), where)
        if rollout.num_hosts is None and rollout.host_cpus:
            raise ConfigError(f"{where}: rollout.num_hosts is null (one host per CPU of the cluster) while "
                              f"host_cpus={rollout.host_cpus:g} reserves CPUs for each host: set num_hosts")
        return cls(name=name, cls=config["cls"], base_model=config["base_model"], level=int(level),
                   description=description, protocol=protocol, reference_score=reference, reference_source=source,
                   grader=_settings(GraderSettings, "grader", config.get("grader"), where),
                   rollout=rollout,
                   contamination=_settings(ContaminationSettings, "contamination", config.get("contamination"),
                                           where),
                   known_models=_known_models(config.get("known_models", defaults()["known_models"]), where),
                   retention=_retention(config.get("retention", defaults()["retention"]), where),
                   params={k: v for k, v in config.items() if k not in SPEC_KEYS}, config=config)

    @property
    def identity(self) -> dict:
        """What decides the task's data and scores: its config without the grader's resources."""
        return task_identity(self.config)
