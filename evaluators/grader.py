"""The Grader deployment of the grading service (evaluators/service.py): the agent-facing API and the runs' books.

  POST /submit {"model_path"}   evaluate a model directory on the hidden eval split (Authorization: Bearer TOKEN)
  GET  /status                  time, submissions, best so far for the caller's run (and its driver's tokens and
                                cost when it has one, as the driver proxy meters them)
  GET  /health

A run registered with api="paper" is answered as the original benchmark's grading server answers (RD-Agent's
autorl_bench core/server.py, rdagent 1.0.0): POST /submit {"model_path", "gpu"?} with its answer keys first (a2rl's
follow), an unchanged resubmission answered from its cache, GET /time, GET /health with the run's token, and
scores.json and run_meta.json kept in the workspace. The token is still required: the cell's grading relay adds it.

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
from datetime import datetime
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
import ray
from ray import serve

from contracts.evaluation import Evaluation
from contracts.refusals import STATUS, Refusal, answer_refusals
from contracts.runs import FinalCandidate, Run, RunRegistration, run_token
from contracts.screening import withheld
from contracts.specs import ConfigError
from contracts.task import task_class
from contracts.task_spec import TaskSpec
from evaluators.run_closing import FINAL_CANDIDATES, RunClosing
from evaluators.submissions import CopyLimits, cache_key, private_copy, resolve_model_path
from evaluators.workspace_files import run_meta, write_run_meta, write_scores

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


# -- the original's grading API (api="paper") ---------------------------------------------------------------------
# The keys of the original's /submit answer (an answer's other keys are a2rl's, after them)
PAPER_KEYS = ("submission_id", "timestamp", "model_path", "score", "baseline_score", "improvement", "elapsed_seconds",
              "error", "best", "total_submissions")
GRADER_GPU = {"evaluated_on": "grader"}  # said when a gpu was asked for: a2rl evaluates on the grader's own GPUs


def as_sent(answer: dict) -> dict:
    """The original's answer in the order its agent receives the keys: Flask's jsonify sorts them (its JSON
    provider's sort_keys), in nested objects too. (Its scores.json and run_meta.json keep the order it builds.)"""
    return {k: as_sent(v) if isinstance(v, dict) else v for k, v in sorted(answer.items())}


def gpu_order(gpu: str):
    """The original sorts GPUs with key=int; a GPU named by UUID (also valid in CUDA_VISIBLE_DEVICES) goes last."""
    return (0, int(gpu), "") if gpu.isdigit() else (1, 0, gpu)


def gpu_error(gpu: str, available: set[str]) -> str | None:
    """Why a requested `gpu` ("0", "0,1") is refused, in the original's words (its _validate_gpu); None: valid."""
    requested = {g.strip() for g in gpu.split(",") if g.strip()}
    if not requested:
        return "gpu parameter is empty"
    invalid = requested - available
    if invalid:
        return f"GPU {invalid} not in available GPUs {sorted(available)} (from CUDA_VISIBLE_DEVICES)"
    return None


def invalid_request(refusal: Refusal) -> JSONResponse:
    """A path the original refuses with its ValueError: its 400 "Invalid request", then a2rl's reason."""
    return JSONResponse(status_code=400, content={"error": "Invalid request", "detail": refusal.message,
                                                  "code": refusal.code})


def paper_entry(record: dict, received: float) -> dict:
    """The original's scores.json entry for a graded submission's record. A failed evaluation (a2rl records no
    score) is the original's 0.0 with its error."""
    score = 0.0 if record["score"] is None else record["score"]
    baseline = record["baseline_score"]
    entry = {"submission_id": record["submission_id"],
             "timestamp": datetime.fromtimestamp(record["t"]).isoformat(), "model_path": record["model_path"],
             "score": score, "baseline_score": baseline,
             "improvement": None if baseline is None else round(score - baseline, 6),
             "elapsed_seconds": round(record["t"] - received, 2)}
    if record["error"]:
        entry["error"] = record["error"]
    return entry


def a2rl_extras(record: dict) -> dict:
    """What a2rl's answer says beside the original's keys (never a key the original gives another meaning)."""
    return {k: v for k, v in a2rl_answer(record).items() if k not in PAPER_KEYS}


def a2rl_answer(record: dict) -> dict:
    """A submission's answer in a2rl's shape: its record, less what the contamination check found (told to the
    agent, it would say which of the texts it planted are hidden items: an oracle for the eval split)."""
    return {**{k: v for k, v in record.items() if k != "contamination"},
            "flags": [f for f in record["flags"] if f != "contamination"]}


def paper_meta(run: Run) -> dict:
    """run_meta.json as the registry knows the run (never read back from the agent's workspace)."""
    start = run.started_at if run.budget_started_at is None else run.budget_started_at
    return run_meta(int(start), run.timeout_s, run.last_submit_time)


def original_benchmark(spec: TaskSpec) -> str:
    """The name the original's server answers with (the agent's $TASK, e.g. alfworld for alfworld_small); a2rl's
    task name for a class the original does not have (or a user's class this process cannot import)."""
    try:
        return task_class(spec.cls).original_benchmark or spec.name
    except ConfigError:
        return spec.name


# What an evaluation lost with its replica's process raises (a kill, the out-of-memory killer, its node gone)
INFRA_FAULTS = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError,
                ray.exceptions.NodeDiedError)


