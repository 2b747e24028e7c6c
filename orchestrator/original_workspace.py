"""A paper cell's workspace and environment, as the released original gives them to its agent.

The original (rdagent 1.0.0: core/utils.py setup_workspace and init_run_meta, run.py) lays a run out as

  code/ output/ reports/
  models/<BASE_MODEL>     a link to the base model (here: to the read-only model cache)
  data                    a link to the train data as the benchmark's data.py writes it (built once per task config)
  description.md          links to the benchmark's texts in the original's folder (read-only in the sandbox)
  instructions.md
  eval.py                 the benchmark's expose_files, where it has some
  run_meta.json           start_time, timeout_s, last_submit_time, end_time (the grader keeps it as the original's
                          server does)

and its agent's start.sh adds AGENTS.md and timer.sh. Nothing of a2rl's is in it: no run.json, no token, no HOME (the
agent's HOME is a folder beside the workspace), so the `ls -la` the original's prompt shows is the original's. The
environment is run.py's: TASK, BASE_MODEL, WORKSPACE, MODEL_PATH, DATA_PATH, OUTPUT_DIR, GRADING_SERVER_URL (the cell's
grading relay, which adds the run's token: orchestrator/grading_relay.py), besides what every sandboxed agent gets.

Which cells: a CLI agent on a task graded by `protocol: paper` whose class names its original benchmark
(Task.original_benchmark). Built-in agents (a2rl's scripts, which read run.json) keep a2rl's workspace everywhere.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from contracts.specs import CellSpec, ConfigError
from contracts.task import load_task, task_class
from contracts.task_spec import TaskSpec
from evaluators.workspace_files import run_meta, write_run_meta
from orchestrator.workspace import base_env, material_key


def paper_side(cell: CellSpec) -> bool:
    """Whether the cell's agent gets the original's agent side (else a2rl's)."""
    return (cell.agent.kind == "cli" and cell.task.protocol == "paper"
            and getattr(task_class(cell.task.cls), "original_benchmark", None) is not None)


def original_data(task: TaskSpec, cache_dir: Path) -> Path:
    """The task's train data as the original's data.py writes it, built once per task config (atomically)."""
    folder = cache_dir / "tasks" / f"{task.name}-{material_key(task)}-original"
    if folder.exists():
        return folder
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        load_task(task, cache_dir).original_data(tmp)
        os.rename(tmp, folder)  # concurrent builders race harmlessly
    except OSError:
        if not folder.exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def materialise_original(workspace: Path, cell: CellSpec, *, data_dir: Path, base_model_dir: Path,
                         original_dir: Path, started: float, code_files: dict[str, Path] | None = None) -> Path:
    benchmark = task_class(cell.task.cls).original_benchmark
    exposed = task_class(cell.task.cls).original_exposed
    if workspace.exists():  # a half-made workspace from a crashed attempt is never reused
        shutil.rmtree(workspace)
    for name in ("code", "output", "reports"):
        (workspace / name).mkdir(parents=True, exist_ok=True)
    model_link = workspace / "models" / model_name(cell)
    model_link.parent.mkdir(parents=True)
    os.symlink(base_model_dir, model_link, target_is_directory=True)
    os.symlink(data_dir, workspace / "data", target_is_directory=True)
    bench = original_dir / "benchmarks" / benchmark
    for name, source in [("description.md", bench / "description.md"),
                         ("instructions.md", original_dir / "core" / "instructions.md"),
                         *[(name, bench / name) for name in exposed]]:
        if source.exists():  # as the original's ensure_symlink: a missing source is no link
            os.symlink(source, workspace / name)
    write_run_meta(workspace, run_meta(int(started), int(cell.budget.wall_time_s)))  # as init_run_meta writes it
    for name, path in (code_files or {}).items():  # agent.files: what the agent's code/ starts with
        shutil.copy2(path, workspace / "code" / name)
    return workspace


def model_name(cell: CellSpec) -> str:
    """BASE_MODEL as the original names it: the hub id (or a2rl's local model name), which models/ nests under."""
    name = str(cell.task.base_model)
    if not name or name.startswith("/") or ".." in Path(name).parts:
        raise ConfigError(f"task {cell.task_name}: base_model={name!r} cannot name a folder under models/ in a paper "
                          "workspace (give a hub id such as Qwen/Qwen2.5-1.5B-Instruct or a local model's name)")
    return name


def home_for(workspace: Path) -> Path:
    """The agent's HOME: beside its workspace (the original's agent has a HOME outside its run folder too)."""
    return workspace.with_name(workspace.name + ".home")


def original_env(workspace: Path, cell: CellSpec, grading_url: str, cpus: float, inherit=None) -> dict:
    """run.py's variables, over the clean environment every sandboxed agent gets (orchestrator/workspace.py)."""
    env = base_env(home_for(workspace), cpus, inherit)
    name = model_name(cell)
    env.update({
        "TASK": task_class(cell.task.cls).original_benchmark,
        "BASE_MODEL": name,
        "WORKSPACE": str(workspace),
        "MODEL_PATH": str(workspace / "models" / name),
        "DATA_PATH": str(workspace / "data"),
        "OUTPUT_DIR": str(workspace / "output"),
        "GRADING_SERVER_URL": grading_url,
    })
    return env
