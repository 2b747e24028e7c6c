"""Infrastructure errors: what Tune retries, and nothing else.

A cell's attempt ends in one of four ways (completed, budget_exhausted, agent_error, infra_error). Only a failure of
the infrastructure (a service that did not answer, a process or node that died, a file system that refused) is worth
running again: those raise an InfraError, or are one of the kinds `is_infrastructure` knows, and Tune retries the
cell. Any other exception in a2rl's own code (a TypeError, a KeyError, an assertion) is a bug: retrying it burns the
retries and reads like a flaky machine, so the cell ends once as infra_error marked `a2rl_bug`, with its traceback
in the outcome.
"""
from __future__ import annotations


class InfraError(RuntimeError):
    """The infrastructure failed a cell: Tune runs the cell again (cluster.max_retries)."""


def is_infrastructure(e: BaseException) -> bool:
    """InfraError, Ray's own errors (a dead actor, worker or node, an out-of-memory kill), and what the operating
    system refused (OSError: a full or missing disk, a connection, a permission)."""
    import ray.exceptions

    return isinstance(e, (InfraError, ray.exceptions.RayError, OSError, TimeoutError))
