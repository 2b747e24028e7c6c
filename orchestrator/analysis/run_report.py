"""One cell's run report: what the agent did, how its score moved, why it ended; markdown and JSON.

Everything is derived from the records (the cell's ledger row, its events, its code snapshots and agent
output), so the same records always give the same report; no LLM is involved. Written beside the ledger as
cells/<cell_id>/report.md and report.json.
"""
from __future__ import annotations

import json
from pathlib import Path

from contracts.code_snapshots import diff_summary, search
from contracts.screening import FLAGS as SCREEN_FLAGS
from contracts.screening import describe as describe_screen
from orchestrator.analysis import tables
from orchestrator.analysis.cost import cell_cost, metered_totals
from orchestrator.analysis.formats import fmt
from orchestrator.analysis.markdown import md_table

# Below this an improvement is float noise, not progress.
EPS = 1e-12
STDERR_TAIL_LINES = 20

FAILURE_CLASSES = {
    "in_progress": "the cell has not finished",
    "infra_error": "the system failed (retries exhausted); not the agent's fault",
    "timeout_no_submission": "a budget limit ended the run before any submission",
    "code_error": "no valid submission: the agent crashed, or every submission failed to load or evaluate",
    "no_submission": "the agent exited on its own without submitting",
    "copy_model_fallback": "the best submission is a copy of the base model",
    "known_checkpoint": "the best submission is a known public checkpoint (task.known_models), not trained from the "
                        "base",
    "training_diverged": "every valid submission scored below the baseline",
    "budget_exhausted": "a budget limit ended the run before any improvement",
    "no_improvement": "valid submissions, none better than the baseline",
}


def final_attempt(cell: dict, events: list[dict]) -> int | None:
    attempts = [e["attempt"] for e in events]
    if cell.get("attempts") and cell["attempts"] in attempts:
        return int(cell["attempts"])
    return max(attempts) if attempts else (cell.get("attempts") or None)


