"""The table printed at the end of a sweep: per task x agent x driver, the improvement over the base model: on the
held-out final split first (where the task has one), then the best feedback score (the original benchmark's), and what
a cell cost: driver tokens and dollars, judge dollars, GPU-hours, and dollars per point gained (analysis/cost.py)."""
from __future__ import annotations

import sys

from orchestrator.analysis.cost import ledger_costs
from orchestrator.analysis.stats import mean_se
from orchestrator.analysis.tables import DOUBTFUL_FLAGS, mode_of
from orchestrator.ledger import Ledger


# Submission flags the table counts: a copy of the base model; a score the protocol gives though the reply games
# the task's tests (HumanEval under the paper's protocol); a score from a stand-in for a piece of the original that
# is not here (e.g. spaCy's en_core_web_lg), so only approximately the original's; a known public checkpoint submitted
# as the agent's own (evaluators/identity.py); judged answers that barely depend on the instruction, or that address
# the judge (contracts/screening.py: scored under paper, withheld under a2rl).
COUNTED_FLAGS = ("copy_of_base", "gamed_tests", "approximate", "known_checkpoint", "null_model", "judge_injection")


def summary_rows(ledger: Ledger, cell_ids: list[str]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for row in ledger.cells(cell_ids).values():
        mode = mode_of(row.get("spec") or {})  # a mode other than free is shown with its task: task/mode
        task = row["task"] if mode == "free" else f"{row['task']}/{mode}"
        groups.setdefault((task, row["agent"], row["driver"]), []).append(row)
    flagged: dict[tuple[str, str], int] = {}  # (cell, flag) -> submissions
    doubtful: dict[str, set[str]] = {}  # cell -> its DOUBTFUL_FLAGS
    wanted = set(cell_ids)
    for e in ledger.events(kind="submission"):
        if e["cell_id"] in wanted:
            flags = set(e["payload"].get("flags") or [])
            for flag in flags & set(COUNTED_FLAGS):
                flagged[e["cell_id"], flag] = flagged.get((e["cell_id"], flag), 0) + 1
            doubtful.setdefault(e["cell_id"], set()).update(flags & set(DOUBTFUL_FLAGS))
    attempts = {cell_id: row["attempts"] for cell_id, row in ledger.cells(cell_ids).items()}
    for e in ledger.events(kind="outcome"):  # the held-out record's flags, of the cell's last attempt
        if e["cell_id"] in wanted and e["attempt"] == attempts.get(e["cell_id"]):
            final_flags = set((e["payload"].get("final") or {}).get("flags") or [])
            doubtful.setdefault(e["cell_id"], set()).update(final_flags & set(DOUBTFUL_FLAGS))
    costs = ledger_costs(ledger, cell_ids)
    out = []
    for (task, agent, driver), rows in sorted(groups.items()):
        scored = [r for r in rows if r["improvement"] is not None]
        mean, se = mean_se([r["improvement"] for r in scored]) if scored else (None, None)
        statuses: dict[str, int] = {}
        for r in rows:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        baselines = [r["baseline_score"] for r in rows if r["baseline_score"] is not None]
        bests = [r["best_score"] for r in scored]
        flags = []
        for flag in COUNTED_FLAGS:
            n = sum(flagged.get((r["cell_id"], flag), 0) for r in rows)
            if n:
                flags.append(f"{flag} x{n}")
        n_flagged = sum(1 for r in rows if r.get("contaminated"))
        if n_flagged:
            flags.append(f"contaminated x{n_flagged}")
        n_estimated = sum(costs[r["cell_id"]]["driver_estimated_calls"] for r in rows)
        if n_estimated:  # their tokens and cost are partly the proxy's count, not the provider's
            flags.append(f"driver tokens estimated x{n_estimated} calls")
        flags += capped_flags([costs[r["cell_id"]] for r in rows])
        n_retention = sum(1 for r in rows if "retention_drop" in doubtful.get(r["cell_id"], ()))
        if n_retention:
            flags.append(f"retention_drop x{n_retention}")
        if len(scored) < len(rows):
            flags.append(f"{len(rows) - len(scored)} without a valid submission")
        spent = [costs[r["cell_id"]] for r in rows]
        gained = sum(r["improvement"] or 0.0 for r in rows)
        usd, gpu_h = sum(c["cost_usd"] for c in spent), sum(c["gpu_hours"] for c in spent)
        held = [r for r in rows if r.get("final_improvement") is not None]
        held_mean, held_se = mean_se([r["final_improvement"] for r in held]) if held else (None, None)
        gap = mean_se([(r["improvement"] or 0.0) - r["final_improvement"] for r in held])[0] if held else None
        clean = [r for r in rows if not doubtful.get(r["cell_id"])]
        if len(clean) < len(rows):  # the results without the doubtful cells, beside those with them
            flags.append(f"without the {len(rows) - len(clean)} flagged: " + _results(clean))
        out.append({"task": task, "agent": agent, "driver": driver, "cells": len(rows), "statuses": statuses,
                    "held_out_mean": held_mean, "held_out_se": held_se, "n_held_out": len(held), "gap_mean": gap,
                    "baseline": baselines[0] if baselines else None,
                    "best_mean": sum(bests) / len(bests) if bests else None,
                    "improvement_mean": mean, "improvement_se": se, "n_scored": len(scored), "flags": flags,
                    # cost per cell (means), and per point of improvement (None: nothing gained)
                    "driver_tokens": sum(c["driver_tokens"] for c in spent) / len(rows),
                    "driver_cost_usd": sum(c["driver_cost_usd"] for c in spent) / len(rows),
                    "judge_cost_usd": sum(c["judge_cost_usd"] for c in spent) / len(rows),
                    "gpu_hours": gpu_h / len(rows), "usd_per_point": usd / gained if gained > 0 else None,
                    "gpu_hours_per_point": gpu_h / gained if gained > 0 else None})
    return out


def capped_flags(costs: list[dict]) -> list[str]:
    """The cells' driver calls whose output cap the proxy wrote in (the CLI asked for none or more), at what, and the
    runs whose last reply stopped at its output limit: an agent that ended on a cut reply (Codex exits 0 then)."""
    flags = []
    n_capped = sum(c["driver_capped_calls"] for c in costs)
    if n_capped:
        caps = sorted({int(c["driver_cap"]) for c in costs if c["driver_capped_calls"]})
        flags.append(f"driver calls capped x{n_capped} at {'/'.join(map(str, caps))} output tokens")
    n_cut = sum(bool(c["driver_last_at_limit"]) for c in costs)
    if n_cut:
        flags.append(f"last reply cut at the output limit x{n_cut}")
    return flags


def _results(rows: list[dict]) -> str:
    """Held-out and best-feedback improvements of some cells, mean ± SEM."""
    parts = []
    for label, key in (("held-out", "final_improvement"), ("improvement", "improvement")):
        values = [r[key] for r in rows if r[key] is not None]
        if values:
            mean, se = mean_se(values)
            parts.append(f"{label} {_f(mean, True)} ± {_f(se)} (n={len(values)})")
    return ", ".join(parts) or "no scored cell"


def _f(x, signed=False, digits=2) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def print_summary(ledger: Ledger, cell_ids: list[str], out=sys.stdout) -> list[dict]:
    rows = summary_rows(ledger, cell_ids)
    # name columns grow with long names, so they never run together
    w = {k: max([least, *(len(r[k]) + 2 for r in rows)]) for k, least in (("task", 16), ("agent", 12), ("driver", 12))}
    header = (f"{'task':<{w['task']}}{'agent':<{w['agent']}}{'driver':<{w['driver']}}{'cells':>6}  {'baseline':>8}  "
              f"{'held-out (mean ± SEM)':<26}{'best':>7}  {'improvement (mean ± SEM)':<26}{'gap':>7}  "
              f"{'tokens':>9}  {'driver $':>9}  {'judge $':>8}  {'GPU-h':>6}  {'$/point':>8}  flags")
    print("\n" + header, file=out)
    print("-" * len(header), file=out)
    for r in rows:
        imp = "-" if r["improvement_mean"] is None else \
            f"{_f(r['improvement_mean'], True)} ± {_f(r['improvement_se'])} (n={r['n_scored']})"
        held = "-" if r["held_out_mean"] is None else \
            f"{_f(r['held_out_mean'], True)} ± {_f(r['held_out_se'])} (n={r['n_held_out']})"
        status = ", ".join(f"{n} {s}" for s, n in sorted(r["statuses"].items()))
        flags = "; ".join(r["flags"] + [status])
        print(f"{r['task']:<{w['task']}}{r['agent']:<{w['agent']}}{r['driver']:<{w['driver']}}{r['cells']:>6}  "
              f"{_f(r['baseline']):>8}  {held:<26}{_f(r['best_mean']):>7}  {imp:<26}{_f(r['gap_mean'], True):>7}  "
              f"{r['driver_tokens']:>9.0f}  {r['driver_cost_usd']:>9.4f}  {r['judge_cost_usd']:>8.4f}  "
              f"{r['gpu_hours']:>6.3f}  {_f(r['usd_per_point'], digits=4):>8}  {flags}", file=out)
    return rows


def print_a2rl_bugs(ledger: Ledger, cell_ids: list[str], out=sys.stdout) -> None:
    """After the table: the cells that ended on a bug in a2rl itself, and where each traceback is."""
    bugs = a2rl_bugs(ledger, cell_ids)
    if bugs:
        print(f"\n{len(bugs)} cell(s) ended on a bug in a2rl itself (infra_error, not retried; please report it with "
              "the traceback):", file=out)
        for cell_id, where in bugs:
            print(f"  {cell_id}: traceback in {where}", file=out)


def a2rl_bugs(ledger: Ledger, cell_ids: list[str]) -> list[tuple[str, str]]:
    """(cell id, its outcome file) of each cell whose last attempt ended on an exception in a2rl's own code."""
    rows = ledger.cells(cell_ids)
    out = []
    for e in ledger.events(kind="outcome"):
        row = rows.get(e["cell_id"])
        if row and row["status"] == "infra_error" and e["attempt"] == row["attempts"] and e["payload"].get("a2rl_bug"):
            out.append((e["cell_id"], str(ledger.path.parent / "cells" / e["cell_id"] / f"attempt-{e['attempt']}" /
                                          "outcome.json")))
    return sorted(set(out))

