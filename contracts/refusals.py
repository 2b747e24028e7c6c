"""Refusals: what the grading and rollout services answer when they will not do what an agent asked.

A refusal is a stable code, the HTTP status that code always has, and a message the agent can act on; it goes over
the wire as `{"error": message, "code": code}` and changes nothing. Code decides on the code, never on the message.
"""
from __future__ import annotations

STATUS = {
    "bad_request": 400,             # the body is not the JSON asked for
    "path_outside_workspace": 400,  # a submitted path leaves the workspace (also through a symlink)
    "not_found": 400,               # a submitted path is not a directory in the workspace
    "missing_token": 401,
    "invalid_token": 401,           # unknown, expired or closed run token
    "unknown_session": 404,         # no such environment session for this run
    "session_lost": 410,            # the session's environment host died (it restarts empty): reset a new one
    "budget_exhausted": 409,        # time or submissions used up
    "not_a_model": 422,             # the directory does not load as a causal LM
    "invalid_field": 422,           # a field has the wrong type or size
    "unknown_game": 422,            # no such environment instance
    "too_many_sessions": 429,       # the run's open-session limit
    "infra_error": 503,             # the grading infrastructure lost the request; it did not count: send it again
}


class Refusal(Exception):
    """A refused request. Picklable (a Ray actor can return one), so the run registry says why it refuses."""

    def __init__(self, code: str, message: str):
        if code not in STATUS:
            raise ValueError(f"unknown refusal code {code!r}; codes are {sorted(STATUS)}")
        super().__init__(code, message)
        self.code, self.message = code, message

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def body(self) -> dict:
        return {"error": self.message, "code": self.code}

    def __str__(self) -> str:
        return self.message


def answer_refusals(app) -> None:
    """Make a FastAPI app answer a Refusal raised in any of its routes with the refusal's status and body: the
    grading and rollout services' routes raise them, and this one handler answers for both."""
    from fastapi.responses import JSONResponse

    async def refused(request, e: Refusal) -> JSONResponse:
        return JSONResponse(status_code=e.status, content=e.body())

    app.add_exception_handler(Refusal, refused)
