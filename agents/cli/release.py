"""A CLI agent launched as the release launches it (the launch of `protocol: paper`'s agent side).

In the release (rdagent 1.0.0, contracts/release.py) a claude, codex or gemini cell is `bash agents/<name>/start.sh`
under run.py's environment: the script copies AGENTS.md into the workspace, writes timer.sh, builds one prompt (task,
paths, description.md, instructions.md, `ls -la` of the workspace, the first data lines, the mission list, the time
budget) and runs the CLI with its flags under `timeout`. a2rl runs that very script, read from the pinned wheel, in the
cell's sandbox, so the prompt, flags and timeout are the release's by construction. a2rl adds only what hooks the CLI
to the driver proxy (the adapter's base URL, per-cell key and config files, as in every cell), <NAME>_BIN naming the
installed executable, and <NAME>_MODEL naming the driver's model (run.py lets the environment override config.yaml's
values the same way).

The release's opencode and openhands start.sh run pipelines that are not in the release (opencode-rl and
openhands-rl, from a local checkout); their adapters have no `release`, and their paper cells get the release's
workspace, environment and grading API with a2rl's launch and prompt (recorded as such).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from agents.cli.base import CliAdapter, CliLaunch, Context, Launch


def start_script(release_dir: Path, adapter: CliAdapter) -> Path:
    return release_dir / "agents" / str(adapter.release) / "start.sh"


def config_env(release_dir: Path, adapter: CliAdapter) -> dict[str, str]:
    """The release agent's config.yaml `env_vars` (run.py puts them under the environment's own values)."""
    data = yaml.safe_load((release_dir / "agents" / str(adapter.release) / "config.yaml").read_text()) or {}
    return {str(k): str(v) for k, v in (data.get("env_vars") or {}).items()}


class ReleaseLaunch(CliLaunch):
    """`bash start.sh` from the release (release_dir: its autorl_bench folder) for a CLI that has one, with the
    adapter's own connection to the proxy (its config files are written by launch()); a2rl's command line on the
    release's workspace texts for one that has none."""
    prompt_before = ("description.md",)

    def __init__(self, side: str, release_dir: Path):
        self.side, self.release_dir = side, release_dir

    def command(self, adapter: CliAdapter, ctx: Context, exe: Path) -> tuple[list[str], Launch, dict]:
        if adapter.release is None:
            argv, launch, _ = super().command(adapter, ctx, exe)
            return argv, launch, {"agent_side": self.side, "launch": "a2rl", "not_held": [
                f"the release's {adapter.name} start.sh runs a pipeline that is not in it: the cell runs a2rl's "
                "launch and prompt (instructions.md after description.md) with the release's workspace, "
                "environment and grading API"]}
        own = adapter.launch(ctx)
        prefix = str(adapter.release).upper()
        env = {**config_env(self.release_dir, adapter), **own.env, f"{prefix}_BIN": str(exe)}
        if ctx.model:
            env[f"{prefix}_MODEL"] = ctx.model
        launch = Launch(["bash", str(start_script(self.release_dir, adapter))], env)
        named = {*config_env(self.release_dir, adapter), f"{prefix}_BIN", f"{prefix}_MODEL"}
        return launch.argv, launch, {  # what ran, and what of the release's launch does not hold here
            "agent_side": self.side, "launch": f"rdagent 1.0.0 agents/{adapter.release}/start.sh",
            "env": {k: v for k, v in launch.env.items() if k in named}, "not_held": list(adapter.release_not_held)}
