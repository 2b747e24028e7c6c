"""The estimators against brute force on random data (with ties, and n = k)."""
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from orchestrator.analysis import stats


def random_runs(rng, n):
    # Few distinct values, so ties are common.
    return rng.choice([-0.2, 0.0, 0.1, 0.1, 0.3, 0.5], size=n) if rng.random() < 0.5 else rng.normal(size=n)


def brute_best_of_k(x, k):
    return np.mean([max(s) for s in combinations(x, k)])


def brute_pass_at_k(ok, k):
    return np.mean([any(s) for s in combinations(ok, k)])


def test_expected_best_of_k_matches_brute_force_with_ties_and_n_equals_k():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 10))
        x = random_runs(rng, n)
        for k in range(1, n + 1):
            assert stats.expected_best_of_k(x, k) == pytest.approx(brute_best_of_k(x, k), abs=1e-12)
        assert stats.expected_best_of_k(x, n) == pytest.approx(x.max())
        assert stats.expected_best_of_k(x, 1) == pytest.approx(x.mean())
        assert np.allclose(stats.expected_best_curve(x), [brute_best_of_k(x, k) for k in range(1, n + 1)])


def test_expected_best_of_k_all_tied():
    assert stats.expected_best_of_k([0.2] * 5, 3) == pytest.approx(0.2)


def test_expected_best_needs_k_runs():
    with pytest.raises(ValueError, match="n=2"):
        stats.expected_best_of_k([0.1, 0.2], 3)
    with pytest.raises(ValueError, match="NaN"):
        stats.expected_best_of_k([0.1, float("nan")], 1)


def test_pass_at_k_matches_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 10))
        x = random_runs(rng, n)
        threshold = float(rng.choice([0.0, 0.1, 0.25]))
        ok = x > threshold
        for k in range(1, n + 1):
            assert stats.pass_at_k_scores(x, threshold, k) == pytest.approx(brute_pass_at_k(ok, k), abs=1e-12)
            assert stats.pass_at_k(n, int(ok.sum()), k) == pytest.approx(brute_pass_at_k(ok, k), abs=1e-12)


def test_pass_at_k_threshold_is_strict_and_edges():
    assert stats.pass_at_k_scores([0.0, 0.0, 0.0], 0.0, 1) == 0.0  # copies of the base are not successes
    assert stats.pass_at_k(5, 5, 2) == 1.0
    assert stats.pass_at_k(5, 0, 5) == 0.0
    assert stats.pass_at_k(4, 1, 4) == 1.0  # n = k with one success
    with pytest.raises(ValueError):
        stats.pass_at_k(3, 1, 4)


def brute_clustered_se(x, clusters):
    """The cluster-robust sandwich for OLS on a constant, written out with matrices, CR1 factor."""
    x = np.asarray(x, float)
    X = np.ones((x.size, 1))
    beta = np.linalg.solve(X.T @ X, X.T @ x)
    e = x - X @ beta
    bread = np.linalg.inv(X.T @ X)
    meat = np.zeros((1, 1))
    labels = np.unique(clusters)
    for g in labels:
        idx = np.asarray(clusters) == g
        s = X[idx].T @ e[idx]
        meat += np.outer(s, s)
    g, n, k = labels.size, x.size, 1
    factor = g / (g - 1) * (n - 1) / (n - k)
    return float(np.sqrt(factor * (bread @ meat @ bread)[0, 0]))


def test_clustered_se_matches_sandwich():
    rng = np.random.default_rng(2)
    for _ in range(100):
        n = int(rng.integers(3, 30))
        clusters = rng.choice(["a", "b", "c", "d"], size=n)
        if np.unique(clusters).size < 2:
            continue
        x = random_runs(rng, n)
        assert stats.clustered_se(x, clusters) == pytest.approx(brute_clustered_se(x, clusters), abs=1e-12)


def test_clustered_se_with_singleton_clusters_is_the_ordinary_se():
    x = np.random.default_rng(3).normal(size=12)
    assert stats.clustered_se(x, np.arange(12)) == pytest.approx(stats.mean_se(x)[1])
    assert np.isnan(stats.clustered_se(x, ["t"] * 12))


def test_clustered_se_is_larger_when_tasks_shift_all_their_runs():
    # Runs within a task are correlated (a hard task pulls all its runs down): the clustered SE must see it.
    rng = np.random.default_rng(4)
    tasks = np.repeat(np.arange(5), 10)
    x = rng.normal(size=5)[tasks] + 0.05 * rng.normal(size=50)
    assert stats.clustered_se(x, tasks) > 2 * stats.mean_se(x)[1]


def test_mean_se_and_bootstrap_ci():
    x = np.array([0.1, 0.4, 0.2, 0.0, 0.3])
    mean, se = stats.mean_se(x)
    assert mean == pytest.approx(0.2)
    assert se == pytest.approx(np.std(x, ddof=1) / np.sqrt(5))
    lo, hi = stats.bootstrap_ci(x, n_boot=5000, seed=7)
    assert lo < mean < hi
    assert x.min() <= lo and hi <= x.max()
    assert (lo, hi) == stats.bootstrap_ci(x, n_boot=5000, seed=7)  # seeded: reproducible
    assert np.isnan(stats.bootstrap_ci([0.3])[0]) and np.isnan(stats.mean_se([0.3])[1])
    assert stats.bootstrap_ci([0.2, 0.2, 0.2]) == pytest.approx((0.2, 0.2))


def test_group_tables_say_where_runs_are_missing():
    runs = pd.DataFrame({"task": ["a", "a", "a", "b"], "agent": ["x"] * 4, "value": [0.1, 0.3, 0.0, 0.2]})
    groups = pd.DataFrame({"task": ["a", "b", "c"], "agent": ["x", "x", "x"]})
    summary = stats.group_summary(runs, ["task", "agent"], groups=groups).set_index("task")
    assert summary.loc["a", "n"] == 3 and summary.loc["a", "mean"] == pytest.approx(0.4 / 3)
    assert summary.loc["c", "n"] == 0 and summary.loc["c", "note"] == "no runs left"
    best = stats.best_of_k_table(runs, ["task", "agent"]).set_index(["task", "k"])
    assert best.loc[("a", 2), "expected_best"] == pytest.approx(brute_best_of_k([0.1, 0.3, 0.0], 2))
    assert np.isnan(best.loc[("b", 2), "expected_best"]) and best.loc[("b", 2), "note"] == "needs 2 runs, has 1"
    passk = stats.pass_at_k_table(runs, ["task", "agent"], threshold=0.05).set_index(["task", "k"])
    assert passk.loc[("a", 1), "pass_at_k"] == pytest.approx(2 / 3) and passk.loc[("a", 1), "successes"] == 2
    pooled = stats.pooled_summary(runs, ["agent"], cluster="task").iloc[0]
    assert pooled["n"] == 4 and pooled["n_clusters"] == 2 and pooled["mean"] == pytest.approx(0.15)
    assert pooled["clustered_se"] == pytest.approx(brute_clustered_se(runs["value"], runs["task"]))
