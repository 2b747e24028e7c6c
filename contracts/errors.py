"""The error a user's configuration raises: below every other contracts module, so each can import it."""
from __future__ import annotations


class ConfigError(ValueError):
    """A mistake in the user's configuration; the message says which key, which value, what to do."""


def reject_unknown(given: dict, known, where: str) -> None:
    """A ConfigError naming the keys of `given` that are not `known` (a typo would otherwise be ignored)."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")
