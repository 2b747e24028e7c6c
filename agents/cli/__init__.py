"""Adapters for coding-agent CLIs (Claude Code, Codex, Gemini CLI, OpenCode), one short module each.

`conf/agent/<name>.yaml` with `kind: cli, adapter: <name>` runs that CLI in a cell: agents.cli.session finds the
executable, registers the cell with the driver proxy and launches the CLI with the adapter's command line.
A new adapter is one module here whose agents.cli.base.CliAdapter class is registered under its name
(`@register("cli_adapter", "claude_code")`).
"""
from __future__ import annotations

from agents.cli.base import CliAdapter
from contracts import registry

registry.search("agents.cli")  # each adapter module registers itself


def get_adapter(name: str) -> CliAdapter:
    return registry.lookup("cli_adapter", str(name))()
