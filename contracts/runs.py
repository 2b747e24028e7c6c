"""The run registry: which run tokens are open, and each run's budget counters.

One Ray actor for the sweep, shared by every grading replica (and the rollout service), so replicas stay
stateless and submission counting is atomic: an actor runs one method at a time. When it refuses, it says why with
a Refusal (contracts.refusals), which the services answer as is.

It survives its own death: every change is appended to a journal file before the caller hears of it, Ray restarts
the actor (max_restarts) and retries the calls that were in flight (max_task_retries), and the restarted actor
replays the journal. A retried call must not count twice, so every change is idempotent: a submission is reserved
under the caller's request id, finished or cancelled by its submission id, a session claimed by its session id, a
release run's entry added by its submission id and an answer kept under its cache key.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from contracts.refusals import Refusal

REGISTRY_NAME = "a2rl-run-registry"
NAMESPACE = "a2rl"  # explicit: Serve replicas live in their own namespace
APIS = ("a2rl", "release")  # the grading APIs a run is answered in (RunRegistration.api; evaluators/grading_api.py)


@dataclass(frozen=True, kw_only=True)
class RunRegistration:
    """What the orchestrator registers for a cell's attempt (through its task's grader)."""
    cell_id: str
    workspace: str                  # the agent's workspace (the grader reads submissions from it)
    records_dir: str                # the attempt's records folder (submissions.jsonl, final.json)
    code_repo: str                  # the cell's git repo of code snapshots
    started_at: float
    deadline: float                 # time.time() when the wall-time budget ends (moved back: working time)
    max_submissions: int
    driver_key: str | None = None   # the cell's key on the driver proxy (/status shows its use); None: no driver
    given: dict[str, str] | None = None  # {path: sha256} of what a2rl wrote in the workspace before the agent started
    # the grading API its agent side answers in (orchestrator/agent_sides): "a2rl", or "release": the release's
    # (RD-Agent's autorl_bench core/server.py: its /submit body and answer keys, its cache of an unchanged
    # resubmission, /time, /health)
    api: str = "a2rl"
    gpus: tuple[str, ...] = ()      # the cell's CUDA_VISIBLE_DEVICES entries (the release API's available_gpus)
    budget_started_at: float | None = None  # the release API's start_time (its /time, run_meta.json); None: started_at
    timeout_s: int | None = None    # the release API's timeout_s (its /time, run_meta.json)

    def __post_init__(self):
        if self.api not in APIS:  # a misspelt api would be answered in a2rl's shape without a word
            raise ValueError(f"api={self.api!r} is not a grading API; use one of {APIS}")


@dataclass(frozen=True)
class FinalCandidate:
    """The submission a run's held-out final score will be taken on: its kept copy and its feedback score."""
    submission_id: int
    marked: bool                    # the agent marked it final (else: the best so far)
    score: float
    digest: str
    path: str                       # the kept copy (records_dir/final-candidates/<id>)
    model_path: str                 # the folder the agent named


