"""A thin in-process wrapper around the real ALFWorld text engine.

``AlfWorldGame(path)`` plays one ``game.tw-pddl`` (generated here or upstream) through ``textworld.gym`` with the
ALFWorld wrappers (``AlfredDemangler``: the displayed names "cabinet 3", ``AlfredInfos``: the game file), exactly the
stack the upstream ``AlfredTWEnv`` builds (without its domain-randomising shuffle). A command the game does not know
gets the game's own answer ("Nothing happens."), never an exception.

Measured on the 2-core dev box (shared, CPU time): constructing 1 ms; reset 0.4-0.75 s for generated games (13-27
receptacles; 0.16 s for the 6-receptacle reference game): every reset re-loads the game and translates the PDDL
problem twice (load, then reset); step ~25 ms with :func:`enable_grammar_cache` (~50 ms without): every step derives
the text of every admissible command; ``expert_plan`` adds a Fast Downward call (~0.2 s) per step. After ``done``,
steps change nothing and repeat the last answer.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

MAX_STEPS = 50  # the benchmark's episode length
_REGISTER_LOCK = threading.Lock()
_TASK_RE = re.compile(r"Your task is to: (.*?)\s*$", re.S)


_GRAMMAR_CACHE_LOCK = threading.Lock()


def enable_grammar_cache(maxsize: int = 4096) -> bool:
    """Memoise the text grammar's parser inside textworld's PDDL engine (process-wide; idempotent).

    Every step, the engine re-parses (with tatsu) the same few grammar strings for every admissible command; caching
    the parse (and handing out deep copies, which the engine then mutates) halves the CPU time of a step and changes
    no text. Off when the environment variable ``A2RL_ALFWORLD_GRAMMAR_CACHE=0``. Returns whether it is on.
    """
    import copy
    import os

    if os.environ.get("A2RL_ALFWORLD_GRAMMAR_CACHE", "1") == "0":
        return False
    import textworld.envs.pddl.textgen as textgen

    with _GRAMMAR_CACHE_LOCK:
        if getattr(textgen._parse_and_convert, "_a2rl_cached", False):
            return True
        original = textgen._parse_and_convert
        cache: dict = {}

        def cached(*args, **kwargs):
            if kwargs.get("trace") or not all(isinstance(a, str) for a in args):
                return original(*args, **kwargs)
            key = (args, tuple(sorted(kwargs.items())))
            parsed = cache.get(key)
            if parsed is None:
                parsed = original(*args, **kwargs)
                if len(cache) >= maxsize:
                    cache.clear()
                cache[key] = parsed
            return copy.deepcopy(parsed)

        cached._a2rl_cached = True
        textgen._parse_and_convert = cached
        return True


def task_from_observation(obs: str) -> str:
    """The task sentence of an initial observation ("Your task is to: ...")."""
    m = _TASK_RE.search(obs or "")
    return m.group(1).strip() if m else ""


def request_infos(walkthrough: bool = True, policy_commands: bool = False, facts: bool = False):
    import textworld

    extras = ["gamefile"] + (["walkthrough"] if walkthrough else [])
    return textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=policy_commands, facts=facts,
                              extras=extras)


class AlfWorldGame:
    """One ALFWorld game in the real engine.

    ``reset() -> (obs, info)``, ``step(command) -> (obs, score, done, info)``; ``info`` has ``won``,
    ``admissible_commands``, ``gamefile`` and (default) ``walkthrough``; with ``expert_plan=True`` also
    ``expert_plan`` (the planner's plan from the current state: costs a Fast Downward call per step).
    ``score`` is 1 once won, else 0; ``done`` when won or after ``max_steps`` steps.
    """

    def __init__(self, path: str | Path, max_steps: int | None = MAX_STEPS, *, walkthrough: bool = True,
                 expert_plan: bool = False) -> None:
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        enable_grammar_cache()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(self.path)
        self.max_steps = max_steps
        self._expert_plan = expert_plan
        infos = request_infos(walkthrough=walkthrough, policy_commands=expert_plan)
        with _REGISTER_LOCK:  # the textworld.gym registry is a module-level dict
            env_id = textworld.gym.register_game(str(self.path), infos, max_episode_steps=max_steps or 0,
                                                 wrappers=[AlfredDemangler(), AlfredInfos], name="a2rl-alfworld")
            self._env = textworld.gym.make(env_id)
            textworld.gym.registry.pop(env_id, None)
        self.task = ""
        self.steps = 0
        self.won = False
        self.done = False
        self.last_info: dict[str, Any] = {}

    @property
    def traj_data(self) -> dict[str, Any]:
        p = self.path.parent / "traj_data.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def _info(self, raw: dict[str, Any]) -> dict[str, Any]:
        info = {
            "won": bool(raw.get("won", False)),
            "admissible_commands": list(raw.get("admissible_commands") or []),
            "gamefile": raw.get("extra.gamefile", str(self.path)),
        }
        if "extra.walkthrough" in raw:
            info["walkthrough"] = list(raw["extra.walkthrough"] or [])
        if self._expert_plan:
            info["expert_plan"] = list(raw.get("policy_commands") or [])
        info["task"] = self.task
        info["steps"] = self.steps
        return info

    def reset(self) -> tuple[str, dict[str, Any]]:
        obs, raw = self._env.reset()
        self.task = task_from_observation(obs)
        self.steps = 0
        self.won = False
        self.done = False
        self.last_info = self._info(raw)
        return obs, self.last_info

    def step(self, command: str) -> tuple[str, float, bool, dict[str, Any]]:
        command = str(command).strip()
        obs, score, done, raw = self._env.step(command)
        self.steps += 1
        info = self._info(raw)
        self.won = self.won or info["won"]
        self.done = self.done or bool(done)
        self.last_info = info
        return obs, float(score), bool(done), info

    def close(self) -> None:
        try:
            self._env.close()
        except Exception:
            pass

    def __enter__(self) -> "AlfWorldGame":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
