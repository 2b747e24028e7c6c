"""Faults in the middle of a cell, each in a real one-cell sweep: a rollout host actor killed mid-episode, the driver
proxy's replica killed mid-stream, the output dir's disk filling up. Each checks what the agent saw, that the sweep
finished, and the ledger against the durable record files afterwards."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.proxy.usage import Usage
from contracts.layout import Layout
from contracts.records import read_jsonl
from orchestrator.ledger import Ledger
from orchestrator.records import reconcile
from tests.conftest import ROOT
from tests.support.fake_upstream import FakeUpstream
from tests.test_cli_agents import drivers_override, fake_driver

# An agent (the `command` kind: the user's own script, sandboxed) that plays one session until it is lost, then
# resets a new one, steps it and closes it. It writes what it was answered to code/answers.json.
LOSES_A_SESSION = '''
import json, time, urllib.error, urllib.request

run = json.load(open("run.json"))

def post(path, body):
    req = urllib.request.Request(run["rollout_url"] + path, json.dumps(body).encode(), method="POST", headers={
        "Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text

answers = {"first": post("/reset", {"game": 0})}
session, deadline = answers["first"][1]["session_id"], time.time() + 40
while time.time() < deadline:  # the test kills the session's host meanwhile
    status, body = post("/step", {"session_id": session, "command": "look"})
    if status != 200:
        answers["lost"] = [status, body]
        break
    time.sleep(0.05)
answers["again"] = post("/reset", {"game": 0})
if answers["again"][0] == 200:
    again = answers["again"][1]["session_id"]
    answers["step"] = post("/step", {"session_id": again, "command": "look"})
    answers["close"] = post("/close", {"session_id": again})
json.dump(answers, open("code/answers.json", "w"))
'''

ALFWORLD = ["sweep=alfworld_small", "task=alfworld", "task.data_path=null", "task.n_train=3", "task.n_eval=2",
            "task.task_types=[pick,clean,look]", "task.expert_episodes=2", "task.grader.batch_size=8",
            "task.grader.max_new_tokens=12", "task.rollout.num_hosts=1", "task.rollout.max_sessions_per_run=1"]


def one_cell(out: Path, cache_dir: Path) -> tuple[dict, Path]:
    """The sweep's one cell as the ledger has it, and its attempt's records folder; the ledger agrees with the
    record files (a resume's reconcile finds nothing to add, adopt or requeue)."""
    ledger = Ledger(out / "ledger.sqlite")
    try:
        (row,) = ledger.cells().values()
        assert reconcile(ledger, Layout.make(out, cache_dir)) == {"events_added": 0, "adopted": 0, "requeued": 0}
        adir = out / "cells" / row["cell_id"] / f"attempt-{row['attempts']}"
        (outcome,) = [e["payload"] for e in ledger.events(row["cell_id"], kind="outcome")]
        assert outcome == json.loads((adir / "outcome.json").read_text())
    finally:
        ledger.close()
    return row, adir


def kill_process_of(actor) -> int:
    """SIGKILL an actor's process, as the kernel's OOM killer would; returns its pid."""
    import ray

    pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    return pid


# 2 minutes; a host killed under a batch (tests/test_rollout_service.py) covers the lost session's 410 and release
@pytest.mark.slow
def test_a_rollout_host_killed_mid_episode_loses_only_its_sessions(run_sweep, cache_dir, tmp_path):
    pytest.importorskip("alfworld")
    pytest.importorskip("textworld")
    import ray

    script = tmp_path / "loses_a_session.py"
    script.write_text(LOSES_A_SESSION)
    killed: list[int] = []
    done = threading.Event()

    def kill_the_host_mid_episode():
        while not done.is_set() and not killed:
            names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                     if a["name"].startswith("a2rl-env-alfworld-")]
            for name in names:
                host = ray.get_actor(name, namespace="a2rl")
                if ray.get(host.stats.remote())["steps"] >= 3:  # the agent is stepping its session
                    killed.append(kill_process_of(host))
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_host_mid_episode, daemon=True)
    killer.start()
    try:
        _, _, out = run_sweep([*ALFWORLD, "agent=command", f"agent.files=[{script}]",
                               f"agent.command=python code/{script.name}", "sweep.budget.wall_time_s=90"])
    finally:
        done.set()
        killer.join(10)
    assert killed, "the host was never seen stepping a session"
    row, adir = one_cell(out, cache_dir)
    assert row["status"] == "completed", (row, (adir / "agent.stderr").read_text()[-2000:])
    workspace = Path(json.loads((adir / "outcome.json").read_text())["workspace"])
    answers = json.loads((workspace / "code" / "answers.json").read_text())
    status, lost = answers["lost"]
    # Not a 500 with a traceback: a refusal the agent can act on (its session is gone, reset a new one).
    assert status == 410 and lost["code"] == "session_lost" and "POST /env/reset" in lost["error"], answers
    assert answers["again"][0] == 200, answers  # the host came back: a new session opens...
    assert answers["step"][0] == 200, answers  # ...and steps
    # The lost session no longer counts against the run (limit 1: the reset above would have been refused).
    assert answers["close"] == [200, {"closed": answers["again"][1]["session_id"], "open_sessions": 0}], answers


