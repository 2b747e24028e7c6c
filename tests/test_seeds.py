"""The seeds statistics (orchestrator/analysis/seeds.py) checked by simulation: synthetic seed outcomes drawn with a
known spread, many replications, a fixed generator. Each claim the report and the planner make is checked at the rate
it states, within a tolerance of four binomial standard errors of the simulation (sqrt(p(1-p)/R)), so a test fails
only when the claim is wrong, not by chance (about 6 in 100,000 per check).

Also the seeds planner end to end: the report's seeds section on a sweep with known spreads, `plan`'s extension (only
the groups that need seeds, within a GPU-hour cap) and its command, expanded as the dry run expands it.
"""
from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from contracts.specs import ConfigError
from orchestrator.analysis import seeds
from tests.conftest import ROOT

R = 20_000  # replications per check


def tolerance(p: float, reps: int = R) -> float:
    return 4 * math.sqrt(p * (1 - p) / reps)


def student_ci(x: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Each row's Student CI of the mean, as seeds_table gives it (mean ± t_half_width at the row's SD)."""
    n = x.shape[1]
    half = sps.t.ppf(1 - (1 - level) / 2, n - 1) * x.std(axis=1, ddof=1) / np.sqrt(n)
    return x.mean(axis=1) - half, x.mean(axis=1) + half


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_the_reports_t_interval_covers_at_its_nominal_rate(n):
    rng = np.random.default_rng(n)
    mu, sigma = 12.0, 7.0
    x = rng.normal(mu, sigma, size=(R, n))
    lo, hi = student_ci(x)
    covered = float(((lo <= mu) & (mu <= hi)).mean())
    assert abs(covered - 0.95) <= tolerance(0.95), covered
    # and seeds_table's own numbers are these: one replication through the table
    cells = synthetic_cells({("t", "a", "none", "free"): x[0]})
    row = seeds.seeds_table(cells, seeds.Targets.configured()).iloc[0]
    assert row["ci_lo"] == pytest.approx(lo[0]) and row["ci_hi"] == pytest.approx(hi[0])


def test_the_percentile_bootstrap_undercovers_at_three_seeds():
    """Why the seeds section gives Student's interval beside the headline table's bootstrap one: at three seeds the
    percentile bootstrap covers the mean far less often than 95% (it cannot see beyond the three values)."""
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 1.0, size=(4000, 3))
    boot = x[:, rng.integers(0, 3, size=(2000, 3))].mean(axis=2)  # 2,000 resamples of each replication
    lo, hi = np.quantile(boot, [0.025, 0.975], axis=1)
    covered = float(((lo <= 0) & (0 <= hi)).mean())
    assert covered < 0.85, covered  # ~0.76 measured; Student's: 0.95


@pytest.mark.parametrize("n,assurance", [(2, 0.8), (3, 0.8), (3, 0.95), (6, 0.9)])
def test_the_spreads_upper_bound_holds_at_its_assurance(n, assurance):
    rng = np.random.default_rng(100 + n)
    sigma = 4.0
    s = rng.normal(0, sigma, size=(R, n)).std(axis=1, ddof=1)
    up = np.array([seeds.sd_upper(v, n, assurance) for v in s[:2000]])
    factor = up / s[:2000]
    assert np.allclose(factor, factor[0])  # the bound is s times a constant of n and the assurance
    held = float((s * factor[0] >= sigma).mean())
    assert abs(held - assurance) <= tolerance(assurance), held


@pytest.mark.parametrize("sigma,half_width", [(10.0, 5.0), (3.0, 5.0), (20.0, 4.0)])
def test_seeds_for_a_half_width_are_the_fewest_that_reach_it(sigma, half_width):
    n = seeds.seeds_for_half_width(sigma, half_width)
    assert seeds.t_half_width(sigma, n) <= half_width
    assert n == 2 or seeds.t_half_width(sigma, n - 1) > half_width
    # with that many seeds, the realised interval still covers at 95% and is, on average, about that wide
    rng = np.random.default_rng(int(sigma))
    x = rng.normal(0.0, sigma, size=(R, n))
    lo, hi = student_ci(x)
    assert abs(float(((lo <= 0) & (0 <= hi)).mean()) - 0.95) <= tolerance(0.95)
    # E[s] = c4 * sigma: the mean half-width is the planned one times c4 (<= 1)
    c4 = math.sqrt(2 / (n - 1)) * math.exp(math.lgamma(n / 2) - math.lgamma((n - 1) / 2))
    assert float(((hi - lo) / 2).mean()) == pytest.approx(seeds.t_half_width(sigma, n) * c4, rel=0.02)


def test_a_plan_from_three_pilot_seeds_reaches_its_half_width_at_its_assurance():
    """Planned from the upper bound of three seeds' SD, the seeds reach the half-width target (at the true spread)
    in at least `assurance` of the plans; planned from the SD itself, far fewer do."""
    rng = np.random.default_rng(7)
    sigma, target, reps = 8.0, 5.0, 4000
    s = rng.normal(0, sigma, size=(reps, 3)).std(axis=1, ddof=1)
    for assurance in (0.8, 0.9):
        n = np.array([seeds.seeds_for_half_width(seeds.sd_upper(v, 3, assurance), target) for v in s])
        reached = np.array([seeds.t_half_width(sigma, k) <= target for k in n]).mean()
        assert reached >= assurance - tolerance(assurance, reps), (assurance, reached)
    naive = np.array([seeds.t_half_width(sigma, seeds.seeds_for_half_width(v, target)) <= target for v in s]).mean()
    assert naive < 0.7, naive  # the point estimate reaches it about half the time


@pytest.mark.parametrize("delta,sd_a,sd_b,power", [(5.0, 6.0, 6.0, 0.8), (10.0, 15.0, 15.0, 0.8),
                                                   (3.0, 2.0, 2.0, 0.9), (8.0, 5.0, 9.0, 0.8)])
def test_the_planners_seeds_per_arm_reach_their_power(delta, sd_a, sd_b, power):
    """Simulate Student's two-sample t-test at the planned seeds per arm: it rejects at the stated power (within
    tolerance; the power function is exact for equal spreads, so the unequal case gets twice the tolerance), and one
    seed fewer falls short of it."""
    n = seeds.seeds_per_arm(delta, sd_a, sd_b, power)
    rng = np.random.default_rng(n)
    a = rng.normal(0.0, sd_a, size=(R, n))
    b = rng.normal(delta, sd_b, size=(R, n))
    rejected = float((sps.ttest_ind(a, b, axis=1).pvalue < 0.05).mean())
    exact = seeds.two_sample_power(delta, sd_a, sd_b, n)
    slack = tolerance(exact) * (1 if sd_a == sd_b else 2)
    assert exact >= power and abs(rejected - exact) <= slack, (n, exact, rejected)
    assert rejected >= power - slack
    assert n == 2 or seeds.two_sample_power(delta, sd_a, sd_b, n - 1) < power
    # the normal formula is the floor the search starts from
    z = sps.norm.ppf(0.975) + sps.norm.ppf(power)
    assert n >= math.ceil(z ** 2 * (sd_a ** 2 + sd_b ** 2) / delta ** 2)


def test_a_pair_planned_from_three_pilot_seeds_reaches_its_power_at_its_assurance():
    rng = np.random.default_rng(11)
    sigma, delta, reps, assurance = 6.0, 5.0, 2000, 0.8
    sa = rng.normal(0, sigma, size=(reps, 3)).std(axis=1, ddof=1)
    sb = rng.normal(0, sigma, size=(reps, 3)).std(axis=1, ddof=1)
    n = np.array([seeds.seeds_per_arm(delta, seeds.sd_upper(x, 3, assurance), seeds.sd_upper(y, 3, assurance))
                  for x, y in zip(sa, sb)])
    reached = float((seeds.two_sample_power(delta, sigma, sigma, n) >= 0.8).mean())
    assert reached >= assurance - tolerance(assurance, reps), reached


def test_targets_are_checked():
    with pytest.raises(ConfigError, match="power=1.5"):
        seeds.Targets.configured(power=1.5)
    with pytest.raises(ConfigError, match="ci=0"):
        seeds.Targets.configured(ci=0)
    assert seeds.seeds_per_arm(0.0, 1.0, 1.0) is None  # nothing to tell apart
    assert seeds.seeds_per_arm(1.0, 0.0, 0.0) == 2     # no spread: the fewest a t-test takes


# -- the tables on a frame of cells --------------------------------------------------------------------------------

def synthetic_cells(groups: dict[tuple, np.ndarray], gpus: float = 1.0, wall_s: float = 12 * 3600,
                    unfinished: dict[tuple, int] | None = None) -> pd.DataFrame:
    """A cells frame as tables.load gives it (the columns seeds_table reads): each group's finished improvements."""
    rows = []
    for (task, agent, driver, mode), values in groups.items():
        for seed, v in enumerate(values):
            rows.append({"task": task, "agent": agent, "driver": driver, "mode": mode, "seed": seed,
                         "status": "completed", "improvement": float(v), "budget_gpus": gpus,
                         "budget_wall_time_s": wall_s})
        for k in range((unfinished or {}).get((task, agent, driver, mode), 0)):
            rows.append({"task": task, "agent": agent, "driver": driver, "mode": mode, "seed": len(values) + k,
                         "status": "pending", "improvement": float("nan"), "budget_gpus": gpus,
                         "budget_wall_time_s": wall_s})
    return pd.DataFrame(rows)


