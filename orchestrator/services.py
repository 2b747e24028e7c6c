"""A sweep's services on Ray Serve, started together and stopped together.

Each task gets its grader (and, for an interactive task, its rollout service at /<task>/env); the sweep gets one
driver proxy when a cell has an LLM driver or a task an LLM judge, and one run registry. They share Serve's HTTP
server, under the sweep's scope (/<scope>/<task>, contracts.serving.sweep_scope): two sweeps on one cluster never
replace or reach each other's services. On exit they are removed together, unless they should outlive the sweep
(grading.keep_running) or go with the local Ray the sweep started anyway.
"""
from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from contracts.task import is_interactive
from contracts.task_spec import TaskSpec
from orchestrator.sweep import judge_drivers
from orchestrator.workspace import task_material

REGISTRY_JOURNAL = "run-registry.jsonl"  # in the output dir, hidden from agents with it


@dataclass(frozen=True)
class Endpoints:
    grading_url: str                # http://host:port/<scope>: a task's grader at /<task>, its rollout service at
                                    # /<task>/env
    driver_url: str | None          # the driver proxy's base URL for agents (None: no cell has a driver)
    scope: str                      # what the sweep's services are named in


def services_scope(cfg: DictConfig) -> str:
    """grading.scope, or (null) the output dir's."""
    from contracts.serving import sweep_scope

    scope = cfg.grading.get("scope")
    return sweep_scope(cfg.output_dir) if scope is None else str(scope)


def http_address() -> tuple[str, int]:
    """Where Serve's HTTP server listens: the host agents reach it at, and its port. A cluster whose Serve another
    sweep (or the user) started keeps its own port: a new sweep's http_options are ignored, so ask Serve."""
    import ray
    from ray.serve.context import _get_global_client  # no public API tells a running Serve's HTTP port

    config = _get_global_client().http_config
    host = config.host
    if host in ("0.0.0.0", "::", ""):  # listening on every interface: agents reach the node this sweep runs on
        host = ray.util.get_node_ip_address()
    return host, int(config.port)


class ServeStartTimeout(TimeoutError):
    """Serve's HTTP proxy made no progress within the wait the sweep allows its services."""


SERVE_ACTORS = ("ServeController", "ProxyActor")
PROGRESS_CPU_S = 1.0  # CPU seconds Serve's processes must have used since the last progress (an idle loop uses ~0)
MOST_WAITS = 4        # a start still progressing is given up after this many service waits in all


def serve_progress() -> dict[str, tuple[str, int]]:
    """Serve's controller and proxies now: per live actor, its state and (when it runs on this machine) the CPU
    seconds its process used; what start_serve tells progress from."""
    import psutil  # type: ignore[import-untyped]
    import ray

    seen = {}
    for actor in ray._private.state.actors().values():  # (Ray's state API needs the dashboard, which is off)
        if actor.get("ActorClassName") not in SERVE_ACTORS or actor.get("State") == "DEAD":
            continue
        cpu = 0.0
        try:
            if actor.get("Pid"):
                times = psutil.Process(actor["Pid"]).cpu_times()
                cpu = times.user + times.system
        except psutil.Error:  # on another node, or gone meanwhile
            pass
        name = f"{actor['ActorClassName']} pid {actor.get('Pid') or '-'} ({actor['State']})"
        seen[name] = (actor["State"], cpu)
    return seen


