"""Refusals are a stable code, its HTTP status and a message; the run registry says which, the services answer it."""
from __future__ import annotations

import pickle

import pytest

from contracts.refusals import STATUS, Refusal
from contracts.runs import RunRegistry, run_token
from tests.support.runs import bare_run


def test_a_refusal_is_its_code_status_and_message_also_across_processes():
    refusal = pickle.loads(pickle.dumps(Refusal("budget_exhausted", "time is up")))
    assert (refusal.code, refusal.status, str(refusal)) == ("budget_exhausted", 409, "time is up")
    assert refusal.body() == {"error": "time is up", "code": "budget_exhausted"}
    assert {STATUS[c] for c in ("invalid_token", "missing_token")} == {401}
    with pytest.raises(ValueError, match="unknown refusal code 'budget'"):
        Refusal("budget", "no such code: an agent branches on codes, so they are a closed set")


class Headers:
    def __init__(self, **headers):
        self.headers = headers


def test_the_run_token_comes_from_either_header_or_is_refused():
    assert run_token(Headers(authorization="Bearer abc")) == "abc"
    assert run_token(Headers(**{"x-run-token": "xyz"})) == "xyz"
    with pytest.raises(Refusal) as e:
        run_token(Headers())
    assert e.value.code == "missing_token"


def test_the_run_registry_says_why_it_refuses(ray_cluster):
    import ray

    registry = RunRegistry.remote()  # a fresh one, not the sweep's
    ray.get(registry.register.remote("late", bare_run(-1, max_submissions=3)))
    ray.get(registry.register.remote("one", bare_run(600, max_submissions=1)))
    codes = {}
    for token in ("late", "one", "one", "unknown"):
        _, refusal = ray.get(registry.reserve.remote(token))
        codes.setdefault(token, []).append(refusal and (refusal.code, refusal.message))
    assert codes["late"] == [("budget_exhausted", "time budget exhausted")]
    assert codes["one"] == [None, ("budget_exhausted", "submission budget exhausted (1 used)")]
    assert codes["unknown"] == [("invalid_token", "unknown or closed run token")]
    (refusal,) = ray.get(registry.claim_sessions.remote("one", ["s1"], 0))
    assert (refusal.code, refusal.status) == ("too_many_sessions", 429)
    ray.kill(registry)
