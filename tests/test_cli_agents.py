"""The real agent CLIs (Claude Code, Codex, Gemini CLI, OpenCode) driven through a2rl, offline.

The set-up installs the versions pinned in conf/agent/*.yaml from the npm registry into a cache reused between
runs ($A2RL_CLI_CACHE, default ~/.cache/a2rl/npm-cli). Each CLI then runs in real sweeps: its adapter, the
bubblewrap sandbox, the driver proxy (a Serve deployment), and a scripted upstream on 127.0.0.1 speaking the
provider's real protocol in place of the paid API. The scripted model asks the CLI to run one shell command that
writes files, submits a copy of the base model to the grader with curl, and then says it is done.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from agents.cli import get_adapter
from agents.cli.base import build_prompt
from agents.cli.session import AgentSession, CliUnavailable, find_cli
from agents.proxy.usage import Usage
from contracts.records import DRIVER_CALLS
from contracts.specs import ConfigError
from orchestrator.ledger import Ledger
from orchestrator.sweep import expand
from tests.conftest import ROOT, compose
from tests.support.cells import cells_ended
from tests.support.fake_upstream import FakeUpstream, shell_script

CLIS = ("claude_code", "codex", "gemini_cli", "opencode")
KEY_VAR = "A2RL_TEST_REAL_KEY"
REAL_KEY = "sk-real-" + secrets.token_hex(16)
USAGE = Usage(input_tokens=1000, output_tokens=50, cached_tokens=200)
PRICES = {"price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0, "price_cached_input_per_mtok": 0.3}
COST_PER_CALL = (800 * 3.0 + 200 * 0.3 + 50 * 15.0) / 1e6
# What the scripted model asks every CLI to run: leave a file in code/, dump the environment the agent sees (to
# check no real key is in it), submit a copy of the base model with curl, and keep the grader's answer and its status.
SUBMIT = ("env > code/agent_env.txt; mkdir -p output && cp -r model/. output/m && "
          "curl -s -X POST \"$GRADING_SERVER_URL/submit\" -H \"Authorization: Bearer $A2RL_RUN_TOKEN\" "
          "-H 'Content-Type: application/json' -d '{\"model_path\": \"output/m\"}' > code/submission.json "
          "&& curl -s \"$GRADING_SERVER_URL/status\" -H \"Authorization: Bearer $A2RL_RUN_TOKEN\" > code/status.json "
          "&& echo SUBMITTED")


# -- installing the pinned CLIs ----------------------------------------------------------------------------------

def pins() -> dict[str, str]:
    """agent name -> 'package@version', from conf/agent/<name>.yaml."""
    out = {}
    for name in CLIS:
        conf = yaml.safe_load((ROOT / "conf" / "agent" / f"{name}.yaml").read_text())
        out[name] = f"{get_adapter(conf['adapter']).package}@{conf['version']}"
    return out


def cli_prefix() -> Path:
    specs = sorted(pins().values())
    root = Path(os.environ.get("A2RL_CLI_CACHE") or Path.home() / ".cache" / "a2rl" / "npm-cli").expanduser()
    return root / hashlib.sha256(" ".join(specs).encode()).hexdigest()[:12]


def install_clis() -> Path:
    """npm-install the pinned CLIs once into the cache (atomically: a half-done install is never used)."""
    prefix = cli_prefix()
    bin_dir = prefix / "bin"
    if all((bin_dir / get_adapter(n).executable).exists() for n in CLIS):
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (Node.js >= 20 with npm is needed to install the agent CLIs)")
    tmp = prefix.with_name(f"{prefix.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # Install scripts must run: Claude Code's and OpenCode's put their native binary in place.
    proc = subprocess.run([npm, "install", "--global", "--prefix", str(tmp), "--no-audit", "--no-fund",
                           "--loglevel=error", *sorted(pins().values())],
                          capture_output=True, text=True, timeout=500)  # inside pytest's 600 s
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.fail(f"npm install of the agent CLIs failed:\n{proc.stderr[-3000:]}")
    try:
        os.rename(tmp, prefix)
    except OSError:  # another session installed it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return bin_dir


@pytest.fixture(scope="module")
def cli_bin() -> Path:
    return install_clis()


# -- sweeps -----------------------------------------------------------------------------------------------------

def fake_driver(name: str, provider: str, fake: FakeUpstream, model: str, **extra) -> dict:
    base = fake.url + "/v1" if provider.startswith("openai") else fake.url
    return {"name": name, "provider": provider, "model": model, "base_url": base, "api_key_env": KEY_VAR,
            **PRICES, **extra}


def hydra_value(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("'", "\\'") + "'"


def drivers_override(drivers: list[dict]) -> str:
    """sweep.drivers as inline driver configs (the fake's port changes every run, so no conf/driver file fits)."""
    items = ["{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in d.items()) + "}" for d in drivers]
    return f"sweep.drivers=[{','.join(items)}]"


def agent_sweeps(cache_dir, grading_port, tmp_path_factory, cli_path: str):
    """A sweep runner for agents found in cli_path (folders, comma-separated), the real key set for the proxy only
    while it lives; the fixtures of the CLI and Python agents' modules yield it."""
    from orchestrator.runner import run_sweep

    os.environ[KEY_VAR] = REAL_KEY  # the orchestrator's environment: only the proxy gets it from there

    def go(name: str, overrides: list[str]) -> Path:
        out = tmp_path_factory.mktemp(name) / "out"
        cfg = compose([f"output_dir={out}", f"cache_dir={cache_dir}", f"grading.port={grading_port}", "logger=none",
                       "grading.scope=", "cluster.emulated_gpus=1", "grading.keep_running=true",
                       f"cli_path=[{cli_path}]", "driver_proxy.backoff_s=0.05", "sweep=demo", "sweep.seeds=[0]",
                       *overrides])
        run_sweep(cfg, out=io.StringIO())
        return out

    yield go
    os.environ.pop(KEY_VAR, None)


@pytest.fixture(scope="module")
def linked_bin(cli_bin, tmp_path_factory) -> Path:
    """The CLIs' folder reached through a symbolic link (a user's ~/clis -> the install's bin/): the sweeps use it, so
    npm's relative links from bin/ into its packages must land in the real prefix inside the sandbox."""
    link = tmp_path_factory.mktemp("linked") / "agent-clis"
    link.symlink_to(cli_bin, target_is_directory=True)
    return link


@pytest.fixture(scope="module")
def sweep_runner(ray_cluster, cache_dir, grading_port, tmp_path_factory, linked_bin):
    yield from agent_sweeps(cache_dir, grading_port, tmp_path_factory, str(linked_bin))


@dataclasses.dataclass
class Run:
    out: Path
    fake: FakeUpstream
    cells: dict          # (agent, driver) -> ledger row
    events: dict         # cell_id -> events

    def of(self, agent: str, driver: str) -> tuple[dict, list[dict]]:
        row = self.cells[(agent, driver)]
        return row, self.events[row["cell_id"]]


def collect(out: Path, fake: FakeUpstream) -> Run:
    ledger = Ledger(out / "ledger.sqlite")
    rows = ledger.cells()
    cells = {(r["agent"], r["driver"]): r for r in rows.values()}
    events = {cid: ledger.events(cid) for cid in rows}
    ledger.close()
    return Run(out, fake, cells, events)


MODELS = {"fake-anthropic": "claude-fake", "fake-openai": "gpt-fake", "fake-vllm": "Qwen/fake-7B",
          "fake-gemini": "gemini-fake"}
LOCAL_WINDOW = 16000   # below OpenCode's shipped output_limit (16384): every call of it was refused before
MAIN_CELLS = [("claude_code", "fake-anthropic"), ("codex", "fake-openai"), ("codex", "fake-vllm"),
              ("gemini_cli", "fake-gemini"), ("opencode", "fake-anthropic"), ("opencode", "fake-openai"),
              ("opencode", "fake-vllm"), ("opencode", "fake-gemini")]


@pytest.fixture(scope="module")
def main_run(sweep_runner):
    """Every CLI with every driver protocol it speaks, in one sweep. The first two upstream answers are 429s. The
    fake-vllm model is served like vLLM with a window of LOCAL_WINDOW tokens, refusing larger max_tokens."""
    fake = FakeUpstream(script=shell_script(SUBMIT, "Submitted the model. Done."), usage=USAGE, expect_key=REAL_KEY,
                        fail_first=2, fail_status=429, retry_after=0.2, served_model=MODELS["fake-vllm"],
                        max_model_len=LOCAL_WINDOW).start()
    providers = {"fake-anthropic": "anthropic", "fake-openai": "openai", "fake-vllm": "openai-compatible",
                 "fake-gemini": "gemini"}
    drivers = [fake_driver(name, provider, fake, MODELS[name]) for name, provider in providers.items()]
    try:  # 600 s bounds a cell, the scripted model's "done" ends it: 150 s ran out for three CLIs on a loaded machine
        out = sweep_runner("cli-main", [f"sweep.agents=[{','.join(CLIS)}]", drivers_override(drivers),
                                        "sweep.budget.wall_time_s=600", "sweep.budget.max_submissions=2",
                                        "logger=wandb", "logger.mode=offline"])
    finally:
        fake.stop()
    return collect(out, fake)


def driver_calls(events: list[dict]) -> list[dict]:
    return [e["payload"] for e in events if e["kind"] == "driver_usage"]


def trace(events: list[dict]) -> list[dict]:
    return [e["payload"] for e in events if e["kind"] == "agent_trace"]


def attempt_dir(run: Run, row: dict) -> Path:
    return run.out / "cells" / row["cell_id"] / "attempt-1"


# -- the real CLIs, end to end ----------------------------------------------------------------------------------

@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_cli_completes_and_its_submission_reaches_the_ledger(main_run, agent, driver):
    row, events = main_run.of(agent, driver)
    adir = attempt_dir(main_run, row)
    stderr = (adir / "agent.stderr").read_text(errors="replace")[-1500:]
    assert row["status"] == "completed", (row, stderr)
    assert row["driver"] == driver  # the configured label, nothing guessed
    subs = [e["payload"] for e in events if e["kind"] == "submission"]
    assert len(subs) == 1 and subs[0]["score"] is not None and "copy_of_base" in subs[0]["flags"], subs
    workspace = Path(json.loads((adir / "outcome.json").read_text())["workspace"])
    answer = json.loads((workspace / "code" / "submission.json").read_text())
    assert answer["submission_id"] == subs[0]["submission_id"]  # the agent saw the grader's answer
    status = json.loads((workspace / "code" / "status.json").read_text())  # asked right after submitting
    assert status["submissions_used"] == 1 and status["driver_calls"] >= 1, status
    assert status["tokens_used"] == 1050 * status["driver_calls"], status  # the proxy's meter, call by call
    outcome = json.loads((adir / "outcome.json").read_text())
    assert outcome["agent_version"] == pins()[agent].rpartition("@")[2]
    # its session stores in its HOME hold the prompt (the instructions with their examples): given text, no alarm
    assert not row["contaminated"] and outcome["contamination"] == [], outcome["contamination"]
    assert outcome["driver_usage"]["calls"] == len(driver_calls(events))


@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_tokens_and_cost_metered_exactly_as_the_upstream_reported(main_run, agent, driver):
    _, events = main_run.of(agent, driver)
    calls = driver_calls(events)
    assert len(calls) >= 2  # the tool call and the final answer (OpenCode also asks for a title)
    for c in calls:
        assert c["status"] == 200 and c["driver"] == driver, c
        assert (c["input_tokens"], c["output_tokens"], c["cached_tokens"]) == (1000, 50, 200), c
        assert c["cost_usd"] == pytest.approx(COST_PER_CALL)
        assert c["model"] == MODELS[driver]  # whatever the CLI asked for, the configured model answered


@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_the_model_receives_the_built_prompt_byte_for_byte(main_run, agent, driver):
    """The user message the upstream received (its body as it arrived, decoded, nothing repaired) holds the prompt
    a2rl built, whole and unchanged: its preamble names the cell's own workspace, so no other cell's call matches."""
    row, _ = main_run.of(agent, driver)
    adir = attempt_dir(main_run, row)
    workspace = Path(json.loads((adir / "outcome.json").read_text())["workspace"])
    prompt = build_prompt(workspace, {})
    assert prompt.count('"') > 10  # the instructions' examples: what a CLI that quotes its argument would escape
    mine = [r for r in main_run.fake.requests if str(workspace) in r.raw.decode()]
    assert mine and all(json.loads(r.raw) == r.body for r in mine)
    assert any(prompt in r.user_texts() for r in mine), [t[:200] for r in mine for t in r.user_texts()]
    if agent == "opencode":  # given on its standard input, kept beside its stdout; its title agent off
        assert (adir / "agent.stdin").read_bytes() == prompt.encode()
        assert not any(t.startswith("Generate a title") for r in mine for t in r.user_texts()), len(mine)


def test_a_local_models_window_caps_every_request_at_the_wire(main_run):
    """The fake-vllm server lists its model with max_model_len (as vLLM does): every request of that model the
    upstream received asks for at most a quarter of it. OpenCode asks for that itself; Codex 0.169 ignores its
    model_max_output_tokens and sends no cap, so the proxy writes one in and records that it did."""
    local = [r for r in main_run.fake.requests if r.model == MODELS["fake-vllm"]]
    fields = {"openai_chat": ("max_completion_tokens", "max_tokens"), "openai_responses": ("max_output_tokens",)}
    asked = [[r.body.get(f) for f in fields[r.protocol] if f in r.body] for r in local]
    assert local and all(a and all(n <= LOCAL_WINDOW // 4 for n in a) for a in asked), asked
    for agent in ("codex", "opencode"):
        row, events = main_run.of(agent, "fake-vllm")
        calls = driver_calls(events)
        capped = [c["capped"] for c in calls if c["capped"]]
        if agent == "codex":  # every call: the CLI sent none
            assert capped == [{"max_output_tokens": [None, LOCAL_WINDOW // 4]}] * len(calls), calls
        else:  # OpenCode's own max_tokens is the same limit: nothing to change
            assert capped == [], calls


def test_driver_usage_goes_to_each_cells_wandb_run(main_run):
    runs = sorted(main_run.out.glob("wandb/offline-run-*/*.wandb"))
    assert len(runs) == len(MAIN_CELLS)
    for path in runs:
        data = path.read_bytes()  # the run's protobuf log: metric names are stored as they are
        assert b"driver/tokens" in data and b"driver/cost_usd" in data and b"submission/score" in data


def test_every_upstream_call_is_metered_once(main_run):
    recorded = sum(len(driver_calls(ev)) for ev in main_run.events.values())
    assert recorded == main_run.fake.calls - main_run.fake.failures  # the scripted 429s are retries, not calls


def test_upstream_429_is_retried_and_the_wait_recorded(main_run):
    retried = [c for ev in main_run.events.values() for c in driver_calls(ev) if c["attempts"] > 1]
    assert sum(c["attempts"] - 1 for c in retried) == 2
    assert all(c["status"] == 200 and c["wait_s"] >= 0.19 for c in retried), retried


@pytest.mark.parametrize("agent, driver", MAIN_CELLS)
def test_the_clis_own_trace_becomes_events(main_run, agent, driver):
    _, events = main_run.of(agent, driver)
    t = trace(events)
    calls = [e for e in t if e["type"] == "tool_call"]
    assert any("/submit" in json.dumps(e["input"]) for e in calls), t
    results = [e for e in t if e["type"] == "tool_result"]
    assert any(e["ok"] and "SUBMITTED" in (e.get("output") or "") for e in results), t
    assert any(e["type"] == "message" and "Done" in (e.get("text") or "") for e in t), t
    usage = [e for e in t if e["type"] == "usage"]
    assert usage and sum(u["input_tokens"] for u in usage) > 0
    # what the CLI says it used never exceeds what the proxy metered (it does not count its side calls)
    metered = driver_calls(events)
    assert sum(u["input_tokens"] for u in usage) <= sum(c["input_tokens"] for c in metered)
    assert (attempt_dir(main_run, main_run.of(agent, driver)[0]) / "trace.jsonl").exists()


def test_the_ledger_holds_exactly_what_the_record_files_hold(main_run, cache_dir):
    """Calls and trace events reach the ledger live; a resume's reconcile from the files finds nothing missing."""
    from contracts.layout import Layout
    from orchestrator.records import reconcile

    ledger = Ledger(main_run.out / "ledger.sqlite")
    try:
        assert reconcile(ledger, Layout.make(main_run.out, cache_dir)) == {"events_added": 0, "adopted": 0,
                                                                            "requeued": 0}
    finally:
        ledger.close()


def key_leaks(main_run, ray_cluster) -> list[str]:
    """Files of the sweep's output and of Ray's logs that hold the real driver key."""
    session_dir = Path(ray_cluster._private.worker._global_node.get_session_dir_path())
    return [str(p) for root in (main_run.out, session_dir / "logs") for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and p.stat().st_size < 50_000_000
            and REAL_KEY.encode() in p.read_bytes()]


def test_the_real_key_never_reaches_the_agent_its_workspace_or_any_log(main_run, ray_cluster):
    for agent, driver in MAIN_CELLS:
        row, _ = main_run.of(agent, driver)
        workspace = Path(json.loads((attempt_dir(main_run, row) / "outcome.json").read_text())["workspace"])
        env = (workspace / "code" / "agent_env.txt").read_text()
        assert "A2RL_DRIVER_KEY=a2rl-" in env and KEY_VAR not in env and REAL_KEY not in env
    assert key_leaks(main_run, ray_cluster) == []
    assert all(r.api_key == REAL_KEY for r in main_run.fake.requests)  # only the proxy used it, upstream


def test_the_proxy_refuses_unknown_and_closed_keys(main_run, grading_port):
    row, _ = main_run.of("claude_code", "fake-anthropic")
    workspace = Path(json.loads((attempt_dir(main_run, row) / "outcome.json").read_text())["workspace"])
    env = dict(line.split("=", 1) for line in (workspace / "code" / "agent_env.txt").read_text().splitlines()
               if "=" in line)
    body = {"model": "x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    url = f"http://127.0.0.1:{grading_port}/driver/v1/messages"
    for key in ("a2rl-made-up", env["A2RL_DRIVER_KEY"], REAL_KEY):  # unknown, closed with its cell, the real one
        r = httpx.post(url, json=body, headers={"x-api-key": key, "anthropic-version": "2023-06-01"}, timeout=30,
                       trust_env=False)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error", r.text


# -- budgets ----------------------------------------------------------------------------------------------------

def test_budget_exhaustion_mid_conversation_stops_the_agent_and_names_the_limit(sweep_runner):
    """A model that never stops asking for commands: Claude Code on a free driver runs out of tokens, Codex on an
    expensive one runs out of money. The first upstream answer is a 503, retried by the proxy."""
    keep_working = shell_script("echo still working")

    def never_done(req):
        return keep_working(dataclasses.replace(req, tool_results=[]))

    fake = FakeUpstream(script=never_done, usage=USAGE, expect_key=REAL_KEY, fail_first=1, fail_status=503).start()
    free = fake_driver("fake-free", "anthropic", fake, "claude-fake", price_input_per_mtok=0.0,
                       price_output_per_mtok=0.0, price_cached_input_per_mtok=0.0)
    pricey = fake_driver("fake-pricey", "openai", fake, "gpt-fake", price_input_per_mtok=2000.0,
                         price_output_per_mtok=0.0, price_cached_input_per_mtok=2000.0)   # $2 a call
    try:
        out = sweep_runner("cli-budget", ["sweep.agents=[claude_code,codex]", drivers_override([free, pricey]),
                                          "sweep.budget.wall_time_s=600", "+sweep.budget.max_tokens=3000",
                                          "+sweep.budget.max_cost_usd=2.5"])
    finally:
        fake.stop()
    run = collect(out, fake)
    for (agent, driver), limit, spent_of, cap in ((("claude_code", "fake-free"), "tokens",
                                                   lambda c: c["input_tokens"] + c["output_tokens"], 3000),
                                                  (("codex", "fake-pricey"), "cost", lambda c: c["cost_usd"], 2.5)):
        row, events = run.of(agent, driver)
        assert (row["status"], row["limit_hit"]) == ("budget_exhausted", limit), row
        calls = driver_calls(events)
        answered = [c for c in calls if c["status"] == 200]
        assert sum(spent_of(c) for c in answered) >= cap
        # the call that crossed the limit was the last one the upstream saw; later ones were refused
        assert sum(spent_of(c) for c in answered[:-1]) < cap, calls
        assert all(c["error"].startswith("budget_exhausted") for c in calls if c["status"] != 200), calls
    answered = [c for ev in run.events.values() for c in driver_calls(ev) if c["status"] == 200]
    assert len(answered) == fake.calls - fake.failures  # refused calls never reached the upstream
    retried = [c for ev in run.events.values() for c in driver_calls(ev) if c["attempts"] > 1]
    assert len(retried) == 1 and retried[0]["status"] == 200 and retried[0]["wait_s"] > 0


# -- a CLI that is not installed --------------------------------------------------------------------------------

LLM_BY_CURL = r'''
curl -s -o code/reply.json -w '%{http_code}' "$A2RL_DRIVER_BASE_URL/v1/messages" -H "x-api-key: $A2RL_DRIVER_KEY" \
     -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
     -d '{"model": "any", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}' > code/status.txt
'''


def test_a_missing_cli_is_an_infra_error_naming_its_install_command(sweep_runner, tmp_path):
    """Beside it, a plain command agent with a driver reaches its LLM through the proxy's A2RL_DRIVER_* variables."""
    if shutil.which("claude"):
        pytest.skip("claude is installed on this machine's PATH")
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY).start()
    empty = tmp_path / "no-clis"
    empty.mkdir()
    script = tmp_path / "llm_by_curl.sh"
    script.write_text(LLM_BY_CURL)
    own_agent = (f"{{name:llm_by_curl,kind:command,needs_driver:true,files:['{script}'],"
                 f"command:'bash code/{script.name}'}}")
    try:
        out = sweep_runner("cli-missing", [f"sweep.agents=[claude_code,{own_agent}]",
                                           drivers_override([fake_driver("fake-anthropic", "anthropic", fake, "m")]),
                                           f"cli_path=[{empty}]", "cluster.max_retries=2"])
    finally:
        fake.stop()
    run = collect(out, fake)
    row, events = run.of("claude_code", "fake-anthropic")
    assert row["status"] == "infra_error" and row["attempts"] == 1, row  # not retried: a retry cannot install it
    assert "npm install -g @anthropic-ai/claude-code@" + pins()["claude_code"].rpartition("@")[2] in row["error"]
    adir = out / "cells" / row["cell_id"] / "attempt-1"
    assert not (adir / "driver_calls.jsonl").exists() and driver_calls(events) == []  # nothing was spent
    assert not list((out / "workspaces").glob(f"{row['cell_id']}-*"))

    row, events = run.of("llm_by_curl", "fake-anthropic")
    assert row["status"] == "completed", row
    workspace = Path(json.loads((attempt_dir(run, row) / "outcome.json").read_text())["workspace"])
    assert (workspace / "code" / "status.txt").read_text() == "200"
    assert [(c["input_tokens"], c["output_tokens"]) for c in driver_calls(events)] == [(1000, 50)]
    assert fake.calls == 1


WAIT_THEN_OUTLIVE = r'''
curl -s -o /dev/null "$A2RL_DRIVER_BASE_URL/v1/messages" -H "x-api-key: $A2RL_DRIVER_KEY" \
     -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
     -d '{"model": "any", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}'
deadline=$(python -c 'import json; print(json.load(open("run.json"))["deadline"])')
python -c "import time; time.sleep(max(0.0, $deadline + 1 - time.time()))"  # past the deadline the budget set
curl -s "$GRADING_SERVER_URL/status" -H "Authorization: Bearer $A2RL_RUN_TOKEN" > code/status.json
'''


def test_working_time_moves_the_deadline_by_the_rate_limits_waits(sweep_runner, tmp_path):
    """budget.working_time=true: the agent's one LLM call waits 6 s on a 429's Retry-After, so it may work 6 s past
    the deadline run.json names; the outcome says how long it worked and how long it waited."""
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY, fail_first=1, fail_status=429, retry_after=6).start()
    script = tmp_path / "outlive.sh"
    script.write_text(WAIT_THEN_OUTLIVE)
    own_agent = (f"{{name:outlive,kind:command,needs_driver:true,files:['{script}'],"
                 f"command:'bash code/{script.name}'}}")
    try:
        out = sweep_runner("working-time", [f"sweep.agents=[{own_agent}]", "sweep.budget.wall_time_s=20",
                                            "+sweep.budget.working_time=true",
                                            drivers_override([fake_driver("fake-anthropic", "anthropic", fake, "m")])])
    finally:
        fake.stop()
    run = collect(out, fake)
    row, events = run.of("outlive", "fake-anthropic")
    outcome = json.loads((attempt_dir(run, row) / "outcome.json").read_text())
    assert row["status"] == "completed", row  # it outlived the deadline the budget set, and was not stopped
    calls = [json.loads(line) for line in (attempt_dir(run, row) / DRIVER_CALLS).read_text().splitlines()]
    assert [(c["status"], c["attempts"]) for c in calls] == [(200, 2)], calls  # answered after one 429
    # The Retry-After's 6 s, not a 0.05 s backoff. Not `>= 6`: the proxy's event loop (uvloop) keeps time in whole
    # milliseconds and may wake up to 1 ms before time.monotonic() says 6 s have passed (5.99964 s was recorded).
    assert calls[0]["wait_s"] > 5.9, calls
    # What the outcome and the deadlines say is the recorded wait, whatever the machine's speed.
    assert outcome["waiting_s"] == sum(c["wait_s"] for c in calls), outcome
    assert outcome["working_s"] == pytest.approx(
        outcome["elapsed_s"] - outcome["setup_s"] - outcome["teardown_s"] - outcome["waiting_s"]), outcome
    workspace = Path(outcome["workspace"])
    given = json.loads((workspace / "run.json").read_text())
    status = json.loads((workspace / "code" / "status.json").read_text())
    assert status["remaining_s"] > 0, status  # asked after the budget's deadline: the grader's deadline moved too,
    grader_deadline = given["started_at"] + status["elapsed_s"] + status["remaining_s"]  # (one `now` in both)
    assert grader_deadline == pytest.approx(given["deadline"] + outcome["waiting_s"], abs=1e-3), (given, status)


TOO_LONG = r'''
echo "$A2RL_DRIVER_CONTEXT_WINDOW" > code/window.txt
status=$(curl -s -o code/reply.json -w '%{http_code}' "$A2RL_DRIVER_BASE_URL/chat/completions" \
     -H "authorization: Bearer $A2RL_DRIVER_KEY" -H 'content-type: application/json' \
     -d '{"model": "any", "max_tokens": 16384, "messages": [{"role": "user", "content": "hi"}]}')
[ "$status" = 200 ]   # a CLI gives up on a 400 the same way: exit 1, its stderr saying little
'''


def test_a_local_server_refusing_the_agents_call_is_the_cells_error(sweep_runner, tmp_path):
    """A model served like vLLM with a 2,048-token window refuses max_tokens=16384; the agent exits 1 on it. The
    cell's error is the server's reason, not just the exit code; the agent was told the window."""
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY, served_model="Qwen/fake-7B", max_model_len=2048).start()
    script = tmp_path / "too_long.sh"
    script.write_text(TOO_LONG)
    own_agent = f"{{name:too_long,kind:command,needs_driver:true,files:['{script}'],command:'bash code/{script.name}'}}"
    try:
        out = sweep_runner("local-refusal", [f"sweep.agents=[{own_agent}]", drivers_override(
            [fake_driver("fake-vllm", "openai-compatible", fake, "Qwen/fake-7B")])])
    finally:
        fake.stop()
    run = collect(out, fake)
    row, events = run.of("too_long", "fake-vllm")
    assert row["status"] == "agent_error", row
    with pytest.raises(AssertionError, match="too_long x fake-vllm"):  # the real-server test's check fails on it
        cells_ended([row])
    assert row["error"].startswith("the driver's server refused the agent's call (HTTP 400 on /v1/chat/completions): "
                                   "max_tokens=16384 cannot be greater than max_model_len=2048."), row["error"]
    assert "agent exited with code 1" in row["error"]
    outcome = json.loads((attempt_dir(run, row) / "outcome.json").read_text())
    assert outcome["error"] == row["error"]
    assert (Path(outcome["workspace"]) / "code" / "window.txt").read_text().strip() == "2048"


def test_a_cli_folder_behind_a_link_is_used_where_it_points(cli_bin, linked_bin, tmp_path):
    adapter = get_adapter("codex")
    exe, _ = find_cli(adapter, None, [str(linked_bin)], "codex")
    assert exe == cli_bin.resolve() / "codex"  # the prefix the relative link into lib/node_modules needs
    # a link to the executable itself, from a folder of its own: every folder on the way is shown to the sandbox
    own = tmp_path / "bin"
    own.mkdir()
    (own / "codex").symlink_to(cli_bin / "codex")
    exe, _ = find_cli(adapter, None, [str(own)], "codex")
    assert exe == own.resolve() / "codex"
    cell = expand(compose(["sweep=demo", "agent=codex", "driver=gpt"]))[0]
    session = AgentSession(cell, adapter, exe)
    shown = session.readonly_paths([])
    assert {tmp_path.resolve(), cli_bin.resolve().parent} <= set(shown), shown
    assert any(p.name == "codex" and p.parent.name == "@openai" for p in shown), shown  # the package itself


def test_a_different_installed_version_is_refused(cli_bin):
    adapter = get_adapter("codex")
    exe, version = find_cli(adapter, pins()["codex"].rpartition("@")[2], [str(cli_bin)], "codex")
    assert exe == cli_bin / "codex" and version == pins()["codex"].rpartition("@")[2]
    with pytest.raises(CliUnavailable, match=r"pins @openai/codex 0\.0\.1 but .* is version .*npm install -g "
                                             r"@openai/codex@0\.0\.1"):
        find_cli(adapter, "0.0.1", [str(cli_bin)], "codex")


# -- configuration (no Ray) -------------------------------------------------------------------------------------

def test_cli_agents_are_crossed_only_with_drivers_speaking_their_protocol():
    cells = expand(compose(["sweep=demo", "sweep.seeds=[0]", f"sweep.agents=[{','.join(CLIS)}]",
                            "sweep.drivers=[claude-sonnet,gpt,gemini,local-vllm]"]))
    pairs = sorted((c.agent.name, c.driver.name) for c in cells)
    assert pairs == sorted([("claude_code", "claude-sonnet"), ("codex", "gpt"), ("codex", "local-vllm"),
                            ("gemini_cli", "gemini"), ("opencode", "claude-sonnet"), ("opencode", "gpt"),
                            ("opencode", "gemini"), ("opencode", "local-vllm")])
    with pytest.raises(ConfigError, match="agent 'claude_code' speaks anthropic but no driver in the sweep does "
                                          r"\(gpt: openai\); add one such, e.g. claude-sonnet"):
        expand(compose(["sweep=demo", "agent=claude_code", "driver=gpt"]))
    with pytest.raises(ConfigError, match="adapter='nope' is not a CLI adapter"):
        expand(compose(["sweep=demo", "agent=claude_code", "agent.adapter=nope", "driver=gpt"]))


# What Codex 0.169's `codex exec --json` printed here against the fake upstream serving a model it does not know: its
# fallback-metadata warning (an item of type error), then, for a reply the server ended at max_output_tokens, its
# error and failed turn (it exits 1 then).
CODEX_LINES = [
    {"type": "thread.started", "thread_id": "01a223c6-e9ba-7722-bcd6-981863d5f436"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "error", "message": "Model metadata for `smollm2` not "
     "found. Defaulting to fallback metadata; this can degrade performance and cause issues."}},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_1", "type": "agent_message",
                                        "text": "Partial answer that was cut"}},
    {"type": "error", "message": "Incomplete response returned, reason: max_output_tokens"},
    {"type": "turn.failed", "error": {"message": "Incomplete response returned, reason: max_output_tokens"}},
]


def test_a_clis_warnings_are_notices_not_errors():
    """Codex writes its warnings as items of type error (its errors are `error` and `turn.failed` events); Gemini CLI
    marks a warning with severity: both are `notice` events in the trace, the errors stay errors."""
    codex = get_adapter("codex").parser()
    events = [e for line in CODEX_LINES for e in codex.feed(line)]
    assert [(e["type"], e["source"]) for e in events if e["type"] in ("notice", "error")] == [
        ("notice", "item.completed/error"), ("error", "error"), ("error", "turn.failed")]
    assert "fallback metadata" in events[1]["message"]
    gemini = get_adapter("gemini_cli").parser()
    said = [e for line in ({"type": "error", "severity": "warning", "message": "Loop detected, stopping execution"},
                           {"type": "error", "severity": "error", "message": "quota"})
            for e in gemini.feed(line) + gemini.flush()]
    assert [(e["type"], e["message"]) for e in said] == [("notice", "Loop detected, stopping execution"),
                                                         ("error", "quota")]


def test_codex_on_a_local_model_says_its_fallback_notice_as_a_notice(main_run):
    """Codex does not know the local model's metadata: its trace has the notice, and no error event."""
    _, events = main_run.of("codex", "fake-vllm")
    t = trace(events)
    assert any(e["type"] == "notice" and "fallback metadata" in e["message"] for e in t), t
    assert not [e for e in t if e["type"] == "error"], t


def test_the_report_says_how_many_of_a_cells_driver_calls_were_capped_and_at_what(main_run):
    """The Codex cell on the local model (its window reported by the server): report.md lists its capped calls
    (every call: the CLI sent no cap) and the cap, a quarter of the window; the sweep table flags them."""
    from orchestrator.analysis.report import build_report
    from orchestrator.summary import summary_rows

    row, events = main_run.of("codex", "fake-vllm")
    n = len(driver_calls(events))
    cid = row["cell_id"]
    text = (build_report(main_run.out) / "report.md").read_text()
    assert f"| [{cid}](../cells/{cid}/report.md) | {row['task']} | codex | fake-vllm | 0 | {n} of {n} | " \
        f"{LOCAL_WINDOW // 4} |" in text, text[text.find("## Capped"):][:2000]
    ledger = Ledger(main_run.out / "ledger.sqlite")
    try:
        rows = {(r["agent"], r["driver"]): r for r in summary_rows(ledger, list(main_run.events))}
    finally:
        ledger.close()
    assert f"driver calls capped x{n} at {LOCAL_WINDOW // 4} output tokens" in rows["codex", "fake-vllm"]["flags"]
    assert not any("capped" in f for f in rows["opencode", "fake-vllm"]["flags"])  # it asked for the limit itself


def test_a_cli_that_printed_nothing_parseable_leaves_an_empty_trace_that_says_why(tmp_path):
    """A CLI killed before its first JSON line (or printing only plain text): trace.jsonl is there, empty, and the
    outcome's `trace` says why, with what it did print."""
    from agents.cli.session import AgentSession

    [cell] = expand(compose(["sweep=demo", "sweep.seeds=[0]", "sweep.agents=[codex]", "sweep.drivers=[gpt]"]))
    session = AgentSession(cell, get_adapter("codex"))
    stdout, trace_path = tmp_path / "agent.stdout", tmp_path / "trace.jsonl"
    stdout.write_text("Reading prompt from stdin...\n")
    assert session.pump(stdout, trace_path) == 0 and not trace_path.exists()  # while it runs: nothing yet
    assert session.pump(stdout, trace_path, final=True) == 0
    assert trace_path.read_bytes() == b""
    assert session.summary()["trace"] == "empty: the CLI printed nothing its trace parser reads (29 bytes on stdout)"


def test_a_sweep_whose_local_model_would_be_counted_from_characters_says_so_once(tmp_path):
    """Four cells on one local driver whose server has no /tokenize and whose tokenizer is not on this machine: one
    warning, naming the driver and the fix, from the check run_sweep makes before any cell starts."""
    from orchestrator.runner import check_counting

    server = FakeUpstream().start()   # OpenAI-compatible, without vLLM's /tokenize
    try:
        local = fake_driver("local-nocount", "openai-compatible", server, "m", tokenizer=str(tmp_path / "none"))
        cells = expand(compose(["sweep=demo", "sweep.seeds=[0,1]", "sweep.agents=[codex,opencode]",
                                drivers_override([local])]))
        out = io.StringIO()
        check_counting(cells, out)
    finally:
        server.stop()
    assert len(cells) == 4
    [line] = out.getvalue().splitlines()
    assert line.startswith("[a2rl] WARNING: driver local-nocount: driver.tokenizer=") and "Fix: " in line, line
