"""The paper's data for the interactive tasks (issue 41): under `protocol: paper` ALFWorld, WebShop and DeepSearchQA
read the paper's data from the cache by default; a sweep that would grade one on a stand-in (generated data, a
substitute search, judge or model) says so per task before any cell starts, and refuses with GPUs reserved unless
allow_stand_ins=true; the dry run says per paper task which data it reads and which keys its search and judge need;
and a paper cell of ALFWorld and of WebShop on data in the upstream layout runs end to end with no stand-in."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from contracts.specs import ConfigError
from orchestrator.ledger import Ledger
from orchestrator.preflight import check_stand_ins
from orchestrator.sweep import expand
from tests.conftest import ROOT, compose
from tests.support.upstream_layouts import write_alfworld_data, write_webshop_data


def orchestrator(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "RAY_AUTH_MODE": "disabled", **(env or {})})


def test_a_gpu_sweep_on_a_stand_in_refuses_in_one_line_before_anything_starts(tmp_path):
    run = orchestrator(["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "task=webshop",
                        "task.data_path=null", "sweep.budget.gpus=1", f"cache_dir={tmp_path}/cache",
                        f"output_dir={tmp_path}/out", "logger=none"])
    assert run.returncode == 2, run.stdout + run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("a2rl: config error: task webshop (protocol paper) would be graded on a stand-in"), line
    assert "generated store stands in" in line and "allow_stand_ins=true" in line, line
    assert not (tmp_path / "out" / "ledger.sqlite").exists()  # nothing started


def test_stand_ins_are_said_per_task_and_allowed_by_the_flag_or_without_gpus(tmp_path):
    cfg = compose(["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "sweep.budget.gpus=1",
                   "sweep.tasks=[{name:alfworld,data_path:null},{name:webshop,data_path:null},"
                   "{name:webshop,protocol:a2rl,data_path:null}]"])
    cells = expand(cfg)
    with pytest.raises(ConfigError, match=r"^task alfworld \(protocol paper\) .*stand-in \(and 1 more tasks\).*"
                                          r"generated games stand in .*allow_stand_ins=true"):
        check_stand_ins(cells, tmp_path, emulated=False, allow_stand_ins=False, out=io.StringIO())
    for emulated, allowed in ((False, True), (True, False)):
        said = io.StringIO()
        check_stand_ins(cells, tmp_path, emulated=emulated, allow_stand_ins=allowed, out=said)
        lines = said.getvalue().splitlines()
        assert [line.split(" (protocol")[0] for line in lines] == ["[a2rl] task alfworld", "[a2rl] task webshop"]
        assert "its scores flagged approximate" in lines[0]

    # the paper's data in the upstream layout: no stand-in left for ALFWorld
    data = write_alfworld_data(tmp_path / "alfworld", {"train": ["pick_and_place_simple"],
                                                       "valid_unseen": ["pick_and_place_simple"]})
    cfg = compose(["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "sweep.budget.gpus=1",
                   "task=alfworld", f"task.data_path={data}"])
    check_stand_ins(expand(cfg), tmp_path, emulated=False, allow_stand_ins=False, out=(said := io.StringIO()))
    assert said.getvalue() == ""


def test_the_dry_run_says_which_data_each_paper_task_reads_and_the_keys_it_needs(tmp_path):
    run = orchestrator(["sweep=paper_grid", "dry_run=true", f"cache_dir={tmp_path}", f"output_dir={tmp_path}/out"],
                       env={"OPENAI_API_KEY": ""})
    assert run.returncode == 0, run.stderr
    said = run.stdout[run.stdout.index("graded as the paper:"):]
    assert f"task alfworld: the paper's data ({tmp_path}/data/alfworld)" in said, said
    assert f"task webshop: the paper's data ({tmp_path}/data/webshop)" in said or "task webshop: stand-ins" in said
    assert "task alpacaeval: the paper's data; keys: $OPENAI_API_KEY (judge gpt)" in said, said
    # what prepare fetches for them is named among what is missing
    assert f"no ALFWorld json_2.1.1 games under data_path={tmp_path}/data/alfworld" in said
    assert f"no items_shuffle_1000.json, items_ins_v2_1000.json, items_human_ins.json in data_path={tmp_path}" in said
    assert "spaCy's en_core_web_sm 3.7.1" in said


@pytest.mark.parametrize("task", ["alfworld", "webshop"])
def test_a_paper_cell_on_upstream_layout_data_runs_end_to_end_with_no_stand_in(run_sweep, tmp_path, task):
    if task == "alfworld":
        pytest.importorskip("alfworld")
        data = write_alfworld_data(tmp_path / "data", {"train": ["pick_and_place_simple", "look_at_obj_in_light"],
                                                       "valid_unseen": ["pick_and_place_simple"]})
        size = ["task.final_size=0"]  # (the untrained model plays every game to the 50th step: one game is enough)
    else:
        write_webshop_data(data := tmp_path / "data", instructions=True)
        size = ["task.n_train=4", "task.n_eval=2", "task.final_size=1"]
    _, said, out = run_sweep(["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", f"task={task}",
                              f"task.name={task}_paper_data", f"task.data_path={data}", *size,
                              "sweep.budget.wall_time_s=900"])
    assert "stand in" not in said and "search:" not in said, said  # (only a spaCy model, on this machine)
    ledger = Ledger(out / "ledger.sqlite")
    (cell,) = ledger.cells().values()
    assert cell["status"] == "completed", cell
    (submission,) = [e["payload"] for e in ledger.events(kind="submission")]
    assert submission["score"] is not None and submission["error"] is None, submission
    notes = submission.get("approximations") or []
    # no stand-in for the data or the search (WebShop's reward may still name a spaCy model other than the original's)
    assert not [n for n in notes if not n.startswith("reward: spaCy model")], notes
    if task == "webshop":  # its held-out final split: the session after the eval ones
        final = json.loads((out / "cells" / cell["cell_id"] / "attempt-1" / "final.json").read_text())
        assert final["n"] == 1 and final["error"] is None, final
