"""Files' sha256, cached by path, mtime and size in one JSON file under the cache: what the manifest hashes a task's
data with and what the downloads lock compares fetched files by (orchestrator/manifest.py, artefacts.py)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from contracts.records import write_json_durably

HASH_CACHE = "data-hashes.json"  # in CACHE_DIR: file hashes by path, mtime and size (a dataset is hashed once)


class FileHashes:
    """sha256 of files, cached by resolved path, mtime and size in one JSON file (a dataset is read once)."""

    def __init__(self, cache_file: Path | None):
        self.cache_file, self.changed = cache_file, False
        try:
            self.known = json.loads(cache_file.read_text()) if cache_file else {}
        except (OSError, ValueError):
            self.known = {}

    def file(self, path: Path) -> str:
        real = path.resolve()
        st = real.stat()
        key, stamp = str(real), [st.st_mtime_ns, st.st_size]
        kept = self.known.get(key)
        if kept and kept[:2] == stamp:
            return kept[2]
        with open(real, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()  # as workspace.given_digests hashes files
        self.known[key], self.changed = [*stamp, digest], True
        return digest

    def source(self, path: Path) -> dict:
        """A file's hash, or a folder's: the hash of its files' relative paths and hashes, in order."""
        if not path.exists():
            return {"missing": True}
        if path.is_file():
            return {"sha256": self.file(path), "bytes": path.stat().st_size, "files": 1}
        digest, n, size = hashlib.sha256(), 0, 0
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                f = Path(root, name)
                if not f.is_file():  # a dangling link
                    continue
                digest.update(f"{f.relative_to(path)}\0{self.file(f)}\n".encode())
                n, size = n + 1, size + f.stat().st_size
        return {"sha256": digest.hexdigest(), "bytes": size, "files": n}

    def save(self) -> None:
        if self.changed and self.cache_file is not None:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            write_json_durably(self.cache_file, self.known)
