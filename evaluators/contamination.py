"""Contamination: the hidden eval items (feedback and final splits) looked for in what an agent wrote, and
submissions that are the base model with a few weights nudged.

Every file of the workspace an agent could have written (its code/, output/, data it made or downloaded; not the
base model's link, nor the train data, instructions and run file a2rl gave it) is read as text and cut into word
n-grams. A hidden item is found in a file when `threshold` of its n-grams are there; an item shorter than `ngram`
words must occur whole. Binary files that are not weights (a downloaded dataset's arrow or parquet) are read for
their printable runs, as `strings` would; compressed text in them is not seen. Symbolic links are never followed.
"""
from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from pathlib import Path

from contracts.task_spec import ContaminationSettings

TOKEN = re.compile(r"\w+|[^\w\s]")  # words and punctuation marks: "7 * 3" keeps its operator
PRINTABLE = re.compile(rb"[\x20-\x7e\t\n\r]{4,}")
GIVEN = {"instructions.md", "run.json", "data/train.jsonl"}  # what a2rl put in every workspace
SKIP_DIRS = {".git", "__pycache__"}  # (model/ is a link to the base model: links are never followed)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npy", ".npz", ".onnx", ".h5")
MAX_MATCHES = 50  # per scan: enough to show what was planted, bounded for the records


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class HiddenItems:
    """The hidden items' n-grams, built once per grader; `scan(workspace)` says which items a file holds."""

    def __init__(self, items: list[tuple[str, str]], settings: ContaminationSettings):
        self.n, self.threshold = settings.ngram, settings.threshold
        self.max_bytes = int(settings.max_file_mb * 1e6)
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
        matches = []
        for path in self._files(Path(workspace)):
            text = self._read(path)
            if not text:
                continue
            words = tokens(text)
            hits: dict[str, int] = defaultdict(int)
            for length in self.lengths:
                for gram in {tuple(words[i:i + length]) for i in range(len(words) - length + 1)}:
                    for item_id in self.by_gram.get(gram, ()):
                        hits[item_id] += 1
            rel = str(path.relative_to(workspace))
            for item_id, n in hits.items():
                overlap = n / len(self.grams[item_id])
                if overlap >= self.threshold:
                    matches.append({"file": rel, "item": item_id, "overlap": round(overlap, 3)})
        matches.sort(key=lambda m: (-m["overlap"], m["file"], m["item"]))
        return matches[:MAX_MATCHES]

    def _files(self, workspace: Path):
        for root, dirs, files in os.walk(workspace, followlinks=False):
            rel_root = Path(root).relative_to(workspace)
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                path = Path(root) / name
                if str(rel_root / name) in GIVEN or name.lower().endswith(WEIGHT_SUFFIXES) or path.is_symlink():
                    continue
                yield path

    def _read(self, path: Path) -> str:
        try:
            if not path.is_file() or path.stat().st_size > self.max_bytes:
                return ""
            data = path.read_bytes()
        except OSError:
            return ""  # vanished or unreadable: nothing to find
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
