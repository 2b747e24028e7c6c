"""The grading APIs a run can be answered in, by name (RunRegistration.api, chosen by the cell's agent side:
orchestrator/agent_sides): how /submit's body is read, whether an unchanged resubmission is answered from a cache, the
answer's shape and words, what /health and /time say. The grader (evaluators/grader.py) has one front door for each
route and asks the run's API; its budget, checks, grading and records are the same under every API.

  a2rl      a2rl's: {"model_path", "final"?} in, the submission's record out (less what names hidden items)
  release   the release's grading server (RD-Agent's autorl_bench core/server.py, rdagent 1.0.0): {"model_path",
            "gpu"?} in, its checks in its order and its messages, its answer keys first (a2rl's follow), its cache of
            an unchanged resubmission, GET /time, GET /health with the run's token, scores.json and run_meta.json kept
            in the workspace
"""
# (no `from __future__ import annotations`: the grader's FastAPI routes call these with real Request objects)

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fastapi import Request
from fastapi.responses import JSONResponse

from contracts.refusals import Refusal
from contracts.runs import APIS, Run
from contracts.specs import ConfigError
from contracts.task import release_benchmark as task_benchmark
from contracts.task_spec import TaskSpec
from evaluators.submissions import cache_key, resolve_model_path
from evaluators.workspace_files import run_meta, write_run_meta, write_scores

log = logging.getLogger("a2rl.grader")


@dataclass(frozen=True)
class Submission:
    """A /submit body as the run's API read it."""
    model_dir: Path                 # checked: inside the workspace
    model_path: str                 # as the agent named it
    final: bool = False             # marked as the run's final submission (a2rl's API)
    extra: dict | None = None       # more for its record (the gpu a release run's agent asked for)
    gpu: str | None = None


def a2rl_answer(record: dict) -> dict:
    """A submission's answer in a2rl's shape: its record, less what the contamination check found (told to the
    agent, it would say which of the texts it planted are hidden items: an oracle for the eval split)."""
    return {**{k: v for k, v in record.items() if k != "contamination"},
            "flags": [f for f in record["flags"] if f != "contamination"]}


class A2rlApi:
    name = "a2rl"

    async def read(self, request: Request, run: Run) -> Submission | JSONResponse:
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
        return Submission(model_dir, body["model_path"], final)

    async def cache_key(self, grader, run: Run, asked: Submission) -> str | None:
        """The key an answer is kept under for an unchanged resubmission (None: every submission is graded)."""
        return None

    async def answer(self, grader, token: str, key: str | None, asked: Submission, received: float,
                     record: dict) -> dict:
        return a2rl_answer(record)

    def refused(self, refusal: Refusal):
        raise refusal  # answered by contracts.refusals: its status and {"error", "code"}

    def health(self, spec: TaskSpec, run: Run | None, base: dict) -> dict:
        return {"status": "ok", "task": spec.name, "baseline_score": base["baseline_score"]}

    def time_left(self, run: Run):
        return JSONResponse(status_code=404, content={"detail": "Not Found"})  # as before there was a /time


# -- the release's ------------------------------------------------------------------------------------------------
# The keys of the release's /submit answer (an answer's other keys are a2rl's, after them)
RELEASE_KEYS = ("submission_id", "timestamp", "model_path", "score", "baseline_score", "improvement",
                "elapsed_seconds", "error", "best", "total_submissions")
GRADER_GPU = {"evaluated_on": "grader"}  # said when a gpu was asked for: a2rl evaluates on the grader's own GPUs


def as_sent(answer: dict) -> dict:
    """The release's answer in the order its agent receives the keys: Flask's jsonify sorts them (its JSON
    provider's sort_keys), in nested objects too. (Its scores.json and run_meta.json keep the order it builds.)"""
    return {k: as_sent(v) if isinstance(v, dict) else v for k, v in sorted(answer.items())}


def gpu_order(gpu: str):
    """The release sorts GPUs with key=int; a GPU named by UUID (also valid in CUDA_VISIBLE_DEVICES) goes last."""
    return (0, int(gpu), "") if gpu.isdigit() else (1, 0, gpu)


def gpu_error(gpu: str, available: set[str]) -> str | None:
    """Why a requested `gpu` ("0", "0,1") is refused, in the release's words (its _validate_gpu); None: valid."""
    requested = {g.strip() for g in gpu.split(",") if g.strip()}
    if not requested:
        return "gpu parameter is empty"
    invalid = requested - available
    if invalid:
        return f"GPU {invalid} not in available GPUs {sorted(available)} (from CUDA_VISIBLE_DEVICES)"
    return None


