"""A thin in-process wrapper around the real ALFWorld text engine.

``AlfWorldGame(path)`` plays one ``game.tw-pddl`` (generated here or upstream) through ``textworld.gym`` with the
ALFWorld wrappers (``AlfredDemangler``: the displayed names "cabinet 3", ``AlfredInfos``: the game file), exactly the
stack the upstream ``AlfredTWEnv`` builds (without its domain-randomising shuffle). A command the game does not know
gets the game's own answer ("Nothing happens."), never an exception.

Measured on the 2-core dev box: load + reset 0.2-0.4 s (the domain and grammar are parsed at every reset), step
15-40 ms (it grows with the number of objects: every step derives all admissible commands).
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
        self.last_info = self._info(raw)
        return obs, self.last_info

    def step(self, command: str) -> tuple[str, float, bool, dict[str, Any]]:
        command = str(command).strip()
        obs, score, done, raw = self._env.step(command)
        self.steps += 1
        info = self._info(raw)
        self.won = self.won or info["won"]
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
