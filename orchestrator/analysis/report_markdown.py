"""The sweep report's report.md: its tables and sections, rendered from the sweep model's (sweep_model.py)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.analysis import audit, run_report, run_summary, seeds, tables
from orchestrator.analysis.formats import MISSING, fmt
from orchestrator.analysis.markdown import md_table

GROUP = tables.GROUP
# the columns of the summaries table (report._summaries_table makes it; an empty one when none was asked)
SUMMARY_COLUMNS = ["cell_id", "status", "driver", "model", "input_tokens", "output_tokens", "cached_tokens",
                   "cost_usd", "error", "summary_input_tokens", "summary_output_tokens", "summary_cost_usd",
                   "recorded_input_tokens", "recorded_output_tokens", "recorded_cost_usd", "recorded_calls"]
# the columns of the audit table (report.audit_table makes it)
AUDIT_COLUMNS = ["cell_id", "item", "findings", "sources", "verdict", "quotes", "quotes_found", "reason", "driver",
                 "model", "error"]


def _misuse_section(cells: pd.DataFrame, table: pd.DataFrame, audits: dict[str, dict]) -> list[str]:
    """Per audited cell with a finding or a "yes": each checklist item's deterministic evidence (quoted, with where
    it was seen) and the LLM's verdict beside it (its quotes marked when they are not in what it read)."""
    if not len(table):
        return []
    lines = ["## Misuse (trace audit)", "",
             "Each finished cell's records checked against a fixed checklist: "
             + "; ".join(f"**{k}**: {v}" for k, v in audit.CHECKLIST.items()) + ". Deterministic evidence first "
             "(patterns in the agent's trace and code snapshots, the sandbox's HTTP proxy log of reached and refused "
             "hosts, the driver proxy's log, the grader's flags), then an LLM's verdict with its quotes beside it, "
             "never instead (a quote not found verbatim in what it read is marked).", ""]
    audited = table["cell_id"].nunique()
    suspect = table[(table["findings"] > 0) | (table["verdict"] == "yes")]
    labels = cells.set_index("cell_id")
    if not len(suspect):
        return lines + [f"Nothing found in the {audited} audited cells, by either layer.", ""]
    lines += [f"{suspect['cell_id'].nunique()} of {audited} audited cells have a finding or a \"yes\":", ""]
    for cid, g in suspect.groupby("cell_id", sort=True):
        c, kept = labels.loc[cid], audits[cid]
        lines += [f"### {c.task} / {c.agent} / {c.driver}, seed {c.seed}: cell {cid}", ""]
        if kept.get("error"):
            lines += [f"The LLM's verdict failed ({kept['error']})"
                      + ("; the verdict shown is an earlier one." if kept.get("verdict_is_earlier") else "."), ""]
        rows = []
        for r in g.itertuples(index=False):
            found = kept["findings"][r.item]
            said = (kept.get("verdict") or {}).get(r.item) or {}
            shown = [f for i, f in enumerate(found) if sum(g["source"] == f["source"] for g in found[:i]) < 2]
            evidence = "<br>".join(f"[{f['source']}, {f['where']}] `{f['quote'][:160]}`" for f in shown) or "none"
            quotes = "<br>".join(f"`{q['quote'][:160]}`" + ("" if q["quote_found"] else " (**not in the materials**)")
                                 for q in (said.get("evidence") or [])[:3])
            verdict = f"**{said['verdict']}**" if said.get("verdict") == "yes" else (said.get("verdict") or "-")
            rows.append([r.item, evidence, verdict, quotes or "-", (said.get("reason") or "").replace("|", "/")])
        lines += [md_table(["item", "deterministic evidence", "LLM verdict", "LLM's quotes", "LLM's reason"], rows),
                  "", f"The LLM: {kept.get('driver')} ({kept.get('model')}); cells/{cid}/audit.json has every finding.",
                  ""]
    return lines


def _ci(lo, hi) -> str:
    return MISSING if pd.isna(lo) else f"[{lo:+.3f}, {hi:+.3f}]"


