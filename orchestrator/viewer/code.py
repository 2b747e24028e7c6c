"""A cell's code at each submission, from its snapshot repository (contracts.code_snapshots: a bare git repo).

The page gets each snapshot's file list and every distinct file's text once (a file unchanged across submissions is
one blob), so it can show the code at any submission and the diff between any two without asking a server: the same
data works from a static copy on disk. Binary files and files over MAX_SHOWN are named, not shown.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from contracts.code_snapshots import history

MAX_SHOWN = 256_000       # bytes of one file shown; the snapshot keeps up to 1 MiB (code_snapshots.MAX_FILE_BYTES)
MAX_TOTAL = 16_000_000    # bytes of text one cell's page may carry in all; past it, later files are named only
# git as code_snapshots runs it: the user's and the system's configuration ignored, nothing written
_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}


def _git(repo: Path, args: list[str], input: bytes | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", f"--git-dir={repo}", *args], input=input, env={**env, **_ENV},
                          capture_output=True, check=True)
    return done.stdout


def snapshots(repo: Path, trajectory: list[dict]) -> dict:
    """{snapshots: [{sha, message, submissions, files: [{path, blob, size}]}], blobs: {blob: text or None}}.
    None text: binary, too large, or past the page's total (the entry says which in `skipped`)."""
    if not (repo / "HEAD").exists():
        return {"snapshots": [], "blobs": {}, "skipped": {}}
    by_commit: dict[str, list] = {}
    for s in trajectory:
        if s.get("code_commit"):
            by_commit.setdefault(s["code_commit"], []).append(s["index"])
    shots, wanted = [], {}
    for commit in history(repo):
        raw = _git(repo, ["ls-tree", "-r", "-l", "-z", commit["sha"]])
        files = []
        for record in raw.split(b"\0"):
            if not record:
                continue
            meta, path = record.split(b"\t", 1)
            _mode, kind, blob, size = meta.split()
            if kind != b"blob":
                continue
            size_n = int(size) if size.isdigit() else 0
            files.append({"path": os.fsdecode(path), "blob": blob.decode(), "size": size_n})
            wanted[blob.decode()] = size_n
        shots.append({"sha": commit["sha"], "message": commit["message"],
                      "submissions": by_commit.get(commit["sha"], []), "files": files})
    blobs, skipped = _read_blobs(repo, wanted)
    return {"snapshots": shots, "blobs": blobs, "skipped": skipped}


def _read_blobs(repo: Path, wanted: dict[str, int]) -> tuple[dict[str, str | None], dict[str, str]]:
    """The texts of the blobs worth showing, read with one `git cat-file --batch` (a process per file is 270 cells
    x dozens of files)."""
    blobs: dict[str, str | None] = {}
    skipped: dict[str, str] = {}
    total, ask = 0, []
    for blob, size in wanted.items():
        if size > MAX_SHOWN:
            blobs[blob], skipped[blob] = None, f"{size} bytes: too large to show"
        elif total + size > MAX_TOTAL:
            blobs[blob], skipped[blob] = None, "not shown: the page already holds as much code as it may"
        else:
            total += size
            ask.append(blob)
    if not ask:
        return blobs, skipped
    out = _git(repo, ["cat-file", "--batch"], input=("\n".join(ask) + "\n").encode())
    pos = 0
    for blob in ask:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        data = out[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        if b"\0" in data[:8192]:
            blobs[blob], skipped[blob] = None, "binary"
        else:
            blobs[blob] = data.decode(errors="replace")
    return blobs, skipped
