"""Token counts of a streamed call whose server never reported them: a stream cut before its last event (the agent
hung up, its deadline killed it, the upstream broke off), or one from a server that sends no usage.

Servers send a stream's usage only at its end, yet a provider bills what it computed before the cut. Such a call is
counted here and its record marked `estimated`, saying how each count was made:
- prompt tokens, unless the stream already reported them (Anthropic's message_start, Gemini's every chunk): with the
  driver's tokenizer (`driver.tokenizer`: a hub id found in the local cache or a path; never downloaded mid-sweep),
  else the provider's own count endpoint (Anthropic's /v1/messages/count_tokens), else from characters;
- generated tokens: the text the stream carried before the cut (text, reasoning, tool calls), with the tokenizer,
  else from characters; never fewer than the stream's own running count.
The character estimate is CHARS_PER_TOKEN characters a token: the figure OpenAI and Anthropic give for English text
(code and JSON run nearer 3, so it errs low there).
"""
from __future__ import annotations

import asyncio
import json
import threading

from agents.proxy.usage import ANTHROPIC, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, Usage

CHARS_PER_TOKEN = 4.0
COUNT_TIMEOUT_S = 2.0   # a count endpoint's answer; the cell's close waits 5 s (DRAIN_S) for calls in flight

# Where each protocol's request holds the prompt (model settings such as max_tokens are not prompt).
PROMPT_KEYS = {
    ANTHROPIC: ("system", "messages", "tools"),
    OPENAI_CHAT: ("messages", "tools"),
    OPENAI_RESPONSES: ("instructions", "input", "tools"),
    GEMINI: ("systemInstruction", "system_instruction", "contents", "tools"),
}
# Binary payloads (images, files as base64) are not text the tokenizer sees as characters.
_BINARY_KEYS = {"data", "image_url", "inlineData", "inline_data", "file_data", "image"}
# Fields of Anthropic's count endpoint; it refuses any other (max_tokens, stream, ...).
_COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers")


def strings(value) -> list[str]:
    """Every string in a JSON value (dict keys are structure, not text), binary payloads left out."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in _BINARY_KEYS for s in strings(v)]
    return []


def prompt_text(protocol: str, body: dict) -> str:
    return "\n".join(s for key in PROMPT_KEYS[protocol] for s in strings(body.get(key)))


def streamed_text(protocol: str, events: list[dict]) -> str:
    """What the model generated, as far as the stream's events carried it."""
    out: list[str] = []
    for e in events:
        if protocol == ANTHROPIC:
            delta = e.get("delta") or {}
            block = e.get("content_block") or {}
            if e.get("type") == "content_block_delta":
                out += [delta.get(k) for k in ("text", "partial_json", "thinking") if isinstance(delta.get(k), str)]
            elif block.get("type") == "tool_use":
                out.append(str(block.get("name") or ""))
        elif protocol == OPENAI_CHAT:
            for choice in e.get("choices") or []:
                delta = choice.get("delta") or {}
                out += [delta.get(k) for k in ("content", "reasoning_content", "reasoning")
                        if isinstance(delta.get(k), str)]
                for call in delta.get("tool_calls") or []:
                    fn = call.get("function") or {}
                    out += [fn.get(k) for k in ("name", "arguments") if isinstance(fn.get(k), str)]
        elif protocol == OPENAI_RESPONSES:
            # response.output_text.delta, .function_call_arguments.delta, .reasoning_text.delta, ...
            if str(e.get("type", "")).endswith(".delta") and isinstance(e.get("delta"), str):
                out.append(e["delta"])
            elif e.get("type") == "response.output_item.added" and (e.get("item") or {}).get("name"):
                out.append(str(e["item"]["name"]))
        elif protocol == GEMINI:
            for cand in e.get("candidates") or []:
                for part in (cand.get("content") or {}).get("parts") or []:
                    if isinstance(part.get("text"), str):
                        out.append(part["text"])
                    call = part.get("functionCall") or part.get("function_call")
                    if call:
                        out.append(json.dumps(call))
    return "".join(out)


