"""Evaluator backends: load a submitted model directory and generate from it. Each registers its class
(contracts.registry, kind "backend"); a task's `grader.backend` names one."""
from contracts import registry
from contracts.specs import ConfigError
from contracts.task_spec import GraderSettings
from evaluators.backends import transformers_backend  # noqa: F401  (registers "transformers")
from evaluators.backends import vllm_backend  # noqa: F401  (registers "vllm")
from evaluators.backends.base import EvaluatorBackend, ModelLoadError

__all__ = ["EvaluatorBackend", "ModelLoadError", "make_backend"]


def make_backend(settings: GraderSettings) -> EvaluatorBackend:
    """The backend a task's `grader:` block names."""
    try:
        cls = registry.lookup("backend", settings.backend)
    except ConfigError:
        raise ConfigError(f"grader.backend={settings.backend!r} is not available; this version has "
                          f"{', '.join(map(repr, registry.names('backend')))}") from None
    return cls.from_settings(settings)
