"""A Ray cluster of several nodes on 127.0.0.1, in a process of its own: what tests of `cluster=ray` join, as a user
joins the cluster that `ray up` or KubeRay started (`ray start` cannot do this on one machine: it replaces
127.0.0.1 by the machine's network address, and each node needs ports of its own).

    python -m tests.support.local_cluster '{"head": {"num_cpus": 1}, "cpu": {"num_cpus": 2}, "gpu": {...}}'

starts the first node as the head and the others as workers (each entry: RayParams keywords: num_cpus, resources,
...), prints one JSON line {"address": GCS address, "nodes": {name: node id}} once all are up, then reads commands:

    kill NAME      the node's processes are killed at once (SIGKILL), as a machine that dies; prints {"killed": NAME}
    (end of input) every node is shut down

    python -m tests.support.local_cluster --join ADDRESS '{"num_cpus": 1}'

adds one worker node to a running cluster (for a node started where the test changed what it sees, e.g. in a mount
namespace of its own) and prints {"node": node id}; it is shut down at the end of input.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ray
from ray._private.node import Node
from ray._private.parameter import RayParams
from ray.cluster_utils import Cluster

LOOPBACK = {"node_ip_address": "127.0.0.1", "include_dashboard": False, "object_store_memory": 100 * 1024 * 1024}
# For a driver (the orchestrator) joining this cluster: without it Ray replaces 127.0.0.1 in the address by the
# machine's network address, where these nodes do not listen.
DRIVER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
ROOT = Path(__file__).resolve().parents[2]


class LocalCluster:
    """This module run as a process of its own (a cluster that sweeps only join), from a test or a benchmark."""

    def __init__(self, spec: dict, env: dict):
        # As docs/running.md tells a user to start a cluster with `ray start`: its workers at the niceness of the
        # command (Ray's own 15 starves them on a busy machine), unless env says otherwise.
        env = {"RAY_worker_niceness": "0", **env}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.local_cluster", json.dumps(spec)],
                                     cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started = json.loads(self.proc.stdout.readline() or "{}")
        if "address" not in started:
            raise RuntimeError("the local cluster did not start")
        self.address, self.nodes = started["address"], started["nodes"]
        self.gcs_port = int(self.address.rsplit(":", 1)[1])

    def kill(self, name: str) -> None:
        self.proc.stdin.write(f"kill {name}\n")
        self.proc.stdin.flush()
        if json.loads(self.proc.stdout.readline()) != {"killed": name}:
            raise RuntimeError(f"node {name} was not killed")

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def say(message: dict) -> None:
    print(json.dumps(message), flush=True)


def join(address: str, params: dict) -> None:
    node = Node(RayParams(**{**LOOPBACK, "gcs_address": address, "node_manager_port": 0, "min_worker_port": 0,
                             "max_worker_port": 0, "include_log_monitor": False, **params}),
                head=False, shutdown_at_exit=True, spawn_reaper=True)
    say({"node": node.node_id})
    sys.stdin.read()
    node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)


def main(spec: dict) -> None:
    names = list(spec)
    cluster = Cluster(initialize_head=True, head_node_args={**LOOPBACK, **spec[names[0]]})
    nodes = {names[0]: cluster.head_node}
    for name in names[1:]:
        nodes[name] = cluster.add_node(**{**LOOPBACK, **spec[name]})
    cluster.wait_for_nodes()
    say({"address": cluster.address, "nodes": {name: node.node_id for name, node in nodes.items()}})
    for line in sys.stdin:
        command, _, name = line.strip().partition(" ")
        if command == "kill":
            nodes[name].kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            say({"killed": name})
    cluster.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "--join":
        join(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main(json.loads(sys.argv[1]))