# An agent that calls its LLM through the driver proxy: one streamed chat completion, retried while it breaks off or
# fails with a retryable status (as the providers' SDKs do), then one plain call. What it saw goes to code/answers.json.
STREAMS_THROUGH_THE_PROXY = '''
import json, os, time, urllib.error, urllib.request

def chat(stream):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {})}
    req = urllib.request.Request(os.environ["A2RL_DRIVER_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + os.environ["A2RL_DRIVER_KEY"],
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            data = r.read()
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(errors="replace")[:300]]
    except Exception as e:  # a connection broken mid-answer (http.client.IncompleteRead, a reset)
        return ["broken", repr(e)[:300]]
    complete = b"data: [DONE]" in data if stream else bool(data)
    return [200 if complete else "incomplete", data.decode(errors="replace")[-300:]]

tries, deadline = [], time.time() + 60
while time.time() < deadline:
    tries.append(chat(stream=True))
    if tries[-1][0] not in ("broken", 429, 500, 502, 503, 504):
        break
    time.sleep(1)
json.dump({"stream": tries, "plain": chat(stream=False)}, open("code/answers.json", "w"))
'''
PROXY_KEY_VAR = "A2RL_FAULTS_REAL_KEY"
USAGE = Usage(input_tokens=1000, output_tokens=50, cached_tokens=200)


def test_the_driver_proxy_replica_killed_mid_stream_keeps_keys_and_exact_metering(run_sweep, cache_dir, tmp_path,
                                                                                   monkeypatch):
    import ray

    monkeypatch.setenv(PROXY_KEY_VAR, "sk-real-faults")
    script = tmp_path / "streams.py"
    script.write_text(STREAMS_THROUGH_THE_PROXY)
    agent = (f"{{name:streams,kind:command,needs_driver:true,files:['{script}'],"
             f"command:'python code/{script.name}'}}")
    # A stream takes 8 x 0.5 s at least: killed 0.6 s after the upstream got it, it is cut off mid-way.
    fake = FakeUpstream(usage=USAGE, expect_key="sk-real-faults", chunks=8, chunk_delay_s=0.5).start()
    driver = {**fake_driver("fake-openai", "openai", fake, "gpt-fake"), "api_key_env": PROXY_KEY_VAR}
    killed: list[int] = []
    done = threading.Event()

    def kill_the_replica_mid_stream():
        while not done.is_set() and fake.calls == 0:
            time.sleep(0.05)
        if done.wait(0.6):
            return
        (name,) = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if "a2rl-driver-proxy#DriverProxy" in a["name"]]
        killed.append(kill_process_of(ray.get_actor(name, namespace="serve")))

    killer = threading.Thread(target=kill_the_replica_mid_stream, daemon=True)
    killer.start()
    try:
        _, _, out = run_sweep(["sweep=demo", "sweep.seeds=[0]", f"sweep.agents=[{agent}]", drivers_override([driver]),
                               "sweep.budget.wall_time_s=90", "driver_proxy.backoff_s=0.05"])
    finally:
        done.set()
        killer.join(10)
        fake.stop()
    assert killed, "the proxy's replica was not killed"
    row, adir = one_cell(out, cache_dir)
    assert row["status"] == "completed", (row, (adir / "agent.stderr").read_text()[-2000:])
    workspace = Path(json.loads((adir / "outcome.json").read_text())["workspace"])
    answers = json.loads((workspace / "code" / "answers.json").read_text())
    tries = answers["stream"]
    # The cut-off stream is a broken connection (or a 5xx) the agent retries, never a 401: its key outlived the
    # replica.
    assert tries[0][0] == "broken" or tries[0][0] in (500, 502, 503, 504), answers
    assert tries[-1][0] == 200 and answers["plain"][0] == 200, answers
    assert all(t[0] != 401 for t in tries), answers
    # Metering: every call the upstream answered in full is one record line with its exact usage; the cut-off one,
    # whose usage no process saw, is the only call not recorded; the ledger and the outcome say what the lines say.
    records = read_jsonl(adir / "driver_calls.jsonl")
    assert len(records) == fake.calls - 1 and len(records) >= 2, (records, fake.calls)
    assert all((r["status"], r["input_tokens"], r["output_tokens"]) == (200, 1000, 50) for r in records), records
    ledger = Ledger(out / "ledger.sqlite")
    try:
        assert [e["payload"] for e in ledger.events(row["cell_id"], kind="driver_usage")] == records
    finally:
        ledger.close()
    usage = json.loads((adir / "outcome.json").read_text())["driver_usage"]
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (
        len(records), 1000 * len(records), 50 * len(records)), usage


