"""`python -m orchestrator prepare [overrides]`: fetch, before any cell holds a GPU, everything a sweep's cells and
graders read that a run would otherwise fetch while it runs, then say what is where in one table.

The sweep is resolved as a run resolves it (sweep.expand, the same overrides), and what it needs is the list the dry
run checks (orchestrator/artefacts.py): hub models by huggingface_hub's snapshot_download into CACHE_DIR/models/hub
(a run's own call), task data by the tasks' own loading code (the Hugging Face caches; upstream archives into
data_path), the released original's pinned wheel. Each fetch keeps what finished when it is interrupted (hub files,
archives, parts of a file), so running it again resumes; what is there already is checked locally, so a second run
asks the network nothing.

On a cluster (`cluster=ray`) it runs on every alive node in turn, as a Ray task pinned to the node: what lives on
shared storage (cache_dir) is fetched by the first node and found by the others; what lives on each node's own disk
(the Hugging Face datasets cache under ~/.cache/huggingface, the wheel store) is fetched on each.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from contracts import registry
from contracts.specs import to_plain
from orchestrator import lock
from orchestrator.artefacts import sweep_artefacts
from orchestrator.preflight import check_tasks
from orchestrator.sweep import check_cluster, expand

FETCHED, THERE, FAILED = "fetched", "already there", "failed"
AGAIN = ("run the same command again once that is fixed: what finished is kept and a cut download resumes")


@dataclass
class Row:
    artefact: str
    path: str
    size: int | None
    checksum: str
    status: str
    reason: str = ""
    node: str = ""


def prepare_here(cfg: DictConfig, out=sys.stdout) -> list[Row]:
    """Fetch what this machine lacks for the sweep; one row per artefact."""
    registry.search(*(cfg.get("imports") or []))
    check_cluster(cfg)
    cells = expand(cfg)
    check_tasks(cells)
    sources = to_plain(cfg.downloads) or {}
    cache_dir = Path(cfg.cache_dir).expanduser()
    artefacts = sweep_artefacts(cells, cache_dir)
    files, revisions = lock.pins(sources, cache_dir)
    sources["sha256"] = files  # every fetch is held to the pins and to what this cache fetched before
    recheck(artefacts, files, out)
    missing_at_start = {a.key for a in artefacts if not a.present()}
    rows = []
    for artefact in artefacts:
        status, reason = THERE, ""
        if artefact.key in missing_at_start:
            status = FETCHED
            if not artefact.present():  # (an earlier artefact may have brought it: the wheel a task's texts)
                print(f"[a2rl] fetching {artefact.name} ...", file=out, flush=True)
                try:
                    artefact.fetch(sources)
                except Exception as e:  # noqa: BLE001 - one failed artefact is a row; the others go on
                    status, reason = FAILED, f"{type(e).__name__}: {str(e).strip()[:1200]}"
                else:
                    if not artefact.present():
                        status, reason = FAILED, "fetched, but still not complete where a run reads it"
        for hub_id, entry in artefact.locked().get("hub", {}).items():
            if revisions.get(hub_id, entry["revision"]) != entry["revision"]:
                status, reason = FAILED, (f"{hub_id} is at revision {entry['revision']} here, but the lock "
                                          f"{sources.get('lock')} pins {revisions[hub_id]}: not the same files")
        size, checksum = artefact.facts()
        rows.append(Row(artefact.name, str(artefact.where or "-"), size, checksum, status, reason))
    path = lock.write(cache_dir, lock.entries(artefacts))
    print(f"[a2rl] lock: {path} (fingerprint {lock.fingerprint(lock.read(path))[:16]})", file=out)
    return rows


def recheck(artefacts, pins: dict[str, str], out) -> None:
    """What an earlier prepare kept, checked again: a file whose bytes are not the locked (or pinned) ones, or
    that is not what its name says (a page or a cut file an older a2rl kept), is deleted with a line naming it, so
    that it is fetched again below (and held to the lock there)."""
    from contracts.downloads import NotTheFile, check, sha256_of

    entries = lock.entries(artefacts)
    bad = {path: f"sha256 {now[:16]}..., the lock says {want[:16]}..."
           for _, path, now, want in lock.changed(entries, pins, sha256_of)}
    for name, entry in entries["files"].items():
        path = Path(entry["path"]) if entry.get("path") else None
        if path is not None and path.is_file() and path not in bad:
            try:
                check(path, name)
            except NotTheFile as e:
                bad[path] = f"not a {name}: {e}"
    for path, why in bad.items():
        print(f"[a2rl] {path} is not what prepare fetched ({why}): deleted, to be fetched again", file=out)
        path.unlink(missing_ok=True)


def prepare_nodes(cfg: DictConfig, out=sys.stdout) -> list[Row]:
    """cluster=ray: prepare_here on each alive node, one after another (the first fills the shared cache)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=cfg.cluster.address, namespace="a2rl", log_to_driver=True, logging_level="WARNING")
    plain = OmegaConf.to_container(cfg, resolve=True)

    @ray.remote(num_cpus=0, max_retries=0)
    def on_node(config: dict) -> list[Row]:
        return prepare_here(OmegaConf.create(config))

    rows = []
    try:
        for node in (n for n in ray.nodes() if n["Alive"]):
            name = f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})"
            print(f"[a2rl] preparing node {name}", file=out, flush=True)
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            for row in ray.get(on_node.options(scheduling_strategy=strategy).remote(plain)):
                row.node = name
                rows.append(row)
    finally:
        ray.shutdown()
    return rows


def human(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return "-"


def print_table(rows: list[Row], seconds: float, out=sys.stdout) -> None:
    if not rows:
        print("nothing to prepare: this sweep's cells read nothing that is fetched or built once", file=out)
        return
    header = (("node",) if any(r.node for r in rows) else ()) + ("artefact", "path", "size", "checksum/revision",
                                                                  "status")
    table = [header] + [((r.node,) if r.node else ()) + (r.artefact, r.path, human(r.size), r.checksum, r.status)
                        for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    for line in table:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)) + "  " + line[-1], file=out)
    failed = [r for r in rows if r.status == FAILED]
    for r in failed:
        print(f"\nfailed: {r.artefact}{f' on {r.node}' if r.node else ''}: {r.reason}", file=out)
    if failed:
        print(f"\n{AGAIN}", file=out)
    counts = {s: sum(r.status == s for r in rows) for s in (FETCHED, THERE, FAILED)}
    if counts[THERE] == len(rows):
        print(f"\nnothing fetched: all {len(rows)} artefacts were already there ({seconds:.1f} s)", file=out)
    else:
        print(f"\n{len(rows)} artefacts: {counts[FETCHED]} fetched, {counts[THERE]} already there, "
              f"{counts[FAILED]} failed ({seconds:.1f} s)", file=out)


def run_prepare(cfg: DictConfig, out=sys.stdout) -> int:
    """The subcommand: 0 when everything is there at the end, 1 otherwise."""
    started = time.monotonic()
    rows = prepare_nodes(cfg, out) if cfg.cluster.mode == "ray" else prepare_here(cfg, out)
    print_table(rows, time.monotonic() - started, out)
    return 1 if any(r.status == FAILED for r in rows) else 0
