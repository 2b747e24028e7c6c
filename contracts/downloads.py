"""Downloads checked to be the artefact they name before they are kept (what `prepare` fetches from upstreams that
are not the Hugging Face hub: WebShop's Google Drive files, ALFWorld's release archives, spaCy's model wheel).

    fetch_file(url, dest, sha256=None, drive_id=None, tops=()) -> sha256   resumable (dest.part), checked, renamed
    check(path, name, tops=())        raises NotTheFile(what it is) unless the file is what `name` says it is
    extract(archive, dest, tops)      a zip's members under `tops`, each written to a temporary name and renamed
    records(folder) / record(...)     what was fetched into a folder, by file: the lock's entries (orchestrator/lock.py)

What "is the artefact" means, by the name's suffix: `.json` parses; `.zip` opens (a cut archive has no central
directory) and holds the expected top folders; `.whl` opens and every file matches its RECORD (sha256 and size).
Google Drive is read as gdown reads it (its download.py): a response with Content-Disposition is the file; an HTML
page carrying Drive's download form (its "can't scan this file for viruses" page for large files) is followed with the
form's fields; any other page (quota exceeded, no permission, not found) is not the file, and is refused naming Drive,
the file id and the page's title. Nothing that fails a check is kept: it is written to `<dest>.part`, checked, and
only then renamed to `dest`; a cut transfer keeps its `.part`, which the next call resumes with a Range request.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

RECORD = ".a2rl-prepare.json"  # in a folder prepare fetched into: {file name: {"sha256", "size", "url", "path"}}
CHUNK = 1 << 16  # small enough that a cut transfer keeps most of what arrived
DRIVE = "Google Drive"


class DownloadRefused(RuntimeError):
    """A fetched file is not the artefact it names, or not the pinned one: nothing of it is kept."""


class NotTheFile(ValueError):
    """What came back is not the artefact its name says (the message says what it is)."""


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[attr-defined]  # (3.11+)


# -- what came back ------------------------------------------------------------------------------------------------

class _Page(HTMLParser):
    """An HTML page's title, Drive's error text, its download form (action and hidden fields) and its links."""

    def __init__(self):
        super().__init__()
        self.title, self.error, self.form, self.fields, self.links = "", "", None, {}, []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "title":
            self._in = "title"
        elif tag == "p" and "uc-error-subcaption" in a.get("class", ""):
            self._in = "error"
        elif tag == "form" and a.get("id") == "download-form":
            self.form = a.get("action", "")
        elif tag == "input" and self.form is not None and a.get("type") == "hidden" and a.get("name"):
            self.fields[a["name"]] = a.get("value", "")
        elif tag == "a" and a.get("href", "").startswith("/uc?export=download"):
            self.links.append(a["href"])

    def handle_endtag(self, tag):
        if tag in ("title", "p"):
            self._in = None

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._in == "error":
            self.error += data


def read_page(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.title, page.error = " ".join(page.title.split()), " ".join(page.error.split())
    return page


def looks_like_html(head: bytes) -> bool:
    start = head.lstrip()[:100].lower()
    return start.startswith((b"<!doctype html", b"<html")) or b"<head" in start


def describe_page(text: str, status: int | None = None, size: int | None = None) -> str:
    """`an HTML page (HTTP 200, 2,114 bytes) titled "Google Drive - Quota exceeded": "Too many users ..."`."""
    page = read_page(text)
    said = f": \"{page.error[:240]}\"" if page.error else ""
    http = f"HTTP {status}, " if status is not None else ""
    size = len(text.encode()) if size is None else size
    return f"an HTML page ({http}{size:,} bytes) titled \"{page.title or '(none)'}\"{said}"


def check(path: Path, name: str, tops: tuple[str, ...] = ()) -> None:
    """Raise NotTheFile unless `path` is the artefact `name` says it is (by its suffix: .json, .zip, .whl)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(4096)
    if looks_like_html(head) and not name.endswith((".html", ".htm")):
        with open(path, "rb") as f:
            page = f.read(1_000_000).decode("utf-8", "replace")
        raise NotTheFile(describe_page(page, size=size))
    if name.endswith(".json"):
        try:
            with open(path, "rb") as f:
                json.load(f)
        except ValueError as e:
            where = f" (at byte {e.pos:,}: {e.msg})" if isinstance(e, json.JSONDecodeError) else f" ({e})"
            raise NotTheFile(f"{size:,} bytes that are not JSON{where}: a cut or altered file") from None
    elif name.endswith((".zip", ".whl")):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
                present = {n.split("/", 1)[0] for n in names if "/" in n}
                if absent := [t for t in tops if t not in present]:
                    raise NotTheFile(f"a zip archive without the folder{'s' * (len(absent) > 1)} {', '.join(absent)} "
                                     f"(its top folders: {', '.join(sorted(present)) or 'none'})")
                if name.endswith(".whl"):
                    check_wheel(z)
        except zipfile.BadZipFile as e:
            raise NotTheFile(f"{size:,} bytes that are not a whole zip archive ({e}): a cut or altered file") from None


