"""The rollout service: environment sessions on the train instances of an interactive task, for online RL.

One Ray Serve application per task at ``/<task>/env`` (so ``$GRADING_SERVER_URL/env/...`` for an agent), FastAPI
ingress, the same run tokens as the grader (``Authorization: Bearer TOKEN``, checked against the RunRegistry). The
routes it serves, and what agents read about them, are one table: contracts.rollout_api.ROUTES (/env/games, /reset,
/step, /step_batch, /reset_batch, /close, /sessions, /health).

Architecture: the Serve deployment is a stateless router (any number of replicas); sessions live in a fixed pool of
``EnvHost`` actors, each holding many episodes of the task's Environment in its own process (engines such as the
text games' are pure Python: one process steps ~30-40 games/s, so hosts are the unit of parallelism). A session id
names its host (``<host>.<random>``), so every replica routes a session's requests to the same place; a batch is
one actor call per host, all hosts at once, each host stepping its part together (Environment.step_many). A step
costs one actor call, its host's: routers know which runs are open from a snapshot of the registry they refresh
while requests come (contracts.runs.OpenRuns: a closed run is refused within a second). Per-run session counts live in
the RunRegistry (one limit across all replicas and hosts), asked only when sessions open, close or are found lost. Hosts
close sessions idle for ``idle_timeout_s`` and release them in the registry; the orchestrator closes a run's sessions
when its cell ends (``close_run`` through the deployment handle). Eval instances never reach this service: routers and
hosts get the train instances only, looked up by index or name. The API calls instances "games" and actions "commands",
as agents have always used it.

Why not one actor per session: an actor is a process (~1-2 s to start plus ~2 s to import the engine, ~150 MB);
a pool of hosts starts once and creates a session in one engine reset (~0.5-0.8 s).

Settings: the task's ``rollout:`` block (contracts.task_spec.RolloutSettings; defaults in conf/task_defaults.yaml):
``num_hosts`` null starts one host per CPU of the cluster (host_count).

Where a step's time goes (benchmarks/bench_rollouts.py, 2 cores shared with other work): one session, one request a
step, costs ~11-13 ms p50 over the environment's own step, and in CPU: Serve's HTTP proxy ~5 ms, this router ~5 ms (a
trivial FastAPI endpoint on Serve costs ~4.5 ms in its replica: the router's own code is under 1 ms), the host ~2.5 ms
(a Ray actor call's handling), the client ~1 ms. Serve's floor alone is above 5 ms here; a batch pays it once for all
its sessions (~0.5 ms a step with 64 sessions).
"""
# (no `from __future__ import annotations`: FastAPI must see the real Request type through Serve's ingress)

import asyncio
import hashlib
import json
import logging
import random
import secrets
import threading
import time

import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError

from contracts.environment import Environment, Episode, Instance, Step
from contracts.refusals import Refusal, answer_refusals
from contracts.runs import run_token
from contracts.task_spec import TaskSpec

log = logging.getLogger("a2rl.rollouts")
HOST_RESTART_TRIES = 10  # a new session's open is tried this often, a second apart, while its host restarts (~1-2 s)
api = FastAPI(title="a2rl rollout API")
answer_refusals(api)  # a route that raises a Refusal answers with its status and body


def answered(content: dict) -> JSONResponse:
    """An answer as it is: returned as a Response, FastAPI does not walk it through jsonable_encoder first (~1.3 ms
    of CPU for a batch of 64 observations, against 0.4 ms for json.dumps alone)."""
    return JSONResponse(content=content)


def _answers_errors(method):
    """Host methods return a Refusal instead of raising it (a Ray error would hide it behind its own)."""
    import functools

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Refusal as e:
            return e

    return wrapper


# ------------------------------------------------------------------------------------------------------ hosts

class _Session:
    __slots__ = ("owner", "index", "episode", "last_used", "last", "done", "won")

    def __init__(self, owner: str, index: int, episode: Episode) -> None:
        self.owner, self.index, self.episode = owner, index, episode
        self.last_used = time.monotonic()
        self.last: dict = {}
        self.done = self.won = False


