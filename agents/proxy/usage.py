"""Token usage as each provider reports it, normalised to (input, output, cached), and its price.

Normalised meaning, the same for every provider:
- input_tokens: every prompt token the provider billed, cached ones included;
- cached_tokens: the part of input_tokens served from the provider's prompt cache (billed cheaper);
- output_tokens: every generated token, reasoning/thinking included.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

# Endpoint families the proxy speaks (the path decides which one a call is).
ANTHROPIC = "anthropic"                # POST /v1/messages
OPENAI_CHAT = "openai_chat"            # POST /v1/chat/completions
OPENAI_RESPONSES = "openai_responses"  # POST /v1/responses
GEMINI = "gemini"                      # POST /v1beta/models/M:generateContent | :streamGenerateContent


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _int(value) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def from_usage_dict(protocol: str, u: dict | None) -> Usage:
    """Normalise one provider usage object (the dict under `usage` / `usageMetadata`)."""
    if not isinstance(u, dict):
        return Usage()
    if protocol == ANTHROPIC:
        # Anthropic's input_tokens excludes cache reads and cache writes; both are billed input.
        cached = _int(u.get("cache_read_input_tokens"))
        inp = _int(u.get("input_tokens")) + _int(u.get("cache_creation_input_tokens")) + cached
        return Usage(inp, _int(u.get("output_tokens")), cached)
    if protocol == OPENAI_CHAT:
        details = u.get("prompt_tokens_details") or {}
        return Usage(_int(u.get("prompt_tokens")), _int(u.get("completion_tokens")),
                     _int(details.get("cached_tokens")))
    if protocol == OPENAI_RESPONSES:
        details = u.get("input_tokens_details") or {}
        return Usage(_int(u.get("input_tokens")), _int(u.get("output_tokens")),
                     _int(details.get("cached_tokens")))
    if protocol == GEMINI:
        # Thinking tokens are billed as output but reported apart from the candidates.
        return Usage(_int(u.get("promptTokenCount")) + _int(u.get("toolUsePromptTokenCount")),
                     _int(u.get("candidatesTokenCount")) + _int(u.get("thoughtsTokenCount")),
                     _int(u.get("cachedContentTokenCount")))
    raise ValueError(f"unknown protocol {protocol!r}")


def usage_from_body(protocol: str, body: bytes) -> Usage:
    """Usage of a complete (non-streamed) JSON response body; zero when it carries none."""
    try:
        obj = json.loads(body)
    except ValueError:
        return Usage()
    if protocol == GEMINI:
        # streamGenerateContent without alt=sse answers a JSON array of chunks; the last one counts.
        items = obj if isinstance(obj, list) else [obj]
        metas = [i.get("usageMetadata") for i in items if isinstance(i, dict) and i.get("usageMetadata")]
        return from_usage_dict(GEMINI, metas[-1] if metas else None)
    return from_usage_dict(protocol, obj.get("usage") if isinstance(obj, dict) else None)


def at_output_limit(protocol: str, obj) -> bool:
    """Whether one response object (a body, or a stream event) says the reply stopped at its output-token limit: the
    request's cap (the CLI's own, or the proxy's: the record's `capped`) cut it."""
    if isinstance(obj, list):   # Gemini's stream without alt=sse: a JSON array of chunks
        return any(at_output_limit(protocol, item) for item in obj)
    if not isinstance(obj, dict):
        return False
    if protocol == ANTHROPIC:   # a message, or a stream's message_delta
        return (obj.get("delta") or obj).get("stop_reason") == "max_tokens"
    if protocol == OPENAI_CHAT:
        return any(isinstance(c, dict) and c.get("finish_reason") == "length" for c in obj.get("choices") or [])
    if protocol == OPENAI_RESPONSES:   # a response, or a stream's response.incomplete event
        r = obj.get("response") if isinstance(obj.get("response"), dict) else obj
        return r.get("status") == "incomplete" and (r.get("incomplete_details") or {}).get("reason") == \
            "max_output_tokens"
    if protocol == GEMINI:
        return any(isinstance(c, dict) and c.get("finishReason") == "MAX_TOKENS" for c in obj.get("candidates") or [])
    return False


def body_at_output_limit(protocol: str, body: bytes) -> bool:
    """at_output_limit of a complete (non-streamed) JSON response body."""
    try:
        return at_output_limit(protocol, json.loads(body))
    except ValueError:
        return False


# What an event that ends a reply at its limit holds (as JSON text, never inside a string: a quote there is escaped):
# only such events, and those with usage, are decoded
LIMIT_MARKERS = (b'"length"', b'"max_tokens"', b'"incomplete"', b'"MAX_TOKENS"')

KEEP_BYTES = 16 << 20   # of one stream, for counting it if cut; beyond, what it generated is counted from the start


class StreamMeter:
    """Reads usage out of a server-sent-event stream as it passes, without holding the stream.

    Only complete events that mention usage are JSON-decoded, so text deltas cost a substring scan. The chunks are
    kept too: a stream cut before its final usage is counted from what it carried (agents.proxy.estimate).
    """

    def __init__(self, protocol: str):
        self.protocol = protocol
        self._buf = b""
        self._raw: dict | None = None   # the provider's usage object, merged across events
        self._tail = b""                # non-SSE streams (Gemini JSON array): kept whole, parsed at the end
        self._chunks: list[bytes] = []   # up to KEEP_BYTES: a stream's own size (a 16k-token reply: ~2-3 MB of SSE)
        self._kept = 0
        self.final = False              # the stream's final usage arrived: its counts are the server's own
        self.at_limit = False           # an event said the reply stopped at its output-token limit
        self.sse = True

    def feed(self, chunk: bytes) -> None:
        if not self.sse:
            self._tail += chunk
            return
        if self._kept < KEEP_BYTES:
            self._chunks.append(chunk)
            self._kept += len(chunk)
        buf = self._buf + chunk
        # Events end with a blank line: \n\n, or \r\n\r\n as Google's servers send.
        end = max(buf.rfind(b"\n\n"), buf.rfind(b"\r\n\r\n"))
        if end < 0:
            self._buf = buf
            return
        complete, self._buf = buf[:end], buf[end:].lstrip(b"\r\n")
        if b'"usage' in complete or any(m in complete for m in LIMIT_MARKERS):
            for event in complete.replace(b"\r\n", b"\n").split(b"\n\n"):
                if b'"usage' in event or any(m in event for m in LIMIT_MARKERS):
                    self._event(event)

    def _event(self, event: bytes) -> None:
        obj = _event_data(event)
        if obj is None:
            return
        p = self.protocol
        self.at_limit = self.at_limit or at_output_limit(p, obj)
        if p == ANTHROPIC:
            # message_start carries input (and a provisional output count); message_delta the final
            # output count (and, in newer API versions, input counts again). Later values win.
            u = (obj.get("message") or {}).get("usage") if obj.get("type") == "message_start" else obj.get("usage")
            if isinstance(u, dict):
                self._raw = {**(self._raw or {}), **{k: v for k, v in u.items() if v is not None}}
                self.final = self.final or obj.get("type") == "message_delta"
        elif p == OPENAI_CHAT:
            if obj.get("usage"):
                self._raw = obj["usage"]
                # the usage chunk has no choices (vLLM's continuous_usage_stats puts usage in every chunk)
                self.final = self.final or not obj.get("choices") or any(
                    c.get("finish_reason") for c in obj["choices"] if isinstance(c, dict))
        elif p == OPENAI_RESPONSES:
            u = (obj.get("response") or {}).get("usage")
            if u:
                self._raw = u
                self.final = self.final or obj.get("type") in ("response.completed", "response.incomplete",
                                                               "response.failed")
        elif p == GEMINI:
            if obj.get("usageMetadata"):
                self._raw = obj["usageMetadata"]
                # every chunk has usageMetadata; the last (with the finish reason) has the output count
                self.final = self.final or any(c.get("finishReason") for c in obj.get("candidates") or []
                                               if isinstance(c, dict))

    def usage(self) -> Usage:
        if not self.sse:
            try:
                self.at_limit = at_output_limit(self.protocol, json.loads(self._tail))
                self.final = True   # the whole array arrived
            except ValueError:
                pass
            return usage_from_body(self.protocol, self._tail)
        if self._buf.strip():
            self.feed(b"\n\n")   # a last event without its trailing blank line
        return from_usage_dict(self.protocol, self._raw)

    def events(self) -> list[dict]:
        """Every complete event the stream carried, decoded (for counting what a cut stream generated)."""
        if not self.sse:   # a JSON array, perhaps cut: its complete elements
            out: list[dict] = []
            decoder, text, i = json.JSONDecoder(), self._tail.decode("utf-8", "replace"), 0
            while (i := text.find("{", i)) >= 0:
                try:
                    obj, i = decoder.raw_decode(text, i)
                except ValueError:
                    break
                out.append(obj)
            return out
        raw = b"".join(self._chunks)
        events = (_event_data(e) for e in raw.replace(b"\r\n", b"\n").split(b"\n\n"))
        return [e for e in events if e is not None]


def _event_data(event: bytes) -> dict | None:
    """The JSON object in one server-sent event's data lines (None: no data, not JSON, or not an object)."""
    data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
    try:
        obj = json.loads(data) if data else None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def cost_usd(usage: Usage, driver: dict) -> float:
    """Price of one call from the driver's prices per million tokens (missing prices cost nothing)."""
    p_in = float(driver.get("price_input_per_mtok") or 0.0)
    p_out = float(driver.get("price_output_per_mtok") or 0.0)
    p_cached = driver.get("price_cached_input_per_mtok")
    p_cached = p_in if p_cached is None else float(p_cached)
    uncached = max(usage.input_tokens - usage.cached_tokens, 0)
    return (uncached * p_in + usage.cached_tokens * p_cached + usage.output_tokens * p_out) / 1e6
