"""What a sweep's cells and graders read that is fetched or built once: one list, which the dry run and the start of a
run check (what is missing) and `python -m orchestrator prepare` fetches (orchestrator/prepare.py).

- the released original (the pinned `rdagent` wheel, contracts/release.py), when a paper cell's agent needs it;
- each task's base model and known models: hub ids (fetched into CACHE_DIR/models/hub by the code a run uses,
  evaluators.base_models.resolve_base_model) and a2rl's built ones (tiny, smollm2: built, no network);
- each task's data, where its `missing_data()` names something: fetched with the task's own loading code (its
  `fetch_data(sources)` where it has one: upstream archives, extra hub files; else loading its splits as a grader
  does).

Every check here is local and cheap (files in caches), so a second `prepare` and the dry run take no network.
"""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from contracts.specs import CellSpec
from orchestrator.agent_sides import agent_side


def prepare_command() -> str:
    """`python -m orchestrator prepare` with this run's overrides (what a line telling the user to prepare names)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except Exception:  # not under Hydra (a test calling the checks directly)
        overrides = [a for a in sys.argv[1:] if "=" in a]
    flags = ("dry_run", "allow_fetch_in_cells", "allow_stand_ins")  # the run's, not what it reads
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in flags]
    return " ".join(["python -m orchestrator prepare", *(shlex.quote(o) for o in kept)])


def size_of(path: Path) -> int | None:
    """Bytes under a path (links followed to what they name: the hub cache's snapshots are links to blobs)."""
    if not path.exists():
        return None
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass
class Artefact:
    """One thing to have before the cells start. `name` says what it is, `where` where a run reads it, `users` which
    tasks need it, `network`: fetched (True) or built here from what is installed (False)."""
    name: str
    where: Path | None
    users: list[str] = field(default_factory=list)
    network: bool = True
    when: str = "at the first cell"

    @property
    def key(self) -> str:
        return self.name

    def present(self) -> bool:
        raise NotImplementedError

    def fetch(self, sources: dict) -> None:
        raise NotImplementedError

    def facts(self) -> tuple[int | None, str]:
        """(size in bytes or None, checksum or revision) of what is there."""
        return size_of(self.where) if self.where else None, "-"

    def locked(self) -> dict:
        """Its entries in the downloads lock (orchestrator/lock.py): {"files": {name: {"sha256", ...}}, "hub":
        {id: {"revision"}}} of what is here; nothing for what is built here."""
        return {}

    def unfetched(self) -> list[str]:
        """What of it a run cannot fetch by itself when it is missing (only `prepare` does): the run stops before it
        starts, naming it."""
        return []

    def missing_line(self, command: str) -> str:
        who = f" ({', '.join(self.users)})" if self.users else ""
        return (f"{self.name}{who} is not in {self.where}: `{command}` fetches it now; otherwise it is fetched "
                f"{self.when} (needs the network and the disk)")


class OriginalWheel(Artefact):
    def __init__(self, cache_dir: Path, n_cells: int):
        from contracts import release

        super().__init__(f"the released original {release.RELEASE}", release.wheel_store() / release.WHEEL,
                         [f"{n_cells} paper cells' agents"])
        self.cache_dir = cache_dir

    def present(self) -> bool:
        from contracts import release

        return self.where.is_file() and release._sha256(self.where) == release.SHA256

    def fetch(self, sources: dict) -> None:
        from contracts import release

        release.release_root(self.cache_dir)  # fetches the wheel (sha256-checked), then extracts it

    def facts(self) -> tuple[int | None, str]:
        from contracts import release

        return size_of(self.where), f"sha256 {release.SHA256[:12]}"

    def locked(self) -> dict:
        from contracts import release

        if not self.where.is_file():
            return {}
        return {"files": {release.WHEEL: {"sha256": release.SHA256, "size": self.where.stat().st_size,
                                          "url": f"PyPI {release.RELEASE}", "path": str(self.where)}}}


class HubModel(Artefact):
    def __init__(self, repo_id: str, models_dir: Path):
        super().__init__(f"model {repo_id}", models_dir / "hub" / f"models--{repo_id.replace('/', '--')}")
        self.repo_id, self.models_dir = repo_id, models_dir
        self.roles: dict[str, list[str]] = {"base model": [], "known model": []}  # role -> tasks

    def used_by(self, task: str, role: str) -> None:
        if task not in self.roles[role]:
            self.roles[role].append(task)

    def snapshot(self) -> Path | None:
        """The cached snapshot holding config.json and every weight file its index names (or some safetensors)."""
        from huggingface_hub import try_to_load_from_cache

        cache = str(self.models_dir / "hub")
        config = try_to_load_from_cache(self.repo_id, "config.json", cache_dir=cache)
        if not isinstance(config, str):
            return None
        snapshot = Path(config).parent
        index = snapshot / "model.safetensors.index.json"
        if index.is_file():
            import json

            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
            return snapshot if shards and all((snapshot / s).is_file() for s in shards) else None
        return snapshot if any(snapshot.glob("*.safetensors")) else None

    def present(self) -> bool:
        return self.snapshot() is not None

    def fetch(self, sources: dict) -> None:
        from evaluators.base_models import resolve_base_model

        resolve_base_model(self.repo_id, self.models_dir)  # a run's own call: snapshot_download into models/hub

    def facts(self) -> tuple[int | None, str]:
        snapshot = self.snapshot()
        if snapshot is None:
            return None, "-"
        self.where = snapshot
        return size_of(snapshot), f"revision {snapshot.name[:12]}"

    def locked(self) -> dict:
        snapshot = self.snapshot()
        return {"hub": {f"model {self.repo_id}": {"revision": snapshot.name}}} if snapshot else {}

    def missing_line(self, command: str) -> str:
        roles = "; ".join(f"{role} of {', '.join(tasks)}" for role, tasks in self.roles.items() if tasks)
        when = "at the first cell" if self.roles["base model"] else "when its grader starts"
        return (f"{self.name} ({roles}) is not in {self.models_dir}: `{command}` fetches it now; otherwise it is "
                f"fetched once {when} (needs the network and the disk)")


class BuiltModel(Artefact):
    """a2rl's own base models (tiny, tiny-<corpus>, smollm2-135m): built once from what is installed."""

    def __init__(self, name: str, models_dir: Path):
        super().__init__(f"built model {name}", models_dir / name, network=False)
        self.model, self.models_dir = name, models_dir

    def present(self) -> bool:
        return (self.where / "config.json").is_file()

    def fetch(self, sources: dict) -> None:
        from evaluators.base_models import resolve_base_model

        resolve_base_model(self.model, self.models_dir)

    def facts(self) -> tuple[int | None, str]:
        return size_of(self.where), "built here"


class TaskData(Artefact):
    """What a task's `missing_data()` names. Fetched by the task's `fetch_data(sources)` where it has one, else by
    loading its train and hidden splits as a grader does (that fills the Hugging Face caches); present when
    `missing_data()` names nothing."""

    def __init__(self, task, lines: list[str]):
        paths = _data_paths(task)
        super().__init__(f"data of task {task.name}", paths[0] if paths else None, [task.name],
                         when="at first use")
        self.task, self.lines = task, lines

    def present(self) -> bool:
        self.lines = self.task.missing_data()
        return not self.lines

    def fetch(self, sources: dict) -> None:
        fetch_data = getattr(self.task, "fetch_data", None)
        try:
            if fetch_data is not None:
                fetch_data(sources)
            elif not getattr(self.task, "interactive", False):
                self.task.train_split, self.task.hidden_splits  # noqa: B018 - loading is fetching
        except Exception as e:  # what could not be fetched, then why (a table row reads it)
            raise RuntimeError(f"{'; '.join(self.task.missing_data())}: {type(e).__name__}: {e}") from e
        if not self.present():
            raise RuntimeError("; ".join(self.lines))

    def facts(self) -> tuple[int | None, str]:
        paths = [p for p in _data_paths(self.task) if p.exists()]
        sizes = [size_of(p) or 0 for p in paths]
        revisions = sorted({_hub_revision(p) for p in paths} - {None})
        files = sorted(getattr(self.task, "downloaded", dict)().items())  # (all of them: the lock)
        said = [f"revision {r[:12]}" for r in revisions]
        if files:
            said.append(f"sha256 {files[0][1]['sha256'][:12]}" + (f" +{len(files) - 1} files" if len(files) > 1
                                                                     else ""))
        return (sum(sizes) if paths else None), (", ".join(said) or "-")

    def missing_line(self, command: str) -> str:
        return "; ".join(self.lines) + f" (`{command}` fetches it now)"

    def locked(self) -> dict:
        files = getattr(self.task, "downloaded", dict)()  # what its fetch_data fetched, by file
        hub = {}
        for path in _data_paths(self.task):
            if path.exists() and (revision := _hub_revision(path)):
                kind, _, name = path.name.partition("--")  # datasets--org--name
                hub[f"{kind.rstrip('s')} {name.replace('--', '/')}"] = {"revision": revision}
        return {"files": files, "hub": hub}

    def unfetched(self) -> list[str]:
        return getattr(self.task, "unfetched_data", list)()


class Unreadable(Artefact):
    """A task whose config does not build or whose data check fails: nothing can be fetched for it."""

    def __init__(self, task_name: str, problem: str):
        super().__init__(f"task {task_name}", None, [task_name])
        self.problem = problem

    def present(self) -> bool:
        return False

    def fetch(self, sources: dict) -> None:
        raise RuntimeError(self.problem)

    def missing_line(self, command: str) -> str:
        return f"{self.name}: {self.problem}"


def _data_paths(task) -> list[Path]:
    """Where a task reads its data: its data files, else its data_path when that is a path (not a hub id)."""
    local = str(getattr(task, "data_path", None) or "")
    return task.data_files() or ([Path(local).expanduser()] if local.startswith(("/", "~", ".")) else [])


def _hub_revision(path: Path) -> str | None:
    """The commit a hub cache entry (`datasets--org--name`, `models--...`) is at, if it is one."""
    ref = path / "refs" / "main"
    return ref.read_text().strip() if ref.is_file() else None


def _model(name: str, models_dir: Path, role: str) -> Artefact | None:
    from contracts import registry

    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return None  # a local directory: nothing to fetch (a missing one is the run's own error)
    if name in registry.names("base_model") or name.startswith("tiny-"):
        return BuiltModel(name, models_dir) if role == "base model" else None
    return HubModel(name, models_dir) if "/" in name else None


def sweep_artefacts(cells: list[CellSpec], cache_dir: Path) -> list[Artefact]:
    """Everything the cells need, each once, in the order to fetch them (the wheel first: a paper task reads its
    texts)."""
    from contracts.task import load_task
    out: dict[str, Artefact] = {}
    n_paper = sum(agent_side(c).reads_release for c in cells)
    if n_paper:
        wheel = OriginalWheel(cache_dir, n_paper)
        out[wheel.key] = wheel
    models_dir = cache_dir / "models"
    tasks = list({c.task_name: c.task for c in cells}.values())
    for spec in tasks:
        for role, name in [("base model", spec.base_model), *(("known model", m) for m in spec.known_models)]:
            if (artefact := _model(name, models_dir, role)) is not None:
                artefact = out.setdefault(artefact.key, artefact)
                if isinstance(artefact, HubModel):
                    artefact.used_by(spec.name, role)
                if spec.name not in artefact.users:
                    artefact.users.append(spec.name)
    for spec in tasks:
        try:
            task = load_task(spec, cache_dir)
            lines = task.missing_data()
        except Exception as e:  # noqa: BLE001 - a dry run and prepare report it, they do not stop
            out[f"data {spec.name}"] = Unreadable(spec.name, f"{type(e).__name__}: {e}")
            continue
        if lines or _data_paths(task):  # (a task that makes its data from its config has none to fetch)
            out[f"data {spec.name}"] = TaskData(task, lines)
    return list(out.values())


def missing_artefacts(cells: list[CellSpec], cache_dir: Path) -> list[Artefact]:
    """What a run would fetch while it runs (not what it builds here without the network)."""
    return [a for a in sweep_artefacts(cells, cache_dir) if a.network and not a.present()]


def reserves_gpus(cells: list[CellSpec], emulated: bool) -> bool:
    """Whether the sweep holds real GPUs while it runs (a cell's or a grader's); emulated ones cost nothing."""
    if emulated:
        return False
    return any(c.budget.gpus for c in cells) or any(float(c.task.grader.num_gpus) for c in cells)


def check_artefacts(cells: list[CellSpec], cache_dir: Path, emulated: bool, allow_fetch_in_cells: bool,
                    out) -> None:
    """At the start of a run: what its cells would fetch is said; with GPUs reserved it is refused, one line naming
    the first missing artefact and the command that fetches it, unless allow_fetch_in_cells=true."""
    from contracts.specs import ConfigError

    missing = missing_artefacts(cells, cache_dir)
    if not missing:
        return
    command = prepare_command()
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    if reserves_gpus(cells, emulated) and not allow_fetch_in_cells:
        raise ConfigError(f"{missing[0].name} is not on this machine{more}, and this sweep reserves GPUs while it "
                          f"would fetch it: run `{command}` first (or allow_fetch_in_cells=true)")
    print(f"[a2rl] {len(missing)} artefacts are fetched while cells run (`{command}` fetches them now):",
          file=out)
    for artefact in missing:
        print(f"[a2rl]   - {artefact.missing_line(command)}", file=out)



def offline_twin(task_name: str) -> str:
    """`, or use <name>_small, its offline twin (...)` where conf/task has one (generated data, no download)."""
    from orchestrator.sweep import CONF_DIR

    if (CONF_DIR / "task" / f"{task_name}_small.yaml").is_file():
        return f", or use {task_name}_small, its offline twin (generated data, nothing to fetch)"
    return ""


def check_task_data(cells: list[CellSpec], cache_dir: Path, downloads: dict) -> None:
    """Before a run starts anything: task data that only `prepare` fetches (a run would fail at its first grader)
    is refused, one line per task naming what is missing, the command that fetches it and the offline twin; and a
    file prepare fetched whose bytes changed since (or that a pin does not name) is refused naming the file."""
    from contracts.specs import ConfigError
    from orchestrator import lock
    from orchestrator.file_hashes import HASH_CACHE, FileHashes

    artefacts = sweep_artefacts(cells, cache_dir)
    command = prepare_command()
    lines = [f"{'; '.join(unfetched)} (a run cannot fetch it: `{command}` does{offline_twin(a.users[0])})"
             for a in artefacts if not a.present() and (unfetched := a.unfetched())]
    if lines:
        raise ConfigError("\n".join(lines))
    hashes = FileHashes(cache_dir / HASH_CACHE)
    files, _ = lock.pins(downloads, cache_dir)
    changed = lock.changed(lock.entries(artefacts), files, hashes.file)
    hashes.save()
    if changed:
        name, path, now, want = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise ConfigError(f"{name} at {path} is not the file prepare fetched or a pin names: sha256 {now[:16]}..., "
                          f"the lock says {want[:16]}...{more}; run `{command}` to fetch it again (a changed "
                          f"upstream file is refused there), or remove its entry from {lock.lock_path(cache_dir)}")
