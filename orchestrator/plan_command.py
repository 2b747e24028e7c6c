"""`python -m orchestrator plan output_dir=DIR [ci=5] [power=0.8] [delta=POINTS] [max_gpu_hours=N] [assurance=0.8]`:
how many more seeds each group of a sweep needs (analysis/seeds.py: its CI half-width, and telling each pair of agents
on a task and driver apart), what they cost in GPU-hours, and the one command that runs them.

The command is the sweep's own (its command line, from the manifest) with `++sweep.extra_seeds=[...]`: more seeds
for the groups that need them only (orchestrator/sweep.py). Running it resumes the sweep: the cells it has are kept,
the new ones run, and `report` then reads all seeds together. Groups are taken in order of the fewest GPU-hours that
reach their target; with max_gpu_hours, a group whose seeds would pass the cap is left out whole (a part of its seeds
would not reach its target) and named. Before printing the command, plan expands it as the sweep would (the dry run's
expansion) and checks that it keeps every cell the sweep has and adds exactly the planned ones.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from contracts.specs import ConfigError
from orchestrator import manifest
from orchestrator.analysis import seeds, tables
from orchestrator.sweep import CONF_DIR

GROUP = tables.GROUP
EXTRA = "sweep.extra_seeds"


@dataclass
class Extension:
    """What plan adds: new seeds by group (task, agent, driver, mode), their cells and GPU-hours, the groups that the
    cap left out, and the command (None: it could not be checked against the sweep; `problem` says why)."""
    new_seeds: dict[tuple, list[int]] = field(default_factory=dict)
    gpu_hours: float = 0.0
    left_out: list[tuple[tuple, int, float]] = field(default_factory=list)  # group, seeds wanted, their GPU-hours
    out_of_reach: list[tuple] = field(default_factory=list)
    command: str | None = None
    problem: str | None = None

    @property
    def cells(self) -> int:
        return sum(len(s) for s in self.new_seeds.values())


def wanted_seeds(seed_table: pd.DataFrame, pairs: pd.DataFrame) -> tuple[dict[tuple, int], list[tuple]]:
    """Per group, the more seeds its targets need: the CI's, and each pair's it is an arm of (the largest). Groups whose
    target is out of reach are listed apart (a pair out of reach leaves its arms' CI target standing)."""
    want, unreachable = {}, []
    for r in seed_table.itertuples(index=False):
        key = tuple(getattr(r, k) for k in GROUP)
        if r.extra_for_ci is None or r.extra_for_ci != r.extra_for_ci:
            unreachable.append(key)
        else:
            want[key] = int(r.extra_for_ci)
    for r in pairs.itertuples(index=False):
        if r.seeds_per_arm is None or r.seeds_per_arm != r.seeds_per_arm:
            continue
        for agent, extra in ((r.agent_a, r.extra_a), (r.agent_b, r.extra_b)):
            key = (r.task, agent, r.driver, r.mode)
            if key in want:
                want[key] = max(want[key], int(extra))
    return {k: v for k, v in want.items() if v > 0}, unreachable


def plan(output_dir: str | Path, targets: seeds.Targets, max_gpu_hours: float | None = None
         ) -> tuple[pd.DataFrame, pd.DataFrame, Extension]:
    """The seeds and pairs tables of the sweep in output_dir and the extension that reaches their targets."""
    output_dir = Path(output_dir)
    cells, _ = tables.load(output_dir, None, traces=False)
    seed_table = seeds.seeds_table(cells, targets)
    pairs = seeds.pairs_table(seed_table, targets)
    want, unreachable = wanted_seeds(seed_table, pairs)
    per_cell = {tuple(getattr(r, k) for k in GROUP): r.gpu_hours_per_cell for r in seed_table.itertuples(index=False)}
    ext = Extension(out_of_reach=unreachable)
    for key in sorted(want, key=lambda k: (want[k] * per_cell[k], want[k], tuple(map(str, k)))):
        hours = want[key] * per_cell[key]
        if max_gpu_hours is not None and ext.gpu_hours + hours > max_gpu_hours + 1e-9:
            ext.left_out.append((key, want[key], hours))
            continue
        used = set(cells[(cells[GROUP] == pd.Series(key, index=GROUP)).all(axis=1)]["seed"].astype(int))
        start = max(used, default=-1) + 1
        ext.new_seeds[key] = list(range(start, start + want[key]))
        ext.gpu_hours += hours
    if ext.new_seeds:
        ext.command, ext.problem = checked_command(output_dir, cells, ext.new_seeds)
    return seed_table, pairs, ext


# -- the command ---------------------------------------------------------------------------------------------------

def hydra_value(value) -> str:
    """A value in Hydra's override grammar: a plain name bare, anything else quoted."""
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = str(value)
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", text) and text.lower() not in ("true", "false", "null", "nan",
                                                                                        "inf")
    return text if plain else json.dumps(text)


def sweep_command(output_dir: Path) -> tuple[list[str], list[dict]]:
    """The last run's command-line overrides (its manifest), without output_dir and extra_seeds, and the extra seeds
    it already had. No manifest or overrides on record: `sweep=NAME` (checked by expansion before it is printed)."""
    written = manifest.manifests(output_dir)
    if not written:
        raise ConfigError(f"{output_dir} has no manifest.json: plan repeats the sweep's own command, which a sweep "
                          "writes there before its first cell; run the sweep with this a2rl first")
    last = json.loads(written[-1].read_text())
    overrides = last.get("overrides")
    if overrides is None:
        overrides = [f"sweep={last['sweep']}"]
    kept = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in ("output_dir", EXTRA)]
    had = ((last.get("config") or {}).get("sweep") or {}).get("extra_seeds") or []
    return kept, list(had)


