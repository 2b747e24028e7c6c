"""The cell's side of an agent driven by an LLM: find the CLI, hook the cell to the driver proxy, read the trace.

    session = agent_kind(cell.agent.kind).session(cell, cli_path)   # None without a driver; CliUnavailable if missing
    argv = session.start(workspace, env, proxy_url, records_path, argv, scope)  # per-cell key; CLI config, env
    ... session.pump(stdout, trace) and session.limit_hit(calls_seen) while the agent runs ...
    session.close()                                   # the key stops working; in-flight calls are recorded

Any agent whose cell has a driver gets A2RL_DRIVER_BASE_URL / A2RL_DRIVER_KEY / A2RL_DRIVER_PROVIDER /
A2RL_DRIVER_MODEL (and A2RL_DRIVER_CONTEXT_WINDOW where the model's window is known; a `command` agent calls its LLM
through those); a `cli` agent also gets its adapter's command
line, config files and variables. The real provider key stays in the proxy: nothing here ever sees it.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from agents.cli.base import CliAdapter, CliLaunch, Context, output_limit
from agents.proxy.protocols import provider
from contracts.outcomes import Limit

# the driver proxy's exhausted limit -> the cell's limit_hit
LIMITS: dict[str | None, Limit] = {"max_tokens": "tokens", "max_cost_usd": "cost"}
RPC_TIMEOUT_S = 30.0
DRAIN_S = 5.0   # at the end, how long in-flight calls may take to land in the records


class CliUnavailable(RuntimeError):
    """The agent's CLI is missing or not the pinned version: the cell ends as infra_error before any budget is
    spent. A retry cannot fix it, so it is an outcome, not an exception for Tune to retry."""


def driver_config(cell) -> dict:
    d = cell.driver
    return {"name": d.name, "provider": d.provider, "model": d.model, **d.extra}


def find_cli(adapter: CliAdapter, version: str | None, cli_path: list[str], agent: str) -> tuple[Path, str | None]:
    """The executable and its installed version. The folders on the way are resolved (a cli_path or PATH entry
    reached through a symbolic link is used where it points: inside the sandbox npm's relative link from bin/ to its
    package must land in the real prefix), the executable itself is not (so its install prefix is known)."""
    if reason := adapter.unavailable(version):  # whether installed or not: installing it cannot help
        raise CliUnavailable(f"agent {agent}: {reason}")
    dirs = [str(Path(p).expanduser()) for p in cli_path]
    search = os.pathsep.join(dirs + [os.environ.get("PATH", "")])
    install = adapter.install_command(version)
    found = shutil.which(adapter.executable, path=search)
    if found is None:
        where = f"cli_path {dirs} or PATH" if dirs else "PATH"
        raise CliUnavailable(f"agent {agent}: the `{adapter.executable}` executable of {adapter.package} is not in "
                             f"{where} on this node. Install it: `{install}` (or set cli_path=[DIR] to the folder "
                             f"that holds it)")
    exe = Path(found).parent.resolve() / Path(found).name
    installed = adapter.installed_version(exe)
    if version and installed and installed != str(version):
        raise CliUnavailable(f"agent {agent} pins {adapter.package} {version} but {exe} is version {installed}. "
                             f"Install the pinned one: `{install}`, or run with agent.version={installed} "
                             f"(a different agent version makes different cells)")
    return exe, installed


def link_chain(exe: Path) -> list[Path]:
    """exe and each link it passes through to its real file, folders resolved (~/bin/claude -> ~/clis/bin/claude ->
    ../lib/node_modules/@anthropic-ai/claude-code/cli.js)."""
    chain = [exe.parent.resolve() / exe.name]
    while chain[-1].is_symlink() and len(chain) < 40:
        target = chain[-1].parent / os.readlink(chain[-1])
        chain.append(target.parent.resolve() / target.name)
    return chain


def install_folder(path: Path) -> Path:
    """What holds an executable's install: the prefix above a bin/ folder, else the folder itself."""
    return path.parent.parent if path.parent.name == "bin" else path.parent


