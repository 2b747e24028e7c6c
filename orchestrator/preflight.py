"""Preflight: what a sweep checks before it starts anything, each failure one line naming what to change.

- What this machine lacks (`missing`; the dry run prints it): driver and judge keys not set, agent CLIs not
  installed, and what `python -m orchestrator prepare` fetches (task data, base and known models, the released
  original: orchestrator/artefacts.py). None of these stops a dry run; a real run refuses a missing key or CLI with
  the same words when it gets there, and a missing artefact when it reserves GPUs (artefacts.check_artefacts).
- Config that cannot work: a driver's key not set, a task that does not build, a folder that cannot be written.
- The agents' python, run in a sandbox made as a cell's is; on a cluster, that every node shares the output folders.
- Reservations that can never be met, refused before anything waits on them. Ray queues a placement group that no
  node can hold, silently and for ever: a cell asking 2 GPUs on a 1-GPU machine, or a cell asking the one GPU that
  its task's grader already holds, would hang the sweep. The sweep's services (graders, rollout hosts, the driver
  proxy) hold their resources for the whole sweep, so they are placed on the nodes first (largest first); then every
  cell's bundle must fit on some node's remainder. On a cluster that can grow (`cluster.can_grow=true`: an
  autoscaler adds nodes) a misfit is only a warning.
"""
from __future__ import annotations

import functools
import os
import sys
from collections import Counter
from pathlib import Path

from contracts.layout import Layout
from contracts.specs import CellSpec, ConfigError
from contracts.task_spec import TaskSpec
from orchestrator import sandbox
from orchestrator.agent_sides import agent_side

EMULATED_GPU = "emulated_gpu"


# -- what this machine lacks ---------------------------------------------------------------------------------------

def missing(cells: list[CellSpec], cache_dir: Path, cli_path: list[str], emulated: bool = False) -> list[str]:
    from agents.cli.session import CliUnavailable
    from agents.kinds import agent_kind
    from orchestrator.sweep import judge_drivers

    out: list[str] = []
    keys: Counter = Counter()
    for c in cells:
        if c.driver.provider != "none" and c.driver.extra.get("api_key_env"):
            keys[(c.driver.extra["api_key_env"], f"driver {c.driver.name}")] += 1
    tasks = list({c.task_name: c.task for c in cells}.values())
    for judge in judge_drivers(tasks):
        if judge.get("api_key_env"):
            keys[(judge["api_key_env"], f"judge {judge.get('name')}")] += 0
    for (var, who), n in sorted(keys.items()):
        if not os.environ.get(var):
            out.append(f"key: ${var} is not set ({who}{f', {n} cells' if n else ''})")

    seen_agents = set()
    for c in cells:
        if c.agent.kind == "cli" and c.agent.name not in seen_agents:
            seen_agents.add(c.agent.name)
            try:
                agent_kind("cli").session(c, cli_path)
            except CliUnavailable as e:
                out.append(f"agent CLI: {e}")

    # what is fetched or built once (the list `python -m orchestrator prepare` fetches: orchestrator/artefacts.py)
    from orchestrator.artefacts import missing_artefacts, prepare_command

    command = prepare_command()
    out += [artefact.missing_line(command) for artefact in missing_artefacts(cells, cache_dir)]
    return out + vllm_missing(cells, emulated)


# -- config --------------------------------------------------------------------------------------------------------

def driver_keys(cells: list[CellSpec]) -> dict[str, str] | None:
    """The real keys the cells' drivers and their tasks' LLM judges name, from this environment (None: no cell has
    a driver and no task a judge: no driver proxy). Checked before anything starts; they go to the driver proxy
    only, never to an agent."""
    from orchestrator.sweep import judge_drivers

    drivers = [(c.driver.name, c.driver.extra.get("api_key_env")) for c in cells if c.driver.provider != "none"]
    drivers += [(f"{j.get('name')} (a task's judge)", j.get("api_key_env"))
                for j in judge_drivers(list({c.task_name: c.task for c in cells}.values()))]
    if not drivers:
        return None
    keys = {}
    for name, var in drivers:
        if var and not os.environ.get(var):
            raise ConfigError(f"driver {name!r} reads its key from ${var}, which is not set; export it "
                              f"where you run a2rl (the driver proxy holds it; agents never see it)")
        if var:
            keys[var] = os.environ[var]
    return keys


