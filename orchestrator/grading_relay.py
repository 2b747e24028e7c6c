"""A cell's grading relay: the agent calls its grader as in the original benchmark, with no token, and is graded.

The original's agent runs `curl -X POST $GRADING_SERVER_URL/submit -H 'Content-Type: application/json' -d ...` with
no auth header; a2rl's grader wants the run's token (Authorization: Bearer TOKEN) at <grading_url>/<task>/<route>. The
relay listens on an ephemeral port of loopback, in a thread of the cell's process (as netrelay.Relay does), and
forwards each request `/<path>?<query>` to `<upstream>/<path>?<query>` with the run's token in place of whatever
Authorization the client sent (so a token the agent got hold of, another cell's say, is never forwarded). Bodies
stream both ways (Content-Length and chunked); the upstream's status, headers and body come back as they are. One
request per connection (Connection: close). No timeout of its own: a submission is answered when it is scored, which
can take an hour; close() ends the listener and every open connection with the cell.

Who may use it, by network mode (peer_uids says which uids the cell passes as allowed_uids):
- `isolated`: the agent reaches 127.0.0.1:<port> inside its sandbox only because the cell put ("127.0.0.1", port) in
  sandbox.start's `forward` list; sandbox_init.py forwards that port to a unix socket that netrelay.Relay serves from
  the cell's own process, which connects here. Another cell's sandbox has no way to this port (its forwards are its
  own), and the peer is a2rl's own uid, so allowed_uids = {a2rl's uid} also keeps out host-mode agents of other uids.
- `host`: the port is open to every process of the machine, so the relay asks who connected: the owner uid of the
  peer's socket, read from /proc/net/tcp and /proc/net/tcp6 (the live entry whose local address is the peer's address
  and port and whose remote address is the relay's), must be in allowed_uids, the cell's agent uid
  (sandbox.agent_ids). Anything else gets 403 with a one-line reason, before the request goes anywhere.
- allowed_uids=None: no check. That is what holds where a2rl is not root: every cell's agent runs as a2rl's own user
  (bwrap's user namespace maps it there), so no uid tells this cell's agent from another's, and in the host mode any
  agent on the machine (or any process of that user) can submit through this relay under this cell's token. peer_uids
  returns None exactly then, so the caller sees the case and can refuse it (or accept it and say so in the record).
  An unsandboxed cell (sandbox.required=false) is no better off: its agent is a2rl's own user too.

    allowed = peer_uids(settings.network, sandbox.agent_ids(cell_id, settings))  # None: refuse, or say so
    relay = GradingRelay(f"{grading_url}/{task}", token, allowed)
    port = relay.start()  # GRADING_SERVER_URL=http://127.0.0.1:{port}; isolated: ("127.0.0.1", port) in forward
    ...
    relay.close()
"""
from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import struct
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

HEAD_LIMIT = 64 * 1024  # bytes of request line and headers (or of one chunk-size line): asyncio's default, ample
# Headers that describe one connection, not the message (RFC 9110 7.6.1), plus those the relay sets itself. The
# client's Authorization is in this set on purpose: the run's token replaces it.
REQUEST_DROPPED = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade",
                   "host", "authorization", "expect"}
RESPONSE_DROPPED = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"}
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a method or header name (RFC 9110 5.6.2)
CONTROL = re.compile(r"[\x00\r\n]")


class BadRequest(Exception):
    """The client's request cannot be forwarded as it is: answered 400 with this reason."""


def peer_uids(network: str, agent_ids: tuple[int, int] | None) -> set[int] | None:
    """The uids whose connections the cell's relay accepts in sandbox network mode `network`, for the cell's agent
    ids (sandbox.agent_ids). None in the host mode without a per-cell uid: nothing can tell this cell's agent from
    another's there (see the module's docstring); the caller decides whether a cell may run so."""
    if network == "isolated":
        return {os.geteuid()}  # the cell's own netrelay.Relay is the peer
    return None if agent_ids is None else {agent_ids[0]}


