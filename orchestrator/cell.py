"""One cell, as a Ray Tune function trainable: workspace, run registration, sandboxed agent, budget, outcome.

Everything the cell learns is reported to Tune (a Tune callback in the orchestrator writes the ledger) and is in
durable record files first. An agent that crashes is a result (agent_error); only infrastructure failures raise,
which is what Tune's retry (FailureConfig) retries.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

from ray import serve, tune

from agents.cli.session import CliUnavailable
from agents.kinds import agent_kind
from orchestrator import sandbox
from contracts.layout import Layout
from orchestrator.ledger import AGENT_ERROR, BUDGET_EXHAUSTED, COMPLETED, INFRA_ERROR
from contracts.records import ATTEMPT, DRIVER_CALLS, OUTCOME, SUBMISSIONS, TRACE, JsonlTail, write_json_durably
from orchestrator.records import driver_event, outcome_event, status_event, submission_event, trace_event
from contracts.specs import CellSpec
from contracts.task import is_interactive, prompt_file
from contracts.task_spec import TaskSpec
from orchestrator.workspace import agent_env, materialise, task_material

POLL_S = 0.2
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def sandbox_paths(layout: Layout) -> tuple[list[Path], list[Path]]:
    """What the sandbox hides and what it binds back read-only, computed on the node that runs the agent."""
    hidden = [PROJECT_ROOT, Path("/tmp"), Path.home(), *layout.hidden_from_agents()]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):  # the cluster's token, when it is not in $HOME (~/.ray/auth_token)
        hidden.append(Path(os.environ["RAY_AUTH_TOKEN_PATH"]))
    readonly = [*sandbox.python_paths(), layout.models_cache]
    return hidden, readonly


def finish_unstarted(cell: CellSpec, attempt: int, adir: Path, started: float, error: str) -> None:
    """End a cell whose agent cannot start (its CLI is not installed) as infra_error, reported as an outcome
    rather than raised: Tune's retry would only fail the same way. `rerun_errored=true` runs it once installed."""
    ended = time.time()
    outcome = {"status": INFRA_ERROR, "limit_hit": None, "exit_code": None, "error": error, "best_score": None,
               "baseline_score": None, "n_submissions": 0, "started_at": started, "ended_at": ended,
               "elapsed_s": ended - started, "agent_started": False}
    write_json_durably(adir / OUTCOME, outcome)
    tune.report({"cell_id": cell.cell_id, "attempt": attempt, "done_outcome": json.dumps(outcome),
                 "events": json.dumps([outcome_event(cell.cell_id, attempt, outcome)])})


