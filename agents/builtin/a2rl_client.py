"""The a2rl agent client: what a built-in agent needs from a2rl, in one stdlib-only file.

a2rl copies it into the workspace's code/ next to the agent's script (the sandbox hides a2rl itself), and, for an
interactive task, the environment's own render/parse module beside it as task_prompt.py: the agent then builds every
chat exactly as the grader does.

    run = load_run()                                  # run.json
    submitter = Submitter(run, grading_estimate_s)    # background submissions to the grader, timed
    status(run)                                       # GET /status
    env = Env(run)                                    # rollout sessions on the train instances (interactive tasks)
    chat(row)                                         # the chat a train row's prompt is, as the grader sends it
    render(goal, observation, actions, history), parse(reply, actions)   # the task's (interactive tasks)
    checkpointing(SFTConfig, on)                      # the trainer keyword for activation checkpointing
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from pathlib import Path

try:
    import task_prompt  # the task's render/parse, copied beside this file for an interactive task
except ImportError:
    task_prompt = None


def checkpointing(config_cls, on: bool) -> dict:
    """The trainer-config keyword for activation checkpointing in the installed transformers: `activation_checkpointing`
    (its name since 5.2x), else the older `gradient_checkpointing` (transformers 5.17 refuses the new name)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": on}


def load_run(path: str = "run.json") -> dict:
    return json.loads(Path(path).read_text())


