"""One cell, as a Ray Tune function trainable: workspace, run registration, sandboxed agent, budget, outcome.

`run_cell` is five steps: claim an attempt, prepare the agent (a CLI that is not installed ends the cell there), start
it (workspace, registrations, sandbox), watch it until it exits or a budget ends it, then stop everything and record
the outcome. Everything the cell learns is in durable record files first and reported to Tune as a CellReport (a Tune
callback in the orchestrator writes the ledger). An agent that crashes is a result (agent_error); only
infrastructure failures raise (contracts/infra.py), which is what Tune's retry (FailureConfig) retries; any other
exception in a2rl's code ends the cell once as infra_error marked a2rl_bug, its traceback in the outcome.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray
from ray import serve, tune

from agents.cli.session import AgentSession, CliUnavailable
from agents.kinds import AgentKind, agent_kind
from contracts.infra import InfraError, is_infrastructure
from contracts import registry
from contracts.layout import Layout
from contracts.outcomes import Limit, Status
from contracts.records import (
    ATTEMPT,
    DRIVER_CALLS,
    NETWORK,
    OUTCOME,
    REPROMPTS,
    SUBMISSIONS,
    TRACE,
    JsonlTail,
    append_jsonl,
    write_json_durably,
)
from contracts.runs import RunRegistration
from contracts.specs import CellOptions, CellSpec
from contracts.task import cell_task, load_task
from contracts.task_spec import TaskSpec
from orchestrator import reprompt, sandbox
from orchestrator.agent_sides import CellStart, agent_side
from orchestrator.cell_report import CellReport, Outcome
from orchestrator.ledger import AGENT_ERROR, BUDGET_EXHAUSTED, COMPLETED, INFRA_ERROR, RUNNING
from orchestrator.records import (
    driver_event,
    outcome_event,
    reprompt_event,
    status_event,
    submission_event,
    trace_event,
)
from orchestrator.workspace import given_digests

POLL_S = 0.2
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class ServiceTimeout(InfraError):
    """A service did not answer a cell in time: an infra error (Tune retries the cell)."""


def answer(response, timeout_s: float, what: str):
    """A Serve call's answer, or a ServiceTimeout naming what did not answer: no wait without a bound."""
    try:
        return response.result(timeout_s=timeout_s)
    except TimeoutError:
        raise ServiceTimeout(f"{what} did not answer within {timeout_s:.0f} s") from None


def sandbox_paths(layout: Layout, task: TaskSpec) -> tuple[list[Path], list[Path]]:
    """What the sandbox hides and what it binds back read-only, computed on the node that runs the agent."""
    return sandbox_paths_hiding(layout, load_task(task, layout.cache_dir).hidden_paths())


def sandbox_paths_hiding(layout: Layout, task_hidden) -> tuple[list[Path], list[Path]]:
    """sandbox_paths, given where the task's hidden split lives (CellTask.hidden_paths)."""
    hidden = [PROJECT_ROOT, Path("/tmp"), Path.home(), *layout.hidden_from_agents(), *task_hidden]
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):  # the cluster's token, when it is not in $HOME (~/.ray/auth_token)
        hidden.append(Path(os.environ["RAY_AUTH_TOKEN_PATH"]))
    readonly = [*sandbox.python_paths(), layout.models_cache]
    return hidden, readonly


def reachable(opts: CellOptions) -> list[tuple[str, int]]:
    """The addresses an agent in the isolated network mode may reach: the grading server (rollouts are on it
    too) and the driver proxy."""
    from urllib.parse import urlsplit

    out = []
    for url in (opts.grading_url, opts.driver_url):
        if url:
            parts = urlsplit(url)
            out.append((parts.hostname or "127.0.0.1", parts.port or 80))
    return sorted(set(out))


