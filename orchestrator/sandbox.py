"""Run an agent as its own process group inside a bubblewrap sandbox, and kill all of it at the end.

The agent is untrusted code. Inside the sandbox it runs
- without privilege: as root, a2rl starts it as an unprivileged uid of its own (one per cell, from the cell id) with
  every capability dropped and no_new_privs; as another user, inside a user namespace (bwrap --unshare-user) that
  may not create further ones. Either way the mounts below are locked: no mount, remount, unshare or chroot
  trick reveals what they cover;
- in namespaces of its own: PID (killing its init kills every descendant, even a setsid'd one ignoring SIGTERM),
  IPC, UTS, cgroup, a new session (no terminal injection), and in the `isolated` network mode a network namespace
  whose only ways out are the grading server and the driver proxy (netrelay.py);
- with the system read-only, its workspace read-write, and nothing of a2rl's: the project tree, the output root
  (ledger, records, other cells' workspaces), the grading cache (eval data), the Ray token, /tmp, /run and the
  home folder are replaced by empty mounts. What the agent needs from inside those (the Python install, the
  virtualenv, the base-model cache) is bound back read-only. /dev is private: null, zero, random, a /dev/shm of
  its own, and the GPU device nodes of its reservation;
- under the cell's limits: processes, memory (a control group where the machine allows one), open files, and
  disk in the workspace. Hitting one ends the cell as agent_error with the limit named.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from contracts.infra import InfraError
from contracts.bwrap import (  # noqa: F401 (python_paths: cells and tests use it as sandbox.python_paths)
    MIN_BWRAP,
    bwrap_argv,
    bwrap_path,
    bwrap_version,
    python_paths,
    setpriv_argv,
    system_hidden,
)
from contracts.specs import ConfigError
from orchestrator.cgroups import CellCgroup
from orchestrator.netrelay import PROXY_SOCKET, Relay

INIT_SCRIPT = Path(__file__).with_name("sandbox_init.py")
INSIDE = Path("/run/a2rl")                    # where the sandbox sees its init script and its sockets
NETWORK_MODES = ("isolated", "host")
GIB = 1024 ** 3


@dataclass(frozen=True)
class Settings:
    """conf/config.yaml `sandbox:` (see there for what each knob does)."""
    network: str = "isolated"
    allow: tuple = ()
    agent_uid_base: int = 200000
    max_processes: int = 4096
    max_open_files: int = 65536
    memory_gb: float | None = None
    disk_gb: float | None = 100.0

    @classmethod
    def from_cfg(cls, sandbox_cfg) -> "Settings":
        limits = dict(sandbox_cfg.get("limits") or {})
        known = {"max_processes", "max_open_files", "memory_gb", "disk_gb"}
        if set(limits) - known:
            raise ConfigError(f"sandbox.limits: unknown key(s) {sorted(set(limits) - known)}; known keys are "
                              f"{sorted(known)}")
        network = sandbox_cfg.get("network", "isolated")
        if network not in NETWORK_MODES:
            raise ConfigError(f"sandbox.network={network!r} must be one of {list(NETWORK_MODES)}: `isolated` lets "
                              f"the agent reach only its grading server and driver proxy (plus sandbox.allow), `host` "
                              f"shares the machine's network as the original benchmark did")
        allow = tuple(str(a) for a in (sandbox_cfg.get("allow") or ()))
        for entry in allow:
            host, _, port = entry.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"sandbox.allow entry {entry!r} must be host:port, e.g. pypi.org:443")
        for key in ("max_processes", "max_open_files"):
            if limits.get(key) is not None and (not isinstance(limits[key], int) or limits[key] < 16):
                raise ConfigError(f"sandbox.limits.{key}={limits[key]!r} must be an integer >= 16")
        for key in ("memory_gb", "disk_gb"):
            if limits.get(key) is not None and (not isinstance(limits[key], (int, float)) or limits[key] <= 0):
                raise ConfigError(f"sandbox.limits.{key}={limits[key]!r} must be a positive number (or null)")
        return cls(network=network, allow=allow, agent_uid_base=int(sandbox_cfg.get("agent_uid_base", 200000)),
                   **{**{k: getattr(cls, k) for k in known}, **limits})

    def memory_bytes(self, budget) -> int:
        """The cell's memory limit: its reservation (budget.memory_gb), else sandbox.limits.memory_gb, else its
        share of this machine by the CPUs it reserved (at least 2 GiB)."""
        import psutil

        if budget.memory_gb:
            return int(budget.memory_gb * GIB)
        if self.memory_gb:
            return int(self.memory_gb * GIB)
        total = psutil.virtual_memory().total
        return int(max(2 * GIB, total * min(1.0, budget.cpus / (os.cpu_count() or 1))))


class SandboxUnavailable(InfraError):
    pass


BWRAP_MISSING = ("bubblewrap (bwrap) is not installed, so agents cannot be sandboxed. Run scripts/setup "
                 "(or `apt-get install bubblewrap`), or set sandbox.required=false to run agents unsandboxed "
                 "(they can then read everything this user can, including hidden eval data).")


def check_available(required: bool) -> bool:
    """True when agents will be sandboxed; raises when bubblewrap is required but missing or too old."""
    if bwrap_path():
        if bwrap_version() < MIN_BWRAP:
            raise SandboxUnavailable(
                f"bubblewrap {'.'.join(map(str, bwrap_version()))} at {bwrap_path()} is too old: a2rl needs "
                f"{'.'.join(map(str, MIN_BWRAP))} or newer (Debian 12, Ubuntu 24.04; or build it from source). "
                f"Put a newer bwrap first on PATH, or set sandbox.required=false to run agents unsandboxed.")
        return True
    if required:
        raise SandboxUnavailable(BWRAP_MISSING)
    return False


def agent_ids(cell_id: str, settings: Settings) -> tuple[int, int] | None:
    """As root, the cell's own unprivileged uid (= gid): per-process limits count per uid, so one cell's fork bomb
    cannot use up another's. None when a2rl is not root (the user namespace maps the agent to a2rl's user)."""
    if os.geteuid() != 0:
        return None
    uid = settings.agent_uid_base + int(cell_id[:4], 16)
    return uid, uid


def gpu_devices(visible: str | None) -> list[Path]:
    """The NVIDIA device nodes for CUDA_VISIBLE_DEVICES (indices or GPU-uuids, as Ray sets it), plus the
    driver's control nodes. Nothing when no GPU is reserved."""
    if not visible:
        return []
    info = Path("/proc/driver/nvidia/gpus")
    gpus = []  # (bus id, minor, uuid), in the PCI order that NVML and Ray number GPUs by
    for folder in sorted(info.iterdir()) if info.is_dir() else []:
        fields = dict(line.split(":", 1) for line in (folder / "information").read_text().splitlines() if ":" in line)
        gpus.append((folder.name, fields.get("Device Minor", "").strip(), fields.get("GPU UUID", "").strip()))
    nodes = []
    for token in visible.split(","):
        token = token.strip()
        for i, (_, minor, uuid) in enumerate(gpus):
            if token == str(i) or (token and token == uuid):
                nodes.append(Path(f"/dev/nvidia{minor}"))
    control = [Path(f"/dev/{n}") for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
                                           "nvidia-caps")]
    return [p for p in nodes + control if p.exists()]


