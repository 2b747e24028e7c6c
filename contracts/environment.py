"""The Environment interface: what an interactive task (level 3) plays, and how a model sees it.

An environment has instances by split (the train ones are served to agents by the rollout service, the eval ones are
played by the grader), opens episodes on them (reset, then step with an action text), and owns how a model sees a step
and how its reply becomes an action: `render` and `parse`. Those two live in a stdlib-only module (`prompt`), so the
same code is copied next to the built-in agents' scripts and what they train on is exactly what the grader sends.

The rollout service (envs.rollout_service), the lockstep ReAct grader (evaluators.lockstep) and the expert rows
(contracts.task.InteractiveTask.expert_rows) work through this interface only, for every environment.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType

from contracts.decoding import Prompt


@dataclass(frozen=True)
class Instance:
    """One playable instance of a split (a text game, a shopping instruction, ...)."""
    split: str
    name: str                                   # unique in its split; what agents and eval rows call it
    info: dict = field(default_factory=dict)    # what an agent may know before playing it (e.g. its task type)


@dataclass(frozen=True)
class Step:
    """What the environment answers at reset and after each action."""
    observation: str
    actions: tuple[str, ...] | None             # the admissible actions, when the environment lists them
    reward: float
    done: bool                                  # the episode is over: nothing an action does changes it
    won: bool = False                           # the episode's goal is reached


@dataclass(frozen=True)
class Demonstration:
    """One step of an expert's episode, for a train row: the state it acted in and the action it took."""
    instance: str                               # the train instance's name
    goal: str
    step: Step                                  # what the environment showed
    history: tuple[str, ...]                    # the episode's earlier actions (detours included)
    action: str
    episode: int = 0                            # which of the expert's episodes on the instance
    index: int = 0                              # the step's number in its episode
    expert: str = ""                            # which expert acted
    info: dict = field(default_factory=dict)    # the instance's info
    observations: tuple[str, ...] = ()          # what the environment showed: at reset, then after each action of
                                                # `history` (the last is step.observation); () when not recorded


class Episode(ABC):
    """One open episode on one instance. `goal` is known after reset; `steps` counts actions since then."""

    goal: str = ""
    steps: int = 0

    @abstractmethod
    def reset(self) -> Step:
        """Start (again) from the instance's initial state."""

    @abstractmethod
    def step(self, action: str) -> Step:
        """Take one action; an action the environment does not know is answered by it, never an error."""

    def close(self) -> None:
        """Free what the episode holds."""


class Environment(ABC):
    """Instances by split, episodes on them, and the model's view of a step. Picklable: the grader sends it to
    worker processes and the rollout service to its host actors, each of which opens its own episodes."""

    prompt: ModuleType          # stdlib-only: render(goal, observation, actions, history) and parse(reply, actions)
    max_steps: int              # actions per episode, at most

    @abstractmethod
    def instances(self, split: str) -> list[Instance]:
        """The split's instances, in a stable order."""

    @abstractmethod
    def open(self, instance: Instance) -> Episode:
        """A new episode on the instance (not yet reset)."""

    def step_many(self, episodes: Sequence[Episode], actions: Sequence[str]) -> list[Step]:
        """One action for each of several distinct episodes, as a rollout host steps its part of a batch: the
        default takes them in turn; an environment that does better together (one search call for all queries)
        overrides it, with the same answers as `step` one by one."""
        return [episode.step(action) for episode, action in zip(episodes, actions)]

    def render(self, goal: str, step: Step, history: Sequence[str], observations: Sequence[str] = (),
               info: dict | None = None) -> Prompt:
        """The prompt a model answers at this step (a chat, or raw text under a protocol that decodes raw text);
        `history`: the actions taken so far in the episode; `observations`: what the environment showed, at reset
        and after each of those actions (a renderer that keeps the whole transcript needs them); `info`: the
        instance's. The default shows the current observation and the actions only."""
        return self.prompt.render(goal, step.observation, list(step.actions or ()), list(history))

    def parse(self, reply: str, step: Step) -> str:
        """The action a model's reply stands for at this step (lenient: anything becomes some action)."""
        return self.prompt.parse(reply, list(step.actions or ()))

    def score(self, last: Step) -> float:
        """An episode's grade in [0, 1] from its last step: 1 when its goal is reached."""
        return 1.0 if last.won else 0.0