@dataclass
class Attempt:
    """One attempt of a cell: its number, its records folder, when it started."""
    cell: CellSpec
    layout: Layout
    number: int
    started: float

    @property
    def dir(self) -> Path:
        return self.layout.attempt_dir(self.cell.cell_id, self.number)

    def report(self, **fields: Any) -> None:
        tune.report(CellReport(self.cell.cell_id, self.number, **fields).to_metrics())

    def finish(self, outcome: Outcome, **scores: Any) -> None:
        """The outcome, durable first, then to the ledger."""
        write_json_durably(self.dir / OUTCOME, outcome.to_dict())
        self.report(events=[outcome_event(self.cell.cell_id, self.number, outcome.to_dict())], outcome=outcome,
                    **scores)


@dataclass
class Records:
    """The attempt's record files read as they grow (submissions, driver calls, the agent's trace) as ledger events,
    and what they say so far."""
    attempt: Attempt
    session: AgentSession | None
    best: float | None = None
    submissions: int = 0
    contaminated: int = 0           # submissions whose workspace held hidden eval items
    driver_calls: int = 0
    waited_s: float = 0.0           # what the driver calls spent waiting on the provider's rate limits
    trace_lines: int = 0
    reprompts: int = 0              # counted by the cell as it restarts the agent
    refusal: dict | None = None     # the driver's server's last refusal (a 4xx) that no call got past since
    _tails: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._tails = {name: JsonlTail(self.attempt.dir / name)
                       for name in (SUBMISSIONS, DRIVER_CALLS, TRACE, REPROMPTS)}

    def new_events(self, final: bool = False) -> list[dict]:
        cell_id, n, t0 = self.attempt.cell.cell_id, self.attempt.number, self.attempt.started
        if self.session is not None:  # a CLI's own trace (its stdout) -> trace records
            self.session.pump(self.attempt.dir / "agent.stdout", self.attempt.dir / TRACE, final)
        events = []
        for rec in self._tails[TRACE].read_new():
            events.append(trace_event(cell_id, n, t0, rec, self.trace_lines))
            self.trace_lines += 1
        for rec in self._tails[SUBMISSIONS].read_new():
            self.submissions += not rec.get("refunded")  # a judge outage's submission does not count
            self.contaminated += "contamination" in (rec.get("flags") or [])
            if rec.get("score") is not None:
                self.best = rec["score"] if self.best is None else max(self.best, rec["score"])
            events.append(submission_event(cell_id, n, t0, rec))
        for rec in self._tails[DRIVER_CALLS].read_new():
            events.append(driver_event(cell_id, n, t0, rec, self.driver_calls))
            self.driver_calls += 1
            self.waited_s += float(rec.get("wait_s") or 0.0)
            self._note_refusal(rec)
        for rec in self._tails[REPROMPTS].read_new():
            events.append(reprompt_event(cell_id, n, t0, rec))
        return events

    def _note_refusal(self, rec: dict) -> None:
        status = rec.get("status") or 0
        if 400 <= status < 500 and rec.get("attempts"):  # the server's answer: the proxy's own refusals never sent it
            self.refusal = rec
        elif status < 400 and self.refusal and rec["t"] >= self.refusal["t"] + (self.refusal.get("latency_s") or 0):
            self.refusal = None  # a call made after the refusal went through: the agent got past it


def refusal_error(rec: dict) -> str:
    """A server's refusal of an agent's call, in words: its own message (from the provider's JSON error shape)."""
    text = str(rec.get("error") or "")
    try:
        body = json.loads(text)
        err = body.get("error") if isinstance(body, dict) else None
        text = (err.get("message") if isinstance(err, dict) else None) or body.get("message") or text
    except (ValueError, AttributeError):
        pass  # cut at 500 characters, or not JSON: the text as it is
    return f"the driver's server refused the agent's call (HTTP {rec.get('status')} on {rec.get('endpoint')}): {text}"


@dataclass
class RunningAgent:
    """A started agent and what it is registered with."""
    workspace: Path
    token: str
    deadline: float
    baseline_score: float | None
    interactive: bool
    process: sandbox.AgentProcess
    started: float
    grader: Any                     # the task's grading deployment handle
    argv: list[str]
    env: dict
    spawn: Callable[[list[str], dict], sandbox.AgentProcess]   # (re)starts it in its sandbox
    judge_agreement: dict | None = None  # the task's LLM judge asked twice on a sample: how often it agreed
    budget_deadline: float = 0.0    # the deadline the wall-time budget set (deadline moves with working time)
    close_side: Callable[[], None] = lambda: None  # what its agent side opened for it (the release's relay)

    def __post_init__(self) -> None:
        self.budget_deadline = self.budget_deadline or self.deadline