@dataclass(frozen=True, kw_only=True)
class Run(RunRegistration):
    """A run as the registry's callers see it."""
    closed: bool
    used: int                       # submission ids handed out
    refunded: int                   # of those, how many do not count (infra errors, a judge's outage)
    inflight: int                   # evaluations running now
    best: float | None
    scores: list[float]
    final: FinalCandidate | None
    last_submit_time: int | None = None  # int(time.time()) when its last graded submission was recorded
    entries: list[dict] = dataclasses.field(default_factory=list)  # a release run's: the release's scores.json list

    @property
    def counted(self) -> int:
        """Submissions that count against the run's budget."""
        return self.used - self.refunded

    @property
    def remaining_submissions(self) -> int:
        return self.max_submissions - self.counted


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class RunRegistry:
    def __init__(self, journal: str | None = None):
        self.runs: dict[str, dict] = {}
        self.lookups = {"get": 0, "open_tokens": 0}  # the questions routers ask on their hot path, counted
        self.journal = None
        if journal is not None:
            path = Path(journal)
            path.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text() if path.exists() else ""
            if not ray.get_runtime_context().was_current_actor_reconstructed:
                text = ""  # a new registry: the runs of an earlier one are over
            replayed = []
            for line in text.splitlines():
                try:
                    op, *args = json.loads(line)
                except ValueError:
                    continue  # a line cut off by the death that restarted us: its caller retries the change
                getattr(self, f"_{op}")(*args)
                replayed.append(line + "\n")
            path.write_text("".join(replayed))  # without a cut-off line, which the next change would run into
            self.journal = path.open("a")

    def _change(self, op: str, *args):
        """Apply one change, then journal it (flushed: a process death keeps it, the caller retries otherwise)."""
        result = getattr(self, f"_{op}")(*args)
        if self.journal is not None:
            self.journal.write(json.dumps([op, *args], default=str) + "\n")
            self.journal.flush()
        return result

    # -- runs ---------------------------------------------------------------------------------------------------
    def register(self, token: str, run: RunRegistration) -> None:
        self._change("register", token, dataclasses.asdict(run))

    def _register(self, token: str, run: dict) -> None:  # (a journal line holds the registration as a dict)
        self.runs[token] = {**run, "gpus": tuple(run.get("gpus", ())),  # (a journal line holds a list)
                            "closed": False, "used": 0, "refunded": 0, "inflight": {}, "requests": {},
                            "best": None, "scores": [], "sessions": set(), "final": None, "last_submit_time": None,
                            "entries": [], "answers": {}}

    def get(self, token: str) -> Run | None:
        self.lookups["get"] += 1
        run = self.runs.get(token)
        return None if run is None or run["closed"] else view(run)

    def open_tokens(self) -> list[str]:
        """The tokens of the runs open now: what the rollout routers check requests against (OpenRuns)."""
        self.lookups["open_tokens"] += 1
        return [token for token, run in self.runs.items() if not run["closed"]]

    def lookup_counts(self) -> dict:
        """How often each lookup was asked since this process started (the benchmark's registry calls per step)."""
        return dict(self.lookups)

    def peek(self, token: str) -> Run | None:
        """Like get, but also for closed runs (the orchestrator's view)."""
        run = self.runs.get(token)
        return None if run is None else view(run)

    def reserve(self, token: str, request_id: str | None = None) -> tuple[int | None, Refusal | None]:
        """Claim the next submission id, or say why not. The same request id gets the same submission id."""
        run = self.runs.get(token)
        if run is not None and request_id in run["requests"]:
            return run["requests"][request_id], None
        if run is None or run["closed"]:
            return None, Refusal("invalid_token", "unknown or closed run token")
        if time.time() >= run["deadline"]:
            return None, Refusal("budget_exhausted", "time budget exhausted")
        if counted(run) >= run["max_submissions"]:
            return None, Refusal("budget_exhausted", f"submission budget exhausted ({run['max_submissions']} used)")
        return self._change("reserve", token, request_id, time.time()), None

    def _reserve(self, token: str, request_id: str | None, at: float) -> int:
        run = self.runs[token]
        run["used"] += 1
        run["inflight"][run["used"]] = at
        if request_id is not None:
            run["requests"][request_id] = run["used"]
        return run["used"]

    def finish(self, token: str, submission_id: int | None = None, score: float | None = None,
               refund: bool = False, graded: bool = True) -> tuple[float | None, bool]:
        """Record a finished evaluation; returns the run's best score so far and whether the submission was still
        in flight (False: it was already finished, or given up when its cell closed: its record is written). refund:
        it failed for a reason that is not the agent's (its judge was down, the grader died): it does not count
        against the budget (its id is not reused). graded: the agent is answered with its result (not an
        infrastructure error), which is the run's last_submit_time then."""
        run = self.runs[token]
        if submission_id not in run["inflight"]:
            return run["best"], False
        at = int(time.time()) if graded else None
        return self._change("finish", token, submission_id, score, refund, at), True

    def _finish(self, token: str, submission_id: int, score: float | None, refund: bool,
                at: int | None = None) -> float | None:
        run = self.runs[token]
        run["inflight"].pop(submission_id, None)
        run["refunded"] += int(refund)
        if score is not None:
            run["scores"].append(score)
            run["best"] = score if run["best"] is None else max(run["best"], score)
        if at is not None:
            run["last_submit_time"] = at
        return run["best"]

    # -- a release run's books in the release's shape (evaluators/grading_api.py answers with them) -------------------
    def add_entry(self, token: str, entry: dict) -> tuple[dict, int]:
        """Add a graded submission's entry (the original's scores.json item) to the run's list, once per submission
        id (a retried call adds nothing); returns the best entry (the original's max(): the first highest score)
        and how many entries there are."""
        run = self.runs[token]
        if all(e["submission_id"] != entry["submission_id"] for e in run["entries"]):
            self._change("add_entry", token, entry)
        return max(run["entries"], key=lambda e: e.get("score", 0)), len(run["entries"])

    def _add_entry(self, token: str, entry: dict) -> None:
        entries = self.runs[token]["entries"]
        entries.append(entry)
        entries.sort(key=lambda e: e["submission_id"])  # concurrent evaluations may finish out of order

    def cached_answer(self, token: str, key: str) -> dict | None:
        """The answer given to a submission whose folder had this cache key (the original's _make_cache_key)."""
        run = self.runs.get(token)
        return None if run is None else run["answers"].get(key)

    def cache_answer(self, token: str, key: str, answer: dict) -> None:
        """Keep a successful evaluation's answer for an unchanged resubmission (kept across a grader's restart)."""
        if token in self.runs and self.runs[token]["answers"].get(key) != answer:
            self._change("cache_answer", token, key, answer)

    def _cache_answer(self, token: str, key: str, answer: dict) -> None:
        self.runs[token]["answers"][key] = answer

    def extend(self, token: str, deadline: float) -> None:
        """Move the run's deadline (working time: its waits on the driver's rate limits do not count)."""
        if token in self.runs and self.runs[token]["deadline"] != deadline:
            self._change("extend", token, deadline)

    def _extend(self, token: str, deadline: float) -> None:
        self.runs[token]["deadline"] = deadline

    def set_final(self, token: str, candidate: FinalCandidate) -> None:
        """The submission the run's held-out final score will be taken on (its kept copy, its feedback score)."""
        self._change("set_final", token, dataclasses.asdict(candidate))

    def _set_final(self, token: str, candidate: dict) -> None:
        self.runs[token]["final"] = candidate

    def cancel(self, token: str, submission_id: int) -> None:
        """Take back a reservation the agent is refused for (its model does not load): nothing is recorded, and the
        id is reused when it is still the last one."""
        run = self.runs.get(token)
        if run is not None and submission_id in run["inflight"]:
            self._change("cancel", token, submission_id)

    def _cancel(self, token: str, submission_id: int) -> None:
        run = self.runs[token]
        run["inflight"].pop(submission_id, None)
        run["requests"] = {r: i for r, i in run["requests"].items() if i != submission_id}
        if submission_id == run["used"]:
            run["used"] -= 1
        else:  # a later submission holds a higher id: this one stays a gap, counted back
            run["refunded"] += 1

    def close(self, token: str) -> int:
        """No new submissions; returns how many are still being evaluated."""
        run = self.runs.get(token)
        if run is None:
            return 0
        if not run["closed"]:
            self._change("close", token)
        return len(run["inflight"])

    def _close(self, token: str) -> None:
        self.runs[token]["closed"] = True

    def abandon(self, token: str) -> list[int]:
        """Give up the run's evaluations still in flight (its cell is over and waited long enough): they are
        refunded; returns their ids, for the grader to record as infrastructure errors."""
        run = self.runs.get(token)
        ids = sorted(run["inflight"]) if run is not None else []
        for submission_id in ids:
            self._change("finish", token, submission_id, None, True)
        return ids

    def forget(self, token: str) -> None:
        if token in self.runs:
            self._change("forget", token)

    def _forget(self, token: str) -> None:
        self.runs.pop(token, None)

    # -- environment sessions of the rollout service (level 3): counted here so every replica sees one limit --------
    def claim_sessions(self, token: str, session_ids: list[str], limit: int) -> list[Refusal | None]:
        """Count new sessions against the run's limit, in order; per session None when granted, else why not."""
        run = self.runs.get(token)
        if run is None or run["closed"]:
            return [Refusal("invalid_token", "unknown or closed run token")] * len(session_ids)
        if time.time() >= run["deadline"]:
            return [Refusal("budget_exhausted", "time budget exhausted")] * len(session_ids)
        new = [sid for sid in session_ids if sid not in run["sessions"]]  # the others: a retried claim
        room = max(0, limit - len(run["sessions"]))
        granted = set(new[:room])
        if granted:
            self._change("claim_sessions", token, sorted(granted))
        full = Refusal("too_many_sessions", f"session limit reached ({limit} open); close one (POST /env/close) "
                                            "or wait for idle ones to expire")
        return [None if sid in run["sessions"] else full for sid in session_ids]

    def _claim_sessions(self, token: str, session_ids: list[str]) -> None:
        self.runs[token]["sessions"].update(session_ids)

    def release_lost(self, token: str, session_ids: list[str]) -> list[str]:
        """Sessions whose hosts do not know them: those the run still counts were lost with a host's earlier process
        (closed, expired or never-opened ones are released already). Releases those and returns them."""
        run = self.runs.get(token)
        lost = [sid for sid in session_ids if run is not None and sid in run["sessions"]]
        if lost:
            self._change("release_sessions", token, lost)
        return lost

    def release_sessions(self, token: str, session_ids: list[str] | None = None) -> int:
        """Forget closed sessions (all of the run's when session_ids is None); returns how many remain open."""
        run = self.runs.get(token)
        if run is None:
            return 0
        if session_ids is None or run["sessions"] & set(session_ids):
            self._change("release_sessions", token, session_ids)
        return len(run["sessions"])

    def _release_sessions(self, token: str, session_ids: list[str] | None) -> None:
        sessions = self.runs[token]["sessions"]
        if session_ids is None:
            sessions.clear()
        else:
            sessions.difference_update(session_ids)


