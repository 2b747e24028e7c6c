"""The grading service: one Ray Serve application per task, FastAPI ingress, agent-facing API of DESIGN.md.

  POST /submit {"model_path"}   evaluate a model directory on the hidden eval split (Authorization: Bearer TOKEN)
  GET  /status                  time, submissions, best so far for the caller's run (and its driver's tokens and
                                cost when it has one, as the driver proxy meters them)
  GET  /health

Two deployments: the Grader (the ingress above, light, no model) keeps the runs' books and the Evaluator replicas
(the task's CPUs/GPUs) load and score models. The orchestrator registers and closes runs through the Grader's handle.
Run state lives in the shared RunRegistry actor, scores in a content-addressed cache on disk, so replicas are
interchangeable: an evaluation lost with an Evaluator's process is asked again of another, and one that cannot be is
answered 503 `infra_error` and not counted. Every submission is appended (fsync) to the cell's record file before
the answer is sent.
"""
# (no `from __future__ import annotations`: FastAPI must see the real Request type through Serve's ingress)

import asyncio
import json
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

from contracts.records import write_json_durably
from contracts.refusals import STATUS, Refusal
from contracts.runs import counted, run_token
from contracts.task_spec import TaskSpec
from evaluators.contamination import HiddenItems, relative_distance
from evaluators.judging.client import JudgeUnavailable
from evaluators.score_cache import ScoreCache, score_key, split_key
from evaluators.submissions import CopyLimits, private_copy, resolve_model_path

log = logging.getLogger("a2rl.grader")
JUDGE_CALLS = "judge_calls.jsonl"  # in the cell's records folder: every call of its evaluations' judge
FINAL = "final.json"                  # in the cell's records folder: the held-out score of its final submission
FINAL_CANDIDATES = "final-candidates"  # there too, while the run lasts: a copy of the submission it will be
SUBMITTED = "submitted"  # there too, while a submission is graded: the private copy it is read from
JUDGE_AGREEMENT_SAMPLE = 20  # the baseline's first judge prompts asked twice: the judge's repeat agreement
JUDGE_USAGE = ("calls", "input_tokens", "output_tokens", "cached_tokens", "total_tokens", "cost_usd")
api = FastAPI(title="a2rl grading API")


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


def refused(e: Refusal) -> JSONResponse:
    return JSONResponse(status_code=e.status, content=e.body())


# What an evaluation lost with its replica's process raises (a kill, the out-of-memory killer, its node gone)
INFRA_FAULTS = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError,
                ray.exceptions.NodeDiedError)


# Everything the deployment classes use is defined above them: Serve pickles a class when it is decorated.

