"""Deploy a Ray Serve application only when its settings changed since this process deployed it.

A sweep deploys its graders, rollout services and driver proxy when it starts, and tests deploy the same ones from
several modules. `serve.run` of an unchanged application would replace its replicas: graders would rebuild their
task and rescore the baseline, rollout sessions and driver budgets would be lost. So each application is deployed
again only when its settings' fingerprint differs, or when it is not running.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import serve

# The sweep's driver proxy (agents.proxy.deployment), asked by the graders for a run's driver usage.
DRIVER_PROXY_APP = "a2rl-driver-proxy"



def sweep_scope(output_dir: str | Path) -> str:
    """The scope a sweep's services are named in: its output dir's, so that two sweeps sharing a cluster never
    replace or reach each other's graders, rollout services, driver proxy or run registry, and a resumed sweep (the
    same output dir) finds its own again."""
    resolved = str(Path(output_dir).expanduser().resolve())
    return "a2rl-" + hashlib.sha256(resolved.encode()).hexdigest()[:8]


def scoped(name: str, scope: str) -> str:
    """A service's (an application's, a named actor's) name in a scope; "" is no scope (a test's own services)."""
    return f"{scope}-{name}" if scope else name


def scoped_route(route: str, scope: str) -> str:
    """A route prefix in a scope: the scope's services share Serve's HTTP server under /<scope>."""
    return f"/{scope}{route}" if scope else route


_deployed: dict[str, str] = {}  # app name -> fingerprint of the settings this process deployed it with


def deploy_once(name: str, route_prefix: str, settings: Any, build: Callable[[], Any]) -> bool:
    """Run `build()` (a bound deployment) as application `name` unless it already runs with these settings;
    returns whether it was (re)deployed. `settings` is anything JSON can write: only its hash is kept."""
    fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    app = serve.status().applications.get(name)
    if _deployed.get(name) == fingerprint and app is not None and app.status == "RUNNING":
        return False
    serve.run(build(), name=name, route_prefix=route_prefix)
    _deployed[name] = fingerprint
    return True


def remove(name: str) -> None:
    """Delete the application (if it exists) and forget its settings."""
    serve.delete(name)
    _deployed.pop(name, None)
