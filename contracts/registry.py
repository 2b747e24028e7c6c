"""One registry for every name a config can hold: tasks, agent kinds, CLI adapters, evaluator backends, base models,
tokenizer corpora and driver providers; the grading protocols (contracts/protocols.py), a task's variant under each
(contracts/task.py task_variant) and their agent sides (orchestrator/agent_sides).

A module registers what it defines under a name with a decorator, the way Inspect's `@task` does:

    @register("task", "reasoning_gym")
    class ReasoningGymTask(Task): ...

and a config names it (`cls: reasoning_gym`, `backend: transformers`, `kind: cli`); `lookup(kind, name)` finds it. A
name is known once its module has been imported; the layer that looks names of a kind up says which packages define
them (`search("evaluators.tasks", "envs")`), and a lookup that misses imports their modules once before it gives up.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, TypeVar

from contracts.errors import ConfigError

KINDS = ("task", "task_variant", "protocol", "agent_kind", "agent_side", "cli_adapter", "backend", "base_model",
         "tokenizer_corpus", "provider")

T = TypeVar("T")

_entries: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
_search: list[str] = []      # packages (or modules) whose modules define names; imported on the first miss
_searched: set[str] = set()


def _check_kind(kind: str) -> None:
    if kind not in _entries:
        raise KeyError(f"unknown registry kind {kind!r}; kinds are {', '.join(KINDS)}")


def register(kind: str, name: str) -> Callable[[T], T]:
    """Decorator: `obj` is what `lookup(kind, name)` returns. Registering another object under a taken name is a
    mistake; registering the same one again (a module imported twice) is not."""
    _check_kind(kind)

    def add(obj: T) -> T:
        held = _entries[kind].get(name)
        if held is not None and held is not obj and _qualname(held) != _qualname(obj):
            raise ValueError(f"{kind} {name!r} is registered twice: {_qualname(held)} and {_qualname(obj)}")
        _entries[kind][name] = obj
        return obj

    return add


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def search(*packages: str) -> None:
    """Where names are defined: each package's modules (or the module itself) are imported once, on the first
    lookup that misses."""
    for package in packages:
        if package not in _search:
            _search.append(package)


def _import_search_path() -> None:
    for package in list(_search):
        if package in _searched:
            continue
        _searched.add(package)
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package}.{info.name}")


def lookup(kind: str, name: str) -> Any:
    """What is registered as `name`; a ConfigError listing the known names when nothing is."""
    _check_kind(kind)
    if name not in _entries[kind]:
        _import_search_path()
    if name not in _entries[kind]:
        raise ConfigError(f"unknown {kind.replace('_', ' ')} {name!r}; known: {', '.join(names(kind)) or 'none'}")
    return _entries[kind][name]


def names(kind: str) -> list[str]:
    _check_kind(kind)
    _import_search_path()
    return sorted(_entries[kind])