class OpenRuns:
    """Which run tokens are open, as one process (a rollout router) knows them without asking the registry per
    request: a snapshot of the registry's open tokens, refreshed in the background while requests come (an idle
    process asks nothing).

    A token is open when it is in a snapshot asked for less than `fresh_s` ago; once the snapshot is older (no
    requests for a while, the registry slow or restarting) a request waits for the next one. A token not in the
    snapshot (a run registered since it was asked for, a closed or unknown one) is asked of the registry, and kept
    when open: a sequential client's token is asked at most twice per process. A closed run is refused at most
    `fresh_s` after its close returned: any snapshot or answer that still held it was asked for before that."""

    def __init__(self, registry, refresh_s: float = 0.25, fresh_s: float = 1.0):
        self.registry, self.refresh_s, self.fresh_s = registry, refresh_s, fresh_s
        self.tokens: frozenset[str] = frozenset()
        self.asked_at = float("-inf")  # when the snapshot was asked for (time.monotonic)
        self.refreshing: Any = None  # the refresh under way (an asyncio future), if any

    async def is_open(self, token: str) -> bool:
        import asyncio

        if time.monotonic() - self.asked_at >= self.refresh_s and self.refreshing is None:
            self.refreshing = asyncio.ensure_future(self._refresh())
        if time.monotonic() - self.asked_at >= self.fresh_s and self.refreshing is not None:
            await asyncio.shield(self.refreshing)
        if time.monotonic() - self.asked_at < self.fresh_s and token in self.tokens:
            return True
        asked = time.monotonic()
        if await self.registry.get.remote(token) is None:
            return False
        if asked >= self.asked_at:  # not older than the snapshot: it holds until the snapshot is refreshed
            self.tokens = self.tokens | {token}
        return True

    async def _refresh(self) -> None:
        asked = time.monotonic()
        try:
            self.tokens = frozenset(await self.registry.open_tokens.remote())
            self.asked_at = asked
        except Exception:  # noqa: BLE001 - the next request tries again; until then tokens are asked one by one
            pass
        finally:
            self.refreshing = None