@serve.deployment(health_check_period_s=10)
class Evaluator:
    """Holds the models: loads a submission and scores it on the hidden eval split. It keeps no run state, so an
    evaluation lost with its process is simply asked again of another replica (or of this one, restarted)."""

    def __init__(self, task_cls: type, spec: TaskSpec, cache_dir: str, driver_url: str | None = None,
                 scope: str = ""):
        import torch

        from contracts.task import build_task
        from evaluators.backends import make_backend
        from evaluators.base_models import resolve_base_model
        from evaluators.model_size import bound_memory, default_bound

        # Whatever a submission makes it allocate, this process fails the allocation before the node runs out
        memory = spec.grader.memory_gb
        self.memory_bound = bound_memory(int(memory * 1e9) if memory else default_bound())
        torch.set_num_threads(max(1, int(spec.grader.num_cpus)))
        self.spec = spec
        self.task = build_task(spec, cache_dir, task_cls)
        # the feedback split (what /submit answers with) and the held-out final split (scored once per run)
        self.rows = {"eval": self.task.eval_rows(), "final": self.task.final_rows()}
        self.backend = make_backend(spec.grader)
        root = Path(cache_dir) / "grading" / spec.name / split_key(spec.config)
        self.scores = {"eval": ScoreCache(root), "final": ScoreCache(root / "final")}
        self.base_dir = resolve_base_model(spec.base_model, Path(cache_dir) / "models")
        # An LLM judge is asked through the driver proxy, on a metered key per evaluation (judge usage)
        self.judge_driver, self.driver_url, self.scope = self.task.judge_driver(), driver_url, scope
        if self.judge_driver and not driver_url:
            raise ValueError(f"task {spec.name} has an LLM judge but no driver proxy was given to its grader")
        self.judge_calls = Path(cache_dir) / "grading" / spec.name / "judge-calls-baseline.jsonl"
        self.agreement_file = root / "judge-agreement.json"  # measured with the baseline, kept with its score
        self.judge_agreement = json.loads(self.agreement_file.read_text()) if self.agreement_file.exists() else None
        self.baseline_lock = asyncio.Lock()
        self.baseline: dict[str, float | None] = {"eval": None, "final": None}
        # what the grader looks for in what agents write: the hidden items of both splits; what every agent is given
        # (instructions, train split, evaluator files) explains their n-grams wherever its tools copy it
        hidden = self.task.hidden_texts(self.rows["eval"] + self.rows["final"])
        self.hidden = HiddenItems(hidden, spec.contamination, self.task.given_texts().values() if hidden else ())
        if self.hidden.exposed:  # shown in the instructions: a defect tests/test_contamination.py checks tasks for
            log.warning("task %s gives agents all of %d hidden items in context (e.g. %s: in its instructions, or near "
                        "a train row): a copy of them cannot be told from given text", spec.name,
                        len(self.hidden.exposed), self.hidden.exposed[0])
        self.near_copy_tol = spec.contamination.near_copy_tol
        base = self.backend.load(self.base_dir)
        try:
            self.base_digest = self.backend.weights_digest(base)
            self.base_weights = self.backend.weights(base)  # kept (on the CPU) to tell a near copy of them
            if not self.judge_driver:  # with a judge the proxy must answer: scored on the first run's registration
                for split in self._splits():
                    self.baseline[split] = self._score(base, self._base_key(), split=split)["score"]  # cached
        finally:
            self.backend.unload(base)
        log.info("grader %s ready: baseline %s on %d eval items", spec.name, self.baseline, len(self.rows["eval"]))

    def _splits(self) -> list[str]:
        return [split for split in ("eval", "final") if self.rows[split]]

    def _base_key(self) -> str:
        return score_key(self.base_dir, self.base_digest)

    def __del__(self):
        # Serve calls this when the replica stops: a resident engine's process (and its GPU memory) goes with it
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()

    def info(self) -> dict:
        """The base model's scores (None while a judged task's are not scored yet), its digest, the split sizes."""
        return {"baseline_score": self.baseline["eval"], "final_baseline_score": self.baseline["final"],
                "base_digest": self.base_digest, "n_eval": len(self.rows["eval"]), "n_final": len(self.rows["final"]),
                "judge_agreement": self.judge_agreement, "memory_bound": self.memory_bound}

    async def scored_baseline(self) -> dict:
        await self.ensure_baseline()
        return self.info()

    async def evaluate(self, model_dir: str, cell_id: str, records_dir: str, split: str = "eval",
                       digest: str | None = None, workspace: str | None = None,
                       given: dict[str, str] | None = None) -> dict:
        """Score one submission on a split: {"refusal": Refusal} when it does not load, else its digest, score,
        eval_s, metrics, flags, error, judge_usage and whether it is refunded (its judge was down). digest: the
        weights it must have (a kept copy scored on the final split: anything else is an error, not a score).
        workspace: also look for the hidden items in it (`contamination`: where they were found); given: the
        digests of the files a2rl wrote there (HiddenItems.survey)."""
        try:
            loaded = await asyncio.to_thread(self._load, Path(model_dir))
        except Refusal as e:
            return {"refusal": e}
        out: dict = {"score": None, "eval_s": 0.0, "metrics": None, "flags": [], "error": None, "digest": None,
                     "judge_usage": None, "refunded": False}
        # the scan runs beside the evaluation (pure Python beside torch): it adds little to the replica's time
        scanning = None if workspace is None else asyncio.ensure_future(
            asyncio.to_thread(self.hidden.survey, Path(workspace), given))
        try:
            out["digest"] = await asyncio.to_thread(self.backend.weights_digest, loaded)
            if digest is not None and out["digest"] != digest:
                raise ValueError(f"its weights changed since they were scored (digest {out['digest'][:12]}, "
                                 f"expected {digest[:12]})")
            if out["digest"] == self.base_digest or await asyncio.to_thread(self._near_copy, loaded):
                out["flags"].append("copy_of_base")
            key = await asyncio.to_thread(score_key, Path(model_dir), out["digest"])
            result, out["judge_usage"], _ = await self._judged(loaded, key, cell_id,
                                                               Path(records_dir) / JUDGE_CALLS, split)
            out.update(score=result["score"], eval_s=result["eval_s"], metrics=result.get("metrics"))
            out["flags"] += result.get("flags", [])
            if result["cached"]:
                out["flags"].append("cached")
            if scanning is not None:
                survey = await scanning
                if survey.matches:
                    out["flags"].append("contamination")
                    out["contamination"] = survey.matches
                if survey.truncated:  # bounded work: what was not read is said, in the record
                    out["contamination_scan"] = {"truncated": survey.truncated, "files": survey.files,
                                                 "bytes": survey.bytes}
        except JudgeUnavailable as e:  # the judge's outage, not the model's fault: no score, and no charge
            log.warning("judge unavailable for %s: %s", cell_id, e)
            out.update(error=f"judge unavailable: {e}", refunded=True)
            out["flags"] += ["eval_failed", "judge_unavailable"]
        except Exception as e:  # a failing evaluation is a result, not a crash of the deployment
            log.exception("evaluation failed for %s", cell_id)
            out.update(error=f"evaluation failed: {type(e).__name__}: {e}", digest=None)
            out["flags"].append("eval_failed")
        finally:
            if scanning is not None and not scanning.done():
                await asyncio.wait([scanning])  # (its error, if any, is the evaluation's already)
            await asyncio.to_thread(self.backend.unload, loaded)
        return out

    def scan(self, workspace: str, given: dict[str, str] | None = None) -> list[dict]:
        """Where the hidden items are in the workspace (evaluators.contamination)."""
        return self.hidden.scan(Path(workspace), given)

    def _near_copy(self, loaded) -> bool:
        """Every weight within a tiny distance of the base model's: a copy of it, though not a byte-exact one."""
        if self.base_weights is None:
            return False
        weights = self.backend.weights(loaded)
        return weights is not None and relative_distance(weights, self.base_weights) <= self.near_copy_tol

    def _load(self, model_dir: Path):
        from evaluators.backends.base import ModelLoadError

        try:
            return self.backend.load(model_dir)
        except ModelLoadError as e:
            raise Refusal("not_a_model", f"could not load {model_dir.name} as a causal LM: {e}") from None

    def _score(self, loaded, key: str, judge=None, split: str = "eval") -> dict:
        """Score on a split from the cache, or evaluate and cache it. Greedy decoding makes a key's score a constant
        (and a judge's verdicts too: temperature 0, cached per judgement)."""
        cached = self.scores[split].get(key)
        if cached is not None:
            return {**cached, "cached": True, "eval_s": 0.0}
        from evaluators.evaluate import evaluate_loaded

        started = time.time()
        result = evaluate_loaded(self.task, self.backend, loaded, self.rows[split], judge=judge)
        entry = {"score": result["score"], "n": result["n"], "eval_s": time.time() - started}
        if result.get("metrics"):
            entry["metrics"] = result["metrics"]
        if result.get("flags"):  # the task's own (e.g. gamed_tests, approximate): scored as the protocol says, told
            entry["flags"] = list(result["flags"])
        self.scores[split].put(key, entry, details=result["items"])
        return {**entry, "cached": False}

    async def ensure_baseline(self) -> None:
        """A judged task's baseline, scored once (its judge's calls metered under the grader's own key)."""
        async with self.baseline_lock:
            if all(self.baseline[split] is not None for split in self._splits()):
                return
            loaded = await asyncio.to_thread(self.backend.load, self.base_dir)
            try:
                for split in self._splits():
                    probe = JUDGE_AGREEMENT_SAMPLE if self.judge_agreement is None and split == "eval" else 0
                    result, _, agreement = await self._judged(loaded, self._base_key(), f"grader:{self.spec.name}",
                                                              self.judge_calls, split, probe)
                    self.baseline[split] = result["score"]
                    if agreement is not None and agreement["n"]:
                        self.judge_agreement = agreement
                        await asyncio.to_thread(write_json_durably, self.agreement_file, agreement)
            finally:
                await asyncio.to_thread(self.backend.unload, loaded)

    async def _judged(self, loaded, key: str, who: str, calls_path: Path, split: str = "eval", probe: int = 0
                      ) -> tuple[dict, dict | None, dict | None]:
        """_score with the task's LLM judge opened on a key of its own; returns (result, the judge's usage, its
        repeat agreement on its first `probe` prompts when probe > 0)."""
        if not self.judge_driver:
            return await asyncio.to_thread(self._score, loaded, key, None, split), None, None
        if self.scores[split].get(key) is not None:  # a cached score asks no judge
            result = await asyncio.to_thread(self._score, loaded, key, None, split)
            return result, dict.fromkeys(JUDGE_USAGE, 0), None
        from contracts.serving import DRIVER_PROXY_APP, scoped
        from evaluators.judging.pairwise import LLMJudge

        proxy = serve.get_app_handle(scoped(DRIVER_PROXY_APP, self.scope))
        judge_key = await proxy.register_cell.remote(f"{who}:judge", self.judge_driver, None, str(calls_path))
        judge = LLMJudge(self.judge_driver, self.driver_url, judge_key)
        judge.sample, agreement = probe, None
        try:
            result = await asyncio.to_thread(self._score, loaded, key, judge, split)
            if probe:
                agreement = await asyncio.to_thread(judge.repeat_agreement)
        finally:
            judge.close()
            usage = await proxy.close_cell.remote(judge_key, 5.0)
        return result, {k: usage[k] for k in JUDGE_USAGE}, agreement


