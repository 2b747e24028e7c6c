"""The grading service over real HTTP on loopback: bad inputs, durability, cache, copy detection, concurrency."""
from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from contracts.runs import RunRegistration
from contracts.records import read_jsonl
from contracts.specs import to_plain
from contracts.task_spec import TaskSpec
from tests.conftest import compose


@pytest.fixture(scope="module")
def grader(ray_cluster, cache_dir, grading_port):
    from ray import serve

    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name, deploy

    task = to_plain(compose(["task=arithmetic"]).task)
    # the same grader the sweeps in other tests use
    deploy(TaskSpec.from_config(task), str(cache_dir), emulated_gpus=True)
    handle = serve.get_app_handle(app_name("arithmetic"))
    base = resolve_base_model(task["base_model"], cache_dir / "models")
    return {"url": f"http://127.0.0.1:{grading_port}/arithmetic", "handle": handle, "base": base, "task": task}


class Run:
    """A registered run with its own workspace and records folder, as a cell would have."""

    def __init__(self, grader, root: Path, max_submissions=5, wall_time_s=600):
        self.grader = grader
        self.workspace = root / "ws"
        (self.workspace / "output").mkdir(parents=True)
        (self.workspace / "code").mkdir()
        (self.workspace / "code" / "train.py").write_text("print('training')\n")
        self.records = root / "records"
        self.records.mkdir()
        self.token = secrets.token_urlsafe(16)
        now = time.time()
        grader["handle"].register_run.remote(self.token, RunRegistration(
            cell_id=root.name, workspace=str(self.workspace), records_dir=str(self.records),
            code_repo=str(root / "code.git"), started_at=now, deadline=now + wall_time_s,
            max_submissions=max_submissions)).result()

    def submit(self, model_path, token=None, timeout=300, **fields):
        return httpx.post(f"{self.grader['url']}/submit", json={"model_path": model_path, **fields}, timeout=timeout,
                          headers={"Authorization": f"Bearer {token or self.token}"})

    def status(self):
        return httpx.get(f"{self.grader['url']}/status", headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def copy_base(self, name="copy") -> str:
        shutil.copytree(self.grader["base"], self.workspace / "output" / name)
        return f"output/{name}"

    def recorded(self) -> list[dict]:
        return read_jsonl(self.records / "submissions.jsonl")


def test_health(grader):
    r = httpx.get(f"{grader['url']}/health", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_tokens_are_required_and_checked(grader, tmp_path):
    run = Run(grader, tmp_path)
    path = run.copy_base()
    r = httpx.post(f"{grader['url']}/submit", json={"model_path": path}, timeout=30)
    assert r.status_code == 401 and r.json()["code"] == "missing_token"
    r = run.submit(path, token="not-a-token")
    assert r.status_code == 401 and r.json() == {"error": "unknown or expired run token", "code": "invalid_token"}
    assert run.recorded() == []


def test_paths_must_stay_inside_the_workspace(grader, tmp_path):
    run = Run(grader, tmp_path / "a")
    outside = tmp_path / "outside-model"
    shutil.copytree(grader["base"], outside)
    (run.workspace / "output" / "escape").symlink_to(outside, target_is_directory=True)
    inner = run.workspace / "output" / "inner"
    inner.mkdir()
    (inner / "config.json").symlink_to(outside / "config.json")
    for path, code in [("../outside-model", "path_outside_workspace"), (str(outside), "path_outside_workspace"),
                       ("output/escape", "path_outside_workspace"), ("output/inner", "path_outside_workspace"),
                       ("output/missing", "not_found"), ("", "bad_request")]:
        r = run.submit(path)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["code"] == code and r.json()["error"], (path, r.json())
    r = httpx.post(f"{grader['url']}/submit", content=b"not json", timeout=30,
                   headers={"Authorization": f"Bearer {run.token}"})
    assert r.status_code == 400 and r.json()["code"] == "bad_request"
    assert run.recorded() == [] and run.status().json()["submissions_used"] == 0  # nothing changed


def test_not_a_model_is_422_with_the_loaders_reason(grader, tmp_path):
    run = Run(grader, tmp_path)
    junk = run.workspace / "output" / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("no weights here")
    r = run.submit("output/junk")
    assert r.status_code == 422 and r.json()["code"] == "not_a_model"
    assert "config.json" in r.json()["error"]
    half = Path(run.copy_base("half"))
    for f in (run.workspace / half).glob("*.safetensors"):
        f.unlink()
    r = run.submit("output/half")
    assert r.status_code == 422, r.text
    assert run.recorded() == [] and run.status().json()["submissions_used"] == 0


def test_copy_of_base_is_flagged_recorded_durably_and_cached(grader, tmp_path):
    run = Run(grader, tmp_path)
    r = run.submit(run.copy_base())
    assert r.status_code == 200, r.text
    first = r.json()
    assert "copy_of_base" in first["flags"]
    assert first["score"] == pytest.approx(first["baseline_score"]) and first["improvement"] == pytest.approx(0)
    assert first["submission_id"] == 1 and first["remaining_submissions"] == 4
    assert run.recorded() == [first]  # on disk, fsynced, before the answer came back
    assert first["code_commit"]  # code/ snapshotted outside the workspace
    # the same weights again, re-saved under another name: answered from the cache, no new evaluation
    r = run.submit(run.copy_base("again"))
    second = r.json()
    assert "cached" in second["flags"] and "copy_of_base" in second["flags"]
    assert second["score"] == first["score"] and second["submission_id"] == 2 and second["eval_s"] == 0
    status = run.status().json()
    assert status["submissions_used"] == 2 and status["remaining_submissions"] == 3


def test_budgets_give_409_and_closed_runs_401(grader, tmp_path):
    run = Run(grader, tmp_path / "subs", max_submissions=1)
    path = run.copy_base()
    assert run.submit(path).status_code == 200
    r = run.submit(path)
    assert r.status_code == 409 and r.json()["code"] == "budget_exhausted" and "submission" in r.json()["error"]
    late = Run(grader, tmp_path / "late", wall_time_s=0.01)
    time.sleep(0.05)
    r = late.submit(late.copy_base())
    assert r.status_code == 409 and "time" in r.json()["error"]
    assert grader["handle"].close_run.remote(run.token).result()["unfinished"] == 0
    assert run.submit(path).status_code == 401
    assert len(run.recorded()) == 1 and late.recorded() == []


def test_failing_evaluation_is_recorded_and_the_grader_survives(grader, tmp_path):
    """A model that loads but cannot be evaluated: its chat template raises when rendered."""
    run = Run(grader, tmp_path)
    broken = run.workspace / "output" / "broken"
    shutil.copytree(grader["base"], broken)
    config = json.loads((broken / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ raise_exception('this template is broken') }}"
    (broken / "tokenizer_config.json").write_text(json.dumps(config))
    (broken / "chat_template.jinja").unlink(missing_ok=True)
    r = run.submit("output/broken")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["score"] is None and "evaluation failed" in body["error"] and "eval_failed" in body["flags"]
    assert run.recorded()[0]["error"] == body["error"]
    assert httpx.get(f"{grader['url']}/health", timeout=10).status_code == 200
    assert run.submit(run.copy_base()).json()["score"] is not None


def test_concurrent_submissions_from_several_cells(grader, tmp_path):
    runs = [Run(grader, tmp_path / f"cell{i}") for i in range(3)]
    paths = [run.copy_base() for run in runs]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda rp: rp[0].submit(rp[1]), [(r, p) for r, p in zip(runs, paths)] * 2))
    assert all(r.status_code == 200 for r in results), [r.text for r in results]
    for run in runs:
        recorded = run.recorded()
        assert sorted(s["submission_id"] for s in recorded) == [1, 2]
        assert all(s["score"] == recorded[0]["score"] for s in recorded)


