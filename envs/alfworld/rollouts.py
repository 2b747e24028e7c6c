"""Batched ReAct-style rollouts: many games stepped in lockstep, one batched model call per step.

The grader's rollout loop (``run_episode`` in ``prompt.py`` plays one game; this plays many at once): every step,
the still-active games' prompts (:func:`envs.alfworld.prompt.build_messages`) go to ``generate`` in one batch, each
reply becomes a command with :func:`envs.alfworld.prompt.parse_command`, and every game takes its step. A game stops
when it is won, when the engine says done, or after ``max_steps`` steps.

Games are stepped by a :class:`GameFleet`: in this process (``workers=0``), or spread over worker processes that step
their games in parallel while the model waits (the engine is pure Python, so threads would not help).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .engine import MAX_STEPS
from .prompt import build_messages, parse_command

Generate = Callable[[list[list[dict[str, str]]]], list[str]]


def _serve_games(conn, paths: list[str], max_steps: int | None) -> None:
    """Worker process: holds some games, answers ("reset", [i...]) and ("step", {i: cmd}) until ("close",)."""
    from .engine import AlfWorldGame

    games: dict[int, AlfWorldGame] = {}
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "close":
                break
            try:
                if msg[0] == "reset":
                    out = {}
                    for i in msg[1]:
                        if i not in games:
                            games[i] = AlfWorldGame(paths[i], max_steps=max_steps, walkthrough=False)
                        out[i] = games[i].reset()
                elif msg[0] == "step":
                    out = {i: games[i].step(cmd) for i, cmd in msg[1].items()}
                else:
                    raise ValueError(f"unknown request {msg[0]!r}")
                conn.send(("ok", out))
            except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
                conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        for g in games.values():
            g.close()
        conn.close()


class GameFleet:
    """Games that are reset and stepped together, in-process (``workers=0``) or over worker processes."""

    def __init__(self, paths: Sequence[str | Path], workers: int = 0, max_steps: int | None = MAX_STEPS):
        self.paths = [str(p) for p in paths]
        self.max_steps = max_steps
        self.workers = max(0, min(int(workers), len(self.paths)))
        self._games: dict[int, Any] = {}
        self._procs: list = []
        self._conns: list = []
        if self.workers:
            ctx = multiprocessing.get_context("spawn")  # the parent may run threads (Ray, torch): never fork
            for w in range(self.workers):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_serve_games, args=(child, self.paths, max_steps), daemon=True,
                                   name=f"a2rl-alfworld-fleet-{w}")
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)

    def _owner(self, i: int) -> int:
        return i % self.workers

    def _ask(self, requests: dict[int, Any]) -> dict:
        out: dict = {}
        for w, payload in requests.items():
            self._conns[w].send(payload)
        for w in requests:
            status, value = self._conns[w].recv()
            if status != "ok":
                raise RuntimeError(f"game worker {w} failed: {value}")
            out.update(value)
        return out

    def reset(self, indices: Sequence[int] | None = None) -> dict[int, tuple[str, dict]]:
        indices = list(range(len(self.paths))) if indices is None else list(indices)
        if not self.workers:
            from .engine import AlfWorldGame

            out = {}
            for i in indices:
                if i not in self._games:
                    self._games[i] = AlfWorldGame(self.paths[i], max_steps=self.max_steps, walkthrough=False)
                out[i] = self._games[i].reset()
            return out
        by_worker: dict[int, list[int]] = {}
        for i in indices:
            by_worker.setdefault(self._owner(i), []).append(i)
        return self._ask({w: ("reset", idx) for w, idx in by_worker.items()})

    def step(self, commands: dict[int, str]) -> dict[int, tuple[str, float, bool, dict]]:
        if not self.workers:
            return {i: self._games[i].step(cmd) for i, cmd in commands.items()}
        by_worker: dict[int, dict[int, str]] = {}
        for i, cmd in commands.items():
            by_worker.setdefault(self._owner(i), {})[i] = cmd
        return self._ask({w: ("step", cmds) for w, cmds in by_worker.items()})

    def close(self) -> None:
        for g in self._games.values():
            g.close()
        self._games.clear()
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

    def __enter__(self) -> "GameFleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def play_batch(paths: Sequence[str | Path], generate: Generate, max_steps: int = MAX_STEPS, workers: int = 0,
               keep_replies: bool = True) -> list[dict[str, Any]]:
    """Play one episode of every game in lockstep with ``generate(list_of_chats) -> list_of_replies``.

    Returns one ``{"game", "won", "steps", "task", "commands", "replies"}`` per game, in order.
    """
    workers = workers if workers >= 0 else (os.cpu_count() or 1)
    with GameFleet(paths, workers=workers, max_steps=max_steps) as fleet:
        started = fleet.reset()
        state = []
        for i, path in enumerate(fleet.paths):
            obs, info = started[i]
            state.append({"game": path, "won": bool(info.get("won")), "steps": 0, "task": info.get("task", ""),
                          "commands": [], "replies": [], "obs": obs, "admissible": info["admissible_commands"],
                          "done": bool(info.get("won"))})
        for _ in range(max_steps):
            active = [i for i, s in enumerate(state) if not s["done"]]
            if not active:
                break
            chats = [build_messages(state[i]["task"], state[i]["obs"], state[i]["admissible"], state[i]["commands"])
                     for i in active]
            replies = generate(chats)
            commands = {}
            for i, reply in zip(active, replies):
                cmd = parse_command(reply, state[i]["admissible"])
                commands[i] = cmd
                state[i]["commands"].append(cmd)
                if keep_replies:
                    state[i]["replies"].append(reply)
            for i, (obs, _score, done, info) in fleet.step(commands).items():
                s = state[i]
                s.update(obs=obs, admissible=info["admissible_commands"], steps=s["steps"] + 1)
                s["won"] = s["won"] or bool(info.get("won"))
                s["done"] = s["won"] or bool(done) or s["steps"] >= max_steps
    return [{k: s[k] for k in ("game", "won", "steps", "task", "commands", "replies")} for s in state]
