"""Reservations that can never be met are refused before anything waits on them.

Ray queues a placement group that no node can hold, silently and for ever: a cell asking 2 GPUs on a 1-GPU machine,
or a cell asking the one GPU that its task's grader already holds, would hang the sweep. The sweep's services
(graders, rollout hosts, the driver proxy) hold their resources for the whole sweep, so they are placed on the nodes
first (largest first); then every cell's bundle must fit on some node's remainder. On a cluster that can grow
(`cluster.can_grow=true`: an autoscaler adds nodes) a misfit is only a warning.
"""
from __future__ import annotations

from contracts.specs import ConfigError

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


def service_reservations(tasks: list[dict], gpu_key: str, proxy_cpus: float) -> list[tuple[str, str, dict]]:
    """(what, the knob to change, resources) for each replica or actor the sweep's services start."""
    from contracts.task import is_interactive
    from contracts.task_spec import TaskSpec

    out = []
    for task in tasks:
        spec = TaskSpec.from_config(task)
        grader = spec.grader
        for _ in range(grader.num_replicas):
            out.append((f"the grader of task {spec.name}", "task.grader.num_gpus / num_cpus / memory_gb",
                        {"CPU": grader.num_cpus, gpu_key: grader.num_gpus, "memory": (grader.memory_gb or 0) * 1e9}))
        if is_interactive(spec) and spec.rollout.host_cpus:
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