def http(url: str, token: str, body: dict | None = None, timeout: float = 120.0) -> tuple[int, dict]:
    """GET (body None) or POST JSON. Returns (HTTP status, JSON answer); refusals come back as 4xx with
    {error, code}, a failed connection as status 0."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            answer = json.loads(e.read() or b"{}")
        except ValueError:
            answer = {"error": str(e)}
        return e.code, answer
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        return 0, {"error": f"{type(e).__name__}: {e}"}


class KeepAlive:
    """Requests to one service over a kept-open HTTP/1.1 connection per thread (urllib opens a new TCP connection
    for every request, which the service's proxy accepts and sets up anew each time). Answers as `http` does."""

    def __init__(self, base_url: str, token: str, timeout: float = 120.0):
        parts = urllib.parse.urlsplit(base_url)
        self.https, self.netloc, self.prefix = parts.scheme == "https", parts.netloc, parts.path.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.timeout = timeout
        self.local = threading.local()

    def __call__(self, path: str, body: dict | None = None, query: dict | None = None) -> tuple[int, dict]:
        """GET `path` (no body nor query), else POST the JSON body or, with `query`, the fields as URL parameters."""
        data = None if body is None else json.dumps(body).encode()
        if query is not None:
            path += "?" + urllib.parse.urlencode(query)
        for attempt in (1, 2):
            conn = getattr(self.local, "conn", None)
            fresh = conn is None
            if fresh:
                conn = (HTTPSConnection if self.https else HTTPConnection)(self.netloc, timeout=self.timeout)
                self.local.conn = conn
            try:
                conn.request("GET" if body is None and query is None else "POST", self.prefix + path, body=data,
                             headers=self.headers)
                response = conn.getresponse()
                raw = response.read()
                break
            except (HTTPException, OSError) as e:
                conn.close()
                self.local.conn = None
                # A kept connection the server closed while idle fails before it is answered: sent again, once
                if fresh or attempt == 2:
                    return 0, {"error": f"{type(e).__name__}: {e}"}
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            answer = {"error": raw[:500].decode(errors="replace")}
        return response.status, answer


def submit(run: dict, model_path: str, timeout: float | None = None) -> tuple[int, dict]:
    """POST /submit a model directory (a path relative to the workspace)."""
    timeout = timeout if timeout is not None else max(10.0, float(run["deadline"]) - time.time())
    return http(run["grading_url"].rstrip("/") + "/submit", run["run_token"], {"model_path": model_path}, timeout)


def status(run: dict) -> tuple[int, dict]:
    """GET /status: time, submissions and best so far."""
    return http(run["grading_url"].rstrip("/") + "/status", run["run_token"], timeout=30.0)


class Submitter:
    """Submits saved models one at a time in a background thread and times each grading, so training goes on
    while the last model is graded."""

    def __init__(self, run: dict, grading_estimate_s: float):
        self.run = run
        self.remaining = run.get("max_submissions")
        self.grading_s = float(grading_estimate_s)  # a guess until a grading has been timed
        self.stop = False          # the grader said no more (budget spent, bad token)
        self.results: list[dict] = []
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._lock = threading.Lock()

    def can_submit(self) -> bool:
        return not self.stop and (self.remaining is None or self.remaining > 0)

    def submit(self, model_path: str) -> None:
        if self.remaining is not None:
            self.remaining -= 1  # counted now so training does not plan rounds it cannot submit
        self._pool.submit(self._submit, model_path)

    def _submit(self, model_path: str) -> None:
        if self.stop:  # a submission queued before the grader said no more
            return
        start = time.time()
        code, answer = submit(self.run, model_path)
        if code == 503 and answer.get("code") == "infra_error":  # the grader's fault, not counted: once more
            code, answer = submit(self.run, model_path)
        took = time.time() - start
        with self._lock:
            if code == 200:
                self.grading_s = max(self.grading_s * 0.5, took)  # trust measurements over the first guess
                if answer.get("remaining_submissions") is not None:
                    self.remaining = min(self.remaining, answer["remaining_submissions"]) \
                        if self.remaining is not None else answer["remaining_submissions"]
            elif code in (401, 409):
                self.stop = True
            self.results.append({"model_path": model_path, "status": code, "took_s": round(took, 2), **answer})
        print(json.dumps({"model_path": model_path, "status": code, **answer}), flush=True)

    def best(self) -> float | None:
        return max((r.get("score") or 0.0 for r in self.results if r["status"] == 200), default=None)

    def wait(self) -> None:
        self._pool.shutdown(wait=True)


class Env:
    """The rollout service: sessions on the train instances of an interactive task. Many sessions are reset or
    stepped in one request (POST /env/reset_batch, /env/step_batch: the service steps them on all its hosts at
    once); sessions are reused through reset, and a pooled session that expired or was lost is opened anew.
    Requests go over one kept-open connection (KeepAlive): no TCP handshake nor socket a request; on 2 loaded cores
    the difference in a step's p50 was within the noise (+-1 ms of ~11 ms: benchmarks/bench_rollouts.py)."""

    RETRY = (0, 502, 503)  # no connection, or the service restarting: the request is sent again

    def __init__(self, run: dict, max_sessions: int | None = None):
        self.url = (run.get("rollout_url") or run["grading_url"].rstrip("/") + "/env").rstrip("/")
        self.token = run["run_token"]
        self.http = KeepAlive(self.url, self.token)
        code, info = self.http("/games")
        if code != 200:
            raise RuntimeError(f"rollout service at {self.url}: {code} {info}")
        self.games = info["games"]
        self.max_steps = int(info["max_steps"])
        self.max_sessions = int(max_sessions or info["max_sessions"])
        self.free: list[str] = []

    def _post(self, path: str, body: dict | None = None, query: dict | None = None) -> tuple[int, dict]:
        """POST, sent again (at most 5 times in all) while there is no connection or the service is restarting."""
        for attempt in range(5):
            code, answer = self.http(path, body, query)
            if code not in self.RETRY or attempt == 4:
                return code, answer
            time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def _batch(self, path: str, key: str, entries: list[dict]) -> list[dict]:
        """POST a batch; per entry its answer ("status": 200) or its refusal ({"status", "code", "error"})."""
        code, answer = self._post(path, {key: entries})
        if code != 200:
            raise RuntimeError(f"POST {path} ({len(entries)} entries): {code} {answer}")
        return answer["results"]

    def starts(self, starts: list[tuple[str, list[str]]]) -> list[dict]:
        """Reset one session per (game, actions replayed after the reset), all in one request."""
        if len(starts) > self.max_sessions:
            raise ValueError(f"{len(starts)} parallel episodes, but at most {self.max_sessions} sessions")
        reused = [self.free.pop() for _ in range(min(len(starts), len(self.free)))]
        bodies = [{"game": g, "actions": a} for g, a in starts]
        for body, sid in zip(bodies, reused):
            body["session_id"] = sid
        answers: list[dict | None] = [None] * len(bodies)
        todo = list(range(len(bodies)))
        for attempt in range(6):
            for i, answer in zip(todo, self._batch("/reset_batch", "resets", [bodies[i] for i in todo])):
                answers[i] = answer
            todo, wait = [], False
            for i, answer in enumerate(answers):
                if answer["status"] == 200:
                    continue
                if answer["code"] in ("unknown_session", "session_lost") and "session_id" in bodies[i]:
                    del bodies[i]["session_id"]  # it expired or was lost: open a new one
                elif answer["code"] in ("session_lost", "too_many_sessions") and attempt < 5:
                    wait = True  # a new session's host restarting, or the limit reached until idle ones close
                else:
                    raise RuntimeError(f"POST /reset_batch {bodies[i]}: {answer['status']} {answer}")
                todo.append(i)
            if not todo:
                return answers
            if wait:
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def steps(self, moves: list[tuple[str, str]]) -> list[dict]:
        """One action per (session, action), all in one request. A session lost with its host (HTTP 410) ends its
        episode: answered done and not won, with "lost": true (the others are stepped as usual)."""
        if len(moves) == 1:  # one session (the last of a lockstep round): POST /step with a query, no body to fetch
            answers = [self._one_step(*moves[0])]
        else:
            answers = self._batch("/step_batch", "steps", [{"session_id": sid, "command": a} for sid, a in moves])
        out = []
        for (sid, _), answer in zip(moves, answers):
            if answer["status"] == 200:
                out.append(answer)
            elif answer["code"] == "session_lost":
                out.append({"session_id": sid, "observation": answer["error"], "admissible_commands": [],
                            "reward": 0.0, "won": False, "done": True, "steps": None, "lost": True})
            else:
                raise RuntimeError(f"POST /step_batch {sid}: {answer['status']} {answer}")
        return out

    def _one_step(self, session_id: str, command: str) -> dict:
        """One session's step, answered as an entry of a step batch."""
        code, answer = self._post("/step", query={"session_id": session_id, "command": command})
        if code in self.RETRY:
            raise RuntimeError(f"POST /step {session_id}: {code} {answer}")
        return {**answer, "status": 200} if code == 200 else {"session_id": session_id, "status": code, **answer}

    def release(self, session_ids: list[str]) -> None:
        self.free += session_ids


def chat(row: dict) -> list[dict] | str:
    """The prompt the grader sends for a train row: the row's `messages` when it has them (an interactive task's
    step, system prompt included; raw text under a protocol that sends raw text, e.g. ALFWorld's paper protocol),
    else its prompt as one user message."""
    if isinstance(row.get("messages"), str):
        return row["messages"]
    return [dict(m) for m in row["messages"]] if row.get("messages") else [{"role": "user", "content": row["prompt"]}]


def sft_example(row: dict) -> dict:
    """A train row as trl's prompt/completion example: conversational for a chat (trl renders the template and masks
    the prompt), plain text for a raw-text prompt (trl masks the prompt and ends the completion with eos)."""
    prompt = chat(row)
    if isinstance(prompt, str):
        return {"prompt": prompt, "completion": row["completion"]}
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": row["completion"]}]}


def _task_prompt():
    if task_prompt is None:
        raise RuntimeError("there is no task_prompt.py beside a2rl_client.py: the task is not interactive")
    return task_prompt


def render(goal: str, observation: str, actions: list[str], history: list[str]) -> list[dict]:
    """The chat the grader sends at one step of an episode (the task's own render)."""
    return _task_prompt().render(goal, observation, actions, history)


def parse(reply: str, actions: list[str] | None) -> str:
    """The action the grader takes for a model's reply (the task's own parse)."""
    return _task_prompt().parse(reply, actions)
