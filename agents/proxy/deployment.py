"""The driver proxy as a Ray Serve deployment.

    from agents.proxy.deployment import DriverProxy
    handle = serve.run(DriverProxy.bind(), name="driver_proxy", route_prefix="/driver")
    key = handle.register_cell.remote(cell_id, driver, limits, records_path).result()
    # the agent's base URL: http://127.0.0.1:<serve http port>/driver  (OpenAI-style: .../driver/v1)

One replica holds every cell's budget, so keep num_replicas=1 (asyncio serves the concurrency).
The real keys are read from `environ` when given (what `deploy` does: a sweep's keys travel as the replica's
constructor argument), else from the replica's environment. Never pass them as a runtime_env: Ray's
runtime-env agent writes runtime envs, env_vars included, to its log.

A replica that dies (killed, out of memory) is started again by Serve. With `cells_actor` (what `deploy` gives) it
gets back every cell registered so far from that actor, with the same keys, and counts their use from their call
records, so agents' keys keep working and budgets go on where they were. A call that was in flight in the dead
replica is cut off (the agent sees a broken connection, and retries) and is not metered: no process saw its usage.
"""
from __future__ import annotations

import asyncio
import logging
import time

import ray
from ray import serve

from agents.proxy.app import ProxyState, make_app
from agents.proxy.upstream import RetryPolicy
from contracts.runs import NAMESPACE
from contracts.serving import DRIVER_PROXY_APP

APP_NAME = DRIVER_PROXY_APP
ROUTE = "/driver"
CELLS_ACTOR = "a2rl-driver-proxy-cells"
log = logging.getLogger("a2rl.proxy")


@ray.remote(num_cpus=0)
class ProxyCells:
    """The cells registered with the proxy (key -> registration; no real key, no usage), outside its replica."""

    def __init__(self):
        self.cells: dict[str, dict] = {}

    def add(self, key: str, registration: dict) -> None:
        self.cells[key] = {**registration, "closed": False}

    def cap_output(self, key: str, max_output_tokens: int | None) -> None:
        limits = {**(self.cells[key]["limits"] or {}), "max_output_tokens": max_output_tokens}
        self.cells[key]["limits"] = limits

    def close(self, key: str) -> None:
        if key in self.cells:
            self.cells[key]["closed"] = True

    def all(self) -> dict[str, dict]:
        return self.cells


# max_ongoing_requests: Serve's default 5 would queue streams; 120 s for a health check, not Serve's 30: a busy
# machine is no reason to restart the proxy (evaluators/grader.py)
@serve.deployment(num_replicas=1, max_ongoing_requests=2048, health_check_timeout_s=120)
@serve.ingress()
class DriverProxy:
    def __init__(self, retry: dict | None = None, admin_token: str | None = None, environ: dict | None = None,
                 cells_actor: str | None = None):
        self.state = ProxyState(RetryPolicy(**(retry or {})), admin_token=admin_token, environ=environ)
        self.cells = ray.get_actor(cells_actor, namespace=NAMESPACE) if cells_actor else None
        if self.cells is not None:  # empty on the first start; after a restart, the cells the dead replica had
            for key, registration in ray.get(self.cells.all.remote()).items():
                try:
                    self.state.restore(key, **registration)
                except (ValueError, OSError) as e:  # e.g. redeployed without its driver's key: only that cell
                    log.warning("driver proxy: cell %s not restored: %s", registration["cell_id"], e)

    def __serve_build_asgi_app__(self):
        return make_app(self.state)

    # async so they run on the replica's event loop, never concurrently with a request's bookkeeping
    async def register_cell(self, cell_id: str, driver: dict, limits: dict | None, records_path: str) -> str:
        key = self.state.register_cell(cell_id, driver, limits, records_path)
        if self.cells is not None:  # before the agent gets the key: a replica started later must know it
            await self.cells.add.remote(key, {"cell_id": cell_id, "driver": driver, "limits": limits,
                                              "records_path": records_path})
        return key

    async def close_cell(self, key: str, drain_s: float = 0.0) -> dict:
        """Close the key; then wait up to drain_s for calls still in flight to be recorded."""
        self.state.close_cell(key)
        if self.cells is not None:
            await self.cells.close.remote(key)
        deadline = time.monotonic() + drain_s
        while self.state.usage(key)["in_flight"] > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.state.usage(key)

    async def usage(self, key: str) -> dict:
        return self.state.usage(key)

    async def cap_output(self, key: str, max_output_tokens: int | None) -> None:
        self.state.cap_output(key, max_output_tokens)
        if self.cells is not None:  # a replica started later holds the cell to it too
            await self.cells.cap_output.remote(key, max_output_tokens)

    async def context_window(self, key: str) -> int | None:
        return await self.state.context_window(key)


def deploy(keys: dict[str, str], retry: dict | None = None, num_cpus: float = 0, scope: str = "") -> str:
    """Start the sweep's proxy application (unless this process runs it with the same settings already); returns its
    route prefix. keys: the real provider keys by variable name, from the orchestrator's environment.
    It needs no CPU of its own by default: it waits on the network, and a reserved CPU would be a cell's."""
    from contracts.serving import deploy_once, scoped, scoped_route

    cells_actor = scoped(CELLS_ACTOR, scope)

    def build():
        # Detached: it outlives the replicas, and on a cluster the orchestrator too (a resumed sweep's proxy finds
        # its cells again); the sweep removes it at its end (orchestrator.services).
        cells = ProxyCells.options(name=cells_actor, namespace=NAMESPACE, get_if_exists=True,
                                   lifetime="detached").remote()
        ray.get(cells.__ray_ready__.remote())
        deployment = DriverProxy.options(ray_actor_options={"num_cpus": num_cpus})
        return deployment.bind(retry=retry, environ=dict(keys), cells_actor=cells_actor)

    # only the settings' hash is kept
    deploy_once(scoped(APP_NAME, scope), scoped_route(ROUTE, scope), [keys, retry, num_cpus], build)
    return scoped_route(ROUTE, scope)
