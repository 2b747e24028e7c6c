"""The files a paper-protocol run keeps in the agent's workspace as the original benchmark does (RD-Agent's
autorl_bench, rdagent 1.0.0: run_meta.json, made by core/utils.py init_run_meta and kept current by its grading
server; scores.json, the server's list of graded submissions), written by a2rl's grader and orchestrator.

The agent owns the folder and may have planted anything at these names (a link to another cell's file or to a2rl's
records, a FIFO, a folder). So a file here is never written through its name: the folder is opened without
following a link, a new file is created in it exclusively (a name that exists, link or not, is never opened), and
renamed over the old name, which replaces whatever was there without following it. The content is built from what
a2rl keeps (the run registry), never read back from the agent's copy, and formatted as the original writes it.
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

RUN_META = "run_meta.json"
SCORES = "scores.json"
FILE_MODE = 0o644  # the agent reads them; the grader rewrites them whole


def run_meta(start_time: int | None, timeout_s: int | None, last_submit_time: int | None = None,
             end_time: int | None = None) -> dict:
    """run_meta.json's content, its keys in the original's order (ints: seconds since the epoch, and a budget)."""
    return {"start_time": start_time, "timeout_s": timeout_s, "last_submit_time": last_submit_time,
            "end_time": end_time}


def write_json_file(folder: Path, name: str, payload) -> None:
    """Write `payload` as the original writes its files (json, indent 2, not ASCII-escaped) to `folder`/`name`,
    replacing whatever the name holds (a link is replaced, never followed; a FIFO is never opened). Raises OSError
    when it cannot (the folder is gone or a link, the name is a folder, the disk is full); nothing is left behind."""
    data = json.dumps(payload, indent=2, ensure_ascii=False).encode()
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, FILE_MODE)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(dir_fd)


def write_run_meta(workspace: Path, meta: dict) -> None:
    write_json_file(workspace, RUN_META, meta)


def write_scores(workspace: Path, entries: list[dict]) -> None:
    write_json_file(workspace, SCORES, entries)
