"""The grading service: one Ray Serve application per task, FastAPI ingress, agent-facing API of DESIGN.md.

Two deployments: the Grader (evaluators/grader.py: the ingress, light, no model) keeps the runs' books and closes
them (evaluators/run_closing.py), and the Evaluator replicas (evaluators/evaluator.py: the task's CPUs/GPUs) load and
score models. The orchestrator registers and closes runs through the Grader's handle.
Run state lives in the shared RunRegistry actor, scores in a content-addressed cache on disk, so replicas are
interchangeable: an evaluation lost with an Evaluator's process is asked again of another, and one that cannot be is
answered 503 `infra_error` and not counted. Every submission is appended (fsync) to the cell's record file before
the answer is sent.
"""
from __future__ import annotations

from contracts.task_spec import TaskSpec
from evaluators.evaluator import Evaluator
from evaluators.grader import Grader


def app_name(task_name: str, scope: str = "") -> str:
    from contracts.serving import scoped

    return scoped(f"grader-{task_name}", scope)


def deploy(spec: TaskSpec, cache_dir: str, emulated_gpus: bool = False, driver_url: str | None = None,
           scope: str = "") -> str:
    """Start the task's grading application (unless this process runs it with the same settings already); returns
    its route prefix.

    The grader reserves its own CPUs/GPUs (never a cell's): on a CPU box with emulated GPUs, its GPU
    reservation is taken from the same emulated resource the cells use. Its replicas get the task's class itself
    (pickled by reference, so their process imports the module that defines it).
    """
    from contracts.serving import deploy_once, scoped_route
    from contracts.task import variant_class

    def build():
        options: dict = {"num_cpus": spec.grader.num_cpus}
        if spec.grader.num_gpus and emulated_gpus:
            options["resources"] = {"emulated_gpu": spec.grader.num_gpus}
        elif spec.grader.num_gpus:
            options["num_gpus"] = spec.grader.num_gpus
        if spec.grader.memory_gb:  # reserved here, enforced in the replica (evaluators/model_size.py)
            options["memory"] = int(spec.grader.memory_gb * 1e9)
        # Serve queues evaluations beyond max_concurrent per replica; /status and /health never wait on them
        # (@serve.deployment makes a class a Deployment, with .options; ray's stubs do not tell mypy so)
        evaluator = Evaluator.options(  # type: ignore[attr-defined]
            num_replicas=spec.grader.num_replicas, ray_actor_options=options,
            max_ongoing_requests=spec.grader.max_concurrent)
        router = Grader.options(  # type: ignore[attr-defined]
            name=app_name(spec.name, scope), ray_actor_options={"num_cpus": 0})
        retention_cls = None if spec.retention is None else variant_class(TaskSpec.from_config(spec.retention.task))
        return router.bind(evaluator.bind(variant_class(spec), spec, cache_dir, driver_url, scope, retention_cls),
                           spec, scope)

    route = scoped_route(f"/{spec.name}", scope)
    deploy_once(app_name(spec.name, scope), route, [spec.config, cache_dir, emulated_gpus, driver_url], build)
    return route
