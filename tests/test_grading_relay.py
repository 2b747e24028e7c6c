"""The cell's grading relay (orchestrator/grading_relay.py): the original's curl line, with no token, is graded; an
agent of another cell cannot submit through it, in both sandbox network modes.

The upstream is a real HTTP/1.1 server on loopback that echoes what reached it (method, path, query, body digest,
Authorization headers); the clients are the real curl, run here and inside real sandboxes (orchestrator.sandbox).
"""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from orchestrator import sandbox
from orchestrator.grading_relay import GradingRelay, peer_uids, socket_owner

TOKEN = "run-token-of-cell-a"
WAIT_S = 120  # a bound on waiting for a process that is not stuck, never a measure of speed


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers what it got, as JSON. /…/slow waits for the test's go; /…/chunked answers the body back, chunked."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self._echo()

    do_POST = do_PUT = do_GET

    def _echo(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while (line := self.rfile.readline().split(b";")[0].strip()) and (size := int(line, 16)):
                body += self.rfile.read(size)
                self.rfile.readline()
            if not line:  # the client went away mid-body (a test cuts one): nothing to answer
                return
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        self.server.seen.append(url.path)
        if url.path.endswith("/slow"):
            self.server.arrived.set()
            self.server.go.wait()
        if url.path.endswith("/chunked"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(body), 65536):
                piece = body[i:i + 65536]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        answer = json.dumps({
            "method": self.command, "path": url.path, "query": parse_qs(url.query),
            "authorization": self.headers.get_all("Authorization") or [], "host": self.headers.get("Host"),
            "body": body.decode("utf-8", "replace") if len(body) < 4096 else None,
            "length": len(body), "sha256": hashlib.sha256(body).hexdigest()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    server.seen, server.arrived, server.go = [], threading.Event(), threading.Event()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.go.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def relay(upstream):
    relay = GradingRelay(f"http://127.0.0.1:{upstream.server_address[1]}/gsm8k", TOKEN, allowed_uids={os.geteuid()})
    relay.start()
    yield relay
    relay.close()


def curl(*args: str) -> tuple[str, str]:
    """curl's body and HTTP status (000 when it got no answer)."""
    out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args], capture_output=True, text=True,
                         timeout=WAIT_S).stdout
    body, _, status = out.rpartition("\n")
    return body, status


pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


def test_the_originals_curl_line_is_graded_with_the_runs_token(relay, upstream):
    url = f"http://127.0.0.1:{relay.port}"
    # the original's line: no auth header
    body, status = curl("-X", "POST", f"{url}/submit", "-H", "Content-Type: application/json",
                        "-d", '{"model_path": "/ws/output/v1"}')
    seen = json.loads(body)
    assert status == "200" and seen["method"] == "POST" and seen["path"] == "/gsm8k/submit"
    assert seen["authorization"] == [f"Bearer {TOKEN}"] and seen["body"] == '{"model_path": "/ws/output/v1"}'
    assert seen["host"] == f"127.0.0.1:{upstream.server_address[1]}"
    # a token the agent sends (another cell's, say) is replaced, never forwarded beside the run's
    body, _ = curl("-X", "POST", f"{url}/submit", "-H", "Authorization: Bearer token-of-cell-b",
                   "-H", "authorization: Basic eDp5", "-H", "Content-Type: application/json", "-d", "{}")
    assert json.loads(body)["authorization"] == [f"Bearer {TOKEN}"]
    body, _ = curl(f"{url}/time?verbose=1&x=a%20b")
    seen = json.loads(body)
    assert (seen["method"], seen["path"], seen["query"]) == ("GET", "/gsm8k/time", {"verbose": ["1"], "x": ["a b"]})


BAD_REQUESTS = [
    (b"GARBAGE\r\n\r\n", "METHOD TARGET VERSION"),
    (b"GET /../webshop/submit HTTP/1.1\r\nHost: x\r\n\r\n", ". or .. segment"),
    (b"GET /%2E%2e/webshop/submit HTTP/1.1\r\n\r\n", ". or .. segment"),
    (b"GET http://127.0.0.1:1/submit HTTP/1.1\r\n\r\n", "origin form"),
    (b"POST /submit HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", "both"),
    (b"POST /submit HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "Content-Length"),
    (b"GET /time HTTP/1.1\r\nX: a\nAuthorization: Bearer b\r\n\r\n", "control character"),
    (b"GET /time HTTP/1.1\r\n folded\r\n\r\n", "malformed header"),
    (b"POST /submit HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
]


@pytest.mark.parametrize("request_bytes, why", BAD_REQUESTS, ids=[why for _, why in BAD_REQUESTS])
def test_a_bad_request_gets_a_clear_400_and_reaches_nothing(relay, upstream, request_bytes, why):
    with socket.create_connection(("127.0.0.1", relay.port), timeout=WAIT_S) as s:
        s.sendall(request_bytes)
        s.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: s.recv(65536), b"")).decode()
    assert answer.startswith("HTTP/1.1 400 ") and why in answer, answer
    if why != "bad chunk size":  # a chunked body's framing is found wrong only after its head went on
        assert upstream.seen == []


def test_another_uid_is_refused_with_its_reason(upstream):
    other = os.geteuid() + 1
    relay = GradingRelay(f"http://127.0.0.1:{upstream.server_address[1]}/gsm8k", TOKEN, allowed_uids={other})
    port = relay.start()
    try:
        body, status = curl("-X", "POST", f"http://127.0.0.1:{port}/submit", "-d", '{"model_path": "x"}')
    finally:
        relay.close()
    assert status == "403" and f"came from uid {os.geteuid()}" in body and f"serves uid {other} only" in body
    assert len(body.strip().splitlines()) == 1 and upstream.seen == []


def test_socket_owner_reads_the_peers_live_socket():
    """The uid of a connected client, seen from the server's side; a closed client's lingering entry is nobody's."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, peer = server.accept()
        assert socket_owner(peer, conn.getsockname()) == os.geteuid()
        assert socket_owner(conn.getsockname(), peer) == os.geteuid()  # the accepted side is ours as well
        client.close()  # FIN_WAIT, then TIME_WAIT: no inode, uid 0, whoever made it
        assert socket_owner(peer, conn.getsockname()) is None
        conn.close()


def test_large_bodies_both_framings_and_a_slow_answer_pass(relay, upstream, tmp_path):
    url = f"http://127.0.0.1:{relay.port}"
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(12 << 20))  # over curl's 1 MiB: it sends Expect: 100-continue first
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    for framing in ([], ["-H", "Transfer-Encoding: chunked"]):
        body, status = curl("-X", "POST", f"{url}/submit", *framing, "--data-binary", f"@{blob}")
        seen = json.loads(body)
        assert status == "200" and (seen["length"], seen["sha256"]) == (12 << 20, digest)
        assert seen["authorization"] == [f"Bearer {TOKEN}"]
    _, status = curl("--data-binary", f"@{blob}", "-o", str(tmp_path / "back"), f"{url}/chunked")  # answer chunked
    assert status == "200" and hashlib.sha256((tmp_path / "back").read_bytes()).hexdigest() == digest
    with socket.create_connection(("127.0.0.1", relay.port), timeout=WAIT_S) as s:  # HTTP/1.0 cannot read chunks
        s.sendall(b"POST /chunked HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")
        head, _, body = b"".join(iter(lambda: s.recv(65536), b"")).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"chunked" not in head.lower() and body == b"hello"

    waiting = subprocess.Popen(["curl", "-s", "-X", "POST", f"{url}/slow", "-d", '{"model_path": "v2"}'],
                               stdout=subprocess.PIPE, text=True)
    assert upstream.arrived.wait(WAIT_S)
    time.sleep(3)  # the grader takes its time: the relay has no timeout of its own to give up with
    assert waiting.poll() is None
    upstream.go.set()
    seen = json.loads(waiting.communicate(timeout=WAIT_S)[0])
    assert seen["path"] == "/gsm8k/slow" and seen["body"] == '{"model_path": "v2"}'


def test_close_ends_open_requests_and_the_listener(relay, upstream):
    port = relay.port
    waiting = subprocess.Popen(["curl", "-s", "-w", "%{http_code}", "-X", "POST", f"http://127.0.0.1:{port}/slow",
                                "-d", "{}"], stdout=subprocess.PIPE, text=True)
    assert upstream.arrived.wait(WAIT_S)
    relay.close()
    out, _ = waiting.communicate(timeout=WAIT_S)  # cut off, not answered
    assert waiting.returncode != 0 and out == "000"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=WAIT_S).close()


SUBMIT = """curl -X POST "$GRADING_SERVER_URL/submit" -H "Content-Type: application/json" \
-d '{"model_path": "'$OUTPUT_DIR'/v1"}'
code=$?; echo; echo "EXIT $code"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: each cell's agent runs as a uid of its own")
@pytest.mark.skipif(sandbox.bwrap_path() is None or sandbox.bwrap_version() < sandbox.MIN_BWRAP,
                    reason="needs bubblewrap")
@pytest.mark.parametrize("network", ["isolated", "host"])
def test_a_sandboxed_agent_is_graded_through_its_relay_and_another_cells_is_not(upstream, tmp_path, network):
    """Cell A's agent runs the original's curl line in its sandbox and is graded with A's token. Cell B's agent runs
    it against A's relay: in the host mode it reaches the port and is refused by uid, in the isolated mode the port
    does not exist in its network at all; through its own relay it is graded with B's token."""
    settings = sandbox.Settings(network=network)
    cells = {"a": "a2a100000000", "b": "b2b100000000"}
    relays, ports = {}, {}
    for name, cell_id in cells.items():
        allowed = peer_uids(network, sandbox.agent_ids(cell_id, settings))
        assert allowed is not None
        relays[name] = GradingRelay(f"http://127.0.0.1:{upstream.server_address[1]}/gsm8k", f"token-{name}", allowed)
        ports[name] = relays[name].start()

    def run(cell: str, target: str) -> str:
        workspace = tmp_path / f"{cell}-to-{target}"
        workspace.mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workspace), "OUTPUT_DIR": str(workspace / "output"),
               "GRADING_SERVER_URL": f"http://127.0.0.1:{ports[target]}"}
        proc = sandbox.start(["/bin/sh", "-c", SUBMIT], workspace, env, workspace.with_suffix(".out"),
                             workspace.with_suffix(".err"), sandboxed=True, hidden=[Path("/tmp"), Path.home()],
                             readonly=sandbox.python_paths(), settings=settings, cell_id=cells[cell],
                             forward=[("127.0.0.1", ports[cell])], memory_bytes=2 << 30)
        try:
            proc.popen.wait(timeout=WAIT_S)
        finally:
            proc.kill_group(1)
            proc.close()
        return workspace.with_suffix(".out").read_text()

    try:
        a, b_own, b_to_a = run("a", "a"), run("b", "b"), run("b", "a")
    finally:
        for r in relays.values():
            r.close()
    for out, cell in ((a, "a"), (b_own, "b")):
        seen = json.loads(out.split("\nEXIT")[0])
        assert seen["path"] == "/gsm8k/submit" and seen["authorization"] == [f"Bearer token-{cell}"], out
        assert json.loads(seen["body"]) == {"model_path": str(tmp_path / f"{cell}-to-{cell}" / "output" / "v1")}
    b_uid = sandbox.agent_ids(cells["b"], settings)[0]
    if network == "host":
        assert f"came from uid {b_uid}" in b_to_a and "EXIT 0" in b_to_a, b_to_a
    else:
        assert "EXIT 7" in b_to_a, b_to_a  # curl: could not connect
    assert upstream.seen == ["/gsm8k/submit", "/gsm8k/submit"]  # B's try on A's relay reached nothing