def test_seeds_and_pairs_tables_give_the_known_answers():
    a, b = np.array([10.0, 14.0, 12.0]), np.array([20.0, 26.0, 23.0])
    cells = synthetic_cells({("gsm8k", "claude_code", "claude", "free"): a,
                             ("gsm8k", "codex", "claude", "free"): b},
                            unfinished={("gsm8k", "codex", "claude", "free"): 1})
    targets = seeds.Targets.configured(ci=5, power=0.8, assurance=0.8)
    table = seeds.seeds_table(cells, targets).set_index("agent")
    up = 2.0 * math.sqrt(2 / sps.chi2.ppf(0.2, 2))
    assert table.loc["claude_code", "sd"] == pytest.approx(2.0)
    assert table.loc["claude_code", "sd_up"] == pytest.approx(up)
    need = seeds.seeds_for_half_width(up, 5)
    assert table.loc["claude_code", "seeds_for_ci"] == need
    assert table.loc["claude_code", "extra_for_ci"] == need - 3
    assert table.loc["codex", "extra_for_ci"] == seeds.seeds_for_half_width(3.0 * math.sqrt(2 / sps.chi2.ppf(0.2, 2)),
                                                                            5) - 4  # a pending cell counts
    assert table.loc["codex", "gpu_hours_per_cell"] == 12.0
    assert table.loc["claude_code", "extra_gpu_hours"] == 12.0 * (need - 3)

    pairs = seeds.pairs_table(seeds.seeds_table(cells, targets), targets)
    assert len(pairs) == 1
    p = pairs.iloc[0]
    assert p["difference"] == pytest.approx(11.0) and p["delta"] == pytest.approx(11.0)
    assert p["seeds_per_arm"] == seeds.seeds_per_arm(11.0, up, 3.0 * math.sqrt(2 / sps.chi2.ppf(0.2, 2)), 0.8)
    stated = seeds.pairs_table(seeds.seeds_table(cells, targets), seeds.Targets.configured(delta=2.0)).iloc[0]
    assert stated["delta"] == 2.0 and stated["seeds_per_arm"] > p["seeds_per_arm"]


