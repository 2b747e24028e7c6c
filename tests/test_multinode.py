"""a2rl on a Ray cluster of several nodes (all on 127.0.0.1, each with resources of its own), joined with `cluster=ray`
as a user joins theirs: cells spread by their reservations, two sweeps share the cluster without touching each other's
services, a node dies under a running cell, the orchestrator is killed and started again, the preflight names a node
that does not share the workspace root."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from contracts.records import read_jsonl
from orchestrator.ledger import Ledger
from tests.support.local_cluster import DRIVER_ENV, LocalCluster

ROOT = Path(__file__).resolve().parent.parent

# Submits the base model once; then, where it was started with a gate, waits for code/go (the test opens it).
# It also tries to reach the cluster's GCS (its port is its first argument): the sandbox must not let it.
AGENT = '''
import json, os, shutil, socket, sys, time, urllib.request

run = json.load(open("run.json"))
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    reached = True
except OSError:
    reached = False
json.dump({"reached_gcs": reached, "ray_env": sorted(k for k in os.environ if k.startswith("RAY"))},
          open("output/probe.json", "w"))
shutil.copytree("model", "output/m")
req = urllib.request.Request(run["grading_url"] + "/submit", json.dumps({"model_path": "output/m"}).encode(),
                             headers={"Authorization": "Bearer " + run["run_token"],
                                      "Content-Type": "application/json"})
print("SUBMIT", urllib.request.urlopen(req, timeout=600).status, flush=True)
while sys.argv[2] == "gated" and not os.path.exists("code/go"):
    time.sleep(0.2)
'''


CLUSTER_TOKEN = secrets.token_hex(16)


def cluster_env(cache_dir: Path) -> dict:
    # Token auth on, with the token in the environment, as KubeRay's authOptions set it on every container (and
    # another than ~/.ray/auth_token's: the orchestrator connects with the one it is given).
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": CLUSTER_TOKEN, **DRIVER_ENV,
            "A2RL_CACHE_DIR": str(cache_dir)}


@pytest.fixture(scope="module")
def cluster(cache_dir):
    # head: 1 CPU; "cpu": 3 CPUs; "gpu": 2 CPUs and the cluster's one (emulated) GPU. Two graders (one per sweep,
    # 1 CPU each), a GPU cell and two CPU cells fit at once; after a worker node dies the rest still hold a grader
    # and the two CPU cells.
    c = LocalCluster({"head": {"num_cpus": 1}, "cpu": {"num_cpus": 3},
                      "gpu": {"num_cpus": 2, "resources": {"emulated_gpu": 1}}}, cluster_env(cache_dir))
    yield c
    c.stop()


def sweep_command(cluster: LocalCluster, cache_dir: Path, out: Path, agent: Path, gate: str, overrides: list[str]):
    return [sys.executable, "-m", "orchestrator", "sweep=smoke", "agent=command", f"agent.files=[{agent}]",
            f"agent.command=python code/{agent.name} {cluster.gcs_port} {gate}", "cluster=ray",
            f"cluster.address={cluster.address}", f"cluster.workspace_root={out.parent / 'workspaces'}",
            "cluster.emulated_gpus=1", f"output_dir={out}", f"cache_dir={cache_dir}", "logger=none",
            "grading.port=0", "sweep.seeds=[0,1]", "sweep.budget.wall_time_s=900", "sweep.budget.max_submissions=3",
            "sandbox.kill_grace_s=1", *overrides]


def attempts(out: Path) -> dict[str, list[dict]]:
    """cell id -> its attempts' attempt.json (the node it ran on), in order."""
    found: dict[str, list[dict]] = {}
    for path in sorted(out.glob("cells/*/attempt-*/attempt.json")):
        found.setdefault(path.parent.parent.name, []).append(json.loads(path.read_text()))
    return found


