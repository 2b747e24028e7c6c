"""A third protocol on a task that has two already (GSM8K: a2rl's and the paper's), to show that one is a registered
protocol, one variant class and a config line (`task.protocol=terse`); tests/test_third_protocol.py runs a cell with
it (`imports=[tests.support.third_gsm8k]`).

`terse` asks for the number alone, decodes at most 12 tokens up to a newline with no repetition penalty, and scores a
reply right only when it is the answer exactly (no `####`, no worked solution). Its grader here is a scripted model
(the backend `terse_scripted`): a copy of any model with `scripted.json` beside it, which answers every question
correctly in the form the script says and writes down each prompt and decoding it was given."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from contracts.decoding import Decoding
from contracts.errors import ModelLoadError
from contracts.protocols import Protocol
from contracts.registry import register
from contracts.task import task_variant
from evaluators.backends.base import EvaluatorBackend
from evaluators.tasks.gsm8k_task import Gsm8kTask

register("protocol", "terse")(Protocol("terse", auto_backend_on_gpu="transformers", release_context=False,
                                       counts_flagged=False, percent_after_division=False))

TERSE_PROMPT = "Terse. {question}\nReply with the number alone."
TERSE_SCORING = "Terse grading: the stripped reply must be the answer's digits exactly, nothing else."


@task_variant("gsm8k", "terse")
class Gsm8kTerse(Gsm8kTask):
    variant_decoding = Decoding(max_new_tokens=12, stop=("\n",), repetition_penalty=1.0)
    scoring = TERSE_SCORING

    def _row(self, split: str, index: int, item: dict, position: int) -> dict:
        return {**super()._row(split, index, item, position), "prompt": TERSE_PROMPT.format(question=item["question"])}

    def score(self, completion: str, row: dict) -> float:
        return float(completion.strip() == row["answer"])

    def summarize(self, items: list[dict], rows: list[dict]) -> dict:
        out = super().summarize(items, rows)
        return {**out, "metrics": {"terse_exact": out["score"]}}


QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


@register("backend", "terse_scripted")
class ScriptedAdder(EvaluatorBackend):
    """A model folder with scripted.json ({"form": "bare" | "marked" | "alternate", "log": PATH}) answers "What is
    a + b?" right, as the number alone (bare), as `#### n` (marked) or each way in turn, every other question 0; it
    appends {prompt, decoding} to the log for each prompt. Without scripted.json (the base model) it answers 0 and
    logs nothing."""

    def load(self, model_dir):
        folder = Path(model_dir)
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"no config.json in {model_dir}")
        script = folder / "scripted.json"
        loaded = json.loads(script.read_text()) if script.is_file() else {}
        blob = script.read_bytes() if script.is_file() else (folder / "config.json").read_bytes()
        return {**loaded, "digest": hashlib.sha256(blob).hexdigest()}

    def generate(self, loaded, prompts, decoding):
        replies = []
        for prompt in prompts:
            text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            found = QUESTION.search(text)
            a, b = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
            answer = str(a + b) if found and loaded.get("form") else "0"
            # "alternate": the number alone for an even a, `#### n` for an odd one
            marked = loaded.get("form") == "marked" or (loaded.get("form") == "alternate" and a % 2)
            full = f"{'#### ' * bool(marked)}{answer}\nand so on"  # a model that goes on: the stops end it
            cuts = [full.index(stop) for stop in decoding.stop if stop in full]
            replies.append(full[:min(cuts)] if cuts else full)
            if loaded.get("log"):
                seen = {"max_new_tokens": decoding.max_new_tokens, "stop": list(decoding.stop),
                        "repetition_penalty": decoding.repetition_penalty, "chat_template": decoding.chat_template}
                with open(loaded["log"], "a") as f:
                    f.write(json.dumps({"prompt": prompt, "decoding": seen}) + "\n")
        return replies

    def weights_digest(self, loaded) -> str:
        return loaded["digest"]
