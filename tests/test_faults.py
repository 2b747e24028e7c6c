"""Faults around a cell, each in a real sweep: the grader's evaluation process killed mid-evaluation (once: retried
on the replica Serve starts; every time: answered 503 infra_error and not counted), the run registry actor killed
mid-evaluation (its journal brings its state back), and an evaluation still running when its cell ends (given up
after grading.eval_timeout_s and recorded as an infra error). The gated task (tests/support/gated.py) stops every
evaluation at a gate, so each fault lands at a known point whatever the machine's speed."""
from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from contracts.records import SUBMISSIONS, read_jsonl
from orchestrator.ledger import Ledger
from tests.support.gated import evaluations, open_gate

AGENT = """
import json, shutil, sys, urllib.error, urllib.request

run = json.load(open("run.json"))

def call(path, body=None, timeout=600):
    headers = {"Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(run["grading_url"] + path, data, headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)

for i in range(int(sys.argv[1])):
    shutil.copytree("model", f"output/m{i}")
    open(f"output/m{i}/note.txt", "w").write(f"{run['run_token']} {i}")  # a new score key: it is evaluated
    try:
        code, answer = call("/submit", {"model_path": f"output/m{i}"}, timeout=float(sys.argv[2]))
    except TimeoutError:
        code, answer = "timeout", {}
    print("SUBMIT", code, json.dumps(answer), flush=True)
print("STATUS", json.dumps(call("/status")[1]), flush=True)
"""


@pytest.fixture(scope="module")
def gate_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gates")


def faulted_sweep(run_sweep, tmp_path, gate_dir, submissions: int, client_timeout_s: float, faults: list,
                  overrides: list[str]):
    """A one-cell sweep of the gated task whose agent submits `submissions` models; `faults[i]` is done to the i-th
    evaluation when it reaches its gate (the first is the baseline's, when the grader starts with a new gate dir)."""
    (tmp_path / "fault_agent.py").write_text(textwrap.dedent(AGENT))
    stop, done = threading.Event(), []

    def act():
        while not stop.is_set() and len(done) < len(faults):
            gates = evaluations(gate_dir)
            for gate in gates[len(done):len(faults)]:  # gates past the planned faults stay shut
                faults[len(done)](gate)
                done.append(gate)
            time.sleep(0.05)

    actor = threading.Thread(target=act, daemon=True)
    actor.start()
    try:
        _, printed, out = run_sweep([
            "sweep=smoke", "agent=command", f"agent.files=[{tmp_path / 'fault_agent.py'}]",
            f"agent.command=python code/fault_agent.py {submissions} {client_timeout_s}", "task=arithmetic",
            "task.name=gated", "task.cls=gated", f"+task.gate_dir={gate_dir}", "task.eval_size=8",
            "task.final_size=0",
            "+task.grader.infra_retries=1", "imports=[tests.support.gated]", "sweep.budget.wall_time_s=300",
            "sweep.budget.max_submissions=5", "sandbox.kill_grace_s=1", *overrides])
    finally:
        stop.set()
        actor.join(10)
    row = next(iter(Ledger(out / "ledger.sqlite").cells().values()))
    attempt = out / "cells" / row["cell_id"] / f"attempt-{row['attempts']}"
    said = (attempt / "agent.stdout").read_text()
    return row, attempt, said, done


def kill_evaluator(gate: Path) -> None:
    os.kill(int(gate.read_text()), signal.SIGKILL)  # as the out-of-memory killer would


def kill_registry(gate: Path) -> None:
    import ray

    from contracts.runs import registry

    ray.kill(registry(), no_restart=False)  # Ray restarts it; its journal brings the runs back
    open_gate(gate)


def submits(said: str) -> list[tuple[str, dict]]:
    return [(line.split()[1], json.loads(line.split(" ", 2)[2])) for line in said.splitlines()
            if line.startswith("SUBMIT ")]


def test_a_killed_evaluation_is_retried_or_refunded_and_a_killed_registry_forgets_nothing(
        run_sweep, tmp_path, gate_dir):
    faults = [open_gate,                      # the baseline
              kill_registry,                  # submission 1: the registry dies while it is evaluated
              kill_evaluator, open_gate,      # submission 2: its process dies once; the retry is graded
              kill_evaluator, kill_evaluator,  # submission 3: dies on every try (infra_retries=1): 503, not counted
              open_gate]                      # submission 4
    row, attempt, said, done = faulted_sweep(run_sweep, tmp_path, gate_dir, 4, 600, faults,
                                             ["grading.eval_timeout_s=120"])
    assert len(done) == len(faults), said
    answers = submits(said)
    assert [code for code, _ in answers] == ["200", "200", "503", "200"], said
    assert [a["submission_id"] for _, a in answers] == [1, 2, 3, 4]
    lost = answers[2][1]
    assert lost["code"] == "infra_error" and lost["refunded"] and lost["score"] is None
    assert "infra_error" in lost["flags"] and "died 2 time(s)" in lost["error"]
    assert [a["remaining_submissions"] for _, a in answers] == [4, 3, 3, 2]  # the lost one was not counted
    status = json.loads(said.split("STATUS ", 1)[1])
    assert status["evaluating"] == 0 and status["submissions_used"] == 4 and status["remaining_submissions"] == 2

    records = read_jsonl(attempt / SUBMISSIONS)
    assert [r["submission_id"] for r in records] == [1, 2, 3, 4]  # each once, the lost one with its cause
    assert [bool(r.get("refunded")) for r in records] == [False, False, True, False]
    assert row["status"] == "completed" and row["n_submissions"] == 3, row  # the ledger agrees with the records
    assert row["best_score"] == max(r["score"] for r in records if r["score"] is not None)
    outcome = json.loads((attempt / "outcome.json").read_text())
    assert outcome["evaluations_unfinished"] == 0


def test_an_evaluation_still_running_when_its_cell_ends_is_given_up_and_recorded(run_sweep, tmp_path, gate_dir):
    stuck: list[Path] = []
    # the grader is up already (baseline cached): the first gate is the submission's, left closed
    row, attempt, said, _ = faulted_sweep(run_sweep, tmp_path, gate_dir, 1, 2, [stuck.append],
                                          ["grading.eval_timeout_s=3"])
    try:
        assert submits(said)[0][0] == "timeout", said  # the agent hung up and exited
        records = read_jsonl(attempt / SUBMISSIONS)
        assert len(records) == 1 and records[0]["submission_id"] == 1, records
        assert records[0]["refunded"] and "infra_error" in records[0]["flags"]
        assert "eval_timeout_s" in records[0]["error"]
        outcome = json.loads((attempt / "outcome.json").read_text())
        assert outcome["evaluations_unfinished"] == 1
        assert row["status"] == "completed" and row["n_submissions"] == 0, row
    finally:
        for gate in stuck:
            open_gate(gate)