def cell_report(cell: dict, events: list[dict], cell_dir: Path | None = None) -> dict:
    """The report of one cell. cell: its ledger row; events: its ledger events (payload as dicts, any
    attempt; only the final attempt counts); cell_dir: cells/<cell_id>/ for code snapshots and agent output."""
    attempt = final_attempt(cell, events)
    events = sorted((e for e in events if e["attempt"] == attempt), key=lambda e: e["t"])
    payloads = {kind: [e for e in events if e["kind"] == kind] for kind in ("submission", "driver_usage", "outcome",
                                                                             "agent_exit", "reprompt")}
    spec = json.loads(cell["spec"]) if isinstance(cell.get("spec"), str) else (cell.get("spec") or {})
    budget = spec.get("budget", {})

    trajectory, best, best_sub, first_valid, first_improvement, prev_score, rises, steps = [], None, None, None, None, \
        None, 0, 0
    for e in payloads["submission"]:
        p = e["payload"]
        valid = p.get("score") is not None and p.get("error") is None
        improvement = p.get("improvement")
        if improvement is None and valid and p.get("baseline_score") is not None:
            improvement = p["score"] - p["baseline_score"]
        if valid:
            first_valid = first_valid or {"index": p.get("submission_id"), "t": e["t"]}
        if valid and improvement is not None:
            if best is None or improvement > best + EPS:
                best, best_sub = improvement, {"index": p.get("submission_id"), "t": e["t"],
                                               "code_commit": p.get("code_commit"),
                                               "flags": list(p.get("flags") or [])}
            if improvement > EPS and first_improvement is None:
                first_improvement = {"index": p.get("submission_id"), "t": e["t"]}
            if prev_score is not None:
                steps += 1
                rises += p["score"] >= prev_score - EPS
            prev_score = p["score"]
        trajectory.append({"index": p.get("submission_id"), "t": e["t"], "score": p.get("score"),
                           "improvement": improvement, "best_so_far": best, "flags": list(p.get("flags") or []),
                           "error": p.get("error"), "code_commit": p.get("code_commit"), "valid": valid})
        screen = (p.get("metrics") or {}).get("screen")
        if screen and set(p.get("flags") or ()) & set(SCREEN_FLAGS):  # the judged answers' screen: its evidence
            trajectory[-1]["screen"] = screen

    outcome = payloads["outcome"][-1]["payload"] if payloads["outcome"] else {}
    exit_code = outcome.get("exit_code")
    if exit_code is None and payloads["agent_exit"]:
        exit_code = payloads["agent_exit"][-1]["payload"].get("exit_code")
    elapsed = _elapsed(cell, outcome, events)
    n_subs, n_valid = len(trajectory), sum(s["valid"] for s in trajectory)
    used = metered_totals(u["payload"] for u in payloads["driver_usage"])
    tokens, cost = used["input_tokens"] + used["output_tokens"], used["cost_usd"]
    metered = bool(payloads["driver_usage"])
    cut = metered_totals(u["payload"] for u in payloads["driver_usage"] if u["payload"].get("estimated"))
    best_is_copy = best_sub is not None and "copy_of_base" in best_sub["flags"]
    best_is_known = best_sub is not None and "known_checkpoint" in best_sub["flags"]
    known = [{"index": e["payload"].get("submission_id"), **e["payload"]["known_checkpoint"]}
             for e in payloads["submission"] if e["payload"].get("known_checkpoint")]

    report = {
        "cell_id": cell["cell_id"],
        "sweep": cell.get("sweep"), "task": cell.get("task"), "agent": cell.get("agent"),
        "driver": cell.get("driver"), "seed": cell.get("seed"), "attempt": attempt,
        "status": cell.get("status"), "limit_hit": cell.get("limit_hit") or outcome.get("limit_hit"),
        "exit_code": exit_code, "error": cell.get("error") or outcome.get("error"),
        "baseline_score": _first_not_none(cell.get("baseline_score"), outcome.get("baseline_score"),
                                          *[e["payload"].get("baseline_score") for e in payloads["submission"]]),
        "best_score": _first_not_none(cell.get("best_score"), outcome.get("best_score")),
        "best_improvement": best,
        "n_submissions": n_subs, "n_valid": n_valid,
        "valid_submission_rate": n_valid / n_subs if n_subs else None,
        "first_valid_submission": first_valid,
        "time_to_first_improvement_s": first_improvement["t"] if first_improvement else None,
        "first_improvement_index": first_improvement["index"] if first_improvement else None,
        "best_submission": best_sub,
        "time_to_best_s": best_sub["t"] if best_sub else None,
        # Share of consecutive valid submissions that did not score lower than the one before.
        "monotonic_ratio": rises / steps if steps else None,
        "copy_of_base_count": sum("copy_of_base" in s["flags"] for s in trajectory),
        "cached_count": sum("cached" in s["flags"] for s in trajectory),
        # submissions that are a known public checkpoint (which, and its distances to it and to the base)
        "known_checkpoint_count": len(known), "known_checkpoints": known,
        # judged submissions flagged null_model / judge_injection, with what the screen found (contracts/screening)
        "screened": [{"index": s["index"], "flags": [f for f in s["flags"] if f in SCREEN_FLAGS],
                      "counted": s["screen"].get("counted", True), "score": s["screen"].get("score"),
                      "evidence": describe_screen(s["screen"])} for s in trajectory if "screen" in s],
        "elapsed_s": elapsed,
        "gap_after_last_submission_s": (elapsed - trajectory[-1]["t"]) if elapsed is not None and trajectory
        else elapsed,
        "tokens": tokens if metered else None, "cost_usd": cost if metered else None,
        # of those, counted by the proxy (streams cut before the server's usage arrived): agents.proxy.estimate
        "estimated_calls": cut["calls"], "estimated_tokens": cut["input_tokens"] + cut["output_tokens"],
        # calls whose output cap the proxy wrote in, the cap, and whether the run's last reply stopped at its limit
        "capped_calls": used["capped_calls"], "cap": used["cap"], "last_reply_at_limit": used["last_at_limit"],
        "env_usage": outcome.get("env_usage"),  # level 3: resets, steps and wins through the rollout service
        # the agent's time working vs waiting on its driver's rate limits (budget.working_time counts the first)
        "working_s": outcome.get("working_s"), "waiting_s": outcome.get("waiting_s"),
        "final": outcome.get("final"),  # the held-out score of its final submission
        "contaminated": outcome.get("contaminated"), "contamination": outcome.get("contamination"),
        "judge_agreement": outcome.get("judge_agreement"),  # an LLM judge's repeat agreement on a sample
        # each time the agent stopped early and was started again (budget.max_reprompts): when, with what left
        "reprompts": [{"t": e["t"], "time_left_s": e["payload"].get("time_left_s"),
                       "best_score": e["payload"].get("best_score")} for e in payloads["reprompt"]],
        "budget": budget,
        "budget_used": _budget_used(budget, elapsed, n_subs, tokens if metered else None, cost if metered else None),
        "trajectory": trajectory,
    }
    # AutoLab's anchored score: 0 at the baseline, 1 at the task's reference score (None: the task has none)
    reference = (spec.get("task") or {}).get("reference_score")
    span = None if reference is None or report["baseline_score"] is None else reference - report["baseline_score"]
    report["reference_score"] = reference
    report["anchored"] = (best or 0.0) / span if span and span > 0 else None
    report["cost"] = cell_cost(cell_dir / f"attempt-{attempt}" if cell_dir is not None and attempt else None,
                               [u["payload"] for u in payloads["driver_usage"]], budget.get("gpus"), elapsed)
    report["outcome_class"] = classify(report, best_is_copy, best_is_known)
    report["failure_class"] = None if report["outcome_class"] == "improved" else report["outcome_class"]
    report["code_diff"] = _code_diff(cell_dir, trajectory, best_sub)
    report["mode"] = tables.mode_of(spec)
    report["mode_violations"] = mode_violations(cell_dir, spec.get("mode"), trajectory, best_sub)
    report["stderr_tail"] = (tail(cell_dir / f"attempt-{attempt}" / "agent.stderr")
                             if cell_dir is not None and report["failure_class"] else None)
    return report


