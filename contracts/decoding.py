"""How the grader decodes a task's prompts: part of the task's protocol, applied alike by every backend.

A prompt is a chat (a list of {"role", "content"} messages, rendered with the submitted model's chat template and its
generation prompt) or, when `chat_template` is False, raw text fed to the model as it is (a completion, as the
original benchmark's ALFWorld and DeepSearchQA graders do). Decoding is always greedy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

Prompt = Union[list[dict], str]


@dataclass(frozen=True)
class Decoding:
    max_new_tokens: int
    stop: tuple[str, ...] = ()               # a reply ends before the first of these (not included, as in vLLM)
    repetition_penalty: float | None = None  # None: the model's generation_config.json value (a2rl's own
                                             # protocol); the original benchmark decodes with 1.0 everywhere
    chat_template: bool = True               # False: prompts are raw text, no chat template
    # raw text only: fit(prompt, tokenizer) -> the text decoded from, given the submitted model's tokenizer (the
    # original's ALFWorld grader cuts a prompt too long for its context: envs.alfworld.paper_prompt.fit); None: the
    # prompt as it is. Every backend applies it before it tokenises the prompt.
    fit: Callable[[str, Any], str] | None = None

    def __post_init__(self):
        if int(self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be at least 1")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty={self.repetition_penalty} must be positive (1.0: none)")
        if self.fit is not None and self.chat_template:
            raise ValueError("fit cuts raw text prompts: it needs chat_template=False")

    def describe(self) -> str:
        """How the grader decodes, for a task's instructions: "decodes greedily, at most 64 new tokens, ..." """
        parts = [f"decodes greedily, at most {self.max_new_tokens} new tokens"]
        if self.stop:
            parts.append("cut before the first " + " or ".join(f"`{repr(s)[1:-1]}`" for s in self.stop))
        if self.repetition_penalty is None:
            parts.append("with the model's own repetition penalty (generation_config.json)")
        else:
            parts.append("no repetition penalty" if self.repetition_penalty == 1.0 else
                         f"repetition penalty {self.repetition_penalty:g}")
        return ", ".join(parts) + ", stopping at the end-of-sequence tokens of the tokenizer and generation_config.json"

    def check_prompt(self, prompt: Prompt) -> None:
        """A prompt of the wrong kind is a bug in the task, not a reply to grade: say so at once."""
        if self.chat_template and not isinstance(prompt, list):
            raise TypeError(f"this protocol renders chats, got {type(prompt).__name__} {str(prompt)[:80]!r}")
        if not self.chat_template and not isinstance(prompt, str):
            raise TypeError(f"this protocol feeds raw text, got {type(prompt).__name__}")

    def cut(self, reply: str) -> str:
        """The reply up to its first stop string."""
        ends = [i for i in (reply.find(s) for s in self.stop) if i >= 0]
        return reply[:min(ends)] if ends else reply
