"""Best-so-far improvement as a function of wall time, driver tokens or submission index, averaged over seeds.

Each cell is a step function: 0 until its first valid submission (the base model stands), then the best
improvement among its valid submissions so far. After the cell's last submission the value is carried to
the end of the axis, so a cell that stopped early keeps its final result instead of leaving the average.
At the end of the axis a curve therefore equals the cell's result used by the statistics. (If every
submission so far is worse than the base, the value drops below 0: the curve reports what was submitted.)

Groups average these step functions on a common grid, with a band of one standard error across seeds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from orchestrator.analysis import tables

AXES = ("time", "tokens", "submission")
AXIS_LABELS = {"time": "wall time (s)", "tokens": "driver tokens (input + output)", "submission": "submission index"}


def best_so_far(events: pd.DataFrame, axis: str, cell_ids=None) -> pd.DataFrame:
    """Step points (cell_id, x, value) per cell, starting at (0, 0). For axis="tokens" only cells whose driver
    is metered (they have driver_usage events) appear; x is the tokens used up to each submission."""
    if axis not in AXES:
        raise ValueError(f"axis={axis!r}; use one of {AXES}")
    subs = dict(tuple(tables.submissions(events).groupby("cell_id")))
    cell_ids = list(cell_ids) if cell_ids is not None else sorted(events["cell_id"].unique())
    use = dict(tuple(tables.usage(events).groupby("cell_id"))) if axis == "tokens" else {}
    no_subs = tables.submissions(events.iloc[:0])
    rows = []
    for cell_id in cell_ids:
        cell_subs = subs.get(cell_id, no_subs)
        if axis == "tokens":
            cell_use = use.get(cell_id)
            if cell_use is None:
                continue
            # Tokens spent by the time of each submission (usage events at the same instant count).
            spent = cell_use["tokens"].cumsum().to_numpy()
            at = np.searchsorted(cell_use["t"].to_numpy(), cell_subs["t"].to_numpy(), side="right")
            xs = np.where(at > 0, spent[np.maximum(at - 1, 0)], 0.0)
        elif axis == "time":
            xs = cell_subs["t"].to_numpy(dtype=float)
        else:
            xs = cell_subs["submission_id"].astype(float).to_numpy()
        rows.append((cell_id, 0.0, 0.0))
        best = None
        for x, ok, imp in zip(xs, cell_subs["valid"], cell_subs["improvement"]):
            if ok and not np.isnan(imp):
                best = imp if best is None else max(best, imp)
            rows.append((cell_id, float(x), 0.0 if best is None else float(best)))
    return pd.DataFrame(rows, columns=["cell_id", "x", "value"])


def step_values(points: pd.DataFrame, grid: np.ndarray) -> np.ndarray:
    """One cell's step function (points sorted by x) evaluated on grid: the last value at or before each x."""
    xs, vs = points["x"].to_numpy(), points["value"].to_numpy()
    at = np.searchsorted(xs, grid, side="right") - 1
    return vs[np.clip(at, 0, None)]


def averaged(points: pd.DataFrame, cells: pd.DataFrame, axis: str, by: list[str] | None = None,
             n_points: int = 101) -> pd.DataFrame:
    """Mean best-so-far per group on a common grid, with se and a band lo/hi = mean -/+ se, and n cells.

    The grid of a group spans its budget (wall time, max submissions) or the furthest point seen, whichever
    is larger; submission grids are whole numbers.
    """
    by = by or tables.GROUP
    out = []
    labelled = cells.set_index("cell_id")
    by_cell = {c: p.sort_values("x", kind="stable") for c, p in points.groupby("cell_id")}
    for key, group in cells.groupby(by, sort=True):
        ids = [c for c in group["cell_id"] if c in by_cell]
        if not ids:
            continue
        cell_points = {c: by_cell[c] for c in ids}
        far = max(p["x"].max() for p in cell_points.values())
        grid = _grid(labelled.loc[ids], axis, far, n_points)
        matrix = np.vstack([step_values(cell_points[c], grid) for c in ids])
        n = matrix.shape[0]
        mean = matrix.mean(axis=0)
        se = matrix.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros_like(mean)
        key = key if isinstance(key, tuple) else (key,)
        frame = pd.DataFrame({"x": grid, "mean": mean, "se": se, "lo": mean - se, "hi": mean + se, "n": n})
        for col, val in zip(by, key):
            frame.insert(0, col, val)
        out.append(frame[by + ["x", "mean", "se", "lo", "hi", "n"]])
    columns = by + ["x", "mean", "se", "lo", "hi", "n"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)


def _grid(cells: pd.DataFrame, axis: str, far: float, n_points: int) -> np.ndarray:
    if axis == "time":
        end = max(far, np.nanmax(cells["budget_wall_time_s"].to_numpy(dtype=float), initial=0.0))
        return np.linspace(0.0, end, n_points)
    if axis == "submission":
        end = max(far, np.nanmax(cells["budget_max_submissions"].to_numpy(dtype=float), initial=0.0))
        return np.arange(0, int(end) + 1, dtype=float)
    return np.linspace(0.0, far, n_points)


def curves(cells: pd.DataFrame, events: pd.DataFrame, axis: str, by: list[str] | None = None,
           n_points: int = 101) -> pd.DataFrame:
    """Averaged best-so-far curves for the finished cells that are not infra errors (lost runs say nothing
    about how an agent progresses)."""
    runs = tables.results(cells, infra_errors="exclude")
    points = best_so_far(events, axis, runs["cell_id"])
    return averaged(points, runs, axis, by=by, n_points=n_points)