def check_wheel(z: zipfile.ZipFile) -> None:
    """Every file of the wheel is listed in its RECORD with its sha256 and size, and matches them (PEP 376/427)."""
    records = [n for n in z.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
    if len(records) != 1:
        raise NotTheFile("a zip archive without one .dist-info/RECORD: not a wheel")
    listed = set()
    for row in csv.reader(io.TextIOWrapper(z.open(records[0]), "utf-8")):
        if not row:
            continue
        member, digest, size = (row + ["", ""])[:3]
        listed.add(member)
        if not digest:  # (the RECORD lists itself without one)
            continue
        algorithm, _, expected = digest.partition("=")
        try:
            info = z.getinfo(member)
        except KeyError:
            raise NotTheFile(f"a wheel whose RECORD lists {member}, which it does not hold") from None
        h = hashlib.new(algorithm)
        with z.open(info) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        got = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
        if got != expected or (size and int(size) != info.file_size):
            raise NotTheFile(f"a wheel whose {member} does not match its RECORD ({algorithm} {got}, RECORD {expected})")
    if unlisted := sorted(n for n in z.namelist() if not n.endswith("/") and n not in listed):
        raise NotTheFile(f"a wheel holding {len(unlisted)} files its RECORD does not list ({unlisted[0]}, ...)")


# -- fetching ------------------------------------------------------------------------------------------------------

def drive_form_url(text: str, url: str) -> str | None:
    """Where Drive's download form (or its older confirm link) points, with the form's fields: None when the page
    has neither (it is an error page)."""
    page = read_page(text)
    if page.form is not None:
        parts = urlsplit(urljoin(url, page.form))
        query = dict(parse_qsl(parts.query))
        query.update(page.fields)
        return urlunsplit(parts._replace(query=urlencode(query)))
    if page.links:
        return urljoin(url, page.links[0])
    return None


def _get(session, url: str, headers: dict, drive_id: str | None, dest: Path):
    """The response holding the file (streamed). For Drive: a response without Content-Disposition is a page, which
    is followed when it is the download form and refused otherwise."""
    for _ in range(3):  # Drive's form once; a form that leads to another form is refused below
        r = session.get(url, headers=headers, stream=True, timeout=60)
        if drive_id is None or r.status_code == 416 or (r.ok and "Content-Disposition" in r.headers):
            return r
        text = r.text[:1_000_000]
        r.close()
        follow = drive_form_url(text, url) if r.ok else None
        if follow is None:
            raise DownloadRefused(
                f"{dest.name}: {DRIVE} answered file id {drive_id} ({url}) with {describe_page(text, r.status_code)}, "
                f"not the file; nothing was kept. A quota page clears within 24 hours: run the same command again "
                f"then; otherwise check the id (downloads.webshop) and that the file is shared with anyone who has "
                f"the link")
        url = follow
    raise DownloadRefused(f"{dest.name}: {DRIVE} answered file id {drive_id} with its download form three times "
                          f"(last {url}), never the file; nothing was kept")


def fetch_file(url: str, dest: Path, sha256: str | None = None, drive_id: str | None = None,
               tops: tuple[str, ...] = (), upstream: str | None = None) -> str:
    """dest from url, resumed from dest.part when an earlier transfer was cut; checked (`check`) and against the pin
    before it is renamed to dest; its sha256. drive_id: the url is Google Drive's for that file id."""
    import requests
    from tqdm.auto import tqdm  # type: ignore[import-untyped]

    upstream = upstream or (DRIVE if drive_id else urlsplit(url).netloc)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with requests.Session() as session, _get(session, url, headers, drive_id, dest) as r:
        if r.status_code != 416:  # 416: the part is the whole file already
            if not r.ok:
                raise DownloadRefused(f"{dest.name}: {upstream} answered {url} with HTTP {r.status_code}: check the "
                                      "URL (downloads.*) and run the same command again")
            if have and r.status_code != 206:  # the server ignored the Range: start again
                have = 0
            length = r.headers.get("Content-Length")
            encoded = r.headers.get("Content-Encoding", "identity").lower() not in ("", "identity")
            total = int(length) + have if length and not encoded else None  # (gzip: it counts the encoded bytes)
            with open(part, "ab" if have else "wb") as f, \
                    tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=dest.name) as bar:
                for chunk in r.iter_content(CHUNK):
                    f.write(chunk)
                    bar.update(len(chunk))
            if total is not None and part.stat().st_size < total:  # (requests raises on most cuts; not on all)
                raise DownloadRefused(f"{dest.name}: {upstream} sent {part.stat().st_size:,} of its {total:,} bytes "
                                      f"({url}); what arrived is kept in {part.name}: run the same command again to "
                                      "fetch the rest")
    try:
        check(part, dest.name, tops)
    except NotTheFile as e:
        part.unlink()
        raise DownloadRefused(f"{dest.name} from {upstream} ({url}) is not the file: {e}; nothing was kept: run the "
                              "same command again (a cut or changed file is fetched anew)") from None
    digest = sha256_of(part)
    if sha256 and digest != sha256:
        part.unlink()
        raise DownloadRefused(f"{dest.name} from {url} has sha256 {digest}, not the pinned {sha256}: refused and "
                              "deleted (a changed upstream file, or a tampered download); check the URL (downloads.*) "
                              "or the pin (downloads.sha256, downloads.lock, or the lock in the cache)")
    os.replace(part, dest)
    return digest