class AgentSession:
    def __init__(self, cell, adapter: CliAdapter | None = None, exe: Path | None = None,
                 version: str | None = None):
        self.cell, self.adapter, self.exe, self.version = cell, adapter, exe, version
        self.key: str | None = None
        self.parser = adapter.parser() if adapter else None
        self._tail = None
        self._asked_at_calls = -1
        self._limit: Limit | None = None
        self._proxy_url = ""
        self._proxy_app = ""
        self.driver = driver_config(cell)   # start() adds the model's context window the proxy found
        self.final_usage: dict | None = None
        self.launch = CliLaunch()             # its agent side's way of launching the CLI (start() is told it)
        self.launched: dict = {}              # how the CLI was launched, for the cell's outcome
        self.records_dir: Path | None = None  # the attempt's records folder (start() learns it)
        self.stdin: Path | None = None        # the file the CLI reads on standard input, if its launch has one
        self.trace_note: str | None = None    # why the attempt's trace is empty, once it ended so

    def _proxy(self):
        from ray import serve

        return serve.get_app_handle(self._proxy_app)

    def readonly_paths(self, hidden: list[Path]) -> list[Path]:
        """The CLI's install (and what it runs on: node, a Python) for the sandbox to show read-only. A candidate that
        would also uncover a hidden path (a prefix that holds the grading cache, say) is left out."""
        if self.exe is None or self.adapter is None:
            return []
        chain = link_chain(self.exe)  # every folder the kernel passes through to run it
        candidates = {*(install_folder(p) for p in chain), *self.adapter.runtime_paths(self.exe)}
        hidden = [h.resolve() for h in hidden]
        return sorted(p for p in candidates if not any(h.is_relative_to(p.resolve()) for h in hidden))

    def start(self, workspace: Path, env: dict, proxy_url: str, records_path: Path, argv: list[str],
              scope: str = "", launch: CliLaunch | None = None) -> list[str]:
        """Register the cell with its sweep's driver proxy (scope: the sweep's, contracts.serving.sweep_scope; limits
        from its budget, call records into records_path), put the driver's variables (and the CLI's) into env;
        returns the command line to run. launch: how the cell's agent side launches a CLI (a2rl's when None; the
        release's start.sh: agents/cli/release.py)."""
        self.launch, self.records_dir = launch or CliLaunch(), records_path.parent
        from agents.proxy.deployment import APP_NAME
        from contracts.serving import scoped

        self._proxy_app = scoped(APP_NAME, scope)
        budget = self.cell.budget
        limits = {k: getattr(budget, k) for k in LIMITS if getattr(budget, k) is not None}
        driver = driver_config(self.cell)
        self.key = self._proxy().register_cell.remote(self.cell.cell_id, driver, limits,
                                                      str(records_path)).result(timeout_s=RPC_TIMEOUT_S)
        # The agent's limits follow the model's window: driver.context_window, or what a local server reports.
        window = self._proxy().context_window.remote(self.key).result(timeout_s=RPC_TIMEOUT_S)
        self.driver = {**driver, "context_window": window}
        cap = output_limit(dict(self.cell.agent.args or {}), window) if self.adapter is not None else None
        if cap:  # the limit the CLI is given, applied at the wire too (a CLI may ignore its own setting)
            self._proxy().cap_output.remote(self.key, cap).result(timeout_s=RPC_TIMEOUT_S)
        openai_style = provider(driver["provider"]).openai_style
        env.update({"A2RL_DRIVER_BASE_URL": proxy_url + ("/v1" if openai_style else ""), "A2RL_DRIVER_KEY": self.key,
                    "A2RL_DRIVER_PROVIDER": driver["provider"], "A2RL_DRIVER_MODEL": driver.get("model") or "",
                    **({"A2RL_DRIVER_CONTEXT_WINDOW": str(window)} if window else {})})
        self._proxy_url = proxy_url
        return argv if self.adapter is None else self.command(workspace, env)

    def command(self, workspace: Path, env: dict, continuation: str | None = None) -> list[str]:
        """The CLI's command line (its config files written, its variables put into env), on the key start()
        registered. continuation: what a re-prompted CLI reads before its task prompt (orchestrator/reprompt.py)."""
        assert self.adapter is not None and self.exe is not None and self.key is not None
        args = dict(self.cell.agent.args or {})
        ctx = Context(workspace=workspace, home=Path(env["HOME"]),
                      prompt=self.launch.prompt(workspace, args, continuation),
                      driver=self.driver, proxy_url=self._proxy_url, key=self.key, args=args)
        argv, launch, self.launched = self.launch.command(self.adapter, ctx, self.exe)
        if self.parser is not None:
            self.parser.home = ctx.home
        env.update(launch.env)
        self.stdin = None
        if launch.stdin is not None:  # kept beside agent.stdout: the exact text the CLI was given
            self.stdin = self.records_dir / "agent.stdin"
            self.stdin.write_bytes(launch.stdin.encode())
        if self.adapter.on_path and not env.get("PATH", "").startswith(str(self.exe.parent) + os.pathsep):
            env["PATH"] = os.pathsep.join([str(self.exe.parent), env.get("PATH", "")])
        return argv

    def usage(self) -> dict | None:
        """The proxy's meter for this cell so far (None without a key)."""
        if self.key is None:
            return None
        return self._proxy().usage.remote(self.key).result(timeout_s=RPC_TIMEOUT_S)

    def pump(self, stdout_path: Path, trace_path: Path, final: bool = False) -> int:
        """Parse what the CLI printed since the last call into trace records (appended durably); returns how many."""
        if self.parser is None:
            return 0
        if self._tail is None:
            from contracts.records import JsonlTail

            self._tail = JsonlTail(stdout_path)
        events = []
        for obj in self._tail.read_new():
            if isinstance(obj, dict):
                events += self.parser.feed(obj)
        if final:
            events += self.parser.flush()
        now = time.time()
        data = "".join(json.dumps({"t": now, **e}, default=str) + "\n" for e in events).encode()
        if events or final:  # at the end the file exists whatever the CLI printed
            fd = os.open(trace_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        if final and trace_path.stat().st_size == 0:
            printed = stdout_path.stat().st_size if stdout_path.exists() else 0
            self.trace_note = f"empty: the CLI printed nothing its trace parser reads ({printed} bytes on stdout)"
        return len(events)

    def limit_hit(self, calls_seen: int) -> Limit | None:
        """'tokens' or 'cost' once the proxy says the cell's budget is spent. It is asked only when new calls
        were recorded since the last question (a budget only moves with calls)."""
        if self.key is None or self._limit or calls_seen == self._asked_at_calls:
            return self._limit
        self._asked_at_calls = calls_seen
        usage = self._proxy().usage.remote(self.key).result(timeout_s=RPC_TIMEOUT_S)
        self._limit = LIMITS.get(usage.get("exhausted"))
        return self._limit

    def close(self) -> dict | None:
        """Stop the key; wait (briefly) until calls still in flight are recorded; returns the proxy's final usage."""
        if self.key is None or self.final_usage is not None:
            return self.final_usage
        self.final_usage = self._proxy().close_cell.remote(self.key, DRAIN_S).result(timeout_s=RPC_TIMEOUT_S)
        self._limit = self._limit or LIMITS.get(self.final_usage.get("exhausted"))
        return self.final_usage

    def summary(self) -> dict:
        """For the cell's outcome."""
        out = {"agent_version": self.version, **self.launched} if self.adapter else {}
        if self.trace_note:
            out["trace"] = self.trace_note
        if self.final_usage:
            out["driver_usage"] = {k: self.final_usage.get(k) for k in (
                "calls", "refused", "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "wait_s",
                "estimated_calls", "estimated_tokens")}
        return out
