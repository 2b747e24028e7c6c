"""Checkpoint identity: is a submission a public sibling of its base model rather than a model trained from it?

PostTrainBench found agents that downloaded the public instruct checkpoint and submitted it as their own; a grader
that only compares with the base passes it as "trained". A task lists such siblings (`task.known_models`: hub ids or
local paths), and each submission's relative L2 distance (||w - m|| / ||m||, as the copy_of_base check measures it)
to the base and to every known model of its shape is computed. It is flagged `known_checkpoint` when

    d_known <= near_copy_tol                              a copy of the known model (as copies of the base are), or
    d_known <= known_closer_ratio * min(d_base, CAP)      far closer to it than to the base (default ratio 0.5)

Why training from the base is not flagged: by the triangle inequality d_known >= D - d_base (D: the known model's
distance from the base), so a model that moved d_base < D / (1 + ratio) from the base can never be; and a model that
moved in a direction not aimed at the known model has d_known ~ sqrt(D^2 + d_base^2) > d_base. Measured on the
tests' tiny models (tests/test_identity.py: a base taught to answer 0, its sibling taught apart from it to answer
100): the sibling sits D = 0.41 from the base; the base trained 10 Adam steps more moved d_base = 0.11 and sits 0.31
from the sibling (ratio 2.9; the flag needs <= 0.5); the sibling trained 2 steps (what a cheating agent submits) sits
0.010 from it and 0.41 from the base (ratio 0.025); the sibling as is: 0. CAP = 0.5 bounds the threshold where the
base is of another shape (d_base inf): two random initialisations of the tiny model's shape sit 0.65 apart, so a model
merely of a known model's shape is not flagged, while a fine-tune of a known model of another shape is.

Known models are read tensor by tensor, a slice at a time, from their safetensors files (memory-mapped, once per
grader replica; never on a GPU), so a grader holds one slice (CHUNK elements) of each at once whatever their size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 22  # elements compared at once (32 MB in float64 per tensor side)
CAP = 0.5  # the base distance the rule counts at most (the module's docstring says why)


class Tensors:
    """Named tensors read a slice of rows at a time."""
    shapes: dict[str, tuple[int, ...]]

    def rows(self, name: str, start: int, stop: int):
        raise NotImplementedError


class LoadedTensors(Tensors):
    """A model's weights already in memory (the backend's state dict)."""

    def __init__(self, weights: dict):
        self.weights = weights
        self.shapes = {k: tuple(v.shape) for k, v in weights.items()}

    def rows(self, name: str, start: int, stop: int):
        t = self.weights[name]
        return t if t.dim() == 0 else t[start:stop]


class SafetensorsTensors(Tensors):
    """A checkpoint's safetensors files, opened (memory-mapped) once and read a slice at a time."""

    def __init__(self, folder: Path):
        from safetensors import safe_open

        files = sorted(Path(folder).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{folder} holds no .safetensors files (a known model must be saved with "
                                    "safe_serialization, as the hub's are)")
        self.handles, self.shapes, self.where = [], {}, {}
        for path in files:
            handle = safe_open(str(path), framework="pt", device="cpu")
            self.handles.append(handle)
            for name in handle.keys():
                self.shapes[name] = tuple(handle.get_slice(name).get_shape())
                self.where[name] = handle

    def rows(self, name: str, start: int, stop: int):
        piece = self.where[name].get_slice(name)
        return piece[:] if not self.shapes[name] else piece[start:stop]


@dataclass
class KnownModel:
    name: str                     # as the task lists it (a hub id or a path)
    tensors: SafetensorsTensors


def load_known(names: list[str] | tuple[str, ...], models_dir: Path) -> list[KnownModel]:
    """The task's known models, resolved once (a hub id is downloaded into the models cache; a path used as is)."""
    from evaluators.base_models import resolve_base_model

    return [KnownModel(name, SafetensorsTensors(resolve_base_model(name, models_dir))) for name in names]


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _whole(src: Tensors, name: str):
    shape = src.shapes[name]
    return src.rows(name, 0, shape[0] if shape else 1)


def same_shape(sub: Tensors, ref: Tensors) -> bool:
    """Every tensor of ref is in sub with its shape; what sub has beyond them are tied copies of one of them (the
    output embedding a checkpoint stores once)."""
    if any(sub.shapes.get(k) != s for k, s in ref.shapes.items()):
        return False
    extra = set(sub.shapes) - set(ref.shapes)
    if len(extra) > 4:  # a tied alias or two, not layers of their own
        return False
    for name in extra:
        tensor = _whole(sub, name)
        if not any(s == sub.shapes[name] and tensor.equal(_whole(sub, k)) for k, s in ref.shapes.items()):
            return False
    return True


def distances(sub: Tensors, known: Tensors, base: Tensors | None) -> tuple[float, float] | None:
    """(d_known, d_base) over the known model's tensors, streamed a chunk at a time; None when the submission is not
    of the known model's shape. d_base is inf when the base is not of that shape either."""
    import torch

    if not same_shape(sub, known):
        return None
    with_base = base is not None and all(base.shapes.get(k) == s for k, s in known.shapes.items())
    moved = {"known": 0.0, "base": 0.0}
    norm = {"known": 0.0, "base": 0.0}
    for name, shape in known.shapes.items():
        n_rows = shape[0] if shape else 1
        step = max(1, CHUNK // max(1, _numel(shape[1:])))
        for start in range(0, n_rows, step):
            stop = min(n_rows, start + step)
            w = sub.rows(name, start, stop).to("cpu", torch.float64)
            refs = {"known": known.rows(name, start, stop)}
            if with_base:
                refs["base"] = base.rows(name, start, stop)
            for which, ref in refs.items():
                r = ref.to("cpu", torch.float64)
                moved[which] += float(((w - r) ** 2).sum())
                norm[which] += float((r ** 2).sum())

    def ratio(which: str) -> float:
        return math.sqrt(moved[which] / norm[which]) if norm[which] else math.inf

    return ratio("known"), ratio("base") if with_base else math.inf


def is_known_checkpoint(d_known: float, d_base: float, near_copy_tol: float, closer_ratio: float) -> bool:
    """The rule of the module's docstring."""
    return d_known <= near_copy_tol or d_known <= closer_ratio * min(d_base, CAP)


def identify(sub: Tensors, base: Tensors | None, known: list[KnownModel], near_copy_tol: float,
             closer_ratio: float) -> tuple[dict, dict | None]:
    """(the distances to every known model of the submission's shape and to the base, the closest known model it
    is flagged as or None). Distances are None where they are infinite (not of that shape)."""
    def finite(x: float) -> float | None:
        return None if math.isinf(x) else x

    measured, flagged, d_base_any = {}, None, math.inf
    for model in known:
        got = distances(sub, model.tensors, base)
        if got is None:
            measured[model.name] = None
            continue
        d_known, d_base = got
        measured[model.name] = d_known
        d_base_any = min(d_base_any, d_base)
        if is_known_checkpoint(d_known, d_base, near_copy_tol, closer_ratio) and (
                flagged is None or d_known < flagged["distance"]):
            flagged = {"model": model.name, "distance": d_known, "base_distance": finite(d_base)}
    return {"base_distance": finite(d_base_any), "known": measured}, flagged
