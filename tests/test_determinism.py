"""Determinism, stated: the same weights get the same score. Grading decodes greedily and batching changes no reply,
so two evaluations of one model (fresh backends, other batch sizes, either split) agree item by item, for a
single-turn task and an interactive one. (An LLM judge through a provider is the exception: see docs/grading.md,
determinism.)"""
from __future__ import annotations

import pytest

from contracts.task import load_task
from evaluators.backends.transformers_backend import TransformersBackend
from evaluators.base_models import resolve_base_model
from evaluators.evaluate import evaluate
from tests.conftest import ROOT, load_script
from tests.support import counter  # noqa: F401  (registers the task "counter")

COUNTER = {"name": "counter_det", "cls": "counter", "base_model": "tiny", "level": 3, "train_starts": [0],
           "eval_starts": [1, 2, 9, 4, 6], "target": 3, "max_steps": 3}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model after 60 SFT steps on arithmetic: its replies differ from prompt to prompt."""
    import time

    base = resolve_base_model("tiny", tmp_path_factory.mktemp("det-models"))
    sft = load_script(ROOT / "agents" / "builtin" / "sft.py")
    out = tmp_path_factory.mktemp("det-sft")
    (saved,) = sft.train(base, arithmetic().train_rows()[:300], out, {"steps_per_round": 60, "max_rounds": 1,
                                                                     "threads": 1}, seed=0, deadline=time.time() + 900,
                       on_round=lambda path: None)
    return saved


def arithmetic():
    import yaml

    config = yaml.safe_load((ROOT / "conf" / "task" / "arithmetic.yaml").read_text())
    return load_task({**config, "eval_size": 16, "final_size": 16})


def items(result: dict) -> list[tuple]:
    return [(item["id"], item["completion"], item["score"], item.get("commands")) for item in result["items"]]


@pytest.mark.parametrize("make_task", [arithmetic, lambda: load_task(COUNTER)], ids=["single_turn", "interactive"])
def test_the_same_weights_get_the_same_score_whatever_the_batching(tiny, make_task):
    task = make_task()
    runs = [evaluate(task, TransformersBackend(batch_size=b, device="cpu", torch_threads=1), tiny, task.eval_rows(),
                     max_new_tokens=8) for b in (1, 8, 8)]
    assert all(items(r) == items(runs[0]) and r["score"] == runs[0]["score"] for r in runs), \
        [r["score"] for r in runs]
    if not task.interactive:  # replies differ between items: a real comparison (the counter only hears numbers)
        assert len({c for _, c, _, _ in items(runs[0])}) > 1
    if task.final_rows():  # the held-out split too
        finals = [evaluate(task, TransformersBackend(batch_size=b, device="cpu", torch_threads=1), tiny,
                           task.final_rows(), max_new_tokens=8) for b in (1, 8)]
        assert items(finals[0]) == items(finals[1])
