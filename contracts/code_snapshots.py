"""Runtime recording: snapshot a workspace's code/ into a git repository the agent cannot reach.

At every submission the grader calls snapshot_code(); the commit id goes into the submission's event, so a
report can later say what code produced which score. The repository (cells/<cell_id>/code.git) is bare and
lives outside the workspace; git runs with GIT_DIR/GIT_WORK_TREE and a temporary index, so nothing is ever
written inside code/ and nothing the agent wrote there (its own .git, hooks, config) is consulted.

Snapshots must stay small and quick: model weights and files over a size limit are left out (listed in the commit
message instead), the walk stops at a number of files, bytes or seconds (the commit says "Snapshot truncated"),
symlinks are recorded as links and never followed, and special files (fifos, sockets) are skipped because reading
them could block. The files are read by a2rl through descriptors, never by git from the agent's folder.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import stat
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 1 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".npy", ".npz")
# Directories never worth recording: another repository's objects, byte-code caches.
SKIP_DIRS = (".git", "__pycache__")
BRANCH = "refs/heads/main"


@dataclass(frozen=True)
class Limits:
    """Bounded work per snapshot, whatever code/ holds (100,000 small files and an 8 GiB sparse file once made a
    submission take 116 s instead of 2.4 s): past a limit the rest is not recorded and the commit says so."""
    max_file_bytes: int = MAX_FILE_BYTES
    max_files: int = 2000           # ~1.1 s to record the first time, ~0.25 s once its objects are stored
    max_total_bytes: int = 32 << 20
    max_s: float = 10.0

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

# Ignore the user's and the system's git configuration (hooks, templates, signing, autocrlf) so a snapshot
# is the same on every machine, and give commits a fixed identity.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "a2rl", "GIT_AUTHOR_EMAIL": "a2rl@localhost",
    "GIT_COMMITTER_NAME": "a2rl", "GIT_COMMITTER_EMAIL": "a2rl@localhost",
    "GIT_TERMINAL_PROMPT": "0",
}


def _git(args: list[str], repo_dir: Path, input: bytes | None = None, env: dict[str, str] | None = None) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full_env.update(_GIT_ENV, GIT_DIR=str(repo_dir), **(env or {}))
    done = subprocess.run(["git", *args], input=input, env=full_env, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo_dir}: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode(errors="replace").strip()


def _read_regular(name: str, dir_fd: int, limit: int) -> bytes | None:
    """A regular file's bytes, read through a descriptor opened without following a link or waiting on a FIFO
    (what was opened is checked, whatever the name points at by now); None when it is not one, or over `limit`."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None  # a link swapped in, a socket, vanished
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit + 1)[:limit]
    finally:
        os.close(fd)


def _select(code_dir: Path, limits: Limits) -> tuple[dict[str, tuple[str, bytes]], list[str], str | None]:
    """({path: (git mode, content)} to record, paths skipped with why, why the walk stopped early or None), relative
    to code_dir. The files are read here, through descriptors (os.fwalk, O_NOFOLLOW, O_NONBLOCK): git never reads
    the agent's folder, so nothing swapped in after a check is followed and nothing the agent made can block it."""
    keep: dict[str, tuple[str, bytes]] = {}
    skipped: list[str] = []
    total, started = 0, time.monotonic()
    for root, dirs, files, root_fd in os.fwalk(code_dir, follow_symlinks=False):
        rel_root = os.path.relpath(root, code_dir)
        # A symlink to a directory appears in dirs; fwalk does not descend into it, so record it as a link.
        for name in list(dirs):
            if name in SKIP_DIRS:
                dirs.remove(name)
            elif os.path.islink(os.path.join(root, name)):
                dirs.remove(name)
                files.append(name)
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if len(keep) >= limits.max_files:
                return keep, skipped, f"more than {limits.max_files} files"
            if time.monotonic() - started > limits.max_s:
                return keep, skipped, f"took more than {limits.max_s:g} s"
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except OSError:
                continue  # vanished while walking: the agent is still writing
            if stat.S_ISLNK(st.st_mode):
                try:
                    keep[rel] = ("120000", os.fsencode(os.readlink(name, dir_fd=root_fd)))
                except OSError:
                    continue
            elif not stat.S_ISREG(st.st_mode):
                skipped.append(f"{rel} (not a regular file)")
            elif name.lower().endswith(WEIGHT_SUFFIXES):
                skipped.append(f"{rel} (model weights, {st.st_size} bytes)")
            elif st.st_size > limits.max_file_bytes:
                skipped.append(f"{rel} ({st.st_size} bytes > {limits.max_file_bytes})")
            elif total + st.st_size > limits.max_total_bytes:
                return keep, skipped, f"more than {limits.max_total_bytes} bytes"
            else:
                data = _read_regular(name, root_fd, limits.max_file_bytes)
                if data is None:
                    skipped.append(f"{rel} (unreadable, or not a regular file when read)")
                    continue
                total += len(data)
                keep[rel] = ("100755" if st.st_mode & 0o111 else "100644", data)
    return keep, skipped, None


def _commit_message(message: str, skipped: list[str], truncated: str | None = None) -> str:
    if truncated:
        message += f"\n\nSnapshot truncated: {truncated}; the rest of code/ is not recorded"
    if not skipped:
        return message + "\n"
    shown = skipped[:50] + ([f"... and {len(skipped) - 50} more"] if len(skipped) > 50 else [])
    return message + "\n\nNot recorded:\n" + "\n".join(f"  {s}" for s in shown) + "\n"


