"""Evaluator backends: load a submitted model directory and generate from it. Each registers its class
(contracts.registry, kind "backend"); a task's `grader.backend` names one."""
from contracts import registry
from contracts.specs import ConfigError
from contracts.task_spec import GraderSettings
from evaluators.backends import transformers_backend  # noqa: F401  (registers "transformers")
from evaluators.backends.base import EvaluatorBackend, ModelLoadError

__all__ = ["EvaluatorBackend", "ModelLoadError", "make_backend"]


def make_backend(settings: GraderSettings) -> EvaluatorBackend:
    """The backend a task's `grader:` block names."""
    try:
        cls = registry.lookup("backend", settings.backend)
    except ConfigError:
        raise ConfigError(f"grader.backend={settings.backend!r} is not available; this version has "
                          f"{', '.join(map(repr, registry.names('backend')))} (a vLLM backend is planned, not built)"
                          ) from None
    threads = settings.threads or max(1, int(settings.num_cpus))
    return cls(batch_size=settings.batch_size, device=settings.device, torch_threads=threads)