def start_attempt(cell: CellSpec, layout: Layout) -> Attempt:
    number = layout.new_attempt(cell.cell_id)
    attempt = Attempt(cell, layout, number, time.time())
    # the node it runs on: on a cluster, what a dead or bad node's cells have in common
    node = {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address()}
    write_json_durably(attempt.dir / ATTEMPT, {"started_at": attempt.started, "attempt": number, **node})
    attempt.report(started_at=attempt.started, events=[status_event(cell.cell_id, number, 0.0, RUNNING)])
    return attempt


def unstarted(attempt: Attempt, error: str) -> Outcome:
    """A cell whose agent cannot start (its CLI is not installed) ends as infra_error, reported as an outcome
    rather than raised: Tune's retry would only fail the same way. `rerun_errored=true` runs it once installed."""
    return Outcome(status=INFRA_ERROR, limit_hit=None, exit_code=None, error=error, best_score=None,
                   baseline_score=None, n_submissions=0, started_at=attempt.started, ended_at=time.time(),
                   details={"agent_started": False})


def start_agent(attempt: Attempt, kind: AgentKind, session: AgentSession | None, opts: CellOptions) -> RunningAgent:
    """The cell's agent side (orchestrator/agent_sides: a2rl's, or the release's for a paper cell's CLI) makes the
    workspace and says the environment, grading endpoint and launch; then the run is registered with the grader (in
    the side's grading API) and the driver proxy, and the agent started in its sandbox."""
    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name

    cell, layout = attempt.cell, attempt.layout
    side = agent_side(cell)
    task = cell_task(cell.task, layout.cache_dir)  # what the cell reads of its task, once
    base_model = resolve_base_model(cell.task.base_model, layout.models_cache)
    grader = serve.get_app_handle(app_name(cell.task_name, opts.scope))
    token = secrets.token_urlsafe(24)
    settings = sandbox.Settings.from_cfg(opts.sandbox)
    hidden, readonly = sandbox_paths_hiding(layout, task.hidden_paths)
    check = sandbox.preflight_command(opts.sandbox.get("preflight"), cell.budget.gpus, opts.emulated)
    if opts.sandboxed and check:  # raises PreflightFailed: an infra error, retried, no budget spent yet
        sandbox.preflight(check, {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
                                  **{k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}},
                          hidden=hidden, readonly=readonly, settings=settings, cell_id=cell.cell_id)
    # a judged task's baseline is scored once, before any cell's budget starts
    answer(grader.ensure_baseline.remote(), opts.eval_timeout_s + opts.service_timeout_s,
           f"the grader of {cell.task_name} (its baseline)")
    budget_started = time.time()  # the budget starts now: the one reading of it the side and the grader get
    deadline = budget_started + cell.budget.wall_time_s
    workspace = layout.workspace(cell.cell_id, attempt.number)
    argv, code_files = kind.command(cell.agent, task.prompt_file)
    opened = side.open(CellStart(
        cell=cell, workspace=workspace, cache_dir=layout.cache_dir, base_model=base_model, code_files=code_files,
        grading_url=f"{opts.grading_url}/{cell.task_name}", token=token, started=attempt.started,
        budget_started=budget_started, deadline=deadline, task=task, sandbox=settings))
    env, readonly = opened.env, readonly + opened.readonly
    forward = sorted({*reachable(opts), *opened.forward})
    try:
        if session is not None:  # the per-cell driver key (the real one stays in the proxy); a CLI's command line
            assert opts.driver_url is not None  # a cell with a driver runs in a sweep with the driver proxy
            argv = session.start(workspace, env, opts.driver_url, attempt.dir / DRIVER_CALLS, argv, opts.scope,
                                 opened.launch)
            readonly += session.readonly_paths(hidden)
        registered = answer(grader.register_run.remote(token, RunRegistration(
            cell_id=cell.cell_id, workspace=str(workspace), records_dir=str(attempt.dir),
            code_repo=str(layout.code_repo(cell.cell_id)), started_at=attempt.started, deadline=deadline,
            max_submissions=cell.budget.max_submissions,
            # what a2rl wrote, as it was before the agent started: given text, never evidence of contamination
            given=given_digests(workspace),
            driver_key=session.key if session is not None else None,  # /status shows its tokens
            # the side's grading API, with what the release's /time and /health say
            api=side.api, budget_started_at=budget_started,
            timeout_s=int(cell.budget.wall_time_s),
            gpus=tuple(g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()))),
            opts.eval_timeout_s + opts.service_timeout_s, f"the grader of {cell.task_name} (registering the run)")

        def spawn(argv: list[str], env: dict) -> sandbox.AgentProcess:
            return sandbox.start(argv, workspace, env, attempt.dir / "agent.stdout", attempt.dir / "agent.stderr",
                                 sandboxed=opts.sandboxed, hidden=hidden, readonly=readonly, settings=settings,
                                 cell_id=cell.cell_id, forward=forward,
                                 memory_bytes=settings.memory_bytes(cell.budget), network_log=attempt.dir / NETWORK,
                                 home=opened.home, stdin=session.stdin if session is not None else None)
        process = spawn(argv, env)
    except BaseException:
        if session is not None:
            session.close()
        opened.close()
        raise
    return RunningAgent(workspace, token, deadline, registered["baseline_score"], task.interactive, process,
                        time.time(), grader, argv, env, spawn, registered.get("judge_agreement"),
                        close_side=opened.close)


