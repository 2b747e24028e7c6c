"""Checking a submitted path before anything is done with it: it must stay inside the agent's workspace."""
from __future__ import annotations

from pathlib import Path

from contracts.refusals import Refusal


def resolve_model_path(workspace: Path, model_path) -> Path:
    """The submitted directory, resolved; 400 if it is outside the workspace or reaches out through a symlink."""
    if not isinstance(model_path, str) or not model_path.strip():
        raise Refusal("bad_request", 'send JSON {"model_path": "output/<dir>"} with a non-empty string')
    workspace = workspace.resolve()
    given = Path(model_path)
    if ".." in given.parts:
        raise Refusal("path_outside_workspace", f"model_path {model_path!r} must not contain '..'")
    candidate = given if given.is_absolute() else workspace / given
    real = candidate.resolve()
    if real != workspace and workspace not in real.parents:
        raise Refusal("path_outside_workspace",
                      f"model_path {model_path!r} resolves to {real}, outside your workspace {workspace} "
                      "(through a symlink?); save the model under output/")
    if not real.is_dir():
        raise Refusal("not_found", f"model_path {model_path!r} is not a directory in your workspace")
    for path in real.rglob("*"):
        if path.is_symlink():
            target = path.resolve()
            if target != workspace and workspace not in target.parents:
                raise Refusal("path_outside_workspace", f"{path.relative_to(workspace)} is a symlink to {target}, "
                                                        "outside your workspace; submit real files")
    return real
