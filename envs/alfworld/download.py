"""ALFWorld's upstream data (``json_2.1.1``: the paper's games), fetched as the alfworld package's own downloader
(its ``alfworld-download`` script) fetches it: the same release archives, its resumable ``download`` (a cut transfer
resumes with a Range request from its temp file) and its ``unzip``, into the layout envs.alfworld.real_data reads.

    fetch(data_dir, base_url, sha256s)   -> {archive: {"sha256", "size", "url"}}; each archive once (a marker per
                                            archive under data_dir/.a2rl-prepare/), so a second call fetches nothing

Only the archives a text game needs (traj_data.json, initial_state.pddl, game.tw-pddl) and the logic files; not the
downloader's vision detector (MRCNN) nor its --extra checkpoints.
"""
from __future__ import annotations

import hashlib
import json
import os
import runpy
import shutil
import sysconfig
from pathlib import Path

ARCHIVE_URLS = ("JSON_FILES_URL", "PDDL_FILES_URL", "TW_PDDL_FILES_URL")  # the downloader's names for them
RELEASES = "/releases/download/"
MARKERS = ".a2rl-prepare"


class DownloadRefused(RuntimeError):
    """A fetched file is not the one pinned (its sha256 differs)."""


def downloader() -> dict:
    """The alfworld package's downloader script, loaded as a module (its functions and URLs; main() not run)."""
    script = shutil.which("alfworld-download", path=sysconfig.get_path("scripts") + os.pathsep +
                          os.environ.get("PATH", ""))
    if script is None:
        raise FileNotFoundError("the alfworld package's `alfworld-download` script is not installed next to this "
                                "python: install alfworld (scripts/setup does)")
    return runpy.run_path(script)


def archives(base_url: str) -> dict[str, str]:
    """{archive file name: URL}: the downloader's URLs with their release host replaced by base_url."""
    script = downloader()
    urls = {}
    for name in ARCHIVE_URLS:
        url = script[name]
        urls[url.rsplit("/", 1)[1]] = base_url.rstrip("/") + "/" + url.split(RELEASES, 1)[1]
    return urls


def complete(data_dir: str | Path) -> bool | None:
    """Whether every archive arrived in a folder `fetch` fills (None: a folder it never touched, e.g. the user's own
    copy of the data; a fetch cut between two archives leaves some games without their game.tw-pddl)."""
    data_dir = Path(data_dir).expanduser()
    if not (data_dir / MARKERS).is_dir():
        return None
    return all(marker(data_dir, url.rsplit("/", 1)[1]).is_file()
               for url in (downloader()[name] for name in ARCHIVE_URLS))


def marker(data_dir: Path, archive: str) -> Path:
    return Path(data_dir) / MARKERS / f"{archive}.json"


def fetched(data_dir: Path) -> dict[str, dict]:
    """What earlier fetches recorded, by archive."""
    folder = Path(data_dir) / MARKERS
    return {p.name[:-5]: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[attr-defined]  # (3.11+)


def fetch(data_dir: str | Path, base_url: str, sha256s: dict[str, str] | None = None) -> dict[str, dict]:
    data_dir = Path(data_dir).expanduser()
    (data_dir / MARKERS).mkdir(parents=True, exist_ok=True)  # from now on, complete() asks for every archive
    script = downloader()
    for archive, url in archives(base_url).items():
        if marker(data_dir, archive).is_file():
            continue
        path = Path(script["download"](url, dst=str(data_dir)))
        digest = sha256_of(path)
        pinned = (sha256s or {}).get(archive)
        if pinned and digest != pinned:
            path.unlink()
            raise DownloadRefused(f"{archive} from {url} has sha256 {digest}, not the pinned {pinned}: refused and "
                                  "deleted (a changed release or a tampered download); check the URL "
                                  "(downloads.alfworld) or the pin (downloads.sha256)")
        size = path.stat().st_size
        script["unzip"](str(path), str(data_dir))
        path.unlink()  # as the downloader does: the extracted files are what is read
        marker(data_dir, archive).write_text(json.dumps({"sha256": digest, "size": size, "url": url}))
    logic = data_dir / "logic"  # the downloader's copy of the packaged PDDL domain and grammar, as it leaves them
    logic.mkdir(parents=True, exist_ok=True)
    for name, source in (("alfred.pddl", script["ALFRED_PDDL_PATH"]), ("alfred.twl2", script["ALFRED_TWL2_PATH"])):
        if not (logic / name).is_file():
            shutil.copy(source, logic / name)
    return fetched(data_dir)
