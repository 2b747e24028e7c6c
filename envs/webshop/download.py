"""WebShop's data files (the paper's 1,000-product set), fetched as the original's webshop/data.py fetches them:
the three Google Drive files its `gdown` calls name, into the folder envs.webshop.real_data reads (data_path).

    fetch(data_dir, url_template, sha256s) -> {file: {"sha256", "size", "url", "path"}}   each file once, resumable

Each file is read from Drive as gdown reads it and checked before it is kept (contracts/downloads.py: a quota or
permission page is refused naming Drive and the file id; a body that does not parse as JSON is not kept). A transfer
cut short leaves `<file>.part`; the next call asks for the rest (a Range request) and appends it. The digests of what
arrived are kept in data_dir/.a2rl-prepare.json (the table's checksums, the lock's entries); a pinned digest that
differs is refused and the download deleted.
"""
from __future__ import annotations

from pathlib import Path

from contracts.downloads import RECORD, DownloadRefused, fetch_file, record, records

# rdagent 1.0.0's benchmarks/webshop/data.py: (Google Drive file id, file name), WebShop's "small" set
FILES = {"items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
         "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
         "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O"}
__all__ = ["FILES", "RECORD", "DownloadRefused", "fetch", "fetched", "missing"]


def missing(data_dir: str | Path) -> list[str]:
    return [name for name in FILES if not (Path(data_dir).expanduser() / name).is_file()]


def fetched(data_dir: str | Path) -> dict[str, dict]:
    return records(data_dir)


def fetch(data_dir: str | Path, url_template: str, sha256s: dict[str, str] | None = None) -> dict[str, dict]:
    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in missing(data_dir):
        url = url_template.format(id=FILES[name])
        digest = fetch_file(url, data_dir / name, (sha256s or {}).get(name), drive_id=FILES[name])
        record(data_dir, name, {"sha256": digest, "size": (data_dir / name).stat().st_size, "url": url,
                                "path": str(data_dir / name)})
    return fetched(data_dir)
