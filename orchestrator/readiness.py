"""What a sweep needs that this machine lacks, said before anything starts (the dry run prints it): driver and judge
keys not set, agent CLIs not installed, task data not present, base models not in the cache. None of these stops a
dry run; a real run refuses a missing key or CLI with the same words when it gets there."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from contracts.specs import CellSpec


def missing(cells: list[CellSpec], cache_dir: Path, cli_path: list[str]) -> list[str]:
    from agents.cli.session import CliUnavailable
    from agents.kinds import agent_kind
    from contracts.task import load_task
    from orchestrator.sweep import judge_drivers

    out: list[str] = []
    keys: Counter = Counter()
    for c in cells:
        if c.driver.provider != "none" and c.driver.extra.get("api_key_env"):
            keys[(c.driver.extra["api_key_env"], f"driver {c.driver.name}")] += 1
    tasks = list({c.task_name: c.task for c in cells}.values())
    for judge in judge_drivers(tasks):
        if judge.get("api_key_env"):
            keys[(judge["api_key_env"], f"judge {judge.get('name')}")] += 0
    for (var, who), n in sorted(keys.items()):
        if not os.environ.get(var):
            out.append(f"key: ${var} is not set ({who}{f', {n} cells' if n else ''})")

    seen_agents = set()
    for c in cells:
        if c.agent.kind == "cli" and c.agent.name not in seen_agents:
            seen_agents.add(c.agent.name)
            try:
                agent_kind("cli").session(c, cli_path)
            except CliUnavailable as e:
                out.append(f"agent CLI: {e}")

    for task in tasks:
        try:
            out += load_task(task, cache_dir).missing_data()
        except Exception as e:  # noqa: BLE001 - a dry run reports, it does not stop
            out.append(f"task {task.get('name')}: {type(e).__name__}: {e}")
        for role, model in [("base model", task.get("base_model", "")),
                            *(("known model", m) for m in task.get("known_models") or [])]:
            model = str(model)
            if "/" in model and not Path(model).expanduser().exists() and not _model_cached(model, cache_dir):
                out.append(f"{role} {model} ({task.get('name')}) is not in {cache_dir / 'models'}: it is fetched "
                           "once " + ("at the first cell" if role == "base model" else "when its grader starts")
                           + " (needs the network and the disk)")
    return out


def _model_cached(repo_id: str, cache_dir: Path) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(cache_dir / "models" / "hub"))
    return isinstance(found, str)
