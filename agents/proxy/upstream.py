"""Calling the real upstream: retries of rate limits, 5xx and lost connections with backoff.

The time spent sleeping between attempts is returned so records can tell waiting from working.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx


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


class UpstreamUnreachable(Exception):
    def __init__(self, message: str, attempts: int, wait_s: float):
        super().__init__(message)
        self.attempts, self.wait_s = attempts, wait_s


def retryable(response: httpx.Response) -> bool:
    if response.headers.get("x-should-retry") == "false":   # OpenAI/Anthropic: e.g. quota gone
        return False
    return response.status_code == 429 or response.status_code >= 500


def retry_after(response: httpx.Response) -> float | None:
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


# Failures before any response: the upstream never saw (or never answered) the request.
_RETRY_EXC = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.RemoteProtocolError)


async def send(client: httpx.AsyncClient, method: str, url: str, headers: dict, content: bytes,
               policy: RetryPolicy) -> tuple[httpx.Response, int, float]:
    """Send until a non-retryable answer or attempts run out: (response with unread body, attempts, wait_s).

    The response is opened in streaming mode so a streamed body can be passed on as it arrives; the
    caller reads or closes it. The last attempt's answer is returned whatever its status.
    """
    wait_s = 0.0
    for attempt in range(1, policy.max_attempts + 1):
        try:
            response = await client.send(client.build_request(method, url, headers=headers, content=content),
                                         stream=True)
        except _RETRY_EXC as exc:
            if attempt == policy.max_attempts:
                raise UpstreamUnreachable(f"{type(exc).__name__}: {exc}", attempt, wait_s) from exc
            delay = policy.backoff(attempt)
        else:
            if attempt == policy.max_attempts or not retryable(response):
                return response, attempt, wait_s
            asked = retry_after(response)
            delay = min(asked, policy.max_retry_after_s) if asked is not None else policy.backoff(attempt)
            await response.aclose()
        t = time.monotonic()
        await asyncio.sleep(delay)
        wait_s += time.monotonic() - t
    raise AssertionError("unreachable")