def check_tasks(cells: list[CellSpec]) -> None:
    """Build each task once (constructors only read and check their config), so that a bad task setting is one clear
    line now, not a failed grader deployment after Ray has started."""
    from contracts.task import load_task

    for task in {c.task_name: c.task for c in cells}.values():
        try:
            load_task(task)
        except (ValueError, TypeError) as e:  # a ConfigError already, or a constructor's check of its knobs
            raise ConfigError(str(e)) from None


def vllm_missing(cells: list[CellSpec], emulated: bool) -> list[str]:
    """The tasks graded with vLLM (grader.backend auto picks it for a paper task on a real GPU) on a machine without
    its environment, one line each."""
    from contracts.task import load_task
    from evaluators.backends.vllm_backend import environment_missing

    problem = environment_missing()
    if not problem:
        return []
    tasks = {c.task_name: c.task for c in cells}.values()
    return [f"task {spec.name}: {problem}; or grade it with task.grader.backend=transformers" for spec in tasks
            if load_task(spec).backend_name(gpu=not emulated) == "vllm"]


def check_vllm(cells: list[CellSpec], emulated: bool) -> None:
    problems = vllm_missing(cells, emulated)
    if problems:
        raise ConfigError(problems[0])


def check_agent_sides(cells: list[CellSpec], sandbox_cfg: dict) -> None:
    """Each cell's agent side says what cannot hold for it (a paper cell's CLI runs the release's start.sh and
    reaches its grader through a relay): one line now, before anything starts."""
    for c in cells:
        agent_side(c).check(c, sandbox_cfg)


def stand_ins(cells: list[CellSpec], cache_dir: Path) -> dict[str, list[str]]:
    """{task: what stands in for the original's grading} for the tasks graded as the paper whose data, search, judge
    or model is not the paper's (a generated store, a substitute search, no judge): their scores are flagged
    `approximate` (the task's approximations())."""
    from contracts.protocols import protocol
    from contracts.task import load_task

    # stand-ins are named only where the release's grading is promised (the tasks say what)
    tasks = {c.task_name: c.task for c in cells if protocol(c.task.protocol).checks_release}
    return {name: notes for name, spec in tasks.items() if (notes := load_task(spec, cache_dir).approximations())}


def check_stand_ins(cells: list[CellSpec], cache_dir: Path, emulated: bool, allow_stand_ins: bool, out) -> None:
    """Before any cell starts: one line per paper task graded on a stand-in; with GPUs reserved, a refusal naming
    the task and the flag, unless allow_stand_ins=true (a paper column on a stand-in is not the paper's column)."""
    from orchestrator.artefacts import reserves_gpus

    found = stand_ins(cells, cache_dir)
    if found and reserves_gpus(cells, emulated) and not allow_stand_ins:
        name, notes = next(iter(found.items()))
        more = f" (and {len(found) - 1} more tasks)" if len(found) > 1 else ""
        raise ConfigError(f"task {name} (protocol paper) would be graded on a stand-in{more}, its scores not the "
                          f"paper's: {notes[0]}; this sweep reserves GPUs, so it refuses: give it the paper's "
                          f"data, search and judge (docs/tasks), or allow stand-ins with allow_stand_ins=true")
    for name, notes in found.items():
        print(f"[a2rl] task {name} (protocol paper) is graded on stand-ins, its scores flagged approximate: "
              f"{'; '.join(notes)}", file=out)


