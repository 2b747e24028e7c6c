"""How many seeds a claim needs: each group's spread between seeds, the seeds it needs for a chosen CI half-width,
and the seeds per arm that tell two agents apart; each with the GPU-hours it costs from the cells' budgets.

Two or three seeds estimate a spread poorly (the sample SD of three normal runs is below half the true one about one
time in five), so every plan is made from an upper confidence bound on the spread, not the estimate itself:
sigma_up = s * sqrt((n-1) / chi2.ppf(1 - assurance, n-1)), the one-sided chi-square bound (Browne 1995, "On the use
of a pilot sample for sample size determination"). A plan made from it reaches its target with probability at least
`assurance` over what the seeds so far happened to show; tests/test_seeds.py checks each claim by simulation.

- CI half-width: the smallest n >= 2 with t(1 - (1-level)/2, n-1) * sigma_up / sqrt(n) <= ci (Student's interval of
  the mean, the one this section reports beside the mean).
- Two agents: Student's two-sample t-test, two-sided at alpha, equal seeds per arm; its power at n per arm is exact
  from the noncentral t with 2n-2 degrees of freedom and noncentrality delta / sqrt((sigma_a^2 + sigma_b^2) / n)
  (exact for equal spreads, close for unequal ones). The seeds per arm: the smallest n whose power reaches `power`,
  searched up from the normal formula n = (z(1-alpha/2) + z(power))^2 (sigma_a^2 + sigma_b^2) / delta^2, which the
  t-test never beats. delta: the observed difference of the two means, or one stated.

Values are the improvement in the task's own units (points for the paper's tasks), infra errors excluded: a run lost
to the system says nothing about the spread of outcomes, and a resumed sweep does not run it again.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from contracts.specs import ConfigError
from orchestrator.analysis import tables

GROUP = tables.GROUP
PAIR_KEY = ["task", "driver", "mode"]  # two agents are compared on the same task, driver and mode
MAX_SEEDS = 100_000  # past this a target is out of reach (a difference of ~0 against any spread): said, not searched
UNFINISHED = ("pending", "running")
SEED_COLUMNS = GROUP + ["runs", "unfinished", "seeds", "mean", "sd", "sd_up", "ci_lo", "ci_hi", "half_width",
                        "seeds_for_ci", "gpu_hours_per_cell", "extra_for_ci", "extra_gpu_hours", "note"]
PAIR_COLUMNS = PAIR_KEY + ["agent_a", "agent_b", "runs_a", "runs_b", "mean_a", "mean_b", "difference", "delta",
                           "sd_up_a", "sd_up_b", "power_now", "seeds_per_arm", "extra_a", "extra_b",
                           "extra_gpu_hours", "note"]


CONFIG = Path(__file__).resolve().parents[2] / "conf" / "config.yaml"  # analysis.seeds: the targets' defaults


@dataclass(frozen=True)
class Targets:
    """What a plan aims at. ci: the 95% (level) CI half-width wanted, in the task's units; power: of telling two agents
    apart at two-sided alpha; delta: the difference to tell apart (None: each pair's observed one); assurance: the
    confidence of the upper bound on each spread. Their defaults are conf/config.yaml's analysis.seeds
    (Targets.configured)."""
    ci: float
    power: float
    delta: float | None
    assurance: float
    level: float = 0.95
    alpha: float = 0.05

    @classmethod
    def configured(cls, **given) -> Targets:
        """analysis.seeds from conf/config.yaml, with `given` on top (None values left out: the default stands)."""
        from omegaconf import OmegaConf

        defaults = OmegaConf.to_container(OmegaConf.load(CONFIG).analysis.seeds)
        return cls(**{**defaults, **{k: v for k, v in given.items() if v is not None}})

    def __post_init__(self):
        for name in ("power", "assurance", "level", "alpha"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < 1):
                raise ConfigError(f"{name}={value!r} must be a probability strictly between 0 and 1, e.g. 0.8")
        if not (isinstance(self.ci, (int, float)) and self.ci > 0):
            raise ConfigError(f"ci={self.ci!r} must be a half-width > 0 in the task's units, e.g. 5 (points)")
        if self.delta is not None and not (isinstance(self.delta, (int, float)) and self.delta > 0):
            raise ConfigError(f"delta={self.delta!r} must be a difference > 0 in the task's units, or unset (each "
                              "pair's observed difference)")


# -- the estimators ----------------------------------------------------------------------------------------------

def sd_upper(sd: float, n: int, assurance: float) -> float:
    """One-sided upper confidence bound on the spread from n runs' sample SD (chi-square, normal runs). NaN below 2
    runs (no spread was seen)."""
    if n < 2 or sd != sd:
        return float("nan")
    return float(sd * math.sqrt((n - 1) / sps.chi2.ppf(1 - assurance, n - 1)))


def t_half_width(sigma: float, n: int, level: float = 0.95) -> float:
    """Half-width of Student's CI of the mean of n runs whose SD is sigma."""
    if n < 2:
        return float("nan")
    return float(sps.t.ppf(1 - (1 - level) / 2, n - 1) * sigma / math.sqrt(n))


def seeds_for_half_width(sigma: float, half_width: float, level: float = 0.95) -> int | None:
    """The fewest runs (>= 2) whose Student CI at this spread is no wider than half_width; None: past MAX_SEEDS or the
    spread is unknown."""
    if sigma != sigma:
        return None
    z = sps.norm.ppf(1 - (1 - level) / 2)
    n = max(2, math.ceil((z * sigma / half_width) ** 2))  # the t quantile is above z: never fewer than this
    while n <= MAX_SEEDS:
        if t_half_width(sigma, n, level) <= half_width:
            return n
        n += 1
    return None


def two_sample_power(delta: float, sd_a: float, sd_b: float, n, alpha: float = 0.05):
    """Power of Student's two-sided two-sample t-test with n runs per arm (a number or an array of them)."""
    n = np.asarray(n, dtype=float)
    df = 2 * n - 2
    spread = np.sqrt((sd_a ** 2 + sd_b ** 2) / n)
    crit = sps.t.ppf(1 - alpha / 2, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        ncp = np.where(spread > 0, abs(delta) / spread, np.inf)
    power = np.where(np.isinf(ncp), 1.0, sps.nct.sf(crit, df, np.where(np.isinf(ncp), 0, ncp))
                     + sps.nct.cdf(-crit, df, np.where(np.isinf(ncp), 0, ncp)))
    return power if power.ndim else float(power)


def seeds_per_arm(delta: float, sd_a: float, sd_b: float, power: float = 0.8, alpha: float = 0.05) -> int | None:
    """The fewest runs per arm (>= 2) whose t-test tells a difference of delta apart with this power; None: no
    difference to tell (delta 0), an unknown spread, or past MAX_SEEDS."""
    if delta != delta or delta == 0 or sd_a != sd_a or sd_b != sd_b:
        return None
    z = sps.norm.ppf(1 - alpha / 2) + sps.norm.ppf(power)
    n = max(2, math.ceil(z ** 2 * (sd_a ** 2 + sd_b ** 2) / delta ** 2))
    while n <= MAX_SEEDS:
        chunk = np.arange(n, min(n + 64, MAX_SEEDS + 1))  # a few at once: the normal formula is close
        reached = np.nonzero(two_sample_power(delta, sd_a, sd_b, chunk, alpha) >= power)[0]
        if len(reached):
            return int(chunk[reached[0]])
        n = int(chunk[-1]) + 1
    return None


# -- the tables --------------------------------------------------------------------------------------------------

def seeds_table(cells: pd.DataFrame, targets: Targets) -> pd.DataFrame:
    """Per group: its finished runs (infra errors excluded) and unfinished cells, mean, SD and its upper bound,
    Student's CI, the seeds the CI half-width target needs and the extra ones, with their GPU-hours (budget.gpus x
    budget.wall_time_s per cell)."""
    if not len(cells):
        return pd.DataFrame(columns=SEED_COLUMNS)
    runs = tables.results(cells, "exclude")
    values = {key: g["value"].to_numpy(dtype=float) for key, g in runs.groupby(GROUP, sort=True)} if len(runs) else {}
    rows = []
    for key, g in cells.groupby(GROUP, sort=True):
        x = values.get(key, np.array([]))
        n, unfinished = x.size, int(g["status"].isin(UNFINISHED).sum())
        mean = float(x.mean()) if n else float("nan")
        sd = float(x.std(ddof=1)) if n > 1 else float("nan")
        up = sd_upper(sd, n, targets.assurance)
        half = t_half_width(sd, n, targets.level)
        needed = seeds_for_half_width(up, targets.ci, targets.level) if n > 1 else 2
        per_cell = gpu_hours_per_cell(g)
        extra = None if needed is None else max(0, needed - n - unfinished)
        note = ("no finished run yet: two seeds show a first spread" if n == 0 else
                "one run: two seeds show a first spread" if n == 1 else
                "no spread seen between seeds" if sd == 0 else
                f"out of reach: over {MAX_SEEDS} seeds" if needed is None else "")
        rows.append({**dict(zip(GROUP, key)), "runs": n, "unfinished": unfinished, "seeds": int(g["seed"].nunique()),
                     "mean": mean, "sd": sd, "sd_up": up, "ci_lo": mean - half, "ci_hi": mean + half,
                     "half_width": half, "seeds_for_ci": needed, "gpu_hours_per_cell": per_cell,
                     "extra_for_ci": extra, "extra_gpu_hours": None if extra is None else extra * per_cell,
                     "note": note})
    return pd.DataFrame(rows, columns=SEED_COLUMNS)


def pairs_table(seeds: pd.DataFrame, targets: Targets) -> pd.DataFrame:
    """Per pair of agents on the same task, driver and mode: the difference of their means, the delta to tell apart
    (targets.delta, else the observed difference), the t-test's power at the runs they have, and the seeds per arm
    that reach targets.power, with the extra seeds and their GPU-hours."""
    rows = []
    for key, g in seeds.groupby(PAIR_KEY, sort=True):
        for a, b in itertools.combinations(g.sort_values("agent").to_dict("records"), 2):
            diff = b["mean"] - a["mean"]
            delta = targets.delta if targets.delta is not None else abs(diff)
            known = a["runs"] > 1 and b["runs"] > 1
            per_arm = seeds_per_arm(delta, a["sd_up"], b["sd_up"], targets.power, targets.alpha) if known else None
            now = min(a["runs"], b["runs"])
            power_now = (two_sample_power(delta, a["sd"], b["sd"], now, targets.alpha)
                         if known and delta == delta and delta > 0 else float("nan"))
            extra_a = None if per_arm is None else max(0, per_arm - a["runs"] - a["unfinished"])
            extra_b = None if per_arm is None else max(0, per_arm - b["runs"] - b["unfinished"])
            cost = None if per_arm is None else extra_a * a["gpu_hours_per_cell"] + extra_b * b["gpu_hours_per_cell"]
            note = ("a spread is not known yet: two runs of each first" if not known else
                    "no difference to tell apart" if delta != delta or delta == 0 else
                    f"out of reach: over {MAX_SEEDS} seeds per arm" if per_arm is None else "")
            rows.append({**dict(zip(PAIR_KEY, key)), "agent_a": a["agent"], "agent_b": b["agent"],
                         "runs_a": a["runs"], "runs_b": b["runs"], "mean_a": a["mean"], "mean_b": b["mean"],
                         "difference": diff, "delta": delta, "sd_up_a": a["sd_up"], "sd_up_b": b["sd_up"],
                         "power_now": power_now, "seeds_per_arm": per_arm, "extra_a": extra_a, "extra_b": extra_b,
                         "extra_gpu_hours": cost, "note": note})
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def gpu_hours_per_cell(cells: pd.DataFrame) -> float:
    """What one more cell of these reserves: budget.gpus x budget.wall_time_s (their largest, if they differ)."""
    if "budget_gpus" not in cells or "budget_wall_time_s" not in cells:
        return 0.0
    hours = cells["budget_gpus"].fillna(0.0) * cells["budget_wall_time_s"].fillna(0.0) / 3600
    return float(hours.max()) if len(hours) else 0.0


# -- report.md's section -----------------------------------------------------------------------------------------

def markdown(seeds: pd.DataFrame, pairs: pd.DataFrame, targets: Targets, output_dir: str | None = None) -> list[str]:
    """report.md's "Seeds" section (and what `plan` prints above its command)."""
    from orchestrator.analysis.formats import MISSING, fmt
    from orchestrator.analysis.markdown import md_table

    def count(v) -> str:
        return MISSING if v is None or v != v else str(int(v))

    level, sure = f"{100 * targets.level:g}%", f"{100 * targets.assurance:g}%"
    lines = [f"## Seeds: the spread between them, and how many a claim needs (CI ±{targets.ci:g}, power "
             f"{100 * targets.power:g}%)", ""]
    if not len(seeds):
        return lines + ["No cells yet.", ""]
    rows = [list(r[:len(GROUP)]) + [r.runs, fmt(r.mean, signed=True), fmt(r.sd), fmt(r.sd_up),
                                    MISSING if r.half_width != r.half_width else f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]",
                                    count(r.seeds_for_ci), count(r.extra_for_ci), fmt(r.gpu_hours_per_cell, 2),
                                    fmt(r.extra_gpu_hours, 1), r.note]
            for r in seeds.itertuples(index=False)]
    extra = seeds["extra_for_ci"].dropna()
    lines += [md_table(GROUP + ["runs", "mean", "SD", f"SD ({sure} upper)", f"{level} CI (t)",
                                f"seeds for ±{targets.ci:g}", "more seeds", "GPU-h / cell", "more GPU-h", "note"],
                       rows), "",
              f"SD: the sample SD of the group's runs (infra errors excluded); its {sure} upper bound is the "
              f"chi-square one, s·sqrt((n-1)/chi2(1-{targets.assurance:g}, n-1)): two or three seeds estimate a "
              "spread poorly, "
              f"so the seeds are planned from the bound, and a plan reaches its target with probability at least "
              f"{sure}. CI (t): Student's interval, mean ± t(n-1)·s/sqrt(n). Seeds for ±{targets.ci:g}: the fewest n "
              f"with t(n-1)·SD_up/sqrt(n) <= {targets.ci:g}; more seeds: those beyond the runs finished and the cells "
              "still to run. GPU-hours from the cells' budgets (budget.gpus x budget.wall_time_s). In all: "
              f"{int(extra.sum())} more cells, {fmt(float(seeds['extra_gpu_hours'].dropna().sum()), 1)} GPU-hours.",
              ""]
    if len(pairs):
        said = f"a stated difference of {targets.delta:g}" if targets.delta is not None else "their observed difference"
        rows = [[r.task, r.driver, r.mode, f"{r.agent_a} vs {r.agent_b}", f"{r.runs_a} / {r.runs_b}",
                 fmt(r.difference, signed=True), fmt(r.delta), fmt(r.power_now, 2), count(r.seeds_per_arm),
                 f"{count(r.extra_a)} / {count(r.extra_b)}", fmt(r.extra_gpu_hours, 1), r.note]
                for r in pairs.itertuples(index=False)]
        lines += [md_table(PAIR_KEY + ["agents (a vs b)", "runs", "difference (b-a)", "delta", "power now",
                                       "seeds per arm", "more seeds (a / b)", "more GPU-h", "note"], rows), "",
                  f"Two agents on the same task, driver and mode, told apart at {said} by Student's two-sided "
                  f"two-sample t-test at alpha {targets.alpha:g}: power now at the runs they have (from the SDs seen), "
                  f"and the fewest seeds per arm whose power reaches {100 * targets.power:g}% from the upper bounds "
                  "(the noncentral t with 2n-2 degrees of freedom, searched up from n = (z(1-alpha/2) + z(power))^2 "
                  "(SD_a^2 + SD_b^2) / delta^2).", ""]
    lines += [f"`python -m orchestrator plan output_dir={output_dir or 'RUN'}` prints the command that adds these "
              "seeds to the groups that need them (docs/analysis.md).", ""]
    return lines
