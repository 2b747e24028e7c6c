"""Agent kinds: what `kind:` in conf/agent/<name>.yaml means, one class each, registered by name.

A kind owns its config's checks (one line naming the key and the value), its command line and files, whether it needs
an LLM driver and which drivers' protocols it speaks, and its cell's session with the driver proxy. The sweep and the
cell ask it; nothing else looks at `kind`.

  builtin   a reference agent: agents/builtin/<script>.py, run with this Python beside the agent client
  command   your command line (and your files), run in the workspace
  cli       a coding-agent CLI (agents/cli/<adapter>.py), launched once its cell has a driver key
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from agents.builtin import CLIENT, TASK_PROMPT, script_args, script_path
from agents.cli import get_adapter
from agents.cli.base import COMMON_ARGS
from agents.cli.session import AgentSession, find_cli
from contracts.registry import lookup, names, register
from contracts.specs import AgentSpec, CellSpec, ConfigError, reject_unknown

FIELDS = ("name", "kind", "script", "command", "args", "needs_driver", "adapter", "version")


class AgentKind:
    def spec(self, data: dict, where: str) -> AgentSpec:
        """The agent's spec from its config, checked."""
        fields = {k: data[k] for k in FIELDS if k in data}
        fields["args"] = fields.get("args") or {}
        if not isinstance(fields["args"], dict):
            raise ConfigError(f"{where}.args={fields['args']!r} must be a mapping of knobs")
        known = self.known_args(data)
        if known is not None:  # an agent.args key nobody reads would be silently ignored: a typo
            reject_unknown(fields["args"], known, f"{where}.args")
        files = [Path(f).expanduser().resolve() for f in data.get("files") or []]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise ConfigError(f"{where}.files: {missing} not found (paths are relative to where you run a2rl)")
        if files:
            digest = hashlib.sha256()
            for f in files:
                digest.update(f.name.encode() + b"\0" + f.read_bytes())
            fields["files"], fields["files_sha"] = [str(f) for f in files], digest.hexdigest()[:16]
        return AgentSpec(**fields)

    def known_args(self, data: dict) -> set[str] | None:
        """The agent.args keys the agent reads (None: any; your own command reads its own)."""
        return None

    def providers(self, spec: AgentSpec) -> tuple[str, ...] | None:
        """The driver providers whose wire protocol the agent speaks (None: any)."""
        return None

    def command(self, spec: AgentSpec, task_prompt: Path | None = None) -> tuple[list[str], dict[str, Path]]:
        """The agent's command line (run in its workspace) and the files its code/ starts with (name -> source).
        task_prompt: the task's render/parse module, when it has one."""
        raise NotImplementedError

    @staticmethod
    def user_files(spec: AgentSpec) -> dict[str, Path]:
        return {Path(f).name: Path(f) for f in spec.files}

    def session(self, cell: CellSpec, cli_path: list[str]) -> AgentSession | None:
        """The cell's hook into the driver proxy (None without a driver), checked before anything is spent."""
        return AgentSession(cell) if cell.driver.provider != "none" else None


@register("agent_kind", "builtin")
class BuiltinAgent(AgentKind):
    def spec(self, data: dict, where: str) -> AgentSpec:
        if not data.get("script"):
            raise ConfigError(f"{where}.script is missing for builtin agent {data.get('name')!r}")
        try:
            script_path(data["script"])
        except FileNotFoundError as e:
            raise ConfigError(f"{where}.script: {e}") from None
        return super().spec(data, where)

    def known_args(self, data: dict) -> set[str] | None:
        return script_args(data["script"])  # its DEFAULTS, which agent.args are merged over

    def command(self, spec: AgentSpec, task_prompt: Path | None = None) -> tuple[list[str], dict[str, Path]]:
        """Its script beside the agent client and the task's render/parse: what it trains on is what the grader
        sends."""
        script = script_path(spec.script)
        code = {script.name: script, CLIENT.name: CLIENT, **({TASK_PROMPT: task_prompt} if task_prompt else {})}
        return [sys.executable, f"code/{script.name}"], {**code, **self.user_files(spec)}


@register("agent_kind", "command")
class CommandAgent(AgentKind):
    def spec(self, data: dict, where: str) -> AgentSpec:
        if not data.get("command"):
            raise ConfigError(f"{where}.command is empty; e.g. agent.command='python my_agent.py'")
        return super().spec(data, where)

    def command(self, spec: AgentSpec, task_prompt: Path | None = None) -> tuple[list[str], dict[str, Path]]:
        return ["/bin/bash", "-c", spec.command], self.user_files(spec)


@register("agent_kind", "cli")
class CliAgent(AgentKind):
    def spec(self, data: dict, where: str) -> AgentSpec:
        try:
            get_adapter(data.get("adapter"))
        except ConfigError:
            raise ConfigError(f"{where}.adapter={data.get('adapter')!r} is not a CLI adapter; known adapters: "
                              f"{', '.join(names('cli_adapter'))}") from None
        data = {**data, "needs_driver": True}  # a CLI scaffold is nothing without its LLM
        if data.get("version") is not None:
            data["version"] = str(data["version"])
        return super().spec(data, where)

    def known_args(self, data: dict) -> set[str] | None:
        return {*COMMON_ARGS, *get_adapter(data["adapter"]).args}

    def providers(self, spec: AgentSpec) -> tuple[str, ...] | None:
        return get_adapter(spec.adapter).providers

    def command(self, spec: AgentSpec, task_prompt: Path | None = None) -> tuple[list[str], dict[str, Path]]:
        return [], self.user_files(spec)  # the adapter builds the command line once the cell has a key

    def session(self, cell: CellSpec, cli_path: list[str]) -> AgentSession | None:
        adapter = get_adapter(cell.agent.adapter)
        exe, version = find_cli(adapter, cell.agent.version, cli_path, cell.agent.name)
        return AgentSession(cell, adapter, exe, version)


def agent_kind(name: str | None) -> AgentKind:
    try:
        return lookup("agent_kind", str(name))()
    except ConfigError:
        raise ConfigError(f"kind={name!r} must be one of {', '.join(map(repr, names('agent_kind')))}") from None
