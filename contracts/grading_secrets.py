"""Secrets the grading side keeps, so that a hidden split cannot be rebuilt from a task's public config.

A generated eval split (reasoning-gym questions, ALFWorld games) is drawn from seeds an agent could otherwise read
in the config and replay with the same generator inside its sandbox. Each such split is salted with a random
secret made once per cache and kept in CACHE_DIR/grading/ (hidden from agents, readable only by a2rl's user).
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from contracts.file_lock import build_once


def grading_secret(cache_dir: Path, name: str) -> str:
    """CACHE_DIR/grading/<name>: made once (by whichever process needs it first), then read."""
    def make(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # readable by a2rl's user only
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))

    return build_once(Path(cache_dir) / "grading" / name, make).read_text().strip()
