"""Adapters for coding-agent CLIs (Claude Code, Codex, Gemini CLI, OpenCode), one short module each.

`conf/agent/<name>.yaml` with `kind: cli, adapter: <module>` runs that CLI in a cell: agents.cli.session finds the
executable, registers the cell with the driver proxy and launches the CLI with the adapter's command line.
A new adapter is one module defining `ADAPTER` (an agents.cli.base.CliAdapter) plus its line below.
"""
from __future__ import annotations

import importlib

from agents.cli.base import CliAdapter

ADAPTERS = {  # adapter name -> module defining ADAPTER
    "claude_code": "agents.cli.claude_code",
    "codex": "agents.cli.codex",
    "gemini_cli": "agents.cli.gemini_cli",
    "opencode": "agents.cli.opencode",
}


def get_adapter(name: str) -> CliAdapter:
    if name not in ADAPTERS:
        raise KeyError(f"unknown CLI adapter {name!r}; known adapters: {', '.join(sorted(ADAPTERS))}")
    return importlib.import_module(ADAPTERS[name]).ADAPTER