def _wide_per_k(frame: pd.DataFrame, value: str) -> tuple[list[str], list[list]]:
    ks = sorted(frame["k"].unique())
    rows = []
    for key, g in frame.groupby(GROUP, sort=True):
        by_k = dict(zip(g["k"], g[value]))
        rows.append(list(key) + [int(g["n"].iloc[0])] + [fmt(by_k.get(k)) for k in ks])
    return GROUP + ["n"] + [f"k={k}" for k in ks], rows


def _contamination_section(cells: pd.DataFrame) -> list[str]:
    """Flagged cells (hidden eval items in what the agent wrote) per group, and the results with and without them."""
    done = cells[cells["status"].isin(tables.FINISHED_STATUSES)]
    checked = done[done["contaminated"].notna()]
    lines = ["## Contamination", ""]
    if not len(checked):
        return lines + ["No finished cell was checked.", ""]
    flagged = checked["contaminated"] == 1
    if not flagged.any():
        return lines + [f"No cell flagged: no hidden eval item was found in what any of the {len(checked)} checked "
                        "runs wrote (n-gram overlap; the task's `contamination` settings).", ""]
    return lines + _with_and_without(checked, flagged) + [
        f"{int(flagged.sum())} of {len(checked)} runs flagged: hidden eval items were found in what they wrote "
        "(each cell's outcome names the file, item and overlap).", ""]


def _doubts_section(cells: pd.DataFrame) -> list[str]:
    """Cells whose result is in doubt (a known checkpoint submitted, general ability lost, judged answers screened
    as a null model's or aimed at the judge: tables.DOUBTFUL_FLAGS) per group, and the results with and without
    them; nothing when no cell is."""
    done = cells[cells["status"].isin(tables.FINISHED_STATUSES)]
    doubts = done["doubts"].fillna("") if "doubts" in done else pd.Series("", index=done.index)
    flagged = doubts != ""
    if not flagged.any():
        return []
    counts = {f: int(doubts.str.contains(f).sum()) for f in tables.DOUBTFUL_FLAGS}
    return ["## Checkpoint identity, retention and screened answers", ""] + _with_and_without(done, flagged) + [
        f"{int(flagged.sum())} of {len(done)} runs flagged: " + ", ".join(f"{f} x{n}" for f, n in counts.items() if n)
        + ". known_checkpoint: a submission far closer to a known public checkpoint (task.known_models) than to the "
        "base model; retention_drop: the final submission lost more than task.retention.max_drop points on the "
        "retention task's items; null_model: a judged submission whose answers were near-constant across items "
        "(and won); judge_injection: one whose answers addressed the judge's prompt (a judged score of such a "
        "submission counts under protocol paper and is withheld under a2rl: task.screen.count_flagged). Each "
        "cell's report names the model and the distances, the scores, or the items and what matched.", ""]


def _with_and_without(cells: pd.DataFrame, flagged: pd.Series) -> list[str]:
    """Per group: runs, flagged runs, and the held-out and best-feedback improvements with and without them."""
    rows = []
    for key, g in cells.groupby(GROUP, sort=True):
        clean = g[~flagged.loc[g.index]]
        rows.append(list(key) + [len(g), int(flagged.loc[g.index].sum()),
                                 fmt(g["final_improvement"].mean(), signed=True),
                                 fmt(clean["final_improvement"].mean(), signed=True),
                                 fmt(g["improvement"].fillna(0.0).mean(), signed=True),
                                 fmt(clean["improvement"].fillna(0.0).mean(), signed=True)])
    return [md_table(GROUP + ["runs", "flagged", "held-out", "held-out (unflagged)", "best feedback",
                              "best feedback (unflagged)"], rows), ""]


def _usd(value) -> str:
    return MISSING if value is None or pd.isna(value) else "$" + fmt(float(value), 4)


