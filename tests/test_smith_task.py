"""Benchmark folders in the release's rl-smith layout as tasks (evaluators/tasks/smith_task.py): the release's
scores on recorded replies (tests/fixtures/parity/make_smith.py), evaluate run apart under a time limit, bad folders
refused in one line, discovery from smith_dir in the dry run, the shipped twin, and a folder written here as a user
would run with copy_base under both protocols."""
from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from contracts.specs import ConfigError
from contracts.task import load_task
from evaluators.evaluate import evaluate
from orchestrator.ledger import Ledger
from tests.conftest import ROOT
from tests.support.cells import cells_ended
from tests.support.scripted_backend import ScriptedBackend

FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "parity" / "smith_paper.json").read_text())
TWIN = ROOT / "evaluators" / "tasks" / "smith_benchmarks" / "arith"


def write_folder(root: Path, name: str, eval_py: str, items: list[dict] | None, config: dict | None = None,
                 **files: str) -> Path:
    """A benchmark folder in the release's layout."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config if config is not None else {"name": name}))
    (folder / "eval.py").write_text(eval_py)
    (folder / "description.md").write_text(f"# {name}\n\nAnswer the question.\n")
    if items is not None:
        (folder / "data").mkdir()
        (folder / "data" / "train.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


def smith(folder: Path, cache_dir: Path | None = None, **overrides):
    config = {**yaml.safe_load((ROOT / "conf" / "task" / "smith.yaml").read_text()), "path": str(folder), **overrides}
    return load_task(config, cache_dir)


# -- the release's own scores ------------------------------------------------------------------------------------

@pytest.mark.parametrize("run", FIXTURE["runs"], ids=[r["test_range"] for r in FIXTURE["runs"]])
def test_paper_scores_equal_the_releases_per_sample_evaluator(run, tmp_path):
    folder = write_folder(tmp_path, "quiz", FIXTURE["eval_py"], FIXTURE["items"])
    task = smith(folder, protocol="paper", test_range=run["test_range"])
    replies = {json.dumps(i["question"]) if isinstance(i["question"], dict) else i["question"]: r
               for i, r in zip(FIXTURE["items"], FIXTURE["replies"])}
    backend = ScriptedBackend(lambda prompt: replies[prompt])
    result = evaluate(task, backend, "unused")
    assert result["score"] == run["score"]  # bit-equal: (correct / total) * 100
    assert backend.prompts == run["prompts"]  # raw text, a dict question JSON-dumped
    decoding = backend.decodings[0]
    assert not decoding.chat_template and decoding.repetition_penalty == 1.0
    assert decoding.max_new_tokens == FIXTURE["sampling"]["max_tokens"] and FIXTURE["sampling"]["temperature"] == 0
    assert sum(i["score"] for i in result["items"]) == run["accuracy_summary"]["correct"]
    raised = [i for i in result["items"] if i["completion"] == "{not json"]
    assert all(i["score"] == 0 and "JSONDecodeError" in i["error"] for i in raised)


# -- evaluate runs apart, under a time limit ---------------------------------------------------------------------

HOSTILE_EVAL = '''import os, time


def evaluate(question, model_answer, reference, **extra):
    if model_answer == "hang":
        while True:
            time.sleep(1)
    if model_answer == "crash":
        os._exit(3)
    if model_answer == "raise":
        raise ValueError("cannot read " + model_answer)
    if model_answer == "text":
        return "1"
    if model_answer == "big":
        return 2.0
    return float(model_answer == reference)
'''


@pytest.mark.parametrize("protocol", ["a2rl", "paper"])
def test_each_evaluate_is_limited_and_a_failure_is_that_items_zero_with_its_reason(protocol, tmp_path):
    items = [{"question": f"q{i}", "answer": "ok"} for i in range(12)]
    task = smith(write_folder(tmp_path, "hostile", HOSTILE_EVAL, items), protocol=protocol, eval_timeout_s=2,
                 eval_size=6, final_size=0)
    rows = task.eval_rows()
    replies = ["ok", "hang", "ok", "crash", "ok", "raise", "text", "big", "nope"]
    scored = task.score_all([rows[i % len(rows)] for i in range(len(replies))], replies)
    by_reply = {r: s for r, s in zip(replies, scored)}
    assert [s["score"] for s in scored if s["completion"] == "ok"] == [1.0, 1.0, 1.0]  # the items after a crash too
    assert "ran past 2 s" in by_reply["hang"]["error"] and by_reply["hang"]["score"] == 0
    assert by_reply["crash"]["error"] == "the evaluator process died" and by_reply["crash"]["score"] == 0
    assert "ValueError: cannot read raise" in by_reply["raise"]["error"]
    assert "not a number" in by_reply["text"]["error"] and by_reply["text"]["score"] == 0
    assert by_reply["nope"] == {"id": by_reply["nope"]["id"], "completion": "nope", "score": 0.0}
    # a score outside [0, 1]: a2rl's protocol scores it 0 and says why; the release adds it up as it is
    assert by_reply["big"]["score"] == {"a2rl": 0.0, "paper": 2.0}[protocol]
    assert sorted(p.name for p in (tmp_path / "hostile").iterdir()) == ["config.yaml", "data", "description.md",
                                                                       "eval.py"]  # nothing written into it


# -- bad folders -------------------------------------------------------------------------------------------------

GOOD_EVAL = "def evaluate(question, model_answer, reference, **extra):\n    return float(model_answer == reference)\n"
ITEMS = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(500)]  # more than conf's 200 + 200 hidden
BAD = {
    "no_config": (None, GOOD_EVAL, ITEMS, "no config.yaml"),
    "no_name": ({"eval_mode": "per_sample"}, GOOD_EVAL, ITEMS, "config.yaml has no `name:`"),
    "unknown_mode": ({"name": "x", "eval_mode": "custom_model"}, GOOD_EVAL, ITEMS,
                     "eval_mode='custom_model' is unknown"),
    "opencompass_other": ({"name": "x", "eval_mode": "opencompass", "opencompass_dataset": "mmlu"}, GOOD_EVAL, ITEMS,
                          "opencompass_dataset='mmlu', which a2rl does not grade"),
    "no_eval_py": ({"name": "x"}, None, ITEMS, "no eval.py"),
    "no_evaluate": ({"name": "x"}, "def score(a, b):\n    return 1\n", ITEMS, "eval.py has no function evaluate("),
    "few_arguments": ({"name": "x"}, "def evaluate(question, model_answer):\n    return 1\n", ITEMS,
                      "takes fewer than three arguments"),
    "no_data": ({"name": "x"}, GOOD_EVAL, None, "no data:"),
    "no_answer": ({"name": "x"}, GOOD_EVAL, [{"question": "q"}], "train.jsonl line 1 has no `question` and `answer`"),
    "extra_not_taken": ({"name": "x"}, "def evaluate(question, model_answer, reference):\n    return 1.0\n",
                        [{"question": "q", "answer": "a", "topic": "t"}], "evaluate cannot take its other keys"),
    "score_above_one": ({"name": "x"}, "def evaluate(q, m, r, **e):\n    return 5\n", ITEMS, "5, outside [0, 1]"),
    "too_few_items": ({"name": "x"}, GOOD_EVAL, ITEMS[:40], "eval_size + final_size = 400 of its 40 items"),
    "score_not_a_number": ({"name": "x"}, "def evaluate(q, m, r, **e):\n    return 'yes'\n", ITEMS, "not a number"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_folder_is_refused_in_one_line_naming_it(case, tmp_path):
    config, eval_py, items, expected = BAD[case]
    folder = tmp_path / case
    folder.mkdir()
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
    if eval_py is not None:
        (folder / "eval.py").write_text(eval_py)
    if items is not None:
        (folder / "data").mkdir()
        (folder / "data" / "train.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    with pytest.raises(ConfigError) as e:
        smith(folder)
    message = str(e.value)
    assert message.startswith(f"benchmark folder {folder}: ") and expected in message and "\n" not in message


def dry_run(*overrides: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", "sweep=smoke", "sweep.agents=[copy_base]",
                           "logger=none", "dry_run=true", *overrides], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_dry_run_refuses_a_folder_whose_eval_py_has_no_evaluate(tmp_path):
    folder = write_folder(tmp_path, "noeval", "def score(q, a, r):\n    return 1\n", ITEMS[:5])
    proc = dry_run("task=smith", f"task.path={folder}", f"output_dir={tmp_path / 'out'}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"a2rl: config error: benchmark folder {folder}: eval.py has no function "
                                   "evaluate(question, model_answer, reference, **extra)")
    assert not (tmp_path / "out" / "ledger.sqlite").exists()


# -- discovery ---------------------------------------------------------------------------------------------------

def test_smith_dir_folders_are_tasks_the_dry_run_lists_and_a_sweep_names(tmp_path):
    root = tmp_path / "benchmarks"
    write_folder(root, "quiz", GOOD_EVAL, ITEMS, {"name": "quiz", "description": "a quiz"})
    write_folder(root, "_draft", GOOD_EVAL, ITEMS, {"name": "draft"})  # skipped, as the release skips it
    write_folder(root, "oc", GOOD_EVAL, ITEMS, {"name": "gsm", "eval_mode": "opencompass",
                                               "opencompass_dataset": "opencompass.configs.datasets.gsm8k."
                                                                      "gsm8k_gen_1d7fe4"})
    write_folder(root, "custom", GOOD_EVAL, ITEMS, {"name": "custom", "eval_mode": "custom_model"})
    proc = dry_run(f"smith_dir={root}", "sweep.tasks=[smith-quiz]", f"output_dir={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"smith_dir {root}: 2 benchmark folders as tasks: smith-gsm, smith-quiz" in proc.stdout
    assert "left out: eval_mode='custom_model' is unknown" in proc.stdout
    plan = [line.split() for line in proc.stdout.splitlines() if " copy_base " in line]
    assert [row[3:5] for row in plan] == [["smith-quiz", "a2rl"]], proc.stdout
    # the opencompass folder is a2rl's gsm8k task graded as the release grades it
    from orchestrator.sweep import smith_tasks

    gsm = smith_tasks(str(root))["smith-gsm"]
    assert gsm["cls"] == "gsm8k" and gsm["protocol"] == "paper" and gsm["name"] == "smith-gsm"
    proc = dry_run(f"smith_dir={root}", "sweep.tasks=[smith-nope]", f"output_dir={tmp_path / 'out'}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "smith-nope" in proc.stderr
    proc = dry_run(f"smith_dir={root}", "task=smith-quiz", f"output_dir={tmp_path / 'out'}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "sweep.tasks=[smith-quiz]" in proc.stderr


# -- the shipped twin --------------------------------------------------------------------------------------------

def test_the_twin_makes_its_data_offline_in_the_cache_and_hides_its_graded_items(tmp_path):
    task = smith(TWIN, tmp_path)
    assert task.missing_data() and "prepare" in task.missing_data()[0]
    task.fetch_data()  # prepare's call: download_data.py in a copy of the folder, no network
    assert not task.missing_data() and not (TWIN / "data").exists()
    train = {r["prompt"] for r in task.train_rows()}
    graded = [r["prompt"] for r in task.eval_rows() + task.final_rows()]
    assert len(train) == 1452 - 400 and len(graded) == 400 and not train & set(graded)
    assert task.score_all(task.eval_rows()[:3], [r["answer"] for r in task.eval_rows()[:3]])[0]["score"] == 1.0
    paper = smith(TWIN, tmp_path, protocol="paper")
    assert len(paper.eval_rows()) == 1452 and paper.messages(paper.eval_rows()[0]) == paper.eval_rows()[0]["prompt"]


def test_download_data_runs_at_prepare_and_a_gpu_sweep_refuses_to_start_before(cache_dir, tmp_path):
    import io
    import shutil

    from orchestrator.artefacts import check_artefacts
    from orchestrator.prepare import FETCHED, prepare_here
    from orchestrator.sweep import expand
    from tests.conftest import compose

    folder = tmp_path / "arith"
    shutil.copytree(TWIN, folder)
    with (folder / "download_data.py").open("a") as f:
        f.write(f"# {tmp_path.name}\n")  # a folder of its own: its data is not made yet in the session's cache
    overrides = ["sweep=smoke", "sweep.agents=[copy_base]", "task=smith", f"task.path={folder}",
                 f"cache_dir={cache_dir}", "logger=none", "sweep.budget.gpus=1"]
    cells = expand(compose(overrides))
    with pytest.raises(ConfigError, match="data of task smith is not on this machine, and this sweep reserves GPUs"):
        check_artefacts(cells, cache_dir, emulated=False, allow_fetch_in_cells=False, out=io.StringIO())
    rows = prepare_here(compose(overrides), io.StringIO())
    [data] = [r for r in rows if r.artefact == "data of task smith"]
    assert data.status == FETCHED, data
    check_artefacts(cells, cache_dir, emulated=False, allow_fetch_in_cells=False, out=io.StringIO())
    assert not (folder / "data").exists()  # made in the cache's copy of the folder


def test_an_eval_file_the_folder_provides_holds_the_graded_items(tmp_path):
    folder = write_folder(tmp_path, "with_test", GOOD_EVAL, ITEMS[:50])
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(i) + "\n" for i in ITEMS[100:130]))
    task = smith(folder, eval_file="test.jsonl", eval_size=25, final_size=5)
    assert [r["item"] for r in task.train_rows()] == ITEMS[:50]
    graded = [r["item"] for r in task.eval_rows() + task.final_rows()]
    assert len(task.eval_rows()) == 25 and len(task.final_rows()) == 5
    assert sorted(graded, key=ITEMS.index) == ITEMS[100:130]
    with pytest.raises(ConfigError, match="no data: .*nope.jsonl does not exist"):
        smith(folder, eval_file="nope.jsonl")
    with pytest.raises(ConfigError, match=r"test_range=\[60:\] of its 50 items is empty"):
        smith(folder, protocol="paper", test_range="[60:]")


# -- a folder nobody on the team wrote, end to end with copy_base --------------------------------------------------

USER_EVAL = '''"""Grades a reply by kind: `length` items credit any reply (up to 40 characters), others exact."""


def evaluate(question, model_answer, reference, kind="exact", **extra):
    if kind == "length":
        return min(len(model_answer), 40) / 40 * extra["weight"]
    return 1 if model_answer.strip() == str(reference) else 0
'''


def user_items() -> list[dict]:
    items = []
    for i in range(40):
        if i % 2:
            items.append({"question": {"text": f"Describe the number {i}.", "id": i}, "answer": {"n": i},
                          "kind": "length", "weight": 0.5 + (i % 3) / 4})
        else:
            items.append({"question": f"What is {i} plus one?", "answer": str(i + 1), "topic": "count"})
    return items


def test_a_users_folder_runs_with_copy_base_under_both_protocols(run_sweep, cache_dir, tmp_path):
    folder = write_folder(tmp_path, "lab_quiz", USER_EVAL, user_items(), {"name": "lab_quiz",
                                                                           "description": "a lab's quiz"})
    common = ["sweep=smoke", "sweep.agents=[copy_base]", "sweep.budget.wall_time_s=600",
              "sweep.budget.max_submissions=1", "task=smith", f"task.path={folder}"]

    # a2rl's protocol: the workspace's data holds none of the graded items
    _, text, out = run_sweep([*common, "task.eval_size=8", "task.final_size=4"], tmp_path / "a2rl")
    rows = list(Ledger(out / "ledger.sqlite").cells().values())
    assert len(rows) == 1, (rows, text)
    cells_ended(rows)
    task = smith(folder, eval_size=8, final_size=4)
    graded = {json.dumps(r["item"]["question"]) for r in task.eval_rows() + task.final_rows()}
    [data] = glob.glob(str(out / "workspaces" / "*" / "data" / "train.jsonl"))
    given = [json.loads(line) for line in Path(data).read_text().splitlines()]
    assert len(given) == 40 - 12 and not {json.dumps(r["item"]["question"]) for r in given} & graded
    assert rows[0]["baseline_score"] is not None

    # the paper's: the baseline is the release's per-sample formula on the folder's train.jsonl[test_range]
    _, text, out = run_sweep([*common, "task.protocol=paper", "task.test_range='[:4]'"], tmp_path / "paper")
    rows = list(Ledger(out / "ledger.sqlite").cells().values())
    assert len(rows) == 1, (rows, text)
    cells_ended(rows)
    paper = smith(folder, protocol="paper", test_range="[:4]")
    details = [json.loads(Path(p).read_text())["items"] for p in glob.glob(str(cache_dir / "grading" / "**" /
                                                                             "*.items.json"), recursive=True)]
    [items] = [d for d in details if [i["id"] for i in d] == [r["id"] for r in paper.eval_rows()]]
    namespace: dict = {}
    exec(USER_EVAL, namespace)  # the folder's evaluate, called as the release calls it, in this process
    correct = 0.0
    for item, got in zip(user_items()[:4], items):
        extra = {k: v for k, v in item.items() if k not in ("question", "answer")}
        correct += namespace["evaluate"](item["question"], got["completion"], item["answer"], **extra)
    assert rows[0]["baseline_score"] == (correct / 4) * 100
    assert correct > 0  # the `length` items' credit needs their extra keys (kind, weight) to reach evaluate


def test_a_paper_cells_workspace_is_the_releases_for_a_folder(cache_dir, tmp_path):
    """The release's setup_workspace for a smith benchmark: data (download_data's copy of train.jsonl), the folder's
    description.md, the release's instructions.md, the folder's expose_files; TASK is smith-<name>."""
    from types import SimpleNamespace

    from contracts.release import release_root
    from contracts.task_spec import TaskSpec
    from contracts.task import cell_task
    from orchestrator.agent_sides.release import benchmark, materialise_release, release_data

    folder = write_folder(tmp_path, "lab_quiz", USER_EVAL, user_items(),
                          {"name": "lab_quiz", "expose_files": ["eval.py", "missing.txt"]})
    config = {**yaml.safe_load((ROOT / "conf" / "task" / "smith.yaml").read_text()), "path": str(folder),
              "protocol": "paper"}
    spec = TaskSpec.from_config(config)
    assert benchmark(spec) == "smith-lab_quiz"
    cell = SimpleNamespace(task=spec, task_name=spec.name, budget=SimpleNamespace(wall_time_s=60))
    base_model = tmp_path / "model"
    base_model.mkdir()
    release = release_root(cache_dir)
    task = cell_task(spec, cache_dir)  # what a cell reads of its task, once
    workspace = materialise_release(tmp_path / "ws", cell, task, data_dir=release_data(task.task, cache_dir),
                                    base_model_dir=base_model, release_dir=release, started=0)
    given = [json.loads(line) for line in (workspace / "data" / "train.jsonl").read_text().splitlines()]
    assert given == user_items()
    assert (workspace / "description.md").resolve() == folder / "description.md"
    assert (workspace / "eval.py").resolve() == folder / "eval.py" and not (workspace / "missing.txt").exists()
    assert (workspace / "instructions.md").resolve() == release / "core" / "instructions.md"
