"""The only ways out of an isolated sandbox: unix sockets, served from outside, each forwarding to one address.

In the isolated network mode the agent has a network namespace of its own with nothing but loopback. A folder of
unix sockets is bound into it; inside, sandbox_init.py listens on 127.0.0.1:PORT and forwards to PORT.sock. Out
here each socket connects to exactly one address on this host's loopback (the grading server, the driver proxy),
so Ray's ports, other services and the rest of the network stay out of reach. Everything else goes through one HTTP
proxy socket that opens only the `host:port` pairs of an optional allowlist (a package index, say) and refuses the
rest; with a log file, each request it saw is one line there (network.jsonl: host, port, allowed or why refused), the
evidence a trace audit reads for downloads and probes.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from contracts.records import append_jsonl

PROXY_SOCKET = "proxy.sock"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()


async def _splice(client_r, client_w, upstream_r, upstream_w) -> None:
    await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    for w in (client_w, upstream_w):
        w.close()


class Relay:
    """Serves the sockets of one sandbox from a thread of the cell's process; close() ends every connection."""

    def __init__(self, folder: Path, targets: list[tuple[str, int]], allow: list[str] = (), log: Path | None = None):
        self.folder, self.targets, self.allow = folder, list(targets), {a.lower() for a in allow}
        self.log = log
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="a2rl-relay", daemon=True)
        self.servers: list[asyncio.AbstractServer] = []

    def socket_for(self, port: int) -> Path:
        return self.folder / f"{port}.sock"

    def start(self) -> "Relay":
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o755)  # the agent's uid must reach the sockets, not list anything else
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self.loop).result(timeout=30)
        return self

    async def _listen(self) -> None:
        for host, port in self.targets:
            self.servers.append(await asyncio.start_unix_server(
                lambda r, w, h=host, p=port: self._forward(r, w, h, p), path=str(self.socket_for(port))))
            os.chmod(self.socket_for(port), 0o777)
        self.servers.append(await asyncio.start_unix_server(self._proxy, path=str(self.folder / PROXY_SOCKET)))
        os.chmod(self.folder / PROXY_SOCKET, 0o777)

    async def _forward(self, reader, writer, host: str, port: int) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await _splice(reader, writer, up_r, up_w)

    async def _proxy(self, reader, writer) -> None:
        """An HTTP proxy for the allowlist: CONNECT host:port (https) or an absolute http:// URL; anything else
        gets 403, so a name that is not listed is never resolved or reached."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = line.decode("latin-1").split(" ", 2)
        except ValueError:
            return await self._refuse(writer, 400, "bad request line")
        if method.upper() == "CONNECT":
            host, _, port = target.rpartition(":")
            path = None
        elif target.lower().startswith("http://"):
            authority, slash, path = target[7:].partition("/")
            host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "80")
            path = slash + path
        else:
            return await self._refuse(writer, 400, "only CONNECT and absolute http:// URLs")
        host = host.strip("[]").lower()
        seen = {"method": method.upper(), "host": host, "port": port, "path": (path or "")[:300]}
        if f"{host}:{port}" not in self.allow:
            await asyncio.to_thread(self._note, **seen, allowed=False, status=403)
            return await self._refuse(writer, 403, f"{host}:{port} is not on the sandbox's allowlist")
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except (OSError, ValueError):
            await asyncio.to_thread(self._note, **seen, allowed=True, status=502)
            return await self._refuse(writer, 502, f"cannot reach {host}:{port}")
        await asyncio.to_thread(self._note, **seen, allowed=True, status=200)
        if path is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:  # origin-form to the server, one request per connection
            up_w.write(f"{method} {path} {version}\r\n".encode("latin-1") + rest)
        await _splice(reader, writer, up_r, up_w)

    def _note(self, **request) -> None:
        """One line per request through the proxy, durable (the agent's work goes on meanwhile: a thread's write)."""
        if self.log is not None:
            append_jsonl(self.log, {"t": time.time(), **request})

    @staticmethod
    async def _refuse(writer, status: int, why: str) -> None:
        body = (why + "\n").encode()
        writer.write(f"HTTP/1.1 {status} Refused\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                     + body)
        try:
            await writer.drain()
        finally:
            writer.close()

    def close(self) -> None:
        async def stop():
            for server in self.servers:
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # open connections end with the cell
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
