"""Checkpoint identity and retention: a known public sibling of the base model submitted as the agent's own is
flagged `known_checkpoint` and a model trained from the base is not (by the distances, and in a real sweep through
the record, the ledger, the cell report and the table); a final model that lost the retention task's skill is
flagged `retention_drop`."""
from __future__ import annotations

import json
import tarfile
import textwrap

import pytest

from contracts.records import SUBMISSIONS, read_jsonl
from contracts.specs import ConfigError, to_plain
from contracts.task import load_task
from contracts.task_spec import TaskSpec
from evaluators import identity
from evaluators.contamination import relative_distance
from orchestrator.ledger import Ledger
from tests.conftest import compose
from tests.support.siblings import chats, train_apart

TOL, RATIO = 1e-6, 0.5  # conf/task_defaults.yaml: contamination.near_copy_tol, known_closer_ratio


@pytest.fixture(scope="module")
def models(cache_dir, tmp_path_factory):
    """A base model that answers 0 to every arithmetic question (the tiny model trained so: ~9% of the task's items
    are 0); its sibling, trained apart from it to answer 100 (as an instruct model is trained apart from its base);
    the base trained on (what an agent does: Adam moves every weight about lr a step, whatever the loss); the sibling
    trained a little (what a cheating agent does)."""
    from evaluators.base_models import resolve_base_model

    root = tmp_path_factory.mktemp("siblings")
    tiny = resolve_base_model("tiny", cache_dir / "models")
    arithmetic = load_task(to_plain(compose(["task=arithmetic"]).task), cache_dir)
    prompts = [arithmetic.messages(r) for r in arithmetic.train_rows()[:320]]
    zeros, hundreds = chats(tiny, prompts, "0"), chats(tiny, prompts, "100")
    base = train_apart(tiny, root / "zero", zeros, steps=20, lr=3e-3, max_length=256)
    sibling = train_apart(base, root / "hundred", hundreds, steps=20, lr=3e-3, max_length=256, seed=1)
    return {"base": base, "sibling": sibling,
            "trained": train_apart(base, root / "trained", zeros, steps=10, lr=1e-3, max_length=256, seed=2),
            "cheat": train_apart(sibling, root / "cheat", zeros, steps=2, lr=3e-4, max_length=256, seed=3)}


def weights(path):
    from transformers import AutoModelForCausalLM

    return identity.LoadedTensors(AutoModelForCausalLM.from_pretrained(path).state_dict())


def test_a_known_sibling_is_told_from_a_model_trained_from_the_base(models):
    base = weights(models["base"])
    known = identity.load_known([str(models["sibling"])], models["base"].parent)
    measured = {}
    for name in ("sibling", "trained", "cheat", "base"):
        distances, flagged = identity.identify(weights(models[name]), base, known, TOL, RATIO)
        measured[name] = (distances["known"][str(models["sibling"])], distances["base_distance"], flagged)
    print({k: (round(d, 4), round(b, 4)) for k, (d, b, _) in measured.items()})  # the numbers in identity.py
    d_sibling, big_d, flagged = measured["sibling"]
    assert d_sibling == 0.0 and big_d > 0.1 and flagged == {"model": str(models["sibling"]), "distance": 0.0,
                                                             "base_distance": big_d}
    d_known, d_base, flagged = measured["trained"]
    assert flagged is None and d_base > 0.005 and d_known > d_base, measured["trained"]  # moved, and not towards it
    d_known, d_base, flagged = measured["cheat"]
    assert flagged is not None and 0 < d_known <= RATIO * d_base, measured["cheat"]
    assert measured["base"][2] is None and measured["base"][1] == 0.0


def test_the_distances_stream_a_slice_at_a_time_and_equal_the_whole_computation(models, monkeypatch):
    sub, base = weights(models["trained"]), weights(models["base"])
    sibling = identity.SafetensorsTensors(models["sibling"])
    whole = identity.distances(sub, sibling, base)
    monkeypatch.setattr(identity, "CHUNK", 1000)  # every matrix read in slices of a few rows
    sliced = identity.distances(sub, sibling, base)
    assert sliced == pytest.approx(whole, rel=1e-9)
    names = set(sibling.shapes)  # the checkpoint stores the tied output embedding once
    assert whole[1] == pytest.approx(relative_distance({k: sub.weights[k] for k in names},
                                                       {k: base.weights[k] for k in names}), rel=1e-9)


def test_a_model_of_another_shape_is_not_compared(models, tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(models["base"])
    config.intermediate_size //= 2
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "small")
    known = identity.load_known([str(tmp_path / "small")], tmp_path)
    distances, flagged = identity.identify(weights(models["base"]), weights(models["base"]), known, TOL, RATIO)
    assert distances["known"] == {str(tmp_path / "small"): None} and flagged is None
    # a random model of the known one's shape is far from it, and not flagged though the base is of another shape
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "random")
    distances, flagged = identity.identify(weights(tmp_path / "random"), weights(models["base"]), known, TOL, RATIO)
    assert flagged is None and distances["base_distance"] is None
    assert distances["known"][str(tmp_path / "small")] > RATIO * identity.CAP


