"""Per-cell keys, budgets and durable call records.

A cell is registered with its driver config, a token/cost budget and a records file outside the
agent's workspace. The agent only ever gets the per-cell key; the real key is read here, from the
environment variable the driver names, when the cell is registered.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agents.proxy.protocols import provider_names
from agents.proxy.usage import Usage, cost_usd
from contracts.records import read_jsonl, write_whole

KEY_PREFIX = "a2rl-"


def validate_driver(driver: dict) -> dict:
    """Check a driver config (conf/driver/*.yaml) enough that a mistake fails at registration."""
    driver = dict(driver)
    name = driver.get("name", "?")
    if driver.get("provider") not in provider_names():
        raise ValueError(f"driver {name}: provider={driver.get('provider')!r}; expected one of "
                         f"{tuple(provider_names())}")
    if not driver.get("base_url"):
        raise ValueError(f"driver {name}: base_url is missing")
    for key in ("price_input_per_mtok", "price_output_per_mtok", "price_cached_input_per_mtok"):
        value = driver.get(key)
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"driver {name}: {key}={value!r} must be a number >= 0")
    window = driver.get("context_window")
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window <= 0):
        raise ValueError(f"driver {name}: context_window={window!r} must be a number of tokens > 0, or null (asked "
                         "from an OpenAI-compatible server's /v1/models)")
    if driver.get("tokenizer") is not None and not isinstance(driver["tokenizer"], str):
        raise ValueError(f"driver {name}: tokenizer={driver['tokenizer']!r} must be a hub id or a path, or null")
    return driver


@dataclass
class Cell:
    cell_id: str
    driver: dict
    real_key: str | None
    max_tokens: int | None
    max_cost_usd: float | None
    records_path: str
    max_output_tokens: int | None = None   # the most tokens one request may ask for (the CLI's output limit)
    calls: int = 0
    refused: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    wait_s: float = 0.0
    estimated_calls: int = 0    # calls whose tokens the proxy counted itself (a stream cut before its usage)
    estimated_tokens: int = 0
    closed: bool = False
    in_flight: int = 0      # calls accepted and not yet recorded (close_cell waits for them to land)
    _fd: int = field(default=-1, repr=False)
    # close_cell may come from the orchestrator's thread while the server's loop records a call.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def exhausted(self) -> str | None:
        """Which limit is spent ('max_tokens' or 'max_cost_usd'), or None."""
        if self.max_tokens is not None and self.input_tokens + self.output_tokens >= self.max_tokens:
            return "max_tokens"
        if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
            return "max_cost_usd"
        return None

    def record(self, **call) -> dict:
        """Count one call and append its line durably (write, then fsync) before returning."""
        line, data = self._account(**call)
        try:
            self._write(data)
        finally:
            self.in_flight -= 1
        return line

    async def record_async(self, **call) -> dict:
        """The same, with the disk work (an fsync costs milliseconds on a real disk, and a write to
        a file being fsynced waits for it) in a worker thread so the event loop keeps serving other
        calls; returns once the line is on disk."""
        line, data = self._account(**call)
        # The call counts as in flight until the line is on disk, also when this coroutine is cancelled mid-write
        # (the agent hung up right after a stream's last chunk): close_cell waits on in_flight, and the cell's final
        # records are read right after it, so counting it down early loses the line from the ledger.
        write = asyncio.ensure_future(asyncio.to_thread(self._write, data))
        write.add_done_callback(self._landed)
        await asyncio.shield(write)
        return line

    def _landed(self, write: asyncio.Future) -> None:
        self.in_flight -= 1
        if not write.cancelled():
            write.exception()  # raised to the caller when it still waits; read here so a lone one is not logged

    def _account(self, *, t: float, endpoint: str, model: str | None, requested_model: str | None,
                 usage: Usage, latency_s: float, wait_s: float, attempts: int, status: int,
                 stream: bool, error: str | None, estimated: dict | None = None,
                 capped: dict | None = None, at_output_limit: bool = False) -> tuple[dict, bytes]:
        # On the event loop, so the budget is up to date before the next call is checked.
        cost = cost_usd(usage, self.driver)
        self.calls += 1
        if estimated:
            self.estimated_calls += 1
            self.estimated_tokens += usage.total_tokens
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_tokens += usage.cached_tokens
        self.cost_usd += cost
        self.wait_s += wait_s
        line = {
            "t": t, "kind": "driver_usage", "cell_id": self.cell_id, "driver": self.driver.get("name"),
            "provider": self.driver["provider"], "endpoint": endpoint, "model": model,
            "requested_model": requested_model, "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens, "cached_tokens": usage.cached_tokens,
            "cost_usd": round(cost, 10), "latency_s": round(latency_s, 6), "wait_s": round(wait_s, 6),
            "attempts": attempts, "status": status, "stream": stream, "error": error,
            "metered": usage.input_tokens + usage.output_tokens > 0,
            # How the proxy counted tokens the upstream never reported (agents.proxy.estimate), per count; None: the
            # counts are the upstream's own.
            "estimated": estimated,
            # The output cap the proxy wrote into the request ({field: [asked, sent]}); None: sent as the CLI asked.
            "capped": capped,
            # The upstream said the reply stopped at its output-token limit (finish_reason length, ...): cut there.
            "at_output_limit": at_output_limit,
        }
        data = (json.dumps(line) + "\n").encode()
        if self.real_key:   # belt and braces: an upstream error message might quote the key
            data = data.replace(self.real_key.encode(), b"***")
        return line, data

    def _write(self, data: bytes) -> None:
        # One os.write on an O_APPEND descriptor is one whole line, whatever else writes the file.
        # The descriptor is our own duplicate so close_cell cannot pull it away mid-sync; after
        # close_cell (a stream that outlived its cell) the file is opened just for this line.
        with self._lock:
            fd = os.dup(self._fd) if self._fd >= 0 else _open_append(self.records_path)
        try:
            write_whole(fd, data, self.records_path)
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def replay(self, line: dict) -> None:
        """Count a call recorded by an earlier process of the proxy (its replica restarted), as _account did."""
        self.calls += 1
        self.refused += str(line.get("error") or "").startswith("budget_exhausted")
        self.input_tokens += line["input_tokens"]
        self.output_tokens += line["output_tokens"]
        self.cached_tokens += line["cached_tokens"]
        self.cost_usd += line["cost_usd"]
        self.wait_s += line["wait_s"]
        if line.get("estimated"):
            self.estimated_calls += 1
            self.estimated_tokens += line["input_tokens"] + line["output_tokens"]

    def usage(self) -> dict:
        return {
            "cell_id": self.cell_id, "driver": self.driver.get("name"), "calls": self.calls,
            "refused": self.refused, "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens, "cached_tokens": self.cached_tokens,
            "total_tokens": self.input_tokens + self.output_tokens, "cost_usd": self.cost_usd,
            "wait_s": self.wait_s, "estimated_calls": self.estimated_calls,
            "estimated_tokens": self.estimated_tokens, "max_tokens": self.max_tokens, "max_cost_usd": self.max_cost_usd,
            "exhausted": self.exhausted(), "closed": self.closed, "records_path": self.records_path,
            "in_flight": self.in_flight,
        }


class CellRegistry:
    """All cells of one proxy, by key. Lives in one process (one Serve replica / one uvicorn)."""

    def __init__(self, environ: dict | None = None):
        self._environ = os.environ if environ is None else environ
        self._cells: dict[str, Cell] = {}

    def register_cell(self, cell_id: str, driver: dict, limits: dict | None, records_path: str,
                      key: str | None = None) -> str:
        """Register a cell; returns the per-cell key its agent uses in place of the real one (a new one unless
        given: restore gives the key the cell already has)."""
        driver = validate_driver(driver)
        limits = limits or {}
        unknown = set(limits) - {"max_tokens", "max_cost_usd", "max_output_tokens"}
        if unknown:
            raise ValueError(f"cell {cell_id}: unknown limit(s) {sorted(unknown)}")
        env = driver.get("api_key_env")
        real_key = None
        if env:
            real_key = self._environ.get(env)
            if not real_key:
                raise ValueError(f"driver {driver.get('name', '?')}: environment variable {env} is not set "
                                 "where the driver proxy runs")
        Path(records_path).parent.mkdir(parents=True, exist_ok=True)
        key = key or KEY_PREFIX + secrets.token_urlsafe(24)
        cell = Cell(cell_id, driver, real_key, limits.get("max_tokens"), limits.get("max_cost_usd"),
                    str(records_path), limits.get("max_output_tokens"))
        cell._fd = _open_append(cell.records_path)
        self._cells[key] = cell
        return key

    def restore(self, key: str, cell_id: str, driver: dict, limits: dict | None, records_path: str,
                closed: bool = False) -> None:
        """A cell registered with an earlier process of the proxy (its replica died and Serve started another): the
        same key, and its use so far counted from its records, so its budget goes on from where it was."""
        self.register_cell(cell_id, driver, limits, records_path, key=key)
        cell = self._cells[key]
        for line in read_jsonl(Path(records_path)):
            cell.replay(line)
        if closed:
            cell.close()

    def cap_output(self, key: str, max_output_tokens: int | None) -> None:
        """Hold every request of the cell to max_output_tokens (set once its agent's limit is known)."""
        self._cells[key].max_output_tokens = max_output_tokens

    def get(self, key: str | None) -> Cell | None:
        cell = self._cells.get(key) if key else None
        return None if cell is None or cell.closed else cell

    def close_cell(self, key: str) -> dict:
        """Stop accepting the key; returns the cell's final usage. Closing twice is harmless."""
        cell = self._cells.get(key)
        if cell is None:
            raise KeyError("unknown proxy key")
        cell.close()
        return cell.usage()

    def usage(self, key: str) -> dict:
        cell = self._cells.get(key)
        if cell is None:
            raise KeyError("unknown proxy key")
        return cell.usage()

    def close_all(self) -> None:
        for cell in self._cells.values():
            cell.close()


def _open_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

