"""Run a sweep: expand, reconcile the ledger, start Ray and the sweep's services, one Tune trial per pending cell."""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from contracts import registry
from contracts.layout import Layout
from contracts.specs import CellOptions, CellSpec, to_plain
from orchestrator import sandbox
from orchestrator.artefacts import check_artefacts, check_task_data
from orchestrator.ledger import ERRORED, PENDING, RUNNING, Ledger
from orchestrator.preflight import (EMULATED_GPU, check_agents_python, check_nodes_share, check_reservations,
                                     check_agent_sides, check_stand_ins, check_tasks, check_vllm, check_writable,
                                     driver_keys, resources_of)
from orchestrator.records import reconcile
from orchestrator.sweep import check_cluster, expand, smith_lines


@dataclass
class Plan:
    cells: list[CellSpec]
    to_run: list[CellSpec]
    status: dict[str, str]          # cell_id -> status before this run (new cells: "new")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.status.values():
            out[s] = out.get(s, 0) + 1
        return out


def make_plan(cells: list[CellSpec], rows: dict[str, dict], rerun_errored: bool) -> Plan:
    status, to_run = {}, []
    for cell in cells:
        s = rows.get(cell.cell_id, {}).get("status", "new")
        status[cell.cell_id] = s
        if s in ("new", PENDING, RUNNING) or (rerun_errored and s in ERRORED):
            to_run.append(cell)
    return Plan(cells=cells, to_run=to_run, status=status)


def print_plan(plan: Plan, emulated: bool, out=sys.stdout) -> None:
    rows = [("cell", "agent", "driver", "task", "protocol", "seed", "state", "reservation")]
    for cell in plan.cells:
        s = plan.status[cell.cell_id]
        state = ("run" if cell in plan.to_run else "skip") + f" ({s})"
        res = ", ".join(f"{k}={v:g}" for k, v in resources_of(cell, emulated).items())
        rows.append((cell.cell_id, cell.agent.name, cell.driver.name, cell.task_name, cell.task.protocol,
                     str(cell.seed), state, f"{res}, {cell.budget.wall_time_s:g}s"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]  # columns as wide as their names
    for r in rows:
        print("  ".join(v.rjust(w) if i == 5 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))) + "  " + r[-1],
              file=out)
    gpu_h = sum(c.budget.gpu_hours for c in plan.to_run)
    cpu_h = sum(c.budget.cpus * c.budget.wall_time_s / 3600 for c in plan.to_run)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(plan.counts().items()))
    print(f"\n{len(plan.cells)} cells ({counts}); {len(plan.to_run)} to run; "
          f"budgets imply at most {gpu_h:.1f} GPU-hours and {cpu_h:.1f} CPU-hours", file=out)


def print_services_and_missing(cfg, plan: Plan, out=sys.stdout) -> None:
    """The graders' GPUs (held for the whole sweep, not per cell) and what this machine lacks for the sweep."""
    from orchestrator.preflight import missing, paper_task_lines

    tasks = list({c.task_name: c.task for c in plan.to_run}.values())
    grader_gpus = sum(float(s.grader.num_gpus) * int(s.grader.num_replicas) for s in tasks)
    longest = max((c.budget.wall_time_s for c in plan.to_run), default=0) / 3600
    if grader_gpus:
        print(f"graders: {grader_gpus:g} GPUs of their own ({len(tasks)} tasks), held while the sweep runs: at least "
              f"{grader_gpus * longest:.1f} GPU-hours (the longest cell's {longest:g} h), more while cells queue",
              file=out)
    papers = paper_task_lines(plan.to_run, Path(cfg.cache_dir).expanduser())
    if papers:
        print("\ngraded as the paper:", file=out)
        for line in papers:
            print(f"  - {line}", file=out)
    lacks = missing(plan.to_run, Path(cfg.cache_dir).expanduser(), to_plain(cfg.get("cli_path")) or [],
                    bool(cfg.cluster.emulated_gpus))
    if lacks:
        print(f"\nmissing on this machine ({len(lacks)}):", file=out)
        for line in lacks:
            print(f"  - {line}", file=out)
    elif plan.to_run:
        print("nothing missing: keys, CLIs, data and base models are all here", file=out)


RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def reap_orphaned_ray_agents() -> int:
    """Kill Ray agents left behind by a local cluster whose orchestrator was killed (SIGKILL, OOM).

    Ray's dashboard and runtime-env agents outlive a dead raylet (they block flushing logs to a dead GCS). A live
    cluster's agents are children of its raylet, so an agent of ours whose parent is init is such an orphan. (Their
    RAY_RAYLET_PID cannot be trusted: setting the process title overwrites the environment block, partly or wholly.)
    """
    import psutil  # type: ignore[import-untyped]

    me = os.getuid()
    reaped = 0
    for proc in psutil.process_iter(["ppid", "name", "uids"]):
        try:
            if proc.info["ppid"] == 1 and proc.info["name"] in RAY_AGENTS and proc.info["uids"].real == me:
                proc.kill()
                reaped += 1
        except psutil.Error:
            continue
    return reaped


class RayStartTimeout(RuntimeError):
    """The local Ray's start made no progress."""


STARTED_HERE: list[int] = []  # the processes of a local Ray whose slow start this process joined (stop_ray ends them)


def child_pids() -> list[int]:
    import psutil  # type: ignore[import-untyped]

    return [p.pid for p in psutil.Process().children(recursive=True)]


def wait_for_raylet(pids: list[int], wait_s: float) -> str:
    """The GCS address of the Ray these processes are, once its raylet registered; waited for as long as they
    progress (use CPU), named when they made no progress for wait_s or the raylet died."""
    import psutil  # type: ignore[import-untyped]
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    procs = {}
    for pid in pids:
        try:
            procs[pid] = psutil.Process(pid)
        except psutil.Error:
            pass
    from ray._raylet import GCS_SERVER_PORT_NAME, wait_for_persisted_port  # type: ignore[attr-defined]

    gcs = next((p for p in procs.values() if p.name() == "gcs_server"), None)
    given = dict(a.lstrip("-").split("=", 1) for a in (gcs.cmdline() if gcs else []) if "=" in a)
    if "session-dir" not in given or "node-id" not in given:
        raise RayStartTimeout("Ray's start timed out and left no GCS server to wait for: see the Ray session's logs")
    # (the GCS chose its port and wrote it into the session folder, as Ray's own start reads it)
    port = wait_for_persisted_port(given["session-dir"], given["node-id"], GCS_SERVER_PORT_NAME, timeout_ms=0)
    address = f"{given.get('node-ip-address', '127.0.0.1')}:{port}"
    print(f"[a2rl] Ray's raylet is slow to register (Ray waits 30 s; load {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores): waiting while its processes progress", file=sys.stderr, flush=True)

    def cpu_s() -> float:  # the raylet's and its agents' (the GCS and Ray's monitors tick on their own)
        total = 0.0
        for p in starting:
            try:
                times = p.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total

    starting = [p for p in procs.values() if p.name() == "raylet" or "agent" in " ".join(p.cmdline())]
    client = GcsClient(address=address)
    progressed, used = time.monotonic(), cpu_s()
    while True:
        try:
            if client.get_all_node_info(timeout=5):
                return address
        except Exception:  # noqa: BLE001 - the GCS itself still busy
            pass
        raylet = [p for p in procs.values() if p.name() == "raylet" and alive(p)]
        if cpu_s() >= used + 1.0:
            progressed, used = time.monotonic(), cpu_s()
        if not raylet or time.monotonic() - progressed > wait_s:
            stop_ray_processes(list(procs))
            # (Ray 2.60's raylet gives the dashboard agent, a Python process, 15 s to write its ports, not a
            # setting: at load 14 under four CPU hogs it died so, "Timed out waiting for file .../metrics_agent_port")
            why = "its raylet died" if not raylet else f"its processes made no progress for {wait_s:.0f} s"
            raise RayStartTimeout(f"the local Ray did not start: {why} (load {os.getloadavg()[0]:.1f} on "
                                  f"{os.cpu_count()} cores; Ray 2.60's raylet gives its dashboard agent 15 s to "
                                  "start, not a setting). Start the sweep again (a second start finds the files "
                                  "cached), or when the load is lower; raylet.out in the Ray session's logs says more")
        time.sleep(1.0)


def alive(proc) -> bool:
    import psutil  # type: ignore[import-untyped]

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_ray_processes(pids: list[int]) -> None:
    import psutil  # type: ignore[import-untyped]

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
            procs[-1].terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=10)


def stop_ray() -> None:
    """ray.shutdown(), and the processes of a slow start this process joined (ray.shutdown leaves a joined Ray)."""
    import ray

    ray.shutdown()
    if STARTED_HERE:
        stop_ray_processes(STARTED_HERE)
        STARTED_HERE.clear()


