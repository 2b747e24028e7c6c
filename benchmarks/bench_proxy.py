"""Driver proxy overhead: added latency per call and streaming throughput, against the fake upstream.

    python benchmarks/bench_proxy.py [--calls 200] [--concurrency 64] [--stream-calls 640] [--chunks 16]

The fake upstream and the proxy each run as their own process (as in a sweep: the agent CLI, the
proxy and the provider are different processes); the load generator is this process. Everything is
on 127.0.0.1. "direct" calls the fake upstream; "proxy" calls the same fake through the proxy with a
per-cell key, so the difference is what the proxy adds: parsing, metering, one fsynced record line
per call, and the second HTTP hop. Bounded: well under a minute with the defaults.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

BODY = {"model": "claude-sonnet-4-5", "max_tokens": 256,
        "messages": [{"role": "user", "content": "Write one short sentence about benchmarks. " * 20}]}


def start(args: list[str], env: dict, marker: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([PY, "-m", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith(marker + "="):
        proc.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}")
    return proc, line.split("=", 1)[1]


async def one_call(client: httpx.AsyncClient, url: str, headers: dict, stream: bool) -> tuple[float, float]:
    """(seconds to the first body bytes, seconds to the end) for one call."""
    t = time.perf_counter()
    first = None
    async with client.stream("POST", url, json={**BODY, "stream": stream}, headers=headers) as r:
        async for _ in r.aiter_raw():
            first = first or time.perf_counter() - t
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}")
    return first or 0.0, time.perf_counter() - t


async def sequential(client, url, headers, stream: bool, n: int) -> list[tuple[float, float]]:
    for _ in range(10):   # warm the connections
        await one_call(client, url, headers, stream)
    return [await one_call(client, url, headers, stream) for _ in range(n)]


async def concurrent(url, headers, n: int, concurrency: int) -> float:
    """Streaming calls per second with `concurrency` calls always in flight.

    A client per worker, like separate agents: one shared httpx pool scans all its connections on
    every request and would make this load generator the bottleneck.
    """
    todo = iter(range(n))
    clients = [httpx.AsyncClient(timeout=60, trust_env=False) for _ in range(concurrency)]

    async def worker(client):
        for _ in todo:
            await one_call(client, url, headers, True)

    try:
        await asyncio.gather(*(one_call(c, url, headers, True) for c in clients))   # connect, warm up
        t = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in clients))
        return n / (time.perf_counter() - t)
    finally:
        for c in clients:
            await c.aclose()


def ms(xs) -> str:
    return f"{statistics.median(xs) * 1000:7.2f} / {sorted(xs)[int(len(xs) * 0.9)] * 1000:7.2f}"


async def run(args) -> None:
    real_key, admin = "sk-bench-" + secrets.token_hex(8), secrets.token_hex(16)
    env = {**os.environ, "BENCH_KEY": real_key, "A2RL_PROXY_ADMIN_TOKEN": admin, "PYTHONUNBUFFERED": "1"}
    fake, fake_url = start(["agents.proxy.fake_upstream", "--chunks", str(args.chunks)], env, "FAKE_UPSTREAM_URL")
    proxy, proxy_url = start(["agents.proxy", "--max-attempts", "1"], env, "A2RL_PROXY_URL")
    records = Path(tempfile.mkdtemp(prefix="bench_proxy_", dir=os.environ.get("BENCH_RECORDS_DIR"))) / "records.jsonl"
    try:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            driver = {"name": "bench", "provider": "anthropic", "model": BODY["model"], "base_url": fake_url,
                      "api_key_env": "BENCH_KEY", "price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0}
            r = await client.post(proxy_url + "/admin/cells", headers={"x-a2rl-admin-token": admin}, json={
                "cell_id": "bench", "driver": driver, "limits": {}, "records_path": str(records)})
            key = r.raise_for_status().json()["key"]
            direct = (fake_url + "/v1/messages", {"x-api-key": real_key, "anthropic-version": "2023-06-01"})
            proxied = (proxy_url + "/v1/messages", {"x-api-key": key, "anthropic-version": "2023-06-01"})

            rows = []
            for stream in (False, True):
                d = await sequential(client, *direct, stream, args.calls)
                p = await sequential(client, *proxied, stream, args.calls)
                d_end, p_end = [x[1] for x in d], [x[1] for x in p]
                rows.append((f"latency, {'stream' if stream else 'non-stream'} (ms, median / p90)",
                             ms(d_end), ms(p_end),
                             f"+{(statistics.median(p_end) - statistics.median(d_end)) * 1000:.2f} ms",
                             statistics.median(p_end) / statistics.median(d_end)))
                if stream:
                    d_ttfb, p_ttfb = [x[0] for x in d], [x[0] for x in p]
                    rows.append(("time to first chunk, stream (ms, median / p90)", ms(d_ttfb), ms(p_ttfb),
                                 f"+{(statistics.median(p_ttfb) - statistics.median(d_ttfb)) * 1000:.2f} ms",
                                 statistics.median(p_ttfb) / statistics.median(d_ttfb)))
            d_tp = await concurrent(*direct, args.stream_calls, args.concurrency)
            p_tp = await concurrent(*proxied, args.stream_calls, args.concurrency)
            rows.append((f"throughput, {args.concurrency} concurrent streams (calls/s)",
                         f"{d_tp:17.1f}", f"{p_tp:17.1f}", f"{p_tp * args.chunks:.0f} chunks/s", p_tp / d_tp))

            usage = (await client.get(f"{proxy_url}/admin/cells/{key}", headers={"x-a2rl-admin-token": admin})).json()
        lines = records.read_text().splitlines()
        assert len(lines) == usage["calls"], (len(lines), usage["calls"])
        assert real_key not in records.read_text()

        print(f"\ndriver proxy vs direct (fake Anthropic upstream, {args.chunks} SSE chunks per streamed reply, "
              f"{os.cpu_count()} CPUs)")
        print(f"{'measure':52} {'direct':>17} {'proxy':>17} {'added':>14} {'ratio':>6}")
        for name, d, p, added, ratio in rows:
            print(f"{name:52} {d:>17} {p:>17} {added:>14} {ratio:6.2f}")
        print(f"\n{usage['calls']} proxied calls metered, {usage['total_tokens']} tokens, "
              f"${usage['cost_usd']:.2f}; {len(lines)} fsynced record lines")
    finally:
        for proc in (proxy, fake):
            proc.terminate()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="sequential calls per latency row and side")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--stream-calls", type=int, default=640, help="calls per throughput run and side")
    ap.add_argument("--chunks", type=int, default=16, help="SSE text chunks per streamed reply")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
