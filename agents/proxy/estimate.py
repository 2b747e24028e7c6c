"""Token counts of a streamed call whose server never reported them: a stream cut before its last event (the agent
hung up, its deadline killed it, the upstream broke off), or one from a server that sends no usage.

Servers send a stream's usage only at its end, yet a provider bills what it computed before the cut. Such a call is
counted here and its record marked `estimated`, saying how each count was made:
- prompt tokens, unless the stream already reported them (Anthropic's message_start, Gemini's every chunk): by the
  served model's own tokenizer where an OpenAI-compatible server offers it (vLLM's POST /tokenize, which renders chat
  messages through the served chat template), else with the driver's tokenizer (`driver.tokenizer`: a hub id found
  in the local cache or a path; never downloaded mid-sweep), else the provider's own count endpoint (Anthropic's
  /v1/messages/count_tokens), else from characters;
- generated tokens: the text the stream carried before the cut (text, reasoning, tool calls), by the server's
  /tokenize, else with the tokenizer, else from characters; never fewer than the stream's own running count.
A Responses-API prompt is counted as the chat messages it becomes (vLLM serves that API through the model's chat
template): tools go to the template, which keeps or drops them as the served model's does.
The character estimate is CHARS_PER_TOKEN characters a token: the figure OpenAI and Anthropic give for English text
(code and JSON run nearer 3, so it errs low there). A sweep says so before it starts (`counting_problem`).
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


def chat_messages(protocol: str, body: dict) -> tuple[list[dict], list[dict] | None]:
    """(chat messages, chat tools) of an OpenAI chat or Responses request: what a chat template renders."""
    if protocol == OPENAI_CHAT:
        return body.get("messages") or [], body.get("tools")
    messages = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            text = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict))
            role = "system" if item.get("role") == "developer" else item.get("role", "user")
            messages.append({"role": role, "content": text})
        elif kind == "function_call":
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""}}]})
        elif kind == "function_call_output":
            out = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": out if isinstance(out, str) else json.dumps(out)})
        # reasoning items are not sent back through a chat template
    tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}}
             for t in body.get("tools") or [] if t.get("type") == "function"]
    return messages, tools or None


def tokenize_url(driver: dict) -> str:
    """vLLM's POST /tokenize, at its server's root (beside /v1)."""
    return driver["base_url"].rstrip("/").removesuffix("/v1") + "/tokenize"


async def counted(client, url: str, headers: dict, payload: dict, field: str) -> int | None:
    """A count endpoint's answer (its `field`); None if it does not answer, or answers no number."""
    import aiohttp

    try:
        async with client.post(url, json=payload, headers=headers,
                               timeout=aiohttp.ClientTimeout(total=COUNT_TIMEOUT_S)) as resp:
            if resp.status >= 400:
                return None
            n = (await resp.json(content_type=None)).get(field)
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


async def server_tokens(client, url: str, headers: dict, payload: dict) -> int | None:
    """Tokens as the served model's own tokenizer counts them (vLLM's /tokenize); None if the server does not answer."""
    return await counted(client, url, headers, payload, "count")


def tokenize_payloads(protocol: str, body: dict, text: str) -> tuple[dict | None, dict]:
    """(the prompt's /tokenize request, None for a protocol no chat template renders; the generated text's)."""
    model = body.get("model")
    prompt = None
    if protocol in (OPENAI_CHAT, OPENAI_RESPONSES):
        messages, tools = chat_messages(protocol, body)
        prompt = {"model": model, "messages": messages, "add_generation_prompt": True, **({"tools": tools} if tools
                                                                                           else {})}
    return prompt, {"model": model, "prompt": text, "add_special_tokens": False}


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
    """The prompt as the server tokenises it: through the model's chat template where the request is chat messages
    (a Responses request's become them), else its text."""
    if protocol in (OPENAI_CHAT, OPENAI_RESPONSES) and getattr(tokenizer, "chat_template", None):
        messages, tools = chat_messages(protocol, body)
        try:
            return len(tokenizer.apply_chat_template(messages, tools=tools, tokenize=True,
                                                     add_generation_prompt=True, return_dict=False))
        except Exception:  # noqa: BLE001 - a template that cannot render these messages: count their text
            pass
    return tokens_of(tokenizer, prompt_text(protocol, body))


