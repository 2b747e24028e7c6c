"""The Grader deployment of the grading service (evaluators/service.py): the agent-facing API and the runs' books.

  POST /submit {"model_path"}   evaluate a model directory on the hidden eval split (Authorization: Bearer TOKEN)
  GET  /status                  time, submissions, best so far for the caller's run (and its driver's tokens and
                                cost when it has one, as the driver proxy meters them)
  GET  /health

Each run is answered in the grading API its agent side registered it with (evaluators/grading_api.py): a2rl's, or
the release's (RD-Agent's autorl_bench core/server.py, rdagent 1.0.0: its /submit body and answer keys, its cache of
an unchanged resubmission, GET /time, GET /health with the run's token, scores.json and run_meta.json kept in the
workspace; the token is still required: the cell's grading relay adds it). /submit is one front door either way.

It holds no model: evaluations go to the Evaluator replicas (evaluators/evaluator.py), and the end of a run is
evaluators/run_closing.py. Every submission is appended (fsync) to the cell's record file before the answer is sent.
"""
# (no `from __future__ import annotations`: FastAPI must see the real Request type through Serve's ingress)

import asyncio
import dataclasses
import functools
import logging
import os
import secrets
import shutil
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
import ray
from ray import serve

from contracts.evaluation import Evaluation
from contracts.refusals import STATUS, Refusal, answer_refusals
from contracts.runs import FinalCandidate, Run, RunRegistration, run_token
from contracts.screening import withheld
from contracts.task_spec import TaskSpec
from evaluators.run_closing import FINAL_CANDIDATES, RunClosing
from evaluators.submissions import CopyLimits, private_copy
from evaluators.grading_api import Submission, grading_api

log = logging.getLogger("a2rl.grader")
SUBMITTED = "submitted"  # in the cell's records folder, while a submission is graded: the private copy it is read from
api = FastAPI(title="a2rl grading API")
answer_refusals(api)  # a route that raises a Refusal answers with its status and body


async def driver_status(key: str, scope: str) -> dict:
    """The run's LLM use so far, from the driver proxy's meter (the one that enforces the budget)."""
    from contracts.serving import DRIVER_PROXY_APP, scoped

    try:
        usage = await serve.get_app_handle(scoped(DRIVER_PROXY_APP, scope)).usage.remote(key)
    except Exception as e:  # noqa: BLE001 - /status must answer even when the proxy cannot
        return {"driver_error": f"the driver proxy did not answer: {type(e).__name__}"}

    def left(limit, used):
        return None if limit is None else max(0.0, limit - used)

    return {"tokens_used": usage["total_tokens"], "max_tokens": usage["max_tokens"],
            "remaining_tokens": left(usage["max_tokens"], usage["total_tokens"]),
            "cost_usd": usage["cost_usd"], "max_cost_usd": usage["max_cost_usd"],
            "remaining_cost_usd": left(usage["max_cost_usd"], usage["cost_usd"]), "driver_calls": usage["calls"]}


# What an evaluation lost with its replica's process raises (a kill, the out-of-memory killer, its node gone)
INFRA_FAULTS = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError,
                ray.exceptions.NodeDiedError)


# Everything the deployment class uses is defined above it: Serve pickles a class when it is decorated.