def restart(attempt: Attempt, agent: RunningAgent, records: Records, opts: CellOptions) -> None:
    """Start the agent again in its workspace with a continuation prompt (orchestrator/reprompt.py), on the same
    key, grader run and deadline. What its last session left running is killed first."""
    agent.process.kill_group(opts.kill_grace_s)
    agent.process.close()
    session, budget, now = records.session, attempt.cell.budget, time.time()
    n = records.reprompts + 1
    text = reprompt.continuation(budget, n, agent.deadline - now, records.submissions, records.best,
                                 agent.baseline_score, session.usage() if session is not None else None)
    (agent.workspace / reprompt.PROMPT_FILE).write_text(text)
    env = {**agent.env, "A2RL_REPROMPT": str(n)}
    argv = session.command(agent.workspace, env, text) if session is not None and session.adapter else agent.argv
    append_jsonl(attempt.dir / REPROMPTS, {  # durable before the agent runs again
        "t": now, "n": n, "time_left_s": agent.deadline - now, "submissions": records.submissions,
        "best_score": records.best, "prompt": text})
    agent.process = agent.spawn(argv, env)


def watch(attempt: Attempt, agent: RunningAgent, records: Records) -> tuple[int | None, Limit | None, str | None]:
    """Report what the records say until the agent exits (its exit code), a budget ends it (which one), or it hits
    a resource limit of its sandbox (which, in words)."""
    budget = attempt.cell.budget
    while True:
        events = records.new_events()
        if events:
            attempt.report(events=events, baseline_score=agent.baseline_score, best_score=records.best,
                           n_submissions=records.submissions)
        exit_code = agent.process.poll()
        if exit_code is not None:
            if events := records.new_events():  # what it did last (a re-prompt's decision reads the counts)
                attempt.report(events=events, baseline_score=agent.baseline_score, best_score=records.best,
                               n_submissions=records.submissions)
            return exit_code, None, None
        if budget.working_time and agent.budget_deadline + records.waited_s > agent.deadline:
            agent.deadline = agent.budget_deadline + records.waited_s  # the rate limits' waits do not count
            answer(agent.grader.extend_run.remote(agent.token, agent.deadline), 60, "the grader (moving the deadline)")
        if time.time() >= agent.deadline:
            return None, "wall_time", None
        if resource := agent.process.limit_hit():
            return None, None, resource
        if records.submissions >= budget.max_submissions:
            return None, "submissions", None
        if records.session is not None and (limit := records.session.limit_hit(records.driver_calls)):
            return None, limit, None  # tokens or cost, as the driver proxy counts them
        time.sleep(POLL_S)