# An agent that submits a copy of the base model, waits until the test has filled the output dir's disk (its
# workspace is on another one), submits again, and keeps what it was answered in code/answers.json.
SUBMITS_ACROSS_A_FULL_DISK = '''
import json, os, shutil, time, urllib.error, urllib.request

run = json.load(open("run.json"))

def submit():
    req = urllib.request.Request(run["grading_url"] + "/submit", json.dumps({"model_path": "output/m"}).encode(),
                                 headers={"Authorization": "Bearer " + run["run_token"],
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return [r.status, json.loads(r.read())]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(errors="replace")[:500]]

shutil.copytree("model", "output/m")
answers = {"first": submit()}
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists("code/disk_full"):  # the test fills the disk meanwhile
    time.sleep(0.1)
answers["second"] = submit()
json.dump(answers, open("code/answers.json", "w"))
'''


@pytest.fixture
def small_disk(tmp_path):
    """A 32 MB filesystem of its own (tmpfs), for an output dir whose disk fills up."""
    import subprocess

    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {mounted.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> int:
    """Write a file until the disk takes no more; returns the bytes written."""
    written = 0
    with open(disk / "filler", "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(b"\0" * (1 << 20))
            except OSError:
                break
        try:
            while f.write(b"\0" * 512):  # the last blocks
                written += 512
        except OSError:
            pass
    return written


@pytest.mark.slow  # ~40 s; a record line the full disk cuts (below) covers what is kept
def test_the_output_dir_filling_up_mid_sweep_is_one_clear_error_and_loses_nothing(cache_dir, tmp_path, small_disk):
    """As a user runs it (the command line: its one line of error, its exit status), on a one-cell sweep whose output
    dir is a small disk that the test fills once the agent's first submission is recorded."""
    script = tmp_path / "submits.py"
    script.write_text(SUBMITS_ACROSS_A_FULL_DISK)
    out, workspaces = small_disk / "out", tmp_path / "workspaces"  # the agent's workspace is on another disk
    cmd = [sys.executable, "-m", "orchestrator", "sweep=demo", "sweep.seeds=[0]", "agent=command",
           f"agent.files=[{script}]", f"agent.command=python code/{script.name}", "sweep.budget.wall_time_s=60",
           f"output_dir={out}", f"cluster.workspace_root={workspaces}", f"cache_dir={cache_dir}", "logger=none",
           "cluster.num_cpus=2", "grading.port=0"]
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}, "A2RL_CACHE_DIR": str(cache_dir)}
    sweep = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and sweep.poll() is None:
            recorded = [r for f in out.glob("cells/*/attempt-1/submissions.jsonl") for r in read_jsonl(f)]
            if recorded:
                break
            time.sleep(0.1)
        assert recorded, sweep.communicate(timeout=60)
        fill(small_disk)
        for ws in workspaces.glob("*-a1"):
            (ws / "code" / "disk_full").touch()
        stdout, stderr = sweep.communicate(timeout=240)  # no hang: the sweep ends by itself
    finally:
        if sweep.poll() is None:
            sweep.kill()
    lines = stderr.strip().splitlines()
    assert sweep.returncode == 1 and "Traceback" not in stderr, stdout[-2000:] + stderr[-3000:]
    assert lines[-1].startswith(f"a2rl: no space left on device writing {out / 'ledger.sqlite'}: free space"), lines
    (small_disk / "filler").unlink()

    # Nothing recorded is lost: the record files are whole, and the ledger (consistent, with what it took before the
    # disk filled) gets from them what it could not take, as the next run of the same command does first.
    # The second submission's record may still fit in the file's last page (tmpfs allocates by page), so it is
    # either whole on disk or absent, never torn, and the ledger ends with exactly what the file holds.
    (cell_dir,) = (out / "cells").iterdir()
    on_disk = read_jsonl(cell_dir / "attempt-1" / "submissions.jsonl")
    assert (cell_dir / "attempt-1" / "submissions.jsonl").read_bytes().endswith(b"\n")  # no torn line left
    assert on_disk[:1] == recorded and len(recorded) == 1 and len(on_disk) <= 2, on_disk
    ledger = Ledger(out / "ledger.sqlite")
    try:
        assert ledger.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [e["payload"]["status"] for e in ledger.events(kind="status")] == ["running"]
        fixed = reconcile(ledger, Layout.make(out, cache_dir, workspaces))
        assert fixed["requeued"] == 1, fixed  # the cell cut off by the stop runs again next time
        assert [e["payload"] for e in ledger.events(kind="submission")] == on_disk
    finally:
        ledger.close()


def test_a_record_line_the_full_disk_cuts_is_not_left_torn(small_disk):
    """A line that only partly fits is taken back whole: once there is room again, the next line is whole too."""
    from contracts.records import append_jsonl

    path = small_disk / "records.jsonl"
    append_jsonl(path, {"n": 0})
    fill(small_disk)
    with pytest.raises(OSError, match="No space left on device"):
        for n in range(1, 100):  # the file's last block takes a few, then one line crosses into a block not there
            append_jsonl(path, {"n": n, "pad": "x" * 1000})
    assert path.read_bytes().endswith(b"\n")
    (small_disk / "filler").unlink()
    append_jsonl(path, {"n": "after"})
    lines = read_jsonl(path)
    assert [line["n"] for line in lines] == list(range(len(lines) - 1)) + ["after"], lines
