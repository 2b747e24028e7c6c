"""The contamination check: hidden eval items found in what an agent wrote (n-gram overlap), in a real sweep an agent
that plants them is flagged and one that trains on its train data is not; a near copy of the base model is flagged
like an exact one."""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from contracts.records import SUBMISSIONS, read_jsonl
from contracts.specs import ConfigError, to_plain
from contracts.task import load_task
from contracts.task_spec import ContaminationSettings
from evaluators.contamination import HiddenItems, phrase, relative_distance
from orchestrator.ledger import Ledger
from tests.conftest import ROOT, compose

SETTINGS = ContaminationSettings(ngram=8, threshold=0.5, max_file_mb=1, near_copy_tol=1e-6, known_closer_ratio=0.5,
                                 max_files=1000, max_total_mb=10, max_s=60)
LONG = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
        "clips did Natalia sell altogether in April and May?")


def digests(workspace, *paths) -> dict[str, str]:
    return {p: hashlib.sha256((workspace / p).read_bytes()).hexdigest() for p in paths}


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
    (tmp_path / "data" / "train.jsonl").write_text('{"prompt": "What is 2 + 2?"}\n')
    (tmp_path / "instructions.md").write_text("Solve it.")
    given = digests(tmp_path, "data/train.jsonl", "instructions.md")
    (tmp_path / "instructions.md").write_text("Solve it. What is 7 * 3?")  # a given file the agent changed
    (tmp_path / "elsewhere.txt").write_text(LONG)
    (tmp_path / "link.txt").symlink_to(tmp_path / "elsewhere.txt")  # links are not followed
    found = {(m["file"], m["item"]) for m in hidden.scan(tmp_path, given)}
    assert found == {("code/data.py", "long"), ("output/mine.jsonl", "short"), ("output/arrow", "long"),
                     ("elsewhere.txt", "long"), ("instructions.md", "short")}


# A task whose instructions show a hidden item (arithmetic's "What is 7 * 3?" before its hidden split left it out),
# whose train split shares most of a long hidden item's words (a templated generator), and an item it never shows.
NEAR = LONG.replace("May", "June")  # a train row: every 8-gram of LONG but the 7 that hold "May"
PLANTED_ITEM = ("A baker fills 12 trays with 30 rolls each, sells two thirds of them by noon and gives 15 away. How "
                "many rolls are left at the end of the day?")
INSTRUCTIONS = ('# Task: arithmetic\n\nSingle-digit arithmetic, phrased one of four ways ("What is 7 * 3?", '
                '"Solve 4 - 9.", "Compute 2 + 8.", "Evaluate: 6 * 0."). Reply with the number.\n\n## Data\n\n...\n')


def cli_home(home, prompt: str, tool_output: str):
    """A CLI's state in its HOME as OpenCode and Codex keep it: a SQLite database in WAL mode whose rows are JSON
    (the open connection is returned: while the CLI runs, its pages are in the -wal file), and a Codex rollout file
    of JSON lines whose tool outputs are JSON again."""
    import sqlite3

    store = home / ".local" / "share" / "opencode"
    store.mkdir(parents=True)
    db = sqlite3.connect(store / "opencode.db")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE part (id TEXT PRIMARY KEY, session_id TEXT, data TEXT)")
    db.executemany("INSERT INTO part VALUES (?, 'ses_1', ?)", [
        ("prt_1", json.dumps({"type": "text", "text": prompt})),
        ("prt_2", json.dumps({"type": "tool", "tool": "bash", "state": {
            "status": "completed", "input": {"command": "head data/train.jsonl"}, "output": tool_output}}))])
    db.commit()
    sessions = home / ".codex" / "sessions" / "2026" / "11" / "25"
    sessions.mkdir(parents=True)
    (sessions / "rollout-2026-11-25T18-00-00-1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in [
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": prompt}]}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1",
                                              "output": json.dumps({"output": tool_output, "exit_code": 0})}}]))
    return db