class Tokenizers:
    """Drivers' tokenizers, loaded once each from local files (in a worker thread: loading takes seconds)."""

    def __init__(self):
        self._loaded: dict[str, object] = {}
        self._lock = threading.Lock()

    def get(self, name: str):
        """The tokenizer, or None when it cannot be loaded without a download (remembered: not tried again)."""
        with self._lock:
            if name not in self._loaded:
                try:
                    from transformers import AutoTokenizer

                    # local_files_only: a hub id is read from the local cache; the proxy never downloads mid-call.
                    self._loaded[name] = AutoTokenizer.from_pretrained(name, local_files_only=True)
                except (OSError, ValueError, ImportError):
                    self._loaded[name] = None
            return self._loaded[name]

    def warm(self, name: str | None) -> None:
        """Load it in the background (at a cell's registration), so a cut call need not wait for the load."""
        if name:
            threading.Thread(target=self.get, args=(name,), name=f"tokenizer:{name}", daemon=True).start()


def tokens_of(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def prompt_tokens(tokenizer, protocol: str, body: dict) -> int:
    """The prompt as the server tokenises it: through the model's chat template where the request is chat messages,
    else its text."""
    if protocol == OPENAI_CHAT and getattr(tokenizer, "chat_template", None):
        try:
            return len(tokenizer.apply_chat_template(body.get("messages") or [], tools=body.get("tools"),
                                                     tokenize=True, add_generation_prompt=True, return_dict=False))
        except Exception:  # noqa: BLE001 - a template that cannot render these messages: count their text
            pass
    return tokens_of(tokenizer, prompt_text(protocol, body))


def by_characters(text: str) -> int:
    return round(len(text) / CHARS_PER_TOKEN)


async def anthropic_count(client, url: str, headers: dict, body: dict) -> int | None:
    """The prompt's tokens by Anthropic's count endpoint (free, and exact for the model); None if it does not answer."""
    import aiohttp

    payload = {k: body[k] for k in _COUNT_FIELDS if k in body}
    try:
        async with client.post(url, json=payload, headers=headers,
                               timeout=aiohttp.ClientTimeout(total=COUNT_TIMEOUT_S)) as resp:
            if resp.status >= 400:
                return None
            n = (await resp.json(content_type=None)).get("input_tokens")
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, (int, float)) else None


async def estimate(protocol: str, body: dict, reported: Usage, events: list[dict], tokenizer_name: str | None,
                   tokenizers: Tokenizers, count=None) -> tuple[Usage, dict]:
    """(usage, how each count was made) of a call the stream did not finish metering. reported: what the stream did
    report; count: an async function giving the prompt's tokens by the provider's count endpoint (None: none)."""
    tokenizer = await asyncio.to_thread(tokenizers.get, tokenizer_name) if tokenizer_name else None
    by_tokenizer, by_chars = f"tokenizer {tokenizer_name}", f"characters/{CHARS_PER_TOKEN:g}"
    text = streamed_text(protocol, events)
    if tokenizer is not None:
        output, how_output = await asyncio.to_thread(tokens_of, tokenizer, text), by_tokenizer
    else:
        output, how_output = by_characters(text), by_chars
    if reported.output_tokens > output:
        output, how_output = reported.output_tokens, "the stream's running count"
    if reported.input_tokens:
        return (Usage(reported.input_tokens, output, reported.cached_tokens),
                {"input_tokens": "the stream's usage", "output_tokens": how_output})
    prompt, how_input = None, None
    if tokenizer is not None:
        prompt, how_input = await asyncio.to_thread(prompt_tokens, tokenizer, protocol, body), by_tokenizer
    elif count is not None:
        prompt, how_input = await count(), "the provider's count endpoint"
    if prompt is None:
        prompt, how_input = by_characters(prompt_text(protocol, body)), by_chars
    return Usage(prompt, output, 0), {"input_tokens": how_input, "output_tokens": how_output}