@serve.deployment(max_ongoing_requests=256, health_check_period_s=10)
@serve.ingress(api)
class Grader:
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

    # -- orchestrator side (deployment handle) ------------------------------------------------------------------
    async def ensure_baseline(self) -> dict:
        """The base model's score, scored once (a judged task's before any cell's budget starts)."""
        if self.base is None:
            self.base = await self.evaluator.scored_baseline.remote()
        return self.base

    async def register_run(self, token: str, run: dict) -> dict:
        base = await self.ensure_baseline()
        await self.registry.register.remote(token, run)
        return base

    async def extend_run(self, token: str, deadline: float) -> None:
        await self.registry.extend.remote(token, deadline)

    async def close_run(self, token: str, timeout_s: float = 1800) -> dict:
        """Refuse new submissions, wait at most timeout_s for those being evaluated, then give the rest up (each is
        recorded as an infrastructure error, refunded), then score the run's final submission on the held-out
        split and look for the hidden items in what the agent left. Returns {"unfinished": how many were given up,
        "final": the held-out record or None, "contamination": where hidden items were found (None: not looked)}."""
        unfinished = await self._drain(token, timeout_s)
        return {"unfinished": unfinished, "final": await self._score_final(token),
                "contamination": await self._scan_at_end(token)}

    async def _scan_at_end(self, token: str) -> list[dict] | None:
        """The hidden items in the workspace as the agent left it (None: the scan could not be made)."""
        run = await self.registry.peek.remote(token)
        try:
            return await self.evaluator.scan.remote(run["workspace"], run.get("given"))
        except Exception as e:  # noqa: BLE001 - the run's results stand; the missing scan is said in its outcome
            log.warning("contamination scan of %s failed: %s", run["cell_id"], e)
            return None

    async def _drain(self, token: str, timeout_s: float) -> int:
        inflight = await self.registry.close.remote(token)
        deadline = time.monotonic() + timeout_s
        while inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            inflight = (await self.registry.peek.remote(token) or {}).get("inflight", 0)
        abandoned = await self.registry.abandon.remote(token) if inflight else []
        run = await self.registry.peek.remote(token)
        for submission_id in abandoned:
            log.warning("gave up evaluation %d of %s after %.0f s", submission_id, run["cell_id"], timeout_s)
            self._record(run, submission_id, None, time.time(), None, self._lost(
                f"the evaluation was still running {timeout_s:.0f} s after the cell ended (grading.eval_timeout_s)"))
        return len(abandoned)

    # -- agent side (HTTP) --------------------------------------------------------------------------------------
    @api.get("/health")
    async def health(self) -> dict:
        base = self.base or await self.evaluator.info.remote()
        return {"status": "ok", "task": self.spec.name, "baseline_score": base["baseline_score"]}

    @api.get("/status")
    async def status(self, request: Request):
        try:
            run = await self._run(request)
        except Refusal as e:
            return refused(e)
        now = time.time()
        answer = {"task": self.spec.name, "elapsed_s": now - run["started_at"],
                  "remaining_s": max(0.0, run["deadline"] - now), "submissions_used": run["used"],
                  "remaining_submissions": run["max_submissions"] - counted(run), "evaluating": run["inflight"],
                  "best": run["best"], "baseline_score": (self.base or {}).get("baseline_score")}
        if run.get("driver_key"):
            answer.update(await driver_status(run["driver_key"], self.scope))
        return answer

    @api.post("/submit")
    async def submit(self, request: Request):
        received = time.time()
        try:
            token = run_token(request)
            run = await self._run(request, token)
            try:
                body = await request.json()
            except Exception:
                raise Refusal("bad_request", 'the body must be JSON: {"model_path": "output/<dir>"}') from None
            if not isinstance(body, dict):
                raise Refusal("bad_request", 'the body must be a JSON object with "model_path"')
            model_dir = resolve_model_path(Path(run["workspace"]), body.get("model_path"))
            final = body.get("final", False)
            if not isinstance(final, bool):
                raise Refusal("bad_request", '"final" must be true or false')
            if received >= run["deadline"]:
                raise Refusal("budget_exhausted", "time budget exhausted")
            if counted(run) >= run["max_submissions"]:
                raise Refusal("budget_exhausted", f"submission budget exhausted ({run['max_submissions']} used)")
            await self.ensure_baseline()
        except Refusal as e:
            return refused(e)
        # From here on the grader reads only its own copy, taken through what it checked (evaluators/submissions.py)
        request_id = secrets.token_hex(8)
        private = Path(run["records_dir"]) / SUBMITTED / request_id
        try:
            await asyncio.to_thread(private_copy, Path(run["workspace"]), model_dir, private, CopyLimits(
                self.spec.grader.submission_max_files, int(self.spec.grader.submission_max_gb * 1e9)))
            # a request id: the registry answers a retried reservation (its own restart) with the same submission
            submission_id, refusal = await self.registry.reserve.remote(token, request_id)
            if refusal is not None:
                raise refusal
        except BaseException as e:
            await asyncio.to_thread(shutil.rmtree, private, True)
            if isinstance(e, Refusal):
                return refused(e)
            raise
        # shielded: an agent that hangs up (a client timeout) does not cancel the evaluation it was counted for
        return await asyncio.shield(self._grade(token, run, submission_id, private, body["model_path"], received,
                                                final))

    # -- internals ----------------------------------------------------------------------------------------------
    async def _run(self, request: Request, token: str | None = None) -> dict:
        token = token or run_token(request)
        run = await self.registry.get.remote(token)
        if run is None:
            raise Refusal("invalid_token", "unknown or expired run token")
        return run

    async def _grade(self, token: str, run: dict, submission_id: int, model_dir: Path, given_path: str,
                     received: float, final: bool):
        """Grade the private copy `model_dir`, and remove it (unless it became the final candidate)."""
        try:
            return await self._grade_copy(token, run, submission_id, model_dir, given_path, received, final)
        finally:
            await asyncio.to_thread(shutil.rmtree, model_dir, True)

    async def _grade_copy(self, token: str, run: dict, submission_id: int, model_dir: Path, given_path: str,
                          received: float, final: bool):
        from contracts.code_snapshots import snapshot_code

        commit = None
        try:
            commit = await asyncio.to_thread(snapshot_code, Path(run["workspace"]) / "code",
                                             Path(run["code_repo"]), f"submission {submission_id}")
        except Exception as e:  # a broken snapshot must not cost the agent its submission
            log.warning("code snapshot failed for %s: %s", run["cell_id"], e)
        result = await self._evaluate(f"evaluation {submission_id} of {run['cell_id']}", str(model_dir),
                                      run["cell_id"], run["records_dir"], "eval", None, run["workspace"],
                                      run.get("given"))
        if "refusal" in result:
            await self.registry.cancel.remote(token, submission_id)
            why = result["refusal"]  # said of the folder the agent named, not of the grader's private copy
            return refused(Refusal(why.code, why.message.replace(str(model_dir), given_path)
                                   .replace(model_dir.name, given_path)))
        best, still_open = await self.registry.finish.remote(token, submission_id, result["score"],
                                                              result["refunded"])
        if not still_open:  # the cell ended and gave this evaluation up (recorded as an infra error then)
            return refused(Refusal("infra_error", "your run ended while this submission was evaluated"))
        after = await self.registry.peek.remote(token) or run
        try:
            record = self._record(after, submission_id, best, received, given_path, result, commit)
        except OSError as e:  # e.g. the output disk is full: the agent hears it, the sweep stops on its ledger
            log.error("could not record submission %d of %s: %s", submission_id, run["cell_id"], e)
            return refused(Refusal("infra_error", f"the grader could not record your submission: {e}"))
        if "infra_error" in record["flags"]:
            return JSONResponse(status_code=STATUS["infra_error"], content={**record, "code": "infra_error"})
        if record["score"] is not None and self.base and self.base["n_final"]:
            await self._keep_final_candidate(token, after, record, model_dir, final)
        # What the contamination check found stays in the records: told to the agent, it would say which of the
        # texts it planted are hidden items (an oracle for the eval split).
        return {**{k: v for k, v in record.items() if k != "contamination"},
                "flags": [f for f in record["flags"] if f != "contamination"]}

    async def _evaluate(self, what: str, *args) -> dict:
        """Evaluator.evaluate(*args), asked again of a live replica when its process dies (infra_retries times)."""
        result: dict = {}
        for attempt in range(1 + self.spec.grader.infra_retries):
            try:
                return await self.evaluator.evaluate.remote(*args)
            except INFRA_FAULTS as e:  # its replica died: Serve starts another, and the evaluation is asked again
                fault = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log.warning("%s lost (try %d): %s", what, attempt + 1, fault)
                result = self._lost(f"the grader's evaluation process died {attempt + 1} time(s): {fault}")
            except Exception as e:  # noqa: BLE001 - the evaluator's own bug: a record, not a 500
                log.exception("%s raised", what)
                return {**self._lost(f"evaluation failed: {type(e).__name__}: {e}"), "refunded": False,
                        "flags": ["eval_failed"]}
        return result

    async def _keep_final_candidate(self, token: str, run: dict, record: dict, model_dir: Path, marked: bool) -> None:
        """Keep a copy of the submission the held-out score will be taken on (the last one marked final, else the
        best so far), so the agent may overwrite its directory afterwards. Copied before the agent is answered."""
        held = run.get("final")
        if not marked and (held is not None and (held["marked"] or held["score"] >= record["score"])):
            return
        keep = Path(run["records_dir"]) / FINAL_CANDIDATES / str(record["submission_id"])
        try:  # the private copy it was scored from becomes the candidate
            keep.parent.mkdir(exist_ok=True)
            await asyncio.to_thread(os.replace, model_dir, keep)
        except OSError as e:  # the held-out score then falls to the last kept candidate
            log.error("could not keep submission %d of %s for its final score: %s", record["submission_id"],
                      run["cell_id"], e)
            return
        await self.registry.set_final.remote(token, {"submission_id": record["submission_id"], "marked": marked,
                                                     "score": record["score"], "digest": record["digest"],
                                                     "path": str(keep), "model_path": record["model_path"]})
        if held is not None:
            await asyncio.to_thread(shutil.rmtree, held["path"], True)

    async def _score_final(self, token: str) -> dict | None:
        """Score the run's final submission on the held-out split (the base model when it has none scored) and
        record it (fsync) as final.json in its records; None when the task has no final split."""
        base = await self.ensure_baseline()
        run = await self.registry.peek.remote(token)
        if run is None or not base["n_final"]:
            return None
        held = run.get("final")
        record = {"submission_id": None, "marked": False, "model_path": None, "feedback_score": None,
                  "feedback_baseline_score": base["baseline_score"], "score": base["final_baseline_score"],
                  "baseline_score": base["final_baseline_score"], "n": base["n_final"], "flags": ["no_submission"],
                  "error": None, "t": time.time()}
        if held is not None:
            result = await self._evaluate(f"final evaluation of {run['cell_id']}", held["path"], run["cell_id"],
                                          run["records_dir"], "final", held["digest"])
            if "refusal" in result:
                result = {**self._lost(str(result["refusal"])), "flags": ["eval_failed"]}
            record.update(submission_id=held["submission_id"], marked=held["marked"], model_path=held["model_path"],
                          feedback_score=held["score"], score=result["score"], error=result["error"],
                          flags=[f for f in result["flags"] if f != "cached"], metrics=result.get("metrics"))
            await asyncio.to_thread(shutil.rmtree, Path(run["records_dir"]) / FINAL_CANDIDATES, True)
        record["improvement"] = None if record["score"] is None else record["score"] - record["baseline_score"]
        await asyncio.to_thread(write_json_durably, Path(run["records_dir"]) / FINAL, record)
        return record

    @staticmethod
    def _lost(cause: str) -> dict:
        """An evaluation's result when the infrastructure lost it: no score, not counted."""
        return {"score": None, "eval_s": 0.0, "metrics": None, "flags": ["eval_failed", "infra_error"],
                "digest": None, "judge_usage": None, "refunded": True,
                "error": f"infrastructure error (not counted against the budget): {cause}"}

    def _record(self, run: dict, submission_id: int, best: float | None, received: float, given_path: str | None,
                result: dict, commit: str | None = None) -> dict:
        """The submission's record, appended (fsync) to the cell's record file before anyone is answered."""
        from contracts.records import SUBMISSIONS, append_jsonl

        now, baseline, score = time.time(), (self.base or {}).get("baseline_score"), result["score"]
        record = {
            "submission_id": submission_id, "t": now, "received_at": received, "model_path": given_path,
            "score": score, "baseline_score": baseline,
            "improvement": None if score is None or baseline is None else score - baseline, "best": best,
            "total_submissions": submission_id, "remaining_submissions": run["max_submissions"] - counted(run),
            "elapsed_s": now - run["started_at"], "eval_s": result["eval_s"], "flags": result["flags"],
            "error": result["error"], "digest": result["digest"], "code_commit": commit,
        }
        if result["metrics"]:
            record["metrics"] = result["metrics"]  # e.g. a win rate beside the LC one, the success rate beside reward
        if result["judge_usage"] is not None or result["refunded"]:
            record["judge_usage"] = result["judge_usage"]  # tokens and cost of the evaluation's judge (None: none)
        if result["refunded"]:
            record["refunded"] = True
        if result.get("contamination"):
            record["contamination"] = result["contamination"]  # never in the agent's answer: it would name items
        if result.get("contamination_scan"):
            record["contamination_scan"] = result["contamination_scan"]  # e.g. "scan truncated: more than ..."
        append_jsonl(Path(run["records_dir"]) / SUBMISSIONS, record)  # durable before the answer
        return record


