"""Expand a sweep (agents x drivers x tasks x modes x seeds, one budget) into cells.

Names in a sweep resolve to files of the config groups conf/agent, conf/driver, conf/task. Selecting a group
on the command line (`agent=command agent.command=...`, `task=gsm_symbolic`) narrows the sweep to that one
entry and uses the composed config with its overrides.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from contracts.specs import AgentSpec, Budget, CellSpec, ConfigError, DriverSpec, to_plain
from contracts.task import task_class
from contracts.task_spec import TaskSpec

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("agent", "driver", "task", "mode", "sweep", "cluster", "logger", "budget")


def known(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def load_named(group: str, name: str, where: str, _seen: tuple[str, ...] = ()) -> dict:
    """conf/<group>/<name>.yaml. A file may extend others of its group the way Hydra composes it when selected on
    the command line (`defaults: [alfworld, _self_]`: the named files first, this one on top)."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown {group} {name!r} in {where}; known {group}s: {', '.join(known(group))}")
    if name in _seen:
        raise ConfigError(f"{group} {name!r} extends itself: {' -> '.join((*_seen, name))}")
    data = OmegaConf.load(path)
    bases = list(data.pop("defaults", None) or [])
    if "_self_" not in bases:
        bases.append("_self_")
    merged = OmegaConf.create({})
    for base in bases:
        if not isinstance(base, str):
            raise ConfigError(f"{path}: defaults may only name other {group} files, got {base!r}")
        part = data if base == "_self_" else load_named(group, base, str(path), (*_seen, name))
        merged = OmegaConf.merge(merged, part)
    return to_plain(merged)


def _names(cfg: DictConfig, group: str, listed_key: str) -> list[tuple[str, dict | None]]:
    """(name, composed config or None) for each entry; a group selected on the command line wins."""
    selected = cfg.get(group)
    if selected is not None:
        try:
            data = to_plain(selected)
        except MissingMandatoryValue as e:  # e.g. `agent=command` without agent.command
            raise ConfigError(f"{group}.{e.key} is required for {group} {selected.get('name')!r}; "
                              f"set it, e.g. {group}.{e.key}=...") from None
        return [(data.get("name") or "?", data)]
    names = cfg.sweep.get(listed_key)
    if names is None or len(names) == 0:
        raise ConfigError(f"sweep.{listed_key} is empty in sweep {cfg.sweep.get('name')!r}; list at least one")
    out = []
    for entry in names:  # a name in conf/<group>/, or a whole config inline (e.g. a driver for a local server)
        if isinstance(entry, DictConfig):
            data = to_plain(entry)
            if not data.get("name"):
                raise ConfigError(f"sweep.{listed_key}: the inline entry {data} needs a name")
            out.append((str(data["name"]), data))
        else:
            out.append((str(entry), None))
    return out


def seeds_of(sweep: DictConfig) -> list[int]:
    seeds = sweep.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds <= 0:
            raise ConfigError(f"sweep.seeds={seeds} must be a positive count or a non-empty list")
        return list(range(seeds))
    seeds = to_plain(seeds) if seeds is not None else []
    if not seeds:
        raise ConfigError("sweep.seeds is empty; give a list such as [0, 1] or a count such as 3")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError(f"sweep.seeds={seeds} must be integers")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"sweep.seeds={seeds} has duplicates")
    return seeds


EXTRA_SEED_KEYS = ("task", "agent", "driver", "mode", "seeds")


