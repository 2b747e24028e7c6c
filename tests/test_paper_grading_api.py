"""The original benchmark's grading API on a2rl's grader (runs registered with api="release"), over real HTTP on
loopback, against the answers of the original's own server (tests/fixtures/parity/original_server.json, made by
make_original_server.py from rdagent 1.0.0): the same scripted calls give the same statuses, keys in the same order,
the same ids, totals, paths, error texts, the cached answer, and the same files in the workspace."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from contracts.records import read_jsonl
from contracts.runs import RunRegistration
from evaluators.submissions import cache_key
from evaluators.workspace_files import write_json_file
from tests.conftest import ROOT
from tests.test_grading import Run, grader  # noqa: F401  (the same grader the other grading tests use)

ORIGINAL = json.loads((ROOT / "tests/fixtures/parity/original_server.json").read_text())
SETUP = ORIGINAL["setup"]
GPUS = tuple(SETUP["cuda_visible_devices"].split(","))
PAPER_KEYS = ("submission_id", "timestamp", "model_path", "score", "baseline_score", "improvement", "elapsed_seconds",
              "error", "best", "total_submissions")


class PaperRun:
    """A cell's run registered with the original's API, its workspace holding the folders the sequence submits."""

    def __init__(self, grader, root: Path, max_submissions: int = 20):  # noqa: F811
        self.grader, self.root = grader, root
        self.workspace = root / "ws"
        for name in ("v1", "v2", "v3"):  # copies of the base: a2rl scores them from its cache (fast)
            shutil.copytree(grader["base"], self.workspace / "output" / name)
        broken = self.workspace / "output" / "broken"  # loads, but its evaluation fails (its template raises)
        shutil.copytree(grader["base"], broken)
        config = json.loads((broken / "tokenizer_config.json").read_text())
        config["chat_template"] = "{{ raise_exception('this template is broken') }}"
        (broken / "tokenizer_config.json").write_text(json.dumps(config))
        (broken / "chat_template.jinja").unlink(missing_ok=True)
        (self.workspace / "code").mkdir()
        shutil.copytree(grader["base"], root / "outside")
        self.records = root / "records"
        self.records.mkdir()
        self.token = secrets.token_urlsafe(16)
        now = time.time()
        self.budget_started_at = now - 5  # (not started_at: /time must take this one)
        grader["handle"].register_run.remote(self.token, RunRegistration(
            cell_id=root.name, workspace=str(self.workspace), records_dir=str(self.records),
            code_repo=str(root / "code.git"), started_at=now, deadline=now + 600, max_submissions=max_submissions,
            api="release", gpus=GPUS, budget_started_at=self.budget_started_at, timeout_s=SETUP["timeout_s"])).result()

    def call(self, method: str, path: str, body: dict | None = None, token: str | None = "") -> httpx.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {token or self.token}"}
        return httpx.request(method, f"{self.grader['url']}{path}", json=body, headers=headers, timeout=300)

    def play(self, step: dict) -> httpx.Response:
        if step["name"] == "same_path_rewritten":  # rewritten in place: its weights get a newer mtime
            weights = next((self.workspace / "output" / "v1").glob("*.safetensors"))
            later = weights.stat().st_mtime + 10
            os.utime(weights, (later, later))
        return self.call(step["method"], step["path"], step["body"])


@pytest.fixture(scope="module")
def played(grader, tmp_path_factory):  # noqa: F811
    """The fixture's sequence of calls, played on a2rl's grader: [(step, answer)]."""
    run = PaperRun(grader, tmp_path_factory.mktemp("paper"))
    return run, [(step, run.play(step)) for step in ORIGINAL["steps"]]


def entry_of(answer: dict) -> dict:
    return {k: answer[k] for k in PAPER_KEYS if k in answer and k not in ("best", "total_submissions")}


def test_the_answers_have_the_originals_statuses_keys_and_values(played):
    run, steps = played
    base = run.grader["handle"].ensure_baseline.remote().result()["baseline_score"]
    entries: list[dict] = []
    for step, r in steps:
        original, ours = step["answer"], r.json()
        assert r.status_code == step["status"], (step["name"], r.text)
        assert list(ours)[:len(original)] == list(original), (step["name"], list(ours), list(original))
        if step["path"] != "/submit":
            continue
        if r.status_code == 400:  # the original's error text, a2rl's reason after it
            assert ours["error"] == original["error"], (step["name"], ours)
            assert ours.get("available_gpus") == original.get("available_gpus")
            continue
        extra = [k for k in ours if k not in original]
        assert not set(extra) & set(PAPER_KEYS), extra  # a2rl's keys never take one of the original's
        for key in ("submission_id", "total_submissions", "model_path"):
            assert ours[key] == original[key], (step["name"], key, ours[key])
        assert ("error" in ours) == ("error" in original), (step["name"], ours)
        if "error" in ours:  # a failed evaluation: the original's 0.0 with its error (a2rl's reason)
            assert ours["score"] == 0.0 and "evaluation failed" in ours["error"]
        assert ours["baseline_score"] == base
        assert ours["improvement"] == round(ours["score"] - base, 6)
        assert isinstance(ours["elapsed_seconds"], float) and ours["elapsed_seconds"] >= 0
        datetime.fromisoformat(ours["timestamp"])
        assert list(ours["best"]) == list(original["best"])  # as sent: the original's keys sorted
        if step["name"] != "same_path_again":
            entries.append(entry_of(ours))
        assert ours["best"] == max(entries, key=lambda e: e["score"])  # the first highest, as the original's max()
        assert ("evaluated_on" in ours) == ("gpu" in step["body"])  # its gpu was asked for: graded on the grader's


def test_an_unchanged_resubmission_is_answered_from_the_cache_and_not_counted(played):
    run, steps = played
    answers = {step["name"]: r.json() for step, r in steps}
    original = {step["name"]: step["answer"] for step in ORIGINAL["steps"]}
    assert original["same_path_again"] == original["submit"]
    assert answers["same_path_again"] == answers["submit"]  # the same answer object, nothing new
    assert answers["failed_evaluation_again"]["submission_id"] == answers["failed_evaluation"]["submission_id"] + 1
    records = read_jsonl(run.records / "submissions.jsonl")
    assert [r["submission_id"] for r in records] == [1, 2, 3, 4, 5, 6]  # the cached one is not recorded
    assert [r["model_path"] for r in records] == [s["model_path"] for s in ORIGINAL["workspace_files"]["scores.json"]]
    assert records[2]["gpu"] == "1" and all("gpu" not in r for i, r in enumerate(records) if i != 2)
    assert records[3]["score"] is None and records[3]["error"]  # a2rl's record of a failed evaluation stands


def test_time_and_health_as_the_original_answers_them(played):
    run, steps = played
    answers = {step["name"]: r.json() for step, r in steps}
    t = answers["time"]
    assert t["start_time"] == int(run.budget_started_at) and t["timeout_s"] == SETUP["timeout_s"]
    assert t["end_time"] is None and isinstance(t["last_submit_time"], int)
    assert t["remaining"] == max(t["timeout_s"] - (t["now"] - t["start_time"]), 0)
    assert abs(t["now"] - time.time()) < 60
    h = answers["health"]
    assert h["status"] == "ok" and h["task"] == "arithmetic" and h["workspace"] == str(run.workspace)
    assert h["available_gpus"] == ORIGINAL["steps"][-1]["answer"]["available_gpus"] == sorted(GPUS, key=int)
    assert h["baseline_score"] is not None  # a2rl's, after the original's keys
    # a2rl's answers for callers without a paper token: unchanged
    assert list(run.call("GET", "/health", token=None).json()) == ["status", "task", "baseline_score"]
    assert run.call("GET", "/time", token=None).status_code == 401
    assert run.call("GET", "/time", token="not-a-token").status_code == 401


def test_the_workspace_files_are_the_originals(played):
    run, steps = played
    files = ORIGINAL["workspace_files"]
    scores = json.loads((run.workspace / "scores.json").read_text())
    assert [list(e) for e in scores] == [list(e) for e in files["scores.json"]]  # its order, not sorted
    answered = [entry_of(r.json()) for step, r in steps if r.status_code == 200 and "submission_id" in r.json()
                and step["name"] != "same_path_again"]
    assert scores == [{k: a[k] for k in e} for a, e in zip(answered, scores)]
    meta = json.loads((run.workspace / "run_meta.json").read_text())
    assert list(meta) == list(files["run_meta.json"])
    assert meta == {k: v for k, v in run.call("GET", "/time").json().items() if k in meta}
    assert (run.workspace / "scores.json").read_text() == json.dumps(scores, indent=2, ensure_ascii=False)
    assert (run.workspace / "scores.json").stat().st_mode & 0o777 == 0o644


def test_the_cache_and_the_list_survive_a_registry_restart(played):
    import ray

    from contracts.runs import registry

    run, steps = played
    first = steps[0][1].json()
    before = run.call("GET", "/time").json()["last_submit_time"]
    ray.kill(registry(), no_restart=False)  # Ray restarts it; its journal brings the run back
    assert run.call("POST", "/submit", {"model_path": "output/v1"}).json()["submission_id"] == 6  # (rewritten)
    assert run.call("GET", "/time").json()["last_submit_time"] == before
    v2 = run.call("POST", "/submit", {"model_path": "output/v2"}).json()
    assert v2 == next(r.json() for step, r in steps if step["name"] == "another_path")
    assert first["submission_id"] == 1 and len(read_jsonl(run.records / "submissions.jsonl")) == 6


def test_planted_links_and_fifos_at_the_files_names_are_replaced_not_followed(grader, tmp_path):  # noqa: F811
    run = PaperRun(grader, tmp_path)
    outside = tmp_path / "precious.json"
    outside.write_text("not the grader's\n")
    (run.workspace / "scores.json").symlink_to(outside)
    os.mkfifo(run.workspace / "run_meta.json")
    r = run.call("POST", "/submit", {"model_path": "output/v1"})  # a blocking write would time this out
    assert r.status_code == 200, r.text
    assert outside.read_text() == "not the grader's\n"
    for name in ("scores.json", "run_meta.json"):
        assert (run.workspace / name).is_file() and not (run.workspace / name).is_symlink()
    assert json.loads((run.workspace / "scores.json").read_text())[0]["submission_id"] == 1
    assert json.loads((run.workspace / "run_meta.json").read_text())["last_submit_time"] is not None
    assert not list(run.workspace.glob(".*.tmp"))


def test_a2rl_runs_answer_as_before(grader, tmp_path):  # noqa: F811
    run = Run(grader, tmp_path)
    r = run.submit(run.copy_base())
    assert r.status_code == 200
    answer = r.json()
    assert list(answer)[:4] == ["submission_id", "t", "received_at", "model_path"]
    assert isinstance(answer["best"], float) and "timestamp" not in answer and "evaluated_on" not in answer
    assert run.submit("").json()["code"] == "bad_request"
    h = httpx.get(f"{grader['url']}/health", headers={"Authorization": f"Bearer {run.token}"}, timeout=30).json()
    assert list(h) == ["status", "task", "baseline_score"]
    t = httpx.get(f"{grader['url']}/time", headers={"Authorization": f"Bearer {run.token}"}, timeout=30)
    assert t.status_code == 404
    assert not (run.workspace / "scores.json").exists() and not (run.workspace / "run_meta.json").exists()


# -- the pieces, without the service --------------------------------------------------------------------------------

def test_the_writer_replaces_what_is_planted_and_leaves_nothing_behind(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("keep\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.json").symlink_to(outside)
    os.mkfifo(ws / "b.json")
    (ws / "c.json").mkdir()
    done = threading.Event()

    def write():
        write_json_file(ws, "a.json", {"k": "ü"})
        write_json_file(ws, "b.json", [1])
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(10), "the writer blocked on a FIFO"
    assert outside.read_text() == "keep\n" and (ws / "a.json").read_text() == '{\n  "k": "ü"\n}'
    assert json.loads((ws / "b.json").read_text()) == [1]
    with pytest.raises(OSError):
        write_json_file(ws, "c.json", {})  # a folder there: refused, not written into
    (tmp_path / "link").symlink_to(ws)
    with pytest.raises(OSError):
        write_json_file(tmp_path / "link", "d.json", {})  # the folder itself through a link: refused
    assert sorted(p.name for p in ws.iterdir()) == ["a.json", "b.json", "c.json"]


def test_the_cache_key_is_the_originals_and_reads_only_inside_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    model = ws / "output" / "m"
    (model / "sub").mkdir(parents=True)
    for name, mtime in (("config.json", 100.0), ("sub/model.safetensors", 300.0), ("notes.txt", 900.0)):
        (model / name).write_text("x")
        os.utime(model / name, (mtime, mtime))
    assert cache_key(ws, model, 100) == f"{model}@300.0"  # the newest .safetensors/.bin/.json, its path
    outside = tmp_path / "far.bin"
    outside.write_text("x")
    os.utime(outside, (5000.0, 5000.0))
    (model / "far.bin").symlink_to(outside)  # leads out: not read
    os.mkfifo(model / "pipe.json")  # stat'ed, never opened
    (ws / "output" / "inner.bin").write_text("x")
    os.utime(ws / "output" / "inner.bin", (400.0, 400.0))
    (model / "inner.bin").symlink_to("../inner.bin")  # inside: followed, as the original does (and the copy)
    assert cache_key(ws, model, 100) == f"{model}@400.0"
    os.utime(model / "config.json", (700.0, 700.0))  # rewritten: a new key
    assert cache_key(ws, model, 100) == f"{model}@700.0"
    assert cache_key(ws, model, 3) is None  # past the copy's file limit: no key (the copy refuses it)


def test_a_misspelt_api_is_refused_at_registration():
    with pytest.raises(ValueError, match="api='Paper'"):
        RunRegistration(cell_id="c", workspace="w", records_dir="r", code_repo="g", started_at=0.0, deadline=1.0,
                        max_submissions=1, api="Paper")