def _cost_section(improvement: pd.DataFrame) -> list[str]:
    """Per group, what a run cost on average and what a point of improvement cost (all runs: infra errors cost too)."""
    lines = ["## Cost (per task x agent x driver x training mode)", ""]
    every = improvement[(improvement["infra_errors"] == "failure") & (improvement["cost_runs"].fillna(0) > 0)] \
        if len(improvement) else improvement
    if not len(every):
        return lines + ["No finished cells yet.", ""]
    rows = [list(r[:len(GROUP)]) + [int(r.cost_runs), fmt(r.driver_tokens_mean, 0), _usd(r.driver_cost_usd_mean),
                                    _usd(r.judge_cost_usd_mean), fmt(r.gpu_hours_mean, 3), _usd(r.cost_usd_total),
                                    _usd(r.usd_per_point), fmt(r.gpu_hours_per_point, 4)]
            for r in every.itertuples(index=False)]
    return lines + [md_table(GROUP + ["runs", "driver tokens / run", "driver $ / run", "judge $ / run",
                                      "GPU-h / run", "$ in all", "$ per point", "GPU-h per point"], rows), "",
                    "Driver tokens and dollars as the driver proxy metered them, the LLM judge's dollars (its calls "
                    "through the same proxy, never charged to the agent), and GPU-hours reserved (budget.gpus x the "
                    "cell's wall time). Per point: all of the group's dollars (GPU-hours) over all of its best "
                    f"feedback improvement, where that is positive ({MISSING}: nothing gained). Infra errors "
                    "counted.", ""]


def _capped_section(cells: pd.DataFrame) -> list[str]:
    """Cells whose driver calls the proxy capped (the output cap it wrote into requests that asked for none or more,
    each record's `capped`), and whether the run's last reply stopped at its output limit; nothing when none."""
    if "driver_capped_calls" not in cells:
        return []
    hit = cells[(cells["driver_capped_calls"].fillna(0) > 0) | cells["driver_last_at_limit"].fillna(False).astype(bool)]
    if not len(hit):
        return []
    rows = [[f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task, r.agent, r.driver, r.seed,
             f"{int(r.driver_capped_calls)} of {int(r.driver_calls)}", fmt(r.driver_cap, 0),
             int(r.driver_limit_calls), "**yes**" if r.driver_last_at_limit else "no"] for r in hit.itertuples()]
    return ["## Capped driver calls", "",
            "Requests the driver proxy capped: the CLI asked for no output limit or a larger one than the cell's "
            "(its `output_limit`, at most a quarter of a local model's window), and the proxy wrote that limit in "
            "(driver_calls.jsonl's `capped`: the field, what was asked, what was sent). \"at the limit\": replies "
            "the server stopped at their output limit; \"last reply cut\": the run's last call was one, so the agent "
            "ended on a cut reply (Codex exits 0 then: its status says completed).", "",
            md_table(["cell", "task", "agent", "driver", "seed", "capped calls", "cap (tokens)", "at the limit",
                      "last reply cut"], rows), ""]


def _manifest_section(info: dict | None) -> list[str]:
    """Where the sweep's configuration was written down before it ran, what it says in brief, and how a resumed
    run's configuration differed (orchestrator/manifest.py)."""
    lines = ["## Configuration", ""]
    if info is None:
        return lines + ["This sweep wrote no manifest (it ran before a2rl wrote them): its configuration is not on "
                        "record beyond each cell's spec.", ""]
    m = info["manifest"]
    a2rl, hw = m.get("a2rl") or {}, m.get("hardware") or {}
    commit = (a2rl.get("commit") or "unknown")[:12]
    tree = {True: " (uncommitted changes in the tree)", False: " (clean tree)"}.get(a2rl.get("dirty"), "")
    gpus = ", ".join(g["name"] for g in hw.get("gpus") or []) or "no GPU"
    hashed = sum(len(t.get("data_files") or {}) for t in (m.get("tasks") or {}).values())
    sandbox = m.get("sandbox") or {}
    drivers = ", ".join(f"{name} ({d.get('model')})" for name, d in (m.get("drivers") or {}).items())
    lines += [f"Written before the first cell started: [{info['file']}](../{info['file']}) ({m.get('written_at')}): "
              f"a2rl {commit}{tree}; {len(m.get('cells') or [])} cells, seeds {m.get('seeds')}; "
              f"{len(m.get('tasks') or {})} tasks ({hashed} data sources hashed); "
              f"drivers {drivers or 'none'}; "
              f"sandbox network {sandbox.get('network')}, allowlist {sandbox.get('allow') or 'empty'}; "
              f"{hw.get('cpus')} x {hw.get('cpu')}, {hw.get('memory_gb')} GB, {gpus}.", ""]
    lines += _downloads_lines(m)
    for later in info["later"]:
        keys = later["differences"]
        lines += [f"**A resumed run was configured differently**: [{later['file']}](../{later['file']}) "
                  f"({later['written_at']}) differs from {info['file']} in {len(keys)} keys: "
                  + ", ".join(f"`{k}`" for k in keys[:30]) + (" ..." if len(keys) > 30 else "") + ".", ""]
    return lines


