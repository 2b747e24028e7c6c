"""The errors that cross the layers: a user's configuration's, and a submitted model's that cannot be loaded (raised
by the grader's backends and its size checks alike); below every other module, so each can import them."""
from __future__ import annotations


class ConfigError(ValueError):
    """A mistake in the user's configuration; the message says which key, which value, what to do."""


def reject_unknown(given: dict, known, where: str) -> None:
    """A ConfigError naming the keys of `given` that are not `known` (a typo would otherwise be ignored)."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")


class ModelLoadError(Exception):
    """The directory is not a loadable causal LM with its tokenizer. `reason` is shown to the agent as is."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
