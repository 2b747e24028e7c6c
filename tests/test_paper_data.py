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
import yaml

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

    # the paper's data in the upstream layout, all of valid_unseen graded: no stand-in left for ALFWorld; its shipped
    # 16 of the 134 games are one (a GPU sweep refuses them, naming the count and the knob)
    data = write_alfworld_data(tmp_path / "alfworld", {"train": ["pick_and_place_simple"],
                                                       "valid_unseen": ["pick_and_place_simple"]})
    papers = ["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "sweep.budget.gpus=1", "task=alfworld",
              f"task.data_path={data}"]
    check_stand_ins(expand(compose([*papers, "task.n_eval=134"])), tmp_path, emulated=False, allow_stand_ins=False,
                    out=(said := io.StringIO()))
    assert said.getvalue() == ""
    with pytest.raises(ConfigError, match=r"^task alfworld \(protocol paper\) would be graded on a stand-in.*: "
                                          r"eval: 16 of 134 games, where the paper grades all 134 \(task.n_eval=16; "
                                          r"task.n_eval=134 grades the paper's\);.*allow_stand_ins=true"):
        check_stand_ins(expand(compose(papers)), tmp_path, emulated=False, allow_stand_ins=False, out=io.StringIO())


@pytest.mark.parametrize("task, n, told", [("alfworld", 1, "1 of 134 games"), ("webshop", 20, "20 of 100 sessions"),
                                           ("deepsearchqa", 50, "50 of 200 questions")])
def test_a_paper_task_graded_on_fewer_items_than_the_paper_is_named_in_the_dry_run(tmp_path, task, n, told):
    """`protocol: paper` with fewer eval items than the paper grades (ALFWorld on real-layout data here): the dry run
    names the count under "graded as the paper", and the task's approximations (which flag every score
    `approximate`) carry the same line."""
    from contracts.task import load_task

    if task == "alfworld":
        data = write_alfworld_data(tmp_path / "alfworld", {"train": ["pick_and_place_simple"],
                                                           "valid_unseen": ["pick_and_place_simple",
                                                                            "look_at_obj_in_light"]})
    elif task == "webshop":
        write_webshop_data(data := tmp_path / "webshop", instructions=True)
    else:
        data = "google/deepsearchqa"
    args = [f"task={task}", "task.protocol=paper", f"task.n_eval={n}", f"task.data_path={data}"]
    run = orchestrator(["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", *args, "dry_run=true",
                        f"cache_dir={tmp_path}/cache", f"output_dir={tmp_path}/out"])
    assert run.returncode == 0, run.stdout + run.stderr
    said = run.stdout[run.stdout.index("graded as the paper:"):].split("\n\n")[0]  # that section alone
    (line,) = [x for x in said.splitlines() if x.startswith(f"  - task {task}:")]
    assert f"eval: {told}, where the paper grades all" in line and f"task.n_eval={n}" in line, line
    shipped = yaml.safe_load((ROOT / "conf" / "task" / f"{task}.yaml").read_text())
    notes = load_task({**shipped, "protocol": "paper", "n_eval": n, "data_path": str(data)},
                      tmp_path / "cache").approximations()
    (note,) = [x for x in notes if x.startswith("eval:")]
    assert note in line and told in note, (note, line)


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


# ALFWorld's cell (~2 min) is slow: webshop's runs the same path (an interactive paper cell through the rollout
# service), ALFWorld's paper games play end to end in test_alfworld_paper
@pytest.mark.parametrize("task", [pytest.param("alfworld", marks=pytest.mark.slow), "webshop"])
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
    assert "stand in" not in said and "search:" not in said, said  # (a spaCy model on this machine, the count)
    ledger = Ledger(out / "ledger.sqlite")
    (cell,) = ledger.cells().values()
    assert cell["status"] == "completed", cell
    (submission,) = [e["payload"] for e in ledger.events(kind="submission")]
    assert submission["score"] is not None and submission["error"] is None, submission
    notes = submission.get("approximations") or []
    # no stand-in for the data or the search (WebShop's reward may still name a spaCy model other than the original's);
    # fewer eval items than the paper's are named, the score flagged
    assert not [n for n in notes if not n.startswith(("reward: spaCy model", "eval: "))], notes
    assert any(n.startswith("eval: ") for n in notes) and "approximate" in submission["flags"], submission
    if task == "webshop":  # its held-out final split: the session after the eval ones
        final = json.loads((out / "cells" / cell["cell_id"] / "attempt-1" / "final.json").read_text())
        assert final["n"] == 1 and final["error"] is None, final
