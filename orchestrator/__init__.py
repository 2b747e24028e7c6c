"""The orchestrator: sweeps, Ray Tune trials, the ledger, reports. The top of the stack: it imports every package.

Task classes register their names when their modules are imported; the orchestrator resolves task names, so it
tells the registry where they are defined.
"""
from contracts import registry

registry.search("evaluators.tasks", "envs")
