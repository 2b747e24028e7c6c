"""A file server on 127.0.0.1 that speaks enough of the Hugging Face hub's HTTP protocol for `huggingface_hub`
(snapshot_download, hf_hub_download, HfFileSystem) and `datasets.load_dataset` (point HF_ENDPOINT at `url`), and
serves plain files at any other path (the upstream download URLs of ALFWorld's and WebShop's archives).

    server = HubServer().start()
    server.add_repo("model", "org/tiny", {"config.json": b"...", ...})
    server.add_file("/alfworld/alfworld/releases/download/0.2.2/json_2.1.1_json.zip", data)
    server.cut("json_2.1.1_json.zip")   # the next GET of a path holding this sends half the body and hangs up
    server.add_drive_file("/download", file_id, "items.json", data)   # Google Drive's layout: /download?id=<id>&...
    server.drive_answers(file_id, "quota", "truncated", "confirm")   # its next answers for that id, then the file
    server.requests                       # [(method, path, Range header or None)], every request seen
    server.stop()

GET answers a `Range: bytes=N-` with 206 and the rest, as the hub and GitHub's release storage do. A Drive file is
answered as drive.usercontent.google.com answers (what gdown's download.py reads): the file with
`Content-Disposition: attachment; filename="..."`; or, queued by drive_answers, one of its other answers:
"quota" (200, an HTML page titled "Google Drive - Quota exceeded", no Content-Disposition: what it sends for a file
too many people fetched), "truncated" (200 with Content-Disposition and a Content-Length that matches, but only the
first half of the file), "confirm" (200, its "can't scan this file for viruses" page whose download form carries
id, export, confirm and a uuid: the file is sent to a request carrying that uuid).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

KINDS = {"model": "models", "dataset": "datasets"}
DRIVE_PAGE = """<!DOCTYPE html><html><head><title>Google Drive - {title}</title><meta http-equiv="content-type"
content="text/html; charset=utf-8"/><link href="/static/doclist/client/css/4033072956-untrustedcontent.css"
rel="stylesheet" nonce="x"></head><body><div class="uc-main"><div id="uc-text">{body}</div></div>
<div class="uc-footer"><hr class="uc-footer-divider"></div></body></html>"""
QUOTA = DRIVE_PAGE.format(title="Quota exceeded", body=(
    '<p class="uc-error-caption">Sorry, you can&#39;t view or download this file at this time.</p>'
    '<p class="uc-error-subcaption">Too many users have viewed or downloaded this file recently. Please try accessing '
    'the file again later. If the file you are trying to access is particularly large or is shared with many '
    'people, it may take up to 24 hours to be able to view or download the file. If you still can&#39;t access a '
    'file after 24 hours, contact your domain administrator.</p>'))
VIRUS_SCAN = DRIVE_PAGE.format(title="Virus scan warning", body=(
    '<p class="uc-warning-caption">Google Drive can&#39;t scan this file for viruses.</p><p class="uc-warning-'
    'subcaption"><span class="uc-name-size"><a href="/open?id={id}">{name}</a> ({size})</span> is too large for '
    'Google to scan for viruses. Would you still like to download this file?</p>'
    '<form id="download-form" action="{action}" method="get"><input type="submit" id="uc-download-link" '
    'class="goog-inline-block jfk-button jfk-button-action" value="Download anyway"/><input type="hidden" '
    'name="id" value="{id}"><input type="hidden" name="export" value="download"><input type="hidden" '
    'name="confirm" value="t"><input type="hidden" name="uuid" value="{uuid}"></form>'))


class HubServer:
    def __init__(self):
        self.repos: dict[tuple[str, str], dict] = {}   # (kind, repo id) -> {"sha", "files": {path: bytes}}
        self.files: dict[str, tuple[bytes, str]] = {}   # plain path -> (body, content type)
        self.requests: list[tuple[str, str, str | None]] = []
        self.drive: dict[tuple[str, str], tuple[str, bytes]] = {}  # (path, file id) -> (file name, body)
        self._drive_answers: dict[str, list[str]] = {}
        self._cuts: set[str] = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HubServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_repo(self, kind: str, repo_id: str, files: dict[str, bytes]) -> str:
        sha = hashlib.sha1(json.dumps(sorted((p, hashlib.sha256(b).hexdigest()) for p, b in files.items()))
                           .encode()).hexdigest()
        self.repos[(KINDS[kind], repo_id)] = {"sha": sha, "files": dict(files)}
        return sha

    def add_file(self, path: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self.files[path] = (body, content_type)

    def cut(self, suffix: str) -> None:
        self._cuts.add(suffix)

    def add_drive_file(self, path: str, file_id: str, name: str, body: bytes) -> None:
        self.drive[(path, file_id)] = (name, body)

    def drive_answers(self, file_id: str, *answers: str) -> None:
        self._drive_answers.setdefault(file_id, []).extend(answers)

    def _drive(self, path: str, file_id: str, query: dict) -> tuple[int, dict, bytes, str | None]:
        name, body = self.drive[(path, file_id)]
        queued = self._drive_answers.get(file_id) or []
        answer = queued[0] if queued else "file"
        uuid = f"u{abs(hash((path, file_id))) % 10 ** 8}"
        if answer == "confirm" and query.get("uuid") == uuid:
            queued.pop(0)
            answer = "file"
        elif answer != "confirm" and queued:
            queued.pop(0)
        html = {"Content-Type": "text/html; charset=utf-8"}
        if answer == "quota":
            return 200, html, QUOTA.encode(), None
        if answer == "confirm":
            page = VIRUS_SCAN.format(id=file_id, name=name, size=f"{len(body) // 1000}K", uuid=uuid,
                                     action=self.url + path)
            return 200, html, page.encode(), None
        if answer == "truncated":
            body = body[:len(body) // 2]
        headers = {"Content-Type": "application/json", "Content-Disposition": f'attachment; filename="{name}"'}
        return 200, headers, body, f"{path}?id={file_id}"

    # -- the protocol ----------------------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: str, body: bytes) -> tuple[int, dict, bytes, str | None]:
        """(status, headers, body, a file's name for cutting) for one request."""
        file_id = (parse_qs(query).get("id") or [""])[0]
        if (path, file_id) in self.drive:
            with self._lock:
                return self._drive(path, file_id, {k: v[0] for k, v in parse_qs(query).items()})
        for plain in (f"{path}?{query}", path):  # a download URL may name its file in the query (Google Drive's)
            if plain in self.files:
                body, content_type = self.files[plain]
                return 200, {"Content-Type": content_type}, body, plain
        if m := re.fullmatch(r"/api/(models|datasets)/(.+?)(?:/(revision|tree|paths-info)/([^/]+)(/.*)?)?", path):
            kinds, repo_id, what, _revision, rest = m.groups()
            repo = self.repos.get((kinds, repo_id))
            if repo is None:
                return 404, {"X-Error-Code": "RepoNotFound"}, b'{"error": "Repository not found"}', None
            if what in (None, "revision"):
                return 200, {}, json.dumps(self._info(repo_id, repo)).encode(), None
            if what == "paths-info":
                asked = [unquote(p) for p in re.findall(r"paths=([^&]+)", body.decode())] or \
                    json.loads(body or b"{}").get("paths", [])
                return 200, {}, json.dumps([e for e in self._entries(repo, "", True) if e["path"] in asked]).encode(), \
                    None
            return 200, {}, json.dumps(self._entries(repo, (rest or "/").strip("/"), "recursive=true" in
                                                     query.lower())).encode(), None
        if m := re.fullmatch(r"(?:/(datasets))?/(.+?)/resolve/([^/]+)/(.+)", path):
            kinds, repo_id, _revision, name = m.groups()
            repo = self.repos.get((kinds or "models", repo_id))
            if repo is None or unquote(name) not in repo["files"]:
                return 404, {"X-Error-Code": "EntryNotFound"}, b"not found", None
            data = repo["files"][unquote(name)]
            return 200, {"X-Repo-Commit": repo["sha"], "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}, data, name
        return 404, {}, b"not found", None

    @staticmethod
    def _info(repo_id: str, repo: dict) -> dict:
        return {"id": repo_id, "sha": repo["sha"], "private": False, "disabled": False, "gated": False,
                "siblings": [{"rfilename": p, "size": len(b)} for p, b in sorted(repo["files"].items())],
                "tags": [], "cardData": {}, "lastModified": "2024-01-01T00:00:00.000Z"}

    @staticmethod
    def _entries(repo: dict, folder: str, recursive: bool) -> list[dict]:
        out, dirs = [], set()
        for path, data in sorted(repo["files"].items()):
            if folder and not path.startswith(folder + "/"):
                continue
            rest = path[len(folder) + 1:] if folder else path
            if "/" in rest and not recursive:
                dirs.add(f"{folder}/{rest.split('/')[0]}" if folder else rest.split("/")[0])
                continue
            parts = path.split("/")
            for i in range(len(folder.split("/")) if folder else 0, len(parts) - 1):
                dirs.add("/".join(parts[:i + 1]))
            out.append({"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": path})
        return [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)] + out

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self, method: str) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append((method, parts.path + (f"?{parts.query}" if parts.query else ""),
                                            self.headers.get("Range")))
                status, headers, data, name = server._route(method, unquote(parts.path), parts.query, body)
                start = 0
                if status == 200 and (m := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")):
                    start = int(m.group(1))
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                payload = data[start:]
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if method == "HEAD":
                    return
                cut = name is not None and any(s in name for s in server._cuts)
                if cut and len(payload) > 1:
                    server._cuts -= {s for s in server._cuts if s in name}
                    self.wfile.write(payload[:len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # hang up mid-file
                    return
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_HEAD(self) -> None:
                self._answer("HEAD")

            def do_POST(self) -> None:
                self._answer("POST")

        return Handler