def extra_seeds_of(sweep: DictConfig, seeds: list[int]) -> dict[tuple[str, str, str, str], list[int]]:
    """sweep.extra_seeds: more seeds for some groups only, beside sweep.seeds for all (what `python -m orchestrator
    plan` prints). Each entry names a group, {task, agent, driver (none for a reference agent), mode (default free),
    seeds: [...]}; returns {(task, agent, driver, mode): seeds}."""
    entries = to_plain(sweep.get("extra_seeds")) or []
    if not isinstance(entries, list):
        raise ConfigError(f"sweep.extra_seeds={entries!r} must be a list of {{task, agent, driver, mode, seeds}}")
    out: dict[tuple[str, str, str, str], list[int]] = {}
    for i, entry in enumerate(entries):
        where = f"sweep.extra_seeds[{i}]"
        if not isinstance(entry, dict) or not {"task", "agent", "seeds"} <= set(entry) or set(entry) - set(
                EXTRA_SEED_KEYS):
            raise ConfigError(f"{where}={entry!r} must name task, agent, seeds and optionally driver and mode, e.g. "
                              "{task: gsm8k, agent: sft, driver: none, mode: free, seeds: [3, 4]}")
        extra = entry["seeds"]
        if not isinstance(extra, list) or not extra or not all(isinstance(s, int) and not isinstance(s, bool)
                                                               for s in extra):
            raise ConfigError(f"{where}.seeds={extra!r} must be a non-empty list of integers")
        key = (str(entry["task"]), str(entry["agent"]), str(entry.get("driver") or "none"),
               str(entry.get("mode") or "free"))
        both = sorted(s for s in set(extra) if extra.count(s) > 1 or s in seeds or s in out.get(key, []))
        if both:
            raise ConfigError(f"{where}: seeds {both} are listed twice for {'/'.join(key)} (sweep.seeds {seeds} are "
                              "every group's already); list each extra seed once")
        out[key] = out.get(key, []) + list(extra)
    return out


def budget_of(cfg: DictConfig) -> Budget:
    merged = dict(to_plain(cfg.budget) or {})
    merged.update(to_plain(cfg.sweep.get("budget")) or {})
    return Budget.from_dict(merged, where="budget (conf/budget + sweep.budget)")


def agent_spec(data: dict, where: str) -> AgentSpec:
    """The agent's kind checks its config (agents.kinds)."""
    from agents.kinds import agent_kind

    try:
        kind = agent_kind(data.get("kind"))
    except ConfigError as e:
        raise ConfigError(f"{where}.{e}") from None
    return kind.spec(data, where)


def driver_spec(data: dict) -> DriverSpec:
    provider = data.get("provider", "none")
    if provider != "none":
        from agents.proxy.protocols import provider_names

        if provider not in provider_names():
            raise ConfigError(f"driver {data.get('name')!r}: provider={provider!r} is unknown; use one of "
                              f"{', '.join(provider_names())} (the wire protocol its endpoint speaks)")
        if not data.get("base_url"):
            raise ConfigError(f"driver {data.get('name')!r}: base_url is missing; e.g. https://api.anthropic.com")
    extra = {k: v for k, v in data.items() if k not in ("name", "provider", "model")}
    return DriverSpec(name=data["name"], provider=data.get("provider", "none"), model=data.get("model"), extra=extra)


def compatible_drivers(agent: AgentSpec, drivers: list[DriverSpec]) -> list[DriverSpec]:
    """The drivers whose protocol the agent speaks (an agent that speaks any: all of them)."""
    from agents.kinds import agent_kind

    speaks = agent_kind(agent.kind).providers(agent)
    if speaks is None:
        return drivers
    paired = [d for d in drivers if d.provider in speaks]
    if not paired:
        fitting = [n for n in known("driver") if load_named("driver", n, "conf/driver").get("provider") in speaks]
        raise ConfigError(f"agent {agent.name!r} speaks {'/'.join(speaks)} but no driver in the sweep does "
                          f"({', '.join(f'{d.name}: {d.provider}' for d in drivers)}); add one such, e.g. "
                          f"{', '.join(fitting) or 'a driver with provider ' + speaks[0]}")
    return paired


def smith_tasks(smith_dir: str | None) -> dict[str, dict]:
    """The benchmark folders under smith_dir as tasks `smith-<name>` (evaluators/tasks/smith_task.discover)."""
    if not smith_dir:
        return {}
    from evaluators.tasks.smith_task import discover

    found, _ = discover(smith_dir, load_named("task", "smith", "smith_dir"))
    for name, data in found.items():
        if "opencompass" in data:  # a2rl's task for that OpenCompass dataset, graded as the release grades it
            found[name] = {**load_named("task", data["opencompass"], f"smith_dir ({name})"), "name": name,
                           "protocol": "paper"}
    return found


