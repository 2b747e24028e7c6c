"""Tune callbacks on the orchestrator side: the ledger (the only writer) with a live progress line, and W&B."""
from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

from ray import tune

from contracts.specs import CellSpec
from orchestrator.cell_report import CellReport
from orchestrator.ledger import INFRA_ERROR, Ledger
from orchestrator.records import status_event
from orchestrator.preflight import describe


def cell_of(trial) -> CellSpec:
    return CellSpec.from_dict(trial.config["cell"])


def trial_error_text(trial) -> str:
    path = getattr(trial, "error_file", None)
    if path and Path(path).exists():
        text = Path(path).read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-3:])[-1000:]
    return str(getattr(trial, "error_msg", None) or "trial failed")


class LedgerCallback(tune.Callback):
    def __init__(self, ledger: Ledger, cell_ids: list[str], stream=None, pending_report_s: float = 0.0):
        """pending_report_s: this often, what the pending cells wait for (0: never)."""
        self.ledger, self.cell_ids, self.stream = ledger, cell_ids, stream or sys.stdout
        self.pending_report_s, self.pending_reported = pending_report_s, time.time()

    def __getstate__(self):  # Tune pickles callbacks with the experiment state; a terminal stream is not picklable
        return {**self.__dict__, "stream": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.stream = self.stream or sys.stdout

    def on_trial_result(self, iteration, trials, trial, result, **info):
        report = CellReport.from_metrics(result)
        cell_id, attempt = report.cell_id, report.attempt
        if report.started_at is not None:
            self.ledger.mark_running(cell_id, attempt, float(report.started_at))
            self.progress(f"started {cell_of(trial).label} (attempt {attempt})")
        if report.events:
            self.ledger.add_events(cell_id, attempt, report.events)
        if report.n_submissions is not None:
            self.ledger.update_scores(cell_id, report.baseline_score, report.best_score, report.n_submissions)
        for e in report.events:
            if e["kind"] == "submission":
                p = e["payload"]
                score = "error" if p.get("score") is None else f"{p['score']:.3f}"
                flags = f" [{', '.join(p['flags'])}]" if p.get("flags") else ""
                self.progress(f"{cell_of(trial).label} submission {p['submission_id']}: score {score}{flags}")
        outcome = report.outcome
        if outcome is not None:
            self.ledger.finish(cell_id, outcome.status, outcome.ended_at, outcome.error, outcome.limit_hit,
                               outcome.details)
            limit = f" ({outcome.limit_hit})" if outcome.limit_hit else ""
            self.progress(f"finished {cell_of(trial).label}: {outcome.status}{limit}")
            self.write_report(cell_id)

    def on_trial_recover(self, iteration, trials, trial, **info):
        cell = cell_of(trial)
        row = self.ledger.cells([cell.cell_id]).get(cell.cell_id) or {}
        attempt = max(1, row.get("attempts") or 1)
        error = trial_error_text(trial)
        self.ledger.add_events(cell.cell_id, attempt, [status_event(cell.cell_id, attempt, time.time() - (
            row.get("started_at") or time.time()), "retrying", error=error)])
        self.progress(f"infra error in {cell.label}, retrying: {error[:200]}")

    def on_trial_error(self, iteration, trials, trial, **info):
        cell = cell_of(trial)
        error = trial_error_text(trial)
        self.ledger.finish(cell.cell_id, INFRA_ERROR, time.time(), error=error)
        self.progress(f"finished {cell.label}: infra_error: {error[:300]}")
        self.write_report(cell.cell_id)

    def on_step_end(self, iteration, trials, **info):
        """Now and then, the reservations pending cells wait for and what the cluster has free: on a cluster that
        grows, which node type to add; on a fixed one, why a sweep's cells queue."""
        if not self.pending_report_s or time.time() - self.pending_reported < self.pending_report_s:
            return
        self.pending_reported = time.time()
        waiting = Counter(describe(t.placement_group_factory.required_resources) for t in trials
                          if t.status == "PENDING")
        if waiting:
            import ray

            needs = ", ".join(f"{n} x ({need})" for need, n in sorted(waiting.items()))
            self.progress(f"pending: {needs}; free now: {describe(ray.available_resources()) or 'nothing'}")

    def write_report(self, cell_id: str) -> None:
        """The cell's run report (cells/<id>/report.md and .json), as soon as it ends."""
        from orchestrator.analysis.run_report import write_cell_report

        try:
            row = self.ledger.cells([cell_id])[cell_id]
            write_cell_report(self.ledger.path.parent, row, self.ledger.events(cell_id=cell_id))
        except Exception as e:  # a report is a convenience; it must never stop the sweep
            print(f"[a2rl] could not write the run report of {cell_id}: {e}", file=self.stream)

    def progress(self, what: str) -> None:
        c = self.ledger.summary_counts(self.cell_ids)
        done = len(self.cell_ids) - c["pending"] - c["running"]
        line = (f"[a2rl {time.strftime('%H:%M:%S')}] {done}/{len(self.cell_ids)} done · {c['running']} running · "
                f"{c['pending']} pending | {what}")
        print(line, file=self.stream, flush=True)


class WandbCallback(tune.Callback):
    """One W&B run per cell: group = sweep, tags = agent/driver/task/seed, config = the cell spec."""

    def __init__(self, project: str, entity: str | None, mode: str, root: Path):
        self.project, self.entity, self.mode, self.root = project, entity, mode, root
        self.runs = {}
        self.usage = {}

    def __getstate__(self):
        return {**self.__dict__, "runs": {}, "usage": {}}

    def _run(self, trial):
        import wandb

        cell = cell_of(trial)
        if cell.cell_id not in self.runs:
            self.root.mkdir(parents=True, exist_ok=True)
            self.runs[cell.cell_id] = wandb.init(
                project=self.project, entity=self.entity, mode=self.mode, dir=str(self.root),
                group=cell.sweep or None, name=f"{cell.label}-{cell.cell_id[:6]}",
                id=f"{cell.cell_id}-{int(time.time())}",
                tags=[f"agent:{cell.agent.name}", f"driver:{cell.driver.name}", f"task:{cell.task_name}",
                      f"mode:{cell.mode_name}", f"seed:{cell.seed}"],
                config={**cell.to_dict(), "cell_id": cell.cell_id}, reinit="create_new", settings=wandb.Settings(
                    silent=True, console="off", x_disable_stats=True))
        return self.runs[cell.cell_id]

    def on_trial_result(self, iteration, trials, trial, result, **info):
        report = CellReport.from_metrics(result)
        subs = [e for e in report.events if e["kind"] == "submission"]
        calls = [e for e in report.events if e["kind"] == "driver_usage"]
        if not subs and not calls and report.outcome is None:
            return
        run = self._run(trial)
        used = self.usage.setdefault(cell_of(trial).cell_id, {"tokens": 0, "cost_usd": 0.0, "calls": 0})
        for e in calls:  # driver metering, cumulative, so scaling over tokens can be read off the run
            p = e["payload"]
            used["tokens"] += int(p.get("input_tokens") or 0) + int(p.get("output_tokens") or 0)
            used["cost_usd"] += float(p.get("cost_usd") or 0.0)
            used["calls"] += 1
            run.log({"driver/tokens": used["tokens"], "driver/cost_usd": used["cost_usd"],
                     "driver/calls": used["calls"], "elapsed_s": e["t"]})
        for e in subs:
            p = e["payload"]
            metrics = {"submission/score": p.get("score"), "submission/best": p.get("best"),
                     "submission/improvement": p.get("improvement"),
                     "submission/best_improvement": None if p.get("best") is None or p.get("baseline_score") is None
                     else p["best"] - p["baseline_score"],
                     "submission/index": p["submission_id"], "elapsed_s": e["t"],
                       "submission/copy_of_base": int("copy_of_base" in (p.get("flags") or [])),
                       "submission/known_checkpoint": int("known_checkpoint" in (p.get("flags") or []))}
            run.log({k: v for k, v in metrics.items() if v is not None})
        if report.outcome is not None:
            outcome = report.outcome.to_dict()
            run.summary.update({k: v for k, v in outcome.items() if k != "workspace"})
            run.summary.update(self.cost(cell_of(trial), report.attempt, outcome["elapsed_s"]))
            run.finish()
            self.runs.pop(cell_of(trial).cell_id, None)
            self.usage.pop(cell_of(trial).cell_id, None)

    def cost(self, cell: CellSpec, attempt: int, elapsed_s: float) -> dict:
        """The attempt's cost as the report counts it (orchestrator/analysis/cost.py), for the run's summary."""
        from contracts.records import DRIVER_CALLS, read_jsonl
        from orchestrator.analysis.cost import cell_cost

        attempt_dir = self.root / "cells" / cell.cell_id / f"attempt-{attempt}"
        spent = cell_cost(attempt_dir, read_jsonl(attempt_dir / DRIVER_CALLS), cell.budget.gpus, elapsed_s)
        return {f"cost/{k}": v for k, v in spent.items()}

    def on_trial_error(self, iteration, trials, trial, **info):
        run = self.runs.pop(cell_of(trial).cell_id, None)
        if run is not None:
            run.summary["status"] = INFRA_ERROR
            run.finish(exit_code=1)

    def on_experiment_end(self, trials, **info):
        for run in self.runs.values():
            run.finish()
        self.runs.clear()


def wandb_mode(configured: str | None) -> str:
    if configured:
        return configured
    return os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
