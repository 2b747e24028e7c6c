"""Contamination: the hidden eval items (feedback and final splits) looked for in what an agent wrote, and
submissions that are the base model with a few weights nudged.

Every file of the workspace (its code/, output/, data it made or downloaded, its HOME with the CLI's session
stores; not the base model's link) is read as text and cut into word n-grams. A hidden item is found in a file when
`threshold` of its n-grams are there; an item shorter than `ngram` words must occur whole.

Text a2rl gave the agent is not evidence, wherever its tools copied it (a CLI keeps its prompt, the instructions
and what its commands printed in session files and SQLite WALs in its HOME). Given text is the task's instructions,
train split and evaluator files, and every file of the workspace as it was when the agent started, while it is
unchanged. An item's n-gram found inside a stretch of given text (the 2 * ngram words that start or end with it
occur in given text too) is a copy of that text; an item is found only when `threshold` of its other n-grams (those
given text does not hold in the item's own context) are in the file outside such stretches. An item all of whose
n-grams are given in context is never evidence (tests/test_contamination.py checks that no task's instructions or
evaluator files show one). Text is read through its string escapes (\\n, \\", \\uXXXX, escaped again in JSON
inside JSON), so that a session file's copy reads as what was copied.

Binary files that are not weights (a downloaded dataset's arrow or parquet, a SQLite database or WAL) are read for
their printable runs, as `strings` would; compressed text in them is not seen. Symbolic links are never followed,
and files are opened through their folder's descriptor without waiting (a FIFO the agent made is skipped, never
read). The work is bounded whatever the workspace holds (files, bytes, seconds): past a limit the scan stops and its
result says so (`truncated`), which the submission's record keeps.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import stat
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contracts.task_spec import ContaminationSettings

TOKEN = re.compile(r"\w+|[^\w\s\\]")  # words and punctuation marks ("7 * 3" keeps its operator); not backslashes
# A string escape, escaped again any number of times (JSON inside JSON): \n \r \t stand for whitespace, \uXXXX for
# its character; the other escapes (\" \\ \/) are their character once TOKEN drops the backslashes.
ESCAPE = re.compile(r"\\+(?:u([0-9a-fA-F]{4})|[nrt])")
SURROGATE = re.compile("[\ud800-\udfff]")
PRINTABLE = re.compile(rb"[\x20-\x7e\t\n\r]{4,}")
SKIP_DIRS = {".git", "__pycache__"}  # (model/ is a link to the base model: links are never followed)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npy", ".npz", ".onnx", ".h5")
MAX_MATCHES = 50  # per scan: enough to show what was planted, bounded for the records
# A hidden item's n-gram inside this many times n words of given text is a copy of that text (16 words: a train
# row's copy in a CLI's session file, cut at a SQLite page every ~4 KB, keeps its context on one side or the other)
CONTEXT = 2
GIVEN_CACHE = 64  # given files' n-grams kept by digest (the train split is the same file in every cell)


@dataclass
class Survey:
    """What one scan found, and how much of the workspace it read."""
    matches: list[dict] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    truncated: str | None = None    # why the scan stopped before the end (a limit), or None


def _unescape(m: re.Match) -> str:
    return chr(int(m.group(1), 16)) if m.group(1) else " "


def tokens(text: str) -> list[str]:
    """The words and marks of a text, read through its string escapes."""
    if "\\" in text:
        text = ESCAPE.sub(_unescape, text)
        if SURROGATE.search(text):  # \ud83d\ude00 as JSON writes one emoji: the pair is one character
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return TOKEN.findall(text.lower())


def phrase(text: str) -> str:
    """The text's words and marks, one space apart and around: `phrase(item) in phrase(text)` says that the item
    occurs in the text, whatever its spacing and escapes."""
    return f" {' '.join(tokens(text))} "


class HiddenItems:
    """The hidden items' n-grams, built once per grader; `survey(workspace, given)` says which items a file holds.

    given_texts: what a2rl gives every agent of the task (Task.given_texts). An n-gram of an item that occurs in a
    file inside a stretch of given text (the CONTEXT * ngram words that start or end with it occur in given text
    too) is a copy of that text, not evidence; an item counts only its other n-grams (`novel`). `exposed`: the
    items that given text holds all of in context (a task that shows them to every agent)."""

    def __init__(self, items: list[tuple[str, str]], settings: ContaminationSettings,
                 given_texts: Iterable[str] = ()):
        self.n, self.threshold = settings.ngram, settings.threshold
        self.window = CONTEXT * settings.ngram
        self.max_bytes = int(settings.max_file_mb * 1e6)
        self.max_files, self.max_total = settings.max_files, int(settings.max_total_mb * 1e6)
        self.max_s = settings.max_s
        self.words: dict[str, list[str]] = {}        # item id -> its words
        self.grams: dict[str, set[tuple]] = {}       # item id -> its n-grams (or its whole text, if short)
        self.by_gram: dict[tuple, list[str]] = defaultdict(list)
        for item_id, text in items:
            words = tokens(text)
            if not words:
                continue
            grams = {tuple(words)} if len(words) <= self.n else \
                {tuple(words[i:i + self.n]) for i in range(len(words) - self.n + 1)}
            self.words[item_id], self.grams[item_id] = words, grams
            for gram in grams:
                self.by_gram[gram].append(item_id)
        self.lengths = sorted({len(g) for g in self.by_gram})  # n, and the lengths of the short items
        self.starts = {g[0] for g in self.by_gram}  # a position whose word starts no n-gram is passed over
        shown, given = set(), set()
        self._task_files: set[str] = set()  # sha256 of the task's given texts: their contexts are in self.given
        self._given_cache: dict[str, frozenset] = {}  # sha256 of another given file -> its contexts
        for text in given_texts if self.grams else ():
            contexts = set()
            for gram, *around in self._hits(tokens(text)):
                shown.add(gram)
                contexts.update(h for h in around if h is not None)
            given |= contexts
            self._task_files.add(hashlib.sha256(text.encode()).hexdigest())  # its copy in a workspace: not read again
        self.given = frozenset(given)
        self.exposed = sorted(i for i, grams in self.grams.items()
                              if grams <= shown and (len(self.words[i]) <= self.n or not self.novel(i, self.given)))

    def _hits(self, words: list[str]):
        """(n-gram, the hashes of the windows of words that start and that end with it) of each hidden item's
        n-gram in the words, where it occurs (a window past either end is None)."""
        size = self.window
        for i, word in enumerate(words):
            if word in self.starts:
                for length in self.lengths:
                    gram = tuple(words[i:i + length])
                    if len(gram) == length and gram in self.by_gram:
                        yield (gram, hash(tuple(words[i:i + size])) if i + size <= len(words) else None,
                               hash(tuple(words[i + length - size:i + length])) if i + length >= size else None)

    def _contexts(self, words: list[str]) -> frozenset:
        """The windows of given text around hidden items' n-grams (their hashes)."""
        return frozenset(h for _, *around in self._hits(words) for h in around if h is not None)

    def novel(self, item_id: str, given: Collection) -> set[tuple]:
        """The item's n-grams that given text does not hold in the item's own context."""
        return {gram for gram, *around in self._hits(self.words[item_id])
                if gram in self.grams[item_id] and not any(h in given for h in around if h is not None)}

    def scan(self, workspace: Path, given: Mapping[str, str] | None = None) -> list[dict]:
        """[{file, item, overlap}] for each hidden item found in a file of the workspace, most overlap first."""
        return self.survey(workspace, given).matches

    def survey(self, workspace: Path, given: Mapping[str, str] | None = None) -> Survey:
        """The scan, with how much it read and whether a limit cut it short. given: {path in the workspace: sha256}
        of the files a2rl wrote there before the agent started; each one still as it was is given text, not the
        agent's writing."""
        out, started = Survey(), time.monotonic()
        if not self.grams:  # an interactive task's items are environments, not texts
            return out
        given = given or {}
        contexts, candidates = set(self.given), []
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
            data = self._read(name, dir_fd, out)
            if not data:
                continue
            digest = hashlib.sha256(data).hexdigest() if rel in given else None
            if digest is not None and digest == given[rel]:
                if digest not in self._task_files:
                    contexts |= self._given_contexts(digest, data)
                continue
            found, pending = set(), defaultdict(set)  # pending: occurrences no given text read so far explains
            for gram, *around in self._hits(tokens(_text(data))):
                found.add(gram)
                if not any(h in contexts for h in around if h is not None):
                    pending[gram].add(tuple(around))
            if pending:
                candidates.append((rel, found, pending))
        # decided once every given file is read: a copy is explained by given text wherever that text lies
        for rel, found, pending in candidates:
            unexplained = {gram for gram, occurrences in pending.items()
                           if any(not any(h in contexts for h in around if h is not None) for around in occurrences)}
            for item_id in sorted({i for gram in unexplained for i in self.by_gram[gram]}):
                novel = self.novel(item_id, contexts)
                if novel and len(unexplained & novel) >= self.threshold * len(novel):
                    grams = self.grams[item_id]
                    out.matches.append({"file": rel, "item": item_id, "overlap": round(len(found & grams) / len(grams),
                                                                                       3)})
        out.matches.sort(key=lambda m: (-m["overlap"], m["file"], m["item"]))
        del out.matches[MAX_MATCHES:]
        return out

    def _given_contexts(self, digest: str, data: bytes) -> frozenset:
        found = self._given_cache.get(digest)
        if found is None:
            found = self._contexts(tokens(_text(data)))
            if len(self._given_cache) >= GIVEN_CACHE:
                self._given_cache.pop(next(iter(self._given_cache)))
            self._given_cache[digest] = found
        return found

    def _files(self, workspace: Path):
        """(path relative to the workspace, name, its folder's descriptor) of each file worth reading; os.fwalk
        walks by descriptors and never into a link, whatever is swapped in meanwhile."""
        for root, dirs, files, root_fd in os.fwalk(workspace, follow_symlinks=False):
            rel_root = Path(os.path.relpath(root, workspace))
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                if not name.lower().endswith(WEIGHT_SUFFIXES):
                    yield os.path.normpath(rel_root / name), name, root_fd

    def _read(self, name: str, dir_fd: int, out: Survey) -> bytes:
        try:  # not following a link, not waiting on a FIFO; what was opened is checked
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return b""  # a link, a socket, vanished or unreadable: nothing to find
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes:
                return b""
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(self.max_bytes)
        except OSError:
            return b""
        finally:
            os.close(fd)
        out.bytes += len(data)
        return data


def _text(data: bytes) -> str:
    if b"\0" in data[:8192]:  # binary: its printable runs (the strings of an arrow or parquet file, a SQLite page)
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
