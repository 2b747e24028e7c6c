"""Calling the real upstream: retries of rate limits, 5xx and lost connections with backoff.

The time spent sleeping between attempts is returned so records can tell waiting from working.
The client is aiohttp (a dependency of ray[serve]): relaying 64 concurrent streams, an httpx-based
relay managed about a third of aiohttp's throughput on the same machine (pure-Python h11 parsing
per chunk, and a pool that scans every connection on each request).
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import aiohttp
from contracts.infra import InfraError


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6         # including the first
    base_s: float = 1.0           # first backoff; doubles each attempt
    max_backoff_s: float = 60.0   # cap on one computed backoff
    max_retry_after_s: float = 120.0   # cap on an upstream's Retry-After we are willing to honour
    jitter: float = 0.25          # +-25%, so cells hitting one limit do not retry in lockstep

    def backoff(self, attempt: int) -> float:
        delay = min(self.base_s * 2 ** (attempt - 1), self.max_backoff_s)
        return delay * (1 + random.uniform(-self.jitter, self.jitter))


class UpstreamUnreachable(InfraError):
    def __init__(self, message: str, attempts: int, wait_s: float):
        super().__init__(message)
        self.attempts, self.wait_s = attempts, wait_s


def retryable(response: aiohttp.ClientResponse) -> bool:
    if response.headers.get("x-should-retry") == "false":   # OpenAI/Anthropic: e.g. quota gone
        return False
    return response.status == 429 or response.status >= 500


def retry_after(response: aiohttp.ClientResponse) -> float | None:
    """Seconds the upstream asked us to wait (retry-after-ms, Retry-After seconds or HTTP date)."""
    h = response.headers
    try:
        if "retry-after-ms" in h:
            return float(h["retry-after-ms"]) / 1000
        value = h.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


async def served_context_window(driver: dict, real_key: str | None, trust_env: bool = True,
                                timeout_s: float = 10.0) -> int | None:
    """The context window of the driver's model as its OpenAI-compatible server reports it: `max_model_len` in the
    model's entry of GET /v1/models (vLLM's field); None when the server does not say or cannot be asked. A session
    of its own: this is asked once per cell, from whichever event loop the caller is on."""
    from agents.proxy.protocols import upstream_headers, upstream_url

    url = upstream_url(driver, "/v1/models", [])
    headers = upstream_headers({}, driver, real_key)
    try:
        async with aiohttp.ClientSession(trust_env=trust_env, timeout=aiohttp.ClientTimeout(total=timeout_s)) as s, \
                s.get(url, headers=headers) as resp:
            if resp.status >= 400:
                return None
            listing = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    models = listing.get("data") if isinstance(listing, dict) else None
    entry = next((m for m in models or [] if isinstance(m, dict) and m.get("id") == driver.get("model")), None)
    window = (entry or {}).get("max_model_len")
    return int(window) if isinstance(window, int) and window > 0 else None


def session(read_timeout_s: float = 600.0, max_connections: int = 2048,
            trust_env: bool = True) -> aiohttp.ClientSession:
    """The proxy's one upstream session; create it inside the serving event loop."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=60),
        # No total timeout: a long generation may stream for many minutes; a silent upstream may not.
        timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=read_timeout_s),
        trust_env=trust_env)   # honour HTTPS_PROXY/NO_PROXY for the real upstreams


# Failures before any answer: the upstream never saw the request, or dropped a stale keep-alive
# connection under it.
_RETRY_EXC = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ConnectionTimeoutError)


async def send(client: aiohttp.ClientSession, method: str, url: str, headers: dict, content: bytes,
               policy: RetryPolicy) -> tuple[aiohttp.ClientResponse, int, float]:
    """Send until a non-retryable answer or attempts run out: (response with unread body, attempts, wait_s).

    Only the status and headers have been read, so a streamed body can be passed on as it arrives;
    the caller reads it and releases the response. The last attempt's answer is returned whatever
    its status.
    """
    wait_s = 0.0
    for attempt in range(1, policy.max_attempts + 1):
        try:
            response = await client.request(method, url, headers=headers, data=content, allow_redirects=False)
        except _RETRY_EXC as exc:
            if attempt == policy.max_attempts:
                raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}", attempt, wait_s) from exc
            delay = policy.backoff(attempt)
        except (aiohttp.ClientError, TimeoutError) as exc:   # e.g. reset mid-request, a bad base_url
            raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}", attempt, wait_s) from exc
        else:
            if attempt == policy.max_attempts or not retryable(response):
                return response, attempt, wait_s
            asked = retry_after(response)
            delay = min(asked, policy.max_retry_after_s) if asked is not None else policy.backoff(attempt)
            response.close()
        t = time.monotonic()
        await asyncio.sleep(delay)
        wait_s += time.monotonic() - t
    raise AssertionError("unreachable")