def classify(report: dict, best_is_copy: bool = False, best_is_known: bool = False) -> str:
    """"improved", or the main reason the cell did not improve (FAILURE_CLASSES), first match wins."""
    status, n_subs, best = report["status"], report["n_submissions"], report["best_improvement"]
    limit_ended = bool(report["limit_hit"]) or status == "budget_exhausted"
    crashed = status == "agent_error" or (report["exit_code"] not in (None, 0) and not limit_ended)
    if status in tables.MISSING_STATUSES:
        return "in_progress"
    if status == "infra_error":
        return "infra_error"
    if best_is_known:  # whatever it scored, it is not the agent's training
        return "known_checkpoint"
    if best is not None and best > EPS and not best_is_copy:
        return "improved"
    if n_subs == 0:
        return "timeout_no_submission" if limit_ended else ("code_error" if crashed else "no_submission")
    if report["n_valid"] == 0:
        return "code_error"
    if best_is_copy:
        return "copy_model_fallback"
    if best < -EPS:
        return "training_diverged"
    return "budget_exhausted" if limit_ended else "no_improvement"


def _elapsed(cell: dict, outcome: dict, events: list[dict]) -> float | None:
    if outcome.get("elapsed_s") is not None:
        return float(outcome["elapsed_s"])
    if cell.get("started_at") is not None and cell.get("ended_at") is not None:
        return float(cell["ended_at"] - cell["started_at"])
    return max((e["t"] for e in events), default=None)


