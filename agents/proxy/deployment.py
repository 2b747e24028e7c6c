"""The driver proxy as a Ray Serve deployment.

    from agents.proxy.deployment import DriverProxy
    handle = serve.run(DriverProxy.bind(), name="driver_proxy", route_prefix="/driver")
    key = handle.register_cell.remote(cell_id, driver, limits, records_path).result()
    # the agent's base URL: http://127.0.0.1:<serve http port>/driver  (OpenAI-style: .../driver/v1)

One replica holds every cell's budget, so keep num_replicas=1 (asyncio serves the concurrency).
The real keys are read from `environ` when given (what `deploy` does: a sweep's keys travel as the replica's
constructor argument), else from the replica's environment. Never pass them as a runtime_env: Ray's
runtime-env agent writes runtime envs, env_vars included, to its log.
"""
from __future__ import annotations

import asyncio
import time

from ray import serve

from agents.proxy.app import ProxyState, make_app
from agents.proxy.upstream import RetryPolicy
from contracts.serving import DRIVER_PROXY_APP

APP_NAME = DRIVER_PROXY_APP
ROUTE = "/driver"


@serve.deployment(num_replicas=1, max_ongoing_requests=2048)   # default 5 would queue streams
@serve.ingress()
class DriverProxy:
    def __init__(self, retry: dict | None = None, admin_token: str | None = None, environ: dict | None = None):
        self.state = ProxyState(RetryPolicy(**(retry or {})), admin_token=admin_token, environ=environ)

    def __serve_build_asgi_app__(self):
        return make_app(self.state)

    # async so they run on the replica's event loop, never concurrently with a request's bookkeeping
    async def register_cell(self, cell_id: str, driver: dict, limits: dict | None, records_path: str) -> str:
        return self.state.register_cell(cell_id, driver, limits, records_path)

    async def close_cell(self, key: str, drain_s: float = 0.0) -> dict:
        """Close the key; then wait up to drain_s for calls still in flight to be recorded."""
        self.state.close_cell(key)
        deadline = time.monotonic() + drain_s
        while self.state.usage(key)["in_flight"] > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.state.usage(key)

    async def usage(self, key: str) -> dict:
        return self.state.usage(key)


def deploy(keys: dict[str, str], retry: dict | None = None, num_cpus: float = 0) -> str:
    """Start the sweep's proxy application (unless this process runs it with the same settings already); returns its
    route prefix. keys: the real provider keys by variable name, from the orchestrator's environment.
    It needs no CPU of its own by default: it waits on the network, and a reserved CPU would be a cell's."""
    from contracts.serving import deploy_once

    def build():
        deployment = DriverProxy.options(ray_actor_options={"num_cpus": num_cpus})
        return deployment.bind(retry=retry, environ=dict(keys))

    deploy_once(APP_NAME, ROUTE, [keys, retry, num_cpus], build)  # only the settings' hash is kept
    return ROUTE
