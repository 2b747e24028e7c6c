"""Estimators for multi-seed results: mean and standard error, bootstrap CI, expected best of k, pass@k,
standard errors clustered by task. Pure numpy/pandas; each is tested against brute force in tests/test_stats.py.

Runs of one cell configuration vary wildly, so every number comes with its n, and the k-run estimators are
given only where at least k runs exist (saying so where not) instead of extrapolating.
"""
from __future__ import annotations

from math import comb

import numpy as np
import pandas as pd


def _finite(values) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if np.isnan(x).any():
        raise ValueError(f"values contain NaN ({int(np.isnan(x).sum())} of {x.size}); decide what a missing "
                         f"run scores before estimating (see orchestrator.analysis.tables.results)")
    return x


def mean_se(values) -> tuple[float, float]:
    """Mean and its standard error (sample std with ddof=1 over sqrt(n)); SE is NaN below 2 runs."""
    x = _finite(values)
    if x.size == 0:
        return float("nan"), float("nan")
    se = float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se


def bootstrap_ci(values, n_boot: int = 10_000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean, resampling runs with replacement. NaN below 2 runs: one run
    says nothing about spread, and a zero-width interval would claim it does."""
    x = _finite(values)
    if x.size < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def expected_best_of_k(values, k: int) -> float:
    """Unbiased estimate of E[max of k runs] from n >= k runs: the average of the maximum over all k-subsets.

    With the runs sorted ascending, the i-th smallest (1-based) is the maximum of C(i-1, k-1) of the C(n, k)
    subsets, so the average is a weighted sum of order statistics. Ties need no care: tied values are
    interchangeable in the sum.
    """
    x = np.sort(_finite(values))
    n = x.size
    if not 1 <= k <= n:
        raise ValueError(f"expected best of k={k} needs 1 <= k <= n runs; have n={n}")
    total = comb(n, k)
    weights = np.array([comb(i - 1, k - 1) / total for i in range(1, n + 1)])
    return float(weights @ x)


def expected_best_curve(values) -> np.ndarray:
    """expected_best_of_k for k = 1..n."""
    n = np.asarray(values).size
    return np.array([expected_best_of_k(values, k) for k in range(1, n + 1)])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021): unbiased P(at least one of k runs succeeds) from n runs of which c succeeded,
    1 - C(n-c, k) / C(n, k), computed as a product to stay stable for large n."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n; have n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def successes(values, threshold: float) -> np.ndarray:
    """A run succeeds when its value is strictly above the threshold: at threshold 0 a copy of the base model
    (improvement 0) is not a success."""
    return _finite(values) > threshold


def pass_at_k_scores(values, threshold: float, k: int) -> float:
    ok = successes(values, threshold)
    return pass_at_k(ok.size, int(ok.sum()), k)


def clustered_se(values, clusters) -> float:
    """Standard error of the pooled mean with variance clustered by `clusters` (e.g. task).

    Runs of one task share the task's difficulty, so they are not independent; treating them as such makes
    the pooled SE too small. This is the cluster-robust sandwich for regressing the values on a constant,
    with the CR1 small-sample factor G/(G-1) (Stata's; its (N-1)/(N-K) term is 1 for one regressor):
        V = G/(G-1) * sum_g (sum_{i in g} (x_i - mean))^2 / N^2.
    With one run per cluster it equals the ordinary SE. NaN with fewer than 2 clusters.
    """
    x = _finite(values)
    groups = pd.Series(np.asarray(clusters)).astype(str).to_numpy()
    if x.size != groups.size:
        raise ValueError(f"values ({x.size}) and clusters ({groups.size}) differ in length")
    g = np.unique(groups).size
    if g < 2:
        return float("nan")
    resid = pd.Series(x - x.mean()).groupby(groups).sum().to_numpy()
    var = g / (g - 1) * np.sum(resid ** 2) / x.size ** 2
    return float(np.sqrt(var))


# -- tables over groups of runs ----------------------------------------------------------------------------------

def group_summary(runs: pd.DataFrame, by: list[str], value: str = "value", n_boot: int = 10_000,
                  level: float = 0.95, seed: int = 0, groups: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group: n, mean, se, ci_lo, ci_hi over runs (seeds). `groups` lists groups to report even when they
    have no runs left (e.g. every run was an excluded infra error); those get n=0 and a note."""
    rows = []
    keys = _group_keys(runs, by, groups)
    for key in keys:
        x = _select(runs, by, key)[value].to_numpy(dtype=float)
        mean, se = mean_se(x)
        lo, hi = bootstrap_ci(x, n_boot=n_boot, level=level, seed=seed)
        note = "no runs left" if x.size == 0 else ("one run: no spread" if x.size == 1 else "")
        rows.append({**dict(zip(by, key)), "n": int(x.size), "mean": mean, "se": se, "ci_lo": lo, "ci_hi": hi,
                     "note": note})
    return pd.DataFrame(rows, columns=by + ["n", "mean", "se", "ci_lo", "ci_hi", "note"])


def pooled_summary(runs: pd.DataFrame, by: list[str], cluster: str = "task", value: str = "value") -> pd.DataFrame:
    """Per group, pooling runs across `cluster` (tasks): n runs, n clusters, mean, SE clustered by cluster."""
    rows = []
    for key in _group_keys(runs, by, None):
        sub = _select(runs, by, key)
        x = sub[value].to_numpy(dtype=float)
        mean, _ = mean_se(x)
        n_clusters = int(sub[cluster].nunique())
        rows.append({**dict(zip(by, key)), "n": int(x.size), "n_clusters": n_clusters, "mean": mean,
                     "clustered_se": clustered_se(x, sub[cluster]) if x.size else float("nan"),
                     "note": "" if n_clusters > 1 else f"one {cluster}: no clustered SE"})
    return pd.DataFrame(rows, columns=by + ["n", "n_clusters", "mean", "clustered_se", "note"])


def best_of_k_table(runs: pd.DataFrame, by: list[str], value: str = "value", max_k: int | None = None,
                    groups: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table: per group and k = 1..max_k, the expected best of k runs, or NaN with a note where the
    group has fewer than k runs."""
    return _per_k(runs, by, value, max_k, groups, lambda x, k: expected_best_of_k(x, k), "expected_best")


def pass_at_k_table(runs: pd.DataFrame, by: list[str], threshold: float, value: str = "value",
                    max_k: int | None = None, groups: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long table: per group and k, pass@k with success = value > threshold; NaN with a note where n < k."""
    out = _per_k(runs, by, value, max_k, groups, lambda x, k: pass_at_k_scores(x, threshold, k), "pass_at_k")
    out.insert(len(by) + 2, "successes", [
        int(successes(_select(runs, by, key)[value].to_numpy(dtype=float), threshold).sum())
        for key in out[by].itertuples(index=False, name=None)])
    out["threshold"] = threshold
    return out


def _per_k(runs, by, value, max_k, groups, estimate, name) -> pd.DataFrame:
    keys = _group_keys(runs, by, groups)
    sizes = {key: len(_select(runs, by, key)) for key in keys}
    max_k = max_k or max(sizes.values(), default=0)
    rows = []
    for key in keys:
        x = _select(runs, by, key)[value].to_numpy(dtype=float)
        for k in range(1, max_k + 1):
            enough = x.size >= k
            rows.append({**dict(zip(by, key)), "k": k, "n": int(x.size),
                         name: estimate(x, k) if enough else float("nan"),
                         "note": "" if enough else f"needs {k} runs, has {x.size}"})
    return pd.DataFrame(rows, columns=by + ["k", "n", name, "note"])


def _group_keys(runs: pd.DataFrame, by: list[str], groups: pd.DataFrame | None) -> list[tuple]:
    frames = [runs[by]] + ([groups[by]] if groups is not None else [])
    keys = pd.concat(frames).drop_duplicates()
    return sorted(keys.itertuples(index=False, name=None), key=lambda t: tuple(map(str, t)))


def _select(runs: pd.DataFrame, by: list[str], key: tuple) -> pd.DataFrame:
    mask = np.ones(len(runs), dtype=bool)
    for col, val in zip(by, key):
        mask &= (runs[col] == val).to_numpy()
    return runs[mask]
