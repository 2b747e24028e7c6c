"""The driver proxy as a Ray Serve deployment.

    from agents.proxy.deployment import DriverProxy
    handle = serve.run(DriverProxy.bind(), name="driver_proxy", route_prefix="/driver")
    key = handle.register_cell.remote(cell_id, driver, limits, records_path).result()
    # the agent's base URL: http://127.0.0.1:<serve http port>/driver  (OpenAI-style: .../driver/v1)

One replica holds every cell's budget, so keep num_replicas=1 (asyncio serves the concurrency).
The real keys are read from the replica's environment: on a local cluster it inherits the
orchestrator's; on a remote one pass them with the deployment's runtime_env.
"""
from __future__ import annotations

from ray import serve

from agents.proxy.app import ProxyState, make_app
from agents.proxy.upstream import RetryPolicy


@serve.deployment(num_replicas=1, max_ongoing_requests=2048)   # default 5 would queue streams
@serve.ingress()
class DriverProxy:
    def __init__(self, retry: dict | None = None, admin_token: str | None = None):
        self.state = ProxyState(RetryPolicy(**(retry or {})), admin_token=admin_token)

    def __serve_build_asgi_app__(self):
        return make_app(self.state)

    # async so they run on the replica's event loop, never concurrently with a request's bookkeeping
    async def register_cell(self, cell_id: str, driver: dict, limits: dict | None, records_path: str) -> str:
        return self.state.register_cell(cell_id, driver, limits, records_path)

    async def close_cell(self, key: str) -> dict:
        return self.state.close_cell(key)

    async def usage(self, key: str) -> dict:
        return self.state.usage(key)