def smith_lines(smith_dir: str | None) -> list[str]:
    """What the dry run says of smith_dir: its folders as tasks, and those left out with why."""
    if not smith_dir:
        return []
    from evaluators.tasks.smith_task import discover

    found, left_out = discover(smith_dir, {})
    return [f"smith_dir {smith_dir}: {len(found)} benchmark folders as tasks: {', '.join(found) or 'none'}",
            *(f"  left out: {reason}" for reason in left_out.values())]


def task_config(name: str, inline: dict | None, selected: bool, smith_dir: str | None = None) -> dict:
    """A task listed by name, or inline in a sweep: an inline entry whose name has a conf/task file is that file
    with the entry's fields on top (`{name: gsm8k, base_model: Qwen/Qwen2.5-1.5B}`), else a whole config. A name
    `smith-<name>` without a file is a benchmark folder under smith_dir."""
    if inline is None:
        if name.startswith("smith-") and not (CONF_DIR / "task" / f"{name}.yaml").exists():
            found = smith_tasks(smith_dir)
            if name not in found:
                raise ConfigError(f"unknown task {name!r} in sweep.tasks: no benchmark folder named "
                                  f"{name[len('smith-'):]!r} under smith_dir={smith_dir} (the folders there: "
                                  f"{', '.join(found) or 'none'})")
            return found[name]
        return load_named("task", name, "sweep.tasks")
    if selected or not (CONF_DIR / "task" / f"{name}.yaml").exists():
        return inline  # composed by Hydra already (task=NAME on the command line), or a task of its own
    return to_plain(OmegaConf.merge(load_named("task", name, "sweep.tasks"), inline))


def check_task(data: dict) -> dict:
    """The task's config as written (a cell's identity), once its spec reads and its class is known. A judge named
    by its conf/driver file (`judge: gpt`) is replaced by that file's contents, so the cell's identity holds the
    judge's model and the grader needs no config files; so is a retention task named by its conf/task file."""
    retention = data.get("retention")
    if isinstance(retention, dict) and isinstance(retention.get("task"), str):
        other = check_task(load_named("task", retention["task"], f"task {data.get('name')}: retention.task"))
        if judge_drivers([TaskSpec.from_config(other)]):
            raise ConfigError(f"task {data.get('name')}: retention.task={retention['task']!r} is judged by an LLM; "
                              "retention scores only on a task without a judge (e.g. arithmetic, gsm8k)")
        data = {**data, "retention": {**retention, "task": other}}
    task_class(TaskSpec.from_config(data).cls)
    judge = data.get("judge")
    if isinstance(judge, str):
        judged = load_named("driver", judge, f"task {data.get('name')}: judge")
        driver_spec(judged)  # a judge's provider and base_url are checked as an agent's driver's
        data = {**data, "judge": judged}
    return data


def mode_config(data: dict, where: str) -> dict | None:
    """A training mode (conf/mode/*.yaml) as a cell holds it: None for `free` (no rule; ids stay as they were)."""
    import re

    unknown = set(data) - {"name", "instructions", "forbidden", "required"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; a mode has name, instructions, forbidden, "
                          "required")
    for group in ("forbidden", "required"):
        for label, pattern in (data.get(group) or {}).items():
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"{where}: {group}.{label}: not a regular expression ({e})") from None
    if data.get("name") == "free" and not data.get("instructions") and not data.get("forbidden") \
            and not data.get("required"):
        return None
    return data


def modes_of(cfg: DictConfig) -> list[dict | None]:
    """The sweep's training modes (`sweep.modes`, or `mode=NAME` on the command line); free when it lists none."""
    if cfg.get("mode") is None and cfg.sweep.get("modes") is None:
        return [None]
    return [mode_config(data or load_named("mode", name, "sweep.modes"), f"mode {name}")
            for name, data in _names(cfg, "mode", "modes")]


