"""Driver proxy overhead: added latency per call and streaming throughput, against the fake upstream.

    python benchmarks/bench_proxy.py [--calls 200] [--concurrency 64] [--stream-calls 480] [--chunks 16]

The fake upstream and the proxy each run as their own process (as in a sweep: the agent CLI, the
proxy and the provider are different processes); the load generator is this process. Everything is
on 127.0.0.1. "direct" calls the fake upstream; "proxy" calls the same fake through the proxy with a
per-cell key, so the difference is what the proxy adds: parsing, metering, one fsynced record line
per call, and the second HTTP hop. Direct and proxied measurements alternate (call by call for
latency, round by round for throughput) so both see the same machine load. Bounded: well under a
minute with the defaults.

Throughput is measured twice: unpaced (the fake answers as fast as it can: the proxy's CPU cost per
call is all there is to see) and paced (a pause between chunks, like a model generating ~50 chunks/s,
which is what 64 agents' streams look like in a sweep).
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

import aiohttp
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


async def one_call(session: aiohttp.ClientSession, url: str, headers: dict, stream: bool) -> tuple[float, float]:
    """(seconds to the first body bytes, seconds to the end) for one call."""
    t = time.perf_counter()
    first = None
    async with session.post(url, json={**BODY, "stream": stream}, headers=headers) as r:
        async for _ in r.content.iter_any():
            first = first or time.perf_counter() - t
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}")
    return first or 0.0, time.perf_counter() - t


async def paired(session, direct, proxied, stream: bool, n: int):
    """n calls each way, alternating direct and proxied so both see the same machine load."""
    for _ in range(10):   # warm the connections
        await one_call(session, *direct, stream)
        await one_call(session, *proxied, stream)
    d, p = [], []
    for _ in range(n):
        d.append(await one_call(session, *direct, stream))
        p.append(await one_call(session, *proxied, stream))
    return d, p


async def concurrent(url, headers, n: int, concurrency: int) -> float:
    """Streaming calls per second with `concurrency` calls always in flight.

    The load generator is aiohttp (C HTTP parser): with httpx here, this process ran out of CPU
    before the proxy did.
    """
    todo = iter(range(n))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def worker():
            for _ in todo:
                await one_call(session, url, headers, True)

        await asyncio.gather(*(one_call(session, url, headers, True) for _ in range(concurrency)))   # warm up
        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t)


async def throughput(direct, proxied, n: int, concurrency: int, rounds: int) -> tuple[float, float]:
    """Median calls/s each way over alternating rounds."""
    d, p = [], []
    for _ in range(rounds):
        d.append(await concurrent(*direct, n, concurrency))
        p.append(await concurrent(*proxied, n, concurrency))
    return statistics.median(d), statistics.median(p)


def ms(xs) -> str:
    return f"{statistics.median(xs) * 1000:7.2f} / {sorted(xs)[int(len(xs) * 0.9)] * 1000:7.2f}"


def latency_row(name: str, d: list[float], p: list[float]):
    added = (statistics.median(p) - statistics.median(d)) * 1000
    return name, ms(d), ms(p), f"{added:+.2f} ms", statistics.median(p) / statistics.median(d)


async def run(args) -> None:
    real_key, admin = "sk-bench-" + secrets.token_hex(8), secrets.token_hex(16)
    env = {**os.environ, "BENCH_KEY": real_key, "A2RL_PROXY_ADMIN_TOKEN": admin, "PYTHONUNBUFFERED": "1"}
    procs = []
    try:
        fake, fake_url = start(["tests.support.fake_upstream", "--chunks", str(args.chunks)], env,
                               "FAKE_UPSTREAM_URL")
        procs.append(fake)
        paced, paced_url = start(["tests.support.fake_upstream", "--chunks", str(args.chunks),
                                  "--chunk-delay-s", str(args.chunk_delay_s)], env, "FAKE_UPSTREAM_URL")
        procs.append(paced)
        proxy, proxy_url = start(["agents.proxy", "--max-attempts", "1"], env, "A2RL_PROXY_URL")
        procs.append(proxy)
        tmp = tempfile.TemporaryDirectory(prefix="bench_proxy_", dir=os.environ.get("BENCH_RECORDS_DIR"))
        records = Path(tmp.name)   # BENCH_RECORDS_DIR=/dev/shm: the same without fsync's cost
        admin_h = {"x-a2rl-admin-token": admin}
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            async def cell(name: str, base_url: str) -> str:
                driver = {"name": "bench", "provider": "anthropic", "model": BODY["model"], "base_url": base_url,
                          "api_key_env": "BENCH_KEY", "price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0}
                r = await client.post(proxy_url + "/admin/cells", headers=admin_h, json={
                    "cell_id": name, "driver": driver, "limits": {}, "records_path": str(records / f"{name}.jsonl")})
                return r.raise_for_status().json()["key"]

            def ends(base, key):
                return base + "/v1/messages", {"x-api-key": key, "anthropic-version": "2023-06-01"}

            key, paced_key = await cell("bench", fake_url), await cell("paced", paced_url)
            direct, proxied = ends(fake_url, real_key), ends(proxy_url, key)

            rows = []
            async with aiohttp.ClientSession() as session:
                d, p = await paired(session, direct, proxied, False, args.calls)
                rows.append(latency_row("latency, non-stream (ms, median / p90)",
                                        [x[1] for x in d], [x[1] for x in p]))
                d, p = await paired(session, direct, proxied, True, args.calls)
            rows.append(latency_row("latency, stream (ms, median / p90)", [x[1] for x in d], [x[1] for x in p]))
            rows.append(latency_row("time to first chunk, stream (ms, median / p90)",
                                    [x[0] for x in d], [x[0] for x in p]))
            d_tp, p_tp = await throughput(direct, proxied, args.stream_calls, args.concurrency, args.rounds)
            rows.append((f"throughput, {args.concurrency} streams, unpaced (calls/s)", f"{d_tp:17.1f}",
                         f"{p_tp:17.1f}", f"{p_tp * args.chunks:.0f} chunk/s", p_tp / d_tp))
            d_tp, p_tp = await throughput(ends(paced_url, real_key), ends(proxy_url, paced_key),
                                          args.concurrency * 3, args.concurrency, args.rounds)
            rows.append((f"throughput, {args.concurrency} streams, paced (calls/s)", f"{d_tp:17.1f}",
                         f"{p_tp:17.1f}", f"{p_tp * args.chunks:.0f} chunk/s", p_tp / d_tp))

            usage = [(await client.get(f"{proxy_url}/admin/cells/{k}", headers=admin_h)).json()
                     for k in (key, paced_key)]
        calls = sum(u["calls"] for u in usage)
        lines = sum(len((records / f"{n}.jsonl").read_text().splitlines()) for n in ("bench", "paced"))
        assert lines == calls, (lines, calls)
        assert all(real_key not in f.read_text() for f in records.iterdir())

        print(f"\ndriver proxy vs direct (fake Anthropic upstream, {args.chunks} SSE chunks per streamed reply, "
              f"paced: {args.chunk_delay_s * 1000:.0f} ms between chunks; {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f})")
        print(f"{'measure':52} {'direct':>17} {'proxy':>17} {'added':>14} {'ratio':>6}")
        for name, d, p, added, ratio in rows:
            print(f"{name:52} {d:>17} {p:>17} {added:>14} {ratio:6.2f}")
        print(f"\n{calls} proxied calls metered, {sum(u['total_tokens'] for u in usage)} tokens, "
              f"${sum(u['cost_usd'] for u in usage):.2f}; {lines} fsynced record lines")
        tmp.cleanup()
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls each way per latency row")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--stream-calls", type=int, default=480, help="calls each way per unpaced throughput round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating throughput rounds (median reported)")
    ap.add_argument("--chunks", type=int, default=16, help="SSE text chunks per streamed reply")
    ap.add_argument("--chunk-delay-s", type=float, default=0.02, help="pause between chunks when paced")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
