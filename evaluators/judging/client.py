"""One chat call to a driver (conf/driver/*.yaml) through the driver proxy, in the driver's own wire protocol.

The judge reaches the proxy like an agent does, with a per-evaluation key, so its tokens are metered and priced by
the one mechanism that meters agents, and recorded as judge usage. A call the proxy answers with an error (after its
own retries on 429/5xx) raises JudgeUnavailable: an outage of the judge is not a verdict on the model.

chat_request and reply_text are the request and reply shapes of one system + user chat per provider; the report's
run summaries (orchestrator.analysis.run_summary) send the same request straight to the provider.
"""
from __future__ import annotations

import httpx
from contracts.infra import InfraError


class JudgeUnavailable(InfraError):
    """The judge could not be asked (network, provider error, budget): an infra error of the evaluation."""


CHAT_PROVIDERS = ("openai", "openai-compatible", "anthropic", "gemini")


def chat_request(driver: dict, system: str, user: str, max_tokens: int | None,
                 temperature: float | None = 0) -> tuple[str, dict, dict]:
    """(path, JSON body, headers other than the key) of one system + user message in the driver's protocol.
    temperature None leaves the provider's default (reasoning models refuse any other value); max_tokens None sends
    no limit where the protocol allows it (OpenAI's; RD-Agent's judge sets none)."""
    provider, model = driver["provider"], driver.get("model")
    sampling = {} if temperature is None else {"temperature": temperature}
    if provider in ("openai", "openai-compatible"):
        limit = {} if max_tokens is None else {"max_completion_tokens": max_tokens}
        return "/v1/chat/completions", {
            "model": model, **sampling, **limit,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}, {}
    max_tokens = 4096 if max_tokens is None else max_tokens  # the protocols below require a limit
    if provider == "anthropic":
        return "/v1/messages", {"model": model, **sampling, "max_tokens": max_tokens, "system": system,
                                "messages": [{"role": "user", "content": user}]}, {"anthropic-version": "2023-06-01"}
    if provider == "gemini":
        return f"/v1beta/models/{model}:generateContent", {
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": [{"role": "user", "parts": [{"text": user}]}],
            "generationConfig": {**sampling, "maxOutputTokens": max_tokens}}, {}
    raise ValueError(f"driver {driver.get('name')!r}: provider {provider!r} cannot chat; use one of "
                     f"{', '.join(CHAT_PROVIDERS)}")


def reply_text(provider: str, data: dict) -> str:
    """The text of a chat reply; KeyError, IndexError or TypeError when it has none where the provider puts it."""
    if provider == "anthropic":
        return "".join(part.get("text", "") for part in data["content"])
    if provider == "gemini":
        return "".join(part.get("text", "") for part in data["candidates"][0]["content"]["parts"])
    return data["choices"][0]["message"]["content"] or ""


def chat(client: httpx.Client, proxy_url: str, key: str, driver: dict, system: str, user: str,
         max_tokens: int | None, temperature: float | None = 0) -> str:
    """The reply's text to one system + user message, greedy (temperature 0) unless told otherwise."""
    try:
        path, body, headers = chat_request(driver, system, user, max_tokens, temperature)
    except ValueError:
        raise ValueError(f"judge driver {driver.get('name')!r}: provider {driver['provider']!r} cannot judge") \
            from None
    # The proxy takes the per-evaluation key wherever the provider's own SDK puts it.
    key_header = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}.get(driver["provider"])
    headers.update({key_header: key} if key_header else {"authorization": f"Bearer {key}"})
    try:
        response = client.post(proxy_url + path, json=body, headers=headers)
    except httpx.HTTPError as e:
        raise JudgeUnavailable(f"judge {driver.get('name')}: {type(e).__name__}: {e}") from None
    if response.status_code != 200:
        raise JudgeUnavailable(f"judge {driver.get('name')}: HTTP {response.status_code}: {response.text[:300]}")
    try:
        return reply_text(driver["provider"], response.json())
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise JudgeUnavailable(f"judge {driver.get('name')}: unreadable answer ({type(e).__name__}: {e})") from None