def account_files(folder: Path, uid: int, gid: int) -> list[tuple[Path, Path]]:
    """/etc/passwd and /etc/group that name the agent's uid, so tools that look their user up (getpass, git, pip)
    work; bound read-only over the system's."""
    out = []
    for name, line in (("passwd", f"a2rl-agent:x:{uid}:{gid}:a2rl agent:/nonexistent:/bin/sh\n"),
                       ("group", f"a2rl-agent:x:{gid}:\n")):
        text = Path(f"/etc/{name}").read_text() if Path(f"/etc/{name}").exists() else ""
        (folder / name).write_text(text + ("" if text.endswith("\n") or not text else "\n") + line)
        out.append((folder / name, Path(f"/etc/{name}")))
    return out


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give the agent its workspace (links are not followed: model/ points into the read-only cache)."""
    os.lchown(root, uid, gid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, gid)


def disk_usage(root: Path) -> int:
    """Bytes a folder takes on disk, without following links."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                continue
    return total


@dataclass
class ResourceWatch:
    """Tells when a cell's agent hit a resource limit: from its control group's counters where it has one, else by
    sampling its processes (memory, count) and, in both cases, its workspace's size."""
    workspace: Path
    root_pid: int
    memory_bytes: int | None
    max_processes: int
    disk_bytes: int | None
    cgroup: CellCgroup | None = None
    every_s: float = 1.0
    disk_every_s: float = 5.0
    _next: float = 0.0
    _next_disk: float = 0.0

    def check(self, final: bool = False) -> str | None:
        now = time.monotonic()
        if self.cgroup is not None:
            if self.cgroup.oom_kills():
                return (f"memory limit hit: the cell's processes needed more than {self.memory_bytes / GIB:.1f} GiB "
                        f"and the kernel killed one (raise budget.memory_gb)")
            if self.cgroup.pid_limit_hits():
                return (f"process limit hit: the agent tried to run more than {self.max_processes} processes and "
                        f"threads at once (sandbox.limits.max_processes)")
        elif not final and now >= self._next:
            self._next = now + self.every_s
            rss, tasks = self._sample()
            if self.memory_bytes and rss > self.memory_bytes:
                return (f"memory limit hit: the agent's processes used {rss / GIB:.1f} GiB, more than "
                        f"{self.memory_bytes / GIB:.1f} GiB (raise budget.memory_gb)")
            if tasks >= self.max_processes - 8:  # the per-uid rlimit stops it just short of this
                return (f"process limit hit: the agent ran {tasks} processes and threads, the limit is "
                        f"{self.max_processes} (sandbox.limits.max_processes)")
        if self.disk_bytes and (final or now >= self._next_disk):
            self._next_disk = now + self.disk_every_s
            used = disk_usage(self.workspace)
            if used > self.disk_bytes:
                return (f"disk limit hit: the workspace holds {used / GIB:.2f} GB, more than "
                        f"{self.disk_bytes / GIB:.2f} GB (sandbox.limits.disk_gb)")
        return None

    def _sample(self) -> tuple[int, int]:
        import psutil

        rss = tasks = 0
        try:
            procs = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.Error:
            return 0, 0
        for proc in procs:
            try:
                rss += proc.memory_info().rss
                tasks += proc.num_threads()
            except psutil.Error:
                continue
        return rss, tasks


