"""The end of a run, as the Grader does it when the orchestrator closes a cell (evaluators/grader.py).

Refuse new submissions, wait for those being evaluated (and record the ones given up as infrastructure errors), score
the run's final submission once on the held-out split (final.json), and look for the hidden items in the workspace
as the agent left it.
"""
import asyncio
import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.evaluation import Evaluation
from contracts.records import write_json_durably
from contracts.refusals import Refusal
from contracts.runs import Run

log = logging.getLogger("a2rl.grader")
FINAL = "final.json"                  # in the cell's records folder: the held-out score of its final submission
FINAL_CANDIDATES = "final-candidates"  # there too, while the run lasts: a copy of the submission it will be


class RunClosing:
    """The Grader's end-of-run work (a mixin: it uses the Grader's registry, evaluator, _evaluate and _record)."""

    if TYPE_CHECKING:  # the Grader's (evaluators/grader.py), which this is part of
        registry: Any
        evaluator: Any

        async def ensure_baseline(self) -> dict: ...

        async def _evaluate(self, what: str, *args) -> Evaluation | Refusal: ...

        def _record(self, run: Run, submission_id: int, best: float | None, received: float,
                    given_path: str | None, result: Evaluation, commit: str | None = None) -> dict: ...

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
            return await self.evaluator.scan.remote(run.workspace, run.given)
        except Exception as e:  # noqa: BLE001 - the run's results stand; the missing scan is said in its outcome
            log.warning("contamination scan of %s failed: %s", run.cell_id, e)
            return None

    async def _drain(self, token: str, timeout_s: float) -> int:
        inflight = await self.registry.close.remote(token)
        deadline = time.monotonic() + timeout_s
        while inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            run = await self.registry.peek.remote(token)
            inflight = run.inflight if run is not None else 0
        abandoned = await self.registry.abandon.remote(token) if inflight else []
        run = await self.registry.peek.remote(token)
        for submission_id in abandoned:
            log.warning("gave up evaluation %d of %s after %.0f s", submission_id, run.cell_id, timeout_s)
            self._record(run, submission_id, None, time.time(), None, Evaluation.lost(
                f"the evaluation was still running {timeout_s:.0f} s after the cell ended (grading.eval_timeout_s)"))
        return len(abandoned)

    async def _score_final(self, token: str) -> dict | None:
        """Score the run's final submission on the held-out split (the base model when it has none scored) and
        record it (fsync) as final.json in its records; None when the task has no final split."""
        base = await self.ensure_baseline()
        run = await self.registry.peek.remote(token)
        if run is None or not base["n_final"]:
            return None
        held = run.final
        record = {"submission_id": None, "marked": False, "model_path": None, "feedback_score": None,
                  "feedback_baseline_score": base["baseline_score"], "score": base["final_baseline_score"],
                  "baseline_score": base["final_baseline_score"], "n": base["n_final"], "flags": ["no_submission"],
                  "error": None, "t": time.time()}
        if held is not None:
            result = await self._evaluate(f"final evaluation of {run.cell_id}", held.path, run.cell_id,
                                          run.records_dir, "final", held.digest)
            if isinstance(result, Refusal):
                result = dataclasses.replace(Evaluation.lost(str(result)), flags=["eval_failed"])
            record.update(submission_id=held.submission_id, marked=held.marked, model_path=held.model_path,
                          feedback_score=held.score, score=result.score, error=result.error,
                          flags=[f for f in result.flags if f != "cached"], metrics=result.metrics)
            if result.retention:
                record["retention"] = result.retention  # the general ability it kept (task.retention)
            await asyncio.to_thread(shutil.rmtree, Path(run.records_dir) / FINAL_CANDIDATES, True)
        record["improvement"] = None if record["score"] is None else record["score"] - record["baseline_score"]
        await asyncio.to_thread(write_json_durably, Path(run.records_dir) / FINAL, record)
        return record