def start_serve(host: str, port: int, wait_s: float) -> None:
    """Start Serve (its controller and HTTP proxy) on the cluster, or join the one running there, and return once its
    proxy answers. wait_s (grading.service_timeout_s) is how long the start may go without progress.

    Ray 2.60's own waits suit a quiet machine: its controller kills a proxy actor that is not ready within
    RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S (5 s) or that misses health checks of RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S
    (10 s), and serve.start gives up after HTTP_PROXY_TIMEOUT (60 s, not a setting). At load 4 on 2 cores the proxy's
    worker process had not even started within 5 s: it was killed ("The actor never ran") and the sweep died before
    its first cell. So the controller is given the sweep's own service wait for both checks, and when serve.start
    still gives up, the controller (which lives on) is waited for until its proxies are up: as long as the start
    progresses (a proxy's or an actor's state moves, or their processes use CPU), at most MOST_WAITS service waits in
    all; a start that made no progress for wait_s is stuck, and named."""
    import ray
    from ray import serve

    checks = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": str(float(wait_s)),
              "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": str(float(wait_s))}
    started = time.monotonic()
    try:
        # (controller_options, like http_options, only apply to a controller started here)
        serve.start(http_options={"host": host, "port": port}, logging_config={"log_level": "WARNING"},
                    controller_options={"runtime_env": {"env_vars": checks}})
        return
    except (TimeoutError, ray.exceptions.RayActorError) as e:
        print(f"[a2rl] Serve's HTTP proxy is slow to start ({type(e).__name__}: {str(e).strip().splitlines()[0]}); "
              f"waiting for it while it makes progress (up to {wait_s:.0f} s without any: "
              "grading.service_timeout_s)", file=sys.stderr)
    proxies: dict = {}
    actors: dict = {}
    states, cpu_s, progressed = None, 0.0, time.monotonic()
    while True:
        now = time.monotonic()
        proxies = {node: str(getattr(state, "value", state)) for node, state in serve.status().proxies.items()}
        if proxies and all(state in ("HEALTHY", "DRAINING") for state in proxies.values()):
            return
        actors = serve_progress()
        now_states = (proxies, sorted((name, state) for name, (state, _) in actors.items()))
        now_cpu = sum(cpu for _, cpu in actors.values())
        if now_states != states or now_cpu >= cpu_s + PROGRESS_CPU_S:
            states, cpu_s, progressed = now_states, now_cpu, now
        if now - progressed > wait_s or now - started > MOST_WAITS * wait_s:
            break
        time.sleep(1.0)
    stuck = (f"made no progress for {wait_s:.0f} s" if now - progressed > wait_s
             else f"still starting after {now - started:.0f} s ({MOST_WAITS} x the service wait)")
    raise ServeStartTimeout(
        f"Serve's HTTP proxy {stuck} (grading.service_timeout_s={wait_s:g}); proxies by node: {proxies or 'none'}; "
        f"Serve's actors: {', '.join(actors) or 'none'}. Raise grading.service_timeout_s if the machine is only "
        "slow, or see the proxy's log under the Ray session's logs/serve/")


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def sweep_services(cfg: DictConfig, tasks: list[TaskSpec], keys: dict[str, str] | None, emulated: bool,
                   remove_on_exit: bool) -> Iterator[Endpoints]:
    """keys: the real driver keys (None: no driver proxy); remove_on_exit: delete the applications at the end."""
    import logging

    from contracts.runs import get_or_create_registry
    from contracts.serving import remove, scoped, scoped_route
    from envs import rollout_service
    from evaluators import service as grading

    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    cache_dir = Path(cfg.cache_dir).expanduser()
    apps: list[str] = []
    scope = services_scope(cfg)
    try:
        # it outlives its own death (its journal brings it back)
        get_or_create_registry(Path(cfg.output_dir).expanduser() / REGISTRY_JOURNAL, scope)
        port = cfg.grading.port or free_port(cfg.grading.host)
        start_serve(cfg.grading.host, port, float(cfg.grading.service_timeout_s))
        host, port = http_address()
        url = f"http://{host}:{port}"
        driver_url = None
        if keys is not None:  # first: graders of judged tasks ask their judge through it
            from agents.proxy import deployment

            apps.append(scoped(deployment.APP_NAME, scope))
            retry = {"max_attempts": int(cfg.driver_proxy.max_attempts), "base_s": float(cfg.driver_proxy.backoff_s)}
            driver_url = url + deployment.deploy(keys, retry, float(cfg.driver_proxy.num_cpus), scope)
        for spec in tasks:
            apps.append(grading.app_name(spec.name, scope))
            judged = bool(judge_drivers([spec]))  # only a judged task's grader needs the proxy (and redeploys with it)
            # Once here, not in every cell; and before the grader, so data that cannot be loaded is the task's one
            # line (a ConfigError), not a failed deployment's traceback.
            task_material(spec, cache_dir)
            grading.deploy(spec, str(cache_dir), emulated_gpus=emulated, driver_url=driver_url if judged else None,
                           scope=scope)
            if is_interactive(spec):  # the rollout service on the train instances
                apps.append(rollout_service.app_name(spec.name, scope))
                rollout_service.deploy(spec, str(cache_dir), scope)
        yield Endpoints(url + scoped_route("", scope), driver_url, scope)
    finally:
        if remove_on_exit:
            for name in apps:
                remove(name)
            remove_actors(scope)


def remove_actors(scope: str) -> None:
    """Kill the scope's detached actors (run registry, environment hosts, the proxy's cells); an unscoped sweep's
    are left (their names are shared with any other unscoped sweep on the cluster)."""
    import ray

    from contracts.runs import NAMESPACE

    if not scope:
        return
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == NAMESPACE and actor["name"].startswith(f"{scope}-"):
            try:
                ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE), no_restart=True)
            except ValueError:  # gone meanwhile
                pass