def start_ray(cluster: DictConfig, wait_s: float = 600.0) -> None:
    """wait_s (grading.service_timeout_s): how long a local Ray's start may go without progress."""
    import ray

    # Token auth (RAY_AUTH_MODE=token, set by `python -m orchestrator` before ray is imported): without it any
    # process on the machine, an agent in its sandbox too, can connect to the cluster and read the graders' state.
    # Ray keeps the token in ~/.ray/auth_token, which the sandbox hides.
    if os.environ.get("RAY_AUTH_MODE") != "token":
        print("[a2rl] warning: RAY_AUTH_MODE is not 'token' (set it before importing ray): agents can connect to the "
              "Ray cluster and read the graders' state", file=sys.stderr)
    if cluster.mode == "local":
        reap_orphaned_ray_agents()
        resources = {EMULATED_GPU: float(cluster.emulated_gpus)} if cluster.emulated_gpus else None
        # Loopback only. Ray 2.60's gRPC servers (GCS, raylet, workers) still listen on every interface, with no
        # setting to change it: the token guards them, and an agent in the isolated network mode cannot reach
        # any of them. Metrics collection is off: its Prometheus endpoint answers without a token. address="local":
        # a Ray of its own, never a cluster that `ray start` left running on this machine. Ray's memory monitor is
        # off: every process that runs what an agent made is bounded already (a cell's cgroup, a grader replica's
        # RLIMIT_DATA), and the monitor's victims are whoever ran a task last (one agent's memory bomb once took the
        # Serve controller, the run registry, both graders and both cells, and Tune's controller with them).
        # Its workers run at this command's niceness plus cluster.worker_niceness (0; Ray's 15 starves them on a
        # busy machine: conf/cluster/local.yaml).
        options = dict(address="local", num_cpus=cluster.num_cpus, num_gpus=cluster.num_gpus, resources=resources,
                       _node_ip_address="127.0.0.1", include_dashboard=False, namespace="a2rl", log_to_driver=False,
                       configure_logging=True, logging_level=logging.WARNING,
                       _system_config={"enable_metrics_collection": False, "memory_monitor_refresh_ms": 0,
                                       "worker_niceness": int(cluster.worker_niceness)})
        started = set(child_pids())
        try:
            ray.init(**options)
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this one
            if "timed out during startup" not in str(e):
                raise
            # Ray waits 30 s for its raylet to register (ray/_private/node.py, not a setting); on a busy machine the
            # raylet's agents (Python processes) can take longer to start. What it started goes on: it is waited
            # for while its processes progress, then joined, and stopped with the sweep (stop_ray).
            STARTED_HERE[:] = sorted(set(child_pids()) - started)
            address = wait_for_raylet(STARTED_HERE, wait_s)
            ray.init(address=address, _node_ip_address="127.0.0.1", namespace="a2rl", log_to_driver=False,
                     configure_logging=True, logging_level=logging.WARNING)
    else:
        ray.init(address=cluster.address, namespace="a2rl", log_to_driver=False, logging_level=logging.WARNING)


def check_counting(cells: list[CellSpec], out) -> None:
    """One warning per driver whose cut streams would be counted from characters (agents/proxy/estimate.py), before
    any cell starts: the sweep runs, and its records say how each such call was counted."""
    from agents.cli.session import driver_config
    from agents.proxy.estimate import counting_problem

    drivers = {c.driver.name: driver_config(c) for c in cells if c.driver.provider != "none"}
    for driver in drivers.values():
        if problem := counting_problem(driver):
            print(f"[a2rl] WARNING: {problem}", file=out)


