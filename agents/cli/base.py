"""What every CLI adapter is: how to launch one coding-agent CLI against the driver proxy, and how to read its trace.

An adapter knows its executable and npm package (so a missing install names the command that fixes it), which
driver providers' wire protocols the CLI speaks, the command line and environment for one run (base URL = the
a2rl driver proxy, key = the cell's per-cell key, never the real one), the config files it wants in its own HOME,
and a parser from its native JSONL trace (stdout) to a2rl's trace events.

Trace events (the payload of `agent_trace` ledger events), one dict each with a `type`:
  session      {model, session_id}                     the CLI started a conversation
  message      {role, text}                            text the model wrote
  tool_call    {tool, input, id}                       the model asked for a tool (shell command, file edit, ...)
  tool_result  {id, ok, output}                        what the tool gave back
  usage        {input_tokens, output_tokens, cached_tokens, cost_usd, scope}
                                                       token totals as the CLI itself reports them (scope: the
                                                       step, turn or run they cover); the metered numbers are
                                                       the proxy's driver_usage events, these are for comparison
  result       {ok, text, turns}                       the CLI's own verdict at the end
  error        {message}
  notice       {message}                              what the CLI says for information, not an error (Codex's
                                                       warnings, e.g. its fallback-metadata notice for a model it
                                                       does not know; Gemini CLI's warnings)
Every event also has `source`, the native event type it came from. Long texts are cut to TEXT_LIMIT characters:
the full native trace stays in the attempt's agent.stdout.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

TEXT_LIMIT = 2000
# the agent.args every CLI takes (build_prompt, extra_args, output_limit: held at the driver proxy for every CLI)
COMMON_ARGS = ("preamble", "extra_args", "output_limit")
OUTPUT_SHARE = 4   # a reply may take a quarter of a known context window

PREAMBLE = ("You are an autonomous agent working alone in the folder {workspace} (your current directory). "
            "Nobody will answer questions or approve actions: decide, act, and keep working until the task is "
            "done or your budget ends. The task and its rules follow.\n\n")


@dataclass(frozen=True)
class Context:
    """What an adapter needs to launch its CLI for one cell."""
    workspace: Path
    home: Path                  # the agent's own HOME (inside the workspace): config files go here
    prompt: str
    driver: dict                # the cell's driver: name, provider, model and its other config keys
    proxy_url: str              # the driver proxy's root, e.g. http://127.0.0.1:8000/driver
    key: str                    # the cell's per-cell proxy key
    args: dict = field(default_factory=dict)   # agent.args from conf/agent/<name>.yaml

    @property
    def model(self) -> str:
        return self.driver.get("model") or ""

    @property
    def provider(self) -> str:
        return self.driver["provider"]

    @property
    def context_window(self) -> int | None:
        """The driver model's context window (driver.context_window, or what its server reported), if known."""
        return self.driver.get("context_window")

    @property
    def context_limit(self) -> int | None:
        """The context the CLI may assume: the model's window when known, else the agent's `context_limit`."""
        return self.context_window or self.args.get("context_limit")

    @property
    def output_limit(self) -> int | None:
        return output_limit(self.args, self.context_window)


