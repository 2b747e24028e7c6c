"""The expert: a planner that knows a question's chain of facts issues the search for each, in order, then answers.

For a generated question it searches each hop's query (``<subject> <relation words>``: the subject is the previous
hop's answer, which the expert reads off the results like a model must) and answers the last hop's object. A
question is kept only when this plan wins and every hop's object shows up in the results of its own search (so
every kept question can be answered by searching). A real question has no known chain: the expert searches the
question itself, then answers the gold answer (a demonstration of the format, and of the answer).
"""
from __future__ import annotations

from contracts.environment import Demonstration, Step
from envs.deepsearchqa.environment import DeepSearchQAEpisode
from envs.deepsearchqa.world import Question


def plan(question: Question) -> list[str]:
    """The expert's actions for a question."""
    # a real question's cells are as the set has them (whitespace and all): the demonstration's actions are one line
    searches = [hop.query for hop in question.hops] or [" ".join(question.question.split())]
    return [f"search[{q}]" for q in searches] + [f"answer[{' '.join(question.answer.split())}]"]


def play(question: Question, backend, top_k: int, max_steps: int) -> tuple[list[tuple[Step, str]], Step, bool]:
    """The expert's episode: [(state, action)], the last step, and whether every hop's object was in the results
    of its search."""
    episode = DeepSearchQAEpisode(question, backend, top_k, max_steps)
    step, states, found = episode.reset(), [], True
    for i, action in enumerate(plan(question)):
        states.append((step, action))
        step = episode.step(action)
        if i < len(question.hops) and question.hops[i].object not in step.observation:
            found = False
        if step.done:
            break
    return states, step, found


def solvable(question: Question, backend, top_k: int, max_steps: int) -> bool:
    _, last, found = play(question, backend, top_k, max_steps)
    return last.won and found


def demonstrations(question: Question, backend, top_k: int, max_steps: int) -> list[Demonstration]:
    states, last, _ = play(question, backend, top_k, max_steps)
    if not last.won:
        raise RuntimeError(f"the expert does not win question {question.name!r} ({question.question!r})")
    history: list[str] = []
    out = []
    for i, (step, action) in enumerate(states):
        out.append(Demonstration(question.name, question.question, step, tuple(history), action, index=i,
                                 expert="planner", info=dict(question.info)))
        history.append(action)
    return out
