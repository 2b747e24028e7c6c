"""What the sandbox costs a cell: starting the agent, and each request to the grading server through the relay.

    .venv/bin/python benchmarks/bench_sandbox.py [--starts 10] [--requests 200]

Side by side in one run, on 127.0.0.1 only: (1) the time from start to exit of `python -c pass` unsandboxed, in the
sandbox with the host network, and in the isolated sandbox (relay, user switch, control group); (2) HTTP requests
from inside to a small server outside: directly (host network) and through the relay (isolated). Prints medians
and ratios.
"""
from __future__ import annotations

import argparse
import http.server
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator import sandbox  # noqa: E402

CLIENT = """
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
times = []
for _ in range(n):
    t = time.perf_counter()
    opener.open(url, timeout=10).read()
    times.append(time.perf_counter() - t)
times.sort()
print("P50", times[len(times) // 2])
"""


class Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def run(argv, workspace, sandboxed, network, forward=()) -> tuple[float, str]:
    out, err = workspace / "out.txt", workspace / "err.txt"
    out.unlink(missing_ok=True)
    t = time.perf_counter()
    proc = sandbox.start(argv, workspace, {"PATH": "/usr/bin:/bin", "HOME": str(workspace)}, out, err,
                         sandboxed=sandboxed, hidden=[Path(tempfile.gettempdir()), Path.home()],
                         readonly=sandbox.python_paths(), settings=sandbox.Settings(network=network),
                         cell_id="be7c0000beef", forward=list(forward), memory_bytes=4 << 30)
    proc.popen.wait()
    elapsed = time.perf_counter() - t
    proc.kill_group(1)
    proc.close()
    return elapsed, out.read_text() + err.read_text()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="a2rl-bench-sbx-"))
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "client.py").write_text(CLIENT)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        starts = {}
        for label, sandboxed, network in (("unsandboxed", False, "host"), ("sandbox, host network", True, "host"),
                                          ("sandbox, isolated", True, "isolated")):
            times = [run([sys.executable, "-c", "pass"], workspace, sandboxed, network, [("127.0.0.1", port)])[0]
                     for _ in range(args.starts)]
            starts[label] = statistics.median(times)
        print(f"start to exit of `python -c pass` (median of {args.starts}):")
        for label, t in starts.items():
            print(f"  {label:24s} {t * 1000:7.1f} ms   {t / starts['unsandboxed']:.2f}x")
        url = f"http://127.0.0.1:{port}/health"
        p50 = {}
        for label, network in (("direct (host network)", "host"), ("through the relay", "isolated")):
            _, text = run([sys.executable, "client.py", url, str(args.requests)], workspace, True, network,
                          [("127.0.0.1", port)])
            p50[label] = float(text.split("P50")[1].split()[0])
        print(f"HTTP GET from inside the sandbox (p50 of {args.requests}):")
        for label, t in p50.items():
            print(f"  {label:24s} {t * 1000:7.2f} ms   {t / p50['direct (host network)']:.2f}x")
    finally:
        server.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