def _downloads_lines(m: dict) -> list[str]:
    """Each task's protocol (and the ALFWorld games archive it reads), and the downloads lock the run ran on
    (orchestrator/lock.py): what two labs compare to show they graded on the same bytes."""
    from orchestrator.lock import describe

    lock = m.get("downloads")
    said = []
    for name, task in (m.get("tasks") or {}).items():
        config = task.get("config") or {}
        line = f"task {name}: protocol {task.get('protocol')}"
        if config.get("games_archive") and config.get("data_path"):
            archive = str(config["games_archive"]).rsplit("/", 1)[-1]
            digest = ((lock or {}).get("files") or {}).get(archive, {}).get("sha256")
            line += f", games {archive}" + (f" (sha256 {digest[:12]})" if digest else " (not in the lock)")
        said.append(line)
    lines = [f"Protocols: {'; '.join(said)}.", ""] if said else []
    if lock is None:
        return lines + ["Downloads lock: not recorded (a manifest written before a2rl kept one).", ""]
    return lines + [f"Downloads lock (fingerprint `{lock.get('fingerprint', '')[:16]}`): {describe(lock)}.", ""]


def _summaries_section(cells: pd.DataFrame, table: pd.DataFrame, texts: dict[str, dict],
                       summarizer: run_summary.Summarizer | None) -> list[str]:
    """Each cell's LLM-written run summary where there is one, what this report spent on them, and the failures."""
    if not len(table):
        return []
    lines = ["## Run summaries (LLM-written)", ""]
    by_status = table["status"].value_counts()
    if summarizer is not None:
        d = summarizer.driver
        lines.append(f"Written by {d['name']} ({d.get('model')}) from each finished cell's run report, the code diffs "
                     "between its submissions and the agent's trace. The run reports are the source of truth; a "
                     "summary is a reading of them. This report asked for "
                     f"{int(by_status.get('new', 0) + by_status.get('failed', 0))}: "
                     f"{int(table['input_tokens'].sum())} input and {int(table['output_tokens'].sum())} output tokens, "
                     f"${table['cost_usd'].sum():.4f} (analysis usage, never an agent's); "
                     f"{int(by_status.get('cached', 0))} came from the cache; {int(by_status.get('failed', 0))} "
                     "failed.")
    else:
        lines.append("Written by a driver in an earlier report (`analysis.summarize=...`; this one asked none). The "
                     "run reports are the source of truth; a summary is a reading of them.")
    lines += [f"Recorded analysis usage for these cells in all: {int(table['recorded_calls'].sum())} calls, "
              f"{int(table['recorded_input_tokens'].sum())} input and {int(table['recorded_output_tokens'].sum())} "
              f"output tokens, ${table['recorded_cost_usd'].sum():.4f} (cells/<id>/analysis_calls.jsonl).", ""]
    labels = cells.set_index("cell_id")
    for r in table.itertuples(index=False):
        c = labels.loc[r.cell_id]
        lines += [f"### {c.task} / {c.agent} / {c.driver}, seed {c.seed}: cell {r.cell_id}", ""]
        if r.status == "failed":
            lines += [f"**No new summary: the driver failed** ({r.error}). The run report "
                      f"([report.md](../cells/{r.cell_id}/report.md)) is complete without it.", ""]
        kept = texts.get(r.cell_id)
        if kept is not None:
            lines += [f"[summary.md](../cells/{r.cell_id}/summary.md), by {kept['driver']} ({kept['model']}), "
                      f"{kept['input_tokens']} input and {kept['output_tokens']} output tokens, "
                      f"${kept['cost_usd']:.4f}" + (" (earlier than this failure)" if r.status == "failed" else "")
                      + ":", ""]
            lines += ["> " + line if line else ">" for line in kept["text"].splitlines()] + [""]
    return lines


