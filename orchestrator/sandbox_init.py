"""The first program inside an agent's sandbox, run as the agent itself: limits, loopback ports, then the agent.

Standard library only: it runs on the sandbox's Python with nothing of a2rl importable (bound read-only at
/run/a2rl/init.py). It lowers the cell's per-process limits (the agent cannot raise them again), and in the
isolated network mode listens on 127.0.0.1:PORT inside the sandbox's own network namespace for each port the
agent may reach (grading, driver proxy, the allowlist proxy), forwarding every connection to a unix socket that
a2rl serves from outside. Then it runs the agent and exits with its status.

    python init.py --nproc 4096 --nofile 65536 --forward 8000=/run/a2rl/net/8000.sock -- CMD ARGS...
"""
from __future__ import annotations

import argparse
import resource
import signal
import socket
import subprocess
import sys
import threading


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:  # half-close so the other direction can still finish its answer
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def serve(port: int, unix_path: str) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(128)

    def accept_loop() -> None:
        while True:
            client, _ = server.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(unix_path)
            except OSError:
                client.close()
                upstream.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int)
    parser.add_argument("--nofile", type=int)
    parser.add_argument("--forward", action="append", default=[], help="PORT=UNIX_SOCKET")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    for limit, value in ((resource.RLIMIT_NPROC, args.nproc), (resource.RLIMIT_NOFILE, args.nofile)):
        if value:
            soft, hard = resource.getrlimit(limit)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
    for spec in args.forward:  # before the agent starts, so its first request finds the port open
        port, _, path = spec.partition("=")
        serve(int(port), path)
    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    code = child.wait()
    return 128 - code if code < 0 else code  # killed by a signal: the shell's convention


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
