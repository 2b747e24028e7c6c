"""Durable record files: appended and fsynced before anyone is told, read back whole lines only.

Every process that records something writes it here first (the grader its submissions, the driver proxy its calls, a
cell its attempt and outcome, a CLI agent's session its trace), under the attempt's folder of the output layout; the
ledger is derived from these files (orchestrator.records).
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

# The files of one attempt (Layout.attempt_dir).
SUBMISSIONS = "submissions.jsonl"
DRIVER_CALLS = "driver_calls.jsonl"
TRACE = "trace.jsonl"  # a CLI agent's own trace, parsed into events (agents/cli/base.py lists their types)
REPROMPTS = "reprompts.jsonl"  # each time the cell started its agent again (orchestrator/reprompt.py)
NETWORK = "network.jsonl"  # each request an isolated sandbox's HTTP proxy saw: allowed (allowlist) or refused
ATTEMPT = "attempt.json"
OUTCOME = "outcome.json"


def append_jsonl(path: Path, record: dict) -> None:
    """Append one line and fsync it: once this returns, the record survives any crash."""
    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        write_whole(fd, line, path)  # one write with O_APPEND: concurrent writers never interleave within a line
        os.fsync(fd)
    finally:
        os.close(fd)


def write_whole(fd: int, data: bytes, path) -> None:
    """Append data (whole lines) with one write on an O_APPEND descriptor, or none of it. A disk that fills up takes
    part of a line and refuses the rest: the torn line is cut off again, or the next append, once there is room,
    would glue its own line to it and readers would drop both."""
    written = os.write(fd, data)
    if written != len(data):
        os.ftruncate(fd, os.fstat(fd).st_size - written)  # (a writer appending in between is not expected)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def write_json_durably(path: Path, data: dict) -> None:
    """Replace path with data as a whole: a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_jsonl(path: Path) -> list[dict]:
    """Complete lines only: a line torn by a crash mid-write is ignored."""
    if not path.exists():
        return []
    out = []
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                continue
    return out


class JsonlTail:
    """Reads the lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def read_new(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # the writer is mid-line; take it next time
                self.offset += len(raw)
                try:
                    out.append(json.loads(raw))
                except json.JSONDecodeError:
                    continue
        return out