# A host holds nothing durable: when its process dies (OOM kill, a crashing engine) Ray starts it again, empty, under
# the same name, and the routers tell the agents of its sessions that they were lost (code session_lost).
@ray.remote(max_restarts=-1)
class EnvHost:
    """Holds sessions (one episode each) on a task's train instances; called only by the rollout routers."""

    def __init__(self, env: Environment, instances: list[Instance], idle_timeout_s: float, scope: str = ""):
        self.env = env
        self.scope = scope  # its sweep's: the run registry it releases sessions in
        self.instances = list(instances)
        self.max_steps = env.max_steps
        self.idle_timeout_s = float(idle_timeout_s)
        self.sessions: dict[str, _Session] = {}
        self.lock = threading.Lock()
        self.counters = {"opened": 0, "steps": 0, "reaped": 0}
        self.usage: dict[str, dict] = {}  # run token -> its resets, steps and wins (recorded when its cell ends)
        threading.Thread(target=self._reap_forever, name="reaper", daemon=True).start()

    def _reap_forever(self) -> None:
        period = max(0.05, min(5.0, self.idle_timeout_s / 4))
        while True:
            time.sleep(period)
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - the reaper must survive a transient registry error
                log.exception("reaping idle sessions failed")

    def reap(self) -> int:
        """Close sessions idle past the timeout and release them in the registry."""
        now = time.monotonic()
        with self.lock:
            idle = [sid for sid, s in self.sessions.items() if now - s.last_used > self.idle_timeout_s]
            dropped = [(sid, self.sessions.pop(sid)) for sid in idle]
        by_owner: dict[str, list[str]] = {}
        for sid, s in dropped:
            s.episode.close()
            by_owner.setdefault(s.owner, []).append(sid)
        if by_owner:
            from contracts.runs import registry

            reg = registry(self.scope)
            ray.get([reg.release_sessions.remote(owner, sids) for owner, sids in by_owner.items()])
            self.counters["reaped"] += len(dropped)
        return len(dropped)

    def _get(self, session_id: str, owner: str) -> _Session:
        s = self.sessions.get(session_id)
        if s is None or s.owner != owner:  # another run's session looks exactly like a missing one
            raise Refusal("unknown_session", f"no open session {session_id!r} for your run (closed, expired "
                                             "or never opened); start one with POST /env/reset")
        s.last_used = time.monotonic()
        return s

    def _use(self, owner: str, **counts: int) -> None:
        usage = self.usage.setdefault(owner, {"resets": 0, "steps": 0, "wins": 0})
        for key, n in counts.items():
            usage[key] += n

    def _answer(self, s: _Session, session_id: str, step: Step) -> dict:
        if not s.won and step.won:
            self._use(s.owner, wins=1)
        s.won = s.won or step.won
        s.done = s.won or step.done or s.episode.steps >= self.max_steps
        s.last = {"session_id": session_id, "observation": step.observation,
                  "admissible_commands": list(step.actions or ()), "reward": float(step.reward), "won": s.won,
                  "done": s.done, "steps": s.episode.steps}
        return dict(s.last)

    def _start(self, s: _Session, session_id: str, actions: list[str]) -> dict:
        first = s.episode.reset()
        s.won = s.done = False
        self._use(s.owner, resets=1)
        out = self._answer(s, session_id, first)
        for action in actions:
            if s.done:
                break
            step = s.episode.step(action)
            self.counters["steps"] += 1
            self._use(s.owner, steps=1)
            out = self._answer(s, session_id, step)
        return {**out, "task": s.episode.goal, "game": self._ref(s.index)}

    def _ref(self, index: int) -> dict:
        return {"index": index, "name": self.instances[index].name}

    @_answers_errors
    def open(self, session_id: str, owner: str, index: int, actions: list[str]) -> dict:
        s = _Session(owner, index, self.env.open(self.instances[index]))
        try:
            out = self._start(s, session_id, actions)
        except Exception:
            s.episode.close()
            raise
        with self.lock:
            self.sessions[session_id] = s
        self.counters["opened"] += 1
        return out

    @_answers_errors
    def reset(self, session_id: str, owner: str, index: int | None, actions: list[str]) -> dict:
        with self.lock:
            s = self._get(session_id, owner)
        if index is not None and index != s.index:
            s.episode.close()
            s.episode, s.index = self.env.open(self.instances[index]), index
        return self._start(s, session_id, actions)

    @_answers_errors
    def close(self, session_id: str, owner: str) -> bool:
        with self.lock:
            s = self._get(session_id, owner)
            self.sessions.pop(session_id, None)
        s.episode.close()
        return True

    def batch(self, method: str, owner: str, calls: list[tuple]) -> list:
        """One router call for all of a request's sessions on this host: `method` for each (session id, *args), in
        order; each answer is its own (a refusal for one session does not stop the others)."""
        if method not in ("open", "reset", "step", "close"):
            raise ValueError(f"no host method {method!r}")
        if method == "step":
            return self._steps(owner, calls)
        run = getattr(self, method)
        return [run(session_id, owner, *args) for session_id, *args in calls]

    def _steps(self, owner: str, calls: list[tuple]) -> list:
        """A batch's steps on this host, taken together (Environment.step_many: one search call for all of
        DeepSearchQA's queries). A session named twice is stepped in order: its n-th step goes in the n-th wave."""
        answers: list = [None] * len(calls)
        waves: list[list[int]] = []
        seen: dict[str, int] = {}
        for i, (session_id, _) in enumerate(calls):
            n = seen[session_id] = seen.get(session_id, -1) + 1
            if n == len(waves):
                waves.append([])
            waves[n].append(i)
        for wave in waves:
            live = []
            for i in wave:
                try:
                    with self.lock:
                        s = self._get(calls[i][0], owner)
                except Refusal as e:
                    answers[i] = e
                    continue
                if s.done:  # the episode is over: answer as before, change nothing
                    answers[i] = dict(s.last)
                else:
                    live.append((i, s))
            if live:
                steps = self.env.step_many([s.episode for _, s in live], [calls[i][1] for i, _ in live])
                for (i, s), step in zip(live, steps):
                    self.counters["steps"] += 1
                    self._use(owner, steps=1)
                    answers[i] = self._answer(s, calls[i][0], step)
        return answers

    def close_owner(self, owner: str) -> tuple[list[str], dict]:
        """Close a run's sessions; returns their ids and the run's usage of this host (forgotten here)."""
        with self.lock:
            ids = [sid for sid, s in self.sessions.items() if s.owner == owner]
            dropped = [self.sessions.pop(sid) for sid in ids]
            usage = self.usage.pop(owner, {})
        for s in dropped:
            s.episode.close()
        return ids, usage

    def owned(self, owner: str) -> list[dict]:
        with self.lock:
            return [{"session_id": sid, "game": self._ref(s.index), "steps": s.episode.steps,
                     "done": s.done, "won": s.won} for sid, s in self.sessions.items() if s.owner == owner]

    def stats(self) -> dict:
        """Its sessions and counters, the CPU seconds its process has used (how busy a host is: sizing) and its
        peak resident memory."""
        import resource

        with self.lock:
            return {"sessions": len(self.sessions), **self.counters, "cpu_s": time.process_time(),
                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


# ------------------------------------------------------------------------------------------------------ router

async def json_body(request: Request) -> dict:
    try:
        body = await request.json()
    except Exception:
        raise Refusal("bad_request", 'the body must be a JSON object, e.g. {"session_id": ..., "command": "..."}'
                      ) from None
    if not isinstance(body, dict):
        raise Refusal("bad_request", "the body must be a JSON object")
    return body


def _field(body: dict, key: str, kind, required: bool = True):
    value = body.get(key)
    if value is None:
        if required:
            raise Refusal("invalid_field", f"{key!r} is required")
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise Refusal("invalid_field", f"{key!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _command(body: dict) -> str:
    command = _field(body, "command", str)
    if len(command) > 500:
        raise Refusal("invalid_field", "'command' is longer than 500 characters")
    return command


def _entries(body: dict, key: str, limit: int) -> list:
    entries = body.get(key)
    if not isinstance(entries, list):
        raise Refusal("invalid_field", f"{key!r} must be a list (one entry per session)")
    if len(entries) > limit:
        raise Refusal("invalid_field", f"{key!r} has {len(entries)} entries; a run has at most {limit} sessions")
    return entries


def _entry_answer(result, session_id: str | None) -> dict:
    """One session's part of a batch's answer: its answer with status 200, or its refusal with its status."""
    if isinstance(result, Refusal):
        return {"session_id": session_id, "status": result.status, **result.body()}
    return {**result, "status": 200}


def _lost(session_id: str, opening: bool = False) -> Refusal:
    if opening:
        return Refusal("session_lost", "the environment host died while it opened your session; it restarts on its "
                                       "own: POST /env/reset again")
    return Refusal("session_lost", f"session {session_id!r} was lost: its environment host died and restarted "
                                   "without it; start a new one with POST /env/reset (without session_id)")


# Everything the router class uses is defined above it: Serve pickles the class when it is decorated.

# 120 s for a health check, not Serve's 30: a busy machine is no reason to restart a replica (evaluators/grader.py)
@serve.deployment(max_ongoing_requests=512, health_check_period_s=10, health_check_timeout_s=120)
@serve.ingress(api)
class RolloutService:
    def __init__(self, spec: TaskSpec, instances: list[Instance], max_steps: int, host_names: list[str],
                 scope: str = ""):
        from contracts.runs import NAMESPACE, OpenRuns, registry

        self.cfg = spec.rollout
        self.max_steps = max_steps
        self.games = []
        for i, inst in enumerate(instances):  # a loop, not a comprehension: Serve pickles this class by value
            self.games.append({"index": i, "name": inst.name, **inst.info})
        self.by_name = {g["name"]: g["index"] for g in self.games}
        self.hosts = [ray.get_actor(name, namespace=NAMESPACE) for name in host_names]
        self.registry = registry(scope)
        # A step asks its host only: which runs are open is known here (a closed one is refused within a second)
        self.open_runs = OpenRuns(self.registry)
        self.task_name = spec.name
        self.replica = serve.get_replica_context().replica_id.unique_id
        self._rng = random.Random(secrets.randbits(64))
        self._next_host = self._rng.randrange(len(self.hosts))

    # -- orchestrator side (deployment handle) --------------------------------------------------------------------
    async def close_run(self, token: str) -> dict:
        """Close every session of a run (its cell ended); returns how many were open and the run's total use of the
        environment (episodes started or replayed, steps, wins) for its records."""
        total = {"closed": 0, "resets": 0, "steps": 0, "wins": 0}
        for ids, usage in await asyncio.gather(*[host.close_owner.remote(token) for host in self.hosts]):
            total["closed"] += len(ids)
            for key, n in usage.items():
                total[key] += n
        await self.registry.release_sessions.remote(token, None)
        return total

    async def stats(self) -> list[dict]:
        return list(await asyncio.gather(*[host.stats.remote() for host in self.hosts]))

    async def reap(self) -> int:
        return sum(await asyncio.gather(*[host.reap.remote() for host in self.hosts]))

    # -- agent side (HTTP) ----------------------------------------------------------------------------------------
    @api.get("/health")
    async def health(self) -> dict:
        return {"status": "ok", "task": self.task_name, "games": len(self.games), "hosts": len(self.hosts),
                "replica": self.replica}

    @api.get("/games")
    async def list_games(self, request: Request):
        await self._run(request)
        return {"games": self.games, "max_steps": self.max_steps,
                "max_sessions": self.cfg.max_sessions_per_run, "idle_timeout_s": self.cfg.idle_timeout_s}

    @api.get("/sessions")
    async def sessions(self, request: Request):
        token = await self._run(request)
        owned = []
        for part in await asyncio.gather(*[host.owned.remote(token) for host in self.hosts]):
            owned += part
        return {"sessions": owned, "max_sessions": self.cfg.max_sessions_per_run}

    @api.post("/reset")
    async def reset(self, request: Request):
        token = await self._run(request)
        (answer,) = await self._resets(token, [self._reset_entry(await json_body(request))])
        if isinstance(answer, Refusal):
            raise answer
        return answered(answer)

    @api.post("/step")
    async def step(self, request: Request):
        token = await self._run(request)
        # Both fields as query parameters and no body: Serve's replica fetches a body from its proxy with one more
        # actor call (1-2.5 ms a request on 2 cores: docs/rollouts.md); the query comes with the request itself
        body = dict(request.query_params) if "session_id" in request.query_params else await json_body(request)
        session_id, command = _field(body, "session_id", str), _command(body)
        (answer,) = await self._on_hosts("step", token, [(session_id, command)])
        if isinstance(answer, Refusal):
            raise answer
        return answered(answer)

    @api.post("/reset_batch")
    async def reset_batch(self, request: Request):
        """{"resets": [reset bodies]} -> {"results": [per entry: its reset's answer and "status": 200, or
        {"session_id", "status", "error", "code"}]}: new sessions are claimed in one registry call, and every
        host opens or resets its part in one call, all hosts at once."""
        token = await self._run(request)
        entries = _entries(await json_body(request), "resets", self.cfg.max_sessions_per_run)
        parsed = []
        for i, entry in enumerate(entries):
            try:
                if not isinstance(entry, dict):
                    raise Refusal("invalid_field", f"resets[{i}] must be an object like the body of POST /env/reset")
                parsed.append(self._reset_entry(entry))
            except Refusal as e:
                parsed.append(e)
        answers = await self._resets(token, parsed)
        return answered({"results": [_entry_answer(a, e.get("session_id") if isinstance(e, dict) else None)
                                     for a, e in zip(answers, entries)]})

    @api.post("/step_batch")
    async def step_batch(self, request: Request):
        """{"steps": [{"session_id", "command"}]} -> {"results": [per entry: its step's answer and "status": 200,
        or {"session_id", "status", "error", "code"}]}: each host steps its part in one call, all hosts at once;
        a session refused (lost, unknown, another run's) is refused alone."""
        token = await self._run(request)
        entries = _entries(await json_body(request), "steps", self.cfg.max_sessions_per_run)
        answers: list = [None] * len(entries)
        calls, where = [], []
        for i, entry in enumerate(entries):
            try:
                if not isinstance(entry, dict):
                    raise Refusal("invalid_field", f"steps[{i}] must be an object {{session_id, command}}")
                calls.append((_field(entry, "session_id", str), _command(entry)))
                where.append(i)
            except Refusal as e:
                answers[i] = e
        for i, answer in zip(where, await self._on_hosts("step", token, calls)):
            answers[i] = answer
        return answered({"results": [_entry_answer(a, e.get("session_id") if isinstance(e, dict) else None)
                                     for a, e in zip(answers, entries)]})

    @api.post("/close")
    async def close(self, request: Request):
        token = await self._run(request)
        session_id = _field(await json_body(request), "session_id", str)
        (answer,) = await self._on_hosts("close", token, [(session_id,)])
        if isinstance(answer, Refusal):
            raise answer
        remaining = await self.registry.release_sessions.remote(token, [session_id])
        return {"closed": session_id, "open_sessions": remaining}

    # -- internals ------------------------------------------------------------------------------------------------
    async def _run(self, request: Request) -> str:
        token = run_token(request)
        if not await self.open_runs.is_open(token):
            raise Refusal("invalid_token", "unknown or expired run token")
        return token

    def _new_session_id(self) -> str:
        self._next_host = (self._next_host + 1) % len(self.hosts)  # spread a run's sessions over the hosts
        return f"{self._next_host}.{secrets.token_urlsafe(12)}"

    def _host_index(self, session_id: str) -> int:
        prefix, _, rest = session_id.partition(".")
        if not prefix.isdigit() or not rest or int(prefix) >= len(self.hosts):
            raise Refusal("unknown_session", f"no open session {session_id!r} for your run")
        return int(prefix)

    def _reset_entry(self, body: dict) -> dict:
        return {"game": self._game_index(body.get("game")), "actions": self._actions(body.get("actions")),
                "session_id": _field(body, "session_id", str, required=False)}

    def _game_index(self, game) -> int | None:
        if game is None:
            return None
        if isinstance(game, int) and not isinstance(game, bool):
            if 0 <= game < len(self.games):
                return game
            raise Refusal("unknown_game", f"game index {game} is out of range: there are {len(self.games)} "
                                                "train games (GET /env/games)")
        if isinstance(game, str) and game in self.by_name:
            return self.by_name[game]
        raise Refusal("unknown_game", f"no train game {game!r}; send an index or a name from GET /env/games")

    def _actions(self, actions) -> list[str]:
        if actions is None:
            return []
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise Refusal("invalid_field", "'actions' must be a list of command strings")
        if len(actions) > self.max_steps:
            raise Refusal("invalid_field", f"'actions' has {len(actions)} commands; an episode has at most "
                                                 f"{self.max_steps} steps")
        return actions

    async def _resets(self, token: str, entries: list) -> list:
        """Reset bodies (parsed, or the Refusal a body got) -> per entry its answer or refusal. A session_id resets
        that session; the others open new sessions, counted against the run's limit in one registry call."""
        answers = list(entries)
        again = [i for i, e in enumerate(entries) if isinstance(e, dict) and e["session_id"] is not None]
        new = [i for i, e in enumerate(entries) if isinstance(e, dict) and e["session_id"] is None]
        new_ids = [self._new_session_id() for _ in new]
        claims = await self.registry.claim_sessions.remote(token, new_ids, self.cfg.max_sessions_per_run) \
            if new else []
        opens, opened_at = [], []
        for i, session_id, refusal in zip(new, new_ids, claims):
            if refusal is not None:
                answers[i] = refusal
                continue
            game = entries[i]["game"]
            opens.append((session_id, self._rng.randrange(len(self.games)) if game is None else game,
                          entries[i]["actions"]))
            opened_at.append(i)
        try:
            reset, opened = await asyncio.gather(
                self._on_hosts("reset", token, [(entries[i]["session_id"], entries[i]["game"], entries[i]["actions"])
                                                for i in again]),
                self._on_hosts("open", token, opens))
        except BaseException:
            if opens:  # not opened: not counted
                await self.registry.release_sessions.remote(token, [o[0] for o in opens])
            raise
        failed = [o[0] for o, answer in zip(opens, opened) if isinstance(answer, Refusal)]
        if failed:
            await self.registry.release_sessions.remote(token, failed)
        for i, answer in [*zip(again, reset), *zip(opened_at, opened)]:
            answers[i] = answer
        return answers

    async def _on_hosts(self, method: str, token: str, calls: list[tuple]) -> list:
        """Call a host method for each (session id, *args) of one run: one actor call per host, all hosts at once;
        per call its answer or refusal. A session its host lost (the host died mid-call, or restarted empty since)
        is answered session_lost and released in the registry, so it no longer counts against the run's limit."""
        answers: list = [None] * len(calls)
        by_host: dict[int, list[int]] = {}
        for i, call in enumerate(calls):
            try:
                by_host.setdefault(self._host_index(call[0]), []).append(i)
            except Refusal as e:
                answers[i] = e

        async def on_host(index: int, which: list[int]) -> None:
            host = self.hosts[index]
            part = [calls[i] for i in which]
            tries = HOST_RESTART_TRIES if method == "open" else 1
            for attempt in range(tries):
                try:
                    out = await host.batch.remote(method, token, part)
                    break
                except ActorUnavailableError:
                    # The host is restarting (Ray has not yet seen it die, or is starting it again). A new session
                    # loses nothing by waiting for it; opening the same id twice only replaces the first.
                    if attempt == tries - 1:
                        out = [_lost(call[0], method == "open") for call in part]
                    else:
                        await asyncio.sleep(1.0)
                except RayActorError:
                    out = [_lost(call[0], method == "open") for call in part]
                    break
            for i, answer in zip(which, out):
                answers[i] = answer

        await asyncio.gather(*[on_host(index, which) for index, which in by_host.items()])
        died = [calls[i][0] for i, a in enumerate(answers) if isinstance(a, Refusal) and a.code == "session_lost"]
        if died:
            await self.registry.release_sessions.remote(token, died)
        # The host does not know these: closed, expired or never opened are released in the registry already; a
        # session the registry still counts was lost with the host's previous process.
        unknown = [i for i, a in enumerate(answers) if isinstance(a, Refusal) and a.code == "unknown_session"]
        if unknown:
            lost = set(await self.registry.release_lost.remote(token, [calls[i][0] for i in unknown]))
            for i in unknown:
                if calls[i][0] in lost:
                    answers[i] = _lost(calls[i][0])
        return answers


# ------------------------------------------------------------------------------------------------------ deploy

def app_name(task_name: str, scope: str = "") -> str:
    from contracts.serving import scoped

    return scoped(f"rollouts-{task_name}", scope)


def route_prefix(task_name: str, scope: str = "") -> str:
    from contracts.serving import scoped_route

    return scoped_route(f"/{task_name}/env", scope)




def host_count(settings) -> int:
    """How many host actors a task's rollout service starts: `num_hosts`, or when null one per CPU of the cluster
    (a host steps its sessions one after another in one process: with pure-Python engines, hosts are the cores a
    batch uses), never more than a run's sessions."""
    if settings.num_hosts is not None:
        return settings.num_hosts
    return max(1, min(int(ray.cluster_resources().get("CPU", 1)), settings.max_sessions_per_run))


def deploy(spec: TaskSpec, cache_dir: str, scope: str = "") -> str:
    """Start the task's rollout application and its host actors (unless this process runs it with the same settings
    already); returns its route prefix. Builds the train games first if no one has."""
    from contracts.runs import NAMESPACE
    from contracts.serving import deploy_once, scoped
    from contracts.specs import ConfigError
    from contracts.task import InteractiveTask, build_task

    settings = [spec.config, cache_dir]

    def build():
        task = build_task(spec, cache_dir)
        if not isinstance(task, InteractiveTask):
            raise ConfigError(f"task {spec.name}: a rollout service needs an interactive task, not {spec.cls}")
        env = task.environment()
        instances = env.instances("train")  # eval instances never reach a host
        key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
        env_vars = {"A2RL_CACHE_DIR": str(cache_dir)}
        host_names, hosts = [], []
        # Detached, as the routers that call them: a resumed sweep on a cluster finds the hosts its routers hold
        for i in range(host_count(spec.rollout)):
            host_name = scoped(f"a2rl-env-{spec.name}-{key}-{i}", scope)
            handle = EnvHost.options(name=host_name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
                                     num_cpus=spec.rollout.host_cpus, runtime_env={"env_vars": env_vars}).remote(
                env, instances, spec.rollout.idle_timeout_s, scope)
            hosts.append(handle)
            host_names.append(host_name)
        ray.get([h.__ray_ready__.remote() for h in hosts])
        # No access log: it is a line a request, so an agent stepping one session 10 times a second writes ~65 MB of
        # nothing but steps in 12 hours (its latency cost, measured with and without, was within the noise)
        deployment = RolloutService.options(name=app_name(spec.name, scope), num_replicas=spec.rollout.num_replicas,
                                            ray_actor_options={"num_cpus": spec.rollout.router_cpus,
                                                               "runtime_env": {"env_vars": env_vars}},
                                            logging_config={"enable_access_log": False})
        return deployment.bind(spec, instances, env.max_steps, host_names, scope)

    deploy_once(app_name(spec.name, scope), route_prefix(spec.name, scope), settings, build)
    return route_prefix(spec.name, scope)


def close_run(task_name: str, token: str, timeout_s: float | None = None, scope: str = "") -> dict:
    """Close a run's sessions through the deployment handle (the orchestrator, when a cell ends); returns the run's
    use of the environment. Raises TimeoutError after timeout_s."""
    return serve.get_app_handle(app_name(task_name, scope)).close_run.remote(token).result(timeout_s=timeout_s)