def run_sweep(cfg: DictConfig, out=sys.stdout) -> Plan:
    registry.search(*(cfg.get("imports") or []))  # the user's own task classes and agent kinds
    check_cluster(cfg)
    cells = expand(cfg)
    check_tasks(cells)
    check_agent_sides(cells, to_plain(cfg.sandbox))
    layout = Layout.make(cfg.output_dir, cfg.cache_dir, cfg.cluster.get("workspace_root"))
    emulated = bool(cfg.cluster.emulated_gpus)
    if not cfg.dry_run:
        check_task_data(cells, layout.cache_dir, to_plain(cfg.downloads) or {})  # before Ray: one line per task
        check_stand_ins(cells, layout.cache_dir, emulated, bool(cfg.get("allow_stand_ins")), out)
    if cfg.dry_run:  # read-only: a dry run never creates or changes a ledger
        rows = Ledger(layout.ledger).cells() if layout.ledger.exists() else {}
        plan = make_plan(cells, rows, cfg.rerun_errored)
        print_plan(plan, emulated, out)
        for line in smith_lines(cfg.get("smith_dir")):  # the benchmark folders a sweep can name
            print(line, file=out)
        print_services_and_missing(cfg, plan, out)
        return plan

    check_vllm(cells, emulated)
    # (not the workspace root: on a cluster it is the nodes' shared path, which this machine may not mount)
    check_writable({"output_dir": layout.output_dir, "cache_dir": layout.cache_dir})
    sandbox.Settings.from_cfg(to_plain(cfg.sandbox))  # a bad sandbox setting is one line, before anything starts
    sandboxed = sandbox.check_available(bool(cfg.sandbox.required))
    if not sandboxed:
        print("[a2rl] WARNING: bubblewrap missing and sandbox.required=false: agents run UNSANDBOXED", file=out)
    elif cfg.cluster.mode == "local":  # (on a cluster each node's cells check theirs: sandbox.preflight)
        check_agents_python(layout, cells[0].task, to_plain(cfg.sandbox))
    ledger = Ledger(layout.ledger)
    ledger.add_cells(cells)
    fixed = reconcile(ledger, layout)
    if fixed["events_added"] or fixed["adopted"] or fixed["requeued"]:
        print(f"[a2rl] resumed: {fixed['events_added']} recorded events restored, {fixed['adopted']} finished cells "
              f"adopted, {fixed['requeued']} interrupted cells to run again", file=out)
    plan = make_plan(cells, ledger.cells(), cfg.rerun_errored)
    print(f"[a2rl] sweep {cfg.sweep.name}: {len(cells)} cells, {len(plan.to_run)} to run -> {layout.output_dir}",
          file=out)
    if plan.to_run:
        check_artefacts(plan.to_run, layout.cache_dir, emulated, bool(cfg.get("allow_fetch_in_cells")), out)
        check_counting(plan.to_run, out)
        ledger.set_pending([c.cell_id for c in plan.to_run])
        run_trials(cfg, layout, ledger, plan, sandboxed, emulated, out)
    from orchestrator.summary import print_a2rl_bugs, print_summary

    print_summary(ledger, [c.cell_id for c in cells], out)
    print_a2rl_bugs(ledger, [c.cell_id for c in cells], out)
    ledger.close()
    return plan


def recover_lost_round(ledger: Ledger, cells: list[CellSpec], max_retries: int, error: BaseException,
                       out) -> list[CellSpec]:
    """After Tune's controller died: no cell stays `running`. A cell whose attempt was cut off runs again while it has
    retries left (else it ends infra_error naming the cause); cells not started yet stay pending. Returns the cells
    to run in a new round."""
    from orchestrator.ledger import INFRA_ERROR
    from orchestrator.records import status_event

    cause = f"the sweep's trial controller died: {type(error).__name__}: {str(error).strip().splitlines()[-1][:300]}"
    print(f"[a2rl] {cause}; recovering its cells", file=out)
    rows = ledger.cells([c.cell_id for c in cells])
    again = []
    for cell in cells:
        row = rows[cell.cell_id]
        if row["status"] not in (PENDING, RUNNING):
            continue  # it finished before the controller died
        if row["status"] == RUNNING:
            attempt = max(1, row["attempts"])
            if attempt > max_retries:
                ledger.finish(cell.cell_id, INFRA_ERROR, time.time(), error=cause)
                print(f"[a2rl] finished {cell.label}: infra_error: {cause}", file=out)
                continue
            ledger.add_events(cell.cell_id, attempt, [status_event(cell.cell_id, attempt, time.time() - (
                row.get("started_at") or time.time()), "retrying", error=cause)])
            ledger.set_pending([cell.cell_id])
            print(f"[a2rl] infra error in {cell.label}, retrying: {cause[:200]}", file=out)
        again.append(cell)
    return again


