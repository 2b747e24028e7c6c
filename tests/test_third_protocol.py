"""A task is graded by a protocol through one class registered for that (task, protocol), chosen once where the task
is built (contracts/task.py variant_class): a third protocol on GSM8K, which has two, is one variant class, its
protocol's values and a config line (tests/support/third_gsm8k.py), run here in a real cell (Ray, the Serve grader
over loopback HTTP). Its cell gets that variant's decoding, prompt, instructions and metric, none of a2rl's or the
paper's: a protocol no longer reads as a2rl's wherever a branch did not name it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.records import SUBMISSIONS, read_jsonl
from contracts.specs import ConfigError
from orchestrator.ledger import Ledger

AGENT = '''import json, os, shutil, urllib.request
shutil.copytree(os.environ["MODEL_PATH"], "output/m")
with open("output/m/scripted.json", "w") as f:
    json.dump({"form": "alternate", "log": LOG}, f)
request = urllib.request.Request(os.environ["GRADING_SERVER_URL"] + "/submit", json.dumps({"model_path": "output/m"}
    ).encode(), {"Authorization": "Bearer " + os.environ["A2RL_RUN_TOKEN"], "Content-Type": "application/json"})
print("ANSWER " + urllib.request.urlopen(request, timeout=300).read().decode())
'''


def gsm8k_sums(folder: Path) -> Path:
    """GSM8K's layout (train.jsonl, test.jsonl) with problems "What is a + b?" the scripted model can answer."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, firsts in (("train", range(10, 14)), ("test", range(1, 5))):
        items = [{"question": f"What is {a} + 2?", "answer": f"{a}+2=<<{a}+2={a + 2}>>{a + 2}\n#### {a + 2}"}
                 for a in firsts]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    return folder


def test_a_third_protocol_is_a_variant_class_and_a_cell_gets_its_decoding_texts_and_metric(run_sweep, tmp_path):
    from contracts.task import protocols, variant_class
    from tests.support.third_gsm8k import TERSE_PROMPT, TERSE_SCORING, Gsm8kTerse

    log = tmp_path / "grader-saw.jsonl"
    (tmp_path / "agent.py").write_text(AGENT.replace("LOG", json.dumps(str(log))))
    plan, _, out = run_sweep([
        "sweep=smoke", "sweep.agents=[command]", "agent=command", f"agent.files=[{tmp_path / 'agent.py'}]",
        "agent.command=python code/agent.py", "task=gsm8k", "task.protocol=terse",
        f"task.data_path={gsm8k_sums(tmp_path / 'gsm8k')}", "task.grader.backend=terse_scripted",
        "imports=[tests.support.third_gsm8k]", "sweep.budget.wall_time_s=300", "sandbox.kill_grace_s=1"])
    (cell,) = plan.to_run
    assert protocols("gsm8k") == ["a2rl", "paper", "terse"] and variant_class(cell.task) is Gsm8kTerse

    (row,) = Ledger(out / "ledger.sqlite").cells().values()
    attempt = out / "cells" / row["cell_id"] / "attempt-1"
    assert row["status"] == "completed", (row, (attempt / "agent.stderr").read_text()[-2000:])
    workspace = Path(json.loads((attempt / "outcome.json").read_text())["workspace"])

    # its texts: the train rows' prompts and the instructions are the variant's, not a2rl's template nor the paper's
    instructions = (workspace / "instructions.md").read_text()
    assert TERSE_SCORING in instructions and "#### <number>" not in instructions and "OpenCompass" not in instructions
    train = [json.loads(line) for line in (workspace / "data" / "train.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in train] == [TERSE_PROMPT.format(question=f"What is {a} + 2?") for a in range(10, 14)]
    assert not any("messages" in r for r in train)  # the paper's chat is the paper's alone

    # its decoding and prompts reached the model: every eval question once, as the variant asks it
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    asked = [TERSE_PROMPT.format(question=f"What is {a} + 2?") for a in range(1, 5)]
    assert [s["prompt"] for s in seen] == [[{"role": "user", "content": text}] for text in asked]
    decoding = Gsm8kTerse.variant_decoding
    assert all(s["decoding"] == {"max_new_tokens": decoding.max_new_tokens, "stop": list(decoding.stop),
                                 "repetition_penalty": decoding.repetition_penalty, "chat_template": True}
               for s in seen)

    # its metric: the two `#### n` replies are wrong under terse (a2rl's reading would count all four right)
    (record,) = read_jsonl(attempt / SUBMISSIONS)
    assert record["score"] == 50.0 and record["metrics"]["terse_exact"] == 50.0, record
    assert row["n_submissions"] == 1


def test_a_protocol_a_task_has_no_variant_for_is_refused_by_name():
    """Nothing falls back to a2rl: a registered protocol on a task without its variant, and a protocol nobody
    registered, are each one line naming what there is."""
    from contracts.protocols import protocol
    from contracts.task import build_task
    from contracts.task_spec import TaskSpec
    import tests.support.third_gsm8k  # noqa: F401  (registers `terse`, for GSM8K only)
    from contracts.specs import to_plain
    from tests.conftest import compose

    arithmetic = to_plain(compose(["task=arithmetic"]).task)
    with pytest.raises(ConfigError, match=r"task arithmetic: protocol='terse' is not one reasoning_gym grades by; it "
                                          r"has \['a2rl'\].*@task_variant\('reasoning_gym', 'terse'\)"):
        build_task(TaskSpec.from_config({**arithmetic, "protocol": "terse"}))
    with pytest.raises(ConfigError, match=r"unknown protocol 'nonesuch'; known: a2rl, paper, terse"):
        build_task(TaskSpec.from_config({**arithmetic, "protocol": "nonesuch"}))
    with pytest.raises(ConfigError, match=r"unknown protocol 'nonesuch'"):
        protocol("nonesuch")