def stop(attempt: Attempt, agent: RunningAgent, session: AgentSession | None, opts: CellOptions) -> dict:
    """Kill the agent's whole process group, close its driver key, grader run and environment sessions; returns
    what that leaves to record (evaluations still running, the run's use of the environment)."""
    cell_id = attempt.cell.cell_id
    agent.process.kill_group(opts.kill_grace_s)  # also when the agent exited: its children may live on
    left: dict = {"resource_limit": agent.process.limit_hit(final=True)}  # e.g. the kernel's OOM kill ended it
    agent.process.close()
    agent.close_side()
    if session is not None:
        try:  # the key stops working; calls still in flight land in the records first
            session.close()
        except Exception as e:  # the calls are recorded already; this must not turn a result into an error
            print(f"[a2rl] closing the driver key of {cell_id} failed: {e!r}", file=sys.stderr)
    try:  # evaluations still running get eval_timeout_s, then the held-out final score is taken (as long again)
        closed = answer(agent.grader.close_run.remote(agent.token, opts.eval_timeout_s),
                        2 * opts.eval_timeout_s + opts.service_timeout_s,
                        f"the grader of {cell_id} (closing the run)")
        left["evaluations_unfinished"], left["final"] = closed["unfinished"], closed["final"]
        left["contamination"] = closed["contamination"]
    except Exception as e:  # the outcome must still be recorded: the agent's result is not lost with the grader
        print(f"[a2rl] {e}", file=sys.stderr)
        left["evaluations_unfinished"] = None
        left["grader_error"] = str(e)
    if agent.interactive:  # the run's environment sessions end with it
        from envs.rollout_service import close_run as close_sessions

        try:
            left["env_usage"] = close_sessions(attempt.cell.task_name, agent.token, opts.service_timeout_s,
                                               opts.scope)
        except Exception as e:  # idle sessions expire anyway; this must not turn a result into an infra error
            print(f"[a2rl] closing the rollout sessions of {cell_id} failed: {e!r}", file=sys.stderr)
    return left


def outcome_of(attempt: Attempt, agent: RunningAgent, records: Records, exit_code: int | None, limit: Limit | None,
               agent_ended: float, left: dict) -> Outcome:
    session = records.session
    if limit is None and records.submissions >= attempt.cell.budget.max_submissions:
        limit = "submissions"  # the agent used its last submission and stopped: the budget ended it
    if limit is None and session is not None and session.final_usage is not None:
        limit = session.limit_hit(records.driver_calls)  # it stopped on a refused call: the budget ended it
    resource = left.get("resource_limit")
    status: Status
    if resource is not None:  # the sandbox's limits, not the budget: the agent's fault
        status, limit = AGENT_ERROR, None
    elif limit is not None:
        status = BUDGET_EXHAUSTED
    else:
        status = COMPLETED if exit_code == 0 else AGENT_ERROR
    error = None
    if resource is not None:
        error = resource
    elif status == AGENT_ERROR:
        stderr = attempt.dir / "agent.stderr"
        tail = stderr.read_text(errors="replace")[-2000:] if stderr.exists() else ""
        error = f"agent exited with code {exit_code}: {tail.strip()[-500:]}"
        if records.refusal is not None:  # the reason is the server's (e.g. max_tokens beyond the model's window)
            error = f"{refusal_error(records.refusal)}; {error}"
    ended = time.time()
    env_usage = left.get("env_usage")
    return Outcome(status=status, limit_hit=limit, exit_code=exit_code, error=error, best_score=records.best,
                   baseline_score=agent.baseline_score, n_submissions=records.submissions,
                   started_at=attempt.started, ended_at=ended, details={
                       "workspace": str(agent.workspace), "evaluations_unfinished": left["evaluations_unfinished"],
                       # the cell's own overhead: before the agent ran, and after it stopped (kill, waiting on grading)
                       "setup_s": agent.started - attempt.started, "teardown_s": ended - agent_ended,
                       # working vs waiting on the driver's rate limits (working_time: only the first counts)
                       "waiting_s": records.waited_s, "working_s": agent_ended - agent.started - records.waited_s,
                       **({"resource_limit": resource} if resource else {}),
                       **({"reprompts": records.reprompts} if attempt.cell.budget.max_reprompts else {}),
                       **({"grader_error": left["grader_error"]} if left.get("grader_error") else {}),
                       **({"final": left["final"]} if left.get("final") else {}),
                       # hidden eval items in what the agent wrote: at a submission, or in what it left at the end
                       "contaminated": bool(records.contaminated or left.get("contamination")),
                       **({"judge_agreement": agent.judge_agreement} if agent.judge_agreement else {}),
                       "contamination": left.get("contamination"),
                       **(session.summary() if session is not None else {}),
                       **({"env_usage": env_usage} if env_usage is not None else {})})


