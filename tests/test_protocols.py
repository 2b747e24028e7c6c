"""A task's protocol: its config names it, the cell id carries it, and the backends decode as it says (raw text or
a chat, stop strings, the repetition penalty), whatever the batching."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from contracts.decoding import Decoding
from contracts.specs import ConfigError
from contracts.task import build_task, load_task
from contracts.task_spec import TaskSpec
from evaluators.backends.transformers_backend import TransformersBackend
from evaluators.base_models import resolve_base_model
from evaluators.evaluate import evaluate
from tests.conftest import compose

ROOT = Path(__file__).resolve().parents[1]


def arithmetic(**overrides) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "task" / "arithmetic.yaml").read_text()), **overrides}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return resolve_base_model("tiny", tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def babbler(tiny, tmp_path_factory) -> Path:
    """The tiny model with its weights shaken (seeded): the random base model only says newlines, which no stop
    string test can tell from anything."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    out = tmp_path_factory.mktemp("babbler")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def backend() -> TransformersBackend:
    return TransformersBackend(batch_size=4, device="cpu", torch_threads=1)


def replies(backend, model: Path, prompts, decoding: Decoding) -> list[str]:
    loaded = backend.load(model)
    try:
        return backend.generate(loaded, prompts, decoding)
    finally:
        backend.unload(loaded)


def test_decoding_cuts_a_reply_before_its_first_stop_string():
    d = Decoding(max_new_tokens=8, stop=("\nAction:", "\n"))
    assert d.cut("go to desk 1\nAction: look") == "go to desk 1"
    assert d.cut("no stop here") == "no stop here"
    assert d.cut("\nfirst") == ""
    for bad in ({"max_new_tokens": 0}, {"max_new_tokens": 4, "stop": ("",)},
                {"max_new_tokens": 4, "repetition_penalty": 0.0}):
        with pytest.raises(ValueError):
            Decoding(**bad)
    with pytest.raises(TypeError, match="renders chats"):
        d.check_prompt("raw text")
    with pytest.raises(TypeError, match="raw text"):
        Decoding(max_new_tokens=4, chat_template=False).check_prompt([{"role": "user", "content": "x"}])


def test_a_protocol_is_part_of_the_task_config_and_of_the_cell_id():
    spec = TaskSpec.from_config(arithmetic())
    assert spec.protocol == "a2rl" and load_task(arithmetic()).protocol == "a2rl"
    with pytest.raises(ConfigError, match=r"task arithmetic: protocol='paper' is not one reasoning_gym grades by; "
                                          r"it has \['a2rl'\]"):
        build_task(TaskSpec.from_config(arithmetic(protocol="paper")))
    with pytest.raises(ConfigError, match="protocol=3 must be"):
        TaskSpec.from_config(arithmetic(protocol=3))
    from orchestrator.sweep import expand

    ids = {}
    for protocol in (None, "a2rl", "other"):
        extra = [] if protocol is None else [f"+task.protocol={protocol}"]
        [cell] = expand(compose(["sweep=demo", "task=arithmetic", "sweep.agents=[sft]", "sweep.seeds=[0]",
                                 "sweep.tasks=[arithmetic]", *extra]))
        ids[protocol] = cell.cell_id
    assert ids[None] != ids["other"] and ids["a2rl"] != ids["other"]  # a written protocol is in the identity


def test_raw_text_prompts_decode_alike_batched_or_alone(babbler, backend):
    prompts = ["Interact with a household.\n> go to desk 1\nOn the desk 1, you see a mug.\n>", "12 + 7 =", "x"]
    raw = Decoding(max_new_tokens=10, chat_template=False)
    batched = replies(backend, babbler, prompts, raw)
    assert batched == [replies(backend, babbler, [p], raw)[0] for p in prompts]
    # the same text fed as a chat is another prompt (the template wraps it): the protocol decides which
    as_chat = replies(backend, babbler, [[{"role": "user", "content": p}] for p in prompts],
                      Decoding(max_new_tokens=10))
    assert as_chat != batched