def merged_extra(had: list[dict], new_seeds: dict[tuple, list[int]]) -> list[dict]:
    """The extra seeds the sweep had, with the new ones added to their groups."""
    by_group: dict[tuple, list[int]] = {}
    for entry in had:
        key = (str(entry["task"]), str(entry["agent"]), str(entry.get("driver") or "none"),
               str(entry.get("mode") or "free"))
        by_group.setdefault(key, []).extend(entry["seeds"])
    for key, new in new_seeds.items():
        by_group.setdefault(key, []).extend(new)
    return [{"task": t, "agent": a, "driver": d, "mode": m, "seeds": s} for (t, a, d, m), s in sorted(by_group.items())]


def checked_command(output_dir: Path, cells: pd.DataFrame, new_seeds: dict[tuple, list[int]]
                    ) -> tuple[str | None, str | None]:
    """The command that adds new_seeds to the sweep, once its expansion keeps every cell the sweep has and adds just
    these; else (None, why)."""
    overrides, had = sweep_command(output_dir)
    extra = f"++{EXTRA}=" + hydra_value(merged_extra(had, new_seeds))
    args = [*overrides, f"output_dir={output_dir}", extra]
    try:
        expanded = expand_overrides(args)
    except ConfigError as e:
        return None, f"the sweep's command with the new seeds does not expand: {e}"
    have = set(cells["cell_id"])
    lost = have - set(expanded)
    added = {cid: spec for cid, spec in expanded.items() if cid not in have}
    planned = {(*key, seed) for key, ss in new_seeds.items() for seed in ss}
    got = {(s.task_name, s.agent.name, s.driver.name, s.mode_name, s.seed) for s in added.values()}
    if lost:
        return None, (f"`{' '.join(overrides)}` does not make {len(lost)} of this sweep's {len(have)} cells (its "
                      "command line is not on record, or the config changed since): add "
                      f"{shlex.quote(extra)} to the command the sweep was run with")
    if got != planned:
        return None, f"the command would add {sorted(got - planned)[:5]} beyond the plan and miss " \
                     f"{sorted(planned - got)[:5]}; add {shlex.quote(extra)} to the sweep's command by hand"
    return "python -m orchestrator " + " ".join(shlex.quote(a) for a in args), None


def expand_overrides(overrides: list[str]) -> dict:
    """The cells a sweep command would have (the dry run's expansion, in this process): cell id -> spec."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from contracts import registry
    from orchestrator.sweep import expand

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
    except HydraException as e:
        raise ConfigError(str(e).splitlines()[0]) from None
    registry.search(*(cfg.get("imports") or []))  # the user's own task classes, as the sweep imports them
    return {c.cell_id: c for c in expand(cfg)}


# -- the subcommand --------------------------------------------------------------------------------------------------

OPTIONS = ("output_dir", "ci", "power", "delta", "assurance", "max_gpu_hours")


def parse(argv: list[str]) -> tuple[Path, seeds.Targets, float | None]:
    given: dict = {}
    output_dir, cap = None, None
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in OPTIONS:
            raise ConfigError(f"plan takes {', '.join(k + '=...' for k in OPTIONS)}; got {arg!r}")
        if key == "output_dir":
            output_dir = Path(value).expanduser()
            continue
        try:
            number = None if value in ("null", "") else float(value)
        except ValueError:
            raise ConfigError(f"{key}={value!r} must be a number") from None
        if key == "max_gpu_hours":
            if number is not None and number < 0:
                raise ConfigError(f"max_gpu_hours={value} must be >= 0 (GPU-hours the new cells may reserve)")
            cap = number
        else:
            given[key] = number
    if output_dir is None:
        raise ConfigError("plan needs output_dir=DIR: the folder a sweep wrote (it holds ledger.sqlite)")
    tables.ledger_path(output_dir)  # no ledger: one line that says what output_dir must be
    return output_dir, seeds.Targets.configured(**given), cap


def render(output_dir: Path, seed_table: pd.DataFrame, pairs: pd.DataFrame, ext: Extension,
           targets: seeds.Targets, cap: float | None) -> str:
    lines = seeds.markdown(seed_table, pairs, targets, str(output_dir))[:-2]  # (its last line points here)
    lines += ["## Plan", ""]
    for key, n, hours in ext.left_out:
        lines.append(f"left out by max_gpu_hours={cap:g}: {'/'.join(key)} wants {n} more seeds ({hours:.1f} GPU-h)")
    for key in ext.out_of_reach:
        lines.append(f"out of reach: {'/'.join(key)} (its spread is unknown or the target needs over "
                     f"{seeds.MAX_SEEDS} seeds)")
    if not ext.new_seeds:
        lines += ["", f"No group's seeds fit within max_gpu_hours={cap:g}." if ext.left_out else
                  "No group needs more seeds for these targets."]
        return "\n".join(lines) + "\n"
    for key, new in ext.new_seeds.items():
        lines.append(f"{'/'.join(key)}: seeds {new}")
    lines += ["", f"{ext.cells} new cells in {len(ext.new_seeds)} groups, {ext.gpu_hours:.1f} GPU-hours (budgets).", ""]
    if ext.command:
        lines += ["Run (resumes the sweep: only the new cells run; `report` then reads every seed):", "",
                  ext.command]
    else:
        lines += [f"No command printed: {ext.problem}"]
    return "\n".join(lines) + "\n"


def plan_main(argv: list[str] | None = None) -> None:
    try:
        output_dir, targets, cap = parse(sys.argv[1:] if argv is None else argv)
        seed_table, pairs, ext = plan(output_dir, targets, cap)
    except (ConfigError, FileNotFoundError) as e:
        print(f"a2rl: {e}", file=sys.stderr)
        sys.exit(2)
    print(render(output_dir, seed_table, pairs, ext, targets, cap), end="")
