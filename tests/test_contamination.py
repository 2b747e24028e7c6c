"""The contamination check: hidden eval items found in what an agent wrote (n-gram overlap), in a real sweep an agent
that plants them is flagged and one that trains on its train data is not; a near copy of the base model is flagged
like an exact one."""
from __future__ import annotations

import json
import textwrap

import pytest

from contracts.records import SUBMISSIONS, read_jsonl
from contracts.specs import to_plain
from contracts.task import load_task
from contracts.task_spec import ContaminationSettings
from evaluators.contamination import HiddenItems, relative_distance
from orchestrator.ledger import Ledger
from tests.conftest import compose

SETTINGS = ContaminationSettings(ngram=8, threshold=0.5, max_file_mb=1, near_copy_tol=1e-6, known_closer_ratio=0.5,
                                 max_files=1000, max_total_mb=10, max_s=60)
LONG = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
        "clips did Natalia sell altogether in April and May?")


def test_items_are_found_by_overlap_and_short_ones_only_whole(tmp_path):
    hidden = HiddenItems([("long", LONG), ("short", "What is 7 * 3?")], SETTINGS)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "data.py").write_text(f"rows = [{LONG[:120]!r}]\n")  # 74% of its 8-grams
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "mine.jsonl").write_text('{"prompt": "What is 7 * 3 ?", "answer": "21"}\n')
    (tmp_path / "output" / "other.txt").write_text("what is 7 * 4? and 7 * 3\n")  # short items must be whole
    (tmp_path / "output" / "arrow").write_bytes(b"\0\1ARROW1\0" + LONG.encode() + b"\0\0")  # its printable runs
    (tmp_path / "output" / "model.safetensors").write_text(LONG)  # weights are not read
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(LONG)  # what a2rl gave is not the agent's writing
    (tmp_path / "elsewhere.txt").write_text(LONG)
    (tmp_path / "link.txt").symlink_to(tmp_path / "elsewhere.txt")  # links are not followed
    found = {(m["file"], m["item"]) for m in hidden.scan(tmp_path)}
    assert found == {("code/data.py", "long"), ("output/mine.jsonl", "short"), ("output/arrow", "long"),
                     ("elsewhere.txt", "long")}


def test_relative_distance_tells_a_nudged_copy_from_a_trained_model():
    import torch

    torch.manual_seed(0)
    base = {"a": torch.randn(256, 256), "b": torch.randn(256)}
    nudged = {k: v.clone() for k, v in base.items()}
    nudged["a"][0, 0] += 1e-6
    trained = {k: v + 1e-4 * torch.randn_like(v) for k, v in base.items()}  # one small optimiser step everywhere
    assert relative_distance(nudged, base) <= SETTINGS.near_copy_tol < relative_distance(trained, base)
    assert relative_distance({"a": base["a"]}, base) == float("inf")


AGENT = """
import json, shutil, urllib.request
run = json.load(open("run.json"))
shutil.copytree("model", "output/m")
{write}
request = urllib.request.Request(run["grading_url"] + "/submit", json.dumps({{"model_path": "output/m"}}).encode(),
                                 {{"Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"}})
print("ANSWER", urllib.request.urlopen(request, timeout=600).read().decode(), flush=True)
"""
PLANT = 'shutil.copy("code/planted.jsonl", "output/mydata.jsonl")'
TRAIN_ONLY = 'shutil.copy("data/train.jsonl", "output/mydata.jsonl")'


@pytest.mark.parametrize("write, flagged", [(PLANT, True), (TRAIN_ONLY, False)], ids=["plants", "train_only"])
def test_an_agent_that_plants_eval_items_is_flagged_one_on_its_train_data_is_not(run_sweep, cache_dir, tmp_path,
                                                                                 write, flagged):
    task = load_task(to_plain(compose(["task=arithmetic"]).task), cache_dir)  # the grading side's eval split
    planted = [{"prompt": row["prompt"], "completion": row["answer"]} for row in task.final_rows()[:20]]
    (tmp_path / "planted.jsonl").write_text("".join(json.dumps(r) + "\n" for r in planted))
    (tmp_path / "agent.py").write_text(textwrap.dedent(AGENT.format(write=write)))
    files = [tmp_path / "agent.py"] + ([tmp_path / "planted.jsonl"] if write == PLANT else [])
    _, printed, out = run_sweep([
        "sweep=smoke", "agent=command", f"agent.files=[{','.join(map(str, files))}]",
        "agent.command=python code/agent.py", "task=arithmetic", "sweep.budget.wall_time_s=300",
        "sandbox.kill_grace_s=1"])
    (row,) = Ledger(out / "ledger.sqlite").cells().values()
    attempt = out / "cells" / row["cell_id"] / "attempt-1"
    answer = json.loads((attempt / "agent.stdout").read_text().split("ANSWER ", 1)[1])
    assert "contamination" not in answer and "contamination" not in answer["flags"]  # no oracle for the agent
    (record,) = read_jsonl(attempt / SUBMISSIONS)
    outcome = json.loads((attempt / "outcome.json").read_text())
    assert row["status"] == "completed" and row["contaminated"] == int(flagged), row
    assert outcome["contaminated"] is flagged
    if flagged:
        assert "contamination" in record["flags"]
        found = {(m["file"], m["item"]) for m in record["contamination"]}
        assert ("output/mydata.jsonl", "arithmetic-final-0") in found and ("code/planted.jsonl",
                                                                          "arithmetic-final-0") in found
        assert {m["file"] for m in outcome["contamination"]} == {"output/mydata.jsonl", "code/planted.jsonl"}
        assert "contaminated x1" in printed
    else:
        assert "contamination" not in record["flags"] and outcome["contamination"] == []
