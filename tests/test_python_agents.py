"""The agent systems that are Python programs (OpenHands; RD-Agent, refused), driven through a2rl like the npm CLIs.

The set-up installs each pinned version from PyPI into a virtual environment of its own under a cache reused between
runs ($A2RL_PY_AGENT_CACHE, default ~/.cache/a2rl/py-agents/<hash of the pins>): about 750 MB and several minutes
for OpenHands, 2 GB for RD-Agent, so the tests that need them are kept out of the default run: `scripts/test -m
python_agents` runs them. OpenHands then runs in real sweeps: its adapter, the bubblewrap sandbox, the driver proxy,
and the scripted upstream (tests/support/fake_upstream.py) speaking the provider's protocol in place of the paid API.
"""
from __future__ import annotations

import dataclasses
import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agents.cli import get_adapter
from agents.cli.base import PythonCli, build_prompt
from agents.cli.session import CliUnavailable, find_cli
from tests.conftest import ROOT
from tests.support.fake_upstream import FakeUpstream, shell_script
from tests.test_cli_agents import (
    agent_sweeps,
    key_leaks,
    COST_PER_CALL,
    KEY_VAR,
    REAL_KEY,
    SUBMIT,
    USAGE,
    attempt_dir,
    collect,
    driver_calls,
    drivers_override,
    fake_driver,
    trace,
)

# The tests that install the programs (a cold install takes minutes) run with `-m python_agents` only.
needs_install = pytest.mark.python_agents
pytestmark = pytest.mark.timeout(3600)


def pin(name: str) -> tuple[PythonCli, str]:
    conf = yaml.safe_load((ROOT / "conf" / "agent" / f"{name}.yaml").read_text())
    adapter = get_adapter(conf["adapter"])
    assert isinstance(adapter, PythonCli)
    return adapter, str(conf["version"])