def render_markdown(out: dict, cells: pd.DataFrame, filters: dict | None, figure_paths: list[Path],
                    success_threshold: float, summaries: dict[str, dict] | None = None,
                    summarizer: run_summary.Summarizer | None = None) -> str:
    """summaries: each cell's run summary (summary.json) where one exists."""
    summaries = summaries or {}
    t, p = out["tables"], out["progress"]
    sweeps = ", ".join(sorted(set(cells["sweep"].dropna().astype(str)))) or MISSING
    by_status = ", ".join(f"{n} {s}" for s, n in p["by_status"].items() if n)
    lines = [f"# a2rl report: {sweeps}", ""]
    if filters:
        lines.append("Filters: " + ", ".join(f"{k}={v}" for k, v in filters.items() if v is not None) + ".")
    lines += [
        f"**{p['finished']} of {p['total']} cells finished; {p['missing']} missing** (pending or running). "
        f"By status: {by_status or 'none'}." + (" The tables cover finished cells only." if p["missing"] else ""),
        "",
        "A cell's result is the improvement of its best valid submission over the baseline; a cell without a valid "
        "submission counts 0 (the base model stands). Only a cell's final attempt counts. Infra errors are the "
        "system's fault: results are given counting them as failures (0) and excluding them.",
        "",
        *_manifest_section(out.get("manifest")),
        "## Held-out final score (per task x agent x driver x training mode, over seeds)",
        "",
    ]
    held = t["held_out"]
    if len(held):
        rows = [list(r[:len(GROUP)]) + [r.n, fmt(r.mean, signed=True), fmt(r.se), _ci(r.ci_lo, r.ci_hi),
                                        fmt(r.feedback_mean, signed=True), fmt(r.mean_gap, signed=True),
                                        fmt(r.se_gap), _ci(r.ci_lo_gap, r.ci_hi_gap)]
                for r in held.itertuples(index=False)]
        lines += [md_table(GROUP + ["runs", "held-out", "SE", "95% CI", "best feedback", "optimism gap", "gap SE",
                                    "gap 95% CI"], rows), "",
                  "Each run's final submission (the one it marked final, else its best) scored once, when the run "
                  "ended, on a held-out split it never got a score from: its improvement over the base model on that "
                  "split. The optimism gap is the best feedback improvement (what the original benchmark reports) "
                  "minus the held-out one, per run. Runs of tasks without a final split are not in this table.", ""]
    else:
        lines += ["No finished cell has a held-out score (its task has no final split, or none finished).", ""]
    lines += _contamination_section(cells)
    lines += _doubts_section(cells)
    judged = cells[cells["judge_agreement"].notna()] if "judge_agreement" in cells else cells.iloc[:0]
    if len(judged):
        lines += ["## LLM judges", "",
                  "Scores of these tasks are not deterministic: their LLM judge, asked at temperature 0 through a "
                  "provider, need not give the same verdict twice (its verdicts are cached, so one sweep's are "
                  "stable). Its repeat agreement, measured on a sample of the baseline's judge prompts asked twice: "
                  + ", ".join(f"{task} {100 * a:.0f}%" for task, a in judged.groupby("task")["judge_agreement"]
                              .first().items()) + ".", ""]
    lines += ["## Improvement over baseline: the best feedback score (per task x agent x driver x training mode, "
              "over seeds)", ""]
    imp = t["improvement"]
    if len(imp):
        fail = imp[imp["infra_errors"] == "failure"].set_index(GROUP)
        excl = imp[imp["infra_errors"] == "exclude"].set_index(GROUP)
        rows = []
        for key, f in fail.iterrows():
            e = excl.loc[key]
            rows.append(list(key) + [f["n"], int(f["n_infra_errors"]), fmt(f["mean"], signed=True), fmt(f["se"]),
                                     _ci(f["ci_lo"], f["ci_hi"]), e["n"], fmt(e["mean"], signed=True), fmt(e["se"]),
                                     _ci(e["ci_lo"], e["ci_hi"]), e["note"] or f["note"]])
        lines.append(md_table(GROUP + ["runs", "infra errors", "mean", "SE", "95% CI", "runs (excl.)",
                                       "mean (excl.)", "SE (excl.)", "95% CI (excl.)", "note"], rows))
        lines += ["", "Means with SE (ddof=1) and percentile bootstrap CI over seeds; \"excl.\" drops infra errors.",
                  ""]
    else:
        lines += ["No finished cells yet.", ""]

    lines += _cost_section(imp)
    if "seeds" in t:
        lines += seeds.markdown(t["seeds"], t["seed_pairs"], out["seed_targets"])
    lines += ["## Pooled across tasks (SE clustered by task)", ""]
    pooled = t["pooled"]
    if len(pooled):
        rows = [[r.agent, r.driver, r.infra_errors, r.n_clusters, r.n, fmt(r.mean, signed=True),
                 fmt(r.clustered_se), r.anchored_n_clusters, r.anchored_n, fmt(r.anchored_mean, signed=True),
                 fmt(r.anchored_clustered_se), _usd(r.cost_usd_mean), _usd(r.usd_per_point),
                 fmt(r.gpu_hours_per_point), "; ".join(n for n in (r.note, r.anchored_note) if n)]
                for r in pooled.itertuples()]
        lines += [md_table(["agent", "driver", "infra errors", "tasks", "runs", "mean", "clustered SE",
                            "anchored tasks", "anchored runs", "anchored mean", "anchored clustered SE", "$ per run",
                            "$ per point", "GPU-h per point", "note"], rows), "",
                  "Raw: improvements in each task's own points, pooled over every task. Anchored: each run's "
                  "improvement over (reference - baseline), 0 at the base model and 1 at the task's reference score, "
                  "pooled over the tasks that have one, so an easy task's points do not outweigh a hard task's.", ""]
        refs = t["references"]
        rows = [[r.task, fmt(r.baseline), fmt(r.reference_score),
                 r.reference_source if isinstance(r.reference_source, str) else "none: not anchored"]
                for r in refs.itertuples()]
        lines += [md_table(["task", "baseline", "reference", "source"], rows), ""]
    else:
        lines += ["No finished cells yet.", ""]

    for title, name, value, extra in (
            ("Expected best of k runs", "best_of_k", "expected_best",
             "Unbiased: the average over all k-subsets of runs of their best result."),
            (f"pass@k (success: improvement > {success_threshold:g})", "pass_at_k", "pass_at_k",
             "Chen et al.'s unbiased estimator over the group's runs.")):
        lines += [f"## {title}", ""]
        frame = t[name]
        frame = frame[frame["infra_errors"] == "exclude"]
        if len(frame):
            header, rows = _wide_per_k(frame, value)
            lines += [md_table(header, rows), "",
                      f"{extra} Infra errors excluded (both policies are in {name}.parquet). "
                      f"{MISSING}: the group has fewer than k runs, so no estimate.", ""]
        else:
            lines += ["No finished cells yet.", ""]

    if "reprompting" in t:
        lines += ["## Re-prompting", "",
                  "Cells whose budget re-prompts an agent that stops early (budget.max_reprompts), split by how often "
                  "it was started again. \"first stop\": the improvement it had when it first stopped by itself, what "
                  "a run without re-prompting would have scored; \"final\": with the re-prompts. Infra errors "
                  "excluded.", ""]
        rows = [list(r[:len(GROUP)]) + [r.reprompts, r.n, fmt(r.mean_first_stop, signed=True),
                                        fmt(r.mean_final, signed=True), fmt(r.mean_gain, signed=True)]
                for r in t["reprompting"].itertuples(index=False)]
        lines += [md_table(GROUP + ["re-prompts", "runs", "mean at first stop", "mean final", "mean gain"], rows)
                  if rows else "No finished cells yet.", ""]

    lines += ["## Outcomes", ""]
    fc = t["failure_classes"]
    if len(fc):
        wide = fc.pivot_table(index=["agent", "driver"], columns="outcome_class", values="n", fill_value=0)
        classes = [c for c in ["improved", *run_report.FAILURE_CLASSES] if c in wide.columns]
        rows = [list(key) + [int(wide.loc[key, c]) for c in classes] for key in wide.index]
        lines += [md_table(["agent", "driver"] + classes, rows), ""]
        lines += [f"- {c}: {run_report.FAILURE_CLASSES[c]}" for c in classes if c != "improved"] + [""]
    else:
        lines += ["No finished cells yet.", ""]

    checked = cells[cells["mode_violation"].notna()] if "mode_violation" in cells else cells.iloc[:0]
    if len(checked):
        lines += ["## Training-mode compliance", "",
                  "Each cell's code snapshots checked against its mode's rules (conf/mode): a forbidden pattern in "
                  "any snapshot, or a required one missing from the best submission's, breaks the mode.", ""]
        rows = [[f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task, r.agent, r.driver, r.mode, r.seed,
                 "kept" if not r.mode_violation else f"**broken**: {r.mode_violation}"] for r in checked.itertuples()]
        lines += [md_table(["cell", "task", "agent", "driver", "mode", "seed", "rules"], rows), ""]

    estimated = t.get("estimated_usage")
    if estimated is not None and len(estimated):
        lines += ["## Estimated driver tokens", "",
                  "Calls whose stream was cut before the server sent its usage (the agent hung up, or its deadline "
                  "ended it) are counted by the driver proxy itself: prompt tokens with the model's tokenizer or the "
                  "provider's count endpoint, else from characters, and generated tokens from what was streamed "
                  "(each record's `estimated` says how). They are in every token and cost figure here; these cells "
                  "hold such counts.", ""]
        rows = [[f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task, r.agent, r.driver, r.seed,
                 f"{r.estimated_calls} of {r.calls}", f"{int(r.estimated_tokens)} of {int(r.tokens)}"]
                for r in estimated.itertuples()]
        lines += [md_table(["cell", "task", "agent", "driver", "seed", "estimated calls", "estimated tokens"], rows),
                  ""]

    lines += _capped_section(cells)
    lines += ["## Cells", ""]
    rows = [[r.cell_id if r.status == "pending" else f"[{r.cell_id}](../cells/{r.cell_id}/report.md)", r.task,
             r.agent, r.driver, r.seed, r.status, fmt(r.improvement, signed=True), fmt(r.anchored, signed=True),
             r.n_submissions, r.outcome_class, r.driver_tokens, _usd(r.driver_cost_usd), _usd(r.judge_cost_usd),
             fmt(r.gpu_hours, 3)]
            + ([f"[summary](../cells/{r.cell_id}/summary.md)" if r.cell_id in summaries else ""] if summaries else [])
            for r in cells.itertuples()]
    lines += [md_table(["cell", "task", "agent", "driver", "seed", "status", "improvement", "anchored", "submissions",
                        "outcome", "driver tokens", "driver $", "judge $", "GPU-h"]
                       + (["LLM summary"] if summaries else []), rows), ""]
    lines += _summaries_section(cells, t.get("summaries", pd.DataFrame(columns=SUMMARY_COLUMNS)), summaries,
                                summarizer)
    lines += _misuse_section(cells, t.get("audit", pd.DataFrame(columns=AUDIT_COLUMNS)), out.get("audits") or {})

    if figure_paths:
        lines += ["## Figures", ""] + [f"![{path.stem}]({path.name})" for path in figure_paths] + [""]
        if "tokens" not in out["curves"] or not len(out["curves"]["tokens"]):
            lines += ["No driver is metered in these cells, so there is no curve over tokens.", ""]
    lines += ["Exports: cells.parquet, events.parquet and one Parquet file per table, for pandas and "
              "notebooks/analysis.ipynb.", ""]
    return "\n".join(lines)
