"""ALFWorld as an Environment (contracts.environment): its games by split, episodes in the real engine, its prompt.

An instance is one game file; its name is its folder (generated games) or its last two folders (upstream data), and
its info is its task type (from the game's traj_data.json). An episode wins when the game says so; the reward is the
engine's score (1 once won). Render and parse are `envs.alfworld.prompt`'s.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from contracts.environment import Environment, Episode, Instance, Step
from envs.alfworld import paper_prompt, prompt
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


class AlfWorldPaperEnvironment(AlfWorldEnvironment):
    """ALFWorld under the original benchmark's protocol (envs.alfworld.paper_prompt): a raw text prompt that keeps
    the whole transcript, after the two ReAct examples of the game's task type; the reply is sent as it is. Each
    instance's info names its examples' task type as the original finds it: generated games from their
    traj_data.json, upstream games from their folder's name (`react_type`)."""

    prompt = paper_prompt

    def __init__(self, games: dict[str, list[Path]], names: dict[Path, str], max_steps: int,
                 examples: dict[str, str], types_from_names: bool):
        super().__init__(games, names, max_steps)
        self.examples = dict(examples)
        for split, instances in self._instances.items():
            self._instances[split] = [
                Instance(i.split, i.name, {**i.info, "react_type": i.name if types_from_names else i.info["task_type"]})
                for i in instances]
        for instance in (i for instances in self._instances.values() for i in instances):
            paper_prompt.example_key(instance.info["react_type"])  # a game of no known type: refused now

    def render(self, goal: str, step: Step, history: Sequence[str], observations: Sequence[str] = (),
               info: dict | None = None) -> str:
        if not observations or info is None:
            raise ValueError("the paper protocol's prompt keeps the whole transcript: render needs the episode's "
                             "observations and the instance's info")
        # an expert row's info is the game's (task_type): for upstream data that type is its folder's prefix too
        return paper_prompt.render(self.examples, info.get("react_type") or info["task_type"], observations, history)

    def parse(self, reply: str, step: Step) -> str:
        return paper_prompt.parse(reply)
