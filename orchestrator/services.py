"""A sweep's services on Ray Serve, started together and stopped together.

Each task gets its grader (and, for an interactive task, its rollout service at /<task>/env); the sweep gets one
driver proxy when a cell has an LLM driver or a task an LLM judge. They share Serve's HTTP server. On exit they are
removed together, unless they should outlive the sweep (grading.keep_running) or go with the local Ray the sweep
started anyway.
"""
from __future__ import annotations

import socket
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
    grading_url: str                # http://host:port: a task's grader at /<task>, its rollout service at /<task>/env
    driver_url: str | None          # the driver proxy's base URL for agents (None: no cell has a driver)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def sweep_services(cfg: DictConfig, tasks: list[dict], keys: dict[str, str] | None, emulated: bool,
                   remove_on_exit: bool) -> Iterator[Endpoints]:
    """keys: the real driver keys (None: no driver proxy); remove_on_exit: delete the applications at the end."""
    import logging

    from ray import serve

    from contracts.runs import get_or_create_registry
    from contracts.serving import remove
    from envs import rollout_service
    from evaluators import service as grading

    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    cache_dir = Path(cfg.cache_dir).expanduser()
    apps: list[str] = []
    try:
        get_or_create_registry(Path(cfg.output_dir).expanduser() / REGISTRY_JOURNAL)  # it outlives its own death
        port = cfg.grading.port or free_port(cfg.grading.host)
        serve.start(http_options={"host": cfg.grading.host, "port": port}, logging_config={"log_level": "WARNING"})
        url = f"http://{cfg.grading.host}:{port}"
        driver_url = None
        if keys is not None:  # first: graders of judged tasks ask their judge through it
            from agents.proxy import deployment

            apps.append(deployment.APP_NAME)
            retry = {"max_attempts": int(cfg.driver_proxy.max_attempts), "base_s": float(cfg.driver_proxy.backoff_s)}
            driver_url = url + deployment.deploy(keys, retry, float(cfg.driver_proxy.num_cpus))
        for task in tasks:
            spec = TaskSpec.from_config(task)
            apps.append(grading.app_name(spec.name))
            judged = bool(judge_drivers([task]))  # only a judged task's grader needs the proxy (and redeploys with it)
            # Once here, not in every cell; and before the grader, so data that cannot be loaded is the task's one
            # line (a ConfigError), not a failed deployment's traceback.
            task_material(task, cache_dir)
            grading.deploy(spec, str(cache_dir), emulated_gpus=emulated, driver_url=driver_url if judged else None)
            if is_interactive(spec):  # the rollout service on the train instances
                apps.append(rollout_service.app_name(spec.name))
                rollout_service.deploy(spec, str(cache_dir))
        yield Endpoints(url, driver_url)
    finally:
        if remove_on_exit:
            for name in apps:
                remove(name)
