"""The bubblewrap command line that every sandbox in a2rl is made of: a read-only system, hidden folders, what is
bound back, and a writable place.

Two sandboxes use it: the agent's (orchestrator/sandbox.py: a workspace, the cell's limits, its network relay) and
the one a grader runs untrusted code in (evaluators/execution: a HumanEval completion against its unit tests). It
lives here, in the bottom layer, because both layers need it and neither may import the other.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

MIN_BWRAP = (0, 8)  # --disable-userns, and --perms for --tmpfs


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def bwrap_version() -> tuple[int, ...]:
    out = subprocess.run([bwrap_path() or "bwrap", "--version"], capture_output=True, text=True).stdout
    return tuple(int(x) for x in out.split()[-1].split(".") if x.isdigit()) if out.strip() else (0,)  # "bubblewrap 0.8"


def _depth(p: Path) -> int:
    return len(p.parts)


def _covers(parent: Path, child: Path) -> bool:
    return child == parent or parent in child.parents


def bwrap_argv(workspace: Path | None, hidden: Sequence[Path], readonly: Sequence[Path], *,
               as_root: bool | None = None, network: str = "host", devices: Sequence[Path] = (),
               files: Sequence[tuple[Path, Path]] = (), binds: Sequence[tuple[Path, Path]] = (),
               tmpfs_bytes: int | None = None) -> list[str]:
    """The bwrap prefix for a command. Mounts go from the shallowest path to the deepest, so a folder hidden inside
    one that is bound back (a package's data inside the virtualenv) stays hidden.

    workspace: bound read-write and made the working folder (None: no host folder is writable).
    as_root: bwrap runs with privilege and the command drops it (see setpriv_argv); otherwise bwrap makes an
    unprivileged user namespace. files: (source, where) bound read-only; binds: (source, where) read-write.
    tmpfs_bytes: the size of every empty folder made (hidden ones, /dev/shm), so writing there cannot fill memory."""
    given_workspace = workspace
    workspace = workspace.resolve() if workspace is not None else None
    as_root = os.geteuid() == 0 if as_root is None else as_root
    size = ["--size", str(int(tmpfs_bytes))] if tmpfs_bytes else []
    argv = [bwrap_path() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--perms", "1777", *size, "--tmpfs",
            "/dev/shm", "--proc", "/proc", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--new-session", "--die-with-parent"]
    if not as_root:  # no privilege to drop later: a user namespace with no capabilities, and no nested ones
        argv += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    if network == "isolated":
        argv += ["--unshare-net"]
    for device in devices:  # the GPUs of the reservation
        argv += ["--dev-bind", str(device), str(device)]
    if as_root:  # the command runs as another uid: what it is given must be reachable by that uid
        hidden = [*hidden, *closed_parents(readonly, hidden)]
    hidden = sorted({p.resolve() for p in hidden if p.exists()}, key=_depth)
    # A path given through a symbolic link (a virtualenv linked into the checkout, a CLI folder behind a link) is
    # bound where it points; where the link itself lies in a hidden folder, the target is also bound at the given
    # path, so the name the command uses works inside; what is hidden inside the target is hidden there too.
    aliases = sorted({(p.resolve(), Path(os.path.abspath(p))) for p in readonly if p.exists()
                      and through_link(p, hidden)}, key=lambda pair: _depth(pair[1]))
    # Only bind back what a hidden path would otherwise cover.
    readonly = sorted({p.resolve() for p in readonly if p.exists() and any(_covers(h, p.resolve()) for h in hidden)},
                      key=_depth)
    made: set[Path] = set()

    def parents(where: Path) -> list[str]:
        """Folders a mount point needs inside an empty mount: bwrap would make them 0700, closed to the agent's uid."""
        out = []
        for folder in reversed(where.parents):
            if folder not in made and any(_covers(h, folder) and h != folder for h in hidden):
                made.add(folder)
                out += ["--perms", "0755", "--dir", str(folder)]
        return out

    # Shallow before deep; at the same depth a hidden path before one bound back over it.
    mounts = sorted([(_depth(p), 0, p) for p in hidden] + [(_depth(p), 1, p) for p in readonly])
    for _, bound_back, path in mounts:
        if bound_back:
            if workspace is None or not _covers(path, workspace):
                argv += parents(path) + ["--ro-bind", str(path), str(path)]
        elif path.is_file():  # a file reads as empty
            argv += ["--dev-bind", "/dev/null", str(path)]
        else:  # a folder becomes empty; scratch folders stay usable by the unprivileged agent
            argv += (["--perms", "1777"] if path in (Path("/tmp"), Path("/var/tmp")) else []) + size + \
                ["--tmpfs", str(path)]
    for source, where in aliases:
        argv += parents(where) + ["--ro-bind", str(source), str(where)]
        # what is hidden or bound back inside the target stays so under the name given (shallow before deep)
        for _, bound_back, path in mounts:
            if _covers(source, path):
                image = where / path.relative_to(source)
                if bound_back:
                    argv += ["--ro-bind", str(path), str(image)]
                elif path.is_file():
                    argv += ["--dev-bind", "/dev/null", str(image)]
                else:
                    argv += size + ["--tmpfs", str(image)]
    for source, where in files:
        argv += parents(where) + ["--ro-bind", str(source), str(where)]
    for source, where in binds:
        argv += parents(where) + ["--bind", str(source), str(where)]
    if workspace is not None:
        argv += parents(workspace)
        argv += ["--bind", str(workspace), str(workspace), "--chdir", str(workspace)]
        if given_workspace is not None and through_link(given_workspace, hidden):  # (a workspace root behind a link)
            given = Path(os.path.abspath(given_workspace))
            argv += parents(given) + ["--bind", str(workspace), str(given)]
    return argv


def through_link(path: Path, hidden: Sequence[Path]) -> bool:
    """Whether `path` reaches its folder through a symbolic link that lies in a hidden folder (resolved ones): then
    the target is bound at `path` too, with what is hidden inside the target hidden there as well (a virtualenv
    linked into the checkout holds packaged eval data the sandbox hides)."""
    given, target = Path(os.path.abspath(path)), path.resolve()
    return given != target and any(_covers(h, given) for h in hidden)


def closed_parents(readonly: Sequence[Path], hidden: Sequence[Path]) -> list[Path]:
    """Folders above a path the sandbox is given that others may not enter (no o+x: a pyenv under a 0700 /root, a
    checkout under root's home): hidden (an empty folder), so the path is bound back through folders its uid can
    enter. Nothing is lost to the agent: it could not enter them anyway."""
    hidden = [h.resolve() for h in hidden if h.exists()]
    out: list[Path] = []
    for path in readonly:
        if not path.exists():
            continue
        for folder in reversed(path.resolve().parents):  # shallowest first: hiding it covers those below
            if folder == Path("/") or any(_covers(h, folder) for h in hidden + out):
                continue
            try:
                closed = not os.stat(folder).st_mode & 0o001
            except OSError:
                continue
            if closed:
                out.append(folder)
                break
    return out


def setpriv_argv(uid: int, gid: int) -> list[str]:
    """What a sandbox started as root runs its command under: an unprivileged uid/gid, no capabilities, no way back."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
            "--no-new-privs", "--"]


def python_paths() -> list[Path]:
    """The interpreter and its virtualenv, which the sandboxed programs run on."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent}
    return sorted(paths)


def system_hidden() -> list[Path]:
    """Host folders no sandboxed program needs: runtime sockets and state (/run: docker, dbus, systemd), shared
    scratch."""
    return [Path("/run"), Path("/var/run"), Path("/var/tmp"), Path("/tmp")]
