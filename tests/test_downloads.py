"""contracts/downloads.py: what a fetched file is checked to be before it is kept (no network: files written here
in the upstreams' shapes, and Drive's pages as tests/support/hub_server.py serves them)."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from contracts.downloads import NotTheFile, check, drive_form_url, extract
from tests.support.hub_server import QUOTA, VIRUS_SCAN
from tests.support.upstream_layouts import wheel


def zipped(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out.getvalue()


def written(tmp_path: Path, name: str, data: bytes) -> Path:
    (path := tmp_path / name).write_bytes(data)
    return path


def test_a_json_file_must_parse_and_a_page_is_named_by_its_title(tmp_path):
    body = json.dumps([{"asin": f"B{i}", "name": "mug"} for i in range(500)]).encode()
    check(written(tmp_path, "items.json", body), "items.json")
    with pytest.raises(NotTheFile, match=r"^[0-9,]+ bytes that are not JSON \(at byte [0-9,]+: .*\): a cut"):
        check(written(tmp_path, "cut.json", body[:len(body) // 2]), "items.json")
    with pytest.raises(NotTheFile, match=r'an HTML page \([0-9,]+ bytes\) titled "Google Drive - Quota exceeded": '
                                         r'"Too many users have viewed or downloaded this file recently'):
        check(written(tmp_path, "page.json", QUOTA.encode()), "items.json")


def test_an_archive_must_be_whole_and_hold_its_top_folder(tmp_path):
    archive = zipped({"json_2.1.1/train/a/traj_data.json": b"{}"})
    check(written(tmp_path, "a.zip", archive), "json_2.1.1_json.zip", ("json_2.1.1",))
    with pytest.raises(NotTheFile, match="not a whole zip archive"):
        check(written(tmp_path, "cut.zip", archive[:len(archive) // 2]), "json_2.1.1_json.zip", ("json_2.1.1",))
    with pytest.raises(NotTheFile, match=r"without the folder json_2.1.1 \(its top folders: data\)"):
        check(written(tmp_path, "other.zip", zipped({"data/x.json": b"{}"})), "json_2.1.1_json.zip", ("json_2.1.1",))


def test_a_wheel_must_match_its_record(tmp_path):
    files = {"pkg/__init__.py": b"x = 1\n", "pkg-1.0.dist-info/METADATA": b"Name: pkg\n"}
    good = wheel(files, "pkg-1.0.dist-info")
    check(written(tmp_path, "pkg-1.0-py3-none-any.whl", good), "pkg-1.0-py3-none-any.whl")

    def rewritten(change) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                dst.writestr(info.filename, change(info.filename, src.read(info)))
            if change("extra", None) is not None:
                dst.writestr("pkg/extra.py", b"")
        return out.getvalue()

    altered = rewritten(lambda name, data: b"x = 2\n" if name == "pkg/__init__.py" else data)
    with pytest.raises(NotTheFile, match=r"a wheel whose pkg/__init__.py does not match its RECORD"):
        check(written(tmp_path, "a.whl", altered), "pkg-1.0-py3-none-any.whl")
    extra = rewritten(lambda name, data: b"" if name == "extra" else data)
    with pytest.raises(NotTheFile, match=r"holding 1 files its RECORD does not list \(pkg/extra.py"):
        check(written(tmp_path, "b.whl", extra), "pkg-1.0-py3-none-any.whl")
    with pytest.raises(NotTheFile, match="without one .dist-info/RECORD: not a wheel"):
        check(written(tmp_path, "c.whl", zipped(files)), "pkg-1.0-py3-none-any.whl")


def test_drives_download_form_is_followed_with_its_fields_and_an_error_page_is_not():
    page = VIRUS_SCAN.format(id="FILEID", name="items.json", size="9K", uuid="u123",
                             action="https://drive.usercontent.google.com/download")
    url = drive_form_url(page, "https://drive.usercontent.google.com/download?id=FILEID&export=download")
    assert url == "https://drive.usercontent.google.com/download?id=FILEID&export=download&confirm=t&uuid=u123"
    assert drive_form_url(QUOTA, "https://drive.usercontent.google.com/download?id=FILEID") is None


def test_extract_writes_only_the_expected_folders_and_replaces_what_is_there(tmp_path):
    (tmp_path / "out" / "json_2.1.1").mkdir(parents=True)
    (tmp_path / "out" / "json_2.1.1" / "game.tw-pddl").write_text("old")
    archive = written(tmp_path, "a.zip", zipped({"json_2.1.1/game.tw-pddl": b"new", "elsewhere/x": b"x",
                                                "json_2.1.1/../../escape": b"x"}))
    assert extract(archive, tmp_path / "out", ("json_2.1.1",)) == 1
    assert (tmp_path / "out" / "json_2.1.1" / "game.tw-pddl").read_text() == "new"
    assert not (tmp_path / "out" / "elsewhere").exists() and not (tmp_path / "escape").exists()
    assert not list((tmp_path / "out").rglob("*.a2rl-tmp"))