def by_characters(text: str) -> int:
    return round(len(text) / CHARS_PER_TOKEN)


async def anthropic_count(client, url: str, headers: dict, body: dict) -> int | None:
    """The prompt's tokens by Anthropic's count endpoint (free, and exact for the model); None if it does not answer."""
    return await counted(client, url, headers, {k: body[k] for k in _COUNT_FIELDS if k in body}, "input_tokens")


async def estimate(protocol: str, body: dict, reported: Usage, events: list[dict], tokenizer_name: str | None,
                   tokenizers: Tokenizers, count=None, tokenize=None) -> tuple[Usage, dict]:
    """(usage, how each count was made) of a call the stream did not finish metering. reported: what the stream did
    report; count: an async function giving the prompt's tokens by the provider's count endpoint (None: none);
    tokenize: an async function of a /tokenize request giving the served model's count (None: none)."""
    text = streamed_text(protocol, events)
    by_server, by_chars = "the server's /tokenize", f"characters/{CHARS_PER_TOKEN:g}"
    prompt_payload, text_payload = tokenize_payloads(protocol, body, text)
    output = await tokenize(text_payload) if tokenize is not None and text else None
    how_output = by_server
    tokenizer = None
    if output is None and tokenizer_name:
        tokenizer = await asyncio.to_thread(tokenizers.get, tokenizer_name)
    by_tokenizer = f"tokenizer {tokenizer_name}"
    if output is None and tokenizer is not None:
        output, how_output = await asyncio.to_thread(tokens_of, tokenizer, text), by_tokenizer
    elif output is None:
        output, how_output = by_characters(text), by_chars
    if reported.output_tokens > output:
        output, how_output = reported.output_tokens, "the stream's running count"
    if reported.input_tokens:
        return (Usage(reported.input_tokens, output, reported.cached_tokens),
                {"input_tokens": "the stream's usage", "output_tokens": how_output})
    prompt, how_input = None, None
    if tokenize is not None and prompt_payload is not None:
        prompt, how_input = await tokenize(prompt_payload), by_server
    if prompt is None and tokenizer_name:
        tokenizer = tokenizer or await asyncio.to_thread(tokenizers.get, tokenizer_name)
        if tokenizer is not None:
            prompt, how_input = await asyncio.to_thread(prompt_tokens, tokenizer, protocol, body), by_tokenizer
    if prompt is None and count is not None:
        prompt, how_input = await count(), "the provider's count endpoint"
    if prompt is None:
        prompt, how_input = by_characters(prompt_text(protocol, body)), by_chars
    return Usage(prompt, output, 0), {"input_tokens": how_input, "output_tokens": how_output}


def counting_problem(driver: dict, environ: dict | None = None) -> str | None:
    """Why a stream of this driver cut before its usage would be counted from characters, and the fix; None when the
    served model's tokenizer is within reach (its server's /tokenize, or driver.tokenizer in local files). Asked
    once per driver before a sweep starts; the providers' own APIs (no public tokenizer) are not asked."""
    import os
    import urllib.request

    name, reasons = driver.get("tokenizer"), []
    if name:
        if Tokenizers().get(name) is not None:
            return None
        reasons.append(f"driver.tokenizer={name!r} cannot be loaded from this machine's local files")
    fix = ""
    if driver.get("provider") == "openai-compatible":
        key = (environ or os.environ).get(driver.get("api_key_env") or "")
        request = urllib.request.Request(
            tokenize_url(driver), json.dumps({"model": driver.get("model"), "prompt": "a"}).encode(),
            {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})})
        try:
            with urllib.request.urlopen(request, timeout=COUNT_TIMEOUT_S) as resp:
                if isinstance(json.loads(resp.read()).get("count"), int):
                    return None
        except (OSError, ValueError, AttributeError):
            pass
        reasons.append(f"its server answers no POST {tokenize_url(driver)} (vLLM's)")
        fix = "serve the model with vLLM (its /tokenize counts with the served model's tokenizer), or "
    if not reasons:
        return None
    return (f"driver {driver.get('name')}: {' and '.join(reasons)}, so a stream cut before its usage would be "
            f"counted as {CHARS_PER_TOKEN:g} characters a token. Fix: {fix}set driver.tokenizer to the served "
            "model's hub id once its tokenizer files are in the local cache (`hf download <id>`), or to a local "
            "folder holding them")
