"""The one scripted policy for tests: an EvaluatorBackend whose generate replies by a function of the prompt.

The grader's loop, its prompt rendering, the decoding's stop strings and the environment's parsing all stay real;
only the model is replaced. It records what it was asked: each batch's size, every prompt and every decoding.
"""
from __future__ import annotations

from collections.abc import Callable

from contracts.decoding import Decoding, Prompt
from evaluators.backends.base import EvaluatorBackend


def last_message(prompt: Prompt) -> str:
    """A chat's last message, or raw text as it is."""
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


class ScriptedBackend(EvaluatorBackend):
    def __init__(self, reply: str | Callable[[str], str], *, whole: bool = False, cut: bool = False,
                 batch_size: int = 8):
        """reply: a fixed text, or a function of the prompt's last message (of the whole prompt and its decoding
        with `whole`: reply(prompt, decoding)); cut: each reply is cut at the decoding's stop strings, as a real
        backend cuts it."""
        super().__init__(batch_size=batch_size)
        self.reply, self.whole, self.cut = reply, whole, cut
        self.batches: list[int] = []
        self.prompts: list[Prompt] = []
        self.decodings: list[Decoding] = []

    def load(self, model_dir):
        return model_dir

    def weights_digest(self, loaded) -> str:
        return "scripted"

    def generate(self, loaded, prompts: list[Prompt], decoding: Decoding) -> list[str]:
        self.batches.append(len(prompts))
        self.prompts += prompts
        self.decodings.append(decoding)
        out = []
        for prompt in prompts:
            if isinstance(self.reply, str):
                text = self.reply
            else:
                text = self.reply(prompt, decoding) if self.whole else self.reply(last_message(prompt))
            out.append(decoding.cut(text) if self.cut else text)
        return out
