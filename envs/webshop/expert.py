"""The expert: a planner that knows the instruction's target and acts only through the shop's pages.

From any state it takes the action that leads to buying the target or a product as good (one whose best purchase
earns the full reward): search the instruction's product phrase (the target's title when that search missed), turn
to the result page holding the target (or the first product as good), open it, choose each option the instruction
names, buy. On a page it did not mean to be on (a sub-page, another product) it goes back.

``episodes``: one clean episode per instruction, then ``n - 1`` with detours injected at rate ``noise`` (a random
click, another product, a sub-page, the next page): they show up in the history and the expert's recovery gets rows.
"""
from __future__ import annotations

import random
from collections.abc import Iterator

from contracts.environment import Demonstration, Step
from envs.webshop.reward import reward as purchase_reward
from envs.webshop.shop import BACK_TO_SEARCH, END_BUTTON, NEXT_PAGE, PREV_PAGE, PRODUCT_WINDOW, ShopSession

def choices(goal: dict, product: dict) -> dict[str, str]:
    """The instruction's options this product offers, by option group. A generated instruction names each value's
    group; the upstream human ones list bare values (matched here as the store lower-cases them)."""
    offered = product["options"]
    wanted = goal["goal_options"]
    if isinstance(wanted, dict):
        return {k: v for k, v in wanted.items() if v in offered.get(k, [])}
    values = {str(v).strip().replace("/", " | ").lower() for v in wanted}
    out = {}
    for name, options in offered.items():
        value = next((v for v in options if v in values), None)
        if value is not None:
            out[name] = value
    return out


def best_reward(session: ShopSession, asin: str) -> float:
    """The reward of buying this product with the instruction's options wherever it offers them."""
    product = session.shop.products[asin]
    return purchase_reward(product, session.goal, product["price"], choices(session.goal, product))[0]


def wanted(session: ShopSession) -> str | None:
    """The product to buy among the last search's results: the target, else the first as good, else None."""
    if session.goal["asin"] in session.results:
        return session.goal["asin"]
    return next((a for a in session.results if best_reward(session, a) >= 1.0 - 1e-9), None)


def expert_action(session: ShopSession) -> str:
    goal = session.goal
    query = goal.get("search") or goal["instruction_text"].split(", and price lower than")[0]
    if session.page == "search":
        if session.keywords == query and wanted(session) is None:  # its query missed: the target's own title
            return f"search[{session.shop.products[goal['asin']]['Title'].lower()}]"
        return f"search[{query}]"
    pick = wanted(session)
    if session.page == "results":
        if pick is None:
            return f"click[{BACK_TO_SEARCH}]"
        page = session.results.index(pick) // PRODUCT_WINDOW + 1
        if page != session.number:
            return f"click[{NEXT_PAGE if page > session.number else PREV_PAGE}]"
        return f"click[{pick.lower()}]"
    if session.page == "sub" or (session.page == "item" and session.asin != pick):
        return f"click[{PREV_PAGE}]"
    if session.page == "item":
        for name, value in choices(goal, session._product()).items():
            if session.options.get(name) != value:
                return f"click[{value}]"
        return f"click[{END_BUTTON}]"
    raise ValueError(f"the expert has nothing to do on the {session.page} page")


def _detour(session: ShopSession, rng: random.Random) -> str | None:
    clicks = [c for c in session.clickables() if c != END_BUTTON]
    return f"click[{rng.choice(clicks)}]" if clicks else None


def play(env, instance, episode: int = 0, noise: float = 0.0, seed: int = 0) -> Iterator[Demonstration]:
    """One expert episode on a train instance: its demonstrations (the detours have none)."""
    rng = random.Random(f"a2rl-webshop-expert:{seed}:{instance.name}:{episode}")
    ep = env.open(instance)
    step: Step = ep.reset()
    history: list[str] = []
    index = 0
    while not step.done:
        room = ep.steps < env.max_steps - 10  # detours leave the expert the steps it needs to still buy
        detour = _detour(ep.session, rng) if episode and room and rng.random() < noise else None
        action = detour or expert_action(ep.session)
        if detour is None:
            yield Demonstration(instance.name, ep.goal, step, tuple(history), action, episode=episode, index=index,
                                expert="planner", info=dict(instance.info))
            index += 1
        history.append(action)
        step = ep.step(action)
