"""WebShop's data files (the paper's 1,000-product set), fetched as the original's webshop/data.py fetches them:
the three Google Drive files its `gdown` calls name, into the folder envs.webshop.real_data reads (data_path).

    fetch(data_dir, url_template, sha256s) -> {file: {"sha256", "size", "url"}}   each file once, resumable

A transfer cut short leaves `<file>.part`; the next call asks for the rest (a Range request) and appends it. The
digests of what arrived are kept in data_dir/.a2rl-prepare.json (the table's checksums); a pinned digest that
differs is refused and the download deleted.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

# rdagent 1.0.0's benchmarks/webshop/data.py: (Google Drive file id, file name), WebShop's "small" set
FILES = {"items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
         "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
         "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O"}
RECORD = ".a2rl-prepare.json"
CHUNK = 1 << 16  # small enough that a cut transfer keeps most of what arrived


class DownloadRefused(RuntimeError):
    """A fetched file is not the one pinned (its sha256 differs)."""


def missing(data_dir: str | Path) -> list[str]:
    return [name for name in FILES if not (Path(data_dir).expanduser() / name).is_file()]


def fetched(data_dir: str | Path) -> dict[str, dict]:
    record = Path(data_dir).expanduser() / RECORD
    return json.loads(record.read_text()) if record.is_file() else {}


def download(url: str, dest: Path, sha256: str | None = None) -> str:
    """dest from url, resumed from dest.part when an earlier transfer was cut; its sha256 (checked if pinned)."""
    import requests
    from tqdm.auto import tqdm

    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with requests.get(url, headers=headers, stream=True, timeout=60) as r:
        if r.status_code == 416:  # the part is the whole file already
            pass
        else:
            r.raise_for_status()
            if have and r.status_code != 206:  # the server ignored the Range: start again
                have = 0
            total = int(r.headers.get("Content-Length") or 0) + have
            with open(part, "ab" if have else "wb") as f, \
                    tqdm(total=total or None, initial=have, unit="B", unit_scale=True, desc=dest.name) as bar:
                for chunk in r.iter_content(CHUNK):
                    f.write(chunk)
                    bar.update(len(chunk))
    with open(part, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[attr-defined]  # (3.11+)
    if sha256 and digest != sha256:
        part.unlink()
        raise DownloadRefused(f"{dest.name} from {url} has sha256 {digest}, not the pinned {sha256}: refused and "
                              "deleted; check the URL (downloads.webshop) or the pin (downloads.sha256)")
    os.replace(part, dest)
    return digest


def fetch(data_dir: str | Path, url_template: str, sha256s: dict[str, str] | None = None) -> dict[str, dict]:
    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    record = fetched(data_dir)
    for name in missing(data_dir):
        url = url_template.format(id=FILES[name])
        digest = download(url, data_dir / name, (sha256s or {}).get(name))
        record[name] = {"sha256": digest, "size": (data_dir / name).stat().st_size, "url": url}
        (data_dir / RECORD).write_text(json.dumps(record, indent=1))
    return record