def snapshot_code(code_dir: Path, repo_dir: Path, message: str, max_file_bytes: int = MAX_FILE_BYTES,
                  limits: Limits | None = None) -> str | None:
    """Commit the current contents of code_dir to the bare repository repo_dir (created on first use).

    Returns the commit sha, or None when git failed (recording must never fail a submission; the failure is
    logged). A missing or empty code_dir still commits an empty tree, so every submission has a commit.
    """
    code_dir, repo_dir = Path(code_dir), Path(repo_dir)
    try:
        repo_dir.mkdir(parents=True, exist_ok=True)
        # One snapshot at a time per repository; different cells use different repositories and never wait.
        with open(repo_dir / "a2rl-snapshot.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (repo_dir / "HEAD").exists():
                _git(["init", "--quiet", "--bare", "--initial-branch=main"], repo_dir)
            return _snapshot_locked(code_dir, repo_dir, message, limits or Limits(max_file_bytes=max_file_bytes))
    except Exception as e:  # recording must never fail a submission
        log.warning("code snapshot of %s into %s failed: %s", code_dir, repo_dir, e)
        return None


def _snapshot_locked(code_dir: Path, repo_dir: Path, message: str, limits: Limits) -> str:
    tree, skipped, truncated = _write_tree(code_dir, repo_dir, limits)
    parent = _head(repo_dir)
    args = ["commit-tree", tree] + (["-p", parent] if parent else [])
    sha = _git(args, repo_dir, input=_commit_message(message, skipped, truncated).encode(errors="backslashreplace"))
    _git(["update-ref", BRANCH, sha] + ([parent] if parent else []), repo_dir)
    return sha


def _write_blob(repo_dir: Path, data: bytes) -> str:
    """Store a blob as a loose object (git's own format: zlib over "blob <size>\\0" + data) and return its id."""
    raw = b"blob %d\0" % len(data) + data
    sha = hashlib.sha1(raw).hexdigest()
    path = repo_dir / "objects" / sha[:2] / sha[2:]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{os.getpid()}-{sha[2:]}")
        tmp.write_bytes(zlib.compress(raw, 1))
        os.replace(tmp, path)
    return sha


def _write_tree(code_dir: Path, repo_dir: Path, limits: Limits) -> tuple[str, list[str], str | None]:
    keep, skipped, truncated = _select(code_dir, limits) if code_dir.is_dir() else ({}, [], None)
    if not keep:
        _git(["hash-object", "-w", "-t", "tree", "--stdin"], repo_dir, input=b"")  # store the empty tree
        return EMPTY_TREE, skipped, truncated
    lines = b"".join(f"{mode} {_write_blob(repo_dir, data)}\t".encode() + os.fsencode(path) + b"\0"
                     for path, (mode, data) in sorted(keep.items()))
    with tempfile.TemporaryDirectory(prefix="a2rl-index-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        _git(["update-index", "--add", "-z", "--index-info"], repo_dir, input=lines, env=env)
        return _git(["write-tree"], repo_dir, env=env), skipped, truncated


def _head(repo_dir: Path) -> str | None:
    try:
        return _git(["rev-parse", "-q", "--verify", BRANCH], repo_dir) or None
    except RuntimeError:
        return None


def history(repo_dir: Path) -> list[dict]:
    """Commits oldest first: {sha, message (first line)}."""
    repo_dir = Path(repo_dir)
    if not (repo_dir / "HEAD").exists() or _head(repo_dir) is None:
        return []
    out = _git(["log", "--reverse", "--format=%H %s", BRANCH], repo_dir)
    return [dict(zip(("sha", "message"), line.split(" ", 1) + [""])) for line in out.splitlines() if line]


def diff_summary(repo_dir: Path, from_sha: str | None, to_sha: str) -> dict:
    """What changed between two snapshots: {files_changed, insertions, deletions, files, stat}.

    from_sha None compares against the empty tree (everything is new). Binary files count as changed with
    no line counts.
    """
    repo_dir = Path(repo_dir)
    base = from_sha or EMPTY_TREE
    files = []
    numstat = _git(["diff", "--numstat", "-z", "--no-renames", base, to_sha], repo_dir)
    for record in numstat.split("\0"):
        if not record.strip():
            continue
        added, deleted, path = record.split("\t", 2)
        files.append({"path": path,
                      "insertions": None if added == "-" else int(added),
                      "deletions": None if deleted == "-" else int(deleted)})
    stat_lines = _git(["diff", "--stat=100", "--no-renames", base, to_sha], repo_dir).splitlines()
    stat_text = "\n".join(line.strip() for line in stat_lines)
    return {
        "from": from_sha, "to": to_sha,
        "files_changed": len(files),
        "insertions": sum(f["insertions"] or 0 for f in files),
        "deletions": sum(f["deletions"] or 0 for f in files),
        "files": files,
        "stat": stat_text,
    }


def diff_text(repo_dir: Path, from_sha: str | None, to_sha: str) -> str:
    """The unified diff between two snapshots (from_sha None: against the empty tree); binary files are named, not
    shown. For a reader of what the agent changed (the report's run summaries)."""
    return _git(["diff", "--no-renames", "--no-color", "--no-ext-diff", from_sha or EMPTY_TREE, to_sha],
                Path(repo_dir))


def search(repo_dir: Path, sha: str, pattern: str, max_hits: int = 20) -> list[str]:
    """Lines of a snapshot matching a regular expression (Python syntax), as "path:line: text"; binary files are
    skipped. For rules about what code may do (the report's training-mode check)."""
    import re

    regex = re.compile(pattern)
    hits: list[str] = []
    for path in _git(["ls-tree", "-r", "-z", "--name-only", sha], Path(repo_dir)).split("\0"):
        if not path:
            continue
        text = _git(["cat-file", "blob", f"{sha}:{path}"], Path(repo_dir))
        if "\0" in text[:8192]:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append(f"{path}:{number}: {line.strip()[:160]}")
                if len(hits) >= max_hits:
                    return hits
    return hits