def _budget_used(budget: dict, elapsed, n_subs, tokens, cost) -> dict:
    def share(used, limit):
        return used / limit if used is not None and limit else None
    return {"wall_time": share(elapsed, budget.get("wall_time_s")),
            "submissions": share(n_subs, budget.get("max_submissions")),
            "tokens": share(tokens, budget.get("max_tokens")),
            "cost": share(cost, budget.get("max_cost_usd"))}


def _first_not_none(*values):
    return next((v for v in values if v is not None), None)


def _code_diff(cell_dir: Path | None, trajectory: list[dict], best_sub: dict | None) -> dict | None:
    """The code change from the first submission to the best one (git diff --stat of their snapshots)."""
    if cell_dir is None or best_sub is None or not trajectory:
        return None
    repo, first, to = cell_dir / "code.git", trajectory[0]["code_commit"], best_sub["code_commit"]
    if not repo.exists() or not first or not to:
        return None
    try:
        diff = diff_summary(repo, first, to)
    except RuntimeError as e:  # a snapshot that never made it into the repository
        return {"error": str(e).splitlines()[0]}
    diff["from_index"], diff["to_index"] = trajectory[0]["index"], best_sub["index"]
    return diff


def mode_violations(cell_dir: Path | None, mode: dict | None, trajectory: list[dict],
                    best_sub: dict | None) -> list[dict] | None:
    """The training mode's rules checked on the code snapshots (None: nothing to check). A `forbidden` pattern
    found in any submission's snapshot breaks the rule; a `required` one must be found in the snapshot of the best
    submission (or of the last, when none scored)."""
    if not mode or not (mode.get("forbidden") or mode.get("required")) or cell_dir is None:
        return None
    repo = cell_dir / "code.git"
    commits = list(dict.fromkeys(s["code_commit"] for s in trajectory if s["code_commit"]))
    if not repo.exists() or not commits:
        return None
    found = []
    try:
        for label, pattern in (mode.get("forbidden") or {}).items():
            for sha in commits:
                hits = search(repo, sha, pattern, max_hits=3)
                if hits:
                    found.append({"rule": f"forbidden: {label}", "commit": sha, "evidence": hits})
                    break
        judged = (best_sub or {}).get("code_commit") or commits[-1]
        for label, pattern in (mode.get("required") or {}).items():
            if not search(repo, judged, pattern, max_hits=1):
                found.append({"rule": f"required: {label}", "commit": judged, "evidence": []})
    except RuntimeError as e:  # a snapshot that never made it into the repository
        return [{"rule": "unchecked", "commit": None, "evidence": [str(e).splitlines()[0]]}]
    return found


def tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str | None:
    """The last lines of an agent's output file (None: no such file or nothing in it)."""
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 64 * 1024))  # agent output can be huge; the end says why it ended
        text = f.read().decode(errors="replace").splitlines()
    return "\n".join(text[-lines:]) or None


# -- rendering ---------------------------------------------------------------------------------------------------

