"""The sweep's manifest: OUTPUT_DIR/manifest.json, what a run was configured as, written before any cell starts.

It holds a2rl's commit (and whether its tree had uncommitted changes), the resolved config and the grid of cells,
each task's protocol and config with content hashes of the data files it reads (Task.data_files), the drivers'
models and prices (agents' and judges'), the sandbox's network mode and allowlist, the seeds, and the hardware
(this machine's CPU, GPUs and memory; the cluster's resources as Ray sees them), and the downloads lock it ran on
(`downloads`: every fetched file's sha256 and hub id's revision, and their fingerprint; orchestrator/lock.py).

A resumed sweep writes it again: the first stays manifest.json, and a resumed run configured differently gets
manifest-2.json (-3, ...) beside it, with the keys that differ printed; the report names them (`differences`).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from contracts.records import write_json_durably
from contracts.task_spec import TaskSpec
from orchestrator.file_hashes import HASH_CACHE, FileHashes

MANIFEST = "manifest.json"
VOLATILE = ("written_at",)       # keys that differ on every write, left out of comparisons
REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "ray", "vllm", "reasoning-gym", "alfworld")


def a2rl_version(repo: Path = REPO) -> dict:
    """The commit a2rl runs from and whether its tree differs from it (None: not a git checkout)."""
    def git(*args) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def hardware() -> dict:
    """This machine: CPU model and count, memory, GPUs (from nvidia-smi, where there is one)."""
    import psutil

    cpu = platform.processor() or None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpus = []
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                   "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
            for line in done.stdout.splitlines() if done.returncode == 0 else []:
                name, memory, driver = (part.strip() for part in line.split(","))
                gpus.append({"name": name, "memory_mb": int(memory), "driver": driver})
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
    return {"host": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
            "cpu": cpu, "cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
            "gpus": gpus}


def package_versions() -> dict:
    from importlib import metadata

    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def task_entry(config: dict | TaskSpec, cache_dir: Path, hashes: FileHashes) -> dict:
    """A task's protocol, config as written (its data ids: dataset, paths, sizes, seeds) and the hashes of the data
    files it reads."""
    from contracts.task import load_task

    task = load_task(config, cache_dir)
    files = {str(p): hashes.source(Path(p)) for p in task.data_files()}
    return {"cls": task.spec.cls, "protocol": task.protocol, "level": task.level, "base_model": task.spec.base_model,
            "config": task.spec.config, "data_files": files,
            **({} if files else {"data_note": "no data file: generated in-process from the task's config"})}


def driver_entry(driver: dict) -> dict:
    keep = ("provider", "model", "base_url", "api_key_env", "price_input_per_mtok", "price_output_per_mtok",
            "price_cached_input_per_mtok")
    return {k: driver.get(k) for k in keep if k in driver}


def build(cfg, cells, cache_dir: Path, cluster_resources: dict | None = None) -> dict:
    """The manifest of a sweep about to run `cells` (contracts.specs.CellSpec) under the resolved config `cfg`."""
    from contracts.specs import to_plain
    from orchestrator.sweep import judge_drivers

    tasks = list({c.task_name: c.task for c in cells}.values())
    hashes = FileHashes(cache_dir / HASH_CACHE)
    task_entries = {t.name: task_entry(t, cache_dir, hashes) for t in tasks}
    hashes.save()
    drivers = {c.driver.name: {"provider": c.driver.provider, "model": c.driver.model,
                               **driver_entry(c.driver.extra)} for c in cells if c.driver.provider != "none"}
    drivers.update({f"{j.get('name', 'judge')} (judge)": driver_entry(j) for j in judge_drivers(tasks)})
    sandbox = to_plain(cfg.sandbox) or {}
    return {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "a2rl": a2rl_version(),
        "sweep": cfg.sweep.name,
        "overrides": command_overrides(),
        "config": to_plain(cfg),
        "cells": [{"cell_id": c.cell_id, "agent": c.agent.name, "driver": c.driver.name, "task": c.task_name,
                   "mode": c.mode_name, "seed": c.seed} for c in cells],
        "seeds": sorted({c.seed for c in cells}),
        "tasks": task_entries,
        "drivers": drivers,
        "sandbox": {"network": sandbox.get("network"), "allow": sandbox.get("allow") or [],
                    "required": sandbox.get("required")},
        "hardware": {**hardware(), "cluster": cluster_resources},
        "packages": package_versions(),
        "downloads": downloads_lock(cells, cache_dir),
    }


def downloads_lock(cells, cache_dir: Path) -> dict:
    """The lock this run ran on (orchestrator/lock.py): its artefacts' digests and revisions as they are here, their
    fingerprint, and the cache's lock file they come from."""
    from orchestrator import lock
    from orchestrator.artefacts import sweep_artefacts

    here = lock.entries(sweep_artefacts(cells, cache_dir))
    return {**here, "fingerprint": lock.fingerprint(here), "lock_file": str(lock.lock_path(cache_dir))}


def command_overrides() -> list[str] | None:
    """The command line's overrides (`sweep=demo output_dir=...`), as Hydra parsed them: what `plan` repeats to extend
    the sweep (orchestrator/plan_command.py). None: the sweep was not started from the command line."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None


def flatten(value, prefix: str = "") -> dict:
    """Dotted keys to leaves (lists are leaves): what two manifests are compared on."""
    if isinstance(value, dict) and value:
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(first: dict, other: dict) -> list[str]:
    """The dotted keys whose values differ between two manifests (a key only one has differs)."""
    a, b = flatten(first), flatten(other)
    return sorted(k for k in set(a) | set(b) if k.split(".")[0] not in VOLATILE and a.get(k, ...) != b.get(k, ...))


def manifests(output_dir: Path) -> list[Path]:
    """manifest.json, then the resumed runs' manifest-2.json, -3, ... in order."""
    later = sorted(output_dir.glob("manifest-*.json"), key=lambda p: int(p.stem.split("-")[1])
                   if p.stem.split("-")[1].isdigit() else 0)
    first = output_dir / MANIFEST
    return ([first] if first.exists() else []) + [p for p in later if p.stem.split("-")[1].isdigit()]


def write(output_dir: Path, manifest: dict) -> tuple[Path, list[str]]:
    """Write the manifest (atomically): manifest.json the first time; on a resume, nothing when it equals one
    already written, else manifest-N.json beside them. Returns its path and the keys it differs from the first in."""
    written = manifests(output_dir)
    if not written:
        path = output_dir / MANIFEST
        write_json_durably(path, manifest)
        return path, []
    first = json.loads(written[0].read_text())
    for path in written:
        if not differences(json.loads(path.read_text()), manifest):
            return path, differences(first, manifest)
    path = output_dir / f"manifest-{len(written) + 1}.json"
    write_json_durably(path, manifest)
    return path, differences(first, manifest)


def summary(output_dir: Path) -> dict | None:
    """What the report says of the manifests: the first's commit, tree, hardware and data, and each later one's
    differing keys (None: the sweep wrote none)."""
    written = manifests(output_dir)
    if not written:
        return None
    first = json.loads(written[0].read_text())
    later = []
    for path in written[1:]:
        other = json.loads(path.read_text())
        later.append({"file": path.name, "written_at": other.get("written_at"),
                      "differences": differences(first, other)})
    return {"file": written[0].name, "manifest": first, "later": later}