def app_name(task_name: str, scope: str = "") -> str:
    from contracts.serving import scoped

    return scoped(f"grader-{task_name}", scope)


def deploy(spec: TaskSpec, cache_dir: str, emulated_gpus: bool = False, driver_url: str | None = None,
           scope: str = "") -> str:
    """Start the task's grading application (unless this process runs it with the same settings already); returns
    its route prefix.

    The grader reserves its own CPUs/GPUs (never a cell's): on a CPU box with emulated GPUs, its GPU
    reservation is taken from the same emulated resource the cells use. Its replicas get the task's class itself
    (pickled by reference, so their process imports the module that defines it).
    """
    from contracts.serving import deploy_once, scoped_route
    from contracts.task import task_class

    def build():
        options: dict = {"num_cpus": spec.grader.num_cpus}
        if spec.grader.num_gpus and emulated_gpus:
            options["resources"] = {"emulated_gpu": spec.grader.num_gpus}
        elif spec.grader.num_gpus:
            options["num_gpus"] = spec.grader.num_gpus
        if spec.grader.memory_gb:  # reserved here, enforced in the replica (evaluators/model_size.py)
            options["memory"] = int(spec.grader.memory_gb * 1e9)
        # Serve queues evaluations beyond max_concurrent per replica; /status and /health never wait on them
        evaluator = Evaluator.options(num_replicas=spec.grader.num_replicas, ray_actor_options=options,
                                      max_ongoing_requests=spec.grader.max_concurrent)
        router = Grader.options(name=app_name(spec.name, scope), ray_actor_options={"num_cpus": 0})
        return router.bind(evaluator.bind(task_class(spec.cls), spec, cache_dir, driver_url, scope), spec, scope)

    route = scoped_route(f"/{spec.name}", scope)
    deploy_once(app_name(spec.name, scope), route, [spec.config, cache_dir, emulated_gpus, driver_url], build)
    return route
