"""A control group per cell, where the machine lets us make one: the kernel then enforces the cell's memory and
process limits on everything the agent starts, and counts when they were hit.

cgroup v2 (one unified tree) and v1 (a tree per controller, as on this development VM) are both handled. Making one
needs write access to the tree below our own group (root, or a delegated group); where that is missing (a v2
container whose group holds processes, a non-root user without delegation) create() returns None and the sandbox
falls back to per-process limits and sampling (see sandbox.ResourceWatch).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_groups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's group path, from /proc/self/cgroup."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _count(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


@dataclass
class CellCgroup:
    memory_dir: Path
    pids_dir: Path
    v2: bool

    @property
    def procs_files(self) -> list[Path]:
        """Write a pid to each to move it (and so everything it starts later) into the cell's group."""
        return sorted({self.memory_dir / "cgroup.procs", self.pids_dir / "cgroup.procs"})

    def oom_kills(self) -> int:
        return _count(self.memory_dir / ("memory.events" if self.v2 else "memory.oom_control"), "oom_kill")

    def pid_limit_hits(self) -> int:
        return _count(self.pids_dir / "pids.events", "max")

    def remove(self) -> None:
        for d in {self.memory_dir, self.pids_dir}:
            try:
                d.rmdir()
            except OSError:  # still has processes (they are being killed) or already gone; the next start reuses it
                pass

    @classmethod
    def create(cls, name: str, memory_bytes: int | None, max_pids: int | None) -> "CellCgroup | None":
        if os.environ.get("A2RL_NO_CGROUPS"):
            return None
        try:
            groups = _own_groups()
            if (ROOT / "cgroup.controllers").exists():  # v2
                parent = ROOT / groups[""].lstrip("/")
                wanted = {"memory", "pids"}
                if not wanted <= set((parent / "cgroup.subtree_control").read_text().split()):
                    _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(wanted)))
                d = parent / name
                d.mkdir(exist_ok=True)
                group = cls(d, d, v2=True)
                if memory_bytes:
                    _write(d / "memory.max", str(memory_bytes))
                    _write(d / "memory.swap.max", "0")
                if max_pids:
                    _write(d / "pids.max", str(max_pids))
                return group
            if (ROOT / "memory").is_dir() and (ROOT / "pids").is_dir():  # v1
                mem = ROOT / "memory" / groups["memory"].lstrip("/") / name
                pids = ROOT / "pids" / groups["pids"].lstrip("/") / name
                mem.mkdir(exist_ok=True)
                pids.mkdir(exist_ok=True)
                if memory_bytes:
                    _write(mem / "memory.limit_in_bytes", str(memory_bytes))
                    if (mem / "memory.memsw.limit_in_bytes").exists():  # swap counts too, where it is accounted
                        _write(mem / "memory.memsw.limit_in_bytes", str(memory_bytes))
                if max_pids:
                    _write(pids / "pids.max", str(max_pids))
                return cls(mem, pids, v2=False)
        except (OSError, KeyError):
            return None
        return None