def view(run: dict) -> Run:
    """A run as its callers see it: `inflight` is how many evaluations are running."""
    fields = {f.name for f in dataclasses.fields(Run)}
    out = {k: v for k, v in run.items() if k in fields}
    out.update(inflight=len(run["inflight"]), scores=list(run["scores"]), entries=list(run["entries"]),
               final=None if run["final"] is None else FinalCandidate(**run["final"]))
    return Run(**out)


def counted(run: dict) -> int:
    """Submissions that count against a run's budget (the registry's own record of a run; Run.counted outside)."""
    return run["used"] - run.get("refunded", 0)


def get_or_create_registry(journal: str | Path | None = None, scope: str = ""):
    """The scope's registry (a sweep's: contracts.serving.sweep_scope), created on first use. journal: its journal
    file (on storage its node can reach; None: its state dies with it); ignored when the registry exists already.
    Detached, as the Serve applications that call it: on a cluster that outlives the orchestrator, a resumed sweep
    finds the same registry its graders hold (the sweep removes it at its end: orchestrator.services)."""
    from contracts.serving import scoped

    # @ray.remote turns the class into an actor class with .options; ray's stubs do not tell mypy so
    options = RunRegistry.options  # type: ignore[attr-defined]
    handle = options(name=scoped(REGISTRY_NAME, scope), namespace=NAMESPACE, get_if_exists=True,
                     lifetime="detached").remote(None if journal is None else str(journal))
    ray.get(handle.__ray_ready__.remote())
    return handle


def registry(scope: str = ""):
    from contracts.serving import scoped

    return ray.get_actor(scoped(REGISTRY_NAME, scope), namespace=NAMESPACE)


def run_token(request) -> str:
    """The caller's run token (Authorization: Bearer, or X-Run-Token), from any request with `headers`."""
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-run-token", "")
    if not token:
        raise Refusal("missing_token", "send your run token: 'Authorization: Bearer $A2RL_RUN_TOKEN'")
    return token