def write_manifest(cfg, plan: Plan, layout: Layout, out) -> None:
    """OUTPUT_DIR/manifest.json before any cell starts (orchestrator/manifest.py); a resumed run configured otherwise
    writes manifest-N.json beside it and says which keys differ."""
    import ray

    from orchestrator import manifest

    # CPUs, GPUs and custom resources: Ray's memory figures are a share of what was free at its start, which
    # differs every time, and node names are addresses
    resources = {k: v for k, v in ray.cluster_resources().items()
                 if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
    resources["nodes"] = sum(n["Alive"] for n in ray.nodes())
    built = manifest.build(cfg, plan.cells, layout.cache_dir, resources)
    path, differing = manifest.write(layout.output_dir, built)
    if differing:
        shown = ", ".join(differing[:12]) + (f" and {len(differing) - 12} more" if len(differing) > 12 else "")
        print(f"[a2rl] this run's configuration differs from the sweep's first ({manifest.MANIFEST}) in {shown}: "
              f"recorded in {path.name}", file=out)


def run_trials(cfg, layout: Layout, ledger: Ledger, plan: Plan, sandboxed: bool, emulated: bool, out) -> None:
    import ray
    from ray import tune
    from ray.tune import TuneError

    from orchestrator.callbacks import LedgerCallback, WandbCallback, wandb_mode
    from orchestrator.cell import run_cell
    from orchestrator.services import sweep_services

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # the ledger and W&B are our loggers
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: our progress lines only
    logging.getLogger("ray.tune").setLevel(logging.ERROR)  # it would warn that our trials write no result.json
    started_ray = not ray.is_initialized()
    # Tasks that keep files in the cache (an environment's games) find it through this variable in every Ray worker.
    os.environ["A2RL_CACHE_DIR"] = str(Path(cfg.cache_dir).expanduser().resolve())
    keys = driver_keys(plan.to_run)  # a missing key fails here, before Ray starts
    if started_ray:
        start_ray(cfg.cluster, float(cfg.grading.service_timeout_s))
    tasks = list({c.task_name: c.task for c in plan.to_run}.values())
    local = started_ray and cfg.cluster.mode == "local"  # a local Ray takes Serve and every application with it
    try:
        if cfg.cluster.mode == "ray":
            check_nodes_share({"cluster.workspace_root": layout.workspace_root, "output_dir": layout.output_dir,
                               "cache_dir": layout.cache_dir})
        check_reservations(cfg, plan.to_run, tasks, emulated, keys is not None, out)
        write_manifest(cfg, plan, layout, out)
        with sweep_services(cfg, tasks, keys, emulated, remove_on_exit=not local and not cfg.grading.keep_running
                            ) as endpoints:
            callbacks: list[tune.Callback] = [LedgerCallback(
                ledger, [c.cell_id for c in plan.to_run], stream=out,
                pending_report_s=float(cfg.cluster.get("pending_report_s") or 0))]
            if cfg.logger.kind == "wandb":
                callbacks.append(WandbCallback(cfg.logger.project, cfg.logger.get("entity"),
                                               wandb_mode(cfg.logger.mode), layout.output_dir))
            opts = CellOptions(sandboxed=sandboxed, kill_grace_s=float(cfg.sandbox.kill_grace_s),
                               service_timeout_s=float(cfg.grading.service_timeout_s),
                               eval_timeout_s=float(cfg.grading.eval_timeout_s),
                               imports=list(cfg.get("imports") or []), sandbox=to_plain(cfg.sandbox),
                               emulated=emulated, grading_url=endpoints.grading_url,
                               driver_url=endpoints.driver_url, scope=endpoints.scope,
                               cli_path=to_plain(cfg.get("cli_path")) or [])
            trainable = tune.with_resources(
                run_cell, lambda config: tune.PlacementGroupFactory(
                    [resources_of(CellSpec.from_dict(config["cell"]), emulated)]))
            remaining = list(plan.to_run)
            for round_ in range(1 + len(plan.to_run)):  # a lost round ends or requeues at least one cell
                tuner = tune.Tuner(
                    trainable,
                    param_space={"cell": tune.grid_search([c.to_dict() for c in remaining]),
                                 "layout": layout.to_dict(), "opts": opts.to_dict()},
                    tune_config=tune.TuneConfig(
                        max_concurrent_trials=cfg.cluster.max_concurrent_cells or None, reuse_actors=False,
                        trial_name_creator=lambda t: CellSpec.from_dict(t.config["cell"]).label,
                        trial_dirname_creator=lambda t: CellSpec.from_dict(t.config["cell"]).cell_id),
                    run_config=tune.RunConfig(
                        name=f"{cfg.sweep.name}-{time.strftime('%Y%m%d-%H%M%S')}" + (f"-{round_}" if round_ else ""),
                        storage_path=str(layout.output_dir / "tune"), verbose=0,
                        failure_config=tune.FailureConfig(max_failures=int(cfg.cluster.max_retries)),
                        callbacks=callbacks),
                )
                try:
                    tuner.fit()
                    break
                except (TuneError, RuntimeError) as e:
                    if ledger.failure is not None:  # Tune wraps a callback's exception in a traceback's text
                        raise ledger.failure from None
                    # Tune's controller itself died (e.g. its actor manager meets an error kind it does not know,
                    # as Ray's OutOfMemoryError for a worker the memory monitor killed): the sweep goes on
                    remaining = recover_lost_round(ledger, remaining, int(cfg.cluster.max_retries), e, out)
                    if not remaining:
                        break
    finally:
        if local:
            stop_ray()
