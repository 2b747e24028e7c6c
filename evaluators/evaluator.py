"""The Evaluator deployment of the grading service (evaluators/service.py): the replicas that hold the models.

Each replica loads the task's base model and hidden splits once, then loads and scores submissions on them (its
task's CPUs/GPUs). It keeps no run state, so an evaluation lost with its process is asked again of another replica.
"""
import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ray import serve

from contracts.evaluation import Evaluation
from contracts.records import write_json_durably
from contracts.refusals import Refusal
from contracts.task_spec import TaskSpec
from evaluators.contamination import HiddenItems, relative_distance
from evaluators.judging.client import JudgeUnavailable
from evaluators.score_cache import ScoreCache, score_key, split_key

if TYPE_CHECKING:
    from contracts.task import Task

log = logging.getLogger("a2rl.grader")
JUDGE_CALLS = "judge_calls.jsonl"  # in the cell's records folder: every call of its evaluations' judge
JUDGE_AGREEMENT_SAMPLE = 20  # the baseline's first judge prompts asked twice: the judge's repeat agreement
JUDGE_USAGE = ("calls", "input_tokens", "output_tokens", "cached_tokens", "total_tokens", "cost_usd")


# Everything the deployment class uses is defined above it: Serve pickles a class when it is decorated.

@serve.deployment(health_check_period_s=10)
class Evaluator:
    """Holds the models: loads a submission and scores it on the hidden eval split. It keeps no run state, so an
    evaluation lost with its process is simply asked again of another replica (or of this one, restarted)."""

    def __init__(self, task_cls: type, spec: TaskSpec, cache_dir: str, driver_url: str | None = None,
                 scope: str = "", retention_cls: type | None = None):
        import torch

        from contracts.task import build_task
        from evaluators.backends import make_backend
        from evaluators.base_models import resolve_base_model
        from evaluators.identity import load_known
        from evaluators.model_size import bound_memory, default_bound

        # Whatever a submission makes it allocate, this process fails the allocation before the node runs out
        memory = spec.grader.memory_gb
        self.memory_bound = bound_memory(int(memory * 1e9) if memory else default_bound())
        torch.set_num_threads(max(1, int(spec.grader.num_cpus)))
        self.spec = spec
        self.task = build_task(spec, cache_dir, task_cls)
        # the feedback split (what /submit answers with) and the held-out final split (scored once per run)
        self.rows = {"eval": self.task.eval_rows(), "final": self.task.final_rows()}
        self.backend_settings = self.task.backend_settings(gpu=torch.cuda.is_available())
        self.backend = make_backend(self.backend_settings)
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
        # the base model's public siblings a submission is told apart from (evaluators/identity.py): read from disk
        # a slice at a time, never held whole nor put on a GPU
        self.known = load_known(spec.known_models, Path(cache_dir) / "models")
        # retention: another task's held-out items the final submission is also scored on (the base's score there
        # measured once, cached like the baseline)
        self.retention_task: Task | None = None
        self.retention_baseline: float | None = None
        if spec.retention is not None:
            other = TaskSpec.from_config(spec.retention.task)
            self.retention_task = build_task(other, cache_dir, retention_cls)
            self.rows["retention"] = self.retention_task.final_rows() or self.retention_task.eval_rows()
            self.scores["retention"] = ScoreCache(root / "retention" / other.name / split_key(other.config))
        base = self.backend.load(self.base_dir)
        try:
            self.base_digest = self.backend.weights_digest(base)
            self.base_weights = self.backend.weights(base)  # kept (on the CPU) to tell a near copy of them
            self._say_known_shapes()
            if not self.judge_driver:  # with a judge the proxy must answer: scored on the first run's registration
                for split in self._splits():
                    self.baseline[split] = self._score(base, self._base_key(), split=split)["score"]  # cached
            if self.retention_task is not None:
                self.retention_baseline = self._score(base, self._base_key(), split="retention")["score"]
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
                "judge_agreement": self.judge_agreement, "memory_bound": self.memory_bound,
                "backend": self.backend_settings.backend}

    async def scored_baseline(self) -> dict:
        await self.ensure_baseline()
        return self.info()

    async def evaluate(self, model_dir: str, cell_id: str, records_dir: str, split: str = "eval",
                       digest: str | None = None, workspace: str | None = None,
                       given: dict[str, str] | None = None) -> Evaluation | Refusal:
        """Score one submission on a split (a Refusal when it does not load). digest: the weights it must have (a
        kept copy scored on the final split: anything else is an error, not a score). workspace: also look for the
        hidden items in it (`contamination`: where they were found); given: the digests of the files a2rl wrote
        there (HiddenItems.survey)."""
        try:
            loaded = await asyncio.to_thread(self._load, Path(model_dir))
        except Refusal as e:
            return e
        out = Evaluation(backend=self.backend_settings.backend)
        # the scan runs beside the evaluation (pure Python beside torch): it adds little to the replica's time
        scanning = None if workspace is None else asyncio.ensure_future(
            asyncio.to_thread(self.hidden.survey, Path(workspace), given))
        try:
            out.digest = await asyncio.to_thread(self.backend.weights_digest, loaded)
            if digest is not None and out.digest != digest:
                raise ValueError(f"its weights changed since they were scored (digest {out.digest[:12]}, "
                                 f"expected {digest[:12]})")
            weights = await asyncio.to_thread(self.backend.weights, loaded) if self.base_weights is not None \
                or self.known else None
            if out.digest == self.base_digest or await asyncio.to_thread(self._near_copy, weights):
                out.flags.append("copy_of_base")
            if self.known and split == "eval":  # (the final split scores a submission checked already)
                out.identity, out.known_checkpoint = await asyncio.to_thread(self._identify, weights,
                                                                             Path(model_dir))
                if out.known_checkpoint is not None:
                    out.flags.append("known_checkpoint")
            key = await asyncio.to_thread(score_key, Path(model_dir), out.digest)
            result, out.judge_usage, _ = await self._judged(loaded, key, cell_id, Path(records_dir) / JUDGE_CALLS,
                                                            split)
            out.score, out.eval_s, out.metrics = result["score"], result["eval_s"], result.get("metrics")
            out.flags += result.get("flags", [])
            out.approximations = result.get("approximations")
            if result["cached"]:
                out.flags.append("cached")
            if split == "final" and self.retention_task is not None:
                out.retention = await asyncio.to_thread(self._retention, loaded, key)
                if out.retention["drop"] > out.retention["max_drop"]:
                    out.flags.append("retention_drop")
            if scanning is not None:
                survey = await scanning
                if survey.matches:
                    out.flags.append("contamination")
                    out.contamination = survey.matches
                if survey.truncated:  # bounded work: what was not read is said, in the record
                    out.contamination_scan = {"truncated": survey.truncated, "files": survey.files,
                                              "bytes": survey.bytes}
        except JudgeUnavailable as e:  # the judge's outage, not the model's fault: no score, and no charge
            log.warning("judge unavailable for %s: %s", cell_id, e)
            out.error, out.refunded = f"judge unavailable: {e}", True
            out.flags += ["eval_failed", "judge_unavailable"]
        except Exception as e:  # a failing evaluation is a result, not a crash of the deployment
            log.exception("evaluation failed for %s", cell_id)
            out.error, out.digest = f"evaluation failed: {type(e).__name__}: {e}", None
            out.flags.append("eval_failed")
        finally:
            if scanning is not None and not scanning.done():
                await asyncio.wait([scanning])  # (its error, if any, is the evaluation's already)
            await asyncio.to_thread(self.backend.unload, loaded)
        return out

    def scan(self, workspace: str, given: dict[str, str] | None = None) -> list[dict]:
        """Where the hidden items are in the workspace (evaluators.contamination)."""
        return self.hidden.scan(Path(workspace), given)

    def _near_copy(self, weights: dict | None) -> bool:
        """Every weight within a tiny distance of the base model's: a copy of it, though not a byte-exact one."""
        if self.base_weights is None or weights is None:
            return False
        return relative_distance(weights, self.base_weights) <= self.near_copy_tol

    def _identify(self, weights: dict | None, model_dir: Path) -> tuple[dict, dict | None]:
        """Its distances to the base and the known models, and the known model it is flagged as (or None). A backend
        that does not give its weights (vLLM) has them read from the submitted safetensors files instead."""
        from evaluators.identity import LoadedTensors, SafetensorsTensors, identify

        try:
            sub = LoadedTensors(weights) if weights is not None else SafetensorsTensors(model_dir)
            base = LoadedTensors(self.base_weights) if self.base_weights is not None else SafetensorsTensors(
                self.base_dir)
        except FileNotFoundError as e:  # a pickled checkpoint on a backend that gives no weights: said, not failed
            return {"unchecked": str(e)}, None
        return identify(sub, base, self.known, self.near_copy_tol, self.spec.contamination.known_closer_ratio)

    def _say_known_shapes(self) -> None:
        """Log the known models not of the base's shape (their names or shapes differ): only a submission of their
        own shape is compared with them, so a naming mismatch would otherwise pass unseen."""
        from evaluators.identity import LoadedTensors, same_shape

        if self.base_weights is None:
            return
        for model in self.known:
            if not same_shape(LoadedTensors(self.base_weights), model.tensors):
                log.warning("known model %s is not of the base model's shape (%d tensors, the base %d): it is "
                            "compared only with submissions of its own shape", model.name, len(model.tensors.shapes),
                            len(self.base_weights))

    def _retention(self, loaded, key: str) -> dict:
        """The final submission's score on the retention task's items beside the base's there."""
        assert self.retention_task is not None and self.spec.retention is not None  # (asked only when set)
        assert self.retention_baseline is not None  # measured in __init__ beside the baseline
        score = self._score(loaded, key, split="retention")["score"]
        return {"task": self.retention_task.spec.name, "score": score, "baseline_score": self.retention_baseline,
                "drop": self.retention_baseline - score, "max_drop": self.spec.retention.max_drop,
                "n": len(self.rows["retention"])}

    def _load(self, model_dir: Path):
        from contracts.errors import ModelLoadError

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
        task = self.retention_task if split == "retention" and self.retention_task is not None else self.task
        result = evaluate_loaded(task, self.backend, loaded, self.rows[split], judge=judge)
        entry = {"score": result["score"], "n": result["n"], "eval_s": time.time() - started}
        if result.get("metrics"):
            entry["metrics"] = result["metrics"]
        if result.get("flags"):  # the task's own (e.g. gamed_tests, approximate): scored as the protocol says, told
            entry["flags"] = list(result["flags"])
        if result.get("approximations"):  # why it is approximate (Task.approximations), for the record
            entry["approximations"] = list(result["approximations"])
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
        assert self.driver_url is not None  # __init__ refuses a judged task without the driver proxy
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
