"""Agent sides: what a cell's agent is given and how it is started, one class per protocol, registered by its name.

A task's protocol (`protocol:` in conf/task/) says how the task is graded; its agent side says what the agent of a cell
on that task gets: the workspace (built over orchestrator/workspace.py's new_workspace), the environment, the grading
endpoint (the grader itself, or a relay in front of it), how a CLI is launched (agents/cli: a2rl's prompt, or the
release's start.sh) and the grading API its run is registered with (contracts/runs.APIS, evaluators/grading_api.py).

  a2rl    a2rl's own: instructions.md, run.json, the run token in the environment (a2rl.py)
  paper   the release's (rdagent 1.0.0): its workspace, run.py's environment, its start.sh, its grading API through a
          relay that adds the token (release.py); only for CLI agents on a task the release has

`agent_side(cell)` chooses once per cell: the side registered under the task's protocol when it serves the cell's agent,
else a2rl's. The cell (orchestrator/cell.py start_agent), the preflight, the artefacts list, the CLI session, the run
registry and the grader all read that one object. A third protocol's agent side is one more registered class:

    @register("agent_side", "my_protocol")
    class MySide(AgentSide): ...
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from agents.cli.base import CliLaunch
from contracts import registry
from contracts.specs import CellSpec
from contracts.task import CellTask
from orchestrator.sandbox import Settings

registry.search("orchestrator.agent_sides")  # the sides defined in this package, found on the first lookup


@dataclass(frozen=True)
class CellStart:
    """What the cell knows when it asks its agent side for a workspace (orchestrator/cell.py start_agent)."""
    cell: CellSpec
    workspace: Path
    cache_dir: Path
    base_model: Path                # the resolved base model (a folder in the read-only model cache)
    code_files: dict[str, Path]     # what the agent's code/ starts with (name -> source)
    grading_url: str                # the task's grading service, e.g. http://127.0.0.1:8000/<task>
    token: str                      # the run's token
    started: float                  # the attempt's start
    budget_started: float           # when the wall-time budget started (the cell's one clock reading for it)
    deadline: float                 # when the wall-time budget ends
    task: CellTask                  # what the cell read of its task, once (interactive, the release's benchmark, ...)
    sandbox: Settings               # the cell's sandbox settings (its network, its agents' uids)


@dataclass
class Opened:
    """An agent side's answer: what the sandbox and the agent get besides the workspace it made."""
    env: dict                                       # the agent's environment
    launch: CliLaunch = field(default_factory=CliLaunch)   # how a CLI agent is launched
    home: Path | None = None                        # its HOME (None: the environment's, inside the workspace)
    readonly: list[Path] = field(default_factory=list)    # more for the sandbox to show read-only
    forward: list[tuple[str, int]] = field(default_factory=list)  # more addresses an isolated agent may reach
    close: Callable[[], None] = lambda: None        # what ends with the cell (a relay)


class AgentSide:
    name: str = ""                  # the protocol whose agent side it is (its registry name)
    api: str = "a2rl"               # the grading API its runs are answered in (contracts/runs.APIS)
    reads_release: bool = False     # its cells read the release's files (the artefacts list fetches its wheel)

    def serves(self, cell: CellSpec) -> bool:
        """Whether this side is the cell's (else a2rl's is)."""
        return True

    def check(self, cell: CellSpec, sandbox_cfg: dict) -> None:
        """Before any cell starts: a ConfigError naming what cannot hold for this cell on this side."""

    def open(self, start: CellStart) -> Opened:
        """Make the workspace at start.workspace and say what else the agent gets."""
        raise NotImplementedError


def agent_side(cell: CellSpec) -> AgentSide:
    """The cell's agent side: the one registered under its task's protocol when it serves the cell, else a2rl's."""
    protocol = cell.task.protocol
    if protocol in registry.names("agent_side"):
        side = registry.lookup("agent_side", protocol)()
        if side.serves(cell):
            return side
    return registry.lookup("agent_side", "a2rl")()
