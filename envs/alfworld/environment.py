"""ALFWorld as an Environment (contracts.environment): its games by split, episodes in the real engine, its prompt.

An instance is one game file; its name is its folder (generated games) or its last two folders (upstream data), and
its info is its task type (from the game's traj_data.json). An episode wins when the game says so; the reward is the
engine's score (1 once won). Render and parse are `envs.alfworld.prompt`'s.
"""
from __future__ import annotations

import json
from pathlib import Path

from contracts.environment import Environment, Episode, Instance, Step
from envs.alfworld import prompt
from envs.alfworld.engine import MAX_STEPS


def task_type_of(game: Path) -> str:
    traj = Path(game).parent / "traj_data.json"
    try:
        return json.loads(traj.read_text()).get("task_type", "")
    except (OSError, ValueError):
        return ""


class AlfWorldEpisode(Episode):
    def __init__(self, path: Path, max_steps: int):
        from envs.alfworld.engine import AlfWorldGame

        self.game = AlfWorldGame(path, max_steps=max_steps, walkthrough=False)

    def _step(self, obs: str, reward: float, done: bool, info: dict) -> Step:
        won = bool(info.get("won"))
        return Step(observation=obs, actions=tuple(info["admissible_commands"]), reward=reward, done=done or won,
                    won=won)

    def reset(self) -> Step:
        obs, info = self.game.reset()
        self.goal, self.steps = self.game.task, 0
        return self._step(obs, 0.0, False, info)

    def step(self, action: str) -> Step:
        obs, score, done, info = self.game.step(action)
        self.steps = self.game.steps
        return self._step(obs, score, done, info)

    def close(self) -> None:
        self.game.close()


class AlfWorldEnvironment(Environment):
    prompt = prompt

    def __init__(self, games: dict[str, list[Path]], names: dict[Path, str], max_steps: int = MAX_STEPS):
        """games: the game files by split; names: each game's public name."""
        self.max_steps = int(max_steps)
        self._instances = {split: [Instance(split, names[path], {"task_type": task_type_of(path)}) for path in paths]
                           for split, paths in games.items()}
        self._paths = {(split, names[path]): path for split, paths in games.items() for path in paths}

    def instances(self, split: str) -> list[Instance]:
        return list(self._instances[split])

    def open(self, instance: Instance) -> AlfWorldEpisode:
        return AlfWorldEpisode(self._paths[(instance.split, instance.name)], self.max_steps)
