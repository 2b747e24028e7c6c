"""The evaluator backend interface: load a submitted model, generate greedily in batches, fingerprint its weights.

A backend is built once per grading replica and serves many submissions: load -> generate/digest -> unload, and
closed when the replica stops.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from contracts.decoding import Decoding, Prompt
from contracts.errors import ModelLoadError  # noqa: F401  (what a backend raises; defined below every layer)


class EvaluatorBackend(ABC):
    def __init__(self, batch_size: int = 32, device: str = "auto", torch_threads: int | None = None):
        self.batch_size = int(batch_size)
        self.device = device
        self.torch_threads = torch_threads
        self.generated_tokens = 0  # tokens decoded so far, a finished row's padding in a batch included: their cost

    @classmethod
    def from_settings(cls, settings) -> "EvaluatorBackend":
        """The backend a task's `grader:` block (contracts.task_spec.GraderSettings) asks for."""
        threads = settings.threads or max(1, int(settings.num_cpus))
        return cls(batch_size=settings.batch_size, device=settings.device, torch_threads=threads)

    @abstractmethod
    def load(self, model_dir) -> Any:
        """Load model and tokenizer; raise ModelLoadError(reason) when the directory is not usable."""

    @abstractmethod
    def generate(self, loaded: Any, prompts: list[Prompt], decoding: Decoding) -> list[str]:
        """Greedy replies, one per prompt (a chat, or raw text), in order, decoded as `decoding` says and cut before
        its first stop string; batching must not change any reply, nor the backend."""

    @abstractmethod
    def weights_digest(self, loaded: Any) -> str:
        """sha256 over the weights by parameter name, independent of file layout (sharding, format)."""

    def weights(self, loaded: Any) -> dict | None:
        """The weights by parameter name as CPU tensors (for the near-copy check), or None where the backend cannot
        give them (the check is then skipped)."""
        return None

    def unload(self, loaded: Any) -> None:
        """Free what load took (GPU memory above all)."""

    def close(self) -> None:
        """Give back what the backend holds between submissions (a resident engine and its process)."""
