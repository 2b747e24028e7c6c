"""The driver proxy: one ASGI app for a whole sweep, metering every agent->LLM call per cell.

Agents talk to it as if it were their provider (Anthropic messages, OpenAI chat completions and
responses, Gemini generateContent), with a per-cell key. It forwards to the cell's real upstream with
the real key, passes streams through as they arrive, reads token usage from the upstream's own usage
fields (a stream cut before its usage arrived is counted by agents.proxy.estimate and marked so),
records each call durably, and refuses calls (in the provider's error shape) once the cell's
token or cost budget is spent.

Run it with uvicorn (`python -m agents.proxy`, or `agents.proxy.ThreadServer` in-process) or as a
Ray Serve deployment (`agents.proxy.deployment`). Cells live in one process: run one replica.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import time
from contextlib import asynccontextmanager

import aiohttp
import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from agents.proxy import upstream
from agents.proxy.cells import Cell, CellRegistry
from agents.proxy.estimate import Tokenizers, anthropic_count, estimate, server_tokens, tokenize_url
from agents.proxy.protocols import (budget_status, cap_output, caller_key, error_response, gemini_model_path,
                                    parse_json, prepare_body, protocol_of_path, response_headers,
                                    upstream_headers, upstream_url)
from agents.proxy.upstream import RetryPolicy, UpstreamUnreachable, send, served_context_window
from agents.proxy.usage import (ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, StreamMeter, Usage,
                                body_at_output_limit, usage_from_body)

ADMIN_HEADER = "x-a2rl-admin-token"


class ProxyState(CellRegistry):
    """Everything one proxy process holds: its cells, retry policy and upstream connection pool.

    register_cell / close_cell / usage (from CellRegistry) are the orchestrator's API; over HTTP the
    same calls are under /admin when an admin_token is set.
    """

    def __init__(self, retry: RetryPolicy | None = None, admin_token: str | None = None,
                 environ: dict | None = None, read_timeout_s: float = 600.0, max_connections: int = 2048,
                 trust_env: bool = True):
        super().__init__(environ)
        self.retry = retry or RetryPolicy()
        self.admin_token = admin_token
        self.read_timeout_s, self.max_connections, self.trust_env = read_timeout_s, max_connections, trust_env
        self.client: aiohttp.ClientSession | None = None   # opened by the app's lifespan, in its loop
        self.tokenizers = Tokenizers()
        self.background: set[asyncio.Task] = set()   # cut calls being counted (held: the loop keeps weak refs)

    def register_cell(self, cell_id: str, driver: dict, limits: dict | None, records_path: str,
                      key: str | None = None) -> str:
        key = super().register_cell(cell_id, driver, limits, records_path, key)
        self.tokenizers.warm(driver.get("tokenizer"))
        return key

    async def context_window(self, key: str) -> int | None:
        """The cell's driver model's context window: the driver's `context_window`, else (an OpenAI-compatible
        server) what the server reports, else None (unknown: the agent keeps its own limits)."""
        cell = self._cells[key]
        if cell.driver.get("context_window"):
            return int(cell.driver["context_window"])
        if cell.driver["provider"] != "openai-compatible":
            return None
        return await served_context_window(cell.driver, cell.real_key, self.trust_env)


def make_app(state: ProxyState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app):
        state.client = upstream.session(state.read_timeout_s, state.max_connections, state.trust_env)
        try:
            yield
        finally:
            await state.client.close()

    app = FastAPI(title="a2rl driver proxy", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.post("/v1/messages")
    async def anthropic_messages(request: Request):
        return await proxy_call(state, request, ANTHROPIC, "/v1/messages")

    @app.post("/v1/messages/count_tokens")
    async def anthropic_count_tokens(request: Request):
        return await proxy_call(state, request, ANTHROPIC, "/v1/messages/count_tokens")

    @app.post("/v1/chat/completions")
    async def openai_chat(request: Request):
        return await proxy_call(state, request, OPENAI_CHAT, "/v1/chat/completions")

    @app.post("/v1/responses")
    async def openai_responses(request: Request):
        return await proxy_call(state, request, OPENAI_RESPONSES, "/v1/responses")

    @app.post("/v1beta/models/{model_method}")
    async def gemini(request: Request, model_method: str):
        return await proxy_call(state, request, GEMINI, "/v1beta/models/", model_method)

    @app.get("/health")
    async def health():
        return {"ok": True}

    # --- orchestrator API over HTTP (for a proxy in another process); off without an admin token ---
    def admin_ok(request: Request) -> bool:
        given = request.headers.get(ADMIN_HEADER, "")
        return bool(state.admin_token) and secrets.compare_digest(given, state.admin_token)

    def admin_denied():
        return JSONResponse({"error": "admin token missing or wrong", "code": "unauthorized"}, 401)

    @app.post("/admin/cells")
    async def admin_register(request: Request):
        if not admin_ok(request):
            return admin_denied()
        spec = parse_json(await request.body()) or {}
        try:
            key = state.register_cell(spec.get("cell_id"), spec.get("driver") or {}, spec.get("limits"),
                                      spec.get("records_path"))
        except (ValueError, TypeError, OSError) as exc:
            return JSONResponse({"error": str(exc), "code": "bad_cell"}, 400)
        return {"key": key}

    @app.get("/admin/cells/{key}")
    async def admin_usage(request: Request, key: str):
        if not admin_ok(request):
            return admin_denied()
        try:
            return state.usage(key)
        except KeyError:
            return JSONResponse({"error": "unknown key", "code": "not_found"}, 404)

    @app.delete("/admin/cells/{key}")
    async def admin_close(request: Request, key: str):
        if not admin_ok(request):
            return admin_denied()
        try:
            return state.close_cell(key)
        except KeyError:
            return JSONResponse({"error": "unknown key", "code": "not_found"}, 404)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def not_found(path: str):
        # Unrouted endpoints are refused, not forwarded: they would be calls nobody meters.
        return error_response(protocol_of_path("/" + path), 404, "not_found",
                              f"/{path} is not an endpoint the a2rl driver proxy serves")

    return app


async def proxy_call(state: ProxyState, request: Request, protocol: str, path: str,
                     model_method: str | None = None) -> Response:
    t0, start = time.time(), time.monotonic()
    cell = state.get(caller_key(request.headers, request.query_params))
    if cell is None:
        return error_response(protocol, 401, "auth", "invalid API key: unknown or closed a2rl proxy key")
    cell.in_flight += 1   # every path below records the call once, which counts it back down
    driver = cell.driver
    endpoint = path + (model_method or "")

    def record(usage=Usage(), *, status, error=None, stream=False, wait_s=0.0, attempts=0,
               model=driver.get("model"), requested=None, now=False, estimated=None, capped=None,
               at_output_limit=False):
        """Record this call; returns an awaitable that ends once the line is on disk (now=True:
        already on disk, for paths that cannot await, i.e. a cancelled stream)."""
        # a capped reply that generated the cap's tokens was cut there, whatever the server says of it (a server may
        # end such a reply as `completed`)
        sent = [s for _, s in (capped or {}).values() if isinstance(s, int)]
        at_output_limit = bool(at_output_limit or (sent and usage.output_tokens >= min(sent)))
        call = dict(t=t0, endpoint=endpoint, model=model, requested_model=requested, usage=usage,
                    latency_s=time.monotonic() - start, wait_s=wait_s, attempts=attempts,
                    status=status, stream=stream, error=error, estimated=estimated, capped=capped,
                    at_output_limit=at_output_limit)
        return cell.record(**call) if now else cell.record_async(**call)

    raw = await request.body()
    body = parse_json(raw)
    if body is None:
        await record(status=400, error="request body is not a JSON object")
        return error_response(protocol, 400, "bad_request", "request body is not a JSON object")

    limit = cell.exhausted()
    if limit:
        cell.refused += 1
        message = budget_message(cell, limit)
        status = budget_status(protocol)
        await record(status=status, error=f"budget_exhausted: {limit}", requested=body.get("model"))
        return error_response(protocol, status, "budget", message)

    if protocol == GEMINI:
        upstream_mm, requested, method = gemini_model_path(model_method, driver)
        path = path + upstream_mm
        model, stream, changed = upstream_mm.partition(":")[0], method == "streamGenerateContent", False
    else:
        body, stream, requested, changed = prepare_body(protocol, body, driver)
        model = body.get("model")
    # a count of the prompt generates nothing (and Anthropic's refuses a max_tokens field)
    capped = None if path.endswith("/count_tokens") else cap_output(protocol, body, cell.max_output_tokens)
    content = json.dumps(body).encode() if changed or capped else raw
    facts = dict(model=model, requested=requested, stream=stream, capped=capped)

    url = upstream_url(driver, path, request.query_params.multi_items())
    headers = upstream_headers(request.headers, driver, cell.real_key)
    try:
        resp, attempts, wait_s = await send(state.client, "POST", url, headers, content, state.retry)
    except UpstreamUnreachable as exc:
        await record(status=502, error=f"upstream unreachable: {exc}", wait_s=exc.wait_s,
                     attempts=exc.attempts, **facts)
        return error_response(protocol, 502, "upstream", "upstream unreachable after retries")
    facts.update(wait_s=wait_s, attempts=attempts)
    out_headers = response_headers(resp.headers)

    if stream and resp.status < 400:
        meter = StreamMeter(protocol)
        meter.sse = "text/event-stream" in resp.headers.get("content-type", "")
        count = None
        if protocol == ANTHROPIC and driver["provider"] == "anthropic":
            count_url = upstream_url(driver, "/v1/messages/count_tokens", [])
            count = lambda: anthropic_count(state.client, count_url, headers, body)  # noqa: E731

        tokenize = None
        if driver["provider"] == "openai-compatible":  # the served model's own count (vLLM's /tokenize)
            tokenize = lambda payload: server_tokens(state.client, tokenize_url(driver), headers, payload)  # noqa: E731

        async def estimated(usage: Usage) -> tuple[Usage, dict]:
            return await estimate(protocol, body, usage, meter.events(), driver.get("tokenizer"), state.tokenizers,
                                  count, tokenize)
        return StreamingResponse(relay(state, cell, resp, meter, record, facts, estimated), status_code=resp.status,
                                 headers=out_headers)

    try:
        data = await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        await record(status=502, error=f"upstream read failed: {type(exc).__name__}", **facts)
        return error_response(protocol, 502, "upstream", "upstream connection lost")
    finally:
        resp.release()
    data = scrub(cell, data)
    ok = resp.status < 400
    usage = usage_from_body(protocol, data) if ok else Usage()
    error = None if ok else data[:500].decode("utf-8", "replace")
    await record(usage, status=resp.status, error=error, at_output_limit=ok and body_at_output_limit(protocol, data),
                 **facts)
    return Response(data, status_code=resp.status, headers=out_headers)


async def relay(state: ProxyState, cell: Cell, resp: aiohttp.ClientResponse, meter: StreamMeter, record,
                facts: dict, estimated):
    """Pass the upstream stream on chunk by chunk while metering it; record when it ends.

    The record is written (and fsynced) before the response closes, also when the agent hangs up
    or the upstream breaks off mid-stream: tokens the upstream produced are counted either way, from
    the stream's final usage, or (cut before it) by estimated(usage so far) -> (usage, how).
    """
    try:
        async for chunk in resp.content.iter_any():
            meter.feed(chunk)
            yield scrub(cell, chunk)
    except BaseException as exc:   # noqa: BLE001 - recorded, then re-raised
        # Cancelled (the agent hung up, or its deadline killed it) or broken: nothing can be awaited here any more.
        error = "client disconnected" if isinstance(exc, (anyio.get_cancelled_exc_class(), GeneratorExit)) \
            else f"stream broken: {type(exc).__name__}: {exc}"
        usage = meter.usage()
        facts = {**facts, "at_output_limit": meter.at_limit}
        if meter.final:
            record(usage, status=resp.status, error=error, now=True, **facts)
        else:   # counted in a task of its own; the call stays in flight (close_cell waits) until its line is on disk
            task = asyncio.get_running_loop().create_task(
                record_estimated(record, estimated, usage, status=resp.status, error=error, **facts))
            state.background.add(task)
            task.add_done_callback(state.background.discard)
        resp.close()   # drop the connection: the rest of this stream is not wanted
        raise
    else:
        usage = meter.usage()
        facts = {**facts, "at_output_limit": meter.at_limit}
        if meter.final:
            await record(usage, status=resp.status, **facts)
        else:   # ended without its usage (a server that sends none): counted like a cut stream
            await record_estimated(record, estimated, usage, status=resp.status, **facts)
    finally:
        resp.release()


async def record_estimated(record, estimated, usage: Usage, **call) -> None:
    """Record a call whose stream never gave its final usage, with the tokens counted by the proxy."""
    try:
        usage, how = await estimated(usage)
    except Exception as exc:  # noqa: BLE001 - the call must be recorded whatever the count's trouble
        how = {"failed": f"{type(exc).__name__}: {exc}"}
    await record(usage, estimated=how, **call)


def scrub(cell: Cell, data: bytes) -> bytes:
    """Never let the real key reach the agent, even if an upstream error message quotes it."""
    if cell.real_key:
        key = cell.real_key.encode()
        if key in data:
            data = data.replace(key, b"***")
    return data


def budget_message(cell: Cell, limit: str) -> str:
    if limit == "max_tokens":
        spent = f"{cell.input_tokens + cell.output_tokens} tokens used of max_tokens={cell.max_tokens}"
    else:
        spent = f"${cell.cost_usd:.4f} spent of max_cost_usd={cell.max_cost_usd}"
    return f"a2rl budget exhausted for this run ({limit}: {spent}); no further model calls are allowed"
