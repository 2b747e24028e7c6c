"""Checking what an agent sends before anything is done with it: its run token, and a submitted path that must stay
inside its workspace. The refusals here are shared by the grading and rollout services."""
from __future__ import annotations

from pathlib import Path

from fastapi.responses import JSONResponse


class SubmissionError(Exception):
    """A refused request: HTTP status, machine-readable code, and a message the agent can act on."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict:
        return {"error": self.message, "code": self.code}


def error_response(e: SubmissionError) -> JSONResponse:
    return JSONResponse(status_code=e.status, content=e.body())


def run_token(request) -> str:
    """The caller's run token (Authorization: Bearer, or X-Run-Token); 401 when there is none."""
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-run-token", "")
    if not token:
        raise SubmissionError(401, "missing_token", "send your run token: 'Authorization: Bearer $A2RL_RUN_TOKEN'")
    return token


def resolve_model_path(workspace: Path, model_path) -> Path:
    """The submitted directory, resolved; 400 if it is outside the workspace or reaches out through a symlink."""
    if not isinstance(model_path, str) or not model_path.strip():
        raise SubmissionError(400, "bad_request", 'send JSON {"model_path": "output/<dir>"} with a non-empty string')
    workspace = workspace.resolve()
    given = Path(model_path)
    if ".." in given.parts:
        raise SubmissionError(400, "path_outside_workspace", f"model_path {model_path!r} must not contain '..'")
    candidate = given if given.is_absolute() else workspace / given
    real = candidate.resolve()
    if real != workspace and workspace not in real.parents:
        raise SubmissionError(400, "path_outside_workspace",
                              f"model_path {model_path!r} resolves to {real}, outside your workspace {workspace} "
                              "(through a symlink?); save the model under output/")
    if not real.is_dir():
        raise SubmissionError(400, "not_found", f"model_path {model_path!r} is not a directory in your workspace")
    for path in real.rglob("*"):
        if path.is_symlink():
            target = path.resolve()
            if target != workspace and workspace not in target.parents:
                raise SubmissionError(400, "path_outside_workspace",
                                      f"{path.relative_to(workspace)} is a symlink to {target}, outside your "
                                      "workspace; submit real files")
    return real
