"""The release: the benchmark as RD-Agent released it (its autorl_bench, the `rdagent` 1.0.0 wheel on PyPI), as pinned
data. ("The release" throughout a2rl: the benchmark's own released code, which `protocol: paper` grades as.)

a2rl reads its files and never imports it (its dependencies are heavy and its RL loop cannot run here): the agents'
start.sh, AGENTS.md and config.yaml, each benchmark's description.md and eval.py, the shared instructions.md,
ALFWorld's react_prompts.json. None of its text is copied into this repository; it is fetched like any other pinned
artefact and checked against the wheel's sha256.

    release_root(cache_dir)    the wheel's autorl_bench folder, extracted once under cache_dir/release/
    python -m contracts.release    fetch the wheel now (scripts/setup does), print where it is

The wheel itself is kept in ~/.cache/a2rl/original/ (WHEEL_STORE; A2RL_ORIGINAL_WHEEL_DIR moves it), whatever a sweep's
cache_dir, so a set-up machine never fetches it again; a sweep extracts it into its own cache_dir, where the sandbox
shows it to agents read-only (the release's workspace links its texts there). The store's folder and variable keep
their first name (original), so a machine set up before keeps its wheel.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from contracts.file_lock import build_once

RELEASE = "rdagent==1.0.0"
WHEEL = "rdagent-1.0.0-py3-none-any.whl"
SHA256 = "8b92797b282910e14831fff8f48f3b67032c4d9aca349e3e90f82ccbfebc0e52"
INSIDE = "rdagent/scenarios/rl/autorl_bench/"   # the benchmark's folder in the wheel
VERSION_DIR = "rdagent-1.0.0"


class ReleaseUnavailable(RuntimeError):
    """The wheel is not on this machine and could not be fetched (or is not the pinned one)."""


def wheel_store() -> Path:
    return Path(os.environ.get("A2RL_ORIGINAL_WHEEL_DIR") or Path.home() / ".cache" / "a2rl" / "original").expanduser()


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[attr-defined]  # (3.11+)


def fetch_wheel() -> Path:
    """The pinned wheel in the wheel store, downloaded with pip (the machine's index settings apply) if missing."""
    store = wheel_store()
    wheel = store / WHEEL
    if wheel.is_file() and _sha256(wheel) == SHA256:
        return wheel
    store.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=store) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "--disable-pip-version-check", "-q", "-d", tmp, RELEASE],
                              capture_output=True, text=True)
        got = Path(tmp) / WHEEL
        if proc.returncode != 0 or not got.is_file():
            raise ReleaseUnavailable(
                f"the release ({RELEASE}, read as data) is not in {store} and `pip download {RELEASE}` "
                f"failed: {(proc.stderr or proc.stdout).strip()[-400:]}. Run scripts/setup where PyPI is reachable, "
                f"or put {WHEEL} (sha256 {SHA256}) into {store}")
        if (digest := _sha256(got)) != SHA256:
            raise ReleaseUnavailable(f"the downloaded {WHEEL} has sha256 {digest}, not the pinned {SHA256}: "
                                      "refusing it (a changed release or a tampered index)")
        os.replace(got, wheel)
    return wheel


def release_root(cache_dir: Path | str) -> Path:
    """The release's autorl_bench folder (agents/, benchmarks/, core/ ...), extracted once from the pinned wheel."""
    def extract(tmp: Path) -> None:
        wheel = fetch_wheel()  # checked against the pinned sha256 there
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if not info.filename.startswith(INSIDE) or info.is_dir():
                    continue
                rel = info.filename[len(INSIDE):]
                if rel.startswith("/") or ".." in Path(rel).parts:  # a wheel is data here: never write outside
                    continue
                out = tmp / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        for path in tmp.rglob("*"):  # read-only for everyone: agents see these files through links
            path.chmod(0o755 if path.is_dir() else 0o644)
        tmp.chmod(0o755)

    return build_once(Path(cache_dir).expanduser() / "release" / VERSION_DIR, extract)


if __name__ == "__main__":
    from contracts.layout import default_cache_dir

    print(release_root(sys.argv[1] if len(sys.argv) > 1 else default_cache_dir()))