def test_given_text_a_cli_keeps_in_its_home_is_not_evidence_what_it_found_is(tmp_path):
    train = json.dumps({"prompt": NEAR, "completion": "72"}) + "\n"
    hidden = HiddenItems([("example", "What is 7 * 3?"), ("long", LONG), ("planted", PLANTED_ITEM)], SETTINGS,
                         given_texts=[INSTRUCTIONS, train])
    assert hidden.exposed == ["example"]  # shown whole: never evidence (no shipped task does this)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text(train)
    (tmp_path / "instructions.md").write_text(INSTRUCTIONS)
    given = digests(tmp_path, "data/train.jsonl", "instructions.md")
    prompt = "You are an autonomous agent.\n\n" + INSTRUCTIONS
    db = cli_home(tmp_path / ".home", prompt, train)
    try:
        assert (tmp_path / ".home/.local/share/opencode/opencode.db-wal").stat().st_size > 0
        assert hidden.scan(tmp_path, given) == []
        db.execute("INSERT INTO part VALUES ('prt_3', 'ses_1', ?)", (json.dumps({"output": PLANTED_ITEM}),))
        db.commit()
        with open(next((tmp_path / ".home/.codex/sessions").rglob("*.jsonl")), "a") as f:
            f.write(json.dumps({"payload": {"output": json.dumps({"output": f"{LONG}\n{PLANTED_ITEM}"})}}) + "\n")
        found = {(m["file"], m["item"]) for m in hidden.scan(tmp_path, given)}
    finally:
        db.close()
    rollout = ".home/.codex/sessions/2026/11/25/rollout-2026-11-25T18-00-00-1.jsonl"
    assert found == {(".home/.local/share/opencode/opencode.db-wal", "planted"), (rollout, "planted"),
                     (rollout, "long")}  # LONG whole holds the 7 n-grams no given text explains


def test_text_is_read_through_its_json_escapes():
    text = 'Say "hi"\nthen\tstop \u00e9t\u00e9 \U0001f600'
    once, twice = json.dumps(text), json.dumps(json.dumps({"t": text}))
    assert phrase(text) in phrase(once) and phrase(text) in phrase(twice)
    assert phrase("What is 7 * 3?") in phrase("Q: what  is 7*3 ?") and phrase("7 * 3") not in phrase("7 * 31")


def test_relative_distance_tells_a_nudged_copy_from_a_trained_model():
    import torch

    torch.manual_seed(0)
    base = {"a": torch.randn(256, 256), "b": torch.randn(256)}
    nudged = {k: v.clone() for k, v in base.items()}
    nudged["a"][0, 0] += 1e-6
    trained = {k: v + 1e-4 * torch.randn_like(v) for k, v in base.items()}  # one small optimiser step everywhere
    assert relative_distance(nudged, base) <= SETTINGS.near_copy_tol < relative_distance(trained, base)
    assert relative_distance({"a": base["a"]}, base) == float("inf")


# A CLI-shaped agent: it keeps its prompt (instructions.md) and what its commands printed (train rows, a file its
# code/ came with) in its HOME as OpenCode does (SQLite, WAL mode, JSON rows) and as Codex does (JSONL rollouts, tool
# outputs JSON in JSON), trains on its train data, submits, and exits with its database open (the pages stay in the
# -wal file, as a CLI killed at its deadline leaves them). The planting one also writes what it "found": items it
# decodes (no text a2rl gave holds them).
AGENT = """
import base64, json, os, shutil, sqlite3, urllib.request
home, run = os.environ["HOME"], json.load(open("run.json"))
prompt = "You are an autonomous agent working alone.\\n\\n" + open("instructions.md").read()
printed = "".join(open("data/train.jsonl").readlines()[:20]) + open("code/examples.jsonl").read()
if os.path.exists("code/found.b64"):
    printed += base64.b64decode(open("code/found.b64").read()).decode()
os.makedirs(home + "/.local/share/opencode")
db = sqlite3.connect(home + "/.local/share/opencode/opencode.db")
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE part (id TEXT PRIMARY KEY, data TEXT)")
tool = {"type": "tool", "state": {"input": {"command": "head data/train.jsonl"}, "output": printed}}
db.executemany("INSERT INTO part VALUES (?, ?)", [("prt_1", json.dumps({"type": "text", "text": prompt})),
                                                  ("prt_2", json.dumps(tool))])
db.commit()
os.makedirs(home + "/.codex/sessions/2026/11/25")
with open(home + "/.codex/sessions/2026/11/25/rollout-1.jsonl", "w") as f:
    f.write(json.dumps({"payload": {"type": "message", "role": "user", "content": [{"text": prompt}]}}) + "\\n")
    output = json.dumps({"output": printed})
    f.write(json.dumps({"payload": {"type": "function_call_output", "output": output}}) + "\\n")
shutil.copytree("model", "output/m")
shutil.copy("data/train.jsonl", "output/mydata.jsonl")
if os.path.exists("code/found.b64"):
    open("output/mydata.jsonl", "a").write(printed)
request = urllib.request.Request(run["grading_url"] + "/submit", json.dumps({"model_path": "output/m"}).encode(),
                                 {"Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"})
print("ANSWER", urllib.request.urlopen(request, timeout=600).read().decode(), flush=True)
os._exit(0)
"""
STORES = {".home/.local/share/opencode/opencode.db-wal", ".home/.codex/sessions/2026/11/25/rollout-1.jsonl"}


