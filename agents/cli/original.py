"""A CLI agent launched as the original benchmark launches it (the agent side of `protocol: paper`).

In the released original (rdagent 1.0.0, contracts/original.py) a claude, codex or gemini cell is `bash
agents/<name>/start.sh` under run.py's environment: the script copies AGENTS.md into the workspace, writes timer.sh,
builds one prompt (task, paths, description.md, instructions.md, `ls -la` of the workspace, the first data lines, the
mission list, the time budget) and runs the CLI with its flags under `timeout`. a2rl runs that very script, read from
the pinned wheel, in the cell's sandbox, so the prompt, flags and timeout are the original's by construction. a2rl
adds only what hooks the CLI to the driver proxy (the adapter's base URL, per-cell key and config files, as in every
cell), <NAME>_BIN naming the installed executable, and <NAME>_MODEL naming the driver's model (run.py lets the
environment override config.yaml's values the same way).

The original's opencode and openhands start.sh run pipelines that are not in the release (opencode-rl and
openhands-rl, from a local checkout); their adapters have no `original`, and their paper cells get the original's
workspace, environment and grading API with a2rl's launch and prompt (recorded as such).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from agents.cli.base import CliAdapter, Context, Launch


def start_script(original_dir: Path, adapter: CliAdapter) -> Path:
    return original_dir / "agents" / str(adapter.original) / "start.sh"


def config_env(original_dir: Path, adapter: CliAdapter) -> dict[str, str]:
    """The original agent's config.yaml `env_vars` (run.py puts them under the environment's own values)."""
    data = yaml.safe_load((original_dir / "agents" / str(adapter.original) / "config.yaml").read_text()) or {}
    return {str(k): str(v) for k, v in (data.get("env_vars") or {}).items()}


def original_launch(adapter: CliAdapter, ctx: Context, exe: Path, original_dir: Path) -> Launch:
    """`bash start.sh` with the adapter's own connection to the proxy (its config files are written by launch())."""
    own = adapter.launch(ctx)
    prefix = str(adapter.original).upper()
    env = {**config_env(original_dir, adapter), **own.env, f"{prefix}_BIN": str(exe)}
    if ctx.model:
        env[f"{prefix}_MODEL"] = ctx.model
    return Launch(["bash", str(start_script(original_dir, adapter))], env)


def record(adapter: CliAdapter, original_dir: Path | None, launch: Launch) -> dict:
    """What the cell's outcome says of its agent side: what ran, what of the original's launch does not hold here."""
    if adapter.original is None or original_dir is None:
        return {"agent_side": "paper", "launch": "a2rl", "not_held": [
            f"the original's {adapter.name} start.sh runs a pipeline that is not in the release: the cell runs "
            "a2rl's launch and prompt (instructions.md after description.md) with the original's workspace, "
            "environment and grading API"]}
    prefix = str(adapter.original).upper()
    named = {*config_env(original_dir, adapter), f"{prefix}_BIN", f"{prefix}_MODEL"}
    return {"agent_side": "paper", "launch": f"rdagent 1.0.0 agents/{adapter.original}/start.sh",
            "env": {k: v for k, v in launch.env.items() if k in named}, "not_held": list(adapter.original_not_held)}
