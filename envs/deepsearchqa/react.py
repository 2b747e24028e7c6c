"""DeepSearchQA graded as the original grades it (protocol `paper`): RD-Agent's benchmarks/deepsearchqa/eval.py.

One raw text completion per question, no chat template: REACT_SYSTEM_PROMPT + `\\n\\nQuestion: <q>\\nAnswer type:
<type>\\n\\nThought:`. Each turn the model continues it (greedy, 256 tokens, stopped before `\\nAction:`,
`\\nThought:` or `\\nObservation:`), the stripped text is appended after a space, and its first
`Action: search[...]` / `Action: answer[...]` is the action:
- search: the results are appended as `\\nObservation: <results>\\nThought:`;
- answer: the episode's answer (`your final answer`, the prompt's placeholder, is refused: `\\nThat is not a valid
  answer. Please think again.\\nThought:` is appended and the loop goes on);
- none (an action on its own line is cut by the `\\nAction:` stop, so this is common): `\\nAction: answer[` is
  appended and a forced answer decoded (128 tokens, stopped before `]`); it is the answer, unless it is the
  placeholder, when the loop goes on from that open bracket (the original's quirk, kept).
After 6 turns the answer is the last `Action: answer[...]` written in the model's turns, else "I don't know".
The original's judge (an LLM, every item, "I don't know" included) is `judge_prompt` / `judge_verdict`;
`substring_match` is its fallback when the judge fails.

REACT_SYSTEM_PROMPT and the judge's texts are the original's, byte for byte (tests/test_parity_judged.py checks them
against RD-Agent's code): short fixed strings of the protocol, kept here as constants, not loaded from a file.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from contracts.decoding import Decoding, Prompt

REACT_SYSTEM_PROMPT = """You are a research assistant that answers questions by searching the web.

You must follow this format strictly:
Thought: [your reasoning]
Action: search[your search query]   <- to search the web
  OR
Action: answer[Paris]   <- to give final answer

Rules:
- Always start with a Thought
- Use search[] to find information
- Use answer[] ONLY when you have enough information
- For Set Answer questions, list all items separated by commas
- Be concise and factual
"""
TURN = Decoding(max_new_tokens=256, stop=("\nAction:", "\nThought:", "\nObservation:"), repetition_penalty=1.0,
                chat_template=False)
FORCED_ANSWER = Decoding(max_new_tokens=128, stop=("]",), repetition_penalty=1.0, chat_template=False)
MAX_STEPS = 6
ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.DOTALL)
ANSWER = re.compile(r"Action:\s*answer\[(.+?)\]", re.DOTALL)
PLACEHOLDER = "your final answer"
NO_ANSWER = "I don't know"
NO_RESULTS = "No results found."

Generate = Callable[[list[Prompt], Decoding], list[str]]
Search = Callable[[str], str]


def first_prompt(question: str, answer_type: str) -> str:
    return f"{REACT_SYSTEM_PROMPT}\n\nQuestion: {question}\nAnswer type: {answer_type}\n\nThought:"


@dataclass
class ReactEpisode:
    """One question's loop, advanced by the replies it is given (so that episodes decode in batches)."""

    prompt: str
    max_steps: int = MAX_STEPS
    step: int = 0
    trace: str = ""          # the model's own turns, as the original keeps them for the last-answer rule
    answer: str | None = None
    forcing: bool = False    # the next reply is a forced answer
    searches: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.answer is not None

    def decoding(self) -> Decoding:
        return FORCED_ANSWER if self.forcing else TURN

    def take(self, reply: str, search: Search) -> None:
        """The model's reply (already cut at its decoding's stop strings) to the current prompt."""
        generated = reply.strip()
        if self.forcing:
            self.forcing = False
            self.trace += ("\n" + generated) if generated else ""
            self.actions.append(f"answer[{generated}]")
            if generated.lower() != PLACEHOLDER:
                self.answer = generated
                return
            self._next_step()
            return
        self.trace += ("\n" + generated) if self.trace else generated
        self.prompt += f" {generated}"
        match = ACTION.search(generated)
        if not match:
            self.prompt += "\nAction: answer["
            self.forcing = True
            return
        kind, content = match.group(1), match.group(2).strip()
        self.actions.append(f"{kind}[{content}]")
        if kind == "answer":
            if content.lower() != PLACEHOLDER:
                self.answer = content
                return
            self.prompt += "\nThat is not a valid answer. Please think again.\nThought:"
        else:
            self.searches.append(content)
            self.prompt += f"\nObservation: {search(content)}\nThought:"
        self._next_step()

    def _next_step(self) -> None:
        self.step += 1
        if self.step >= self.max_steps:
            answers = [a.strip() for a in ANSWER.findall(self.trace) if a.strip().lower() != PLACEHOLDER]
            self.answer = answers[-1] if answers else NO_ANSWER


def play(episodes: Sequence[ReactEpisode], generate: Generate, searches: Sequence[Search]) -> None:
    """Every episode to its answer, the ones waiting for the same decoding batched together each round."""
    while True:
        active = [i for i, ep in enumerate(episodes) if not ep.done]
        if not active:
            return
        for decoding in (TURN, FORCED_ANSWER):
            batch = [i for i in active if not episodes[i].done and episodes[i].decoding() == decoding]
            if batch:
                replies = generate([episodes[i].prompt for i in batch], decoding)
                for i, reply in zip(batch, replies):
                    episodes[i].take(reply, searches[i])


def search_text(snippets: Sequence[str]) -> str:
    """What the original shows of a search: the top results' snippets joined with ` | `."""
    return " | ".join(snippets) or NO_RESULTS


# -- the judge ----------------------------------------------------------------------------------------------------
JUDGE_SYSTEM = "You are a strict answer evaluator."
JUDGE_TEMPERATURE = 0.5  # RD-Agent's chat_temperature default: its APIBackend asks the judge with it, no max tokens


def judge_prompt(predicted: str, gold: str, answer_type: str) -> str:
    return f"""You are an answer evaluator. Compare the predicted answer to the gold answer.
        Question answer type: {answer_type}
        Gold answer: {gold}
        Predicted answer: {predicted}
        For "Single Answer": The predicted answer is correct if it contains the same key information as the gold answer.
        For "Set Answer": The predicted answer is correct if it contains ALL items from the gold answer (order doesn't matter, minor wording variations are OK).
        Reply with ONLY "correct" or "incorrect". No explanation."""  # noqa: E501 - the original's text, its indent included


def judge_verdict(reply: str) -> bool:
    """The reply's first line, lowercased, stripped of punctuation, is `correct`. An empty reply raises IndexError,
    which the original's judge treats as a failed call (substring fallback)."""
    normalized = reply.strip().lower().splitlines()[0].strip().strip(".!,;: \t\r\n").lower()
    return normalized == "correct"


def substring_match(predicted: str, gold: str, answer_type: str) -> bool:
    """The original's fallback when the judge fails: containment either way (Single Answer), every comma-separated
    gold item contained (Set Answer)."""
    pred, gold = predicted.strip().lower(), gold.strip().lower()
    if answer_type == "Single Answer":
        return gold in pred or pred in gold
    return all(item.strip() in pred for item in gold.split(","))