def test_task_spec_checks_the_new_keys():
    task = to_plain(compose(["task=arithmetic"]).task)
    spec = TaskSpec.from_config(task)
    assert spec.known_models == () and spec.retention is None  # off by default
    with pytest.raises(ConfigError, match="known_models"):
        TaskSpec.from_config({**task, "known_models": "Qwen/Qwen2.5-1.5B-Instruct"})
    with pytest.raises(ConfigError, match="retention"):
        TaskSpec.from_config({**task, "retention": {"task": "gsm_symbolic"}})
    with pytest.raises(ConfigError, match="contamination: unknown key"):
        TaskSpec.from_config({**task, "contamination": {"known_ratio": 0.5}})


AGENT = """
import json, tarfile, urllib.request
run = json.load(open("run.json"))
# seed 0 "downloads" the public sibling; seed 1 brings a model trained from the base
tarfile.open("code/sibling.tar" if run["seed"] == 0 else "code/trained.tar").extractall("output")
request = urllib.request.Request(run["grading_url"] + "/submit", json.dumps({"model_path": "output/m"}).encode(),
                                 {"Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"})
print("ANSWER", urllib.request.urlopen(request, timeout=600).read().decode(), flush=True)
"""


def test_a_sweep_flags_the_submitted_sibling_and_the_lost_skill_not_the_trained_model(run_sweep, tmp_path, models):
    """Task gsm_symbolic (cut short) on the base that answers 0, the sibling (answers 100: the base's arithmetic
    lost) a known model, and retention on arithmetic."""
    from orchestrator.analysis import tables
    from orchestrator.analysis.report_markdown import _doubts_section
    from orchestrator.analysis.run_report import cell_report

    base, sibling, trained = models["base"], models["sibling"], models["trained"]
    for name, model in (("sibling", sibling), ("trained", trained)):
        with tarfile.open(tmp_path / f"{name}.tar", "w") as tar:
            tar.add(model, arcname="m")
    (tmp_path / "agent.py").write_text(textwrap.dedent(AGENT))
    files = ",".join(str(tmp_path / f) for f in ("agent.py", "sibling.tar", "trained.tar"))
    _, printed, out = run_sweep([
        "sweep=smoke", "sweep.seeds=[0,1]", "agent=command", f"agent.files=[{files}]",
        "agent.command=python code/agent.py", "task=gsm_symbolic", "task.train_size=50", "task.eval_size=10",
        "task.final_size=10", "task.grader.max_new_tokens=8", f"task.base_model={base}",
        f"+task.known_models=['{sibling}']", "+task.retention={task: arithmetic, max_drop: 1}",
        "sweep.budget.wall_time_s=300", "sandbox.kill_grace_s=1"])
    ledger = Ledger(out / "ledger.sqlite")
    cells = {r["seed"]: r for r in ledger.cells().values()}
    assert {r["status"] for r in cells.values()} == {"completed"}, cells
    records = {seed: read_jsonl(out / "cells" / r["cell_id"] / "attempt-1" / SUBMISSIONS)[0]
               for seed, r in cells.items()}
    finals = {seed: json.loads((out / "cells" / r["cell_id"] / "attempt-1" / "outcome.json").read_text())["final"]
              for seed, r in cells.items()}
    print({s: (r["identity"], f["retention"]) for s, (r, f) in zip(records, zip(records.values(), finals.values()))})

    # seed 0 submitted the sibling: flagged in its record (which model, both distances) and its ledger event
    assert "known_checkpoint" in records[0]["flags"], records[0]
    assert records[0]["known_checkpoint"]["model"] == str(sibling) and records[0]["known_checkpoint"]["distance"] == 0
    assert records[0]["known_checkpoint"]["base_distance"] > 0
    assert "known_checkpoint" not in records[1]["flags"] and records[1]["identity"]["known"][str(sibling)] > 0
    events = {e["cell_id"]: e["payload"]["flags"] for e in ledger.events(kind="submission")}
    assert "known_checkpoint" in events[cells[0]["cell_id"]] and "known_checkpoint" not in events[cells[1]["cell_id"]]
    # its final model lost the arithmetic the base had; the model trained from the base kept it
    # (the base answers 0 and the sibling 100: the drop is the share of arithmetic's hidden items whose answer is 0,
    # 3.0 to 9.5 points on the secrets seen; the trained model scored exactly the base's score on each)
    assert finals[0]["retention"]["task"] == "arithmetic" and finals[0]["retention"]["baseline_score"] > 1
    assert "retention_drop" in finals[0]["flags"] and finals[0]["retention"]["drop"] > 1
    assert "retention_drop" not in finals[1]["flags"] and finals[1]["retention"]["drop"] <= 1, finals[1]

    # the cell report and the sweep's table
    flagged = cell_report(cells[0], ledger.events(cells[0]["cell_id"]), out / "cells" / cells[0]["cell_id"])
    assert flagged["outcome_class"] == "known_checkpoint" and flagged["known_checkpoint_count"] == 1
    report = (out / "cells" / cells[0]["cell_id"] / "report.md").read_text()
    assert "Known checkpoint" in report and "retention_drop" in report
    line = next(ln for ln in printed.splitlines() if ln.startswith("gsm_symbolic"))
    assert "known_checkpoint x1" in line and "retention_drop x1" in line and "without the 1 flagged" in line

    # the sweep report's section: the flagged cell counted, results with and without it
    section = "\n".join(_doubts_section(tables.load(out)[0]))
    assert "known_checkpoint x1, retention_drop x1" in section and "1 of 2 runs flagged" in section, section