def test_status_answers_while_an_evaluation_runs(grader, tmp_path):
    """A fresh model (not in the cache) is evaluated; /status keeps answering meanwhile."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = Run(grader, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(grader["base"])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    fresh = run.workspace / "output" / "fresh"
    model.save_pretrained(fresh)
    AutoTokenizer.from_pretrained(grader["base"]).save_pretrained(fresh)
    answered = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            r = run.status()
            answered.append((r.status_code, r.json().get("evaluating")))
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()
    r = run.submit("output/fresh")
    done.set()
    poller.join()
    assert r.status_code == 200 and "cached" not in r.json()["flags"] and "copy_of_base" not in r.json()["flags"]
    assert any(ev == 1 for code, ev in answered), answered  # answered while the evaluation was in flight


def test_the_final_submission_is_scored_once_on_the_held_out_split_when_the_run_ends(grader, tmp_path):
    """The one marked final (else the best) is kept as submitted and scored on the final split at close; no answer
    carries a held-out score."""
    run = Run(grader, tmp_path / "held-out")
    paths = [run.copy_base(name) for name in ("a", "b", "c")]
    for i, path in enumerate(paths):  # a file of its own: a new score key, so each is evaluated
        (run.workspace / path / "note.txt").write_text(str(i))
    assert run.submit(paths[0], final="yes").status_code == 400
    answers = [run.submit(paths[0]).json(), run.submit(paths[1], final=True).json(), run.submit(paths[2]).json()]
    assert not any("final" in key for answer in answers for key in answer), answers
    assert not any("final" in key for key in run.status().json())
    shutil.rmtree(run.workspace / paths[1])  # the agent overwrote it: the kept copy is what is scored
    final = grader["handle"].close_run.remote(run.token).result()["final"]
    assert final["submission_id"] == 2 and final["marked"] and final["model_path"] == paths[1], final
    assert final["score"] == final["baseline_score"] and final["improvement"] == 0 and final["error"] is None
    assert final["n"] == 200 and final["feedback_score"] == answers[1]["score"]
    assert json.loads((run.records / "final.json").read_text()) == final  # durable
    assert not (run.records / "final-candidates").exists()  # the copy goes once scored


def test_a_run_without_a_scored_submission_keeps_the_base_models_held_out_score(grader, tmp_path):
    run = Run(grader, tmp_path / "none")
    final = grader["handle"].close_run.remote(run.token).result()["final"]
    assert final["submission_id"] is None and "no_submission" in final["flags"] and final["improvement"] == 0


def test_a_near_copy_of_the_base_model_is_flagged_like_an_exact_one(grader, tmp_path):
    """One weight moved by 1e-6: a different digest, but within contamination.near_copy_tol of the base."""
    from safetensors.torch import load_file, save_file

    run = Run(grader, tmp_path / "nudged")
    exact = run.submit(run.copy_base("exact")).json()
    path = run.copy_base("nudged")
    weights_file = next((run.workspace / path).glob("*.safetensors"))
    weights = load_file(weights_file)
    name = next(iter(weights))
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] += 1e-6
    save_file(weights, weights_file, metadata={"format": "pt"})
    answer = run.submit(path).json()
    assert "copy_of_base" in exact["flags"] and "copy_of_base" in answer["flags"], answer
    assert answer["digest"] != exact["digest"]  # not byte-exact: the distance told it
