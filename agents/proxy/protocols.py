"""What differs between providers: where keys travel, error bodies, request rewriting, upstream URLs.

The request path decides the protocol (how to parse usage, what an error looks like to the caller);
the cell's driver decides the upstream (base URL, how the real key is sent).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi.responses import JSONResponse

from agents.proxy.usage import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from contracts.registry import lookup, names, register


@dataclass(frozen=True)
class Provider:
    """A driver provider (conf/driver/*.yaml `provider:`): the wire protocol its endpoint speaks."""
    name: str
    key_header: str             # where the real key travels ("authorization": as a bearer token)
    openai_style: bool = False  # base URLs end in /v1 (https://api.openai.com/v1), the SDKs' paths do not repeat it


for _provider in (Provider("anthropic", "x-api-key"), Provider("openai", "authorization", openai_style=True),
                  Provider("openai-compatible", "authorization", openai_style=True),
                  Provider("gemini", "x-goog-api-key")):
    register("provider", _provider.name)(_provider)


def provider(name: str) -> Provider:
    return lookup("provider", name)


def provider_names() -> list[str]:
    return names("provider")

# Headers never forwarded upstream: hop-by-hop ones, the caller's credentials (replaced by the real
# key), and accept-encoding (we read the stream to meter it, so we ask for it uncompressed).
_DROP_REQUEST = {
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
    "proxy-authorization", "proxy-connection", "accept-encoding", "authorization", "x-api-key",
    "x-goog-api-key", "cookie",
}
# Headers not copied back: hop-by-hop ones and those the ASGI server sets itself.
_DROP_RESPONSE = {
    "content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "date",
    "server", "set-cookie", "alt-svc",
}


def caller_key(headers, query_params) -> str | None:
    """The per-cell key, wherever the caller's CLI puts it."""
    for name in ("x-api-key", "x-goog-api-key"):
        if headers.get(name):
            return headers[name].strip()
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query_params.get("key")


def protocol_of_path(path: str) -> str:
    """Best guess for paths we do not route, so even a 404 comes in a shape the caller parses."""
    if "/v1beta/" in path or path.startswith("/v1beta"):
        return GEMINI
    if "/messages" in path:
        return ANTHROPIC
    return OPENAI_RESPONSES if "/responses" in path else OPENAI_CHAT


# kind -> (anthropic error type, openai (type, code), gemini status)
_KINDS = {
    "auth": ("authentication_error", ("invalid_request_error", "invalid_api_key"), "UNAUTHENTICATED"),
    "budget": ("invalid_request_error", ("insufficient_quota", "insufficient_quota"), "FAILED_PRECONDITION"),
    "bad_request": ("invalid_request_error", ("invalid_request_error", None), "INVALID_ARGUMENT"),
    "not_found": ("not_found_error", ("invalid_request_error", "not_found"), "NOT_FOUND"),
    "upstream": ("api_error", ("server_error", None), "UNAVAILABLE"),
}


def budget_status(protocol: str) -> int:
    # What each real provider answers when the account's money is gone, and what its CLI treats as
    # final: Anthropic 400 ("credit balance is too low"), OpenAI 429 insufficient_quota (Codex stops
    # on it; the SDKs also honour x-should-retry: false), Gemini 400 FAILED_PRECONDITION (a 429 there
    # makes Gemini CLI retry or fall back to another model).
    return 429 if protocol in (OPENAI_CHAT, OPENAI_RESPONSES) else 400


def error_response(protocol: str, status: int, kind: str, message: str) -> JSONResponse:
    """An error in the provider's own JSON shape; never retried by well-behaved clients."""
    a_type, (o_type, o_code), g_status = _KINDS[kind]
    if protocol == ANTHROPIC:
        body = {"type": "error", "error": {"type": a_type, "message": message}}
    elif protocol == GEMINI:
        body = {"error": {"code": status, "message": message, "status": g_status}}
    else:
        body = {"error": {"message": message, "type": o_type, "param": None, "code": o_code}}
    retry = "true" if kind == "upstream" else "false"
    return JSONResponse(body, status_code=status, headers={"x-should-retry": retry})


def prepare_body(protocol: str, body: dict, driver: dict) -> tuple[dict, bool, str | None, bool]:
    """Rewrite the caller's request for the upstream: (body, streaming, requested model, changed).

    The configured model always wins: a cell's driver is what the sweep says, and its prices only
    hold for that model (CLIs otherwise pick side models of their own, e.g. a small one for titles).
    """
    requested = body.get("model")
    changed = False
    if protocol != GEMINI and driver.get("model") and requested != driver["model"]:
        body["model"] = driver["model"]
        changed = True
    stream = bool(body.get("stream"))
    if protocol == OPENAI_CHAT and stream:
        # Chat completions only report usage in a stream when asked to.
        opts = body.get("stream_options") or {}
        if opts.get("include_usage") is not True:
            body["stream_options"] = {**opts, "include_usage": True}
            changed = True
    return body, stream, requested, changed


# Where each protocol's request says the most tokens to generate: the field a cap is written to when the request has
# none, then any other name the API also takes (each one present is clamped).
OUTPUT_FIELDS = {
    ANTHROPIC: ("max_tokens",),
    OPENAI_CHAT: ("max_completion_tokens", "max_tokens"),
    OPENAI_RESPONSES: ("max_output_tokens",),
    GEMINI: ("generationConfig.maxOutputTokens", "generation_config.max_output_tokens"),
}


def cap_output(protocol: str, body: dict, cap: int | None) -> dict | None:
    """Hold the request's output tokens to the cell's cap: a request that asks for none or for more gets the cap.
    Returns what was changed ({field: [asked, sent]}), None when nothing was. A CLI may ignore the limit its config
    gives it: Codex 0.169 says "'model_max_output_tokens' is ignored" and sends none."""
    if not cap:
        return None
    changed: dict = {}
    found = False
    for name in OUTPUT_FIELDS[protocol]:
        parent, _, key = name.rpartition(".")
        holder = body.get(parent) if parent else body
        if isinstance(holder, dict) and key in holder:
            found, asked = True, holder[key]
            if not isinstance(asked, int) or asked > cap:
                holder[key] = cap
                changed[name] = [asked, cap]
    if not found:  # into the settings object the request already has (Gemini's is camelCase or snake_case)
        name = next((n for n in OUTPUT_FIELDS[protocol] if isinstance(body.get(n.rpartition(".")[0]), dict)),
                    OUTPUT_FIELDS[protocol][0])
        parent, _, key = name.rpartition(".")
        (body.setdefault(parent, {}) if parent else body)[key] = cap
        changed[name] = [None, cap]
    return changed or None


def gemini_model_path(model_method: str, driver: dict) -> tuple[str, str, str]:
    """'M:method' from the URL -> (upstream 'M:method', requested model, method), model forced."""
    requested, _, method = model_method.partition(":")
    model = (driver.get("model") or requested).removeprefix("models/")
    return f"{model}:{method}", requested, method


def upstream_url(driver: dict, path: str, query: list[tuple[str, str]]) -> str:
    """Join the driver's base URL and the caller's path the way that provider's SDK does.

    OpenAI-style base URLs end in /v1 (https://api.openai.com/v1); Anthropic's and Google's do not
    (https://api.anthropic.com, https://generativelanguage.googleapis.com).
    """
    base = driver["base_url"].rstrip("/")
    if provider(driver["provider"]).openai_style and path.startswith("/v1/"):
        path = path[3:]
    query = [(k, v) for k, v in query if k != "key"]   # never forward the caller's key
    return base + path + ("?" + urlencode(query) if query else "")


def upstream_headers(incoming, driver: dict, real_key: str | None) -> dict:
    headers = {k: v for k, v in incoming.items() if k.lower() not in _DROP_REQUEST}
    headers["accept-encoding"] = "identity"
    if real_key:
        header = provider(driver["provider"]).key_header
        headers[header] = f"Bearer {real_key}" if header == "authorization" else real_key
    return headers


def response_headers(upstream_headers) -> dict:
    return {k: v for k, v in upstream_headers.items() if k.lower() not in _DROP_RESPONSE}


def parse_json(raw: bytes) -> dict | None:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