@pytest.mark.parametrize("plants", [True, False], ids=["plants", "clean"])
def test_a_cli_keeping_given_text_in_its_home_is_not_flagged_one_that_found_items_is(run_sweep, cache_dir,
                                                                                    tmp_path, plants):
    task = load_task(to_plain(compose(["task=arithmetic"]).task), cache_dir)  # the grading side's eval split
    rows = [{"prompt": row["prompt"], "completion": row["answer"]} for row in task.final_rows()[:20]]
    lines = ["".join(json.dumps(r) + "\n" for r in part) for part in (rows[:10], rows[10:])]
    # text a2rl gives this agent (its code/ files) that happens to hold hidden items, as the arithmetic
    # instructions' "What is 7 * 3?" did: given, wherever it is copied
    (tmp_path / "examples.jsonl").write_text(lines[1])
    (tmp_path / "found.b64").write_text(base64.b64encode(lines[0].encode()).decode())
    (tmp_path / "agent.py").write_text(AGENT)
    files = [tmp_path / "agent.py", tmp_path / "examples.jsonl"] + ([tmp_path / "found.b64"] if plants else [])
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
    workspace = Path(outcome["workspace"])
    assert all((workspace / store).stat().st_size > 0 for store in STORES)
    assert row["status"] == "completed" and row["contaminated"] == int(plants), (row, outcome["contamination"])
    assert outcome["contaminated"] is plants
    if plants:
        assert "contamination" in record["flags"]
        for found in (record["contamination"], outcome["contamination"]):
            assert {(m["file"], m["item"]) for m in found} >= {
                (f, "arithmetic-final-0") for f in ["output/mydata.jsonl", *STORES]}, found
            assert {m["file"] for m in found} == {"output/mydata.jsonl", *STORES}  # not code/examples.jsonl
            assert {m["item"] for m in found} <= {f"arithmetic-final-{i}" for i in range(10)}
        assert "contaminated x1" in printed
    else:
        assert "contamination" not in record["flags"] and outcome["contamination"] == []


TASKS = sorted(p.stem for p in (ROOT / "conf" / "task").glob("*.yaml"))


@pytest.mark.parametrize("name", TASKS)
def test_no_task_shows_agents_a_hidden_item(name, cache_dir):
    """What every agent of the task is given (instructions with their examples, train split, evaluator files)
    holds no hidden eval or final item, whole or as the scan would find it: its copies would be false alarms, and
    the item no longer hidden."""
    cfg = to_plain(compose([f"task={name}"]).task)
    if cfg["level"] == 3:
        pytest.skip(f"{name}: its hidden items are instances of an environment, not texts the scan looks for")
    try:
        task = load_task(cfg, cache_dir)
    except ConfigError as e:  # e.g. an LLM judge that needs a key
        pytest.skip(f"{name} cannot be built here: {e}")
    if missing := task.missing_data():
        pytest.skip(f"{name} cannot be built here: {missing[0]}")
    hidden = task.hidden_texts(task.eval_rows() + task.final_rows())
    assert hidden, name
    given = task.given_texts()
    shown = {file: phrase(text) for file, text in given.items()}
    assert [(item, file) for item, text in hidden for file in shown if phrase(text) in shown[file]] == []
    # nor in its context: the windows around each n-gram (a train split may hold those of an item that is near a
    # train row: gsm_symbolic's templates draw names and numbers from small pools)
    shown_text = [text for file, text in given.items() if file != "train.jsonl"]
    assert HiddenItems(hidden, SETTINGS, shown_text).exposed == []


@pytest.mark.parametrize("salt", ["a", "b"])
def test_arithmetic_leaves_its_instructions_examples_out_of_its_hidden_split(salt, cache_dir):
    """Under secrets that would draw them, the description's example questions are never hidden items."""
    task = load_task(to_plain(compose(["task=arithmetic", f"task.eval_salt={salt}"]).task), cache_dir)
    examples = ["What is 7 * 3?", "Solve 4 - 9.", "Compute 2 + 8.", "Evaluate: 6 * 0."]
    assert all(phrase(e) in phrase(task.instructions()) for e in examples)
    hidden = {row["prompt"] for row in task.eval_rows() + task.final_rows()}
    assert len(hidden) == 400 and not hidden & set(examples)
