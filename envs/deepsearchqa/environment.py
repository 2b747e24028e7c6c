"""DeepSearchQA as an Environment (contracts.environment): questions by split, episodes of searches ending in an
answer, and its prompt.

An instance is one question; its info is what an agent may know before playing it (the number of searches its
chain takes, or the real set's answer type and category), never the answer. An episode:

- ``search[query]``: the top ``top_k`` results of the split's search backend as the observation;
- ``answer[text]``: ends the episode; it is won (reward 1) when ``answers.answer_correct`` accepts the text;
- anything else: answered "Invalid action ..." by the environment, costing a step;
- after ``max_steps`` actions without an answer the episode ends, lost.

Each split has its own backend: generated worlds are one per split, so a train session's searches never reach a
document of the eval world (the real set shares the user's backend, as the web is shared).
"""
from __future__ import annotations

from contracts.environment import Environment, Episode, Instance, Step
from envs.deepsearchqa import prompt
from envs.deepsearchqa.answers import answer_correct
from envs.deepsearchqa.search import SearchError
from envs.deepsearchqa.world import Question

START = "No searches yet."
SNIPPET_CHARS = 300  # a result's text is cut here (web snippets are about this long)


def results_text(query: str, hits) -> str:
    if not hits:
        return f'No results for "{query}".'
    lines = [f'Results for "{query}":']
    for i, hit in enumerate(hits, 1):
        text = " ".join(hit.text.split())[:SNIPPET_CHARS]
        lines.append(f"[{i}] {hit.title} - {text}" if hit.title else f"[{i}] {text}")
    return "\n".join(lines)


class DeepSearchQAEpisode(Episode):
    def __init__(self, question: Question, backend, top_k: int, max_steps: int):
        self.question, self.backend, self.top_k, self.max_steps = question, backend, top_k, max_steps

    def reset(self) -> Step:
        self.goal, self.steps, self.over = self.question.question, 0, False
        return Step(START, None, 0.0, False)

    def step(self, action: str) -> Step:
        planned = self.plan(action)
        if isinstance(planned, Step):
            return planned
        try:
            hits = self.backend.search(planned, self.top_k)
        except SearchError as e:
            hits = e
        return self.searched(planned, hits)

    def plan(self, action: str) -> Step | str:
        """Take the action up to its search: the step's answer when it needs none, else the query to search."""
        if self.over:
            return Step("The episode is over.", None, 0.0, True)
        self.steps += 1
        parsed = prompt.split_action(action)
        if parsed is None or not parsed[1]:
            return self._observed(f"Invalid action {action[:80]!r}: reply search[query] or answer[text], with text "
                                  "between the brackets.")
        if parsed[0] == "answer":
            self.over = True
            won = answer_correct(parsed[1], self.question.answer, self.question.aliases,
                                 answer_type=self.question.answer_type)
            return Step(f"You answered: {parsed[1]}. " + ("Correct." if won else "Not correct."), None,
                        1.0 if won else 0.0, True, won)
        return parsed[1]

    def searched(self, query: str, hits) -> Step:
        """The step of a planned search, from its hits (or the SearchError it raised)."""
        if isinstance(hits, SearchError):
            return self._observed(f"Search failed: {hits}")
        return self._observed(results_text(query, hits))

    def _observed(self, observation: str) -> Step:
        out_of_steps = self.steps >= self.max_steps
        if out_of_steps:
            self.over = True
            observation += f" No actions left (at most {self.max_steps}): the question is not answered."
        return Step(observation, None, 0.0, out_of_steps)


class DeepSearchQAEnvironment(Environment):
    prompt = prompt

    def __init__(self, questions: dict[str, list[Question]], backends: dict, top_k: int, max_steps: int):
        """questions and search backends by split."""
        self.top_k, self.max_steps = int(top_k), int(max_steps)
        self._questions = {split: {q.name: q for q in qs} for split, qs in questions.items()}
        self._backends = dict(backends)

    def instances(self, split: str) -> list[Instance]:
        return [Instance(split, q.name, dict(q.info)) for q in self._questions[split].values()]

    def question(self, instance: Instance) -> Question:
        return self._questions[instance.split][instance.name]

    def backend(self, split: str):
        return self._backends[split]

    def open(self, instance: Instance) -> DeepSearchQAEpisode:
        return DeepSearchQAEpisode(self.question(instance), self._backends[instance.split], self.top_k,
                                   self.max_steps)

    def step_many(self, episodes, actions) -> list[Step]:
        """The batch's searches in one call per backend (a local index scores all queries at once: ~20% less CPU a
        search than one by one, measured with 64 queries)."""
        steps = [episode.plan(action) for episode, action in zip(episodes, actions)]
        searches: dict[int, list[int]] = {}  # backend (by id) -> which steps search it
        for i, planned in enumerate(steps):
            if isinstance(planned, str):
                searches.setdefault(id(episodes[i].backend), []).append(i)
        for which in searches.values():
            backend = episodes[which[0]].backend
            queries = [steps[i] for i in which]
            try:
                found = backend.search_many(queries, self.top_k)
            except SearchError as e:
                found = [e] * len(queries)
            for i, query, hits in zip(which, queries, found):
                steps[i] = episodes[i].searched(query, hits)
        return steps

    def score(self, last: Step) -> float:
        """An episode is graded by its answer alone: 1 when it was correct (its reward), else 0."""
        return 1.0 if last.won else 0.0
