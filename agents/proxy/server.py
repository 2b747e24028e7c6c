"""Serve an ASGI app with uvicorn on loopback, in a background thread or in the foreground.

Port 0 picks a free port; the socket is bound before uvicorn starts, so the URL is known at once.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def config(app, **kwargs) -> uvicorn.Config:
    # uvloop/httptools when present (they are with uvicorn[standard]); no access log: the proxy keeps
    # its own records, and a line per streamed call would cost more than the call's forwarding.
    return uvicorn.Config(app, log_level="warning", access_log=False, loop="auto", http="auto",
                          timeout_keep_alive=75, lifespan="on", **kwargs)


class ThreadServer:
    """uvicorn in a daemon thread: `url`, `stop()`. For tests, benchmarks, an in-process proxy."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self._sock = bind(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self._server = uvicorn.Server(config(app))
        self._server.install_signal_handlers = lambda: None   # not the main thread
        self._thread = threading.Thread(target=self._run, name=f"uvicorn:{self.port}", daemon=True)

    def _run(self):
        asyncio.run(self._server.serve(sockets=[self._sock]))

    def start(self, timeout_s: float = 10.0) -> "ThreadServer":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def run_forever(app, host: str = "127.0.0.1", port: int = 0, on_bound=None) -> None:
    """Foreground server; on_bound(url) is called once the port is known (e.g. to print it)."""
    sock = bind(host, port)
    if on_bound:
        on_bound(f"http://{host}:{sock.getsockname()[1]}")
    uvicorn.Server(config(app)).run(sockets=[sock])