def output_limit(args: dict, context_window: int | None) -> int | None:
    """The most tokens a CLI asks for in one reply: the agent's `output_limit`, at most a quarter of a known window,
    so the prompt keeps the rest (a server refuses prompt + max_tokens beyond its window, and vLLM max_tokens alone
    beyond it: a model served with 2,048 tokens refused every call of output_limit 16384). The driver proxy holds
    every request of the cell to it, whether the CLI honours its own setting or not."""
    limits = [args.get("output_limit"), context_window and context_window // OUTPUT_SHARE]
    return min((int(x) for x in limits if x), default=None)


@dataclass(frozen=True)
class Launch:
    argv: list[str]             # argv[0] is the executable's name; the session puts its resolved path there
    env: dict[str, str]         # added to the agent's clean environment
    stdin: str | None = None    # what the CLI reads on its standard input (None: nothing, /dev/null)


class TraceParser:
    """Native trace lines (decoded JSON objects) in, trace events out. One instance per run: it may keep state."""
    home: Path | None = None    # the agent's HOME (set by the session), where a CLI may keep records of its own

    def feed(self, obj: dict) -> list[dict]:
        raise NotImplementedError

    def flush(self) -> list[dict]:
        """Events held back (e.g. streamed text deltas) once the trace ends."""
        return []


class CliAdapter:
    """A CLI installed from the npm registry (PythonCli: from PyPI, into an environment of its own)."""
    name: str = ""              # the adapter's name (conf/agent/*.yaml `adapter:`)
    executable: str = ""        # looked up in cli_path, then PATH
    package: str = ""           # the npm package that installs it
    providers: tuple[str, ...] = ()   # driver providers whose wire protocol the CLI speaks
    on_path: bool = True        # its folder goes first on the agent's PATH (an npm CLI's siblings)
    args: tuple[str, ...] = ()  # its own agent.args knobs, besides COMMON_ARGS
    release: str | None = None  # the release's agents/<name>/ whose start.sh its agent side runs (contracts/release.py)
    release_not_held: tuple[str, ...] = ()  # what of that start.sh cannot hold in a2rl's cells, in words

    def install_command(self, version: str | None) -> str:
        return f"npm install -g {self.package}" + (f"@{version}" if version else "")

    def installed_version(self, exe: Path) -> str | None:
        """The version in the npm package.json beside the executable's real file (None if not an npm install)."""
        for parent in exe.resolve().parents:
            manifest = parent / "package.json"
            if manifest.is_file():
                try:
                    data = json.loads(manifest.read_text())
                except (OSError, ValueError):
                    continue
                if data.get("name") == self.package:
                    return data.get("version")
        return None

    def unavailable(self, version: str | None) -> str | None:
        """Why this version cannot run a cell on any machine (a known defect of the release), else None."""
        return None

    def runtime_paths(self, exe: Path) -> list[Path]:
        """What the CLI runs on besides its own install, for the sandbox to show read-only: node's prefix."""
        node = shutil.which("node", path=os.pathsep.join([str(exe.parent), os.environ.get("PATH", "")]))
        return [Path(node).resolve().parent.parent] if node else []

    def launch(self, ctx: Context) -> Launch:
        raise NotImplementedError

    def command_line(self, exe: Path, argv: list[str]) -> list[str]:
        """The command line to run: the launch's, with the executable found in its place."""
        return [str(exe), *argv[1:]]

    def parser(self) -> TraceParser:
        raise NotImplementedError


class PythonCli(CliAdapter):
    """A CLI from PyPI, installed into a virtual environment of its own (its pins differ from a2rl's): the
    executable is its console script in that environment's bin/, found through cli_path."""
    python: str = "3.11"        # the Python it needs (the environment is made with pythonX.Y)
    on_path = False             # its bin/ has a python without torch: the agent's `python` must stay a2rl's

    def install_command(self, version: str | None) -> str:
        env = f"~/a2rl-agents/{self.name}"
        pin = f"{self.package}=={version}" if version else self.package
        return f"python{self.python} -m venv {env} && {env}/bin/pip install {pin}"

    def installed_version(self, exe: Path) -> str | None:
        """The version in the environment's dist-info of the package (None if the executable is not in one)."""
        dist = self.package.replace("-", "_").lower()
        for meta in sorted(exe.parent.parent.glob(f"lib/python*/site-packages/{dist}-*.dist-info/METADATA")):
            for line in meta.read_text(errors="replace").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
        return None

    def runtime_paths(self, exe: Path) -> list[Path]:
        """The interpreter the environment was made from (its pyvenv.cfg `home`), which may lie in a hidden $HOME."""
        cfg = exe.parent.parent / "pyvenv.cfg"
        if not cfg.is_file():
            return []
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                return [Path(value.strip()).resolve().parent]
        return []


# -- helpers the adapters share --------------------------------------------------------------------------------

def build_prompt(workspace: Path, args: dict, continuation: str | None = None, before: tuple[str, ...] = ()) -> str:
    """The task's instructions.md (after the workspace's files named in `before`: in the release's workspace its
    description.md, whose instructions.md is the benchmark's shared one), after a preamble saying the agent works
    alone (agent.args.preamble overrides) and, for a re-prompted agent, the note on what it has left."""
    preamble = args.get("preamble") or PREAMBLE
    note = continuation.strip() + "\n\n" if continuation else ""
    task = "".join((workspace / name).read_text() + "\n\n" for name in before)
    task += (workspace / "instructions.md").read_text()
    return preamble.format(workspace=workspace) + note + task


class CliLaunch:
    """How an agent side launches a CLI (its choice, handed to the cell's session): a2rl's is the adapter's command
    line on a prompt built from the workspace's instructions.md. agents/cli/release.py has the release's."""
    prompt_before: tuple[str, ...] = ()  # workspace files the prompt shows before instructions.md

    def prompt(self, workspace: Path, args: dict, continuation: str | None = None) -> str:
        return build_prompt(workspace, args, continuation, self.prompt_before)

    def command(self, adapter: CliAdapter, ctx: Context, exe: Path) -> tuple[list[str], Launch, dict]:
        """The command line, the launch (its variables), and what the cell's outcome says of it ({}: nothing)."""
        launch = adapter.launch(ctx)
        return adapter.command_line(exe, launch.argv), launch, {}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def cut(value, limit: int = TEXT_LIMIT):
    """A string shortened to limit characters; other JSON values are cut through their JSON text."""
    if value is None:
        return None
    if not isinstance(value, str):
        text = json.dumps(value, default=str)
        return value if len(text) <= limit else text[:limit] + "..."
    return value if len(value) <= limit else value[:limit] + "..."


def event(kind: str, source: str, **fields) -> dict:
    return {"type": kind, "source": source, **{k: v for k, v in fields.items() if v is not None}}


def usage_event(source: str, scope: str, input_tokens, output_tokens, cached_tokens=0, cost_usd=None) -> dict:
    def n(v):
        return int(v) if isinstance(v, (int, float)) else 0
    return event("usage", source, scope=scope, input_tokens=n(input_tokens), output_tokens=n(output_tokens),
                 cached_tokens=n(cached_tokens), cost_usd=cost_usd)


def extra_args(ctx: Context) -> list[str]:
    """agent.args.extra_args: flags appended to the CLI's command line (e.g. ["--max-turns", "200"])."""
    extra = ctx.args.get("extra_args") or []
    if not isinstance(extra, (list, tuple)):
        raise ValueError(f"agent.args.extra_args={extra!r} must be a list of strings")
    return [str(a) for a in extra]
