"""Shared fixtures: one real Ray cluster on loopback and one Serve instance for the whole session."""
from __future__ import annotations

import io
import os
import socket
from pathlib import Path

import pytest

import orchestrator  # noqa: F401  (tells the registry where task classes are, as a sweep does)

os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the orchestrator runs it: agents cannot connect
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["tests.support.module_times"]  # each module's wall time against its recorded budget


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """Base models and grading caches, built once per session (tiny model, baselines)."""
    path = Path(os.environ.get("A2RL_TEST_CACHE") or tmp_path_factory.mktemp("a2rl-cache"))
    os.environ["A2RL_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def grading_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def ray_cluster(cache_dir, grading_port, tmp_path_factory):
    """Real Ray on 127.0.0.1: 4 logical CPUs (so a grader and two 1-CPU cells fit) and one emulated GPU."""
    import ray
    from ray import serve

    from orchestrator.runner import start_ray, stop_ray

    # as a sweep starts it (orchestrator/runner.start_ray): its workers at the niceness a sweep gives them, and the
    # waits a busy machine needs for Ray's own start
    wait_s = float(compose([]).grading.service_timeout_s)
    start_ray(compose(["cluster=local", "cluster.num_cpus=4", "cluster.emulated_gpus=1"]).cluster, wait_s)
    from orchestrator.services import start_serve

    # as a sweep starts it: with the waits a busy machine needs (a sweep then joins this Serve, keeping its settings)
    start_serve("127.0.0.1", grading_port, wait_s)
    from contracts.runs import get_or_create_registry

    get_or_create_registry(tmp_path_factory.mktemp("registry") / "journal.jsonl")  # as a sweep makes it
    yield ray
    serve.shutdown()
    stop_ray()


def _serve_apps() -> set[str]:
    import ray

    if not ray.is_initialized():
        return set()
    from ray import serve

    try:
        return set(serve.status().applications)
    except Exception:  # Serve not started in this session (yet)
        return set()


@pytest.fixture(scope="module", autouse=True)
def serve_apps_go_with_their_module():
    """A test module's Serve applications (graders, rollout services, proxies) are removed when it ends: each holds
    a CPU of the session cluster's four, and a later module's deployment would wait for a free one forever."""
    before = _serve_apps()
    yield
    from contracts.serving import remove

    for name in sorted(_serve_apps() - before):
        remove(name)


def load_script(path: Path):
    """A built-in agent's script as a module, importing what lies beside it (the agent client, the task's
    render/parse) as it does from a workspace's code/."""
    import importlib.util
    import sys

    for name in ("a2rl_client", "task_prompt"):
        sys.modules.pop(name, None)  # another folder's copies
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"agent_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


@pytest.fixture
def run_sweep(ray_cluster, cache_dir, grading_port, tmp_path):
    """Run a sweep in-process on the session cluster; returns (plan, printed output, output_dir)."""
    from orchestrator.runner import run_sweep as _run

    def go(overrides: list[str], output_dir: Path | None = None):
        out_dir = output_dir or tmp_path / "out"
        # unscoped services ("grading.scope="): this session's sweeps share graders, as their module's tests expect
        cfg = compose([f"output_dir={out_dir}", f"cache_dir={cache_dir}", f"grading.port={grading_port}",
                       "grading.scope=", "logger=none", "cluster.emulated_gpus=1", "grading.keep_running=true",
                       *overrides])
        buf = io.StringIO()
        plan = _run(cfg, out=buf)
        return plan, buf.getvalue(), out_dir

    return go
