"""The agent side of `protocol: paper`: a cell's workspace, environment, launch and grading API as the release
(rdagent 1.0.0, contracts/release.py) gives them to its agent.

The release (core/utils.py setup_workspace and init_run_meta, run.py) lays a run out as

  code/ output/ reports/
  models/<BASE_MODEL>     a link to the base model (here: to the read-only model cache)
  data                    a link to the train data as the benchmark's data.py writes it (built once per task config)
  description.md          links to the benchmark's texts in the release's folder (read-only in the sandbox)
  instructions.md
  eval.py                 the benchmark's expose_files, where it has some
  run_meta.json           start_time, timeout_s, last_submit_time, end_time (the grader keeps it as the release's
                          server does)

and its agent's start.sh adds AGENTS.md and timer.sh. Nothing of a2rl's is in it: no run.json, no token, no HOME (the
agent's HOME is a folder beside the workspace), so the `ls -la` the release's prompt shows is the release's. The
environment is run.py's: TASK, BASE_MODEL, WORKSPACE, MODEL_PATH, DATA_PATH, OUTPUT_DIR, GRADING_SERVER_URL (the cell's
grading relay, which adds the run's token: orchestrator/grading_relay.py), besides what every sandboxed agent gets.

Which cells: a CLI agent on a task graded by `protocol: paper` whose class names its benchmark in the release
(Task.original_benchmark). Built-in agents (a2rl's scripts, which read run.json) keep a2rl's side everywhere.
"""
from __future__ import annotations

import os
from pathlib import Path

from agents.cli.release import ReleaseLaunch
from contracts.file_lock import build_once
from contracts.registry import register
from contracts.release import release_root
from contracts.specs import CellSpec, ConfigError
from contracts.task import CellTask, Task, release_benchmark
from contracts.task_spec import TaskSpec
from evaluators.workspace_files import run_meta, write_run_meta
from orchestrator.agent_sides import AgentSide, CellStart, Opened
from orchestrator.grading_relay import GradingRelay, peer_uids
from orchestrator.sandbox import Settings, agent_ids
from orchestrator.workspace import agent_env, material_key, new_workspace


@register("agent_side", "paper")
class ReleaseSide(AgentSide):
    name = "paper"
    api = "release"                 # the release's grading server's answers (evaluators/grading_api.py)
    reads_release = True

    def serves(self, cell: CellSpec) -> bool:
        return cell.agent.kind == "cli" and benchmark(cell.task) is not None

    def check(self, cell: CellSpec, sandbox_cfg: dict) -> None:
        """The CLI runs the release's start.sh (its prompt and flags), and reaches its grader through a relay that
        adds the run's token: what cannot hold is one line now."""
        model_name(cell)
        ignored = sorted(k for k in ("preamble", "extra_args") if (cell.agent.args or {}).get(k))
        if ignored:
            raise ConfigError(f"agent {cell.agent.name} on task {cell.task_name} (protocol paper) launches as the "
                              f"release does, which has no {' or '.join(ignored)}: drop agent.args.{ignored[0]}, or "
                              f"run the task with task.protocol=a2rl")
        if cell.mode and (cell.mode.get("instructions") or "").strip():
            raise ConfigError(f"mode {cell.mode_name} tells agents its rules in their instructions, and the release's "
                              f"prompt (agent {cell.agent.name}, task {cell.task_name}, protocol paper) has no place "
                              "for them: compare training routes with task.protocol=a2rl, or use mode=free")
        settings = Settings.from_cfg(sandbox_cfg)
        if settings.network == "host" and agent_ids(cell.cell_id, settings) is None:
            raise ConfigError(f"agent {cell.agent.name} on task {cell.task_name} (protocol paper) would reach its "
                              "grader through a relay on this machine's loopback that, with sandbox.network=host and "
                              "no uid of its own per agent (a2rl not run as root), other cells could use too: run a2rl "
                              "as root, or use sandbox.network=isolated")

    def open(self, start: CellStart) -> Opened:
        cell, workspace = start.cell, start.workspace
        release_dir = release_root(start.cache_dir)
        data_dir = release_data(start.task.task, start.cache_dir)
        materialise_release(workspace, cell, start.task, data_dir=data_dir, base_model_dir=start.base_model,
                            release_dir=release_dir, started=start.budget_started, code_files=start.code_files)
        relay = GradingRelay(start.grading_url, start.token,
                             allowed_uids=peer_uids(start.sandbox.network, agent_ids(cell.cell_id, start.sandbox)))
        port = relay.start()
        home = workspace.with_name(workspace.name + ".home")  # the release's agent has a HOME outside its run folder
        name = model_name(cell)
        env = agent_env(workspace, home=home, task=str(start.task.release_benchmark), base_model=name,
                        model_path=workspace / "models" / name, grading_url=f"http://127.0.0.1:{port}",
                        cpus=cell.budget.cpus)
        folder = start.task.bench_dir  # a benchmark folder outside the release (smith_task.py)
        return Opened(env=env, launch=ReleaseLaunch(self.name, release_dir), home=home,
                      readonly=[release_dir, data_dir, *linked_from(data_dir), *([folder] if folder else [])],
                      forward=[("127.0.0.1", port)],
                      close=relay.close)


def benchmark(task: TaskSpec) -> str | None:
    """The task's benchmark in the release (None: the release has no such task)."""
    try:
        return release_benchmark(task)
    except ConfigError:  # a protocol the task has no variant for: refused where the task is built, not here
        return None


def release_data(task: Task, cache_dir: Path) -> Path:
    """The task's train data as the release's data.py writes it, built once per task config."""
    def build(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        task.original_data(tmp)

    return build_once(cache_dir / "tasks" / f"{task.name}-{material_key(task.spec)}-original", build)


def materialise_release(workspace: Path, cell: CellSpec, task: CellTask, *, data_dir: Path, base_model_dir: Path,
                        release_dir: Path, started: float, code_files: dict[str, Path] | None = None) -> Path:
    """The release's workspace (the layout above)."""
    new_workspace(workspace, folders=("output", "reports"), model_link=f"models/{model_name(cell)}",
                  base_model_dir=base_model_dir, code_files=code_files)
    os.symlink(data_dir, workspace / "data", target_is_directory=True)
    bench = task.bench_dir or release_dir / "benchmarks" / str(task.release_benchmark)
    for name, source in [("description.md", bench / "description.md"),
                         ("instructions.md", release_dir / "core" / "instructions.md"),
                         *[(name, bench / name) for name in task.release_exposed]]:
        if source.exists():  # as the release's ensure_symlink: a missing source is no link
            os.symlink(source, workspace / name)
    write_run_meta(workspace, run_meta(int(started), int(cell.budget.wall_time_s)))  # as init_run_meta writes it
    return workspace


def model_name(cell: CellSpec) -> str:
    """BASE_MODEL as the release names it: the hub id (or a2rl's local model name), which models/ nests under."""
    name = str(cell.task.base_model)
    if not name or name.startswith("/") or ".." in Path(name).parts:
        raise ConfigError(f"task {cell.task_name}: base_model={name!r} cannot name a folder under models/ in a paper "
                          "workspace (give a hub id such as Qwen/Qwen2.5-1.5B-Instruct or a local model's name)")
    return name


def linked_from(folder: Path) -> list[Path]:
    """What the links directly inside a folder point to (the release's data/: ALFWorld's train games), for the
    sandbox to show read-only."""
    return [(folder / name).resolve() for name in os.listdir(folder) if (folder / name).is_symlink()]