def run_cell(config: dict) -> None:
    cell = CellSpec.from_dict(config["cell"])
    layout = Layout.from_dict(config["layout"])
    opts = config["opts"]
    attempt = layout.new_attempt(cell.cell_id)
    adir = layout.attempt_dir(cell.cell_id, attempt)
    started = time.time()
    write_json_durably(adir / ATTEMPT, {"started_at": started, "attempt": attempt})
    tune.report({"cell_id": cell.cell_id, "attempt": attempt, "started_at": started,
                 "events": json.dumps([status_event(cell.cell_id, attempt, 0.0, "running")])})
    kind = agent_kind(cell.agent.kind)
    try:  # an LLM-driven agent: its CLI must be installed before anything is registered or spent
        session = kind.session(cell, list(opts.get("cli_path") or []))
    except CliUnavailable as e:
        return finish_unstarted(cell, attempt, adir, started, str(e))

    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name
    material = task_material(cell.task, layout.cache_dir)
    interactive = is_interactive(TaskSpec.from_config(cell.task))
    base_model = resolve_base_model(cell.task["base_model"], layout.models_cache)
    grader = serve.get_app_handle(app_name(cell.task_name))
    token = secrets.token_urlsafe(24)
    deadline = started + cell.budget.wall_time_s
    workspace = layout.workspace(cell.cell_id, attempt)
    argv, code_files = kind.command(cell.agent, prompt_file(TaskSpec.from_config(cell.task)))
    run_info = {"grading_url": f"{opts['grading_url']}/{cell.task_name}", "run_token": token,
                **({"rollout_url": f"{opts['grading_url']}/{cell.task_name}/env"}
                   if interactive else {}),
                "started_at": started, "deadline": deadline}
    materialise(workspace, cell, material=material, base_model_dir=base_model, run_info=run_info, code_files=code_files)

    env = agent_env(workspace, json.loads((workspace / "run.json").read_text()), cell.budget.cpus)
    hidden, readonly = sandbox_paths(layout)
    if session is not None:  # the per-cell driver key (the real one stays in the proxy); a CLI's command line
        argv = session.start(workspace, env, opts["driver_url"], adir / DRIVER_CALLS, argv)
        readonly += session.readonly_paths(hidden)
    try:
        registered = grader.register_run.remote(token, {
            "cell_id": cell.cell_id, "workspace": str(workspace), "records_dir": str(adir),
            "code_repo": str(layout.code_repo(cell.cell_id)), "started_at": started, "deadline": deadline,
            "max_submissions": cell.budget.max_submissions,
            "driver_key": session.key if session is not None else None}).result()  # /status shows its tokens
        proc = sandbox.start(argv, workspace, env, adir / "agent.stdout", adir / "agent.stderr",
                             sandboxed=opts["sandboxed"], hidden=hidden, readonly=readonly)
    except BaseException:
        if session is not None:
            session.close()
        raise
    agent_started = time.time()
    subs, calls, trace = JsonlTail(adir / SUBMISSIONS), JsonlTail(adir / DRIVER_CALLS), JsonlTail(adir / TRACE)
    state = {"best": None, "n": 0, "driver_calls": 0, "trace": 0}
    limit, exit_code, env_usage = None, None, None

    def report_new(extra_events=(), final=False) -> None:
        events = list(extra_events)
        if session is not None:  # a CLI's own trace (its stdout) -> trace records
            session.pump(adir / "agent.stdout", adir / TRACE, final)
        for rec in trace.read_new():
            events.append(trace_event(cell.cell_id, attempt, started, rec, state["trace"]))
            state["trace"] += 1
        for rec in subs.read_new():
            state["n"] += 1
            if rec.get("score") is not None:
                state["best"] = rec["score"] if state["best"] is None else max(state["best"], rec["score"])
            events.append(submission_event(cell.cell_id, attempt, started, rec))
        for rec in calls.read_new():
            events.append(driver_event(cell.cell_id, attempt, started, rec, state["driver_calls"]))
            state["driver_calls"] += 1
        if events:
            tune.report({"cell_id": cell.cell_id, "attempt": attempt, "events": json.dumps(events),
                         "baseline_score": registered["baseline_score"], "best_score": state["best"],
                         "n_submissions": state["n"]})

    try:
        while True:
            report_new()
            exit_code = proc.poll()
            if exit_code is not None:
                break
            if time.time() >= deadline:
                limit = "wall_time"
                break
            if state["n"] >= cell.budget.max_submissions:
                limit = "submissions"
                break
            if session is not None and (limit := session.limit_hit(state["driver_calls"])):
                break  # tokens or cost, as the driver proxy counts them
            time.sleep(POLL_S)
    finally:
        agent_ended = time.time()
        proc.kill_group(opts["kill_grace_s"])  # also when the agent exited: its children may live on
        if session is not None:
            try:  # the key stops working; calls still in flight land in the records first
                session.close()
            except Exception as e:  # the calls are recorded already; this must not turn a result into an error
                print(f"[a2rl] closing the driver key of {cell.cell_id} failed: {e!r}", file=sys.stderr)
        still_running = grader.close_run.remote(token).result()
        if interactive:  # the run's environment sessions end with it
            from envs.rollout_service import close_run as close_sessions

            try:
                env_usage = close_sessions(cell.task_name, token)
            except Exception as e:  # idle sessions expire anyway; this must not turn a result into an infra error
                print(f"[a2rl] closing the rollout sessions of {cell.cell_id} failed: {e!r}", file=sys.stderr)
    report_new(final=True)
    if limit is None and state["n"] >= cell.budget.max_submissions:
        limit = "submissions"  # the agent used its last submission and stopped: the budget ended it
    if limit is None and session is not None and session.final_usage is not None:
        limit = session.limit_hit(state["driver_calls"])  # it stopped on a refused call: the budget ended it

    if limit is not None:
        status = BUDGET_EXHAUSTED
    else:
        status = COMPLETED if exit_code == 0 else AGENT_ERROR
    error = None
    if status == AGENT_ERROR:
        tail = (adir / "agent.stderr").read_text(errors="replace")[-2000:] if (adir / "agent.stderr").exists() else ""
        error = f"agent exited with code {exit_code}: {tail.strip()[-500:]}"
    ended = time.time()
    outcome = {"status": status, "limit_hit": limit, "exit_code": exit_code, "error": error,
               "best_score": state["best"], "baseline_score": registered["baseline_score"],
               "n_submissions": state["n"], "started_at": started, "ended_at": ended, "elapsed_s": ended - started,
               "workspace": str(workspace), "evaluations_unfinished": still_running,
               # the cell's own overhead: before the agent ran, and after it stopped (kill, waiting on grading)
               "setup_s": agent_started - started, "teardown_s": ended - agent_ended,
               **(session.summary() if session is not None else {}),
               **({"env_usage": env_usage} if env_usage is not None else {})}
    write_json_durably(adir / OUTCOME, outcome)
    tune.report({"cell_id": cell.cell_id, "attempt": attempt, "done_outcome": json.dumps(outcome),
                 "events": json.dumps([outcome_event(cell.cell_id, attempt, outcome)]),
                 "baseline_score": registered["baseline_score"], "best_score": state["best"],
                 "n_submissions": state["n"]})