def wait_for(what, timeout_s: float, *procs: subprocess.Popen):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if (got := what()):
            return got
        for p in procs:
            assert p.poll() is None, p.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout_s} s")


def submitted(out: Path, cell_id: str, attempt: int) -> bool:
    return bool(read_jsonl(out / "cells" / cell_id / f"attempt-{attempt}" / "submissions.jsonl"))


# ~1.5 min; a restarted orchestrator resuming is test_crash_resume's path, a lost attempt retried test_faults'
@pytest.mark.slow
def test_two_sweeps_on_three_nodes_a_dead_node_and_a_restarted_orchestrator(cluster, cache_dir, tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    env = cluster_env(cache_dir)
    gpu_out, cpu_out = tmp_path / "gpu" / "out", tmp_path / "cpu" / "out"
    # a GPU cell (only the "gpu" node holds it) ends after its submission; CPU cells wait at their gate
    gpu_sweep = subprocess.Popen(sweep_command(cluster, cache_dir, gpu_out, agent, "open",
                                               ["sweep.budget.gpus=1", "sweep.seeds=[0]"]),
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The GPU cell first: a CPU-only cell may land on the GPU node, and with a grader there it would take the
    # CPUs the GPU cell needs (Ray places by resources only), which the cell would then wait for (docs/running.md, many
    # machines: give GPU nodes CPUs for their GPU cells).
    wait_for(lambda: attempts(gpu_out), 600, gpu_sweep)
    cpu_cmd = sweep_command(cluster, cache_dir, cpu_out, agent, "gated", [])
    cpu_sweep = subprocess.Popen(cpu_cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    try:
        # both CPU cells submitted once and wait; the GPU sweep finishes meanwhile
        running = wait_for(lambda: (a := attempts(cpu_out)) and len(a) == 2 and all(
            submitted(cpu_out, c, 1) for c in a) and a, 600, cpu_sweep)
        gpu_stdout, gpu_stderr = gpu_sweep.communicate(timeout=600)
        assert gpu_sweep.returncode == 0, gpu_stderr[-3000:]

        # The GPU cell ran on the GPU node, and is complete in the GPU sweep's records.
        gpu_attempts = attempts(gpu_out)
        assert len(gpu_attempts) == 1
        assert {a[-1]["node_id"] for a in gpu_attempts.values()} == {cluster.nodes["gpu"]}
        gpu_rows = Ledger(gpu_out / "ledger.sqlite").cells()
        assert {r["status"] for r in gpu_rows.values()} == {"completed"}, gpu_rows
        for cell_id in gpu_rows:
            assert len(read_jsonl(gpu_out / "cells" / cell_id / "attempt-1" / "submissions.jsonl")) == 1

        # Two sweeps, two sets of services: a GPU cell's token means nothing to the CPU sweep's grader, and the GPU
        # sweep's grader went with its sweep (the other's still answers).
        (cpu_ws,) = [w for w in (cpu_out.parent / "workspaces").iterdir() if w.name.startswith(next(iter(running)))]
        (gpu_ws, *_) = sorted((gpu_out.parent / "workspaces").iterdir())
        cpu_run, gpu_run = (json.loads((w / "run.json").read_text()) for w in (cpu_ws, gpu_ws))
        assert cpu_run["grading_url"] != gpu_run["grading_url"]
        other = httpx.get(cpu_run["grading_url"] + "/status", timeout=30,
                          headers={"Authorization": f"Bearer {gpu_run['run_token']}"})
        assert other.status_code == 401, other.text
        assert httpx.get(gpu_run["grading_url"] + "/health", timeout=30).status_code == 404
        # and no agent reached the cluster's GCS from its sandbox
        for ws in [*(cpu_out.parent / "workspaces").iterdir(), *(gpu_out.parent / "workspaces").iterdir()]:
            assert json.loads((ws / "output" / "probe.json").read_text()) == {"reached_gcs": False, "ray_env": []}, ws

        # A worker node running a CPU cell dies: the cell is an infra error there and runs again on another node.
        victim_cell, victim_node = next((c, a[0]["node_id"]) for c, a in running.items()
                                        if a[0]["node_id"] != cluster.nodes["head"])
        name = next(n for n, node_id in cluster.nodes.items() if node_id == victim_node)
        cluster.kill(name)
        # every cell that ran there (both may have) runs again elsewhere and submits before the next step
        on_victim = [c for c, a in running.items() if a[0]["node_id"] == victim_node]
        wait_for(lambda: all(len(a := attempts(cpu_out)[c]) >= 2 and submitted(cpu_out, c, len(a))
                             for c in on_victim), 600, cpu_sweep)
        assert all(attempts(cpu_out)[c][1]["node_id"] != victim_node for c in on_victim)

        # The orchestrator is killed (its cells with it) and started again with the same command: it resumes.
        cpu_sweep.send_signal(signal.SIGKILL)
        cpu_sweep.communicate()
        before = {c: len(a) for c, a in attempts(cpu_out).items()}
        cpu_sweep = subprocess.Popen(cpu_cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        wait_for(lambda: all(len(attempts(cpu_out)[c]) > n and submitted(cpu_out, c, n + 1)
                             for c, n in before.items()), 600, cpu_sweep)
        for ws in (cpu_out.parent / "workspaces").iterdir():  # the gates open: the agents end
            (ws / "code" / "go").touch()
        stdout, stderr = cpu_sweep.communicate(timeout=600)
        assert cpu_sweep.returncode == 0, stderr[-3000:]
        assert "resumed" in stdout, stdout
    finally:
        for p in (gpu_sweep, cpu_sweep):
            if p.poll() is None:
                p.kill()

    # Nothing recorded is lost and nothing ran twice: every attempt's submission is in the ledger, each once, and
    # each cell ended completed in its last attempt.
    ledger = Ledger(cpu_out / "ledger.sqlite")
    rows = ledger.cells()
    assert {r["status"] for r in rows.values()} == {"completed"}, rows
    recorded = [r for f in sorted(cpu_out.glob("cells/*/attempt-*/submissions.jsonl")) for r in read_jsonl(f)]
    assert sorted(e["payload"]["digest"] + str(e["payload"]["t"]) for e in ledger.events(kind="submission")) == \
        sorted(r["digest"] + str(r["t"]) for r in recorded)
    assert len(recorded) == sum(r["attempts"] for r in rows.values())  # one submission per attempt
    ledger.close()


def test_the_preflight_names_a_node_that_does_not_share_the_workspace_root(cluster, cache_dir, tmp_path):
    """A node whose workspace root is a folder of its own (here: a node started in a mount namespace of its own,
    with a private tmpfs at that path) is named in one line before any cell starts."""
    shared = tmp_path / "shared"
    (shared / "workspaces").mkdir(parents=True)
    env = cluster_env(cache_dir)
    script = (f"mount -t tmpfs tmpfs {shared / 'workspaces'} && exec {sys.executable} -m tests.support.local_cluster "
              f"--join {cluster.address} '{{\"num_cpus\": 1}}'")
    odd = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=ROOT, env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        joined = odd.stdout.readline()
        if not joined:
            pytest.skip(f"cannot start a node in a mount namespace of its own: {odd.communicate()[1][-500:]}")
        agent = tmp_path / "agent.py"
        agent.write_text(AGENT)
        done = subprocess.run(sweep_command(cluster, cache_dir, shared / "out", agent, "open", []), cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
    finally:
        odd.stdin.close()
        odd.wait(120)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    odd_node = json.loads(joined)["node"]
    assert last.startswith(f"a2rl: config error: cluster.workspace_root={shared / 'workspaces'} on 127.0.0.1 "
                           f"(node {odd_node[:8]}) is not the folder the other nodes write"), last
    assert not (shared / "out" / "cells").exists()  # no cell started