# Everything the deployment class uses is defined above it: Serve pickles a class when it is decorated.

@serve.deployment(max_ongoing_requests=256, health_check_period_s=10)
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
        # a paper run's submissions being graded, by (token, cache key): the same folder sent again meanwhile waits
        # for its answer, as the original's evaluation lock and second look at its cache make it
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
        extras = {"baseline_score": base["baseline_score"]}
        run = await self._paper_run(request)
        if run is None:  # no token, another's, or an a2rl run's: a2rl's answer
            return {"status": "ok", "task": self.spec.name, **extras}
        task = original_benchmark(self.spec)
        return {**as_sent({"status": "ok", "task": task, "workspace": run.workspace,
                           "available_gpus": sorted(run.gpus, key=gpu_order)}), **extras}

    @api.get("/time")
    async def time_left(self, request: Request):
        """The original's time and budget signal, from the registry (run_meta.json is the agent's to overwrite)."""
        run = await self._run(request)
        if run.api != "paper":
            return JSONResponse(status_code=404, content={"detail": "Not Found"})  # as before there was a /time
        meta, now = paper_meta(run), int(time.time())
        start, timeout_s = meta["start_time"], meta["timeout_s"]
        remaining = max(timeout_s - (now - start), 0) if isinstance(timeout_s, int) else None
        return as_sent({**meta, "now": now, "remaining": remaining})

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
        received = time.time()
        token = run_token(request)
        run = await self._run(request, token)
        if run.api == "paper":
            return await self._submit_paper(request, token, run, received)
        try:
            body = await request.json()
        except Exception:
            raise Refusal("bad_request", 'the body must be JSON: {"model_path": "output/<dir>"}') from None
        if not isinstance(body, dict):
            raise Refusal("bad_request", 'the body must be a JSON object with "model_path"')
        model_dir = resolve_model_path(Path(run.workspace), body.get("model_path"))
        final = body.get("final", False)
        if not isinstance(final, bool):
            raise Refusal("bad_request", '"final" must be true or false')
        return await self._take(token, run, model_dir, body["model_path"], received, final)

    async def _take(self, token: str, run: Run, model_dir: Path, given_path: str, received: float, final: bool,
                    answer=None, extra: dict | None = None):
        """Count and grade the submission of `model_dir` (checked already); answer(record) shapes the answer (None:
        a2rl's), extra: more for its record."""
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

    async def _submit_paper(self, request: Request, token: str, run: Run, received: float):
        """POST /submit as the original's server answers it (core/server.py: its checks in its order, its messages,
        its answer keys first, its cache of an unchanged resubmission); a2rl's budget, checks and records stand."""
        try:
            body = await request.json()
        except Exception:
            body = None
        body = body if isinstance(body, dict) else {}
        model_path, gpu = body.get("model_path"), body.get("gpu")
        if not model_path:
            return JSONResponse(status_code=400, content={"error": "Missing model_path"})
        if gpu is not None:
            gpu = str(gpu)
            error = gpu_error(gpu, set(run.gpus))
            if error:
                return JSONResponse(status_code=400, content=as_sent({
                    "error": error, "available_gpus": sorted(run.gpus, key=gpu_order)}))
        try:
            if isinstance(model_path, str) and "\x00" in model_path:  # (the original's first check)
                raise Refusal("bad_request", "model_path must not hold a NUL character")
            model_dir = resolve_model_path(Path(run.workspace), model_path)
        except Refusal as e:
            return invalid_request(e)
        try:
            key = await asyncio.to_thread(cache_key, Path(run.workspace), model_dir,
                                          self.spec.grader.submission_max_files)
        except OSError:  # the workspace went away meanwhile: no cache, and the copy says what is wrong
            key = None
        while key is not None:
            cached = await self.registry.cached_answer.remote(token, key)
            if cached is not None:
                return cached  # nothing counted, nothing recorded
            pending = self.grading.get((token, key))
            if pending is None:
                self.grading[(token, key)] = asyncio.Event()
                break
            await pending.wait()
        try:
            answer = functools.partial(self._paper_answer, token, key, gpu, received)
            return await self._take(token, run, model_dir, model_path, received, False, answer,
                                    None if gpu is None else {"gpu": gpu})
        except Refusal as e:
            if e.status == 400:  # a path the copy refuses (a link out): the original's ValueError
                return invalid_request(e)
            raise
        finally:
            if key is not None:
                self.grading.pop((token, key)).set()

    async def _paper_answer(self, token: str, key: str | None, gpu: str | None, received: float, record: dict):
        """A graded submission's answer in the original's shape, its entry added to the run's list (scores.json),
        the answer kept for an unchanged resubmission when it succeeded, and the workspace's files rewritten."""
        entry = paper_entry(record, received)
        best, total = await self.registry.add_entry.remote(token, entry)
        answer = {**as_sent({**entry, "best": best, "total_submissions": total}), **a2rl_extras(record)}
        if gpu is not None:
            answer.update(GRADER_GPU)
        if key is not None and "error" not in entry:
            await self.registry.cache_answer.remote(token, key, answer)
        await self._write_paper_files(token)
        return answer

    async def _write_paper_files(self, token: str) -> None:
        """scores.json and run_meta.json in the run's workspace, as the registry has them now."""
        async with self.writing:
            run = await self.registry.peek.remote(token)
            try:
                await asyncio.to_thread(write_scores, Path(run.workspace), run.entries)
                await asyncio.to_thread(write_run_meta, Path(run.workspace), paper_meta(run))
            except OSError as e:  # the agent's copy; the records and the answer hold the submission
                log.warning("could not write scores.json or run_meta.json for %s: %s", run.cell_id, e)

    # -- internals ----------------------------------------------------------------------------------------------
    async def _run(self, request: Request, token: str | None = None) -> Run:
        token = token or run_token(request)
        run = await self.registry.get.remote(token)
        if run is None:
            raise Refusal("invalid_token", "unknown or expired run token")
        return run

    async def _paper_run(self, request: Request) -> Run | None:
        """The caller's run when it is an open paper run (None otherwise: /health never refuses)."""
        try:
            token = run_token(request)
        except Refusal:
            return None
        run = await self.registry.get.remote(token)
        return run if run is not None and run.api == "paper" else None

    async def _grade(self, token: str, run: Run, submission_id: int, model_dir: Path, given_path: str,
                     received: float, final: bool, answer=None, extra: dict | None = None):
        """Grade the private copy `model_dir`, and remove it (unless it became the final candidate)."""
        try:
            return await self._grade_copy(token, run, submission_id, model_dir, given_path, received, final, answer,
                                          extra)
        finally:
            await asyncio.to_thread(shutil.rmtree, model_dir, True)

    async def _grade_copy(self, token: str, run: Run, submission_id: int, model_dir: Path, given_path: str,
                          received: float, final: bool, answer=None, extra: dict | None = None):
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
        return a2rl_answer(record) if answer is None else await answer(record)

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
            record.update(extra)  # e.g. the gpu a paper run's agent asked for
        append_jsonl(Path(run.records_dir) / SUBMISSIONS, record)  # durable before the answer
        return record