# -- plan, end to end: a sweep's ledger, its manifest, the printed command expanded by the dry run -----------------

# The demo sweep with three seeds, a second task, and budgets that reserve a GPU for an hour (GPU-hours to plan with).
OVERRIDES = ["sweep=demo", "sweep.seeds=[0,1,2]", "sweep.tasks=[arithmetic,anagrams]", "sweep.budget.gpus=1",
             "sweep.budget.wall_time_s=3600"]
# improvements per group, seeds 0..2: arithmetic/sft is noisy (it needs seeds for ±5 and to be told from copy_base);
# anagrams' two groups are tight and far apart (they need none)
OUTCOMES = {("arithmetic", "sft"): [0.0, 20.0, 40.0], ("arithmetic", "copy_base"): [0.0, 0.0, 0.0],
            ("anagrams", "sft"): [50.0, 50.5, 51.0], ("anagrams", "copy_base"): [0.0, 0.0, 0.0]}


@pytest.fixture(scope="module")
def planned_sweep(tmp_path_factory):
    """A finished sweep of the demo's config (its cells as the sweep expands them, in a real ledger, with the
    manifest a run writes): only its outcomes are made up, with known spreads."""
    from orchestrator import manifest
    from orchestrator.ledger import Ledger
    from orchestrator.sweep import expand
    from tests.conftest import compose
    from tests.test_report import record_cell

    out = tmp_path_factory.mktemp("planned") / "out"
    out.mkdir()
    cfg = compose([*OVERRIDES, f"output_dir={out}", f"cache_dir={out.parent / 'cache'}"])
    cells = expand(cfg)
    ledger = Ledger(out / "ledger.sqlite")
    ledger.add_cells(cells)
    for c in cells:
        value = OUTCOMES[c.task_name, c.agent.name][c.seed]
        record_cell(ledger, out, c, [(10.0, value, [])], "completed")
    ledger.close()
    written = manifest.build(cfg, cells, out.parent / "cache")
    written["overrides"] = [*OVERRIDES, f"output_dir={out}"]  # what Hydra records of `python -m orchestrator ...`
    manifest.write(out, written)
    return out, cfg


