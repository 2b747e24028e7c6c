"""WebShop as an Environment (contracts.environment): instructions by split, shopping episodes, its prompt.

An instance is one instruction (``train-0007``, ``eval-0042``; its info is the product's category); an episode is a
``ShopSession`` on it. The catalogue, its search index and the instructions come from a data source (the generated
shop, ``envs.webshop.catalogue.GeneratedShop``, or upstream files, ``envs.webshop.real_data.UpstreamShop``) and are
built once per process on first use: the environment itself travels as its recipe (to the grader's workers and the
rollout hosts).

The reward is WebShop's, given when the product is bought (``envs.webshop.reward``); an episode is won (a success,
as the paper counts it) when that reward is at least 0.5. Its grade (``score``) is the reward itself: the grader's
score is 100 x the mean final reward, and its success rate is reported beside it.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from contracts.environment import Environment, Episode, Instance, Step
from envs.webshop import paper_prompt, prompt
from envs.webshop.reward import SUCCESS
from envs.webshop.shop import Shop, ShopSession

MAX_STEPS = 50


@dataclass(frozen=True)
class WebShopStep(Step):
    """A step and what the paper's prompt shows beyond the page: the page's clickables in the original's order,
    whether it has a search bar, and the episode's last (action, page after it) pairs."""
    clickables: tuple[str, ...] = ()
    search_bar: bool = False
    trail: tuple[tuple[str, str], ...] = ()


class WebShopEpisode(Episode):
    def __init__(self, shop: Shop, goal: dict, max_steps: int):
        self.session = ShopSession(shop, goal)
        self.max_steps = max_steps
        self.goal = goal["instruction_text"]
        self.trail: list[tuple[str, str]] = []

    def _step(self, observation: str, reward: float, done: bool) -> Step:
        won = self.session.done and self.session.reward >= SUCCESS
        return WebShopStep(observation, tuple(self.session.actions()), reward, done or self.steps >= self.max_steps,
                           won, tuple(self.session.page_clickables()), self.session.page == "search",
                           tuple(self.trail[-paper_prompt.HISTORY_WINDOW:]))

    def reset(self) -> Step:
        self.steps, self.trail = 0, []
        return self._step(self.session.reset(), 0.0, False)

    def step(self, action: str) -> Step:
        if not self.session.done:
            self.steps += 1
        observation, reward, done = self.session.step(action)
        self.trail.append((action, observation))
        return self._step(observation, reward, done)


class WebShopEnvironment(Environment):
    prompt = prompt

    def __init__(self, data, max_steps: int = MAX_STEPS):
        """data: products() -> list of products, goals(products) -> {"train": [...], "eval": [...], "final": [...]}.
        A step is shown and a reply read by envs.webshop.prompt, and an episode's grade is the final reward (the
        release's way is WebShopPaperEnvironment's)."""
        self.data, self.max_steps = data, int(max_steps)
        self._built: tuple | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"data": self.data, "max_steps": self.max_steps}  # the recipe

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["data"], state["max_steps"])

    def render(self, goal: str, step: Step, history: Sequence[str], observations: Sequence[str] = (),
               info: dict | None = None):
        return super().render(goal, step, history)

    def build(self) -> tuple[Shop, dict[str, list[dict]]]:
        with self._lock:
            if self._built is None:
                products = self.data.products()
                # a data source may bring its own search (UpstreamShop under paper: the original's Lucene index)
                engine = self.data.search_engine(products) if hasattr(self.data, "search_engine") else None
                self._built = (Shop(products, engine), self.data.goals(products))
        return self._built

    @property
    def shop(self) -> Shop:
        return self.build()[0]

    def goals(self, split: str) -> list[dict]:
        return list(self.build()[1][split])

    def instances(self, split: str) -> list[Instance]:
        return [Instance(split, f"{split}-{i:04d}", {"category": goal["category"]})
                for i, goal in enumerate(self.goals(split))]

    def goal(self, instance: Instance) -> dict:
        return self.build()[1][instance.split][int(instance.name.rsplit("-", 1)[1])]

    def open(self, instance: Instance) -> WebShopEpisode:
        return WebShopEpisode(self.shop, self.goal(instance), self.max_steps)

    def score(self, last: Step) -> float:
        """The final reward (dense: a near miss earns part of it); 0 when nothing was bought."""
        return float(last.reward)


class WebShopPaperEnvironment(WebShopEnvironment):
    """The store as the release's evaluator (RD-Agent's WebShop eval.py) plays it: its prompt (envs.webshop.
    paper_prompt, which keeps its own trail of the last pages on the step: WebShopStep.trail), its reply parser with
    its own fallbacks, and an episode's grade is a success (reward >= 0.5), its headline."""

    def render(self, goal: str, step: Step, history: Sequence[str], observations: Sequence[str] = (),
               info: dict | None = None):
        clickables = getattr(step, "clickables", None)
        if clickables is None:  # a step from elsewhere (a human trajectory): its listed clicks
            clickables = [a[len("click["):-1] for a in step.actions or () if a.startswith("click[")]
        search_bar = getattr(step, "search_bar", any(a.startswith("search[") for a in step.actions or ()))
        return paper_prompt.render(paper_prompt.INSTRUCTION_PREFIX + goal, step.observation, clickables, search_bar,
                                   getattr(step, "trail", ()), len(history))

    def parse(self, reply: str, step: Step) -> str:
        return paper_prompt.parse(reply)

    def score(self, last: Step) -> float:
        """1 for a success (reward >= 0.5), the original's headline; 0 when nothing was bought."""
        return 1.0 if last.won else 0.0
