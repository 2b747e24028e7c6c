"""`python -m orchestrator view output_dir=DIR`: the viewer served on loopback, read-only, following the ledger.

Python's own threaded HTTP server is enough: one reader, GET only, pages rendered from the records on request (cached
until the ledger changes). It binds 127.0.0.1 by default: the pages show a sweep's traces and code, which are not
for the network; `viewer.host` widens it on purpose.
"""
from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from orchestrator.viewer import data
from orchestrator.viewer.site import Site

log = logging.getLogger(__name__)


def make_server(output_dir: str | Path, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A server (not yet serving: call serve_forever) of the sweep in output_dir; port 0 picks a free one."""
    site = Site(output_dir, live=True)
    site.refresh_sweep()  # the sweep's tables take seconds at 270 cells: start on them before the first visit

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            url = urlsplit(self.path)
            path = unquote(url.path)
            if path == "/version":  # what live pages poll: newer data than theirs reloads them
                self._send(200, json.dumps(versions(site, parse_qs(url.query).get("cell", [None])[0])).encode(),
                           "application/json")
                return
            try:
                page = site.get(path)
            except Exception:  # a page that fails says so and the server goes on
                log.exception("viewer page %s failed", path)
                self._send(500, b"the viewer could not render this page; see the server's log", "text/plain")
                return
            if page is None:
                self._send(404, f"no such page: {path}".encode(), "text/plain")
            else:
                self._send(200, page.body, page.content_type, cache=path.startswith("/assets/"))

        def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            # pages follow the ledger: always asked again; the assets are kept, so the browser keeps plotly.js
            # compiled (its code cache) instead of parsing its 1.5 MB at every page
            self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # quiet: a page load is dozens of requests
            log.debug(format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def versions(site: Site, cell_id: str | None) -> dict:
    """The versions of the data the server has ready: the sweep's (computed again when the ledger moved on) and,
    asked for, one cell's."""
    if site.sweep_version() != site.version():
        site.refresh_sweep()
    out = {"sweep": site.sweep_version()}
    if cell_id:
        out["cell"] = data.cell_version(site.output_dir, cell_id)
    return out


def view_main(argv: list[str] | None = None) -> None:
    """`python -m orchestrator view output_dir=DIR [host=127.0.0.1] [port=8765]`: serve until interrupted."""
    import sys

    from contracts.specs import ConfigError
    from orchestrator.analysis.tables import ledger_path

    options = {"output_dir": None, "host": "127.0.0.1", "port": "8765"}
    try:
        for arg in sys.argv[1:] if argv is None else argv:
            key, sep, value = arg.partition("=")
            if not sep or key not in options:
                raise ConfigError(f"view takes {', '.join(k + '=...' for k in options)}; got {arg!r}")
            options[key] = value
        if not options["output_dir"]:
            raise ConfigError("view needs output_dir=DIR: the folder a sweep wrote (it holds ledger.sqlite)")
        if not options["port"].isdigit():
            raise ConfigError(f"port={options['port']!r} must be a whole number (0: any free port)")
        ledger_path(options["output_dir"])  # no ledger: one line that says what output_dir must be
        server = make_server(options["output_dir"], options["host"], int(options["port"]))
    except (ConfigError, OSError) as e:
        print(f"a2rl: {e}", file=sys.stderr)
        sys.exit(2)
    host, port = server.server_address[:2]
    print(f"[a2rl] viewing {options['output_dir']} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