def test_stop_strings_end_a_reply_exactly_where_a_cut_of_the_whole_reply_would(babbler, backend):
    prompts = [[{"role": "user", "content": f"What is {a} + {a}?"}] for a in range(6)]
    whole = replies(backend, babbler, prompts, Decoding(max_new_tokens=24))
    assert len(set(whole)) > 2, whole
    # stop strings from the middle of some of these replies, one that occurs in none, and "\n" + the prompt's last
    # character: a chat prompt ends with "\n", and a match across that end must not stop a reply
    stops = tuple({w[len(w) // 2:len(w) // 2 + 3] for w in whole[:3] if len(w) > 8}) + ("\x00never", "\n\n")
    stopped = Decoding(max_new_tokens=24, stop=stops)
    assert replies(backend, babbler, prompts, stopped) == [stopped.cut(w) for w in whole]
    assert any(stopped.cut(w) != w for w in whole)


def test_the_repetition_penalty_is_the_protocols_or_the_models_own(babbler, backend, tmp_path):
    penalised = tmp_path / "penalised"
    shutil.copytree(babbler, penalised)
    config = json.loads((penalised / "generation_config.json").read_text()) \
        if (penalised / "generation_config.json").exists() else {}
    (penalised / "generation_config.json").write_text(json.dumps({**config, "repetition_penalty": 3.0}))
    prompts = [[{"role": "user", "content": f"Repeat after me: {w} {w} {w} {w}"}] for w in ("ab", "cd", "ef", "gh")]
    models_own = replies(backend, penalised, prompts, Decoding(max_new_tokens=16))
    assert models_own == replies(backend, penalised, prompts, Decoding(max_new_tokens=16, repetition_penalty=3.0))
    without = replies(backend, penalised, prompts, Decoding(max_new_tokens=16, repetition_penalty=1.0))
    assert without == replies(backend, babbler, prompts, Decoding(max_new_tokens=16))  # the tiny model names none
    assert without != models_own


def test_the_grader_decodes_with_the_tasks_decoding(tiny, backend, monkeypatch):
    task = load_task(arithmetic())
    rows = task.eval_rows()[:3]
    seen = []
    real = backend.generate
    monkeypatch.setattr(backend, "generate", lambda loaded, prompts, decoding: seen.append(decoding)
                        or real(loaded, prompts, decoding))
    evaluate(task, backend, tiny, rows)
    evaluate(task, backend, tiny, rows, max_new_tokens=3)
    assert seen == [task.decoding(), Decoding(max_new_tokens=3)]
    assert task.decoding() == Decoding(max_new_tokens=task.grader.max_new_tokens)


def test_the_sweeps_table_counts_the_flags_a_protocol_raises(tmp_path):
    from contracts.specs import AgentSpec, Budget, CellSpec, DriverSpec
    from orchestrator.ledger import Ledger
    from orchestrator.summary import summary_rows

    ledger = Ledger(tmp_path / "ledger.sqlite")
    cells = [CellSpec(agent=AgentSpec(name="sft", kind="builtin"), driver=DriverSpec(name="none"),
                      task=TaskSpec.from_config({"name": "humaneval", "cls": "humaneval", "base_model": "tiny",
                                                 "protocol": "paper"}), seed=seed, sweep="s",
                      budget=Budget(wall_time_s=100, max_submissions=4)) for seed in (0, 1)]
    ledger.add_cells(cells)
    for cell, flags in zip(cells, (["gamed_tests", "cached"], ["gamed_tests", "approximate", "copy_of_base"])):
        ledger.mark_running(cell.cell_id, 1, 0.0)
        ledger.add_events(cell.cell_id, 1, [{"t": 1.0, "kind": "submission", "key": f"{cell.cell_id}/1/sub/1",
                                             "payload": {"submission_id": 1, "score": 1.0, "flags": flags}}])
    [row] = summary_rows(ledger, [c.cell_id for c in cells])
    assert row["flags"][:3] == ["copy_of_base x1", "gamed_tests x2", "approximate x1"]
