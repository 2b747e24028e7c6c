"""The downloads lock: CACHE_DIR/downloads.lock.json, what `prepare` fetched, so that a run can say which bytes it
graded on and two labs can prove they graded on the same ones.

    {"files": {file name: {"sha256", "size", "url", "path" (where it is kept; null: unpacked), ...}},
     "hub":   {"model org/name" | "dataset org/name": {"revision"}}}

- `prepare` writes it: this sweep's artefacts' entries (orchestrator/artefacts.py `locked()`), merged into what it
  held (other sweeps' entries stay).
- Pins, by file name: `downloads.sha256`, then a lock a lab publishes with its results (`downloads.lock`: this file,
  or a run's manifest.json, which carries it), then this cache's own lock: a file fetched again must be the bytes
  first fetched, or it is refused naming the file. A lab's hub revisions are compared once a model or set is here.
- `changed()`: a file prepare keeps whose bytes are no longer the locked ones (edited, truncated, replaced): prepare
  deletes it and fetches it again (checked against the lock); a run refuses to start, naming it.
- The run's manifest carries this sweep's entries and their fingerprint (`fingerprint`: the sha256 of the file
  names' digests and the hub ids' revisions); the report prints it.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from contracts.records import write_json_durably
from contracts.specs import ConfigError

LOCK = "downloads.lock.json"


def lock_path(cache_dir: Path) -> Path:
    return Path(cache_dir).expanduser() / LOCK


def empty() -> dict:
    return {"files": {}, "hub": {}}


def read(path: Path, required: bool = False) -> dict:
    """A lock file (or a manifest.json carrying one); an empty lock when there is none (required: a ConfigError)."""
    path = Path(path).expanduser()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        if required:
            raise ConfigError(f"downloads.lock={path} does not exist; point it at a downloads.lock.json (or a run's "
                              "manifest.json) or set it to null") from None
        return empty()
    except (OSError, ValueError) as e:
        raise ConfigError(f"the downloads lock {path} cannot be read ({e}); fix or delete it "
                          "(`python -m orchestrator prepare` writes it again)") from None
    data = data.get("downloads", data) if isinstance(data, dict) else {}  # (a manifest carries it)
    return {"files": dict(data.get("files") or {}), "hub": dict(data.get("hub") or {})}


def merge(*locks: dict) -> dict:
    out = empty()
    for lock in locks:
        for part in ("files", "hub"):
            out[part].update(lock.get(part) or {})
    return out


def entries(artefacts) -> dict:
    """The lock entries of what is here for these artefacts (each one's `locked()`)."""
    return merge(*(a.locked() for a in artefacts))


def write(cache_dir: Path, fresh: dict) -> Path:
    path = lock_path(cache_dir)
    kept = read(path) if path.exists() else empty()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_durably(path, merge(kept, fresh))
    return path


def fingerprint(lock: dict) -> str:
    """The sha256 of what the lock pins (file names' digests, hub ids' revisions): equal for two labs that graded
    on the same bytes."""
    pinned = {"files": {n: e.get("sha256") for n, e in sorted((lock.get("files") or {}).items())},
              "hub": {n: e.get("revision") for n, e in sorted((lock.get("hub") or {}).items())}}
    return hashlib.sha256(json.dumps(pinned, sort_keys=True).encode()).hexdigest()


def pins(downloads: dict, cache_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({file name: sha256}, {hub id: revision}) every fetch is held to: downloads.sha256 over a lab's lock
    (downloads.lock) over this cache's own lock."""
    own = read(lock_path(cache_dir))
    lab = read(downloads["lock"], required=True) if downloads.get("lock") else empty()
    files = {n: e["sha256"] for lock in (own, lab) for n, e in lock["files"].items() if e.get("sha256")}
    files.update(downloads.get("sha256") or {})
    hub = {n: e["revision"] for n, e in lab["hub"].items() if e.get("revision")}
    return files, hub


def changed(here: dict, expected: dict[str, str], digest: Callable[[Path], str]) -> list[tuple[str, Path, str, str]]:
    """(file name, path, its sha256 now, the expected one) for each kept file whose bytes are not the expected
    (pinned or locked) ones, and each unpacked one (an archive) whose record names other bytes than a pin (path: the
    record, whose removal makes prepare fetch it again). here: entries(artefacts)."""
    out = []
    for name, entry in sorted((here.get("files") or {}).items()):
        want = expected.get(name) or entry.get("sha256")
        if not want:
            continue
        if entry.get("path"):
            path = Path(entry["path"])
            if path.is_file() and (now := digest(path)) != want:
                out.append((name, path, now, want))
        elif entry.get("record") and entry.get("sha256") != want:  # unpacked: what its record says was fetched
            out.append((name, Path(entry["record"]), str(entry.get("sha256")), want))
    return out


def describe(lock: dict) -> str:
    """One line: what the lock holds, by name (the report's)."""
    files = [f"{n} sha256 {str(e.get('sha256'))[:12]}" for n, e in sorted((lock.get("files") or {}).items())]
    hub = [f"{n} revision {str(e.get('revision'))[:12]}" for n, e in sorted((lock.get("hub") or {}).items())]
    return "; ".join(files + hub) or "nothing fetched"