# A replica answers Serve's health check within 120 s, not Serve's 30: on a machine busy with training a check can
# wait that long, and a replica marked unhealthy is restarted with its evaluations lost (a crash is seen at once).
@serve.deployment(max_ongoing_requests=256, health_check_period_s=10, health_check_timeout_s=120)
@serve.ingress(api)
class Grader(RunClosing):
    """The agent-facing API and the runs' bookkeeping; evaluations go to the Evaluator replicas. It holds no model,
    so the process that the out-of-memory killer or a GPU fault takes is an evaluator's, and this one retries the
    evaluation there (infra_retries times) instead of answering the agent with a 5xx."""

    def __init__(self, evaluator, spec: TaskSpec, scope: str = ""):
        from contracts.runs import registry

        self.evaluator = evaluator
        self.spec = spec
        self.scope = scope  # its sweep's: the run registry and driver proxy it asks
        self.registry = registry(scope)
        self.base: dict | None = None  # the evaluators' info once the baseline is scored
        # submissions being graded under an API that caches answers (the release's), by (token, cache key): the same
        # folder sent again meanwhile waits for its answer, as the release's evaluation lock and second look at its
        # cache make it
        self.grading: dict[tuple[str, str], asyncio.Event] = {}
        self.writing = asyncio.Lock()  # one writer of a workspace's files at a time: the last written is the newest

    # -- orchestrator side (deployment handle) ------------------------------------------------------------------
    async def ensure_baseline(self) -> dict:
        """The base model's score, scored once (a judged task's before any cell's budget starts)."""
        if self.base is None:
            self.base = await self.evaluator.scored_baseline.remote()
        return self.base

    async def register_run(self, token: str, run: RunRegistration) -> dict:
        base = await self.ensure_baseline()
        await self.registry.register.remote(token, run)
        return base

    async def extend_run(self, token: str, deadline: float) -> None:
        await self.registry.extend.remote(token, deadline)

    # -- agent side (HTTP) --------------------------------------------------------------------------------------
    @api.get("/health")
    async def health(self, request: Request) -> dict:
        base = self.base or await self.evaluator.info.remote()
        run = await self._open_run(request)  # no token, or another's: a2rl's answer (/health never refuses)
        return grading_api(run.api if run is not None else "a2rl").health(self.spec, run, base)

    @api.get("/time")
    async def time_left(self, request: Request):
        run = await self._run(request)
        return grading_api(run.api).time_left(run)

    @api.get("/status")
    async def status(self, request: Request):
        run = await self._run(request)
        now = time.time()
        answer = {"task": self.spec.name, "elapsed_s": now - run.started_at,
                  "remaining_s": max(0.0, run.deadline - now), "submissions_used": run.used,
                  "remaining_submissions": run.remaining_submissions, "evaluating": run.inflight,
                  "best": run.best, "baseline_score": (self.base or {}).get("baseline_score")}
        if run.driver_key:
            answer.update(await driver_status(run.driver_key, self.scope))
        return answer

    @api.post("/submit")
    async def submit(self, request: Request):
        """The one front door: the run's grading API reads the body, may answer from its cache, and shapes the
        answer (and the refusals) of the submission it counts and grades."""
        received = time.time()
        token = run_token(request)
        run = await self._run(request, token)
        shape = grading_api(run.api)
        try:
            asked = await shape.read(request, run)
            if not isinstance(asked, Submission):
                return asked  # refused in the API's own words
            key = await shape.cache_key(self, run, asked)
            while key is not None:  # the same folder sent again while graded waits for its answer (then the cache)
                cached = await self.registry.cached_answer.remote(token, key)
                if cached is not None:
                    return cached  # nothing counted, nothing recorded
                pending = self.grading.get((token, key))
                if pending is None:
                    self.grading[(token, key)] = asyncio.Event()
                    break
                await pending.wait()
            try:
                answer = functools.partial(shape.answer, self, token, key, asked, received)
                return await self._take(token, run, asked.model_dir, asked.model_path, received, asked.final, answer,
                                        asked.extra)
            finally:
                if key is not None:
                    self.grading.pop((token, key)).set()
        except Refusal as e:
            return shape.refused(e)

    async def _take(self, token: str, run: Run, model_dir: Path, given_path: str, received: float, final: bool,
                    answer, extra: dict | None = None):
        """Count and grade the submission of `model_dir` (checked already); answer(record) shapes the answer (the
        run's grading API's), extra: more for its record."""
        if received >= run.deadline:
            raise Refusal("budget_exhausted", "time budget exhausted")
        if run.counted >= run.max_submissions:
            raise Refusal("budget_exhausted", f"submission budget exhausted ({run.max_submissions} used)")
        await self.ensure_baseline()
        # From here on the grader reads only its own copy, taken through what it checked (evaluators/submissions.py)
        request_id = secrets.token_hex(8)
        private = Path(run.records_dir) / SUBMITTED / request_id
        try:
            await asyncio.to_thread(private_copy, Path(run.workspace), model_dir, private, CopyLimits(
                self.spec.grader.submission_max_files, int(self.spec.grader.submission_max_gb * 1e9)))
            # a request id: the registry answers a retried reservation (its own restart) with the same submission
            submission_id, refusal = await self.registry.reserve.remote(token, request_id)
            if refusal is not None:
                raise refusal
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, private, True)
            raise
        # shielded: an agent that hangs up (a client timeout) does not cancel the evaluation it was counted for
        return await asyncio.shield(self._grade(token, run, submission_id, private, given_path, received, final,
                                                answer, extra))

    # -- internals ----------------------------------------------------------------------------------------------
    async def _run(self, request: Request, token: str | None = None) -> Run:
        token = token or run_token(request)
        run = await self.registry.get.remote(token)
        if run is None:
            raise Refusal("invalid_token", "unknown or expired run token")
        return run

    async def _open_run(self, request: Request) -> Run | None:
        """The caller's open run (None without a token or with an unknown one)."""
        try:
            token = run_token(request)
        except Refusal:
            return None
        return await self.registry.get.remote(token)

    async def _grade(self, token: str, run: Run, submission_id: int, model_dir: Path, given_path: str,
                     received: float, final: bool, answer, extra: dict | None = None):
        """Grade the private copy `model_dir`, and remove it (unless it became the final candidate)."""
        try:
            return await self._grade_copy(token, run, submission_id, model_dir, given_path, received, final, answer,
                                          extra)
        finally:
            await asyncio.to_thread(shutil.rmtree, model_dir, True)

    async def _grade_copy(self, token: str, run: Run, submission_id: int, model_dir: Path, given_path: str,
                          received: float, final: bool, answer, extra: dict | None = None):
        from contracts.code_snapshots import snapshot_code

        commit = None
        try:
            commit = await asyncio.to_thread(snapshot_code, Path(run.workspace) / "code", Path(run.code_repo),
                                             f"submission {submission_id}")
        except Exception as e:  # a broken snapshot must not cost the agent its submission
            log.warning("code snapshot failed for %s: %s", run.cell_id, e)
        result = await self._evaluate(f"evaluation {submission_id} of {run.cell_id}", str(model_dir), run.cell_id,
                                      run.records_dir, "eval", None, run.workspace, run.given)
        if isinstance(result, Refusal):
            await self.registry.cancel.remote(token, submission_id)
            why = result  # said of the folder the agent named, not of the grader's private copy
            raise Refusal(why.code, why.message.replace(str(model_dir), given_path).replace(model_dir.name, given_path))
        if withheld(result.metrics, result.flags):  # judged answers screened as a null model's or aimed at the judge,
            result = dataclasses.replace(result, score=None)  # under a protocol that does not count them: no score
        best, still_open = await self.registry.finish.remote(token, submission_id, result.score, result.refunded,
                                                             "infra_error" not in result.flags)
        if not still_open:  # the cell ended and gave this evaluation up (recorded as an infra error then)
            raise Refusal("infra_error", "your run ended while this submission was evaluated")
        after = await self.registry.peek.remote(token) or run
        try:
            record = self._record(after, submission_id, best, received, given_path, result, commit, extra)
        except OSError as e:  # e.g. the output disk is full: the agent hears it, the sweep stops on its ledger
            log.error("could not record submission %d of %s: %s", submission_id, run.cell_id, e)
            raise Refusal("infra_error", f"the grader could not record your submission: {e}") from None
        if "infra_error" in record["flags"]:
            return JSONResponse(status_code=STATUS["infra_error"], content={**record, "code": "infra_error"})
        if record["score"] is not None and self.base and self.base["n_final"]:
            await self._keep_final_candidate(token, after, record, model_dir, final)
        return await answer(record)

    async def _evaluate(self, what: str, *args) -> Evaluation | Refusal:
        """Evaluator.evaluate(*args), asked again of a live replica when its process dies (infra_retries times)."""
        result = Evaluation()
        for attempt in range(1 + self.spec.grader.infra_retries):
            try:
                return await self.evaluator.evaluate.remote(*args)
            except INFRA_FAULTS as e:  # its replica died: Serve starts another, and the evaluation is asked again
                fault = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log.warning("%s lost (try %d): %s", what, attempt + 1, fault)
                result = Evaluation.lost(f"the grader's evaluation process died {attempt + 1} time(s): {fault}")
            except Exception as e:  # noqa: BLE001 - the evaluator's own bug: a record, not a 500
                log.exception("%s raised", what)
                return dataclasses.replace(Evaluation.lost(f"evaluation failed: {type(e).__name__}: {e}"),
                                           refunded=False, flags=["eval_failed"])
        return result

    async def _keep_final_candidate(self, token: str, run: Run, record: dict, model_dir: Path, marked: bool) -> None:
        """Keep a copy of the submission the held-out score will be taken on (the last one marked final, else the
        best so far), so the agent may overwrite its directory afterwards. Copied before the agent is answered."""
        held = run.final
        if not marked and (held is not None and (held.marked or held.score >= record["score"])):
            return
        keep = Path(run.records_dir) / FINAL_CANDIDATES / str(record["submission_id"])
        try:  # the private copy it was scored from becomes the candidate
            keep.parent.mkdir(exist_ok=True)
            await asyncio.to_thread(os.replace, model_dir, keep)
        except OSError as e:  # the held-out score then falls to the last kept candidate
            log.error("could not keep submission %d of %s for its final score: %s", record["submission_id"],
                      run.cell_id, e)
            return
        await self.registry.set_final.remote(token, FinalCandidate(
            submission_id=record["submission_id"], marked=marked, score=record["score"], digest=record["digest"],
            path=str(keep), model_path=record["model_path"]))
        if held is not None:
            await asyncio.to_thread(shutil.rmtree, held.path, True)

    def _record(self, run: Run, submission_id: int, best: float | None, received: float, given_path: str | None,
                result: Evaluation, commit: str | None = None, extra: dict | None = None) -> dict:
        """The submission's record, appended (fsync) to the cell's record file before anyone is answered."""
        from contracts.records import SUBMISSIONS, append_jsonl

        now, baseline, score = time.time(), (self.base or {}).get("baseline_score"), result.score
        record = {
            "submission_id": submission_id, "t": now, "received_at": received, "model_path": given_path,
            "score": score, "baseline_score": baseline,
            "improvement": None if score is None or baseline is None else score - baseline, "best": best,
            "total_submissions": submission_id, "remaining_submissions": run.remaining_submissions,
            "elapsed_s": now - run.started_at, "eval_s": result.eval_s, "flags": result.flags,
            "error": result.error, "digest": result.digest, "code_commit": commit,
            "backend": result.backend,  # what decoded its replies: transformers and vLLM's numerics differ
        }
        if result.metrics:
            record["metrics"] = result.metrics  # e.g. a win rate beside the LC one, the success rate beside reward
        if result.approximations:
            record["approximations"] = result.approximations  # why it is flagged approximate, one line each
        if result.judge_usage is not None or result.refunded:
            record["judge_usage"] = result.judge_usage  # tokens and cost of the evaluation's judge (None: none)
        if result.refunded:
            record["refunded"] = True
        if result.contamination:
            record["contamination"] = result.contamination  # never in the agent's answer: it would name items
        if result.identity:  # its distances to the base and the known models (evaluators/identity.py)
            record["identity"] = result.identity
        if result.known_checkpoint:
            record["known_checkpoint"] = result.known_checkpoint
        if result.contamination_scan:
            record["contamination_scan"] = result.contamination_scan  # e.g. "scan truncated: more than ..."
        if extra:
            record.update(extra)  # e.g. the gpu a release run's agent asked for
        append_jsonl(Path(run.records_dir) / SUBMISSIONS, record)  # durable before the answer
        return record
