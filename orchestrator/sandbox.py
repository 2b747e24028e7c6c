"""Run an agent as its own process group inside a bubblewrap sandbox, and kill all of it at the end.

The sandbox sees the system read-only, its workspace read-write, and nothing of a2rl's: the project tree, the
output root (ledger, records, other cells' workspaces), the grading cache, /tmp and the home folder are replaced
by empty tmpfs mounts. What the agent needs from inside those (the Python install, the virtualenv, the base-model
cache) is bound back read-only. With --unshare-pid the agent's processes live in their own PID namespace, so
killing its init kills every descendant, even one that called setsid or ignores SIGTERM.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


class SandboxUnavailable(RuntimeError):
    pass


BWRAP_MISSING = ("bubblewrap (bwrap) is not installed, so agents cannot be sandboxed. Run scripts/setup "
                 "(or `apt-get install bubblewrap`), or set sandbox.required=false to run agents unsandboxed "
                 "(they can then read everything this user can, including hidden eval data).")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def check_available(required: bool) -> bool:
    """True when agents will be sandboxed; raises when bubblewrap is required but missing."""
    if bwrap_path():
        return True
    if required:
        raise SandboxUnavailable(BWRAP_MISSING)
    return False


def _depth(p: Path) -> int:
    return len(p.parts)


def _covers(parent: Path, child: Path) -> bool:
    return child == parent or parent in child.parents


def bwrap_argv(workspace: Path, hidden: list[Path], readonly: list[Path]) -> list[str]:
    """The bwrap prefix for a command. Mounts are applied in order: hide parents first, then bind children back."""
    workspace = workspace.resolve()
    argv = [bwrap_path() or "bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    hidden = sorted({p.resolve() for p in hidden if p.exists()}, key=_depth)
    # Only bind back what a hidden path would otherwise cover.
    readonly = sorted({p.resolve() for p in readonly if p.exists() and any(_covers(h, p.resolve()) for h in hidden)},
                      key=_depth)
    for path in hidden:  # a folder becomes empty, a file reads as empty
        argv += ["--dev-bind", "/dev/null", str(path)] if path.is_file() else ["--tmpfs", str(path)]
    for path in readonly:
        if not _covers(path, workspace):
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--bind", str(workspace), str(workspace), "--chdir", str(workspace)]
    return argv


def python_paths() -> list[Path]:
    """The interpreter and its virtualenv, which the agent scripts run on."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent}
    return sorted(paths)


@dataclass
class AgentProcess:
    popen: subprocess.Popen
    sandboxed: bool
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def kill_group(self, grace_s: float = 5.0) -> None:
        """SIGTERM the whole group, SIGKILL after grace_s. Safe to call twice; leaves nothing behind."""
        pgid = self.popen.pid  # start_new_session made the agent its own group leader
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(pgid):
                self.popen.poll()
                time.sleep(0.05)
            if not _group_alive(pgid):
                break
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel has not reaped it yet
            pass


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Zombies do not count: an orphaned zombie waits for the
    machine's init to reap it, which can take seconds and must not hold a cell (or its GPU) that long."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    import psutil

    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def start(argv: list[str], workspace: Path, env: dict, stdout: Path, stderr: Path, *, sandboxed: bool,
          hidden: list[Path] = (), readonly: list[Path] = ()) -> AgentProcess:
    if sandboxed:
        argv = bwrap_argv(workspace, list(hidden), list(readonly)) + ["--"] + list(argv)
    with open(stdout, "ab") as out, open(stderr, "ab") as err:
        popen = subprocess.Popen(argv, cwd=workspace, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True, close_fds=True)
    return AgentProcess(popen=popen, sandboxed=sandboxed, started=time.time())