def dry_run(command: str, cache: str) -> list:
    """The printed command's cells to run, as its dry run plans them (in this process, through Hydra's parser)."""
    import io

    from orchestrator.runner import run_sweep
    from tests.conftest import compose

    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "orchestrator"]
    plan = run_sweep(compose([*args[3:], "dry_run=true", f"cache_dir={cache}", "logger=none"]), out=io.StringIO())
    return plan.to_run


def test_plan_extends_only_the_groups_that_need_seeds_and_its_command_adds_just_them(planned_sweep):
    from orchestrator.plan_command import plan, render

    out, _ = planned_sweep
    targets = seeds.Targets.configured(ci=5, power=0.8)
    table, pairs, ext = plan(out, targets)
    need = table.set_index(["task", "agent"])
    assert need.loc[("anagrams", "sft"), "extra_for_ci"] == 0 and need.loc[("anagrams", "copy_base"),
                                                                           "extra_for_ci"] == 0
    wanted = seeds.seeds_per_arm(40.0 / 2, seeds.sd_upper(20.0, 3, 0.8), 0.0)
    assert need.loc[("arithmetic", "sft"), "extra_for_ci"] == seeds.seeds_for_half_width(
        seeds.sd_upper(20.0, 3, 0.8), 5) - 3
    # arithmetic/copy_base shows no spread (±5 holds at two seeds) but is one arm of a pair that needs `wanted`
    assert set(ext.new_seeds) == {("arithmetic", "sft", "none", "free"), ("arithmetic", "copy_base", "none", "free")}
    assert ext.new_seeds["arithmetic", "copy_base", "none", "free"] == list(range(3, wanted))
    assert ext.gpu_hours == pytest.approx(float(ext.cells))  # a GPU for an hour each
    assert ext.command is not None, ext.problem
    text = render(out, table, pairs, ext, targets, None)
    assert "## Seeds" in text and ext.command in text

    to_run = dry_run(ext.command, str(out.parent / "cache"))
    added = sorted((c.task_name, c.agent.name, c.seed) for c in to_run)
    assert added == sorted((key[0], key[1], s) for key, new in ext.new_seeds.items() for s in new)

    # a cap: the cheaper group fits, the other is left out whole and named
    cheap = min(ext.new_seeds, key=lambda k: len(ext.new_seeds[k]))
    capped = plan(out, targets, max_gpu_hours=len(ext.new_seeds[cheap]) + 0.5)[2]
    assert list(capped.new_seeds) == [cheap] and len(capped.left_out) == 1
    assert sorted((c.agent.name, c.seed) for c in dry_run(capped.command, str(out.parent / "cache"))) == \
        [(cheap[1], s) for s in capped.new_seeds[cheap]]


def test_plan_on_a_sweep_whose_command_is_not_on_record_says_what_to_add(planned_sweep, tmp_path):
    """A manifest without the command line (a sweep started from Python): `sweep=demo` alone does not make this
    sweep's cells, so no command is printed; the line to add to the sweep's own command is."""
    import shutil

    from orchestrator.plan_command import plan

    out, _ = planned_sweep
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    written = json.loads((copy / "manifest.json").read_text())
    written["overrides"] = None
    (copy / "manifest.json").write_text(json.dumps(written))
    ext = plan(copy, seeds.Targets.configured())[2]
    assert ext.command is None and "++sweep.extra_seeds=" in ext.problem and "does not make" in ext.problem


def test_the_plan_subcommand_prints_the_table_and_refuses_bad_options(planned_sweep):
    out, _ = planned_sweep
    run = subprocess.run([sys.executable, "-m", "orchestrator", "plan", f"output_dir={out}", "ci=5", "power=0.8",
                          "max_gpu_hours=1000"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "## Seeds" in run.stdout and "python -m orchestrator sweep=demo" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "orchestrator", "plan", f"output_dir={out}", "power=2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "power=2.0" in bad.stderr


def test_extra_seeds_in_a_sweep_are_checked():
    from orchestrator.sweep import expand
    from tests.conftest import compose

    cells = expand(compose(["sweep=demo", "++sweep.extra_seeds=[{task:arithmetic,agent:sft,seeds:[5,6]}]"]))
    assert sorted(c.seed for c in cells if c.agent.name == "sft") == [0, 1, 5, 6]
    assert sorted(c.seed for c in cells if c.agent.name == "copy_base") == [0, 1]
    with pytest.raises(ConfigError, match="not a group of this sweep"):
        expand(compose(["sweep=demo", "++sweep.extra_seeds=[{task:gsm8k,agent:sft,seeds:[5]}]"]))
    with pytest.raises(ConfigError, match=r"seeds \[1\] are listed twice"):
        expand(compose(["sweep=demo", "++sweep.extra_seeds=[{task:arithmetic,agent:sft,seeds:[1,2]}]"]))
