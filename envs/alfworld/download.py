"""ALFWorld's upstream data (``json_2.1.1``: the paper's games), fetched as the alfworld package's own downloader
(its ``alfworld-download`` script) fetches it: the same release archives, its resumable ``download`` (a cut transfer
resumes with a Range request from its temp file), into the layout envs.alfworld.real_data reads.

    fetch(data_dir, base_url, sha256s, games)  -> {archive: {"sha256", "size", "url", "path"}}; each archive once (a
                                                  marker per archive under data_dir/.a2rl-prepare/), so a second call
                                                  fetches nothing

The game files (game.tw-pddl) come from the archive `games` names (the task's `games_archive`: a release path such
as ``0.4.2/json_2.1.3_tw-pddl.zip``; None: the installed downloader's own, ``0.4.0/json_2.1.2_tw-pddl.zip`` in
alfworld 0.4.2; docs/tasks/alfworld.md says which the paper's is and why). Each archive is checked before it is
unpacked (contracts/downloads.py: a whole zip holding json_2.1.1/) and unpacked member by member under temporary
names, so a cut extraction leaves no half file and a games archive replaces another's games. Only the archives a
text game needs (traj_data.json, initial_state.pddl, game.tw-pddl) and the logic files; not the downloader's vision
detector (MRCNN) nor its --extra checkpoints.
"""
from __future__ import annotations

import json
import os
import runpy
import shutil
import sysconfig
from pathlib import Path

from contracts.downloads import DownloadRefused, NotTheFile, check, extract, sha256_of

ARCHIVE_URLS = ("JSON_FILES_URL", "PDDL_FILES_URL", "TW_PDDL_FILES_URL")  # the downloader's names for them
GAMES_URL = "TW_PDDL_FILES_URL"  # the archive of game.tw-pddl files (the one releases differ in)
RELEASES = "/releases/download/"
MARKERS = ".a2rl-prepare"
TOPS = ("json_2.1.1",)  # the folder every archive unpacks into (the downloader's and the original's data paths)
__all__ = ["DownloadRefused", "archives", "complete", "fetch", "fetched", "games_of", "sha256_of"]


def downloader() -> dict:
    """The alfworld package's downloader script, loaded as a module (its functions and URLs; main() not run)."""
    script = shutil.which("alfworld-download", path=sysconfig.get_path("scripts") + os.pathsep +
                          os.environ.get("PATH", ""))
    if script is None:
        raise FileNotFoundError("the alfworld package's `alfworld-download` script is not installed next to this "
                                "python: install alfworld (scripts/setup does)")
    return runpy.run_path(script)


def release_paths(games: str | None = None) -> dict[str, str]:
    """{archive file name: its path under the releases' base URL} (e.g. "0.2.2/json_2.1.1_json.zip"): the
    downloader's, its games archive replaced by `games` when given."""
    script = downloader()
    paths = {name: script[name].split(RELEASES, 1)[1] for name in ARCHIVE_URLS}
    if games:
        paths[GAMES_URL] = games.strip("/")
    return {path.rsplit("/", 1)[1]: path for path in paths.values()}


def games_of(games: str | None = None) -> str:
    """The games archive's file name (json_2.1.2_tw-pddl.zip, json_2.1.3_tw-pddl.zip)."""
    return (games.strip("/") if games else downloader()[GAMES_URL].split(RELEASES, 1)[1]).rsplit("/", 1)[1]


def archives(base_url: str, games: str | None = None) -> dict[str, str]:
    """{archive file name: URL}: the downloader's URLs with their release host replaced by base_url."""
    return {name: base_url.rstrip("/") + "/" + path for name, path in release_paths(games).items()}


def complete(data_dir: str | Path, games: str | None = None) -> bool | None:
    """Whether every archive arrived in a folder `fetch` fills, the games from `games` (None: a folder it never
    touched, e.g. the user's own copy of the data; a fetch cut between two archives leaves some games without their
    game.tw-pddl; a folder holding another release's games is not complete either)."""
    data_dir = Path(data_dir).expanduser()
    if not (data_dir / MARKERS).is_dir():
        return None
    return all(marker(data_dir, archive).is_file() for archive in release_paths(games))


def marker(data_dir: Path, archive: str) -> Path:
    return Path(data_dir) / MARKERS / f"{archive}.json"


def fetched(data_dir: str | Path) -> dict[str, dict]:
    """What earlier fetches recorded, by archive (unpacked, so no path: the lock holds their digests)."""
    folder = Path(data_dir).expanduser() / MARKERS
    out = {}
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out[p.name[:-5]] = {"path": None, **json.loads(p.read_text()), "unpacked_into": str(folder.parent),
                                "record": str(p)}
        except (OSError, ValueError):
            continue
    return out


def fetch(data_dir: str | Path, base_url: str, sha256s: dict[str, str] | None = None,
          games: str | None = None) -> dict[str, dict]:
    data_dir = Path(data_dir).expanduser()
    (data_dir / MARKERS).mkdir(parents=True, exist_ok=True)  # from now on, complete() asks for every archive
    incoming = data_dir / MARKERS / "incoming"  # where an archive waits for its check (never data_dir itself)
    script = downloader()
    games_name = games_of(games)
    for archive, url in archives(base_url, games).items():
        if marker(data_dir, archive).is_file():
            continue
        path = Path(script["download"](url, dst=str(incoming)))  # the downloader's resumable transfer
        try:
            check(path, archive, TOPS)
        except NotTheFile as e:
            path.unlink()
            raise DownloadRefused(f"{archive} from {url} is not the release archive: {e}; nothing was kept: run the "
                                  "same command again (check downloads.alfworld and task.games_archive)") from None
        digest = sha256_of(path)
        pinned = (sha256s or {}).get(archive)
        if pinned and digest != pinned:
            path.unlink()
            raise DownloadRefused(f"{archive} from {url} has sha256 {digest}, not the pinned {pinned}: refused and "
                                  "deleted (a changed release or a tampered download); check the URL "
                                  "(downloads.alfworld) or the pin (downloads.sha256, downloads.lock, or the lock in "
                                  "the cache)")
        size = path.stat().st_size
        extract(path, data_dir, TOPS)
        path.unlink()  # as the downloader does: the extracted files are what is read
        if archive == games_name:  # another release's games were just replaced: its marker goes
            for other in (data_dir / MARKERS).glob("*_tw-pddl.zip.json"):
                if other.name != f"{archive}.json":
                    other.unlink()
        marker(data_dir, archive).write_text(json.dumps({"sha256": digest, "size": size, "url": url}))
    logic = data_dir / "logic"  # the downloader's copy of the packaged PDDL domain and grammar, as it leaves them
    logic.mkdir(parents=True, exist_ok=True)
    for name, source in (("alfred.pddl", script["ALFRED_PDDL_PATH"]), ("alfred.twl2", script["ALFRED_TWL2_PATH"])):
        if not (logic / name).is_file():
            shutil.copy(source, logic / name)
    return fetched(data_dir)
