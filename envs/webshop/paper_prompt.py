"""WebShop's prompt and reply handling under the paper's protocol: RD-Agent's WebShop evaluator, exactly
(``rdagent/scenarios/rl/autorl_bench/benchmarks/webshop/eval.py``: ``build_react_prompt``,
``_format_available_actions``, its system message and the cleaning in ``webshop_run``).

One step is a system message and a user message, rendered with the model's chat template::

    You are shopping on an e-commerce website. Find and purchase a product matching the user's instruction.

    Instruction: <the page's instruction text: "Instruction: <instruction>", so the line reads that twice>

    Available actions:
      search[<your query>]          (on a page with a search bar)
      click[<clickable>]            (each clickable of the page, in the page's order)

    Rules: ...

    Now it's your turn:

    Observation k: <the page after action k>      (the last HISTORY_WINDOW steps)
    Action k: <action k>

    Observation n+1: <the current page>
    Action n+1:

(The current page also ends the history, as Observation n: the original shows it twice.) A reply (cut at the first
newline, at most 100 tokens) is stripped, loses a leading ``Action:``, and ``choose[`` becomes ``click[``; the shop then
reads it as the original environment does (``name[argument]``, the argument lower-cased; an unknown click does
nothing). The system text is RD-Agent's, kept here: five lines of a template are a fact of the protocol, and RD-Agent
is no package a grader could load it from. Standard library only (copied next to the agents' scripts).
"""
from __future__ import annotations

from collections.abc import Sequence

SYSTEM_PROMPT = (
    "You are a helpful shopping assistant browsing an e-commerce website. "
    "Given a user instruction, current observation, and available actions, "
    "pick the best action to find and purchase a matching product. "
    "Output ONLY one action (e.g., 'search[red shoes]', 'click[buy now]') "
    "with NO extra text, NO explanation."
)
HISTORY_WINDOW = 5      # steps of history shown
MAX_NEW_TOKENS = 100
STOP = ("\n",)
INSTRUCTION_PREFIX = "Instruction: "  # the search page's heading, which the original's get_instruction_text keeps

HEADER = "You are shopping on an e-commerce website. Find and purchase a product matching the user's instruction."
RULES = """Rules:
- Output ONLY one action from the available actions list above.
- For search, use: search[your query]
- For clicking, use: click[exact text from the list]
- Do NOT output anything other than the action."""


def available_actions(has_search_bar: bool, clickables: Sequence[str]) -> str:
    lines = (["search[<your query>]"] if has_search_bar else []) + [f"click[{c}]" for c in clickables]
    return "\n".join(f"  {a}" for a in lines)


def user_text(instruction: str, trail: Sequence[tuple[str, str]], n_steps: int, observation: str,
              actions_text: str) -> str:
    """The user message. ``trail``: the last (action, page after it) pairs, ``n_steps`` actions taken in all."""
    text = (f"{HEADER}\n\nInstruction: {instruction}\n\nAvailable actions:\n{actions_text}\n\n{RULES}\n\n"
            "Now it's your turn:\n")
    recent = list(trail)[-HISTORY_WINDOW:]
    offset = n_steps - len(recent)
    for i, (action, page) in enumerate(recent):
        text += f"\nObservation {offset + i + 1}: {page}\nAction {offset + i + 1}: {action}\n"
    return text + f"\nObservation {n_steps + 1}: {observation}\nAction {n_steps + 1}:"


def render(instruction: str, observation: str, clickables: Sequence[str], has_search_bar: bool,
           trail: Sequence[tuple[str, str]], n_steps: int) -> list[dict[str, str]]:
    """The chat a model answers for one step (system + user). ``instruction``: the page's instruction text."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_text(instruction, trail, n_steps, observation,
                                                  available_actions(has_search_bar, clickables))}]


def parse(reply: str) -> str:
    """A reply (already cut at the stop string) -> the action sent to the shop, as RD-Agent cleans it."""
    action = (reply or "").strip()
    if action.startswith("Action:"):
        action = action[7:].strip()
    if action.startswith("choose["):
        action = "click[" + action[7:]
    return action