def render_markdown(r: dict) -> str:
    used = r["budget_used"]
    first = r["first_valid_submission"]
    lines = [
        f"# Cell {r['cell_id']}: {r['agent']} / {r['driver']} on {r['task']}, seed {r['seed']}",
        "",
        f"**Outcome: {r['outcome_class']}**"
        + (f" ({FAILURE_CLASSES[r['failure_class']]})" if r["failure_class"] else "")
        + f". Status {r['status']}, attempt {r['attempt']}, limit hit: {r['limit_hit'] or 'none'}, "
          f"exit code: {fmt(r['exit_code'])}.",
        "",
        f"- Baseline {fmt(r['baseline_score'])}, best {fmt(r['best_score'])}, "
        f"best improvement {fmt(r['best_improvement'], signed=True)}",
        f"- Submissions: {r['n_submissions']} ({r['n_valid']} valid, rate {fmt(r['valid_submission_rate'])}), "
        f"copies of the base: {r['copy_of_base_count']}, cached: {r['cached_count']}",
        "- First valid submission: " + (f"#{first['index']} at {_secs(first['t'])}" if first else "none"),
        f"- Time to first improvement: {_secs(r['time_to_first_improvement_s'])}; time to best: "
        f"{_secs(r['time_to_best_s'])}; monotonic ratio: {fmt(r['monotonic_ratio'])}",
        f"- Elapsed {_secs(r['elapsed_s'])}; idle after the last submission: "
        f"{_secs(r['gap_after_last_submission_s'])}"
        + (f"; working {_secs(r['working_s'])}, waiting on rate limits {_secs(r['waiting_s'])}"
           if r.get("working_s") is not None else ""),
        "- Budget used: " + ", ".join(f"{k} {fmt(v * 100, 0)}%" for k, v in used.items() if v is not None)
        + (f"; tokens {r['tokens']}, cost ${r['cost_usd']:.4f}" if r["tokens"] is not None else "")
        + (f" ({r['estimated_tokens']} tokens of {r['estimated_calls']} cut call(s) estimated by the proxy)"
           if r.get("estimated_calls") else "")
        + (f"; {r['capped_calls']} call(s) capped by the proxy at {r['cap']} output tokens" if r.get("capped_calls")
           else "")
        + ("; **the last reply was cut at its output limit**" if r.get("last_reply_at_limit") else ""),
        f"- Cost: driver ${r['cost']['driver_cost_usd']:.4f} ({r['cost']['driver_tokens']} tokens), judge "
        f"${r['cost']['judge_cost_usd']:.4f}, {r['cost']['gpu_hours']:.3f} GPU-hours reserved"
        + (f"; anchored score {fmt(r['anchored'], signed=True)} (reference {fmt(r['reference_score'])})"
           if r.get("reference_score") is not None else ""),
    ]
    if r.get("final"):
        final = r["final"]
        which = "none scored: the base model" if final["submission_id"] is None else \
            f"#{final['submission_id']} ({'marked final' if final['marked'] else 'the best'})"
        error = f"; error: {final['error']}" if final["error"] else ""
        lines.append(f"- Held-out final score: {fmt(final['score'])} (improvement "
                     f"{fmt(final['improvement'], signed=True)}, n={final['n']}) of submission {which}{error}")
        kept = final.get("retention")
        if kept:
            lines.append(f"- Retention on {kept['task']} (n={kept['n']}): {fmt(kept['score'])} against the base's "
                         f"{fmt(kept['baseline_score'])}, a drop of {fmt(kept['drop'])} points (allowed "
                         f"{fmt(kept['max_drop'])})" + (": **retention_drop**" if kept["drop"] > kept["max_drop"]
                                                        else ""))
    for k in r["known_checkpoints"]:
        base = "another shape" if k["base_distance"] is None else f"{k['base_distance']:.3g}"
        lines.append(f"- **Known checkpoint**: submission #{k['index']} is {k['model']} (relative distance "
                     f"{k['distance']:.3g} to it, {base} to the base)")
    for s in r.get("screened") or []:
        lines.append(f"- **Screened answers**: submission #{s['index']} flagged {', '.join(s['flags'])}, its judged "
                     f"score {fmt(s['score'])} " + ("counted" if s["counted"] else "withheld") + f": {s['evidence']}")
    if r.get("contaminated"):
        found = r.get("contamination") or []
        lines.append(f"- **Contamination**: hidden eval items found in what the agent wrote ({len(found)} at the end"
                     + (f", e.g. {found[0]['item']} in {found[0]['file']}" if found else "") + ")")
    if r.get("env_usage"):
        env = r["env_usage"]
        lines.append(f"- Environment (rollout service): {env['resets']} episodes started, {env['steps']} steps, "
                     f"{env['wins']} won")
    if r.get("reprompts"):
        lines.append(f"- Re-prompted {len(r['reprompts'])} times (stopped early and started again), at "
                     + ", ".join(f"{_secs(x['t'])} ({_secs(x['time_left_s'])} left, best {fmt(x['best_score'])})"
                                 for x in r["reprompts"]))
    if r["error"]:
        lines.append(f"- Error: `{_one_line(r['error'])}`")
    lines += ["", "## Score trajectory", ""]
    if r["trajectory"]:
        lines.append(md_table(
            ["#", "t (s)", "score", "improvement", "best so far", "flags", "commit", "error"],
            [[s["index"], fmt(s["t"], 1), fmt(s["score"]), fmt(s["improvement"], signed=True),
              fmt(s["best_so_far"], signed=True), ", ".join(s["flags"]), (s["code_commit"] or "")[:10],
              _one_line(s["error"] or "")[:80]] for s in r["trajectory"]]))
    else:
        lines.append("No submissions.")
    diff = r["code_diff"]
    lines += ["", "## Code: first submission to best", ""]
    if diff is None:
        lines.append("No code snapshots to compare.")
    elif "error" in diff:
        lines.append(f"Snapshots could not be compared: {diff['error']}")
    else:
        lines.append(f"Submission #{diff['from_index']} to #{diff['to_index']}: {diff['files_changed']} files "
                     f"changed, +{diff['insertions']} -{diff['deletions']}.")
        if diff["stat"]:
            lines += ["", "```", diff["stat"], "```"]
    if r.get("mode_violations") is not None:
        lines += ["", f"## Training mode: {r['mode']}", ""]
        if not r["mode_violations"]:
            lines.append("The code snapshots keep to the mode's rules.")
        for v in r["mode_violations"]:
            lines.append(f"- **Breaks the mode's rule** ({v['rule']}) at {(v['commit'] or '')[:10]}"
                         + "".join(f"\n  - `{_one_line(e)[:140]}`" for e in v["evidence"]))
    if r["stderr_tail"]:
        lines += ["", f"## Last lines of agent.stderr (attempt {r['attempt']})", "", "```", r["stderr_tail"], "```"]
    return "\n".join(lines) + "\n"


