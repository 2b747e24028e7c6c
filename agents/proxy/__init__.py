"""Driver proxy: meters agent->LLM calls per cell (tokens, cost, latency, retries) and enforces budgets.

Public API: ProxyState (register_cell, close_cell, usage), make_app, RetryPolicy; ThreadServer to run
it in-process; agents.proxy.deployment.DriverProxy for Ray Serve. The tests' scripted provider is
tests/support/fake_upstream.py.
"""
from agents.proxy.app import ProxyState, make_app
from agents.proxy.server import ThreadServer
from agents.proxy.upstream import RetryPolicy

__all__ = ["ProxyState", "make_app", "RetryPolicy", "ThreadServer"]