def paper_task_lines(cells: list[CellSpec], cache_dir: Path) -> list[str]:
    """For the dry run, per task graded as the paper: whether it reads the paper's data (and where) or stand-ins,
    and the keys its search and judge read."""
    from contracts.protocols import protocol
    from contracts.task import load_task
    from orchestrator.sweep import judge_drivers

    lines = []
    # the dry run's lines on the release's data, search and judge, per task graded as it
    for name, spec in {c.task_name: c.task for c in cells if protocol(c.task.protocol).checks_release}.items():
        task = load_task(spec, cache_dir)
        notes = task.approximations()
        where = getattr(task, "data_path", None)
        line = f"task {name}: " + (f"stand-ins, scores flagged approximate: {'; '.join(notes)}" if notes else
                                    f"the paper's data{f' ({where})' if where else ''}")
        keys = [f"${k} (search)" for k in getattr(task, "search_keys", list)()]
        keys += [f"${j['api_key_env']} (judge {j.get('name')})" for j in judge_drivers([spec]) if j.get("api_key_env")]
        lines.append(line + (f"; keys: {', '.join(keys)}" if keys else ""))
    return lines


def check_writable(folders: dict[str, Path]) -> None:
    """Each folder a sweep writes exists (or can be made) and takes a file: one line naming the key otherwise."""
    import tempfile

    for key, folder in folders.items():
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{key}={folder} is a file, not a folder; point {key} at a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as e:
            raise ConfigError(f"{key}={folder} cannot be written ({e.strerror or e}); point {key} at a folder "
                              f"you can write") from None


PREFLIGHT_TIMEOUT_S = 120  # a node's preflight task: the first task on a node starts a worker process
AGENTS_IMPORT = "import torch, transformers, trl, datasets"  # what the built-in agents train with


@functools.cache
def _python_runs_in_a_sandbox(layout: Layout, task_json: str, sandbox_json: str, imports: str) -> str | None:
    """None, or what went wrong running this interpreter with the agents' packages in a cell-shaped sandbox."""
    import json

    from orchestrator.cell import sandbox_paths

    hidden, readonly = sandbox_paths(layout, TaskSpec.from_config(json.loads(task_json)))
    try:
        sandbox.preflight([sys.executable, "-c", imports], {"PATH": os.pathsep.join(
            [os.path.dirname(sys.executable), "/usr/bin", "/bin"])}, hidden=hidden, readonly=readonly,
            settings=sandbox.Settings.from_cfg(json.loads(sandbox_json)), cell_id="5a0d0c4ec700")
    except sandbox.PreflightFailed as e:
        return str(e)
    return None


def check_agents_python(layout: Layout, task: TaskSpec, sandbox_cfg: dict) -> None:
    """Once per sweep (and per process), before any cell starts: the agents' interpreter and packages run in a
    sandbox made as a cell's is, as the agents' uid. A failure (an interpreter under a folder that uid cannot
    enter, a package it cannot read) is one config error, not a sweep of agent_errors."""
    import json

    problem = _python_runs_in_a_sandbox(layout, json.dumps(task.config, sort_keys=True),
                                        json.dumps(sandbox_cfg, sort_keys=True), AGENTS_IMPORT)
    if problem:
        raise ConfigError(f"the agents' python ({sys.executable}) does not run in their sandbox: {problem}. Every "
                          "folder above a2rl's environment must be enterable by other users (chmod o+x), or "
                          "install it where they are (scripts/setup in a world-readable checkout)")


