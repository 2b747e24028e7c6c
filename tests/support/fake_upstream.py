"""A scripted fake LLM provider speaking the real wire protocols, on 127.0.0.1.

Serves Anthropic messages, OpenAI chat completions and responses, and Gemini generateContent /
streamGenerateContent (SSE with ?alt=sse, a JSON array without), streaming and not, with usage
numbers the script decides. Used by the proxy's tests and benchmark, and to drive the real agent CLIs
offline: the reply comes from a script, a function FakeRequest -> Reply, that looks at the request's
content (tools offered, tool results present), never at call order, because CLIs make side calls.

    fake = FakeUpstream(script=shell_script("ls"), usage=Usage(1000, 50, 200)).start()
    fake.url  # Anthropic/Gemini base URL; OpenAI base URL is fake.url + "/v1"
    ...
    fake.stop()

It also answers Anthropic's /v1/messages/count_tokens (the prompt's tokens: the usage's input count), can hold a
stream after its first events until the caller hangs up (`stall_after`, a call cut mid-stream), and can play a
vLLM server (`served_model` with `max_model_len`): GET /v1/models lists the model with its max_model_len, a call
of that model asking for more output tokens than that is refused with vLLM's 400 and error shape, and POST /tokenize
counts a prompt or chat messages as vLLM's does, with a tokenizer of its own (`served_tokens`: one token a UTF-8 byte,
a ChatML template that drops tools, as SmolLM2's does).

`python -m tests.support.fake_upstream --port 0` runs it in the foreground.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from agents.proxy.usage import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, Usage


@dataclass
class ToolCall:
    name: str
    arguments: dict | str               # a str is sent as it is (a recorded or malformed reply)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None          # None: the FakeUpstream's default usage
    status: int = 200                   # >= 400: answer an error in the provider's shape
    error: str = ""
    cut: bool = False                   # the reply stopped at the request's output limit, as a server says so


@dataclass
class FakeRequest:
    protocol: str
    model: str
    stream: bool
    body: dict
    headers: dict
    api_key: str | None
    tools: dict[str, dict]              # offered tool name -> its JSON schema ({} when none given)
    tool_results: list[str]             # outputs of earlier tool calls, oldest first
    last_user_text: str
    system: str = ""
    url: str = ""                       # path and query as received
    raw: bytes = b""                    # the body as it arrived, byte for byte

    def user_texts(self) -> list[str]:
        return user_texts(self.protocol, self.body)


def user_texts(protocol: str, body: dict) -> list[str]:
    """Each text part of each user message of a request, as sent (a CLI's prompt is one of them, whole)."""
    if protocol == GEMINI:
        return [p["text"] for c in body.get("contents") or [] if c.get("role", "user") == "user"
                for p in c.get("parts") or [] if isinstance(p.get("text"), str)]
    items = body.get("input" if protocol == OPENAI_RESPONSES else "messages")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    out = []
    for m in items:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        parts = [{"text": content}] if isinstance(content, str) else content or []
        out += [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return out


Script = Callable[[FakeRequest], Reply]


def _arguments(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def default_script(req: FakeRequest) -> Reply:
    return Reply(text="Done." if req.tool_results else "Hello from the fake upstream.")


SHELL_TOOLS = ("Bash", "bash", "shell", "exec_command", "run_shell_command", "local_shell", "terminal")


def shell_script(command: str, done_text: str = "Done.") -> Script:
    """Ask for one shell command when a shell tool is offered; finish once a tool result came back."""
    def script(req: FakeRequest) -> Reply:
        if req.tool_results:
            return Reply(text=done_text)
        name = next((n for n in SHELL_TOOLS if n in req.tools), None)
        if name is None:
            return Reply(text=done_text)
        schema = req.tools[name] or {}
        props = schema.get("properties") or {}
        param = next((p for p in ("command", "cmd") if p in props), "command")
        value = ["bash", "-lc", command] if (props.get(param) or {}).get("type") == "array" else command
        args = {param: value}
        for other in schema.get("required") or []:  # e.g. OpenHands' security_risk: a model fills what is required
            if other not in args and (props.get(other) or {}).get("enum"):
                args[other] = props[other]["enum"][0]
        return Reply(tool_calls=[ToolCall(name, args)])
    return script


# --------------------------------------------------------------------------- reading requests

def _text(content) -> str:
    """Text of a message content that is a string or a list of typed parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def read_request(protocol: str, body: dict, model: str, headers: dict, api_key: str | None,
                 stream: bool) -> FakeRequest:
    tools: dict[str, dict] = {}
    results: list[str] = []
    user = ""
    system = ""
    if protocol == ANTHROPIC:
        tools = {t.get("name", ""): t.get("input_schema") or {} for t in body.get("tools") or []}
        system = _text(body.get("system"))
        for m in body.get("messages") or []:
            content = m.get("content")
            blocks = content if isinstance(content, list) else []
            results += [_text(b.get("content")) for b in blocks if b.get("type") == "tool_result"]
            if m.get("role") == "user" and _text(content):
                user = _text(content)
    elif protocol == OPENAI_CHAT:
        for t in body.get("tools") or []:
            fn = t.get("function") or {}
            tools[fn.get("name", t.get("type", ""))] = fn.get("parameters") or {}
        for m in body.get("messages") or []:
            if m.get("role") == "tool":
                results.append(_text(m.get("content")))
            elif m.get("role") == "user":
                user = _text(m.get("content"))
            elif m.get("role") in ("system", "developer"):
                system = _text(m.get("content"))
    elif protocol == OPENAI_RESPONSES:
        for t in body.get("tools") or []:
            tools[t.get("name") or t.get("type", "")] = t.get("parameters") or {}
        system = body.get("instructions") or ""
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else (items or [])
        for item in items:
            if item.get("type", "").endswith("_call_output"):
                out = item.get("output")
                results.append(out if isinstance(out, str) else json.dumps(out))
            elif item.get("role") == "user":
                user = _text(item.get("content")) or user
    elif protocol == GEMINI:  # the API takes its fields in camelCase or snake_case (LiteLLM sends the latter)
        for t in body.get("tools") or []:
            for d in t.get("functionDeclarations") or t.get("function_declarations") or []:
                tools[d.get("name", "")] = d.get("parameters") or d.get("parametersJsonSchema") or {}
        system = _text((body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts"))
        for c in body.get("contents") or []:
            parts = c.get("parts") or []
            results += [json.dumps((p.get("functionResponse") or p.get("function_response") or {}).get("response"))
                        for p in parts if "functionResponse" in p or "function_response" in p]
            if c.get("role", "user") == "user" and _text(parts):
                user = _text(parts)
    return FakeRequest(protocol, model, stream, body, headers, api_key, tools, results, user, system)


def served_tokens(payload: dict) -> int:
    """The fake served model's count of a /tokenize request: its text, or its chat messages rendered through a
    ChatML template that drops tools, one token a UTF-8 byte."""
    if "messages" not in payload:
        return len(str(payload.get("prompt", "")).encode())
    text = ""
    for m in payload["messages"]:
        content = _text(m.get("content")) + "".join(json.dumps(c.get("function")) for c in m.get("tool_calls") or [])
        text += f"<|im_start|>{m.get('role')}\n{content}<|im_end|>\n"
    if payload.get("add_generation_prompt", True):
        text += "<|im_start|>assistant\n"
    return len(text.encode())


# --------------------------------------------------------------------------- writing replies

def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(n, 1)))
    return [text[i:i + size] for i in range(0, len(text), size)]


def _sse(event: str | None, data) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def error_body(protocol: str, status: int, message: str) -> dict:
    if protocol == ANTHROPIC:
        kind = {401: "authentication_error", 429: "rate_limit_error", 529: "overloaded_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if protocol == GEMINI:
        state = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(
            status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
        return {"error": {"code": status, "message": message, "status": state}}
    kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def anthropic_json(reply: Reply, model: str, u: Usage) -> dict:
    content = ([{"type": "text", "text": reply.text}] if reply.text else []) + [
        {"type": "tool_use", "id": "toolu_" + c.id, "name": c.name, "input": c.arguments} for c in reply.tool_calls]
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": _stop(reply, "tool_use" if reply.tool_calls else "end_turn"),
            "stop_sequence": None, "usage": anthropic_usage(u)}


def _stop(reply: Reply, reason: str, at_limit: str = "max_tokens") -> str:
    """The reply's stop reason: the provider's word for its output limit where the reply is `cut`."""
    return at_limit if reply.cut else reason


def anthropic_usage(u: Usage, output: int | None = None) -> dict:
    return {"input_tokens": u.input_tokens - u.cached_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": u.cached_tokens,
            "output_tokens": u.output_tokens if output is None else output}


def anthropic_sse(reply: Reply, model: str, u: Usage, n: int) -> list[bytes]:
    msg = anthropic_json(Reply(), model, u)
    msg.update(content=[], stop_reason=None, usage=anthropic_usage(u, output=1))
    out = [_sse("message_start", {"type": "message_start", "message": msg}), _sse("ping", {"type": "ping"})]
    index = 0
    if reply.text:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}}))
        out += [_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": p}})
                for p in _pieces(reply.text, n)]
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for i, c in enumerate(reply.tool_calls, start=index):
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
            "type": "tool_use", "id": "toolu_" + c.id, "name": c.name, "input": {}}}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps(c.arguments)}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": _stop(reply, "tool_use" if reply.tool_calls else "end_turn"), "stop_sequence": None},
        "usage": {"output_tokens": u.output_tokens}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def chat_usage(u: Usage) -> dict:
    return {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
            "total_tokens": u.total_tokens, "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def _chat_tool_calls(reply: Reply) -> list[dict]:
    return [{"id": "call_" + c.id, "type": "function",
             "function": {"name": c.name, "arguments": _arguments(c)}} for c in reply.tool_calls]


def chat_json(reply: Reply, model: str, u: Usage) -> dict:
    message = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = _chat_tool_calls(reply)
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message,
                                         "finish_reason": _stop(reply, "tool_calls" if reply.tool_calls
                                                                else "stop", "length")}],
            "usage": chat_usage(u)}


def chat_sse(reply: Reply, model: str, u: Usage, n: int, include_usage: bool) -> list[bytes]:
    base = {"id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def chunk(delta, finish=None):
        return _sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in _pieces(reply.text, n)]
    for i, call in enumerate(_chat_tool_calls(reply)):
        out.append(chunk({"tool_calls": [{"index": i, **call}]}))
    out.append(chunk({}, _stop(reply, "tool_calls" if reply.tool_calls else "stop", "length")))
    if include_usage:   # like the real API: only when stream_options.include_usage is set
        out.append(_sse(None, {**base, "choices": [], "usage": chat_usage(u)}))
    out.append(b"data: [DONE]\n\n")
    return out


def responses_usage(u: Usage) -> dict:
    return {"input_tokens": u.input_tokens, "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens}


def _responses_items(reply: Reply) -> list[dict]:
    items = []
    if reply.text:
        items.append({"type": "message", "id": "msg_" + uuid.uuid4().hex[:24], "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
    items += [{"type": "function_call", "id": "fc_" + c.id, "call_id": "call_" + c.id, "name": c.name,
               "arguments": json.dumps(c.arguments), "status": "completed"} for c in reply.tool_calls]
    return items


def responses_json(reply: Reply, model: str, u: Usage, items=None) -> dict:
    return {"id": "resp_" + uuid.uuid4().hex[:24], "object": "response", "created_at": int(time.time()),
            "status": _stop(reply, "completed", "incomplete"), "model": model,
            "output": _responses_items(reply) if items is None else items, "usage": responses_usage(u), "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if reply.cut else None}


def responses_sse(reply: Reply, model: str, u: Usage, n: int) -> list[bytes]:
    seq = itertools.count()
    final = responses_json(reply, model, u)
    started = {**final, "status": "in_progress", "output": [], "usage": None}

    def ev(kind, **data):
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    out = [ev("response.created", response=started), ev("response.in_progress", response=started)]
    for i, item in enumerate(final["output"]):
        if item["type"] == "message":
            out.append(ev("response.output_item.added", output_index=i, item={**item, "content": [],
                                                                                "status": "in_progress"}))
            part = {"type": "output_text", "text": "", "annotations": []}
            out.append(ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0,
                          part=part))
            out += [ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0,
                       delta=p) for p in _pieces(reply.text, n)]
            out.append(ev("response.output_text.done", item_id=item["id"], output_index=i, content_index=0,
                          text=reply.text))
            out.append(ev("response.content_part.done", item_id=item["id"], output_index=i, content_index=0,
                          part={**part, "text": reply.text}))
        else:
            out.append(ev("response.output_item.added", output_index=i, item={**item, "arguments": "",
                                                                                "status": "in_progress"}))
            out.append(ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i,
                          delta=item["arguments"]))
            out.append(ev("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                          arguments=item["arguments"]))
        out.append(ev("response.output_item.done", output_index=i, item=item))
    out.append(ev(_stop(reply, "response.completed", "response.incomplete"), response=final))
    return out


def gemini_usage(u: Usage, final: bool = True) -> dict:
    meta = {"promptTokenCount": u.input_tokens, "cachedContentTokenCount": u.cached_tokens,
            "totalTokenCount": u.total_tokens if final else u.input_tokens}
    if final:
        meta["candidatesTokenCount"] = u.output_tokens
    return meta


def _gemini_chunk(parts, model, u: Usage, finish: bool, rid: str, cut: bool = False) -> dict:
    cand = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = "MAX_TOKENS" if cut else "STOP"
    return {"candidates": [cand], "usageMetadata": gemini_usage(u, final=finish), "modelVersion": model,
            "responseId": rid}


def gemini_json(reply: Reply, model: str, u: Usage) -> dict:
    parts = ([{"text": reply.text}] if reply.text else []) + [
        {"functionCall": {"name": c.name, "args": c.arguments}} for c in reply.tool_calls]
    return _gemini_chunk(parts, model, u, True, uuid.uuid4().hex[:16], reply.cut)


def gemini_chunks(reply: Reply, model: str, u: Usage, n: int) -> list[dict]:
    # Like the real API: every chunk carries usageMetadata; only the last has the output count.
    rid = uuid.uuid4().hex[:16]
    parts = [[{"text": p}] for p in _pieces(reply.text, n)]
    parts += [[{"functionCall": {"name": c.name, "args": c.arguments}}] for c in reply.tool_calls]
    parts = parts or [[{"text": ""}]]
    return [_gemini_chunk(p, model, u, i == len(parts) - 1, rid, reply.cut) for i, p in enumerate(parts)]


# --------------------------------------------------------------------------- the server

class FakeUpstream:
    """The fake provider. `requests` keeps every FakeRequest it answered (for assertions)."""

    def __init__(self, script: Script = default_script, usage: Usage = Usage(1200, 80, 200),
                 fail_first: int = 0, fail_status: int = 429, retry_after: float | None = None,
                 expect_key: str | None = None, chunks: int = 8, chunk_delay_s: float = 0.0,
                 keep_requests: bool = True, stall_after: int | None = None, served_model: str | None = None,
                 max_model_len: int | None = None):
        self.script, self.usage = script, usage
        self.stall_after = stall_after
        self.served_model, self.max_model_len = served_model, max_model_len
        self.count_calls = 0
        self.tokenize_calls: list[dict] = []
        self.fail_first, self.fail_status, self.retry_after = fail_first, fail_status, retry_after
        self.expect_key = expect_key
        self.chunks, self.chunk_delay_s = chunks, chunk_delay_s
        self.keep_requests = keep_requests
        self.requests: list[FakeRequest] = []
        self.calls = 0
        self.failures = 0
        self._lock = threading.Lock()
        self.app = self._make_app()
        self._server = None

    @property
    def url(self) -> str:
        return self._server.url

    def start(self, host: str = "127.0.0.1", port: int = 0) -> "FakeUpstream":
        from agents.proxy.server import ThreadServer
        self._server = ThreadServer(self.app, host, port).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.stop()

    def _make_app(self) -> FastAPI:
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        @app.post("/v1/messages")
        async def messages(request: Request):
            return await self._answer(request, ANTHROPIC)

        @app.post("/v1/messages/count_tokens")
        async def count_tokens(request: Request):
            body = json.loads(await request.body() or b"{}")
            unknown = set(body) - {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"}
            if unknown:   # the real endpoint refuses fields of a messages call it does not take (max_tokens, stream)
                return JSONResponse(error_body(ANTHROPIC, 400, f"{sorted(unknown)[0]}: Extra inputs are not "
                                                               "permitted"), 400)
            self.count_calls += 1
            return JSONResponse({"input_tokens": self.usage.input_tokens})

        @app.get("/v1/models")
        async def models():
            if self.served_model is None:
                return JSONResponse(error_body(OPENAI_CHAT, 404, "not found"), 404)
            return JSONResponse({"object": "list", "data": [{
                "id": self.served_model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": self.served_model, "parent": None, "max_model_len": self.max_model_len, "permission": []}]})

        @app.post("/tokenize")
        async def tokenize(request: Request):
            if self.served_model is None:
                return JSONResponse({"detail": "Not Found"}, 404)
            payload = json.loads(await request.body() or b"{}")
            n = served_tokens(payload)
            self.tokenize_calls.append(payload)
            return JSONResponse({"count": n, "max_model_len": self.max_model_len, "tokens": list(range(n)),
                                 "token_strs": None})

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            return await self._answer(request, OPENAI_CHAT)

        @app.post("/v1/responses")
        async def responses(request: Request):
            return await self._answer(request, OPENAI_RESPONSES)

        @app.post("/v1beta/models/{model_method}")
        async def gemini(request: Request, model_method: str):
            model, _, method = model_method.partition(":")
            return await self._answer(request, GEMINI, model, method == "streamGenerateContent")

        return app

    async def _answer(self, request: Request, protocol: str, model: str | None = None,
                      stream: bool | None = None) -> Response:
        raw = await request.body()
        body = json.loads(raw or b"{}")
        headers = dict(request.headers)
        auth = headers.get("authorization", "")
        key = (headers.get("x-api-key") or headers.get("x-goog-api-key")
               or (auth[7:] if auth.lower().startswith("bearer ") else None) or request.query_params.get("key"))
        model = model or body.get("model", "")
        stream = bool(body.get("stream")) if stream is None else stream
        req = read_request(protocol, body, model, headers, key, stream)
        req.url = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        req.raw = raw
        with self._lock:
            self.calls += 1
            if self.keep_requests:
                self.requests.append(req)
            if self.expect_key is not None and key != self.expect_key:
                return JSONResponse(error_body(protocol, 401, "invalid api key"), 401)
            failing = self.failures < self.fail_first
            self.failures += failing
        if failing:
            headers = {} if self.retry_after is None else {"retry-after": str(self.retry_after)}
            return JSONResponse(error_body(protocol, self.fail_status, "scripted failure"), self.fail_status,
                                headers=headers)
        if refused := self._too_long(protocol, model, body):
            return refused
        reply = self.script(req)
        if reply.status >= 400:
            return JSONResponse(error_body(protocol, reply.status, reply.error or "scripted error"), reply.status)
        u = reply.usage or self.usage
        if not stream:
            render = {ANTHROPIC: anthropic_json, OPENAI_CHAT: chat_json, OPENAI_RESPONSES: responses_json,
                      GEMINI: gemini_json}[protocol]
            return JSONResponse(render(reply, model, u))
        n = self.chunks
        if protocol == ANTHROPIC:
            events = anthropic_sse(reply, model, u, n)
        elif protocol == OPENAI_CHAT:
            events = chat_sse(reply, model, u, n, bool((body.get("stream_options") or {}).get("include_usage")))
        elif protocol == OPENAI_RESPONSES:
            events = responses_sse(reply, model, u, n)
        elif request.query_params.get("alt") == "sse":
            events = [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in gemini_chunks(reply, model, u, n)]
        else:   # Gemini's default stream: one JSON array, sent piece by piece
            chunks = [json.dumps(c) for c in gemini_chunks(reply, model, u, n)]
            events = [("[" if i == 0 else ",\r\n") .encode() + c.encode() for i, c in enumerate(chunks)] + [b"]"]
            return StreamingResponse(self._paced(events), media_type="application/json")
        return StreamingResponse(self._paced(events), media_type="text/event-stream")

    def _too_long(self, protocol: str, model: str, body: dict) -> Response | None:
        """vLLM's refusal of max_tokens beyond the model's window (vllm/renderers/params.py), in its error shape."""
        if self.max_model_len is None or model != self.served_model or protocol not in (OPENAI_CHAT, OPENAI_RESPONSES):
            return None
        param = next((k for k in ("max_tokens", "max_completion_tokens", "max_output_tokens") if body.get(k)), None)
        if param is None or body[param] <= self.max_model_len:
            return None
        return JSONResponse({"error": {
            "message": f"{param}={body[param]} cannot be greater than max_model_len={self.max_model_len}. "
                       f"Please request fewer output tokens. (parameter={param}, value={body[param]})",
            "type": "BadRequestError", "param": param, "code": 400}}, 400)

    async def _paced(self, events: list[bytes]):
        for i, e in enumerate(events):
            if i == self.stall_after:   # hold the stream open until the caller hangs up
                await asyncio.Event().wait()
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            yield e


def main(argv=None) -> None:
    from agents.proxy.server import run_forever
    ap = argparse.ArgumentParser(prog="python -m tests.support.fake_upstream")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--chunk-delay-s", type=float, default=0.0)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=429)
    args = ap.parse_args(argv)
    fake = FakeUpstream(chunks=args.chunks, chunk_delay_s=args.chunk_delay_s, fail_first=args.fail_first,
                        fail_status=args.fail_status, keep_requests=False)
    run_forever(fake.app, args.host, args.port, on_bound=lambda url: print(f"FAKE_UPSTREAM_URL={url}", flush=True))


if __name__ == "__main__":
    main()