def _address(field: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of /proc/net/tcp{,6}: the IP as 32-bit words in host byte order, ':', the port in hex."""
    ip_hex, _, port_hex = field.partition(":")
    raw = b"".join(struct.pack("=I", int(ip_hex[i:i + 8], 16)) for i in range(0, len(ip_hex), 8))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # an IPv6 socket connected to 127.0.0.1
    return ip, int(port_hex, 16)


def socket_owner(peer: tuple[str, int], local: tuple[str, int], tables=TCP_TABLES) -> int | None:
    """The uid that owns the socket at `peer` connected to `local` (both seen from this side), or None when there
    is no live one: a socket already closed by its process lingers with no inode and uid 0, which must not count
    as root's."""
    want = ((ipaddress.ip_address(peer[0]), peer[1]), (ipaddress.ip_address(local[0]), local[1]))
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) >= 10 and fields[9] != "0" and fields[1].endswith(f":{peer[1]:04X}") and \
                    (_address(fields[1]), _address(fields[2])) == want:
                return int(fields[7])
    return None


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """The start line's three parts and the header fields of a message head (ending in CRLF CRLF)."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    if any(CONTROL.search(line) for line in lines):  # a bare LF would end a line for some parsers, not for others
        raise BadRequest("a control character (NUL, CR or LF) inside a line of the head")
    parts = lines[0].split(" ", 2) if lines else []
    if len(parts) != 3:
        raise BadRequest(f"the first line must be METHOD TARGET VERSION, got {(lines or [''])[0][:200]!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not TOKEN.fullmatch(name):  # also a folded line (leading space): obsolete, refused
            raise BadRequest(f"malformed header line {line[:200]!r}")
        headers.append((name, value.strip()))
    return parts[0], parts[1], parts[2], headers


def _framing(headers: list[tuple[str, str]]) -> tuple[bool, int | None]:
    """(chunked, content length) of a message; a message that could be read two ways is refused (smuggling)."""
    encodings = [v.strip().lower() for n, v in headers if n.lower() == "transfer-encoding" for v in v.split(",")]
    lengths = {v for n, v in headers if n.lower() == "content-length"}
    if encodings and encodings != ["chunked"]:
        raise BadRequest(f"Transfer-Encoding {', '.join(encodings)!r} is not supported (only chunked)")
    if encodings and lengths:
        raise BadRequest("both Transfer-Encoding and Content-Length are set")
    if len(lengths) > 1 or (lengths and not next(iter(lengths)).isdigit()):
        raise BadRequest(f"bad Content-Length {sorted(lengths)}")
    return bool(encodings), int(next(iter(lengths))) if lengths else None


async def _copy_exactly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int) -> None:
    while size > 0:
        data = await reader.read(min(size, 1 << 16))
        if not data:
            raise asyncio.IncompleteReadError(b"", size)
        writer.write(data)
        await writer.drain()
        size -= len(data)


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dechunk: bool = False) -> None:
    """Copy a chunked body as it is (or only its data, for an HTTP/1.0 client), parsed just to find its end."""
    while True:
        line = await reader.readuntil(b"\r\n")
        size_hex = line.split(b";", 1)[0].strip()
        try:
            size = int(size_hex, 16)
        except ValueError:
            raise BadRequest(f"bad chunk size {size_hex[:40]!r}") from None
        if not dechunk:
            writer.write(line)
        if size == 0:
            while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                if not dechunk:
                    writer.write(trailer)
            if not dechunk:
                writer.write(b"\r\n")
            await writer.drain()
            return
        await _copy_exactly(reader, writer, size)
        if await reader.readexactly(2) != b"\r\n":
            raise BadRequest("a chunk does not end with CRLF")
        if not dechunk:
            writer.write(b"\r\n")


class GradingRelay:
    """The cell's relay to its grader: start() -> the port on `host`, close() ends it and every open connection."""

    def __init__(self, upstream: str, token: str, allowed_uids: set[int] | None = None, host: str = "127.0.0.1"):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or parts.query:
            raise ValueError(f"upstream {upstream!r} must be an http:// URL without a query, like "
                             f"http://127.0.0.1:8000/gsm8k")
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"host {host!r} is not a loopback address: the relay adds the run's token for anyone "
                             f"who reaches it")
        self.up_host, self.up_port, self.up_path = parts.hostname, parts.port or 80, parts.path.rstrip("/")
        self.up_authority = parts.netloc
        self.token, self.allowed_uids, self.host = token, allowed_uids, host
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="a2rl-grading-relay", daemon=True)
        self.server: asyncio.AbstractServer | None = None
        self.port: int | None = None

    def start(self) -> int:
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, self.host, 0, limit=HEAD_LIMIT), self.loop).result(timeout=30)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        async def stop():
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # open connections end with the cell
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.thread.is_alive():
            if self.server is not None:
                asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            if not self.thread.is_alive():
                self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = None
        try:
            refusal = await self._refusal(writer)  # first: the peer's socket is surely alive while it waits
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                return await _answer(writer, reader, 431, f"request head over {HEAD_LIMIT} bytes")
            except asyncio.IncompleteReadError as e:
                if e.partial.strip():
                    await _answer(writer, reader, 400, "the request ended before its headers did")
                return
            if refusal:
                return await _answer(writer, reader, 403, refusal)
            try:
                method, target, version, headers, chunked, length = self._request(head)
            except BadRequest as e:
                return await _answer(writer, reader, 400, str(e))
            try:
                up_r, upstream = await asyncio.open_connection(self.up_host, self.up_port, limit=HEAD_LIMIT)
            except OSError as e:
                return await _answer(writer, reader, 502, f"cannot reach the grader at {self.up_authority}: {e}")
            if any(n.lower() == "expect" and v.lower() == "100-continue" for n, v in headers) and version != "HTTP/1.0":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # Expect is not forwarded: the relay answers it
            upstream.write(self._upstream_head(method, target, headers))
            try:
                if chunked:
                    await _copy_chunked(reader, upstream)
                elif length:
                    await _copy_exactly(reader, upstream, length)
            except (BadRequest, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                return await _answer(writer, reader, 400, f"bad request body: {e}")
            except ConnectionError:
                pass  # the grader stopped reading (it answered early): its answer follows
            await self._respond(up_r, writer, method, version)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, BadRequest):
            pass  # one side went away mid-message: nothing more can be said to it
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _refusal(self, writer: asyncio.StreamWriter) -> str | None:
        """Why this connection may not use the relay, or None."""
        if self.allowed_uids is None:
            return None
        peer, local = writer.get_extra_info("peername")[:2], writer.get_extra_info("sockname")[:2]
        uid = await asyncio.to_thread(socket_owner, peer, local)
        if uid is None:
            return f"cannot tell which user connected from {peer[0]}:{peer[1]} (no live socket in /proc/net/tcp)"
        if uid not in self.allowed_uids:
            return (f"this grading relay serves uid {', '.join(map(str, sorted(self.allowed_uids)))} only (its "
                    f"cell's agent); the connection came from uid {uid}")
        return None

    def _request(self, head: bytes):
        """The client's request, checked: (method, target, version, headers, chunked, content length)."""
        method, target, version, headers = _parse_head(head)
        if not TOKEN.fullmatch(method):
            raise BadRequest(f"the method {method[:40]!r} is not a word")
        if version not in ("HTTP/1.0", "HTTP/1.1"):
            raise BadRequest(f"the request line must end in HTTP/1.0 or HTTP/1.1, not {version[:40]!r}")
        if not target.startswith("/"):
            raise BadRequest(f"the target must be a path such as /submit (origin form), not {target[:200]!r}")
        if any(segment in (".", "..") for segment in unquote(target.partition("?")[0]).split("/")):
            raise BadRequest(f"the path {target[:200]!r} has a . or .. segment: it may not leave the task's routes")
        chunked, length = _framing(headers)
        return method, target, version, headers, chunked, length

    def _upstream_head(self, method: str, target: str, headers: list[tuple[str, str]]) -> bytes:
        """The request line and headers for the grader: the run's token, its Host, one request per connection."""
        named = {v.strip().lower() for n, v in headers if n.lower() == "connection" for v in v.split(",")}
        kept = [(n, v) for n, v in headers if n.lower() not in REQUEST_DROPPED | named]
        lines = [f"{method} {self.up_path}{target} HTTP/1.1", f"Host: {self.up_authority}",
                 f"Authorization: Bearer {self.token}", *(f"{n}: {v}" for n, v in kept), "Connection: close"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _respond(self, up_r: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str,
                       version: str) -> None:
        """The grader's answer to the client: its status, headers and body, framed as the grader framed it."""
        while True:
            try:
                head = await up_r.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return await _answer(writer, None, 502, "the grader closed the connection without a valid answer")
            try:
                status_version, status, reason, headers = _parse_head(head)
                chunked, length = _framing(headers)
            except BadRequest as e:
                return await _answer(writer, None, 502, f"the grader's answer is malformed: {e}")
            if len(status) != 3 or not status.isdigit() or not status_version.startswith("HTTP/"):
                return await _answer(writer, None, 502, f"the grader answered {head[:80]!r}")
            if not status.startswith("1"):
                break  # an interim answer (102, 103) is the grader's own business
        no_body = method == "HEAD" or status in ("204", "304")
        dechunk = chunked and version == "HTTP/1.0"  # a 1.0 client reads a body up to the end of the connection
        named = {v.strip().lower() for n, v in headers if n.lower() == "connection" for v in v.split(",")}
        kept = [(n, v) for n, v in headers if n.lower() not in RESPONSE_DROPPED | named
                and not (dechunk and n.lower() == "transfer-encoding")]
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{n}: {v}" for n, v in kept), "Connection: close"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if no_body:
            pass
        elif chunked:
            await _copy_chunked(up_r, writer, dechunk)
        elif length is not None:
            await _copy_exactly(up_r, writer, length)
        else:  # the body runs to the end of the grader's connection
            while data := await up_r.read(1 << 16):
                writer.write(data)
                await writer.drain()
        await writer.drain()


async def _answer(writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None, status: int, why: str) -> None:
    """The relay's own answer, one line of text; then it reads what the client still sends until the client closes,
    so that closing with unread data (a reset) does not destroy the answer before the client has read it."""
    body = (why + "\n").encode()
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}
    writer.write(f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    if reader is not None and writer.can_write_eof():
        writer.write_eof()
        while await reader.read(1 << 16):
            pass
