"""The grader of interactive tasks: greedy ReAct episodes on every eval instance, played in lockstep.

Every step, the still-active episodes' chats (`Environment.render`) go to `generate` in one batch, each reply becomes
an action (`Environment.parse`) and every episode takes its step. An episode stops when its goal is reached, when the
environment says done, or after the environment's `max_steps` actions; its grade is `Environment.score`.

Episodes are stepped by an EpisodeFleet: in this process (`workers=0`), or spread over worker processes that step
their episodes in parallel while the model waits (pure-Python engines gain nothing from threads).
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any

from contracts.decoding import Prompt
from contracts.environment import Environment, Episode, Instance, Step

Generate = Callable[[list[Prompt]], list[str]]


def _serve_episodes(conn, env: Environment, instances: list[Instance]) -> None:
    """Worker process: holds some episodes, answers ("reset", [i...]) and ("step", {i: action}) until ("close",)."""
    episodes: dict[int, Episode] = {}
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "close":
                break
            try:
                if msg[0] == "reset":
                    out = {}
                    for i in msg[1]:
                        episodes.setdefault(i, env.open(instances[i]))
                        out[i] = (episodes[i].reset(), episodes[i].goal)
                elif msg[0] == "step":
                    out = {i: episodes[i].step(action) for i, action in msg[1].items()}
                else:
                    raise ValueError(f"unknown request {msg[0]!r}")
                conn.send(("ok", out))
            except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
                conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        for episode in episodes.values():
            episode.close()
        conn.close()


class EpisodeFleet:
    """Episodes that are reset and stepped together, in-process (`workers=0`) or over worker processes."""

    def __init__(self, env: Environment, instances: Sequence[Instance], workers: int = 0):
        self.env, self.instances = env, list(instances)
        self.workers = max(0, min(int(workers), len(self.instances)))
        self._episodes: dict[int, Episode] = {}
        self._procs: list = []
        self._conns: list = []
        if self.workers:
            ctx = multiprocessing.get_context("spawn")  # the parent may run threads (Ray, torch): never fork
            for w in range(self.workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_serve_episodes, args=(child, env, self.instances), daemon=True,
                                   name=f"a2rl-episode-fleet-{w}")
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)

    def _ask(self, requests: dict[int, Any]) -> dict:
        out: dict = {}
        for w, payload in requests.items():
            self._conns[w].send(payload)
        for w in requests:
            status, value = self._conns[w].recv()
            if status != "ok":
                raise RuntimeError(f"episode worker {w} failed: {value}")
            out.update(value)
        return out

    def reset(self) -> dict[int, tuple[Step, str]]:
        """Every episode from its start: index -> (first step, goal)."""
        indices = range(len(self.instances))
        if not self.workers:
            out = {}
            for i in indices:
                self._episodes.setdefault(i, self.env.open(self.instances[i]))
                out[i] = (self._episodes[i].reset(), self._episodes[i].goal)
            return out
        by_worker: dict[int, list[int]] = {}
        for i in indices:
            by_worker.setdefault(i % self.workers, []).append(i)
        return self._ask({w: ("reset", idx) for w, idx in by_worker.items()})

    def step(self, actions: dict[int, str]) -> dict[int, Step]:
        if not self.workers:
            return {i: self._episodes[i].step(action) for i, action in actions.items()}
        by_worker: dict[int, dict[int, str]] = {}
        for i, action in actions.items():
            by_worker.setdefault(i % self.workers, {})[i] = action
        return self._ask({w: ("step", part) for w, part in by_worker.items()})

    def close(self) -> None:
        for episode in self._episodes.values():
            episode.close()
        self._episodes.clear()
        for conn in self._conns:
            try:
                conn.send(("close",))
                conn.close()
            except OSError:
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        self._procs, self._conns = [], []

    def __enter__(self) -> "EpisodeFleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def play(env: Environment, instances: Sequence[Instance], generate: Generate, workers: int = 0) -> list[dict]:
    """One greedy episode on every instance in lockstep with `generate(chats) -> replies`. Returns per instance, in
    order: {instance, won, score, steps, goal, actions, replies}."""
    workers = workers if workers >= 0 else (os.cpu_count() or 1)
    with EpisodeFleet(env, instances, workers) as fleet:
        state = []
        for i, (first, goal) in sorted(fleet.reset().items()):
            state.append({"instance": fleet.instances[i].name, "info": fleet.instances[i].info, "goal": goal,
                          "last": first, "won": first.won, "done": first.won, "actions": [], "replies": [],
                          "observations": [first.observation]})
        for _ in range(env.max_steps):
            active = [i for i, s in enumerate(state) if not s["done"]]
            if not active:
                break
            replies = generate([env.render(state[i]["goal"], state[i]["last"], state[i]["actions"],
                                           state[i]["observations"], state[i]["info"]) for i in active])
            actions = {}
            for i, reply in zip(active, replies):
                actions[i] = env.parse(reply, state[i]["last"])
                state[i]["actions"].append(actions[i])
                state[i]["replies"].append(reply)
            for i, step in fleet.step(actions).items():
                s = state[i]
                s["last"], s["won"] = step, s["won"] or step.won
                s["observations"].append(step.observation)
                s["done"] = s["won"] or step.done or len(s["actions"]) >= env.max_steps
    return [{"instance": s["instance"], "won": s["won"], "score": env.score(s["last"]),
             "reward": float(s["last"].reward), "steps": len(s["actions"]),
             "goal": s["goal"], "actions": s["actions"], "replies": s["replies"]} for s in state]


def evaluate(env: Environment, rows: list[dict], generate: Generate, workers: int = 0,
             percent=lambda hits, n: 100.0 * hits / n if n else 0.0) -> dict:
    """The eval rows' instances played: {score: 100 x mean episode grade, n, items, metrics: {success_rate: 100 x
    the share of episodes won, mean_steps}}. percent: the task's arithmetic of the score (Task.percent)."""
    splits = {row.get("split", "eval") for row in rows}  # the feedback split's rows, or the held-out final split's
    by_name = {(split, inst.name): inst for split in splits for inst in env.instances(split)}
    instances = [by_name[row.get("split", "eval"), row["instance"]] for row in rows]
    episodes = play(env, instances, generate, workers)
    items = [{"id": row["id"], **inst.info, "score": ep["score"], "won": ep["won"], "reward": ep["reward"],
              "steps": ep["steps"], "task": ep["goal"], "commands": ep["actions"],
              "completion": ep["replies"][-1] if ep["replies"] else ""}
             for row, inst, ep in zip(rows, instances, episodes)]
    n = len(items)
    # The score is the mean grade (Environment.score); where the grade is dense (a reward), the share of episodes
    # that reached their goal is a metric of its own (WebShop's success rate), so it is reported beside it.
    return {"score": percent(sum(item["score"] for item in items), n), "n": n, "items": items,
            "metrics": {"success_rate": 100.0 * sum(item["won"] for item in items) / n if n else 0.0,
                        "mean_steps": sum(item["steps"] for item in items) / n if n else 0.0,
                        # the last step's reward (WebShop's purchase reward), beside a score that may be successes
                        "mean_reward": 100.0 * sum(item["reward"] for item in items) / n if n else 0.0}}
