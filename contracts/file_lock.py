"""One exclusive lock on a file, across processes, and what it is for: a cache built once by whichever process needs
it first (the grader, the rollout hosts and the orchestrator may all ask at the same time)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_once(target: Path, build: Callable[[Path], object], marker: str | None = None) -> Path:
    """`target` (a file or a folder), built at most once: checked, then under a lock beside it checked again, made
    by `build(tmp)` at a temporary path beside it (a file, or a folder build makes) and renamed into place, so a
    reader sees it whole or not at all and a crash mid-build leaves nothing in its place. `marker`: the folder is
    complete when it holds this file, which gets what build returned as JSON (a folder without it is built again)."""
    def done() -> bool:
        return (target / marker).exists() if marker else target.exists()

    if done():
        return target
    with locked(target.parent / f".{target.name}.lock"):
        if done():  # another process built it while we waited
            return target
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        _remove(tmp)
        try:
            made = build(tmp)
            if marker:
                (tmp / marker).write_text(json.dumps(made))
                _remove(target)
            os.replace(tmp, target)
        finally:
            _remove(tmp)
    return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