def check_nodes_share(folders: dict[str, Path]) -> None:
    """On a cluster, every node may run a cell or a grader: each must reach and write the same workspace root and
    output dir (a cell writes its workspace and records there; a grader on another node reads the submission and
    appends its record). A tiny task per node writes a file in each folder; a second round checks that every node
    sees every other node's file (a path that exists on each node but is not shared storage fails here)."""
    import secrets

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # a node's name in a message: its address, and its id's start (several nodes may share a machine)
    nodes = {n["NodeID"]: f"{n['NodeManagerAddress']} (node {n['NodeID'][:8]})" for n in ray.nodes() if n["Alive"]}
    probe = f".a2rl-preflight-{secrets.token_hex(4)}"

    @ray.remote(num_cpus=0, max_retries=0)
    def write(folder: str, name: str) -> str | None:
        try:
            Path(folder, probe).mkdir(parents=True, exist_ok=True)
            Path(folder, probe, name).write_text(name)
        except OSError as e:
            return e.strerror or str(e)
        return None

    @ray.remote(num_cpus=0, max_retries=0)
    def seen(folder: str) -> list[str]:
        where = Path(folder, probe)
        return sorted(p.name for p in where.iterdir()) if where.is_dir() else []

    @ray.remote(num_cpus=0, max_retries=0)
    def clean(folder: str, name: str) -> None:
        Path(folder, probe, name).unlink(missing_ok=True)
        try:
            Path(folder, probe).rmdir()  # the last node's
        except OSError:
            pass

    # What a task pinned to a node raises when the node is gone. The raylets learn it before `ray.nodes()` does
    # (it lists a killed node as alive for a while), so these mean gone, whatever `ray.nodes()` says.
    GONE = (ray.exceptions.TaskUnschedulableError, ray.exceptions.NodeDiedError)

    def on(node_id: str, fn, *args):
        return fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(*args)

    def ask(refs: dict) -> dict:
        """Each node's answer. A node that left the cluster since `ray.nodes()` was read (it died, or was scaled
        down) is dropped from `nodes`: it will run no cell, so there is nothing to check on it. One that is still
        alive and does not answer in time is named."""
        _, waiting = ray.wait(list(refs.values()), num_returns=len(refs), timeout=PREFLIGHT_TIMEOUT_S)
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        if late := [nodes[n] for n, r in refs.items() if r in waiting and n in alive]:
            raise ConfigError(f"node(s) {', '.join(late)} did not answer the preflight (a tiny task) within "
                              f"{PREFLIGHT_TIMEOUT_S} s: check that they are healthy (`ray status`)")
        answers = {}
        for node, ref in refs.items():
            if ref in waiting:  # it left while we waited
                del nodes[node]
                continue
            try:
                answers[node] = ray.get(ref)
            except GONE:
                del nodes[node]
        return answers

    try:
        for key, folder in folders.items():
            for node, error in ask({n: on(n, write, str(folder), n) for n in nodes}).items():
                if error:
                    raise ConfigError(f"{nodes[node]} cannot write {key}={folder} ({error}); it must be shared "
                                      "storage that every node mounts at that path, writable by Ray's user")
            views = {n: tuple(names) for n, names in ask({n: on(n, seen, str(folder)) for n in nodes}).items()}
            shared = Counter(views.values()).most_common(1)[0][0]  # what most nodes see: the shared folder
            alone = len(shared) == 1 < len(nodes)  # no two nodes see each other's files: none shares it
            if odd := [nodes[n] for n, view in views.items() if view != shared or alone]:
                raise ConfigError(f"{key}={folder} on {', '.join(odd)} is not the folder the other nodes write "
                                  f"(a node sees there what {len(shared)} of {len(nodes)} nodes wrote): it must be "
                                  "shared storage (NFS, a PVC) mounted at that path on every node")
    finally:  # this machine may not mount the folders: each node takes its own file back
        try:
            for folder in folders.values():
                ray.get([on(n, clean, str(folder), n) for n in nodes], timeout=PREFLIGHT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - a leftover probe file is harmless; the problem above is what to say
            pass


# -- reservations --------------------------------------------------------------------------------------------------

def resources_of(cell: CellSpec, emulated_gpus: bool) -> dict:
    res = {"CPU": cell.budget.cpus}
    if cell.budget.gpus:
        res[EMULATED_GPU if emulated_gpus else "GPU"] = cell.budget.gpus
    if cell.budget.memory_gb:
        res["memory"] = cell.budget.memory_gb * 1024 ** 3
    return res


def check_reservations(cfg, to_run: list[CellSpec], tasks: list[TaskSpec], emulated: bool, with_proxy: bool,
                       out) -> None:
    """Refuse, before anything is deployed, a cell or service reservation that no node of the cluster can hold."""
    import ray


    nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    services = service_reservations(tasks, EMULATED_GPU if emulated else "GPU",
                                    float(cfg.driver_proxy.num_cpus) if with_proxy else 0.0)
    cells = [(c.label, resources_of(c, emulated)) for c in to_run]
    for problem in check_fits(cells, services, nodes, can_grow=bool(cfg.cluster.get("can_grow", False))):
        print(f"[a2rl] waiting for the cluster to grow: {problem}", file=out)


EPS = 1e-9


SHOWN = ("CPU", "GPU", "emulated_gpu", "memory")


def describe(resources: dict) -> str:
    return ", ".join(f"{k}={resources[k] / 1024 ** 3:.3g} GiB" if k == "memory" else f"{k}={resources[k]:g}"
                     for k in SHOWN if resources.get(k))


def _fits(need: dict, free: dict) -> bool:
    return all(free.get(k, 0) + EPS >= v for k, v in need.items() if v)


def _take(need: dict, free: dict) -> None:
    for k, v in need.items():
        free[k] = free.get(k, 0) - v


def service_reservations(tasks: list[TaskSpec], gpu_key: str, proxy_cpus: float) -> list[tuple[str, str, dict]]:
    """(what, the knob to change, resources) for each replica or actor the sweep's services start."""
    from contracts.task import is_interactive

    out = []
    for spec in tasks:
        grader = spec.grader
        for _ in range(grader.num_replicas):
            out.append((f"the grader of task {spec.name}", "task.grader.num_gpus / num_cpus / memory_gb",
                        {"CPU": grader.num_cpus, gpu_key: grader.num_gpus, "memory": (grader.memory_gb or 0) * 1e9}))
        if is_interactive(spec) and spec.rollout.host_cpus:
            assert spec.rollout.num_hosts is not None  # TaskSpec refuses num_hosts null with host_cpus
            for _ in range(spec.rollout.num_hosts):
                out.append((f"a rollout host of task {spec.name}", "task.rollout.host_cpus",
                            {"CPU": spec.rollout.host_cpus}))
    if proxy_cpus:
        out.append(("the driver proxy", "driver_proxy.num_cpus", {"CPU": float(proxy_cpus)}))
    return out


def check_fits(cells: list[tuple[str, dict]], services: list[tuple[str, str, dict]], nodes: list[dict],
               can_grow: bool = False) -> list[str]:
    """Raise ConfigError naming the first reservation no node can ever hold; on a cluster that can grow, return
    the misfits as warnings instead. cells: (label, resources); nodes: each alive node's total resources."""
    free = [dict(n) for n in nodes]
    problems = []
    for what, knob, need in sorted(services, key=lambda s: sorted(s[2].items(), reverse=True), reverse=True):
        node = next((f for f in free if _fits(need, f)), None)
        if node is None:
            problems.append(f"{what} reserves {describe(need)}, but no node has that free (nodes: "
                            f"{'; '.join(describe(n) for n in nodes) or 'none'}, services placed so far included); "
                            f"lower {knob}, or use fractions so cells and graders share a GPU (e.g. 0.5 each)")
            continue
        _take(need, node)
    for label, need in cells:
        if not any(_fits(need, f) for f in free):
            largest = max(free, key=lambda f: (f.get("GPU", 0) + f.get("emulated_gpu", 0), f.get("CPU", 0)),
                          default={})
            problems.append(f"cell {label} reserves {describe(need)}, but the most any node has left after the "
                            f"sweep's services is {describe(largest) or 'nothing'}; lower sweep.budget.gpus / cpus / "
                            f"memory_gb (fractions of a GPU share it) or the graders' task.grader.num_gpus")
    if problems and not can_grow:
        raise ConfigError(problems[0] + (f" ({len(problems) - 1} more reservations cannot fit)"
                                         if len(problems) > 1 else ""))
    return problems