@dataclass
class AgentProcess:
    popen: subprocess.Popen
    sandboxed: bool
    started: float
    watch: ResourceWatch | None = None
    relay: Relay | None = None
    state_dir: Path | None = None
    cgroup: CellCgroup | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def limit_hit(self, final: bool = False) -> str | None:
        """The resource limit the agent hit, in words, or None."""
        return self.watch.check(final) if self.watch is not None else None

    def kill_group(self, grace_s: float = 5.0) -> None:
        """SIGTERM the whole group, SIGKILL after grace_s. Safe to call twice; leaves nothing behind."""
        pgid = self.popen.pid  # start_new_session made the agent its own group leader
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                if sig == signal.SIGTERM and self.sandboxed:
                    _signal_descendants(self.popen.pid, sig)  # the agent's own session; bwrap lives on meanwhile
                else:  # bwrap's death takes its PID namespace, and so every process of the agent, with it
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

    def close(self) -> None:
        """After kill_group: the relay's sockets, the control group and the private files go."""
        if self.relay is not None:
            self.relay.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _signal_descendants(pid: int, sig: int) -> None:
    """Signal what runs inside the sandbox (it has a session of its own, so the group signal misses it), so the
    agent gets its grace period before bwrap, and with it the whole namespace, is killed."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        raise ProcessLookupError(pid) from None
    for child in children:
        try:
            child.send_signal(sig)
        except psutil.Error:
            continue


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


# Moves the sandbox into the cell's control group before it starts anything, then becomes it.
_ENTER_CGROUP = 'for f in $A2RL_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; unset A2RL_CGROUP_PROCS; exec "$@"'


def start(argv: list[str], workspace: Path, env: dict, stdout: Path, stderr: Path, *, sandboxed: bool,
          hidden: list[Path] = (), readonly: list[Path] = (), settings: Settings = Settings(), cell_id: str = "0000",
          forward: list[tuple[str, int]] = (), memory_bytes: int | None = None,
          network_log: Path | None = None, home: Path | None = None, stdin: Path | None = None) -> AgentProcess:
    """Start the agent. forward: the (host, port) addresses it may reach in the isolated network mode; network_log:
    where the isolated mode's HTTP proxy records each request, allowed or refused (orchestrator/netrelay.py); home:
    a folder outside the workspace the agent may also write (a paper cell's HOME), at the same path; stdin: a file
    the agent reads on its standard input (opened here: the sandbox need not show it), else /dev/null."""
    env = dict(env)
    relay = state = cgroup = None
    if sandboxed:
        state = Path(tempfile.mkdtemp(prefix="a2rl-sbx-"))  # short: unix socket paths are limited to 107 bytes
        ids = agent_ids(cell_id, settings)
        files = [(INIT_SCRIPT, INSIDE / "init.py")]
        binds = []
        inner = [sys.executable, str(INSIDE / "init.py"), "--nproc", str(settings.max_processes),
                 "--nofile", str(settings.max_open_files)]
        if settings.network == "isolated":
            relay = Relay(state / "net", list(forward), list(settings.allow), network_log).start()
            binds.append((state / "net", INSIDE / "net"))
            for _, port in forward:
                inner += ["--forward", f"{port}={INSIDE / 'net' / f'{port}.sock'}"]
            # The allowlist's proxy, on a port no forwarded address uses; also with an empty list, so that what the
            # agent tried to reach is refused by name (a 403, not a failed name lookup) and logged.
            proxy_port = next(p for p in range(3128, 65536) if p not in {port for _, port in forward})
            inner += ["--forward", f"{proxy_port}={INSIDE / 'net' / PROXY_SOCKET}"]
            for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                env[var] = f"http://127.0.0.1:{proxy_port}"
            env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
            if not any(a.rsplit(":", 1)[0].endswith(("huggingface.co", "hf.co")) for a in settings.allow):
                # the hub is out of reach: without this, transformers asks it in vain on every save (two refused
                # CONNECTs per save in each sft cell's network log, read by the trace audit as download attempts)
                env["HF_HUB_OFFLINE"] = "1"
        else:  # host network: name resolution may live under /run (systemd-resolved)
            readonly = [*readonly, Path("/run/systemd/resolve")]
        inner += ["--", *argv]
        if home is not None:
            binds.append((home, home))
        if ids is not None:
            uid, gid = ids
            files += account_files(state, uid, gid)
            chown_tree(workspace, uid, gid)
            if home is not None:
                chown_tree(home, uid, gid)
            inner = [*setpriv_argv(uid, gid), *inner]
        argv = bwrap_argv(workspace, [*hidden, *system_hidden()], list(readonly), as_root=ids is not None,
                          network=settings.network, devices=gpu_devices(env.get("CUDA_VISIBLE_DEVICES")),
                          files=files, binds=binds) + ["--", *inner]
        cgroup = CellCgroup.create(f"a2rl-{cell_id}-{os.getpid()}", memory_bytes, settings.max_processes)
        if cgroup is not None:
            argv = ["/bin/sh", "-c", _ENTER_CGROUP, "a2rl-enter-cgroup", *argv]
            env["A2RL_CGROUP_PROCS"] = " ".join(str(f) for f in cgroup.procs_files)
    with open(stdout, "ab") as out, open(stderr, "ab") as err, open(stdin or os.devnull, "rb") as given:
        popen = subprocess.Popen(argv, cwd=workspace, env=env, stdin=given, stdout=out, stderr=err,
                                 start_new_session=True, close_fds=True)
    watch = ResourceWatch(workspace, popen.pid, memory_bytes, settings.max_processes,
                          int(settings.disk_gb * GIB) if settings.disk_gb else None, cgroup) if sandboxed else None
    return AgentProcess(popen=popen, sandboxed=sandboxed, started=time.time(), watch=watch, relay=relay,
                        state_dir=state, cgroup=cgroup)


# What `sandbox.preflight: auto` runs for a cell that reserves real GPUs: every granted GPU takes a tensor.
GPU_CHECK = ("import os, torch; n = len([d for d in os.environ.get('CUDA_VISIBLE_DEVICES', '').split(',') if d]); "
             "assert torch.cuda.is_available(), 'CUDA is not available'; "
             "assert torch.cuda.device_count() == n, f'{torch.cuda.device_count()} GPUs usable of {n} granted'; "
             "[torch.ones(1, device=f'cuda:{i}').sum().item() for i in range(n)]")


class PreflightFailed(InfraError):
    """The sandbox cannot give the agent what its reservation grants: an infrastructure error (retried)."""


def preflight_command(setting, gpus: float, emulated: bool) -> list[str] | None:
    """sandbox.preflight: `auto` checks CUDA where real GPUs are reserved, null checks nothing, any other string is
    a shell command of yours (the same for every cell)."""
    if setting is None or setting is False:
        return None
    if setting == "auto":
        return [sys.executable, "-c", GPU_CHECK] if gpus and not emulated else None
    return ["/bin/sh", "-c", str(setting)]


def preflight(command: list[str], env: dict, *, hidden: list[Path], readonly: list[Path], settings: Settings,
              cell_id: str, timeout_s: float = 300) -> None:
    """Run `command` in a sandbox made as the agent's will be (a scratch workspace), before the cell's budget
    starts: a node whose GPUs do not work inside it fails here, as an infra error, not hours into a cell."""
    scratch = Path(tempfile.mkdtemp(prefix="a2rl-preflight-"))
    try:
        out, err = scratch.with_suffix(".out"), scratch.with_suffix(".err")
        proc = start(command, scratch, env, out, err, sandboxed=True, hidden=hidden, readonly=readonly,
                     settings=settings, cell_id=cell_id)
        try:
            code = proc.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        proc.kill_group(1)
        proc.close()
        if code != 0:
            tail = (out.read_text(errors="replace") + err.read_text(errors="replace")).strip()[-800:]
            raise PreflightFailed(f"preflight {'timed out' if code is None else f'exited with {code}'} inside the "
                                  f"sandbox ({' '.join(command)[:120]}): {tail}")
    finally:
        for path in (scratch, scratch.with_suffix(".out"), scratch.with_suffix(".err")):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