def _secs(value) -> str:
    return fmt(value) if value is None else f"{fmt(value, 1)} s"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def write_cell_report(output_dir: str | Path, cell: dict, events: list[dict]) -> dict:
    """Write cells/<cell_id>/report.md and report.json; returns the report."""
    cell_dir = Path(output_dir) / "cells" / cell["cell_id"]
    report = cell_report(cell, events, cell_dir)
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    (cell_dir / "report.md").write_text(render_markdown(report))
    return report


def write_cell_reports(output_dir: str | Path, cell_ids: list[str] | None = None) -> dict[str, dict]:
    """Reports of the given cells (default: every cell that has started), read from the ledger."""
    cells, events = tables.read_ledger(output_dir)
    if cell_ids is not None:
        cells = cells[cells["cell_id"].isin(cell_ids)]
    else:
        cells = cells[cells["status"] != "pending"]
    by_cell = tables.events_by_cell(events)
    return {row["cell_id"]: write_cell_report(output_dir, tables.plain(row), by_cell.get(row["cell_id"], []))
            for row in cells.to_dict("records")}


def current_report(output_dir: str | Path, row: dict, events: list[dict]) -> dict:
    """A cell's run report as it stands, without writing anything: the one written when it ended (report.json) when
    it is not older than the cell's end, else computed now from its records (a running cell). row: the cell's
    ledger row (plain); events: its event_records (those of the agents' traces may be left out: no report reads
    them)."""
    cell_dir = Path(output_dir) / "cells" / row["cell_id"]
    written = cell_dir / "report.json"
    if row["status"] in tables.FINISHED_STATUSES and written.exists() and row.get("ended_at") \
            and written.stat().st_mtime >= row["ended_at"]:
        try:
            return json.loads(written.read_text())
        except ValueError:
            pass  # a report being rewritten: compute it
    return cell_report(row, events, cell_dir)