def judge_drivers(tasks: list[TaskSpec]) -> list[dict]:
    """The LLM judges of the tasks (driver configs)."""
    judges = [t.params.get("judge") for t in tasks]
    return [j for j in judges if isinstance(j, dict) and j.get("provider") != "none"]


def expand(cfg: DictConfig) -> list[CellSpec]:
    if "sweep" not in cfg or cfg.sweep is None:
        raise ConfigError(f"no sweep selected; use sweep=NAME with one of: {', '.join(known('sweep'))}")
    budget = budget_of(cfg)
    seeds = seeds_of(cfg.sweep)
    extra_seeds = extra_seeds_of(cfg.sweep, seeds)

    agents = []
    for name, data in _names(cfg, "agent", "agents"):
        where = "agent" if data is not None else f"sweep.agents ({name})"
        agents.append(agent_spec(data or load_named("agent", name, "sweep.agents"), where))
    drivers = [driver_spec(d or load_named("driver", n, "sweep.drivers")) for n, d in _names(cfg, "driver", "drivers")]
    tasks = [check_task(task_config(n, d, cfg.get("task") is not None, cfg.get("smith_dir")))
             for n, d in _names(cfg, "task", "tasks")]
    modes = modes_of(cfg)
    none_driver = DriverSpec(name="none")

    cells = []
    for task in tasks:
        spec = TaskSpec.from_config(task)  # read once: every cell of the task holds it
        for agent in agents:
            if agent.needs_driver:
                paired = [d for d in drivers if d.provider != "none"]
                if not paired:
                    raise ConfigError(f"agent {agent.name!r} needs an LLM driver but sweep.drivers has none; "
                                      f"add one of: {', '.join(d for d in known('driver') if d != 'none')}")
                paired = compatible_drivers(agent, paired)  # a CLI: only those whose protocol it speaks
            else:
                paired = [none_driver]  # reference agents need no LLM: one cell, not one per driver
            for driver in paired:
                for mode in modes:
                    group = (spec.name, agent.name, driver.name, (mode or {}).get("name") or "free")
                    for seed in seeds + extra_seeds.pop(group, []):
                        cells.append(CellSpec(agent=agent, driver=driver, task=spec, seed=seed, budget=budget,
                                              sweep=str(cfg.sweep.name), mode=mode))
    if extra_seeds:  # an entry that names no group of the sweep would add nothing: say so, do not ignore it
        groups = sorted({f"{c.task_name}/{c.agent.name}/{c.driver.name}/{c.mode_name}" for c in cells})
        raise ConfigError(f"sweep.extra_seeds names {', '.join('/'.join(k) for k in extra_seeds)}, not a group of "
                          f"this sweep (task/agent/driver/mode); its groups: {', '.join(groups)}")
    ids = [c.cell_id for c in cells]
    if len(set(ids)) != len(ids):
        raise ConfigError("the sweep lists the same cell twice (duplicate agents, tasks, drivers or modes)")
    return cells


def check_cluster(cfg: DictConfig) -> None:
    mode = cfg.cluster.get("mode")
    if mode not in ("local", "ray"):
        raise ConfigError(f"cluster.mode={mode!r} is unknown; use 'local' (start Ray here) or 'ray' (join a cluster)")
    emulated = cfg.cluster.get("emulated_gpus", 0) or 0
    if emulated < 0:
        raise ConfigError(f"cluster.emulated_gpus={emulated} must be >= 0")
    if mode == "local":
        niceness = str(cfg.cluster.get("worker_niceness", 0))  # (a string when read from RAY_worker_niceness)
        if not niceness.removeprefix("-").isdigit() or not -20 <= int(niceness) <= 19:
            raise ConfigError(f"cluster.worker_niceness={niceness!r} (or RAY_worker_niceness) must be a whole number "
                              "from -20 to 19, added to this command's niceness for Ray's workers; 0 runs them at it")
    if mode == "ray" and OmegaConf.is_missing(cfg.cluster, "workspace_root"):
        raise ConfigError("cluster.workspace_root is required with cluster=ray: a path every node can reach")
