"""Evaluator backends: load a submitted model directory and generate from it (transformers now, vLLM later)."""
from evaluators.backends.base import EvaluatorBackend, ModelLoadError

__all__ = ["EvaluatorBackend", "ModelLoadError", "make_backend"]


def make_backend(grader_cfg: dict) -> EvaluatorBackend:
    """The backend a task's `grader:` block names."""
    name = grader_cfg.get("backend", "transformers")
    threads = grader_cfg.get("threads") or max(1, int(grader_cfg.get("num_cpus", 1)))
    if name == "transformers":
        from evaluators.backends.transformers_backend import TransformersBackend

        return TransformersBackend(batch_size=grader_cfg.get("batch_size", 32),
                                   device=grader_cfg.get("device", "auto"), torch_threads=threads)
    raise ValueError(f"grader.backend={name!r} is not available; this version has 'transformers' "
                     "(a vLLM backend is planned, not built)")