def find_python(version: str) -> str | None:
    """pythonX.Y on PATH, else one pyenv keeps (its shims hide versions that are not selected)."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    kept = sorted(glob.glob(f"{root}/versions/{version}*/bin/python{version}"))
    return kept[-1] if kept else None


def install(name: str) -> Path:
    """pip-install the pinned program once into its own environment in the cache; returns its bin/. A venv cannot
    be moved, so it is built in place and marked complete last: a half-done one is removed and built again. A lock
    keeps two sessions from building it at once."""
    adapter, version = pin(name)
    key = hashlib.sha256(f"{adapter.package}=={version} python{adapter.python}".encode()).hexdigest()[:12]
    root = Path(os.environ.get("A2RL_PY_AGENT_CACHE") or Path.home() / ".cache" / "a2rl" / "py-agents").expanduser()
    env_dir = root / key / name
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(env_dir.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session installing the same pin: wait for it, not clobber it
        if (env_dir / ".a2rl-complete").exists():
            return env_dir / "bin"
        python = find_python(adapter.python)
        if python is None:
            pytest.skip(f"python{adapter.python} is not installed (the {name} agent needs it)")
        shutil.rmtree(env_dir, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(env_dir)], check=True, timeout=300)
        proc = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                               f"{adapter.package}=={version}"], capture_output=True, text=True, timeout=3000)
        if proc.returncode != 0:
            shutil.rmtree(env_dir, ignore_errors=True)
            pytest.fail(f"pip install of {adapter.package}=={version} failed:\n{proc.stderr[-3000:]}")
        (env_dir / ".a2rl-complete").write_text(version)
    return env_dir / "bin"


@pytest.fixture(scope="module")
def agent_bins() -> dict[str, Path]:
    return {"openhands": install("openhands")}


@pytest.fixture(scope="module")
def sweep_runner(ray_cluster, cache_dir, grading_port, tmp_path_factory, agent_bins):
    yield from agent_sweeps(cache_dir, grading_port, tmp_path_factory, ",".join(str(p) for p in agent_bins.values()))


MODELS = {"fake-anthropic": "claude-fake", "fake-openai": "gpt-fake", "fake-vllm": "Qwen/fake-7B",
          "fake-gemini": "gemini-fake"}
PROVIDERS = {"fake-anthropic": "anthropic", "fake-openai": "openai", "fake-vllm": "openai-compatible",
             "fake-gemini": "gemini"}
MAIN_CELLS = [("openhands", d) for d in PROVIDERS]


@pytest.fixture(scope="module")
def main_run(sweep_runner):
    """OpenHands with every driver protocol it speaks, in one sweep. The first two upstream answers are 429s."""
    fake = FakeUpstream(script=shell_script(SUBMIT, "Submitted the model. Done."), usage=USAGE, expect_key=REAL_KEY,
                        fail_first=2, fail_status=429, retry_after=0.2).start()
    drivers = [fake_driver(name, provider, fake, MODELS[name]) for name, provider in PROVIDERS.items()]
    try:
        out = sweep_runner("py-main", ["sweep.agents=[openhands]", drivers_override(drivers),
                                       "sweep.budget.wall_time_s=300", "sweep.budget.max_submissions=2"])
    finally:
        fake.stop()
    return collect(out, fake)


@needs_install
@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_it_completes_and_its_submission_reaches_the_ledger(main_run, agent, driver):
    row, events = main_run.of(agent, driver)
    adir = attempt_dir(main_run, row)
    assert row["status"] == "completed", (row, (adir / "agent.stderr").read_text(errors="replace")[-1500:])
    subs = [e["payload"] for e in events if e["kind"] == "submission"]
    assert len(subs) == 1 and subs[0]["score"] is not None and "copy_of_base" in subs[0]["flags"], subs
    outcome = json.loads((adir / "outcome.json").read_text())
    workspace = Path(outcome["workspace"])
    answer = json.loads((workspace / "code" / "submission.json").read_text())
    assert answer["submission_id"] == subs[0]["submission_id"]
    status = json.loads((workspace / "code" / "status.json").read_text())
    assert status["submissions_used"] == 1 and status["tokens_used"] == 1050 * status["driver_calls"], status
    assert outcome["agent_version"] == pin(agent)[1]
    assert outcome["driver_usage"]["calls"] == len(driver_calls(events))


@needs_install
@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_tokens_and_cost_metered_exactly(main_run, agent, driver):
    _, events = main_run.of(agent, driver)
    calls = driver_calls(events)
    assert len(calls) >= 2  # the tool call and the final answer
    for c in calls:
        assert c["status"] == 200 and c["driver"] == driver, c
        assert (c["input_tokens"], c["output_tokens"], c["cached_tokens"]) == (1000, 50, 200), c
        assert c["cost_usd"] == pytest.approx(COST_PER_CALL)
        assert c["model"] == MODELS[driver]
    recorded = sum(len(driver_calls(ev)) for ev in main_run.events.values())
    assert recorded == main_run.fake.calls - main_run.fake.failures  # the scripted 429s are retries, not calls


@needs_install
@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_its_event_log_becomes_trace_events(main_run, agent, driver):
    _, events = main_run.of(agent, driver)
    t = trace(events)
    calls = [e for e in t if e["type"] == "tool_call"]
    assert any(e["tool"] == "terminal" and "/submit" in json.dumps(e["input"]) for e in calls), t
    assert any(e["type"] == "tool_result" and e["ok"] and "SUBMITTED" in (e.get("output") or "") for e in t), t
    assert any(e["type"] == "message" and "Done" in (e.get("text") or "") for e in t), t
    usage = [e for e in t if e["type"] == "usage"]
    metered = driver_calls(events)
    # its own totals (from its conversation state) are the proxy's, call for call
    assert sum(u["input_tokens"] for u in usage) == sum(c["input_tokens"] for c in metered), (usage, metered)
    assert sum(u["output_tokens"] for u in usage) == sum(c["output_tokens"] for c in metered)


@needs_install
@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_the_model_receives_the_built_prompt_byte_for_byte(main_run, agent, driver):
    """As for the npm CLIs (tests/test_cli_agents.py): the prompt a2rl built is one user text part, whole, of a
    request the upstream received, read from the body as it arrived."""
    row, _ = main_run.of(agent, driver)
    workspace = Path(json.loads((attempt_dir(main_run, row) / "outcome.json").read_text())["workspace"])
    prompt = build_prompt(workspace, {})
    mine = [r for r in main_run.fake.requests if str(workspace) in r.raw.decode()]
    assert mine and all(json.loads(r.raw) == r.body for r in mine)
    assert any(prompt in r.user_texts() for r in mine), [t[:200] for r in mine for t in r.user_texts()]


@needs_install
def test_the_real_key_never_reaches_the_agent_its_workspace_or_any_log(main_run, ray_cluster):
    for agent, driver in MAIN_CELLS:
        row, _ = main_run.of(agent, driver)
        workspace = Path(json.loads((attempt_dir(main_run, row) / "outcome.json").read_text())["workspace"])
        env = (workspace / "code" / "agent_env.txt").read_text()
        assert "A2RL_DRIVER_KEY=a2rl-" in env and KEY_VAR not in env and REAL_KEY not in env
        settings = json.loads((workspace / ".home" / ".openhands" / "agent_settings.json").read_text())
        assert settings["llm"]["api_key"].startswith("a2rl-")  # the per-cell key, closed with its cell
    assert key_leaks(main_run, ray_cluster) == []
    assert all(r.api_key == REAL_KEY for r in main_run.fake.requests)


@needs_install
def test_budget_exhaustion_stops_it_and_names_the_limit(sweep_runner):
    """A model that never stops asking for commands runs OpenHands out of tokens."""
    keep_working = shell_script("echo still working")

    def never_done(req):
        return keep_working(dataclasses.replace(req, tool_results=[]))

    fake = FakeUpstream(script=never_done, usage=USAGE, expect_key=REAL_KEY).start()
    driver = fake_driver("fake-free", "anthropic", fake, "claude-fake", price_input_per_mtok=0.0,
                         price_output_per_mtok=0.0, price_cached_input_per_mtok=0.0)
    try:
        out = sweep_runner("py-budget", ["sweep.agents=[openhands]", drivers_override([driver]),
                                         "sweep.budget.wall_time_s=200", "+sweep.budget.max_tokens=3000"])
    finally:
        fake.stop()
    run = collect(out, fake)
    row, events = run.of("openhands", "fake-free")
    assert (row["status"], row["limit_hit"]) == ("budget_exhausted", "tokens"), row
    answered = [c for c in driver_calls(events) if c["status"] == 200]
    assert sum(c["input_tokens"] + c["output_tokens"] for c in answered) >= 3000
    assert sum(c["input_tokens"] + c["output_tokens"] for c in answered[:-1]) < 3000
    assert len(answered) == fake.calls  # refused calls never reached the upstream


@needs_install
def test_a_reprompted_cli_starts_a_new_conversation_told_what_is_left(sweep_runner):
    fake = FakeUpstream(script=shell_script(SUBMIT, "Submitted the model. Done."), usage=USAGE,
                        expect_key=REAL_KEY).start()
    try:
        out = sweep_runner("py-reprompt", ["sweep.agents=[openhands]",
                                           drivers_override([fake_driver("fake-anthropic", "anthropic", fake,
                                                                         "claude-fake")]),
                                           "sweep.budget.wall_time_s=400", "sweep.budget.max_submissions=3",
                                           "budget.max_reprompts=1", "budget.reprompt_min_left=0.1"])
    finally:
        fake.stop()
    run = collect(out, fake)
    row, events = run.of("openhands", "fake-anthropic")
    assert row["status"] == "completed", row
    assert [e["payload"]["n"] for e in events if e["kind"] == "reprompt"] == [1]
    assert len([e for e in events if e["kind"] == "submission"]) == 2  # one per session
    told = [r for r in fake.requests if "You stopped early" in r.last_user_text]
    assert told and "submissions left: 2 of 3" in told[0].last_user_text
    assert "# Task: arithmetic" in told[0].last_user_text  # the task follows again
    sessions = {e["session_id"] for e in trace(events) if e["type"] == "usage"}
    assert len(sessions) == 2  # two conversations, each with its own totals


@needs_install
def test_a_missing_program_is_an_infra_error_naming_its_install_command(sweep_runner, tmp_path):
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY).start()
    empty = tmp_path / "no-agents"
    empty.mkdir()
    try:
        out = sweep_runner("py-missing", ["sweep.agents=[openhands]", f"cli_path=[{empty}]",
                                          drivers_override([fake_driver("fake-anthropic", "anthropic", fake, "m")])])
    finally:
        fake.stop()
    row, events = collect(out, fake).of("openhands", "fake-anthropic")
    assert row["status"] == "infra_error" and row["attempts"] == 1, row
    assert "python3.12 -m venv ~/a2rl-agents/openhands && ~/a2rl-agents/openhands/bin/pip install " \
           f"openhands=={pin('openhands')[1]}" in row["error"], row["error"]
    assert driver_calls(events) == [] and fake.calls == 0


@needs_install
def test_a_different_installed_version_is_refused(agent_bins):
    adapter, version = pin("openhands")
    exe, found = find_cli(adapter, version, [str(agent_bins["openhands"])], "openhands")
    assert exe == agent_bins["openhands"] / "openhands" and found == version
    with pytest.raises(CliUnavailable, match=r"pins openhands 0\.0\.1 but .* is version 1\..*pip install "
                                             r"openhands==0\.0\.1"):
        find_cli(adapter, "0.0.1", [str(agent_bins["openhands"])], "openhands")


# -- RD-Agent: its pinned release cannot run a cell -------------------------------------------------------------

def test_rdagent_is_refused_as_an_infra_error_saying_why_before_anything_is_spent(run_sweep, monkeypatch):
    monkeypatch.setenv(KEY_VAR, REAL_KEY)
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY).start()
    try:
        _, _, out = run_sweep(["sweep=demo", "sweep.seeds=[0]", "agent=rdagent", "cluster.max_retries=2",
                               drivers_override([fake_driver("fake-openai", "openai", fake, "gpt-fake")])])
    finally:
        fake.stop()
    row, events = collect(out, fake).of("rdagent", "fake-openai")
    assert row["status"] == "infra_error" and row["attempts"] == 1, row  # not retried: a retry cannot fix it
    assert "rdagent 1.0.0 cannot run a2rl cells" in row["error"] and "RLPostTrainingScen" in row["error"]
    assert "Authorization: Bearer" in row["error"]
    assert driver_calls(events) == [] and fake.calls == 0


@needs_install
def test_the_pinned_rdagent_still_fails_as_its_refusal_says(tmp_path):
    """Re-measures the defect the refusal names on the real install: when this fails, the release runs its loop."""
    from agents.cli.rdagent import UNRUNNABLE

    adapter, version = pin("rdagent")
    assert version in UNRUNNABLE
    python = install("rdagent") / "python"
    for name in ("code", "output", "data"):
        (tmp_path / name).mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "WORKSPACE": str(tmp_path), "TASK": "arithmetic",
           "BASE_MODEL": "tiny", "MODEL_PATH": str(tmp_path / "model"), "DATA_PATH": str(tmp_path / "data"),
           "OUTPUT_DIR": str(tmp_path / "output"), "LITELLM_CHAT_MODEL": "openai/gpt-fake",
           "OPENAI_API_BASE": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "unused"}
    proc = subprocess.run([str(python), "-m", "rdagent.app.rl.loop", "--loop-n", "1"], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "Can't instantiate abstract class RLPostTrainingScen" in proc.stdout + proc.stderr