def extract(archive: Path, dest: Path, tops: tuple[str, ...]) -> int:
    """The archive's files under `tops` into dest, each written to a temporary name and renamed over what is there
    (a cut extraction leaves no half file under a real name; a later archive's files replace an earlier one's).
    zipfile checks each member's CRC as it reads it. Returns the number of files."""
    n = 0
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            parts = Path(info.filename).parts
            if info.is_dir() or not parts or parts[0] not in tops or ".." in parts or Path(info.filename).is_absolute():
                continue
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.a2rl-tmp")
            try:
                with z.open(info) as src, open(tmp, "wb") as out:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        out.write(block)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            n += 1
    return n


# -- what was fetched ----------------------------------------------------------------------------------------------

def records(folder: str | Path | None) -> dict[str, dict]:
    """{file name: {"sha256", "size", "url", "path" (where it is kept; None: unpacked), "record"}} fetched into
    folder (record: the file that says so, whose removal makes prepare fetch it again)."""
    if not folder:
        return {}
    path = Path(folder).expanduser() / RECORD
    try:
        kept = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    if "sha256" in kept:  # an older single-file record: {"sha256", "url"}
        kept = {str(kept.get("url", "?")).rsplit("/", 1)[-1]: kept}
    return {name: {"record": str(path), **entry} for name, entry in kept.items()
            if isinstance(entry, dict) and "sha256" in entry}


def record(folder: Path, name: str, entry: dict) -> None:
    """Add one fetched file to folder's record (written whole, then renamed)."""
    kept = {n: {k: v for k, v in e.items() if k != "record"} for n, e in records(folder).items()}
    kept[name] = entry
    tmp = folder / f"{RECORD}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(kept, indent=1, sort_keys=True))
    os.replace(tmp, folder / RECORD)

