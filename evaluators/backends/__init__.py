"""Evaluator backends: load a submitted model directory and generate from it (transformers now, vLLM later)."""
from evaluators.backends.base import EvaluatorBackend, ModelLoadError

__all__ = ["EvaluatorBackend", "ModelLoadError"]