def a2rl_bug(attempt: Attempt, e: BaseException) -> Outcome:
    """An unexpected exception in a2rl's own code: the cell ends once as infra_error marked a2rl_bug, with the
    traceback in its outcome (not retried: it would fail the same way, and read like a flaky machine)."""
    import traceback

    where = attempt.dir / OUTCOME
    return Outcome(status=INFRA_ERROR, limit_hit=None, exit_code=None,
                   error=f"a2rl bug (not retried): {type(e).__name__}: {str(e)[:300]}; traceback in {where}",
                   best_score=None, baseline_score=None, n_submissions=0, started_at=attempt.started,
                   ended_at=time.time(), details={"a2rl_bug": True, "traceback": "".join(
                       traceback.format_exception(type(e), e, e.__traceback__))[-20000:]})


def run_cell(config: dict) -> None:
    cell = CellSpec.from_dict(config["cell"])
    opts = CellOptions.from_dict(config["opts"])
    registry.search(*opts.imports)  # the user's own task classes and agent kinds, in this worker too
    attempt = start_attempt(cell, Layout.from_dict(config["layout"]))
    try:
        run_attempt(attempt, opts)
    except Exception as e:
        if is_infrastructure(e):
            raise  # Tune runs the cell again (cluster.max_retries)
        attempt.finish(a2rl_bug(attempt, e))


def run_attempt(attempt: Attempt, opts: CellOptions) -> None:
    cell = attempt.cell
    kind = agent_kind(cell.agent.kind)
    try:  # an LLM-driven agent: its CLI must be installed before anything is registered or spent
        session = kind.session(cell, list(opts.cli_path or []))
    except CliUnavailable as e:
        return attempt.finish(unstarted(attempt, str(e)))
    agent = start_agent(attempt, kind, session, opts)
    records = Records(attempt, session)
    exit_code, limit, resource, left = None, None, None, {}
    try:
        exit_code, limit, resource = watch(attempt, agent, records)
        while reprompt.due(cell.budget, exit_code, limit, resource, deadline=agent.deadline,
                           reprompts=records.reprompts, submissions=records.submissions,
                           driver_spent=lambda: session is not None and session.limit_hit(records.driver_calls)
                           is not None):
            restart(attempt, agent, records, opts)
            records.reprompts += 1  # its record line is read back as an event; this counts it now
            exit_code, limit, resource = watch(attempt, agent, records)
    finally:
        agent_ended = time.time()
        left = stop(attempt, agent, session, opts)
        left["resource_limit"] = resource or left["resource_limit"]
    events = records.new_events(final=True)
    if events:
        attempt.report(events=events, baseline_score=agent.baseline_score, best_score=records.best,
                       n_submissions=records.submissions)
    outcome = outcome_of(attempt, agent, records, exit_code, limit, agent_ended, left)
    attempt.finish(outcome, baseline_score=agent.baseline_score, best_score=records.best,
                   n_submissions=records.submissions)
