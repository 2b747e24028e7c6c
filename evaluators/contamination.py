"""Contamination: the hidden eval items (feedback and final splits) looked for in what an agent wrote, and
submissions that are the base model with a few weights nudged.

Every file of the workspace an agent could have written (its code/, output/, data it made or downloaded; not the
base model's link, nor the train data, instructions and run file a2rl gave it) is read as text and cut into word
n-grams. A hidden item is found in a file when `threshold` of its n-grams are there; an item shorter than `ngram`
words must occur whole. Binary files that are not weights (a downloaded dataset's arrow or parquet) are read for
their printable runs, as `strings` would; compressed text in them is not seen. Symbolic links are never followed,
and files are opened through their folder's descriptor without waiting (a FIFO the agent made is skipped, never
read). The work is bounded whatever the workspace holds (files, bytes, seconds): past a limit the scan stops and its
result says so (`truncated`), which the submission's record keeps.
"""
from __future__ import annotations

import math
import os
import re
import stat
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from contracts.task_spec import ContaminationSettings

TOKEN = re.compile(r"\w+|[^\w\s]")  # words and punctuation marks: "7 * 3" keeps its operator
PRINTABLE = re.compile(rb"[\x20-\x7e\t\n\r]{4,}")
GIVEN = {"instructions.md", "run.json", "data/train.jsonl"}  # what a2rl put in every workspace
SKIP_DIRS = {".git", "__pycache__"}  # (model/ is a link to the base model: links are never followed)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npy", ".npz", ".onnx", ".h5")
MAX_MATCHES = 50  # per scan: enough to show what was planted, bounded for the records


@dataclass
class Survey:
    """What one scan found, and how much of the workspace it read."""
    matches: list[dict] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    truncated: str | None = None    # why the scan stopped before the end (a limit), or None


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class HiddenItems:
    """The hidden items' n-grams, built once per grader; `scan(workspace)` says which items a file holds."""

    def __init__(self, items: list[tuple[str, str]], settings: ContaminationSettings):
        self.n, self.threshold = settings.ngram, settings.threshold
        self.max_bytes = int(settings.max_file_mb * 1e6)
        self.max_files, self.max_total = settings.max_files, int(settings.max_total_mb * 1e6)
        self.max_s = settings.max_s
        self.grams: dict[str, set[tuple]] = {}         # item id -> its n-grams (or its whole text, if short)
        self.by_gram: dict[tuple, list[str]] = defaultdict(list)
        for item_id, text in items:
            words = tokens(text)
            if not words:
                continue
            grams = {tuple(words)} if len(words) <= self.n else \
                {tuple(words[i:i + self.n]) for i in range(len(words) - self.n + 1)}
            self.grams[item_id] = grams
            for gram in grams:
                self.by_gram[gram].append(item_id)
        self.lengths = sorted({len(g) for g in self.by_gram})  # n, and the lengths of the short items

    def scan(self, workspace: Path) -> list[dict]:
        """[{file, item, overlap}] for each hidden item found in a file of the workspace, most overlap first."""
        return self.survey(workspace).matches

    def survey(self, workspace: Path) -> Survey:
        """The scan, with how much it read and whether a limit cut it short."""
        out, started = Survey(), time.monotonic()
        matches = out.matches
        for rel, name, dir_fd in self._files(Path(workspace)):
            if out.files >= self.max_files:
                out.truncated = f"scan truncated: more than {self.max_files} files"
                break
            if out.bytes >= self.max_total:
                out.truncated = f"scan truncated: more than {self.max_total / 1e6:g} MB read"
                break
            if time.monotonic() - started > self.max_s:
                out.truncated = f"scan truncated: more than {self.max_s:g} s"
                break
            out.files += 1
            text = self._read(name, dir_fd, out)
            if not text:
                continue
            words = tokens(text)
            hits: dict[str, int] = defaultdict(int)
            for length in self.lengths:
                for gram in {tuple(words[i:i + length]) for i in range(len(words) - length + 1)}:
                    for item_id in self.by_gram.get(gram, ()):
                        hits[item_id] += 1
            for item_id, n in hits.items():
                overlap = n / len(self.grams[item_id])
                if overlap >= self.threshold:
                    matches.append({"file": rel, "item": item_id, "overlap": round(overlap, 3)})
        matches.sort(key=lambda m: (-m["overlap"], m["file"], m["item"]))
        del matches[MAX_MATCHES:]
        return out

    def _files(self, workspace: Path):
        """(path relative to the workspace, name, its folder's descriptor) of each file worth reading; os.fwalk
        walks by descriptors and never into a link, whatever is swapped in meanwhile."""
        for root, dirs, files, root_fd in os.fwalk(workspace, follow_symlinks=False):
            rel_root = Path(os.path.relpath(root, workspace))
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                rel = os.path.normpath(rel_root / name)
                if rel in GIVEN or name.lower().endswith(WEIGHT_SUFFIXES):
                    continue
                yield rel, name, root_fd

    def _read(self, name: str, dir_fd: int, out: Survey) -> str:
        try:  # not following a link, not waiting on a FIFO; what was opened is checked
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return ""  # a link, a socket, vanished or unreadable: nothing to find
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
                return ""
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(self.max_bytes)
        except OSError:
            return ""
        finally:
            os.close(fd)
        out.bytes += len(data)
        if b"\0" in data[:8192]:  # binary: its printable runs (the strings of an arrow or parquet file)
            return "\n".join(run.decode("ascii") for run in PRINTABLE.findall(data))
        return data.decode("utf-8", errors="replace")


def relative_distance(weights: dict, base: dict) -> float:
    """||w - base|| / ||base|| over all tensors (inf when names or shapes differ): how far a submission moved."""
    if weights.keys() != base.keys() or any(weights[k].shape != base[k].shape for k in base):
        return math.inf
    moved = total = 0.0
    for name, b in base.items():
        b64, w64 = b.double(), weights[name].double()
        moved += float(((w64 - b64) ** 2).sum())
        total += float((b64 ** 2).sum())
    return math.sqrt(moved / total) if total else math.inf
