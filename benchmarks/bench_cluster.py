"""Many short cells of mixed durations and reservations on a cluster of several nodes: makespan against its lower bound.

    .venv/bin/python benchmarks/bench_cluster.py [--cells 200] [--nodes 4] [--cpus-per-node 4] [--durations 20,40,60]

A Ray cluster of N nodes on 127.0.0.1 (tests/support/local_cluster.py: each node its raylet and resources, as
machines would be) is joined by two sweeps at once, as users run them (`python -m orchestrator cluster=ray ...`):
three quarters of the cells reserve 1 CPU, a quarter 2 CPUs; each cell's agent sleeps one of the durations (by seed).
Printed side by side:
- the makespan (first sweep started to last one ended, the graders' deploy included: a user waits for it too);
- its lower bound: the larger of (reserved CPU-seconds of the agents' work / the CPUs the cells can have, i.e. the
  cluster's less the two sweeps' graders) and the longest cell; and the ratio;
- per-cell overhead: a cell's attempt (workspace, registration, sandbox, teardown) less its agent's sleep, mean and
  p95; and the scheduling gaps that neither explains.
On a 2-core machine every node shares the same two cores: the per-cell overhead is what it costs there, not on a
cluster of real machines (where each node's set-up runs on its own cores).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.local_cluster import DRIVER_ENV, LocalCluster  # noqa: E402

# The agent sleeps the duration its seed picks (durations: argv[1], comma-separated), then ends.
SLEEPS = '''
import json, sys, time
durations = [float(d) for d in sys.argv[1].split(",")]
time.sleep(durations[json.load(open("run.json"))["seed"] % len(durations)])
'''


def sweep(address: str, tmp: Path, name: str, seeds: int, cpus: int, durations: str, agent: Path,
          cache: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator", "sweep=smoke", "agent=command", f"agent.files=[{agent}]",
            f"agent.command='python code/{agent.name} {durations}'", "cluster=ray", f"cluster.address={address}",
            f"cluster.workspace_root={tmp / 'workspaces'}", f"output_dir={tmp / name}", f"cache_dir={cache}",
            "logger=none", "grading.port=0", f"sweep.seeds={seeds}", f"sweep.budget.cpus={cpus}",
            "sweep.budget.wall_time_s=3600", f"sweep.name={name}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--cpus-per-node", type=int, default=4)
    parser.add_argument("--durations", default="20,40,60")
    args = parser.parse_args()
    durations = [float(d) for d in args.durations.split(",")]
    big = args.cells // 4  # 2-CPU cells
    small = args.cells - big
    cache = Path(os.environ.get("A2RL_CACHE_DIR", Path.home() / ".cache" / "a2rl"))
    env = {**os.environ, "RAY_AUTH_MODE": "token", **DRIVER_ENV, "A2RL_CACHE_DIR": str(cache)}

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        agent = tmp / "sleeps.py"
        agent.write_text(SLEEPS)
        cluster = LocalCluster({("head" if i == 0 else f"node{i}"): {"num_cpus": args.cpus_per_node}
                                for i in range(args.nodes)}, env)
        address = cluster.address
        try:
            start = time.time()
            procs = [subprocess.Popen(sweep(address, tmp, name, seeds, cpus, args.durations, agent, cache),
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for name, seeds, cpus in (("one-cpu", small, 1), ("two-cpu", big, 2))]
            for p in procs:
                _, err = p.communicate()
                if p.returncode != 0:
                    raise SystemExit(f"a sweep failed:\n{err[-3000:]}")
            makespan = time.time() - start
        finally:
            cluster.stop()

        from orchestrator.ledger import Ledger

        cells = []  # (reserved CPUs, agent's sleep, attempt's wall time, started, ended)
        for name, cpus in (("one-cpu", 1), ("two-cpu", 2)):
            ledger = Ledger(tmp / name / "ledger.sqlite")
            seeds = {c: row["seed"] for c, row in ledger.cells().items()}
            for event in ledger.events(kind="outcome"):
                o, cell = event["payload"], event["cell_id"]
                sleep = durations[seeds[cell] % len(durations)]
                cells.append((cpus, sleep, o["ended_at"] - o["started_at"], o["started_at"], o["ended_at"]))
            ledger.close()

    capacity = args.nodes * args.cpus_per_node - 2  # each sweep's grader holds 1 CPU
    work = sum(cpus * sleep for cpus, sleep, *_ in cells)
    bound = max(work / capacity, max(sleep for _, sleep, *_ in cells))
    overheads = sorted(wall - sleep for _, sleep, wall, *_ in cells)
    busy = sum(cpus * wall for cpus, _, wall, *_ in cells)
    first, last = min(c[3] for c in cells), max(c[4] for c in cells)
    print(f"\n{len(cells)} cells ({small} x 1 CPU, {big} x 2 CPUs; agents sleep {args.durations} s by seed) on "
          f"{args.nodes} nodes x {args.cpus_per_node} CPUs (cells can have {capacity}), two sweeps at once")
    print(f"{'':<58}{'s':>10}")
    print(f"{'makespan (both sweeps, graders deploy included)':<58}{makespan:>10.1f}")
    print(f"{'first cell started -> last cell ended':<58}{last - first:>10.1f}")
    print(f"{'lower bound: max(CPU-s of work / capacity, longest cell)':<58}{bound:>10.1f}")
    print(f"{'lower bound with the measured attempts (work + overhead)':<58}{busy / capacity:>10.1f}")
    print(f"makespan / lower bound = {makespan / bound:.3f}x; cells' span / bound = {(last - first) / bound:.3f}x; "
          f"span / bound with overhead = {(last - first) / (busy / capacity):.3f}x (the scheduler's packing alone)")
    print(f"per-cell overhead (attempt less the agent's sleep): mean {statistics.mean(overheads):.2f} s, "
          f"p50 {overheads[len(overheads) // 2]:.2f} s, p95 {overheads[int(0.95 * (len(overheads) - 1))]:.2f} s")


if __name__ == "__main__":
    main()
