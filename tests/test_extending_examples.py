"""The worked examples of the "extending" docs, run through the grader: a new single-turn task (`anagrams`, data that
ships in a package) and a new environment (`number_guess`). Each is its module(s) plus one YAML in conf/task/; what
every environment must do is tests/test_environment_contract.py's (number_guess is one of its cases)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from contracts.task import load_task
from evaluators.base_models import resolve_base_model
from evaluators.evaluate import evaluate_loaded
from tests.support.scripted_backend import ScriptedBackend

ROOT = Path(__file__).resolve().parents[1]


def config(name: str, **overrides) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "task" / f"{name}.yaml").read_text()), **overrides}


@pytest.fixture(scope="module")
def anagrams(cache_dir):
    return load_task(config("anagrams", n_train=40, n_eval=12, final_size=3), cache_dir)


def anagram_expert(task):
    """A policy that knows every group of the package's file (as a model that learned them would)."""
    others = {}
    for words in task._groups:
        for word in words:
            others[word] = next(w for w in words if w != word)
    return lambda prompt: others[prompt.split('"')[1]] + "."


def test_the_single_turn_example_through_the_grader(anagrams, cache_dir):
    train, feedback, final = anagrams.train_rows(), anagrams.eval_rows(), anagrams.final_rows()
    assert (len(train), len(feedback), len(final)) == (40, 12, 3)
    assert all(anagrams.score(row["completion"], row) == 1.0 for row in train)  # the train answers are right
    assert not {r["word"] for r in train} & {r["word"] for r in feedback + final}  # hidden words are never train's
    graded = evaluate_loaded(anagrams, ScriptedBackend(anagram_expert(anagrams)), "scripted", feedback)
    assert graded["score"] == 100.0 and graded["n"] == 12
    echo = evaluate_loaded(anagrams, ScriptedBackend(lambda prompt: prompt.split('"')[1]), "scripted", feedback)
    assert echo["score"] == 0.0  # the given word itself is not an anagram of it
    # The hidden words are drawn with the grading side's secret: another cache draws others, a fixed salt is fixed.
    other = load_task(config("anagrams", n_train=40, n_eval=12, final_size=3), cache_dir / "other")
    assert other.train_rows() == train and other.eval_rows() != feedback
    text = anagrams.instructions()
    assert anagrams.scoring in text and "at most 8 new tokens" in text and "12 other words" in text


def test_the_single_turn_example_with_a_real_model(anagrams, cache_dir):
    """The tiny model answers through the real transformers backend and the task scores what it says."""
    from evaluators.backends.transformers_backend import TransformersBackend

    tiny = resolve_base_model("tiny", cache_dir / "models")
    backend = TransformersBackend(batch_size=8, device="cpu", torch_threads=1)
    loaded = backend.load(tiny)
    graded = evaluate_loaded(anagrams, backend, loaded, anagrams.eval_rows())
    assert graded["n"] == 12 and 0.0 <= graded["score"] <= 100.0
    assert all(item["score"] == anagrams.score(item["completion"], row)
               for item, row in zip(graded["items"], anagrams.eval_rows()))


def halving(prompt: str) -> str:
    """The middle of the range the last answer leaves (or of 1..high at the start)."""
    low, high = map(int, re.findall(r"from (\d+) to (\d+)", prompt)[-1])
    return f"My guess is {(low + high) // 2}."


def test_the_environment_example_through_the_grader(cache_dir):
    task = load_task(config("number_guess", n_train=4, n_eval=6, final_size=2), cache_dir)
    rows = task.eval_rows()
    graded = evaluate_loaded(task, ScriptedBackend(halving), "scripted", rows)
    assert graded["score"] == 100.0 and graded["n"] == 6
    assert all(1 <= item["steps"] <= task.max_steps for item in graded["items"])
    lowball = evaluate_loaded(task, ScriptedBackend("1"), "scripted", rows)
    assert lowball["score"] < 100.0 and all(item["steps"] == task.max_steps or item["won"]
                                           for item in lowball["items"])
    assert len(task.final_rows()) == 2
    assert all(row["completion"] == halving(row["prompt"]).split()[-1].rstrip(".") for row in task.train_rows())