def invalid_request(refusal: Refusal) -> JSONResponse:
    """A path the release refuses with its ValueError: its 400 "Invalid request", then a2rl's reason."""
    return JSONResponse(status_code=400, content={"error": "Invalid request", "detail": refusal.message,
                                                  "code": refusal.code})


def release_entry(record: dict, received: float) -> dict:
    """The release's scores.json entry for a graded submission's record. A failed evaluation (a2rl records no
    score) is the release's 0.0 with its error."""
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


def release_meta(run: Run) -> dict:
    """run_meta.json as the registry knows the run (never read back from the agent's workspace)."""
    start = run.started_at if run.budget_started_at is None else run.budget_started_at
    return run_meta(int(start), run.timeout_s, run.last_submit_time)


def release_benchmark(spec: TaskSpec) -> str:
    """The name the release's server answers with (the agent's $TASK, e.g. alfworld for alfworld_small); a2rl's
    task name for a class the release does not have (or a user's class this process cannot import)."""
    try:
        return task_benchmark(spec) or spec.name
    except ConfigError:
        return spec.name


class ReleaseApi(A2rlApi):
    name = "release"

    async def read(self, request: Request, run: Run) -> Submission | JSONResponse:
        """The release's checks in its order, in its words; a2rl's budget, checks and records stand."""
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
        if isinstance(model_path, str) and "\x00" in model_path:  # (the release's first check)
            raise Refusal("bad_request", "model_path must not hold a NUL character")
        model_dir = resolve_model_path(Path(run.workspace), model_path)
        return Submission(model_dir, model_path, extra=None if gpu is None else {"gpu": gpu}, gpu=gpu)

    async def cache_key(self, grader, run: Run, asked: Submission) -> str | None:
        try:
            return await asyncio.to_thread(cache_key, Path(run.workspace), asked.model_dir,
                                           grader.spec.grader.submission_max_files)
        except OSError:  # the workspace went away meanwhile: no cache, and the copy says what is wrong
            return None

    async def answer(self, grader, token: str, key: str | None, asked: Submission, received: float,
                     record: dict) -> dict:
        """A graded submission's answer in the release's shape, its entry added to the run's list (scores.json),
        the answer kept for an unchanged resubmission when it succeeded, and the workspace's files rewritten."""
        entry = release_entry(record, received)
        best, total = await grader.registry.add_entry.remote(token, entry)
        extras = {k: v for k, v in a2rl_answer(record).items() if k not in RELEASE_KEYS}  # never a key it uses
        answer = {**as_sent({**entry, "best": best, "total_submissions": total}), **extras}
        if asked.gpu is not None:
            answer.update(GRADER_GPU)
        if key is not None and "error" not in entry:
            await grader.registry.cache_answer.remote(token, key, answer)
        await self.write_workspace_files(grader, token)
        return answer

    async def write_workspace_files(self, grader, token: str) -> None:
        """scores.json and run_meta.json in the run's workspace, as the registry has them now."""
        async with grader.writing:
            run = await grader.registry.peek.remote(token)
            try:
                await asyncio.to_thread(write_scores, Path(run.workspace), run.entries)
                await asyncio.to_thread(write_run_meta, Path(run.workspace), release_meta(run))
            except OSError as e:  # the agent's copy; the records and the answer hold the submission
                log.warning("could not write scores.json or run_meta.json for %s: %s", run.cell_id, e)

    def refused(self, refusal: Refusal):
        if refusal.status == 400:  # a path it refuses (outside the workspace, a link out): the release's ValueError
            return invalid_request(refusal)
        raise refusal

    def health(self, spec: TaskSpec, run: Run | None, base: dict) -> dict:
        assert run is not None  # (asked only of a release run's caller)
        answer = as_sent({"status": "ok", "task": release_benchmark(spec), "workspace": run.workspace,
                          "available_gpus": sorted(run.gpus, key=gpu_order)})
        return {**answer, "baseline_score": base["baseline_score"]}

    def time_left(self, run: Run):
        """The release's time and budget signal, from the registry (run_meta.json is the agent's to overwrite)."""
        meta, now = release_meta(run), int(time.time())
        start, timeout_s = meta["start_time"], meta["timeout_s"]
        remaining = max(timeout_s - (now - start), 0) if isinstance(timeout_s, int) else None
        return as_sent({**meta, "now": now, "remaining": remaining})


SHAPES = {api.name: api for api in (A2rlApi(), ReleaseApi())}
assert set(SHAPES) == set(APIS), "contracts/runs.APIS names the grading APIs defined here"


def grading_api(name: str) -> A2rlApi:
    return SHAPES[name]
