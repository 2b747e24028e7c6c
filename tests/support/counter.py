"""A second environment, as small as one can be, to hold the Environment contract to more than ALFWorld: count from
a start to a target with `up` and `down`. One module and one config, as a new environment should be; its
render/parse live in counter_prompt.py (stdlib only) as the contract asks; its instructions are the base class's."""
from __future__ import annotations

from contracts.environment import Demonstration, Environment, Episode, Instance, Step
from contracts.registry import register
from contracts.task import InteractiveTask
from contracts.task_spec import TaskSpec
from tests.support import counter_prompt


class CounterEpisode(Episode):
    def __init__(self, start: int, target: int, max_steps: int):
        self.start, self.target, self.max_steps = start, target, max_steps

    def _step(self, observation: str) -> Step:
        won = self.value == self.target
        return Step(observation, ("up", "down"), 1.0 if won else 0.0, won or self.steps >= self.max_steps, won)

    def reset(self) -> Step:
        self.value, self.steps, self.goal = self.start, 0, f"reach {self.target}"
        return self._step(f"the counter shows {self.value}")

    def step(self, action: str) -> Step:
        self.steps += 1
        if action in ("up", "down"):
            self.value += 1 if action == "up" else -1
            return self._step(f"the counter shows {self.value}")
        return self._step("nothing happens")


class CounterEnvironment(Environment):
    prompt = counter_prompt

    def __init__(self, starts: dict[str, list[int]], target: int, max_steps: int):
        self.target, self.max_steps = target, max_steps
        self._instances = {split: [Instance(split, f"from-{s}", {"distance": abs(target - s)}) for s in values]
                           for split, values in starts.items()}

    def instances(self, split: str) -> list[Instance]:
        return list(self._instances[split])

    def open(self, instance: Instance) -> CounterEpisode:
        return CounterEpisode(int(instance.name.removeprefix("from-")), self.target, self.max_steps)


@register("task", "counter")
class CounterTask(InteractiveTask):
    environment_class = CounterEnvironment

    def __init__(self, spec: TaskSpec, *, train_starts: list[int], eval_starts: list[int], target: int,
                 max_steps: int):
        super().__init__(spec)
        self._env = CounterEnvironment({"train": train_starts, "eval": eval_starts}, target, max_steps)

    def environment(self) -> CounterEnvironment:
        return self._env

    def make_train_rows(self) -> list[dict]:
        """The expert walks straight to the target."""
        demos = []
        for inst in self._env.instances("train"):
            episode, history = self._env.open(inst), []
            step = episode.reset()
            while not step.done:
                action = "up" if episode.value < episode.target else "down"
                demos.append(Demonstration(inst.name, episode.goal, step, tuple(history), action, index=len(history),
                                           expert="walk", info=inst.info))
                step = episode.step(action)
                history.append(action)
        return self.expert_rows(demos)
